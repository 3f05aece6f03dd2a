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

# scaling_mode = "ray": Ray's autoscaler on the head changes the workers' scale set (raises its
# capacity, deletes the instances it drained) with an identity of its own, attached to the head
# only and allowed on that one scale set only. The workers never get it. Every job on the head
# can ask the metadata service for its token, so a job can change the worker count too, as it
# can already run code on every worker through Ray.
resource "azurerm_user_assigned_identity" "autoscaler" {
  count               = var.scaling_mode == "ray" ? 1 : 0
  name                = "${var.name_prefix}-autoscaler-id"
  location            = var.location
  resource_group_name = local.resource_group_name
  tags                = var.tags
}

resource "azurerm_role_assignment" "autoscaler_scale_set" {
  count                = var.scaling_mode == "ray" ? 1 : 0
  scope                = azurerm_linux_virtual_machine_scale_set.workers.id
  role_definition_name = "Virtual Machine Contributor"
  principal_id         = azurerm_user_assigned_identity.autoscaler[0].principal_id
  principal_type       = "ServicePrincipal"
}
