metadata name = 'Ray worker pool'
metadata description = 'One worker pool: a Flexible (the default) or Uniform scale set without public IPs (outbound through the NAT gateway) whose instances join the head\'s Ray cluster from their cloud-init. Autoscale (autoscale.bicep) or Ray\'s autoscaler owns the instance count after creation.'

@description('Required. Azure region of the scale set.')
param location string

@description('Required. Name of the scale set, e.g. "ray-workers".')
param name string

@description('Required. Host name prefix of the pool\'s VMs; it must differ from every other pool\'s.')
param computerNamePrefix string

@description('Required. Tags for every resource.')
param tags object

@description('Required. Resource ID of the cluster subnet.')
param subnetId string

@description('Required. VM size of each worker.')
param vmSize string

@description('Required. Instances created at deployment.')
param instanceCount int

@description('Required. Admin user (SSH key login only).')
param adminUsername string

@description('Required. The admin user\'s OpenSSH public key, one line.')
param adminSshPublicKey string

@description('Required. Marketplace image (publisher, offer, sku, version) or a gallery image version ({ id }).')
param imageReference object

@description('Required. Encrypt temp disks and caches at the host.')
param encryptionAtHost bool

@description('Required. Resource ID of the nodes\' user-assigned identity.')
param identityId string

@description('Required. Run the workers as Spot VMs.')
param spotEnabled bool

@description('Required. What Azure does to an evicted Spot VM: Delete or Deallocate.')
param evictionPolicy string

@description('Required. The most a Spot VM may cost, in US dollars per hour, or -1: the on-demand price; as text (ARM has no fractional parameter type).')
param maxPrice string

@description('Required. Availability zones of the pool\'s VMs, e.g. [\'1\', \'2\']; empty: regional (Azure places them in the region, in no zone it names).')
param zones array

@description('Required. With two zones or more: keep the VMs spread evenly over them.')
param zoneBalance bool

@description('Required. The scale set\'s orchestration mode: Flexible (main.bicep\'s default: its instances are ordinary VMs; the only mode with Spot Priority Mix and Instance Mix), or Uniform (the scale set of clusters made before Flexible became the default). Changing it replaces the scale set.')
param orchestrationMode string

@description('Required. Flexible Spot pools: Spot Priority Mix as Azure takes it ({ baseRegularPriorityCount, regularPriorityPercentageAboveBase }), or {}: none.')
param priorityMixPolicy object

@description('Required. Flexible pools: Instance Mix ({ vmSizes, allocationStrategy }: the sizes the pool\'s VMs may take, LowestPrice or CapacityOptimized), or {}: every VM is vmSize.')
param instanceMix object

@description('Required. Minutes between the Terminate scheduled event and the deletion of a regular worker.')
param terminationNoticeMinutes int

@description('Required. Let the scale set replace a worker whose health endpoint says Unhealthy or that never reports.')
param automaticRepairEnabled bool

@description('Required. Minutes after a worker is created before it may be repaired.')
param automaticRepairGracePeriodMinutes int

@description('Required. What repair does to an unhealthy worker: Replace or Reimage.')
param automaticRepairAction string

@description('Required. The Application Health extension\'s settings: the workers\' loopback health endpoint (port and path from python/driver/layout.py).')
param healthProbe object

@secure()
@description('Required. The filled worker cloud-init document, base64 (it may carry pipIndexUrl\'s credentials).')
param customData string

@description('Required. Principal (object) id of the head autoscaler identity (scalingMode ray), or empty.')
param autoscalerPrincipalId string

@description('Required. Resource ID of the autostop role definition, or empty (autostop off, or scalingMode ray, whose role here includes it).')
param autostopRoleDefinitionId string

@description('Required. Principal (object) id of the head\'s own identity, which autostop acts with, or empty.')
param autostopPrincipalId string

// Virtual Machine Contributor (built in).
var vmContributorRoleId = '9980e02c-c2be-4d73-94e8-173b1dc7cf3c'
var flexible = orchestrationMode == 'Flexible'
var mixVmSizes = empty(instanceMix) ? [] : instanceMix.vmSizes
var skuProfileVmSizes = [for size in mixVmSizes: {
  name: size
}]

