# GENERATED from modules/cluster by scripts/terraform_root.py. Do not edit: change the
# module and run `.venv/bin/python scripts/terraform_root.py` (tests/unit/
# test_terraform_module.py fails while this file is stale).
# This file: the module called with every variable passed through.

# The cluster itself is the module (modules/cluster: every resource, check and
# output); this root adds the azurerm provider (versions.tf) and the state. Calling the
# module from your own root instead: examples/as-module and README.md.
module "cluster" {
  source = "./modules/cluster"

  location                                     = var.location
  allowed_ssh_cidrs                            = var.allowed_ssh_cidrs
  admin_ssh_public_key                         = var.admin_ssh_public_key
  resource_group_name                          = var.resource_group_name
  create_resource_group                        = var.create_resource_group
  name_prefix                                  = var.name_prefix
  tags                                         = var.tags
  vnet_address_space                           = var.vnet_address_space
  subnet_address_prefix                        = var.subnet_address_prefix
  tcp_idle_timeout_minutes                     = var.tcp_idle_timeout_minutes
  admin_username                               = var.admin_username
  os_image                                     = var.os_image
  node_image_id                                = var.node_image_id
  create_image_gallery                         = var.create_image_gallery
  head_vm_size                                 = var.head_vm_size
  head_priority                                = var.head_priority
  head_max_price                               = var.head_max_price
  worker_vm_size                               = var.worker_vm_size
  encryption_at_host_enabled                   = var.encryption_at_host_enabled
  scaling_mode                                 = var.scaling_mode
  ray_idle_timeout_minutes                     = var.ray_idle_timeout_minutes
  autostop_idle_minutes                        = var.autostop_idle_minutes
  worker_min_count                             = var.worker_min_count
  worker_default_count                         = var.worker_default_count
  worker_max_count                             = var.worker_max_count
  scale_out_cpu_percent                        = var.scale_out_cpu_percent
  scale_in_cpu_percent                         = var.scale_in_cpu_percent
  scale_out_cooldown_minutes                   = var.scale_out_cooldown_minutes
  scale_in_cooldown_minutes                    = var.scale_in_cooldown_minutes
  worker_spot_enabled                          = var.worker_spot_enabled
  worker_termination_notice_minutes            = var.worker_termination_notice_minutes
  worker_automatic_repair_enabled              = var.worker_automatic_repair_enabled
  worker_automatic_repair_grace_period_minutes = var.worker_automatic_repair_grace_period_minutes
  worker_automatic_repair_action               = var.worker_automatic_repair_action
  worker_pools                                 = var.worker_pools
  key_vault_allowed_cidrs                      = var.key_vault_allowed_cidrs
  cluster_token_version                        = var.cluster_token_version
  cluster_token_expiration_days                = var.cluster_token_expiration_days
  rbac_propagation_wait_seconds                = var.rbac_propagation_wait_seconds
  extra_pip_packages                           = var.extra_pip_packages
  extra_apt_packages                           = var.extra_apt_packages
  pip_index_url                                = var.pip_index_url
  torch_index_url                              = var.torch_index_url
  apt_source                                   = var.apt_source
  results_storage_account_id                   = var.results_storage_account_id
}
