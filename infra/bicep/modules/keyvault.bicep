metadata name = 'Ray cluster token in Key Vault'
metadata description = 'The Key Vault holding the Ray cluster token, written through Resource Manager (control plane); the nodes read it through a private endpoint in the cluster subnet with the privatelink.vaultcore.azure.net zone linked to the virtual network, as the Terraform stack does.'

@description('Required. Azure region of the vault and its private endpoint.')
param location string

@description('Required. Prefix of every resource name.')
param namePrefix string

@description('Required. Tags for every resource.')
param tags object

@description('Required. Name of the vault (3-24 characters, unique in Azure).')
param keyVaultName string

@description('Required. Resource ID of the virtual network the private DNS zone is linked to.')
param vnetId string

@description('Required. Resource ID of the subnet of the private endpoint.')
param subnetId string

@description('Required. Fixed private IP address of the private endpoint (the subnet\'s 5th host).')
param privateIp string

@description('Required. Principal id of the nodes\' identity (reads the secret).')
param nodesPrincipalId string

@description('Required. Name of the secret that holds the token.')
param secretName string

@secure()
@description('Required. The Ray cluster token.')
param clusterToken string

@description('Required. Expiration date of the secret, seconds since 1970-01-01 UTC.')
param expiresAt int

// Key Vault Secrets User: read secret contents (built-in role).
var secretsUserRoleId = '4633458b-17de-408a-b874-0445c86b69e6'

// Resource Manager writes the secret (control plane), so the data plane needs no public endpoint:
// the nodes read through the private endpoint, nobody else gets in.
resource vault 'Microsoft.KeyVault/vaults@2024-11-01' = {
  name: keyVaultName
  location: location
  tags: tags
  properties: {
    tenantId: subscription().tenantId
    sku: {
      family: 'A'
      name: 'standard'
    }
    enableRbacAuthorization: true
    enableSoftDelete: true
    // A deleted vault stays 7 days and cannot be purged: its name is taken until then.
    enablePurgeProtection: true
    softDeleteRetentionInDays: 7
    publicNetworkAccess: 'Disabled'
    networkAcls: {
      defaultAction: 'Deny'
      bypass: 'None'
      ipRules: []
      virtualNetworkRules: []
    }
  }
}

resource secret 'Microsoft.KeyVault/vaults/secrets@2024-11-01' = {
  parent: vault
  name: secretName
  tags: tags
  properties: {
    value: clusterToken
    contentType: 'text/plain'
    attributes: {
      enabled: true
      // Informational (Key Vault still returns an expired secret): it marks the token due for
      // rotation and satisfies policies that require one.
      exp: expiresAt
    }
  }
}

// The nodes' identity reads secrets of this vault only.
resource nodesSecretsUser 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  scope: vault
  name: guid(vault.id, nodesPrincipalId, secretsUserRoleId)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', secretsUserRoleId)
    principalId: nodesPrincipalId
    principalType: 'ServicePrincipal'
  }
}

// Private DNS zone names are unique per resource group: one cluster per resource group.
resource dnsZone 'Microsoft.Network/privateDnsZones@2024-06-01' = {
  name: 'privatelink.vaultcore.azure.net'
  location: 'global'
  tags: tags
}

resource dnsLink 'Microsoft.Network/privateDnsZones/virtualNetworkLinks@2024-06-01' = {
  parent: dnsZone
  name: '${namePrefix}-kv-dns'
  location: 'global'
  tags: tags
  properties: {
    registrationEnabled: false
    virtualNetwork: {
      id: vnetId
    }
  }
}

resource privateEndpoint 'Microsoft.Network/privateEndpoints@2024-07-01' = {
  name: '${namePrefix}-kv-pe'
  location: location
  tags: tags
  properties: {
    subnet: {
      id: subnetId
    }
    customNetworkInterfaceName: '${namePrefix}-kv-pe-nic'
    privateLinkServiceConnections: [
      {
        name: '${namePrefix}-kv-psc'
        properties: {
          privateLinkServiceId: vault.id
          groupIds: [
            'vault'
          ]
        }
      }
    ]
    // A fixed address, the subnet's 5th host: a dynamic one could take the head's (the 4th)
    // before the head's NIC exists.
    ipConfigurations: [
      {
        name: 'vault'
        properties: {
          privateIPAddress: privateIp
          groupId: 'vault'
          memberName: 'default'
        }
      }
    ]
  }
}

// The zone group writes the vault's A record into the private zone.
resource zoneGroup 'Microsoft.Network/privateEndpoints/privateDnsZoneGroups@2024-07-01' = {
  parent: privateEndpoint
  name: 'vault'
  properties: {
    privateDnsZoneConfigs: [
      {
        name: 'vault'
        properties: {
          privateDnsZoneId: dnsZone.id
        }
      }
    ]
  }
}

@description('The vault\'s URI, https://NAME.vault.azure.net/.')
output vaultUri string = vault.properties.vaultUri

@description('Name of the secret that holds the token.')
output secretName string = secret.name
