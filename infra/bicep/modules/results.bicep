metadata name = 'Results storage access'
metadata description = 'The cluster\'s way to the results storage account (which infra/bicep/results.bicep creates in a resource group of its own): a private endpoint to its blob service in the cluster subnet with the privatelink.blob.core.windows.net zone linked to the virtual network, as modules/keyvault.bicep does for the vault and the Terraform stack\'s results.tf for the account.'

@description('Required. Azure region of the private endpoint.')
param location string

@description('Required. Prefix of every resource name.')
param namePrefix string

@description('Required. Tags for every resource.')
param tags object

@description('Required. Resource ID of the virtual network the private DNS zone is linked to.')
param vnetId string

@description('Required. Resource ID of the subnet of the private endpoint.')
param subnetId string

@description('Required. Fixed private IP address of the private endpoint (the subnet\'s 6th host).')
param privateIp string

@description('Required. Resource ID of the results storage account.')
param storageAccountId string

@description('Required. URL of the results container.')
param url string

// Private DNS zone names are unique per resource group: one cluster per resource group.
resource dnsZone 'Microsoft.Network/privateDnsZones@2024-06-01' = {
  name: 'privatelink.blob.core.windows.net'
  location: 'global'
  tags: tags
}

resource dnsLink 'Microsoft.Network/privateDnsZones/virtualNetworkLinks@2024-06-01' = {
  parent: dnsZone
  name: '${namePrefix}-blob-dns'
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
  name: '${namePrefix}-blob-pe'
  location: location
  tags: tags
  properties: {
    subnet: {
      id: subnetId
    }
    customNetworkInterfaceName: '${namePrefix}-blob-pe-nic'
    privateLinkServiceConnections: [
      {
        name: '${namePrefix}-blob-psc'
        properties: {
          privateLinkServiceId: storageAccountId
          groupIds: [
            'blob'
          ]
        }
      }
    ]
    // A fixed address, like the vault's endpoint: a dynamic one could take the head's.
    ipConfigurations: [
      {
        name: 'blob'
        properties: {
          privateIPAddress: privateIp
          groupId: 'blob'
          memberName: 'blob'
        }
      }
    ]
  }
}

// The zone group writes the account's A record into the private zone.
resource zoneGroup 'Microsoft.Network/privateEndpoints/privateDnsZoneGroups@2024-07-01' = {
  parent: privateEndpoint
  name: 'blob'
  properties: {
    privateDnsZoneConfigs: [
      {
        name: 'blob'
        properties: {
          privateDnsZoneId: dnsZone.id
        }
      }
    ]
  }
}

@description('URL of the results container (a module output: who reads it waits for the endpoint and its DNS record).')
output url string = url
