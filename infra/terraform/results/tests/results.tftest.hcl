# Plan-level tests of the results storage stack with a mocked provider: no Azure credentials,
# nothing is created. Runs on GitHub (.github/workflows/terraform.yml).

mock_provider "azurerm" {
  override_during = plan

  mock_data "azurerm_client_config" {
    defaults = {
      tenant_id       = "00000000-0000-4000-8000-000000000001"
      subscription_id = "00000000-0000-4000-8000-000000000002"
      object_id       = "00000000-0000-4000-8000-000000000003"
      client_id       = "00000000-0000-4000-8000-000000000004"
    }
  }

  mock_resource "azurerm_storage_account" {
    defaults = {
      id                    = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/ray-results/providers/Microsoft.Storage/storageAccounts/rayres0123456789abcdef01"
      primary_blob_endpoint = "https://rayres0123456789abcdef01.blob.core.windows.net/"
    }
  }

  mock_resource "azurerm_storage_container" {
    defaults = {
      id = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/ray-results/providers/Microsoft.Storage/storageAccounts/rayres0123456789abcdef01/blobServices/default/containers/results"
    }
  }
}

variables {
  location = "westeurope"
}

run "private_entra_id_only_account_with_soft_delete" {
  command = plan

  assert {
    condition     = azurerm_storage_account.this.public_network_access_enabled == false
    error_message = "Without allowed_cidrs the public endpoint must be off."
  }

  assert {
    condition     = azurerm_storage_account.this.shared_access_key_enabled == false && azurerm_storage_account.this.min_tls_version == "TLS1_2" && azurerm_storage_account.this.allow_nested_items_to_be_public == false
    error_message = "Entra ID only, TLS 1.2, no public blobs."
  }

  assert {
    condition     = azurerm_storage_account.this.blob_properties[0].delete_retention_policy[0].days == 14 && azurerm_storage_account.this.blob_properties[0].container_delete_retention_policy[0].days == 14
    error_message = "Blob and container soft delete keep 14 days by default."
  }

  assert {
    condition     = can(regex("^rayres[0-9a-f]{18}$", azurerm_storage_account.this.name))
    error_message = "The account's name is the prefix, res and 18 hexadecimal characters (24 in all)."
  }

  assert {
    condition     = azurerm_storage_container.results.name == "results" && azurerm_storage_container.results.container_access_type == "private"
    error_message = "One private container, results."
  }

  assert {
    condition     = azurerm_role_assignment.deployer[0].role_definition_name == "Storage Blob Data Reader" && azurerm_role_assignment.deployer[0].scope == azurerm_storage_container.results.id
    error_message = "The deployer reads the results container's blobs by default, on the container only."
  }

  assert {
    condition     = output.container_url == "https://rayres0123456789abcdef01.blob.core.windows.net/results"
    error_message = "container_url is the blob endpoint and the container."
  }
}

run "allowed_cidrs_open_the_firewall_to_those_only" {
  command = plan

  variables {
    allowed_cidrs    = ["203.0.113.7/32", "198.51.100.0/24"]
    soft_delete_days = 30
    deployer_role    = "contributor"
  }

  assert {
    condition     = azurerm_storage_account.this.public_network_access_enabled == true
    error_message = "allowed_cidrs turn the public endpoint on."
  }

  assert {
    condition     = azurerm_storage_account.this.network_rules[0].default_action == "Deny" && toset(azurerm_storage_account.this.network_rules[0].ip_rules) == toset(["203.0.113.7", "198.51.100.0/24"])
    error_message = "Deny by default, a /32 as its address, the rest as ranges."
  }

  assert {
    condition     = azurerm_storage_account.this.blob_properties[0].delete_retention_policy[0].days == 30
    error_message = "soft_delete_days sets the retention."
  }

  assert {
    condition     = azurerm_role_assignment.deployer[0].role_definition_name == "Storage Blob Data Contributor"
    error_message = "deployer_role = contributor grants Storage Blob Data Contributor."
  }
}

run "no_deployer_role" {
  command = plan

  variables {
    deployer_role = "none"
  }

  assert {
    condition     = length(azurerm_role_assignment.deployer) == 0
    error_message = "deployer_role = none grants nothing."
  }
}

run "private_ranges_are_refused" {
  command = plan

  variables {
    allowed_cidrs = ["10.0.0.0/24"]
  }

  expect_failures = [var.allowed_cidrs]
}

run "a_31_is_refused" {
  command = plan

  variables {
    allowed_cidrs = ["203.0.113.6/31"]
  }

  expect_failures = [var.allowed_cidrs]
}
