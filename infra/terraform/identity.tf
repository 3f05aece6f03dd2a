# Who belongs to the cluster: the Azure identity the VMs run as, and the Ray token every node and
# the driver present.

# One user-assigned identity for the head and every worker, so that access to storage, a
# registry or Key Vault is granted once (role assignments are left to the user).
resource "azurerm_user_assigned_identity" "this" {
  name                = "${var.name_prefix}-id"
  location            = var.location
  resource_group_name = local.resource_group_name
  tags                = var.tags
}

# The Ray cluster token (RAY_AUTH_MODE=token), generated at apply time. random_bytes keeps `hex`
# sensitive, so it never shows in plan output; it is written to the nodes through custom data and
# read by the driver from the head over SSH, so no output carries it. Like custom data it is
# stored in the Terraform state: keep the state private. (An ephemeral value would stay out of
# the state, but custom_data is not a write-only argument, so it cannot take one.)
resource "random_bytes" "cluster_token" {
  length = 32
}
