# The root (infra/terraform) and a user's own root (examples/as-module) calling the cluster
# module: every other test file runs against the module itself (`module { source =
# "./modules/cluster" }` in each run), this one against the callers: the root passes every
# variable and output through, its copied validations refuse what the module refuses, and a
# root of one's own with a provider block gets the ids it wires on. Plan-level, mocked providers
# (see cluster.tftest.hcl for why random stays real); runs on GitHub.

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

run "the_root_passes_the_outputs_through" {
  command = plan

  assert {
    condition     = output.admin_username == "azureuser" && output.ssh_command == "ssh azureuser@20.61.1.2"
    error_message = "The root's admin_username / ssh_command are not the module's."
  }

  assert {
    condition     = join(",", keys(output.scale_set_ids)) == "workers" && join(",", keys(output.worker_pools)) == "workers"
    error_message = "Without worker_pools the root outputs one pool, \"workers\"."
  }

  assert {
    condition     = output.node_identity.client_id == "11111111-2222-4333-8444-555555555555" && output.node_identity.principal_id == "66666666-7777-4888-8999-aaaaaaaaaaaa"
    error_message = "node_identity is not the nodes' identity."
  }

  assert {
    condition     = output.head_identity.principal_id == "66666666-7777-4888-8999-aaaaaaaaaaaa"
    error_message = "Autostop is on by default: the head has an identity of its own."
  }

  assert {
    condition     = output.key_vault_id == "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/ray-rl-rg/providers/Microsoft.KeyVault/vaults/ray-kv-0123456789abcdef012"
    error_message = "key_vault_id is not the cluster's Key Vault."
  }
}

run "the_root_passes_the_variables_through" {
  command = plan

  variables {
    autostop_idle_minutes = 0
    worker_pools = {
      cpu = { spot_enabled = true, max_count = 6 }
      gpu = { vm_size = "Standard_NC4as_T4_v3", min_count = 0, default_count = 0, max_count = 1 }
    }
  }

  assert {
    condition     = join(",", keys(output.scale_set_ids)) == "cpu,gpu" && output.head_identity == null
    error_message = "worker_pools / autostop_idle_minutes did not reach the module (without autostop, in scaling_mode cpu, the head has no identity)."
  }
}

run "the_root_refuses_what_the_module_refuses" {
  command = plan

  variables {
    allowed_ssh_cidrs = ["0.0.0.0/0"]
  }

  expect_failures = [var.allowed_ssh_cidrs]
}

run "a_root_of_ones_own_wires_on_the_module_outputs" {
  command = plan

  module {
    source = "./examples/as-module"
  }

  assert {
    condition     = join(",", keys(output.cluster_scale_set_ids)) == "cpu,gpu"
    error_message = "examples/as-module: one scale set per pool."
  }

  assert {
    condition     = output.node_principal_id == "66666666-7777-4888-8999-aaaaaaaaaaaa" && output.ssh_command == "ssh azureuser@20.61.1.2"
    error_message = "examples/as-module: the module's outputs did not come through."
  }
}