resource workers 'Microsoft.Compute/virtualMachineScaleSets@2024-11-01' = {
  // checkov:skip=CKV_AZURE_97:Off by default because encryption at host needs the EncryptionAtHost feature registered on the subscription; set encryptionAtHostEnabled where it is.
  // checkov:skip=CKV_AZURE_95:Upgrades are manual: an automatic OS image upgrade would reimage a worker in the middle of a training run, and a new instance boots the current image anyway.
  name: name
  location: location
  tags: tags
  // Instance Mix: the size is 'Mix' and the sizes are skuProfile's.
  sku: {
    name: empty(instanceMix) ? vmSize : 'Mix'
    tier: empty(instanceMix) ? 'Standard' : null
    capacity: instanceCount
  }
  // The pool's availability zones (none: regional, as before zones).
  zones: empty(zones) ? null : zones
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identityId}': {}
    }
  }
  properties: {
    orchestrationMode: orchestrationMode
    // Flexible: one fault domain (Azure spreads the VMs over as many as it can), which Spot
    // Priority Mix and Instance Mix take.
    platformFaultDomainCount: flexible ? 1 : null
    // Spot Priority Mix refuses a single placement group.
    singlePlacementGroup: flexible ? false : null
    // Spot Priority Mix: the first baseRegularPriorityCount VMs regular, then
    // regularPriorityPercentageAboveBase % of the VMs above them (the rest Spot).
    priorityMixPolicy: flexible && !empty(priorityMixPolicy) ? priorityMixPolicy : null
    // Instance Mix: the pool's VMs take any of these sizes, chosen by the allocation strategy.
    skuProfile: flexible && !empty(instanceMix) ? {
      vmSizes: skuProfileVmSizes
      allocationStrategy: instanceMix.allocationStrategy
    } : null
    // Strictly even across the zones: only with two zones or more (Azure refuses it otherwise).
    zoneBalance: length(zones) > 1 ? zoneBalance : null
    // Overprovisioned extra VMs would run cloud-init and join Ray before Azure deletes them.
    // (Flexible scale sets do not overprovision.)
    overprovision: flexible ? null : false
    upgradePolicy: {
      mode: 'Manual'
    }
    // Scale-in removes the newest worker first: the last one added is the one least likely to
    // hold long-running actors.
    // Unhealthy workers (bootstrap failed for good) are replaced: README, why not self-deletion.
    automaticRepairsPolicy: {
      enabled: automaticRepairEnabled
      gracePeriod: 'PT${automaticRepairGracePeriodMinutes}M'
      repairAction: automaticRepairAction
    }
    // (Flexible: no scale-in policy; Ray's autoscaler deletes the instance it drained, CPU
    // autoscale lets Azure choose.)
    scaleInPolicy: flexible ? null : {
      rules: [
        'NewestVM'
      ]
      forceDeletion: false
    }
    virtualMachineProfile: {
      osProfile: {
        computerNamePrefix: computerNamePrefix
        adminUsername: adminUsername
        // Instances keep the custom data they booted with until they are reimaged or replaced.
        customData: customData
        // The workers need one extension, the Application Health extension below (the head keeps
        // extensions off, checkov CKV_AZURE_50).
        allowExtensionOperations: true
        linuxConfiguration: {
          disablePasswordAuthentication: true
          ssh: {
            publicKeys: [
              {
                path: '/home/${adminUsername}/.ssh/authorized_keys'
                keyData: adminSshPublicKey
              }
            ]
          }
        }
      }
      storageProfile: {
        imageReference: imageReference
        osDisk: {
          createOption: 'FromImage'
          caching: 'ReadWrite'
          managedDisk: {
            storageAccountType: 'StandardSSD_LRS'
          }
        }
      }
      networkProfile: {
        // Flexible scale sets create each VM's network interface with this Network API version.
        networkApiVersion: flexible ? '2020-11-01' : null
        networkInterfaceConfigurations: [
          {
            name: 'primary'
            properties: {
              primary: true
              ipConfigurations: [
                {
                  name: 'primary'
                  properties: {
                    primary: true
                    subnet: {
                      id: subnetId
                    }
                  }
                }
              ]
            }
          }
        ]
      }
      // Spot workers are deleted (or deallocated) on eviction, at most at maxPrice (-1: the
      // on-demand price); they get Preempt (about 30 s) instead of a terminate notification,
      // which Spot cannot have.
      priority: spotEnabled ? 'Spot' : 'Regular'
      evictionPolicy: spotEnabled ? evictionPolicy : null
      billingProfile: spotEnabled ? { maxPrice: json(maxPrice) } : null
      // Regular workers get a Terminate scheduled event this long before deletion, time to drain.
      scheduledEventsProfile: spotEnabled ? null : { terminateNotificationProfile: { enable: true, notBeforeTimeout: 'PT${terminationNoticeMinutes}M' } }
      securityProfile: {
        encryptionAtHost: encryptionAtHost
      }
      // Each worker's health, read from its own endpoint, for the repair policy and the portal.
      extensionProfile: {
        extensions: [
          {
            name: 'HealthExtension'
            properties: {
              publisher: 'Microsoft.ManagedServices'
              type: 'ApplicationHealthLinux'
              typeHandlerVersion: '2.0'
              autoUpgradeMinorVersion: true
              settings: healthProbe
            }
          }
        ]
      }
      diagnosticsProfile: {
        bootDiagnostics: {
          enabled: true
        }
      }
    }
  }
}

// scalingMode ray: the head autoscaler identity may change this scale set (capacity, deleting
// the instances it drained), and nothing else. Virtual Machine Contributor, built in.
resource autoscalerRole 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(autoscalerPrincipalId)) {
  scope: workers
  name: guid(workers.id, autoscalerPrincipalId, vmContributorRoleId)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', vmContributorRoleId)
    principalId: autoscalerPrincipalId
    principalType: 'ServicePrincipal'
  }
}

// Autostop: the head's own identity may set this scale set's capacity (identity.bicep: the role).
resource autostopRole 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(autostopRoleDefinitionId)) {
  scope: workers
  name: guid(workers.id, last(split(autostopRoleDefinitionId, '/')))
  properties: {
    roleDefinitionId: autostopRoleDefinitionId
    principalId: autostopPrincipalId
    principalType: 'ServicePrincipal'
  }
}

@description('Resource ID of the scale set.')
output id string = workers.id

