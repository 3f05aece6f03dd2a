# One worker pool: a scale set without public IPs (outbound through the NAT gateway) whose
# instances join the head's Ray cluster from their cloud-init, its CPU autoscale
# (scaling_mode = "cpu") or, with scaling_mode = "ray", the head's role to let Ray's autoscaler
# change it, and autostop's roles on both. Autoscale or Ray's autoscaler owns the instance
# count after creation.
#
# orchestration_mode picks the scale set: "Flexible" (azurerm_orchestrated_virtual_machine_scale_set,
# every pool's unless it pins Uniform: its instances are ordinary VMs; the only kind with Spot
# Priority Mix and Instance Mix) or "Uniform" (azurerm_linux_virtual_machine_scale_set, the
# pools' scale set before Flexible became the default).
# Exactly one of the two exists: what names the pool's scale set takes the id of whichever it
# is (one(concat(...)) of both). Changing a pool's mode replaces its scale set (Azure cannot
# convert one): `python -m driver up` says so before it applies.

# A pool made before Flexible (or called as a module from an older version) had one scale set
# without count: it is the Uniform one, kept where the pool pins orchestration_mode = "Uniform"
# (otherwise the plan replaces it with a Flexible one, and `python -m driver up` says so).
moved {
  from = azurerm_linux_virtual_machine_scale_set.this
  to   = azurerm_linux_virtual_machine_scale_set.this[0]
}

resource "azurerm_linux_virtual_machine_scale_set" "this" {
  count = var.orchestration_mode == "Flexible" ? 0 : 1
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

# The Flexible scale set (orchestration_mode = "Flexible"): the same workers as the Uniform one
# above (image, network, identity, custom data, health extension, automatic repairs, Terminate
# notification, zones), plus Spot Priority Mix and Instance Mix. Flexible has no overprovisioning
# and no scale-in policy: which instance goes is the caller's (Ray's autoscaler deletes the one it
# drained; CPU autoscale lets Azure choose).
# (checkov 3.3 has no check of this resource type: tests/unit/test_terraform_checkov.py holds
# its settings to the Uniform scale set's, which checkov does judge.)
resource "azurerm_orchestrated_virtual_machine_scale_set" "this" {
  count               = var.orchestration_mode == "Flexible" ? 1 : 0
  name                = var.name
  location            = var.location
  resource_group_name = var.resource_group_name
  # Instance Mix: the size is "Mix" and the sizes are sku_profile's.
  sku_name  = var.instance_mix == null ? var.vm_size : "Mix"
  instances = var.default_count
  tags      = var.tags
  # One fault domain: Azure spreads the VMs over as many as it can (max spreading), which
  # Spot Priority Mix and Instance Mix take.
  platform_fault_domain_count = 1
  # Spot Priority Mix refuses a single placement group.
  single_placement_group = false
  # As the Uniform scale set: a changed model reaches a VM when it is replaced, not by itself.
  upgrade_mode = "Manual"

  os_profile {
    # Instances keep the custom data they booted with until they are replaced.
    custom_data = base64encode(var.custom_data)

    linux_configuration {
      admin_username                  = var.admin_username
      computer_name_prefix            = var.computer_name_prefix
      disable_password_authentication = true

      admin_ssh_key {
        username   = var.admin_username
        public_key = var.admin_ssh_public_key
      }
    }
  }

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

  extension_operations_enabled = true
  encryption_at_host_enabled   = var.encryption_at_host_enabled

  extension {
    name                               = "HealthExtension"
    publisher                          = "Microsoft.ManagedServices"
    type                               = "ApplicationHealthLinux"
    type_handler_version               = "2.0"
    auto_upgrade_minor_version_enabled = true
    settings                           = jsonencode(var.health_probe)
  }

  automatic_instance_repair {
    enabled      = var.automatic_repair.enabled
    grace_period = "PT${var.automatic_repair.grace_period_minutes}M"
    action       = var.automatic_repair.action
  }

  dynamic "termination_notification" {
    for_each = var.spot.enabled ? [] : [var.termination_notice_minutes]
    content {
      enabled = true
      timeout = "PT${termination_notification.value}M"
    }
  }

  zones        = length(var.zones) > 0 ? var.zones : null
  zone_balance = length(var.zones) > 1 ? var.zone_balance : null

  priority        = var.spot.enabled ? "Spot" : "Regular"
  eviction_policy = var.spot.enabled ? var.spot.eviction_policy : null
  max_bid_price   = var.spot.enabled ? var.spot.max_price : null

  # Spot Priority Mix (Spot pools only): the first base_regular_count VMs are regular, then
  # regular_percentage_above_base % of the VMs above them (the rest Spot).
  dynamic "priority_mix" {
    for_each = var.priority_mix == null ? [] : [var.priority_mix]
    content {
      base_regular_count            = priority_mix.value.base_regular_count
      regular_percentage_above_base = priority_mix.value.regular_percentage_above_base
    }
  }

  # Instance Mix: the pool's VMs take any of these sizes, chosen by the allocation strategy.
  dynamic "sku_profile" {
    for_each = var.instance_mix == null ? [] : [var.instance_mix]
    content {
      allocation_strategy = sku_profile.value.allocation_strategy
      vm_sizes            = sku_profile.value.vm_sizes
    }
  }

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
  target_resource_id  = one(concat(azurerm_linux_virtual_machine_scale_set.this[*].id, azurerm_orchestrated_virtual_machine_scale_set.this[*].id))
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
        metric_resource_id = one(concat(azurerm_linux_virtual_machine_scale_set.this[*].id, azurerm_orchestrated_virtual_machine_scale_set.this[*].id))
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
        metric_resource_id = one(concat(azurerm_linux_virtual_machine_scale_set.this[*].id, azurerm_orchestrated_virtual_machine_scale_set.this[*].id))
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
  scope                = one(concat(azurerm_linux_virtual_machine_scale_set.this[*].id, azurerm_orchestrated_virtual_machine_scale_set.this[*].id))
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
  scope              = one(concat(azurerm_linux_virtual_machine_scale_set.this[*].id, azurerm_orchestrated_virtual_machine_scale_set.this[*].id))
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
