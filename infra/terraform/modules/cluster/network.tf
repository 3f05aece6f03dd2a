# Virtual network, one subnet for head and workers, its NSG, and a NAT gateway for outbound
# package installs (workers have no public IP, and new subnets get no default outbound access).

resource "azurerm_virtual_network" "this" {
  name                = "${var.name_prefix}-vnet"
  location            = var.location
  resource_group_name = local.resource_group_name
  address_space       = [var.vnet_address_space]
  tags                = var.tags
}

resource "azurerm_subnet" "this" {
  name                            = "${var.name_prefix}-snet"
  resource_group_name             = local.resource_group_name
  virtual_network_name            = azurerm_virtual_network.this.name
  address_prefixes                = [var.subnet_address_prefix]
  default_outbound_access_enabled = false
  # The Key Vault's private endpoint lives here too (keyvault.tf). With network policies on, the
  # NSG below governs it like the VMs: only the cluster subnet reaches it, not peered networks.
  private_endpoint_network_policies = "NetworkSecurityGroupEnabled"
}

# Inbound: SSH from allowed_ssh_cidrs to the head, all traffic between cluster nodes (Ray needs
# every TCP port between them; the nodes reach the Key Vault's private endpoint), nothing else.
# Outbound stays Azure's default (to the Internet via the NAT gateway).
resource "azurerm_network_security_group" "this" {
  name                = "${var.name_prefix}-nsg"
  location            = var.location
  resource_group_name = local.resource_group_name
  tags                = var.tags

  security_rule {
    name                       = "AllowSshFromAllowedCidrs"
    priority                   = 100
    direction                  = "Inbound"
    access                     = "Allow"
    protocol                   = "Tcp"
    source_address_prefixes    = var.allowed_ssh_cidrs
    source_port_range          = "*"
    destination_address_prefix = local.head_private_ip
    destination_port_range     = "22"
    description                = "SSH to the head from allowed_ssh_cidrs only."
  }

  security_rule {
    name                       = "AllowClusterInternal"
    priority                   = 200
    direction                  = "Inbound"
    access                     = "Allow"
    protocol                   = "*"
    source_address_prefix      = var.subnet_address_prefix
    source_port_range          = "*"
    destination_address_prefix = var.subnet_address_prefix
    destination_port_range     = "*"
    description                = "Ray between the nodes of the cluster subnet (GCS, object manager, workers)."
  }

  security_rule {
    name                       = "DenyAllOtherInbound"
    priority                   = 4096
    direction                  = "Inbound"
    access                     = "Deny"
    protocol                   = "*"
    source_address_prefix      = "*"
    source_port_range          = "*"
    destination_address_prefix = "*"
    destination_port_range     = "*"
    description                = "Nothing else, not even from peered networks."
  }
}

resource "azurerm_subnet_network_security_group_association" "this" {
  subnet_id                 = azurerm_subnet.this.id
  network_security_group_id = azurerm_network_security_group.this.id
}

resource "azurerm_public_ip" "nat" {
  name                = "${var.name_prefix}-nat-pip"
  location            = var.location
  resource_group_name = local.resource_group_name
  allocation_method   = "Static"
  sku                 = "Standard"
  tags                = var.tags
}

resource "azurerm_nat_gateway" "this" {
  name                = "${var.name_prefix}-nat"
  location            = var.location
  resource_group_name = local.resource_group_name
  sku_name            = "Standard"
  # The same as the head's public IP: one idle timeout for every flow of the cluster.
  idle_timeout_in_minutes = var.tcp_idle_timeout_minutes
  tags                    = var.tags
}

resource "azurerm_nat_gateway_public_ip_association" "this" {
  nat_gateway_id       = azurerm_nat_gateway.this.id
  public_ip_address_id = azurerm_public_ip.nat.id
}

resource "azurerm_subnet_nat_gateway_association" "this" {
  subnet_id      = azurerm_subnet.this.id
  nat_gateway_id = azurerm_nat_gateway.this.id
}
