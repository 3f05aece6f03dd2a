metadata name = 'Ray cluster identity'
metadata description = 'The user-assigned identity the head and every worker run as; its only role is reading the cluster token (keyvault.bicep). With scalingMode ray or autostop also the head\'s own identity (Ray autoscaler, autostop), attached to the head only, and with autostop the custom role it gets on the head VM, the workers scale set and their autoscale setting.'

@description('Required. Azure region of the identity.')
param location string

@description('Required. Give the autoscaler identity read access to the network interfaces of the resource group: a Flexible pool\'s VMs have interfaces of their own, outside the scale set (scalingMode ray).')
param interfaceReaderEnabled bool

@description('Required. Prefix of every resource name.')
param namePrefix string

@description('Required. Tags for every resource.')
param tags object

@description('Required. Create the head\'s own identity (scalingMode ray, or autostop on).')
param autoscalerEnabled bool

@description('Required. Create the autostop role (autostopIdleMinutes > 0).')
param autostopEnabled bool

resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2024-11-30' = {
  name: '${namePrefix}-id'
  location: location
  tags: tags
}

@description('Resource ID of the identity.')
output id string = identity.id

@description('Client id of the identity (the nodes name it when they ask for a token).')
output clientId string = identity.properties.clientId

@description('Principal (object) id of the identity, for role assignments.')
output principalId string = identity.properties.principalId

// Attached to the head only: Ray autoscaler changes the workers scale set with it, autostop stops
// the cluster with it. (Named autoscaler as it was first: renaming it would replace the identity and
// the head of clusters already running.)
resource autoscaler 'Microsoft.ManagedIdentity/userAssignedIdentities@2024-11-30' = if (autoscalerEnabled) {
  name: '${namePrefix}-autoscaler-id'
  location: location
  tags: tags
}

@description('Resource ID of the autoscaler identity, empty without one.')
output autoscalerId string = autoscalerEnabled ? autoscaler.id : ''

@description('Client id of the autoscaler identity, empty without one.')
output autoscalerClientId string = autoscalerEnabled ? autoscaler.properties.clientId : ''

@description('Principal (object) id of the autoscaler identity, empty without one.')
output autoscalerPrincipalId string = autoscalerEnabled ? autoscaler.properties.principalId : ''

// Autostop: when the cluster has been idle that long, the head sets the workers capacity to 0,
// turns the workers CPU autoscale off (it would bring them back) and deallocates itself. No
// built-in role is that narrow (Virtual Machine Contributor also deletes VMs, changes disks and
// NICs, runs commands): a custom role holds exactly these actions, and each assignment names one
// resource (head.bicep, workers.bicep, autoscale.bicep). There is no narrower action for a scale
// set's capacity than virtualMachineScaleSets/write, which changes the whole scale set model.
// Custom role names are unique in the tenant: the prefix and the resource group name it.
resource autostopRole 'Microsoft.Authorization/roleDefinitions@2022-04-01' = if (autostopEnabled) {
  name: guid(resourceGroup().id, namePrefix, 'ray-cluster-autostop')
  properties: {
    roleName: 'Ray cluster autostop (${namePrefix} in ${resourceGroup().id})'
    description: 'The Ray cluster\'s head stops the cluster when idle: deallocate the head VM, set the workers\' scale set capacity, turn the workers\' autoscale setting off and on. Assigned on those resources only.'
    type: 'CustomRole'
    permissions: [
      {
        actions: [
          'Microsoft.Compute/virtualMachines/read'
          'Microsoft.Compute/virtualMachines/deallocate/action'
          'Microsoft.Compute/virtualMachineScaleSets/read'
          'Microsoft.Compute/virtualMachineScaleSets/write'
          'Microsoft.Insights/autoscaleSettings/read'
          'Microsoft.Insights/autoscaleSettings/write'
        ]
        notActions: []
      }
    ]
    assignableScopes: [
      resourceGroup().id
    ]
  }
}

@description('Resource ID of the autostop role definition, empty without autostop.')
output autostopRoleDefinitionId string = autostopEnabled ? subscriptionResourceId('Microsoft.Authorization/roleDefinitions', autostopRole.name) : ''

// scalingMode ray with a Flexible pool: Ray's autoscaler matches Ray nodes to VMs by private IP,
// and a Flexible VM's network interface is a resource of its own in the resource group, outside
// the scale set its role is on. No built-in role reads interfaces only (Reader reads every
// resource): a custom role with that one action, assigned on the resource group.
resource interfaceReaderRole 'Microsoft.Authorization/roleDefinitions@2022-04-01' = if (interfaceReaderEnabled) {
  name: guid(resourceGroup().id, namePrefix, 'ray-cluster-interface-reader')
  properties: {
    roleName: 'Ray cluster interface reader (${namePrefix} in ${resourceGroup().id})'
    description: 'Ray\'s autoscaler on the head reads the private IPs of the Flexible worker pools\' VMs.'
    type: 'CustomRole'
    permissions: [
      {
        actions: [
          'Microsoft.Network/networkInterfaces/read'
        ]
        notActions: []
      }
    ]
    assignableScopes: [
      resourceGroup().id
    ]
  }
}

resource interfaceReader 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (interfaceReaderEnabled) {
  name: guid(resourceGroup().id, interfaceReaderRole.id)
  properties: {
    roleDefinitionId: interfaceReaderRole.id
    principalId: autoscaler.properties.principalId
    principalType: 'ServicePrincipal'
  }
}
