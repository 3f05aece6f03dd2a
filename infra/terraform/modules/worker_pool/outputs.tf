output "scale_set_id" {
  description = "Resource ID of the pool's scale set."
  value       = one(concat(azurerm_linux_virtual_machine_scale_set.this[*].id, azurerm_orchestrated_virtual_machine_scale_set.this[*].id))
}

output "scale_set_name" {
  description = "Name of the pool's scale set."
  value       = one(concat(azurerm_linux_virtual_machine_scale_set.this[*].name, azurerm_orchestrated_virtual_machine_scale_set.this[*].name))
}

output "autoscale_setting_id" {
  description = "Resource ID of the pool's CPU autoscale setting (scaling_mode = \"cpu\"), \"\" without one."
  value       = try(azurerm_monitor_autoscale_setting.this[0].id, "")
}

# The resources themselves, for the root's `terraform test` assertions (sensitive: the scale
# set holds the custom data).
output "scale_set" {
  description = "The pool's Uniform scale set resource (orchestration_mode = \"Uniform\"), null for a Flexible pool."
  value       = one(azurerm_linux_virtual_machine_scale_set.this)
  sensitive   = true
}

output "flexible_scale_set" {
  description = "The pool's Flexible scale set resource (orchestration_mode = \"Flexible\"), null for a Uniform pool."
  value       = one(azurerm_orchestrated_virtual_machine_scale_set.this)
  sensitive   = true
}

output "autoscale_settings" {
  description = "The pool's CPU autoscale setting resources (none or one)."
  value       = azurerm_monitor_autoscale_setting.this
}

output "role_assignments" {
  description = "The head's role assignments on the pool's resources (each a list of none or one): autoscaler_scale_set (scaling_mode = \"ray\"), autostop_scale_set, autostop_autoscale."
  value = {
    autoscaler_scale_set = azurerm_role_assignment.autoscaler_scale_set
    autostop_scale_set   = azurerm_role_assignment.autostop_scale_set
    autostop_autoscale   = azurerm_role_assignment.autostop_autoscale
  }
}
