metadata name = 'Ray cluster network'
metadata description = 'The virtual network with one subnet for head and workers, its NSG (SSH to the head from the allowed CIDRs, everything between cluster nodes, nothing else) and a NAT gateway for outbound package installs.'

@description('Required. Azure region of the resources.')
param location string

@description('Required. Prefix of every resource name.')
param namePrefix string

@description('Required. Tags for every resource.')
param tags object

@description('Required. Address space of the virtual network.')
param vnetAddressSpace string

@description('Required. The cluster subnet.')
param subnetAddressPrefix string

@description('Required. IPv4 CIDRs allowed to reach the head over SSH.')
param allowedSshCidrs array

@description('Required. The head\'s private IP address (the subnet\'s 4th host).')
param headPrivateIp string

@description('Required. Idle timeout of the NAT gateway, in minutes.')
param tcpIdleTimeoutMinutes int

// Inbound: SSH from allowedSshCidrs to the head, all traffic between cluster nodes (Ray needs
// every TCP port between them; the nodes reach the Key Vault's private endpoint), nothing else.
resource nsg 'Microsoft.Network/networkSecurityGroups@2024-07-01' = {
  name: '${namePrefix}-nsg'
  location: location
  tags: tags
  properties: {
    securityRules: [
      {
        name: 'AllowSshFromAllowedCidrs'
        properties: {
          priority: 100
          direction: 'Inbound'
          access: 'Allow'
          protocol: 'Tcp'
          sourceAddressPrefixes: allowedSshCidrs
          sourcePortRange: '*'
          destinationAddressPrefix: headPrivateIp
          destinationPortRange: '22'
          description: 'SSH to the head from allowedSshCidrs only.'
        }
      }
      {
        name: 'AllowClusterInternal'
        properties: {
          priority: 200
          direction: 'Inbound'
          access: 'Allow'
          protocol: '*'
          sourceAddressPrefix: subnetAddressPrefix
          sourcePortRange: '*'
          destinationAddressPrefix: subnetAddressPrefix
          destinationPortRange: '*'
          description: 'Ray between the nodes of the cluster subnet (GCS, object manager, workers).'
        }
      }
      {
        name: 'DenyAllOtherInbound'
        properties: {
          priority: 4096
          direction: 'Inbound'
          access: 'Deny'
          protocol: '*'
          sourceAddressPrefix: '*'
          sourcePortRange: '*'
          destinationAddressPrefix: '*'
          destinationPortRange: '*'
          description: 'Nothing else, not even from peered networks.'
        }
      }
    ]
  }
}

resource natPublicIp 'Microsoft.Network/publicIPAddresses@2024-07-01' = {
  name: '${namePrefix}-nat-pip'
  location: location
  tags: tags
  sku: {
    name: 'Standard'
  }
  properties: {
    publicIPAllocationMethod: 'Static'
  }
}

resource natGateway 'Microsoft.Network/natGateways@2024-07-01' = {
  name: '${namePrefix}-nat'
  location: location
  tags: tags
  sku: {
    name: 'Standard'
  }
  properties: {
    // The same as the head's public IP: one idle timeout for every flow of the cluster.
    idleTimeoutInMinutes: tcpIdleTimeoutMinutes
    publicIpAddresses: [
      {
        id: natPublicIp.id
      }
    ]
  }
}

// The subnet is declared inside the virtual network: a separate subnet resource would be deleted
// when the network is deployed again.
var subnetName = '${namePrefix}-snet'

resource vnet 'Microsoft.Network/virtualNetworks@2024-07-01' = {
  name: '${namePrefix}-vnet'
  location: location
  tags: tags
  properties: {
    addressSpace: {
      addressPrefixes: [
        vnetAddressSpace
      ]
    }
    subnets: [
      {
        name: subnetName
        properties: {
          addressPrefix: subnetAddressPrefix
          // New subnets get no default outbound access: the NAT gateway is the way out.
          defaultOutboundAccess: false
          networkSecurityGroup: {
            id: nsg.id
          }
          natGateway: {
            id: natGateway.id
          }
          // The Key Vault's private endpoint lives here too; with network policies on, the NSG
          // governs it like the VMs.
          privateEndpointNetworkPolicies: 'NetworkSecurityGroupEnabled'
        }
      }
    ]
  }
}

@description('Resource ID of the virtual network.')
output vnetId string = vnet.id

@description('Resource ID of the cluster subnet.')
output subnetId string = resourceId('Microsoft.Network/virtualNetworks/subnets', vnet.name, subnetName)
