metadata name = 'Results storage role'
metadata description = 'Storage Blob Data Contributor for the nodes\' managed identity on the results storage account\'s `results` container only, deployed to the account\'s resource group (which infra/bicep/results.bicep creates apart from the cluster), as the Terraform stack\'s results.tf grants it.'

@description('Required. Name of the results storage account (in the resource group this module is deployed to).')
param storageAccountName string

@description('Required. Principal (object) id of the nodes\' managed identity.')
param principalId string

// Storage Blob Data Contributor (a built-in role: the same id in every tenant).
var blobDataContributorRoleId = 'ba92f5b4-2d11-453d-a403-e96b0029c9fe'

resource account 'Microsoft.Storage/storageAccounts@2024-01-01' existing = {
  name: storageAccountName
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2024-01-01' existing = {
  parent: account
  name: 'default'
}

resource container 'Microsoft.Storage/storageAccounts/blobServices/containers@2024-01-01' existing = {
  parent: blobService
  name: 'results'
}

// The nodes' identity reads and writes blobs of the results container, nothing else. (A job
// started before the assignment has propagated gets one `results store: ...` line and keeps its
// local folder: examples/harness/blobsync.py.)
resource nodesResultsContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  scope: container
  name: guid(container.id, principalId, blobDataContributorRoleId)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', blobDataContributorRoleId)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}
