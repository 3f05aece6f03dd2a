# Results storage that outlives every cluster: a storage account with one container, `results`,
# in a resource group of its own and with a state of its own. The cluster stacks take the
# account's id (results_storage_account_id / resultsStorageAccountId) and add, in the cluster's
# resource group, a private endpoint to it and the nodes' role on the container; destroying a
# cluster never touches this. Deleting the results: `terraform destroy` here (or deleting the
# resource group).
#
# Entra ID only: no shared keys, so no SAS either (a SAS is signed with a key, or a user
# delegation key that itself needs Entra ID). The public endpoint is off unless allowed_cidrs
# lists addresses (then only those get through), as the cluster's Key Vault firewall does.

data "azurerm_client_config" "current" {}

resource "azurerm_resource_group" "this" {
  name     = var.resource_group_name
  location = var.location
  tags     = var.tags
}

locals {
  # Storage account names are global: 3-24 lower-case letters and digits. Derived from the
  # subscription and the resource group, so a re-apply keeps it and another group differs.
  account_name = "${var.name_prefix}res${substr(sha1("${data.azurerm_client_config.current.subscription_id}/${var.resource_group_name}"), 0, 24 - length(var.name_prefix) - 3)}"
  # Azure Storage takes a single address as an IP, not as a /32 (it refuses /31 and /32 ranges).
  ip_rules = [for c in var.allowed_cidrs : endswith(c, "/32") ? split("/", c)[0] : c]
  deployer_roles = {
    reader      = "Storage Blob Data Reader"
    contributor = "Storage Blob Data Contributor"
  }
}

resource "azurerm_storage_account" "this" {
  #checkov:skip=CKV_AZURE_206:Results are copies a job can write again (its local folder keeps them until the run ends); geo-replication is a cost choice, not a default: change account_replication_type here for it.
  #checkov:skip=CKV2_AZURE_1:Encrypted at rest with Microsoft-managed keys; customer-managed keys need a Key Vault that outlives this account and are not wanted for training results.
  #checkov:skip=CKV_AZURE_33:No queues are used; the account holds blobs only.
  #checkov:skip=CKV2_AZURE_21:Blob read logging needs a Log Analytics workspace or another account; access is Entra ID only and visible in the activity log of its role assignments.
  #checkov:skip=CKV2_AZURE_33:The clusters reach the account through private endpoints of their own (the cluster stacks create them in their resource groups, results_storage_account_id), not one here.
  #checkov:skip=CKV_AZURE_36:No Azure service reads or writes the results: the trusted-services bypass stays off (bypass None), the nodes come through private endpoints.
  #checkov:skip=CKV2_AZURE_41:No SAS can be made: shared keys are off (shared_access_key_enabled = false), so a SAS expiration policy has nothing to limit.
  name                     = local.account_name
  resource_group_name      = azurerm_resource_group.this.name
  location                 = var.location
  account_kind             = "StorageV2"
  account_tier             = "Standard"
  account_replication_type = "LRS"
  access_tier              = "Hot"
  tags                     = var.tags

  https_traffic_only_enabled       = true
  min_tls_version                  = "TLS1_2"
  allow_nested_items_to_be_public  = false
  shared_access_key_enabled        = false
  default_to_oauth_authentication  = true
  local_user_enabled               = false
  cross_tenant_replication_enabled = false
  public_network_access_enabled    = length(var.allowed_cidrs) > 0

  network_rules {
    default_action = "Deny"
    bypass         = ["None"]
    ip_rules       = local.ip_rules
  }

  blob_properties {
    delete_retention_policy {
      days = var.soft_delete_days
    }
    container_delete_retention_policy {
      days = var.soft_delete_days
    }
  }
}

# Created through Resource Manager (storage_account_id), so it needs neither the public endpoint
# nor a key.
resource "azurerm_storage_container" "results" {
  name                  = "results"
  storage_account_id    = azurerm_storage_account.this.id
  container_access_type = "private"
}

# The deploying user's access to the results (deployer_role), on the container only.
resource "azurerm_role_assignment" "deployer" {
  count                = var.deployer_role == "none" ? 0 : 1
  scope                = azurerm_storage_container.results.id
  role_definition_name = local.deployer_roles[var.deployer_role]
  principal_id         = data.azurerm_client_config.current.object_id
}
