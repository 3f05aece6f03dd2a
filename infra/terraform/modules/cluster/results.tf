# Results storage (optional): a storage account that outlives the cluster keeps the jobs' results.
# The separate stack infra/terraform/results creates it, in its own resource group with its own
# state; this stack only takes its id (results_storage_account_id) and adds what belongs to the
# cluster, so `terraform destroy` here removes these and never the account or its blobs:
# - a private endpoint to the account's blob service in the cluster subnet, and the
#   privatelink.blob.core.windows.net zone linked to the network, so the nodes reach the account
#   (which refuses the public Internet) exactly as they reach the Key Vault (keyvault.tf);
# - Storage Blob Data Contributor for the nodes' identity on the `results` container only;
# - the deploy value RESULTS_URL (locals.tf), which jobs get as RAYDRIVER_RESULTS_URL.
# Without an id (the default) none of these exist and results stay on the head's disk.

locals {
  results_enabled = var.results_storage_account_id != ""
  # The account's name is the id's last segment; its container is `results` (the results stack's).
  results_account_name = local.results_enabled ? element(split("/", var.results_storage_account_id), 8) : ""
  results_container_id = "${var.results_storage_account_id}/blobServices/default/containers/results"
  # The blob endpoint's suffix in the stack's cloud, known by the vault's (locals.tf's
  # arm_endpoint does the same; Bicep: environment().suffixes.storage).
  storage_suffixes_by_key_vault_suffix = {
    "vault.azure.net"         = "core.windows.net"
    "vault.usgovcloudapi.net" = "core.usgovcloudapi.net"
    "vault.azure.cn"          = "core.chinacloudapi.cn"
  }
  storage_suffix = lookup(local.storage_suffixes_by_key_vault_suffix, local.key_vault_dns_suffix, "core.windows.net")
  results_url    = local.results_enabled ? "https://${local.results_account_name}.blob.${local.storage_suffix}/results" : ""
  # The blob endpoint's private endpoint takes the subnet's 6th host (the head the 4th, the
  # vault's endpoint the 5th).
  results_private_ip = cidrhost(var.subnet_address_prefix, 6)
}

resource "azurerm_private_dns_zone" "blob" {
  count               = local.results_enabled ? 1 : 0
  name                = "privatelink.blob.core.windows.net"
  resource_group_name = local.resource_group_name
  tags                = var.tags
}

resource "azurerm_private_dns_zone_virtual_network_link" "blob" {
  count                 = local.results_enabled ? 1 : 0
  name                  = "${var.name_prefix}-blob-dns"
  resource_group_name   = local.resource_group_name
  private_dns_zone_name = azurerm_private_dns_zone.blob[0].name
  virtual_network_id    = azurerm_virtual_network.this.id
  registration_enabled  = false
  tags                  = var.tags
}

resource "azurerm_private_endpoint" "blob" {
  count                         = local.results_enabled ? 1 : 0
  name                          = "${var.name_prefix}-blob-pe"
  location                      = var.location
  resource_group_name           = local.resource_group_name
  subnet_id                     = azurerm_subnet.this.id
  custom_network_interface_name = "${var.name_prefix}-blob-pe-nic"
  tags                          = var.tags

  private_service_connection {
    name                           = "${var.name_prefix}-blob-psc"
    private_connection_resource_id = var.results_storage_account_id
    subresource_names              = ["blob"]
    is_manual_connection           = false
  }

  # The zone group writes the account's A record into the private zone.
  private_dns_zone_group {
    name                 = "blob"
    private_dns_zone_ids = [azurerm_private_dns_zone.blob[0].id]
  }

  # A fixed address, like the vault's endpoint: a dynamic one could take the head's.
  ip_configuration {
    name               = "blob"
    private_ip_address = local.results_private_ip
    subresource_name   = "blob"
    member_name        = "blob"
  }
}

# The nodes' identity reads and writes blobs of the results container, nothing else. (A job
# started before the assignment has propagated gets one `results store: ...` line and keeps its
# local folder: examples/harness/blobsync.py.)
resource "azurerm_role_assignment" "nodes_results_contributor" {
  count                = local.results_enabled ? 1 : 0
  scope                = local.results_container_id
  role_definition_name = "Storage Blob Data Contributor"
  principal_id         = azurerm_user_assigned_identity.this.principal_id
  principal_type       = "ServicePrincipal"
}
