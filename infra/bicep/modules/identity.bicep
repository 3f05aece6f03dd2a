metadata name = 'Ray cluster identity'
metadata description = 'The user-assigned identity the head and every worker run as; its only role is reading the cluster token (keyvault.bicep).'

@description('Required. Azure region of the identity.')
param location string

@description('Required. Prefix of every resource name.')
param namePrefix string

@description('Required. Tags for every resource.')
param tags object

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
