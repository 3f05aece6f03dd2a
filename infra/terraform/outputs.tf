# GENERATED from modules/cluster by scripts/terraform_root.py. Do not edit: change the
# module and run `.venv/bin/python scripts/terraform_root.py` (tests/unit/
# test_terraform_module.py fails while this file is stale).
# This file: every output of the module passed through (the driver reads them here).


output "head_public_ip" {
  description = "Public IP address of the head (SSH only, from allowed_ssh_cidrs)."
  value       = module.cluster.head_public_ip
}

output "head_private_ip" {
  description = "Private IP address of the head in the cluster subnet (Ray's GCS listens there, port 6379)."
  value       = module.cluster.head_private_ip
}

output "admin_username" {
  description = "Admin user on every VM; the user the driver connects as."
  value       = module.cluster.admin_username
}

output "ssh_command" {
  description = "SSH to the head."
  value       = module.cluster.ssh_command
}

output "scale_set_id" {
  description = "Resource ID of the first worker pool's scale set (the only one without worker_pools), for az vmss commands (--ids); every pool's: worker_pools."
  value       = module.cluster.scale_set_id
}

output "worker_pools" {
  description = "Every worker pool by name: its scale set's id and name, and its CPU autoscale setting's id (\"\" with scaling_mode = \"ray\")."
  value       = module.cluster.worker_pools
}

output "head_vm_id" {
  description = "Resource ID of the head VM: `python -m driver start` starts it again after autostop deallocated it."
  value       = module.cluster.head_vm_id
}

output "autoscale_setting_id" {
  description = "Resource ID of the first worker pool's CPU autoscale setting (scaling_mode = \"cpu\"), which autostop turns off and `python -m driver start` on again; \"\" with scaling_mode = \"ray\". Every pool's: worker_pools."
  value       = module.cluster.autoscale_setting_id
}

output "resource_group_name" {
  description = "Resource group that holds the cluster."
  value       = module.cluster.resource_group_name
}

output "driver_command" {
  description = "Submit the CartPole example to this cluster (from the repository root)."
  value       = module.cluster.driver_command
}

output "results_url" {
  description = "URL of the results container the jobs write to (RAYDRIVER_RESULTS_URL on the nodes), \"\" without results_storage_account_id (results on the head's disk only)."
  value       = module.cluster.results_url
}

output "resource_group_id" {
  description = "Resource ID of the resource group that holds the cluster."
  value       = module.cluster.resource_group_id
}

output "vnet_id" {
  description = "Resource ID of the cluster's virtual network (vnet_address_space), e.g. for a peering."
  value       = module.cluster.vnet_id
}

output "vnet_name" {
  description = "Name of the cluster's virtual network."
  value       = module.cluster.vnet_name
}

output "subnet_id" {
  description = "Resource ID of the cluster subnet (subnet_address_prefix): the head, every worker pool and the private endpoints are in it."
  value       = module.cluster.subnet_id
}

output "network_security_group_id" {
  description = "Resource ID of the network security group on the cluster subnet."
  value       = module.cluster.network_security_group_id
}

output "scale_set_ids" {
  description = "Resource ID of every worker pool's scale set, by pool name (the pool \"workers\" without worker_pools)."
  value       = module.cluster.scale_set_ids
}

output "node_identity" {
  description = "The user-assigned identity the head and every worker run as (it reads the cluster token's secret): its resource id, principal_id (for role assignments) and client_id (for azure-identity on the nodes)."
  value       = module.cluster.node_identity
}

output "head_identity" {
  description = "The head's own identity (Ray's autoscaler with scaling_mode = \"ray\", autostop with autostop_idle_minutes > 0): id, principal_id and client_id; null when neither is on (the head has none)."
  value       = module.cluster.head_identity
}

output "key_vault_id" {
  description = "Resource ID of the cluster's Key Vault (it holds the cluster token's secret)."
  value       = module.cluster.key_vault_id
}

output "key_vault_uri" {
  description = "URI of the cluster's Key Vault."
  value       = module.cluster.key_vault_uri
}
