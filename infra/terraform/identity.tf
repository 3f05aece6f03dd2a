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
