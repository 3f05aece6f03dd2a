# Who belongs to the cluster: the Azure identity the VMs run as, and the Ray token every node and
# the driver present.

# One user-assigned identity for the head and every worker. Its only role: reading the cluster
# token's secret in the cluster's Key Vault (keyvault.tf).
resource "azurerm_user_assigned_identity" "this" {
  name                = "${var.name_prefix}-id"
  location            = var.location
  resource_group_name = local.resource_group_name
  tags                = var.tags
}

# The head's own identity, attached to the head only, never to the workers. With
# scaling_mode = "ray" Ray's autoscaler on the head changes the workers' scale set with it (raises
# its capacity, deletes the instances it drained); with autostop_idle_minutes > 0 the head stops
# the cluster with it (below). Every job on the head can ask the metadata service for its token,
# so a job can do whatever these roles allow. (Named "autoscaler" as it was first; renaming it
# would replace the identity and the head of clusters already running.)
resource "azurerm_user_assigned_identity" "autoscaler" {
  count               = local.head_identity_enabled ? 1 : 0
  name                = "${var.name_prefix}-autoscaler-id"
  location            = var.location
  resource_group_name = local.resource_group_name
  tags                = var.tags
}

# scaling_mode = "ray": the head's identity gets Virtual Machine Contributor on every worker
# pool's scale set (modules/worker_pool: autoscaler_scale_set, one per pool): Ray's autoscaler
# has one node type per pool (AUTOSCALER_POOLS).

# ---------------------------------------------------------------------------------------------
# Autostop (autostop_idle_minutes > 0): when the cluster has been idle that long, the head sets
# the workers' capacity to 0, turns the workers' CPU autoscale off (scaling_mode = "cpu"; it
# would bring them back) and deallocates itself. No built-in role is that narrow (Virtual
# Machine Contributor also deletes VMs, changes disks and NICs, runs commands), so a custom role
# holds exactly those actions, and each assignment names one resource: the head VM, the scale
# set, the autoscale setting. There is no narrower action for a scale set's capacity than
# virtualMachineScaleSets/write, which changes the whole scale set model.
# ---------------------------------------------------------------------------------------------

locals {
  autostop_role_actions = [
    "Microsoft.Compute/virtualMachines/read",
    "Microsoft.Compute/virtualMachines/deallocate/action",
    "Microsoft.Compute/virtualMachineScaleSets/read",
    "Microsoft.Compute/virtualMachineScaleSets/write",
    "Microsoft.Insights/autoscaleSettings/read",
    "Microsoft.Insights/autoscaleSettings/write",
  ]
  # Deterministic GUIDs, made as ARM's guid() makes them (a version 5 UUID in its namespace over
  # the arguments joined by '-'), from the same arguments as infra/bicep's guid() calls.
  arm_guid_namespace          = "11fb06fb-712d-4ddd-98c7-e71bbd588830"
  autostop_role_definition_id = uuidv5(local.arm_guid_namespace, join("-", [local.resource_group_id, var.name_prefix, "ray-cluster-autostop"]))
}

# Custom role names are unique in the tenant: the cluster's prefix and resource group name it.
resource "azurerm_role_definition" "autostop" {
  count              = local.autostop_enabled ? 1 : 0
  role_definition_id = local.autostop_role_definition_id
  name               = "Ray cluster autostop (${var.name_prefix} in ${local.resource_group_id})"
  scope              = local.resource_group_id
  description        = "The Ray cluster's head stops the cluster when idle: deallocate the head VM, set the workers' scale set capacity, turn the workers' autoscale setting off and on. Assigned on those resources only."

  permissions {
    actions     = local.autostop_role_actions
    not_actions = []
  }

  assignable_scopes = [local.resource_group_id]

  # The resource group exists before its role definition.
  depends_on = [azurerm_resource_group.this]
}

resource "azurerm_role_assignment" "autostop_head" {
  count              = local.autostop_enabled ? 1 : 0
  name               = uuidv5(local.arm_guid_namespace, join("-", [azurerm_linux_virtual_machine.head.id, local.autostop_role_definition_id]))
  scope              = azurerm_linux_virtual_machine.head.id
  role_definition_id = azurerm_role_definition.autostop[0].role_definition_resource_id
  principal_id       = azurerm_user_assigned_identity.autoscaler[0].principal_id
  principal_type     = "ServicePrincipal"
}

# Its assignments on every worker pool's scale set and autoscale setting are the pool's
# (modules/worker_pool: autostop_scale_set, autostop_autoscale), named in workers.tf from
# the same arguments as Bicep's guid() calls.

# scaling_mode = "ray" with a Flexible pool: Ray's autoscaler matches Ray nodes to VMs by private
# IP, and a Flexible VM's network interface is a resource of its own in the resource group,
# outside the scale set its role is on. No built-in role reads interfaces only (Reader reads
# every resource): a custom role with that one action, assigned on the resource group. (Every
# pool is Flexible unless it pins Uniform, the default pool "workers" too: checks.tf.)
locals {
  interface_reader_enabled            = var.scaling_mode == "ray" && contains(values(local.worker_pool_modes), "Flexible")
  interface_reader_role_definition_id = uuidv5(local.arm_guid_namespace, join("-", [local.resource_group_id, var.name_prefix, "ray-cluster-interface-reader"]))
}

resource "azurerm_role_definition" "interface_reader" {
  count              = local.interface_reader_enabled ? 1 : 0
  role_definition_id = local.interface_reader_role_definition_id
  name               = "Ray cluster interface reader (${var.name_prefix} in ${local.resource_group_id})"
  scope              = local.resource_group_id
  description        = "Ray's autoscaler on the head reads the private IPs of the Flexible worker pools' VMs."

  permissions {
    actions     = ["Microsoft.Network/networkInterfaces/read"]
    not_actions = []
  }

  assignable_scopes = [local.resource_group_id]

  depends_on = [azurerm_resource_group.this]
}

resource "azurerm_role_assignment" "interface_reader" {
  count              = local.interface_reader_enabled ? 1 : 0
  name               = uuidv5(local.arm_guid_namespace, join("-", [local.resource_group_id, "${local.resource_group_id}/providers/Microsoft.Authorization/roleDefinitions/${local.interface_reader_role_definition_id}"]))
  scope              = local.resource_group_id
  role_definition_id = azurerm_role_definition.interface_reader[0].role_definition_resource_id
  principal_id       = azurerm_user_assigned_identity.autoscaler[0].principal_id
  principal_type     = "ServicePrincipal"
}
