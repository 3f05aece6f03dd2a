# The optional results storage (results.tf): none by default (results stay on the head's disk),
# and with an account's id the private endpoint, the DNS zone, the nodes' role on the results
# container and the deploy value. Plan-level, mocked providers (see cluster.tftest.hcl for why
# random stays real); runs on GitHub.

mock_provider "azurerm" {
  override_during = plan

  mock_resource "azurerm_public_ip" {
    defaults = {
      ip_address = "20.61.1.2"
    }
  }

  mock_data "azurerm_client_config" {
    defaults = {
      tenant_id       = "00000000-0000-4000-8000-000000000001"
      subscription_id = "00000000-0000-4000-8000-000000000002"
      object_id       = "00000000-0000-4000-8000-000000000003"
      client_id       = "00000000-0000-4000-8000-000000000004"
    }
  }

  mock_resource "azurerm_key_vault" {
    defaults = {
      id        = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/ray-rl-rg/providers/Microsoft.KeyVault/vaults/ray-kv-0123456789abcdef012"
      vault_uri = "https://ray-kv-0123456789abcdef012.vault.azure.net/"
    }
  }

  mock_resource "azurerm_user_assigned_identity" {
    defaults = {
      client_id    = "11111111-2222-4333-8444-555555555555"
      principal_id = "66666666-7777-4888-8999-aaaaaaaaaaaa"
    }
  }
}

mock_provider "time" {
  override_during = plan

  mock_resource "time_offset" {
    defaults = {
      rfc3339 = "2027-01-01T00:00:00Z"
    }
  }
}

variables {
  location             = "westeurope"
  allowed_ssh_cidrs    = ["203.0.113.7/32", "198.51.100.0/24"]
  admin_ssh_public_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIP4S9mbJDa3rbswrgZDZPW0SvS6zPUB0LvnB0IkRZLgc you@example"
}

run "no_results_storage_by_default" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  assert {
    condition     = length(azurerm_private_endpoint.blob) == 0 && length(azurerm_private_dns_zone.blob) == 0 && length(azurerm_private_dns_zone_virtual_network_link.blob) == 0 && length(azurerm_role_assignment.nodes_results_contributor) == 0
    error_message = "Without results_storage_account_id the cluster has no endpoint, zone or role for results storage."
  }

  assert {
    condition     = jsondecode(base64decode(one(regex("path: /etc/ray-cluster/deploy.json\\n(?:.*\\n){0,3}?\\s*content: \"([A-Za-z0-9+/=]+)\"", base64decode(azurerm_linux_virtual_machine.head.custom_data))))).RESULTS_URL == "" && output.results_url == ""
    error_message = "Without results storage the nodes get an empty RESULTS_URL, and results_url is empty."
  }
}

run "results_storage_by_id" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  variables {
    results_storage_account_id = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/ray-results/providers/Microsoft.Storage/storageAccounts/rayres0123456789abcdef01"
  }

  assert {
    condition     = jsondecode(base64decode(one(regex("path: /etc/ray-cluster/deploy.json\\n(?:.*\\n){0,3}?\\s*content: \"([A-Za-z0-9+/=]+)\"", base64decode(azurerm_linux_virtual_machine.head.custom_data))))).RESULTS_URL == "https://rayres0123456789abcdef01.blob.core.windows.net/results" && output.results_url == "https://rayres0123456789abcdef01.blob.core.windows.net/results"
    error_message = "The nodes get the results container's URL, and so does the output."
  }

  assert {
    condition     = azurerm_private_endpoint.blob[0].private_service_connection[0].private_connection_resource_id == var.results_storage_account_id && azurerm_private_endpoint.blob[0].private_service_connection[0].subresource_names == tolist(["blob"])
    error_message = "The private endpoint connects to the account's blob service."
  }

  assert {
    condition     = azurerm_private_endpoint.blob[0].ip_configuration[0].private_ip_address == "10.42.1.6" && azurerm_private_endpoint.blob[0].subnet_id == azurerm_subnet.this.id
    error_message = "The endpoint takes the cluster subnet's 6th host."
  }

  assert {
    condition     = azurerm_private_dns_zone.blob[0].name == "privatelink.blob.core.windows.net" && azurerm_private_dns_zone_virtual_network_link.blob[0].virtual_network_id == azurerm_virtual_network.this.id
    error_message = "The privatelink.blob zone is linked to the cluster's network."
  }

  assert {
    condition     = azurerm_role_assignment.nodes_results_contributor[0].scope == "${var.results_storage_account_id}/blobServices/default/containers/results" && azurerm_role_assignment.nodes_results_contributor[0].role_definition_name == "Storage Blob Data Contributor" && azurerm_role_assignment.nodes_results_contributor[0].principal_id == "66666666-7777-4888-8999-aaaaaaaaaaaa"
    error_message = "The nodes' identity gets Storage Blob Data Contributor on the results container only."
  }
}

run "a_wrong_results_storage_account_id_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  variables {
    results_storage_account_id = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/ray-results/providers/Microsoft.KeyVault/vaults/ray-kv"
  }

  expect_failures = [var.results_storage_account_id]
}
