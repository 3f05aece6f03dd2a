# GENERATED from modules/cluster by scripts/terraform_root.py. Do not edit: change the
# module and run `.venv/bin/python scripts/terraform_root.py` (tests/unit/
# test_terraform_module.py fails while this file is stale).
# This file: a moved block per resource and module call.

# Before the module, these were resources and module calls of this root: an
# existing state moves into module.cluster on the next plan, nothing replaced. The last
# ones take a cluster made before worker pools (its single scale set, autoscale setting
# and the head's roles on them) into the default pool "workers" of the module.

moved {
  from = azurerm_key_vault.this
  to   = module.cluster.azurerm_key_vault.this
}

moved {
  from = azurerm_key_vault_secret.cluster_token
  to   = module.cluster.azurerm_key_vault_secret.cluster_token
}

moved {
  from = azurerm_linux_virtual_machine.head
  to   = module.cluster.azurerm_linux_virtual_machine.head
}

moved {
  from = azurerm_nat_gateway.this
  to   = module.cluster.azurerm_nat_gateway.this
}

moved {
  from = azurerm_nat_gateway_public_ip_association.this
  to   = module.cluster.azurerm_nat_gateway_public_ip_association.this
}

moved {
  from = azurerm_network_interface.head
  to   = module.cluster.azurerm_network_interface.head
}

moved {
  from = azurerm_network_security_group.this
  to   = module.cluster.azurerm_network_security_group.this
}

moved {
  from = azurerm_private_dns_zone.blob
  to   = module.cluster.azurerm_private_dns_zone.blob
}

moved {
  from = azurerm_private_dns_zone.key_vault
  to   = module.cluster.azurerm_private_dns_zone.key_vault
}

moved {
  from = azurerm_private_dns_zone_virtual_network_link.blob
  to   = module.cluster.azurerm_private_dns_zone_virtual_network_link.blob
}

moved {
  from = azurerm_private_dns_zone_virtual_network_link.key_vault
  to   = module.cluster.azurerm_private_dns_zone_virtual_network_link.key_vault
}

moved {
  from = azurerm_private_endpoint.blob
  to   = module.cluster.azurerm_private_endpoint.blob
}

moved {
  from = azurerm_private_endpoint.key_vault
  to   = module.cluster.azurerm_private_endpoint.key_vault
}

moved {
  from = azurerm_public_ip.head
  to   = module.cluster.azurerm_public_ip.head
}

moved {
  from = azurerm_public_ip.nat
  to   = module.cluster.azurerm_public_ip.nat
}

moved {
  from = azurerm_resource_group.this
  to   = module.cluster.azurerm_resource_group.this
}

moved {
  from = azurerm_role_assignment.autostop_head
  to   = module.cluster.azurerm_role_assignment.autostop_head
}

moved {
  from = azurerm_role_assignment.deployer_secrets_officer
  to   = module.cluster.azurerm_role_assignment.deployer_secrets_officer
}

moved {
  from = azurerm_role_assignment.interface_reader
  to   = module.cluster.azurerm_role_assignment.interface_reader
}

moved {
  from = azurerm_role_assignment.nodes_results_contributor
  to   = module.cluster.azurerm_role_assignment.nodes_results_contributor
}

moved {
  from = azurerm_role_assignment.nodes_secrets_user
  to   = module.cluster.azurerm_role_assignment.nodes_secrets_user
}

moved {
  from = azurerm_role_definition.autostop
  to   = module.cluster.azurerm_role_definition.autostop
}

moved {
  from = azurerm_role_definition.interface_reader
  to   = module.cluster.azurerm_role_definition.interface_reader
}

moved {
  from = azurerm_shared_image.node
  to   = module.cluster.azurerm_shared_image.node
}

moved {
  from = azurerm_shared_image_gallery.nodes
  to   = module.cluster.azurerm_shared_image_gallery.nodes
}

moved {
  from = azurerm_subnet.this
  to   = module.cluster.azurerm_subnet.this
}

moved {
  from = azurerm_subnet_nat_gateway_association.this
  to   = module.cluster.azurerm_subnet_nat_gateway_association.this
}

moved {
  from = azurerm_subnet_network_security_group_association.this
  to   = module.cluster.azurerm_subnet_network_security_group_association.this
}

moved {
  from = azurerm_user_assigned_identity.autoscaler
  to   = module.cluster.azurerm_user_assigned_identity.autoscaler
}

moved {
  from = azurerm_user_assigned_identity.this
  to   = module.cluster.azurerm_user_assigned_identity.this
}

moved {
  from = azurerm_virtual_network.this
  to   = module.cluster.azurerm_virtual_network.this
}

moved {
  from = module.worker_pool
  to   = module.cluster.module.worker_pool
}

moved {
  from = terraform_data.input_checks
  to   = module.cluster.terraform_data.input_checks
}

moved {
  from = time_offset.cluster_token_expiry
  to   = module.cluster.time_offset.cluster_token_expiry
}

moved {
  from = time_sleep.deployer_role_propagation
  to   = module.cluster.time_sleep.deployer_role_propagation
}

moved {
  from = azurerm_linux_virtual_machine_scale_set.workers
  to   = module.cluster.module.worker_pool["workers"].azurerm_linux_virtual_machine_scale_set.this[0]
}

moved {
  from = azurerm_monitor_autoscale_setting.workers
  to   = module.cluster.module.worker_pool["workers"].azurerm_monitor_autoscale_setting.this
}

moved {
  from = azurerm_role_assignment.autoscaler_scale_set
  to   = module.cluster.module.worker_pool["workers"].azurerm_role_assignment.autoscaler_scale_set
}

moved {
  from = azurerm_role_assignment.autostop_scale_set
  to   = module.cluster.module.worker_pool["workers"].azurerm_role_assignment.autostop_scale_set
}

moved {
  from = azurerm_role_assignment.autostop_autoscale
  to   = module.cluster.module.worker_pool["workers"].azurerm_role_assignment.autostop_autoscale
}
