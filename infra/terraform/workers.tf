# The workers: a Uniform scale set without public IPs (outbound through the NAT gateway) whose
# instances join the head's Ray cluster from their cloud-init. Autoscale (autoscale.tf) or, with
# scaling_mode = "ray", Ray's autoscaler on the head owns the instance count after creation.

resource "azurerm_linux_virtual_machine_scale_set" "workers" {
  #checkov:skip=CKV_AZURE_97:Off by default because encryption at host needs the EncryptionAtHost feature registered on the subscription; set encryption_at_host_enabled = true where it is.
  name                 = local.worker_scale_set_name
  computer_name_prefix = "${var.name_prefix}-w"
  location             = var.location
  resource_group_name  = local.resource_group_name
  sku                  = var.worker_vm_size
  instances            = var.worker_default_count
  tags                 = var.tags

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
    caching              = "ReadWrite"
    storage_account_type = "StandardSSD_LRS"
  }

  network_interface {
    name    = "primary"
    primary = true

    ip_configuration {
      name      = "primary"
      primary   = true
      subnet_id = azurerm_subnet.this.id
    }
  }

  identity {
    type         = "UserAssigned"
    identity_ids = [azurerm_user_assigned_identity.this.id]
  }

  # Instances keep the custom data they booted with until they are reimaged or replaced.
  custom_data = base64encode(local.custom_data["worker"])
  # Extensions are an administrator's way to run code as root in a VM (Custom Script): off on
  # the head (checkov CKV_AZURE_50). The workers need one, the Application Health extension
  # below, and whoever may change the scale set could run code in its VMs through custom data
  # and a reimage anyway.
  extension_operations_enabled = true
  encryption_at_host_enabled   = var.encryption_at_host_enabled

  # Each worker's health, read from its own endpoint (locals.tf: worker_health_probe), for the
  # repair policy below and the portal's Health state column.
  extension {
    name                       = "HealthExtension"
    publisher                  = "Microsoft.ManagedServices"
    type                       = "ApplicationHealthLinux"
    type_handler_version       = "2.0"
    auto_upgrade_minor_version = true
    settings                   = jsonencode(local.worker_health_probe)
  }

  # A worker whose bootstrap failed for good (or whose Ray did not come back) says Unhealthy:
  # the scale set replaces it and keeps its count. Not self-deletion through the managed
  # identity: every job on a node can get the identity's token from the metadata service, so
  # that right would let any job delete workers. Azure suspends repairs by itself when new
  # instances keep failing (a broken package index must not churn VMs).
  automatic_instance_repair {
    enabled      = var.worker_automatic_repair_enabled
    grace_period = "PT${var.worker_automatic_repair_grace_period_minutes}M"
    action       = var.worker_automatic_repair_action
  }

  # Overprovisioned extra VMs would run cloud-init and join Ray before Azure deletes them.
  overprovision = false
  upgrade_mode  = "Manual"

  # Scale-in removes the newest worker first: the last one added is the one least likely to hold
  # long-running actors.
  scale_in {
    rule                   = "NewestVM"
    force_deletion_enabled = false
  }

  # Regular workers get a Terminate scheduled event worker_termination_notice_minutes before
  # deletion, time to drain. Spot VMs cannot have it (they get Preempt, ~30 s).
  dynamic "termination_notification" {
    for_each = var.worker_spot_enabled ? [] : [var.worker_termination_notice_minutes]
    content {
      enabled = true
      timeout = "PT${termination_notification.value}M"
    }
  }

  priority        = var.worker_spot_enabled ? "Spot" : "Regular"
  eviction_policy = var.worker_spot_enabled ? "Delete" : null
  max_bid_price   = var.worker_spot_enabled ? -1 : null

  boot_diagnostics {}

  lifecycle {
    # Autoscale changes the count; a later apply must not put it back.
    ignore_changes = [instances]
  }

  # Workers install packages at first boot (NAT gateway) and join the head at its private IP.
  depends_on = [
    azurerm_subnet_nat_gateway_association.this,
    azurerm_subnet_network_security_group_association.this,
    azurerm_key_vault_secret.cluster_token,
    azurerm_role_assignment.nodes_secrets_user,
    azurerm_private_endpoint.key_vault,
    azurerm_private_dns_zone_virtual_network_link.key_vault,
    azurerm_linux_virtual_machine.head,
  ]
}
