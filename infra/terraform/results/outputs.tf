output "storage_account_id" {
  description = "Resource id of the results storage account: give it to a cluster as results_storage_account_id (Bicep: resultsStorageAccountId)."
  value       = azurerm_storage_account.this.id
}

output "container_url" {
  description = "URL of the results container (what the clusters' nodes get as RAYDRIVER_RESULTS_URL)."
  value       = "${azurerm_storage_account.this.primary_blob_endpoint}${azurerm_storage_container.results.name}"
}

output "resource_group_name" {
  description = "Resource group that holds the results storage (deleting it deletes every result)."
  value       = azurerm_resource_group.this.name
}
