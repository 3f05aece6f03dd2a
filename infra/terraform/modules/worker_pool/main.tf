# One worker pool: a Uniform scale set without public IPs (outbound through the NAT gateway)
# whose instances join the head's Ray cluster from their cloud-init, its CPU autoscale
# (scaling_mode = "cpu") or, with scaling_mode = "ray", the head's role to let Ray's autoscaler
# change it, and autostop's roles on both. Autoscale or Ray's autoscaler owns the instance
# count after creation.

resource "azurerm_linux_virtual_machine_scale_set" "this" {
  #checkov:skip=CKV_AZURE_97:Off by default because encryption at host needs the EncryptionAtHost feature registered on the subscription; set encryption_at_host_enabled = true where it is.
  name                 = var.name
  computer_name_prefix = var.computer_name_prefix
  location             = var.location
  resource_group_name  = var.resource_group_name
  sku                  = var.vm_size
  instances            = var.default_count
  tags                 = var.tags

  admin_username                  = var.admin_username
  disable_password_authentication = true
  admin_ssh_key {
    username   = var.admin_username
    public_key = var.admin_ssh_public_key
  }

  # A baked node image (the root's node_image_id) or the os_image's marketplace image.
  source_image_id = var.source_image_id
  dynamic "source_image_reference" {
    for_each = var.source_image_id == null ? [var.source_image_reference] : []
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
      subnet_id = var.subnet_id
    }
  }

  identity {
    type         = "UserAssigned"
    identity_ids = [var.identity_id]
  }

  # Instances keep the custom data they booted with until they are reimaged or replaced.
  custom_data = base64encode(var.custom_data)
  # Extensions are an administrator's way to run code as root in a VM (Custom Script): off on
  # the head (checkov CKV_AZURE_50). The workers need one, the Application Health extension
  # below, and whoever may change the scale set could run code in its VMs through custom data
  # and a reimage anyway.
  extension_operations_enabled = true
  encryption_at_host_enabled   = var.encryption_at_host_enabled

  # Each worker's health, read from its own endpoint (the root's locals.tf:
  # worker_health_probe), for the repair policy below and the portal's Health state column.
  extension {
    name                       = "HealthExtension"
    publisher                  = "Microsoft.ManagedServices"
    type                       = "ApplicationHealthLinux"
    type_handler_version       = "2.0"
    auto_upgrade_minor_version = true
    settings                   = jsonencode(var.health_probe)
  }

  # A worker whose bootstrap failed for good (or whose Ray did not come back) says Unhealthy:
  # the scale set replaces it and keeps its count. Not self-deletion through the managed
  # identity: every job on a node can get the identity's token from the metadata service, so
  # that right would let any job delete workers. Azure suspends repairs by itself when new
  # instances keep failing (a broken package index must not churn VMs).
  automatic_instance_repair {
    enabled      = var.automatic_repair.enabled
    grace_period = "PT${var.automatic_repair.grace_period_minutes}M"
    action       = var.automatic_repair.action
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

  # Regular workers get a Terminate scheduled event termination_notice_minutes before deletion,
  # time to drain. Spot VMs cannot have it (they get Preempt, ~30 s).
  dynamic "termination_notification" {
    for_each = var.spot.enabled ? [] : [var.termination_notice_minutes]
    content {
      enabled = true
      timeout = "PT${termination_notification.value}M"
    }
  }

  # The pool's availability zones (none: regional, as before zones), and whether Azure keeps the
  # VMs strictly even across them (only with two zones or more: Azure refuses it otherwise).
  zones        = length(var.zones) > 0 ? var.zones : null
  zone_balance = length(var.zones) > 1 ? var.zone_balance : null

  priority        = var.spot.enabled ? "Spot" : "Regular"
  eviction_policy = var.spot.enabled ? var.spot.eviction_policy : null
  max_bid_price   = var.spot.enabled ? var.spot.max_price : null

  boot_diagnostics {}

  lifecycle {
    # Autoscale changes the count; a later apply must not put it back.
    ignore_changes = [instances]
  }
}

# CPU autoscale of the pool (scaling_mode = "cpu"): average CPU above scale_out_cpu_percent over
# 5 minutes adds one worker, below scale_in_cpu_percent removes one, within min..max. With
# scaling_mode = "ray" there is no such rule: Ray's autoscaler on the head sets the count.
resource "azurerm_monitor_autoscale_setting" "this" {
  count               = var.scaling_mode == "cpu" ? 1 : 0
  name                = var.cpu_autoscale.name
  location            = var.location
  resource_group_name = var.resource_group_name
  target_resource_id  = azurerm_linux_virtual_machine_scale_set.this.id
  enabled             = true
  tags                = var.tags

  profile {
    name = "cpu"

    capacity {
      minimum = var.min_count
      default = var.default_count
      maximum = var.max_count
    }

    rule {
      metric_trigger {
        metric_name        = "Percentage CPU"
        metric_resource_id = azurerm_linux_virtual_machine_scale_set.this.id
        time_grain         = "PT1M"
        statistic          = "Average"
        time_window        = "PT5M"
        time_aggregation   = "Average"
        operator           = "GreaterThan"
        threshold          = var.cpu_autoscale.scale_out_cpu_percent
      }

      scale_action {
        direction = "Increase"
        type      = "ChangeCount"
        value     = 1
        cooldown  = "PT${var.cpu_autoscale.scale_out_cooldown_minutes}M"
      }
    }

    rule {
      metric_trigger {
        metric_name        = "Percentage CPU"
        metric_resource_id = azurerm_linux_virtual_machine_scale_set.this.id
        time_grain         = "PT1M"
        statistic          = "Average"
        time_window        = "PT5M"
        time_aggregation   = "Average"
        operator           = "LessThan"
        threshold          = var.cpu_autoscale.scale_in_cpu_percent
      }

      scale_action {
        direction = "Decrease"
        type      = "ChangeCount"
        value     = 1
        cooldown  = "PT${var.cpu_autoscale.scale_in_cooldown_minutes}M"
      }
    }
  }
}

# scaling_mode = "ray": the head's own identity may change this scale set (capacity, deleting
# the instances Ray's autoscaler drained). Virtual Machine Contributor, built in.
resource "azurerm_role_assignment" "autoscaler_scale_set" {
  count                = var.scaling_mode == "ray" ? 1 : 0
  scope                = azurerm_linux_virtual_machine_scale_set.this.id
  role_definition_name = "Virtual Machine Contributor"
  principal_id         = var.head_principal_id
  principal_type       = "ServicePrincipal"
}

# Autostop: the head's own identity may set this scale set's capacity (the root's identity.tf:
# the custom role). In scaling_mode = "ray" it holds Virtual Machine Contributor here already
# (above), which includes these actions: no second assignment.
resource "azurerm_role_assignment" "autostop_scale_set" {
  count              = var.autostop.enabled && var.scaling_mode != "ray" ? 1 : 0
  name               = var.autostop.scale_set_assignment_name
  scope              = azurerm_linux_virtual_machine_scale_set.this.id
  role_definition_id = var.autostop.role_definition_id
  principal_id       = var.head_principal_id
  principal_type     = "ServicePrincipal"
}

# Autostop: ... and turn this pool's autoscale setting off and on.
resource "azurerm_role_assignment" "autostop_autoscale" {
  count              = var.autostop.enabled && var.scaling_mode == "cpu" ? 1 : 0
  name               = var.autostop.autoscale_assignment_name
  scope              = azurerm_monitor_autoscale_setting.this[0].id
  role_definition_id = var.autostop.role_definition_id
  principal_id       = var.head_principal_id
  principal_type     = "ServicePrincipal"
}
