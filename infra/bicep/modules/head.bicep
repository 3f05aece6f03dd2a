metadata name = 'Ray head'
metadata description = 'A static public IP for SSH, a NIC with the static private IP the workers\' cloud-init names, and the VM that runs Ray\'s GCS, dashboard (127.0.0.1 only) and the jobs\' learners.'

@description('Required. Azure region of the resources.')
param location string

@description('Required. Prefix of every resource name.')
param namePrefix string

@description('Required. Tags for every resource.')
param tags object

@description('Required. Resource ID of the cluster subnet.')
param subnetId string

@description('Required. The head\'s private IP address.')
param privateIp string

@description('Required. Idle timeout of the public IP, in minutes.')
param tcpIdleTimeoutMinutes int

@description('Required. VM size of the head.')
param vmSize string

@description('Required. Regular or Spot (evicted by deallocation: the OS disk, NIC and public IP stay).')
param priority string

@description('Required. With Spot: the most the head may cost, in US dollars per hour, or -1: the regular price; as text (ARM has no fractional parameter type).')
param maxPrice string

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

@description('Required. Resource ID of the autoscaler identity (scalingMode ray), or empty.')
param autoscalerIdentityId string

@description('Required. Resource ID of the autostop role definition, or empty (autostop off).')
param autostopRoleDefinitionId string

@description('Required. Principal (object) id of the head\'s own identity, which autostop acts with, or empty.')
param autostopPrincipalId string

@secure()
@description('Required. The filled head cloud-init document, base64 (it may carry pipIndexUrl\'s credentials).')
param customData string

// The nodes identity; with scalingMode ray also the autoscaler identity.
var nodesIdentity = {
  '${identityId}': {}
}
var nodesAndAutoscalerIdentities = {
  '${identityId}': {}
  '${autoscalerIdentityId}': {}
}

resource publicIp 'Microsoft.Network/publicIPAddresses@2024-07-01' = {
  name: '${namePrefix}-head-pip'
  location: location
  tags: tags
  sku: {
    name: 'Standard'
  }
  properties: {
    publicIPAllocationMethod: 'Static'
    // Azure drops a silent inbound flow after 4 minutes by default: an SSH tunnel to the
    // dashboard or the Jobs API would die while a job runs quietly.
    idleTimeoutInMinutes: tcpIdleTimeoutMinutes
  }
}

resource nic 'Microsoft.Network/networkInterfaces@2024-07-01' = {
  name: '${namePrefix}-head-nic'
  location: location
  tags: tags
  properties: {
    ipConfigurations: [
      {
        name: 'primary'
        properties: {
          primary: true
          subnet: {
            id: subnetId
          }
          privateIPAllocationMethod: 'Static'
          privateIPAddress: privateIp
          publicIPAddress: {
            id: publicIp.id
          }
        }
      }
    ]
  }
}

resource vm 'Microsoft.Compute/virtualMachines@2024-11-01' = {
  // checkov:skip=CKV_AZURE_151:Named for Windows VMs, but it reads securityProfile.encryptionAtHost on every VM, Linux too: off by default because encryption at host needs the EncryptionAtHost feature registered on the subscription; set encryptionAtHostEnabled where it is.
  // checkov:skip=CKV_AZURE_97:Off by default because encryption at host needs the EncryptionAtHost feature registered on the subscription; set encryptionAtHostEnabled where it is.
  name: '${namePrefix}-head'
  location: location
  tags: tags
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: empty(autoscalerIdentityId) ? nodesIdentity : nodesAndAutoscalerIdentities
  }
  properties: {
    hardwareProfile: {
      vmSize: vmSize
    }
    osProfile: {
      computerName: '${namePrefix}-head'
      adminUsername: adminUsername
      // Changing it later is refused by Azure: the head is rebuilt from its cloud-init only by
      // deleting the VM.
      customData: customData
      allowExtensionOperations: false
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
        name: '${namePrefix}-head-osdisk'
        createOption: 'FromImage'
        caching: 'ReadWrite'
        managedDisk: {
          storageAccountType: 'StandardSSD_LRS'
        }
        // the Ray environment (~2 GB), results and checkpoints live here
        diskSizeGB: 64
      }
    }
    networkProfile: {
      networkInterfaces: [
        {
          id: nic.id
          properties: {
            primary: true
          }
        }
      ]
    }
    // priority Spot: evicted (Preempt, about 30 s) when Azure needs the capacity back or the Spot
    // price rises above maxPrice, and deallocated, not deleted: the OS disk (the Ray
    // environment, checkpoints), the NIC and the public IP stay; `python -m driver start` starts
    // it again.
    priority: priority
    evictionPolicy: priority == 'Spot' ? 'Deallocate' : null
    billingProfile: priority == 'Spot' ? { maxPrice: json(maxPrice) } : null
    securityProfile: {
      encryptionAtHost: encryptionAtHost
    }
    // Managed storage account: serial console and the boot log show cloud-init's progress.
    diagnosticsProfile: {
      bootDiagnostics: {
        enabled: true
      }
    }
  }
}

// Autostop: the head's own identity may deallocate this VM (identity.bicep: the role).
resource autostopRole 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(autostopRoleDefinitionId)) {
  scope: vm
  name: guid(vm.id, last(split(autostopRoleDefinitionId, '/')))
  properties: {
    roleDefinitionId: autostopRoleDefinitionId
    principalId: autostopPrincipalId
    principalType: 'ServicePrincipal'
  }
}

@description('Resource ID of the head VM.')
output id string = vm.id

@description('Public IP address of the head.')
output publicIp string = publicIp.properties.ipAddress

@description('Private IP address of the head.')
output privateIp string = nic.properties.ipConfigurations[0].properties.privateIPAddress
