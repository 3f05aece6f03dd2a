metadata name = 'Results storage for Ray clusters'
metadata description = 'A storage account with one container, results, in a resource group of its own, that outlives every cluster: the cluster stack takes its id (resultsStorageAccountId) and reaches it through a private endpoint. Entra ID only (no shared keys, so no SAS), TLS 1.2, no public access unless allowedCidrs lists addresses, blob and container soft delete. The same resources as infra/terraform/results.'

targetScope = 'resourceGroup'

@description('Optional. Azure region of the results storage (the cluster\'s, so the nodes write within the region).')
param location string = resourceGroup().location

@description('Optional. Start of the storage account\'s name, 2-10 lower-case letters and digits; the rest derives from the subscription and the resource group, so a redeployment keeps the name and another group gets another.')
@minLength(2)
@maxLength(10)
param namePrefix string = 'ray'

@description('Optional. Public IPv4 addresses (CIDRs, /8 to /30, or single addresses as /32) that may reach the account\'s public endpoint, e.g. your laptop\'s for `python -m driver download`. Empty (the default): the public endpoint is off, and only the clusters\' private endpoints reach the account.')
param allowedCidrs array = []

@description('Optional. Days a deleted blob or container can still be restored (blob and container soft delete), 1-365.')
@minValue(1)
@maxValue(365)
param softDeleteDays int = 14

@description('Optional. Object id of a user or group that may read the results container\'s blobs (deployerRole), e.g. yours: az ad signed-in-user show --query id -o tsv. Empty (the default): nobody is granted.')
param deployerPrincipalId string = ''

@description('Optional. What deployerPrincipalId may do with the results container\'s blobs: "reader" (Storage Blob Data Reader: download and plot from a laptop), "contributor" (Storage Blob Data Contributor: also delete runs) or "none".')
@allowed([
  'none'
  'reader'
  'contributor'
])
param deployerRole string = 'reader'

@description('Optional. Tags for every resource.')
param tags object = {}

// Storage account names are global: 3-24 lower-case letters and digits, derived from the
// subscription and the resource group (as the Terraform stack's, in length and inputs).
var accountName = '${namePrefix}res${take(uniqueString(subscription().subscriptionId, resourceGroup().name), 24 - length(namePrefix) - 3)}'
// Azure Storage takes a single address as an IP, not as a /32.
var ipRules = [for c in allowedCidrs: {
  value: endsWith(c, '/32') ? split(c, '/')[0] : c
  action: 'Allow'
}]
var roleIds = {
  reader: '2a2b9908-6ea1-4ae2-8e65-a410df84e7d1'
  contributor: 'ba92f5b4-2d11-453d-a403-e96b0029c9fe'
}

resource account 'Microsoft.Storage/storageAccounts@2024-01-01' = {
  name: accountName
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: {
    // checkov:skip=CKV_AZURE_206:Results are copies a job can write again (its local folder keeps them until the run ends); geo-replication is a cost choice, not a default.
    name: 'Standard_LRS'
  }
  properties: {
    accessTier: 'Hot'
    supportsHttpsTrafficOnly: true
    minimumTlsVersion: 'TLS1_2'
    allowBlobPublicAccess: false
    allowSharedKeyAccess: false
    defaultToOAuthAuthentication: true
    isLocalUserEnabled: false
    allowCrossTenantReplication: false
    publicNetworkAccess: empty(allowedCidrs) ? 'Disabled' : 'Enabled'
    networkAcls: {
      defaultAction: 'Deny'
      bypass: 'None'
      ipRules: ipRules
      virtualNetworkRules: []
    }
  }
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2024-01-01' = {
  parent: account
  name: 'default'
  properties: {
    deleteRetentionPolicy: {
      enabled: true
      days: softDeleteDays
    }
    containerDeleteRetentionPolicy: {
      enabled: true
      days: softDeleteDays
    }
  }
}

resource container 'Microsoft.Storage/storageAccounts/blobServices/containers@2024-01-01' = {
  parent: blobService
  name: 'results'
  properties: {
    publicAccess: 'None'
  }
}

// The deployer's access (deployerRole), on the container only.
resource deployerAccess 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(deployerPrincipalId) && deployerRole != 'none') {
  scope: container
  name: guid(container.id, deployerPrincipalId, deployerRole)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', deployerRole == 'contributor' ? roleIds.contributor : roleIds.reader)
    principalId: deployerPrincipalId
  }
}

@description('Resource id of the results storage account: give it to a cluster as resultsStorageAccountId (Terraform: results_storage_account_id).')
output storageAccountId string = account.id

@description('URL of the results container (what the clusters\' nodes get as RAYDRIVER_RESULTS_URL).')
output containerUrl string = '${account.properties.primaryEndpoints.blob}${container.name}'

@description('Resource group that holds the results storage (deleting it deletes every result).')
output resourceGroupName string = resourceGroup().name
