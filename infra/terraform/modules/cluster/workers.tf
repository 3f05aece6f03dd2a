# The workers: one pool per entry of worker_pools (checks.tf: local.worker_pools; no entry = one
# pool "workers" made of the worker_* variables, today's single scale set), each a scale set
# (Flexible, with Spot Priority Mix and Instance Mix where asked, or Uniform where the pool pins
# it) with what belongs to it (modules/worker_pool): its custom data (the pool's deploy-time
# values), Spot or regular, the termination notice, the health extension and automatic repair,
# the CPU autoscale setting (scaling_mode = "cpu") and the head's roles on them.

module "worker_pool" {
  source   = "../worker_pool"
  for_each = local.worker_pools

  name                 = each.value.scale_set_name
  computer_name_prefix = each.value.computer_name_prefix
  location             = var.location
  resource_group_name  = local.resource_group_name
  tags                 = var.tags

  vm_size       = each.value.vm_size
  min_count     = each.value.min_count
  default_count = each.value.default_count
  max_count     = each.value.max_count
  spot = {
    enabled         = each.value.spot_enabled
    eviction_policy = each.value.eviction_policy
    max_price       = each.value.max_price
  }
  zones                      = each.value.zones
  zone_balance               = each.value.zone_balance
  orchestration_mode         = each.value.orchestration_mode
  priority_mix               = each.value.priority_mix
  instance_mix               = each.value.instance_mix
  termination_notice_minutes = var.worker_termination_notice_minutes
  automatic_repair = {
    enabled              = var.worker_automatic_repair_enabled
    grace_period_minutes = var.worker_automatic_repair_grace_period_minutes
    action               = var.worker_automatic_repair_action
  }
  health_probe = local.worker_health_probe

  admin_username             = var.admin_username
  admin_ssh_public_key       = trimspace(var.admin_ssh_public_key)
  source_image_id            = var.node_image_id
  source_image_reference     = local.os_image
  subnet_id                  = azurerm_subnet.this.id
  identity_id                = azurerm_user_assigned_identity.this.id
  encryption_at_host_enabled = var.encryption_at_host_enabled
  custom_data                = local.pool_custom_data[each.key]

  scaling_mode = var.scaling_mode
  cpu_autoscale = {
    name                       = each.value.autoscale_name
    scale_out_cpu_percent      = var.scale_out_cpu_percent
    scale_in_cpu_percent       = var.scale_in_cpu_percent
    scale_out_cooldown_minutes = var.scale_out_cooldown_minutes
    scale_in_cooldown_minutes  = var.scale_in_cooldown_minutes
  }
  head_principal_id = try(azurerm_user_assigned_identity.autoscaler[0].principal_id, null)
  autostop = {
    enabled                   = local.autostop_enabled
    role_definition_id        = try(azurerm_role_definition.autostop[0].role_definition_resource_id, "")
    scale_set_assignment_name = uuidv5(local.arm_guid_namespace, join("-", [each.value.scale_set_id, local.autostop_role_definition_id]))
    autoscale_assignment_name = uuidv5(local.arm_guid_namespace, join("-", ["${local.resource_group_id}/providers/Microsoft.Insights/autoscalesettings/${each.value.autoscale_name}", local.autostop_role_definition_id]))
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
