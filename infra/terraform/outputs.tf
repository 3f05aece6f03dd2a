# Outputs. The names are a contract: `python -m driver --terraform-dir` reads head_public_ip and
# admin_username (head_vm_id, scale_set_id and autoscale_setting_id to start a stopped cluster;
# worker_pools for every pool's),
# and the Bicep stack has the same outputs in camelCase (headPublicIp, ...).

output "head_public_ip" {
  description = "Public IP address of the head (SSH only, from allowed_ssh_cidrs)."
  value       = azurerm_public_ip.head.ip_address
}

output "head_private_ip" {
  description = "Private IP address of the head in the cluster subnet (Ray's GCS listens there, port 6379)."
  value       = azurerm_network_interface.head.ip_configuration[0].private_ip_address
}

output "admin_username" {
  description = "Admin user on every VM; the user the driver connects as."
  value       = var.admin_username
}

output "ssh_command" {
  description = "SSH to the head."
  value       = "ssh ${local.ssh_target}"
}

output "scale_set_id" {
  description = "Resource ID of the first worker pool's scale set (the only one without worker_pools), for az vmss commands (--ids); every pool's: worker_pools."
  value       = module.worker_pool[local.first_pool_name].scale_set_id
}

output "worker_pools" {
  description = "Every worker pool by name: its scale set's id and name, and its CPU autoscale setting's id (\"\" with scaling_mode = \"ray\")."
  value = { for name, pool in module.worker_pool : name => {
    scale_set_id         = pool.scale_set_id
    scale_set_name       = pool.scale_set_name
    autoscale_setting_id = pool.autoscale_setting_id
  } }
}

output "head_vm_id" {
  description = "Resource ID of the head VM: `python -m driver start` starts it again after autostop deallocated it."
  value       = azurerm_linux_virtual_machine.head.id
}

output "autoscale_setting_id" {
  description = "Resource ID of the first worker pool's CPU autoscale setting (scaling_mode = \"cpu\"), which autostop turns off and `python -m driver start` on again; \"\" with scaling_mode = \"ray\". Every pool's: worker_pools."
  value       = module.worker_pool[local.first_pool_name].autoscale_setting_id
}

output "resource_group_name" {
  description = "Resource group that holds the cluster."
  value       = local.resource_group_name
}

output "driver_command" {
  description = "Submit the CartPole example to this cluster (from the repository root)."
  value       = "python -m driver submit examples/cartpole/train.py --head ${local.ssh_target}"
}

output "results_url" {
  description = "URL of the results container the jobs write to (RAYDRIVER_RESULTS_URL on the nodes), \"\" without results_storage_account_id (results on the head's disk only)."
  value       = local.results_url
}
