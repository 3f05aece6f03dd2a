# CPU autoscale of the workers (scaling_mode = "cpu"): average CPU above scale_out_cpu_percent
# over 5 minutes adds one worker, below scale_in_cpu_percent removes one, within
# worker_min_count..worker_max_count. With scaling_mode = "ray" there is no such rule: Ray's
# autoscaler on the head sets the count (identity.tf: its role on the scale set).

resource "azurerm_monitor_autoscale_setting" "workers" {
  count               = var.scaling_mode == "cpu" ? 1 : 0
  name                = local.worker_autoscale_name
  location            = var.location
  resource_group_name = local.resource_group_name
  target_resource_id  = azurerm_linux_virtual_machine_scale_set.workers.id
  enabled             = true
  tags                = var.tags

  profile {
    name = "cpu"

    capacity {
      minimum = var.worker_min_count
      default = var.worker_default_count
      maximum = var.worker_max_count
    }

    rule {
      metric_trigger {
        metric_name        = "Percentage CPU"
        metric_resource_id = azurerm_linux_virtual_machine_scale_set.workers.id
        time_grain         = "PT1M"
        statistic          = "Average"
        time_window        = "PT5M"
        time_aggregation   = "Average"
        operator           = "GreaterThan"
        threshold          = var.scale_out_cpu_percent
      }

      scale_action {
        direction = "Increase"
        type      = "ChangeCount"
        value     = 1
        cooldown  = "PT${var.scale_out_cooldown_minutes}M"
      }
    }

    rule {
      metric_trigger {
        metric_name        = "Percentage CPU"
        metric_resource_id = azurerm_linux_virtual_machine_scale_set.workers.id
        time_grain         = "PT1M"
        statistic          = "Average"
        time_window        = "PT5M"
        time_aggregation   = "Average"
        operator           = "LessThan"
        threshold          = var.scale_in_cpu_percent
      }

      scale_action {
        direction = "Decrease"
        type      = "ChangeCount"
        value     = 1
        cooldown  = "PT${var.scale_in_cooldown_minutes}M"
      }
    }
  }
}
