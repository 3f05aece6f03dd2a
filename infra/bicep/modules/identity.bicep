metadata name = 'Ray cluster identity'
metadata description = 'The user-assigned identity the head and every worker run as; its only role is reading the cluster token (keyvault.bicep). With scalingMode ray also the head autoscaler identity, whose only role is on the workers scale set (autoscaler-role.bicep).'

@description('Required. Azure region of the identity.')
param location string

@description('Required. Prefix of every resource name.')
param namePrefix string

@description('Required. Tags for every resource.')
param tags object

@description('Required. Create the head autoscaler identity (scalingMode ray).')
param autoscalerEnabled bool

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

// Attached to the head only: Ray autoscaler changes the workers scale set with it.
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
