# The head: a static public IP for SSH (the NSG admits allowed_ssh_cidrs only), a NIC with the
# static private IP the workers' cloud-init names, and the VM that runs Ray's GCS, dashboard
# (127.0.0.1 only) and the jobs' learners.

resource "azurerm_public_ip" "head" {
  name                = "${var.name_prefix}-head-pip"
  location            = var.location
  resource_group_name = local.resource_group_name
  allocation_method   = "Static"
  sku                 = "Standard"
  # Azure drops a silent inbound flow after 4 minutes by default: an SSH tunnel to the dashboard
  # or the Jobs API would die while a job runs quietly.
  idle_timeout_in_minutes = var.tcp_idle_timeout_minutes
  tags                    = var.tags
}

resource "azurerm_network_interface" "head" {
  #checkov:skip=CKV_AZURE_119:The head is the cluster's only way in (SSH); the subnet NSG admits port 22 from allowed_ssh_cidrs only, which validation keeps off 0.0.0.0/0.
  name                = "${var.name_prefix}-head-nic"
  location            = var.location
  resource_group_name = local.resource_group_name
  tags                = var.tags

  ip_configuration {
    name                          = "primary"
    primary                       = true
    subnet_id                     = azurerm_subnet.this.id
    private_ip_address_allocation = "Static"
    private_ip_address            = local.head_private_ip
    public_ip_address_id          = azurerm_public_ip.head.id
  }
}

resource "azurerm_linux_virtual_machine" "head" {
  name                  = "${var.name_prefix}-head"
  computer_name         = "${var.name_prefix}-head"
  location              = var.location
  resource_group_name   = local.resource_group_name
  size                  = var.head_vm_size
  network_interface_ids = [azurerm_network_interface.head.id]
  tags                  = var.tags

  admin_username                  = var.admin_username
  disable_password_authentication = true
  admin_ssh_key {
    username   = var.admin_username
    public_key = trimspace(var.admin_ssh_public_key)
  }

  # A baked node image (node_image_id, image.tf) or the os_image's marketplace image.
  source_image_id = var.node_image_id
  dynamic "source_image_reference" {
    for_each = var.node_image_id == null ? [local.os_image] : []
    content {
      publisher = source_image_reference.value.publisher
      offer     = source_image_reference.value.offer
      sku       = source_image_reference.value.sku
      version   = "latest"
    }
  }

  os_disk {
    name                 = "${var.name_prefix}-head-osdisk"
    caching              = "ReadWrite"
    storage_account_type = "StandardSSD_LRS"
    disk_size_gb         = 64 # the Ray environment (~2 GB), results and checkpoints live here
  }

  # The nodes' identity; with scaling_mode = "ray" or autostop also the head's own (identity.tf).
  identity {
    type         = "UserAssigned"
    identity_ids = concat([azurerm_user_assigned_identity.this.id], azurerm_user_assigned_identity.autoscaler[*].id)
  }

  # head_priority = "Spot": evicted (Preempt, about 30 s) when Azure needs the capacity back or
  # the Spot price rises above head_max_price, and deallocated, not deleted: the OS disk (the
  # Ray environment, checkpoints), the NIC and the public IP stay; `python -m driver start`
  # starts it again.
  priority        = var.head_priority
  eviction_policy = var.head_priority == "Spot" ? "Deallocate" : null
  max_bid_price   = var.head_priority == "Spot" ? var.head_max_price : null

  # Changing custom data replaces the VM (the head is rebuilt from its cloud-init).
  custom_data                = base64encode(local.custom_data["head"])
  allow_extension_operations = false
  encryption_at_host_enabled = var.encryption_at_host_enabled

  # Managed storage account: serial console and the boot log show cloud-init's progress.
  boot_diagnostics {}

  # The first boot installs packages (the subnet's NAT gateway and NSG must be in place) and
  # reads the cluster token from Key Vault (the secret, the identity's role, the private
  # endpoint and its DNS name in the network must exist).
  depends_on = [
    azurerm_subnet_nat_gateway_association.this,
    azurerm_subnet_network_security_group_association.this,
    azurerm_key_vault_secret.cluster_token,
    azurerm_role_assignment.nodes_secrets_user,
    azurerm_private_endpoint.key_vault,
    azurerm_private_dns_zone_virtual_network_link.key_vault,
    # The results storage's endpoint takes its fixed address before any worker could (results.tf).
    azurerm_private_endpoint.blob,
    azurerm_private_dns_zone_virtual_network_link.blob,
    azurerm_role_assignment.nodes_results_contributor,
  ]

  lifecycle {
    # The autoscaler's endpoint comes from the vault's cloud (locals.tf): refuse a cloud whose
    # Resource Manager endpoint the stack does not know rather than send it to the wrong one.
    precondition {
      condition     = local.arm_endpoint != ""
      error_message = "The Key Vault's URI ${azurerm_key_vault.this.vault_uri} names a cloud this stack does not know (Azure public, US Government, China): add its Key Vault DNS suffix and Resource Manager endpoint to local.arm_endpoints_by_key_vault_suffix."
    }
  }
}
