# Plan-level tests of the stack with mocked providers: no Azure credentials, nothing is created.
# Runs on GitHub (.github/workflows/terraform.yml), where the providers download; Terraform 1.11+
# (override_during = plan gives computed attributes their mocked values at plan time).
#
# random is NOT mocked: Terraform's mock providers cannot open ephemeral resources (up to 1.15
# at least, internal/providers/mock.go answers "No ephemeral resource types in mock providers"),
# and the cluster token is `ephemeral "random_password"`. The real random provider needs no
# credentials and makes a throw-away token that only the mocked, write-only secret receives.

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

run "nsg_allows_only_ssh_from_allowed_cidrs_to_the_head" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  assert {
    condition     = length(azurerm_network_security_group.this.security_rule) == 3
    error_message = "The NSG must have exactly three rules: SSH, cluster-internal, deny the rest."
  }

  assert {
    condition = alltrue([
      for r in azurerm_network_security_group.this.security_rule : r.direction == "Inbound"
    ])
    error_message = "Only inbound rules are expected."
  }

  assert {
    condition = one([
      for r in azurerm_network_security_group.this.security_rule : r
      if r.name == "AllowSshFromAllowedCidrs"
      && r.access == "Allow"
      && r.protocol == "Tcp"
      && r.destination_port_range == "22"
      && r.destination_address_prefix == "10.42.1.4"
      && toset(r.source_address_prefixes) == toset(["203.0.113.7/32", "198.51.100.0/24"])
    ]) != null
    error_message = "SSH must be allowed from allowed_ssh_cidrs to the head's private IP on port 22 only."
  }

  assert {
    # Every other Allow rule is internal to the cluster subnet.
    condition = alltrue([
      for r in azurerm_network_security_group.this.security_rule :
      r.name == "AllowSshFromAllowedCidrs" || r.access == "Deny" || (
        r.source_address_prefix == "10.42.1.0/24" && r.destination_address_prefix == "10.42.1.0/24"
      )
    ])
    error_message = "No rule may admit anything from outside the cluster subnet except SSH."
  }

  assert {
    condition = one([
      for r in azurerm_network_security_group.this.security_rule : r
      if r.access == "Deny" && r.source_address_prefix == "*" && r.destination_port_range == "*"
    ]).priority == 4096
    error_message = "The last rule must deny all other inbound traffic."
  }

  assert {
    condition     = tolist(azurerm_subnet.this.address_prefixes) == tolist(["10.42.1.0/24"]) && azurerm_subnet.this.default_outbound_access_enabled == false
    error_message = "The subnet must be 10.42.1.0/24 without default outbound access (the NAT gateway provides it)."
  }
}

run "autoscale_thresholds_and_capacity" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  assert {
    condition = (
      module.worker_pool["workers"].autoscale_settings[0].profile[0].capacity[0].minimum == 0 &&
      module.worker_pool["workers"].autoscale_settings[0].profile[0].capacity[0].default == 2 &&
      module.worker_pool["workers"].autoscale_settings[0].profile[0].capacity[0].maximum == 4
    )
    error_message = "Capacity must default to min 0, default 2, max 4."
  }

  assert {
    condition = one([
      for r in module.worker_pool["workers"].autoscale_settings[0].profile[0].rule : r
      if r.metric_trigger[0].metric_name == "Percentage CPU"
      && r.metric_trigger[0].statistic == "Average"
      && r.metric_trigger[0].time_aggregation == "Average"
      && r.metric_trigger[0].time_window == "PT5M"
      && r.metric_trigger[0].operator == "GreaterThan"
      && r.metric_trigger[0].threshold == 70
      && r.scale_action[0].direction == "Increase"
      && r.scale_action[0].type == "ChangeCount"
      && r.scale_action[0].value == 1
      && r.scale_action[0].cooldown == "PT5M"
    ]) != null
    error_message = "Average CPU > 70 % over 5 minutes must add one worker (cooldown 5 minutes)."
  }

  assert {
    condition = one([
      for r in module.worker_pool["workers"].autoscale_settings[0].profile[0].rule : r
      if r.metric_trigger[0].metric_name == "Percentage CPU"
      && r.metric_trigger[0].time_window == "PT5M"
      && r.metric_trigger[0].operator == "LessThan"
      && r.metric_trigger[0].threshold == 30
      && r.scale_action[0].direction == "Decrease"
      && r.scale_action[0].value == 1
      && r.scale_action[0].cooldown == "PT10M"
    ]) != null
    error_message = "Average CPU < 30 % over 5 minutes must remove one worker (cooldown 10 minutes)."
  }

  assert {
    condition     = module.worker_pool["workers"].flexible_scale_set.instances == 2
    error_message = "The scale set must start at worker_default_count."
  }
}

run "autoscale_follows_its_variables" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  variables {
    worker_min_count           = 1
    worker_default_count       = 3
    worker_max_count           = 10
    scale_out_cpu_percent      = 85
    scale_in_cpu_percent       = 20
    scale_out_cooldown_minutes = 3
    scale_in_cooldown_minutes  = 15
  }

  assert {
    condition = (
      module.worker_pool["workers"].autoscale_settings[0].profile[0].capacity[0].minimum == 1 &&
      module.worker_pool["workers"].autoscale_settings[0].profile[0].capacity[0].default == 3 &&
      module.worker_pool["workers"].autoscale_settings[0].profile[0].capacity[0].maximum == 10
    )
    error_message = "Capacity must follow worker_min_count, worker_default_count, worker_max_count."
  }

  assert {
    condition = toset([
      for r in module.worker_pool["workers"].autoscale_settings[0].profile[0].rule :
      "${r.metric_trigger[0].operator}/${r.metric_trigger[0].threshold}/${r.scale_action[0].cooldown}"
    ]) == toset(["GreaterThan/85/PT3M", "LessThan/20/PT15M"])
    error_message = "Thresholds and cooldowns must follow their variables."
  }
}

run "regular_workers_get_a_termination_notice" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  assert {
    condition     = module.worker_pool["workers"].flexible_scale_set.priority == "Regular" && module.worker_pool["workers"].flexible_scale_set.eviction_policy == null
    error_message = "Workers are regular VMs by default."
  }

  assert {
    condition = (
      length(module.worker_pool["workers"].flexible_scale_set.termination_notification) == 1 &&
      module.worker_pool["workers"].flexible_scale_set.termination_notification[0].enabled == true &&
      module.worker_pool["workers"].flexible_scale_set.termination_notification[0].timeout == "PT5M"
    )
    error_message = "Regular workers must get a 5-minute termination notification."
  }

  assert {
    condition = (
      module.worker_pool["workers"].scale_set == null &&
      module.worker_pool["workers"].flexible_scale_set.platform_fault_domain_count == 1 &&
      module.worker_pool["workers"].flexible_scale_set.single_placement_group == false &&
      module.worker_pool["workers"].flexible_scale_set.upgrade_mode == "Manual" &&
      module.worker_pool["workers"].flexible_scale_set.os_profile[0].linux_configuration[0].disable_password_authentication == true
    )
    error_message = "Scale set: Flexible by default, one fault domain (max spreading), no single placement group, manual upgrades, SSH keys only."
  }

  assert {
    condition = alltrue([
      for ip in module.worker_pool["workers"].flexible_scale_set.network_interface[0].ip_configuration :
      length(ip.public_ip_address) == 0
    ])
    error_message = "Workers must have no public IP."
  }
}

run "workers_report_their_health_and_are_repaired" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  assert {
    condition = (
      module.worker_pool["workers"].flexible_scale_set.extension_operations_enabled == true &&
      length(module.worker_pool["workers"].flexible_scale_set.extension) == 1 &&
      one(module.worker_pool["workers"].flexible_scale_set.extension[*].type) == "ApplicationHealthLinux" &&
      one(module.worker_pool["workers"].flexible_scale_set.extension[*].publisher) == "Microsoft.ManagedServices" &&
      one(module.worker_pool["workers"].flexible_scale_set.extension[*].type_handler_version) == "2.0"
    )
    error_message = "Workers must carry the Application Health extension (v2, Linux)."
  }

  assert {
    condition = (
      jsondecode(one(module.worker_pool["workers"].flexible_scale_set.extension[*].settings)).protocol == "http" &&
      jsondecode(one(module.worker_pool["workers"].flexible_scale_set.extension[*].settings)).port == 8790 &&
      jsondecode(one(module.worker_pool["workers"].flexible_scale_set.extension[*].settings)).requestPath == "/health"
    )
    error_message = "The extension must probe the workers' health endpoint (http, 8790, /health)."
  }

  assert {
    condition = (
      module.worker_pool["workers"].flexible_scale_set.automatic_instance_repair[0].enabled == true &&
      module.worker_pool["workers"].flexible_scale_set.automatic_instance_repair[0].grace_period == "PT30M" &&
      module.worker_pool["workers"].flexible_scale_set.automatic_instance_repair[0].action == "Replace"
    )
    error_message = "Automatic repair is on by default: Replace after a 30-minute grace period."
  }

  assert {
    condition     = azurerm_linux_virtual_machine.head.allow_extension_operations == false
    error_message = "The head keeps extension operations off."
  }
}

run "repair_follows_its_variables" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  variables {
    worker_automatic_repair_enabled              = false
    worker_automatic_repair_grace_period_minutes = 45
    worker_automatic_repair_action               = "Reimage"
  }

  assert {
    condition = (
      module.worker_pool["workers"].flexible_scale_set.automatic_instance_repair[0].enabled == false &&
      module.worker_pool["workers"].flexible_scale_set.automatic_instance_repair[0].grace_period == "PT45M" &&
      module.worker_pool["workers"].flexible_scale_set.automatic_instance_repair[0].action == "Reimage"
    )
    error_message = "automatic_instance_repair must follow its variables."
  }
}

run "idle_timeout_follows_its_variable" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  variables {
    tcp_idle_timeout_minutes = 4
  }

  assert {
    condition     = azurerm_public_ip.head.idle_timeout_in_minutes == 4 && azurerm_nat_gateway.this.idle_timeout_in_minutes == 4
    error_message = "tcp_idle_timeout_minutes must set the head's public IP and the NAT gateway alike."
  }
}

run "spot_workers" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  variables {
    worker_spot_enabled = true
  }

  assert {
    condition = (
      module.worker_pool["workers"].flexible_scale_set.priority == "Spot" &&
      module.worker_pool["workers"].flexible_scale_set.eviction_policy == "Delete" &&
      module.worker_pool["workers"].flexible_scale_set.max_bid_price == -1
    )
    error_message = "Spot workers: priority Spot, eviction Delete, max price -1."
  }

  assert {
    condition     = length(module.worker_pool["workers"].flexible_scale_set.termination_notification) == 0
    error_message = "Spot scale sets cannot have a termination notification."
  }
}

run "head_network_and_image" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  variables {
    os_image = "debian-12"
  }

  assert {
    condition = (
      azurerm_network_interface.head.ip_configuration[0].private_ip_address_allocation == "Static" &&
      azurerm_network_interface.head.ip_configuration[0].private_ip_address == "10.42.1.4"
    )
    error_message = "The head's NIC must have the static private IP 10.42.1.4."
  }

  assert {
    condition     = azurerm_public_ip.head.sku == "Standard" && azurerm_public_ip.head.allocation_method == "Static"
    error_message = "The head's public IP must be Standard and static."
  }

  assert {
    condition     = azurerm_public_ip.head.idle_timeout_in_minutes == 30 && azurerm_nat_gateway.this.idle_timeout_in_minutes == 30
    error_message = "The head's public IP and the NAT gateway must keep silent TCP flows for 30 minutes (an idle SSH tunnel survives)."
  }

  assert {
    condition = (
      azurerm_linux_virtual_machine.head.source_image_reference[0].publisher == "Debian" &&
      azurerm_linux_virtual_machine.head.source_image_reference[0].offer == "debian-12" &&
      module.worker_pool["workers"].flexible_scale_set.source_image_reference[0].sku == "12-gen2"
    )
    error_message = "os_image = debian-12 must select Debian/debian-12/12-gen2 on head and workers."
  }

  assert {
    condition     = azurerm_linux_virtual_machine.head.disable_password_authentication == true && length(azurerm_linux_virtual_machine.head.boot_diagnostics) == 1
    error_message = "The head takes SSH keys only and has boot diagnostics."
  }
}

run "marketplace_image_without_a_node_image" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  assert {
    condition = (
      azurerm_linux_virtual_machine.head.source_image_id == null &&
      module.worker_pool["workers"].flexible_scale_set.source_image_id == null &&
      azurerm_linux_virtual_machine.head.source_image_reference[0].offer == "0001-com-ubuntu-server-jammy" &&
      module.worker_pool["workers"].flexible_scale_set.source_image_reference[0].sku == "22_04-lts-gen2"
    )
    error_message = "Without node_image_id, head and workers must boot the os_image's marketplace image."
  }

  assert {
    condition     = length(azurerm_shared_image_gallery.nodes) == 0 && length(azurerm_shared_image.node) == 0
    error_message = "create_image_gallery is off by default: no gallery, no image definition."
  }
}

run "node_image_boots_the_head_and_every_worker" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  variables {
    node_image_id        = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-ray/providers/Microsoft.Compute/galleries/ray_nodes/images/ray-node-ubuntu-22.04/versions/1.0.3"
    create_image_gallery = true
  }

  assert {
    condition = (
      azurerm_linux_virtual_machine.head.source_image_id == var.node_image_id &&
      module.worker_pool["workers"].flexible_scale_set.source_image_id == var.node_image_id &&
      length(azurerm_linux_virtual_machine.head.source_image_reference) == 0 &&
      length(module.worker_pool["workers"].flexible_scale_set.source_image_reference) == 0
    )
    error_message = "With node_image_id, head and workers must boot that gallery image version and no marketplace image."
  }

  assert {
    condition = (
      azurerm_shared_image_gallery.nodes[0].name == "ray_nodes" &&
      azurerm_shared_image.node[0].name == "ray-node-ubuntu-22.04" &&
      azurerm_shared_image.node[0].hyper_v_generation == "V2" &&
      azurerm_shared_image.node[0].trusted_launch_supported == true &&
      azurerm_shared_image.node[0].specialized == false
    )
    error_message = "create_image_gallery must create the gallery and a generalized Gen2, Trusted Launch supported definition named as infra/bicep/image/ names them."
  }
}

run "custom_data_is_filled" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  variables {
    extra_pip_packages = ["minigrid==3.0.0", "ale-py"]
  }

  # The one placeholder holds base64(JSON) of the deploy-time values: exactly these, no
  # token (the nodes read it from Key Vault).
  assert {
    condition = alltrue(flatten([
      for text in [
        base64decode(azurerm_linux_virtual_machine.head.custom_data),
        base64decode(module.worker_pool["workers"].flexible_scale_set.os_profile[0].custom_data),
        ] : [
        !strcontains(text, "@@"),
        jsondecode(base64decode(one(regex("path: /etc/ray-cluster/deploy.json\\n(?:.*\\n){0,3}?\\s*content: \"([A-Za-z0-9+/=]+)\"", text)))) == {
          RAY_HEAD_IP   = "10.42.1.4"
          KEY_VAULT_URL = "https://ray-kv-0123456789abcdef012.vault.azure.net/"
          # checkov:skip=CKV_SECRET_6:The name of the token's Key Vault secret, not a secret value
          TOKEN_SECRET_NAME  = "ray-cluster-token"
          IDENTITY_CLIENT_ID = "11111111-2222-4333-8444-555555555555"
          RAY_ADMIN_USER     = "azureuser"
          EXTRA_PIP_PACKAGES = "minigrid==3.0.0 ale-py"
          EXTRA_APT_PACKAGES = ""
          PIP_INDEX_URL      = "https://pypi.org/simple"
          TORCH_INDEX_URL    = "https://download.pytorch.org/whl/cpu"
          APT_SOURCE         = ""
          SCALING_MODE       = "cpu"
          # The scale set's id, named before it exists (mocked subscription, default group).
          WORKER_SCALE_SET_ID             = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/ray-rl-rg/providers/Microsoft.Compute/virtualMachineScaleSets/ray-workers"
          WORKER_VM_SIZE                  = "Standard_D4s_v5"
          AUTOSCALER_POOLS                = "[{\"labels\":\"\",\"max\":4,\"min\":0,\"name\":\"workers\",\"resources\":{},\"scale_set\":\"ray-workers\",\"vm_size\":\"Standard_D4s_v5\"}]"
          AUTOSCALER_IDLE_TIMEOUT_MINUTES = "5"
          # The head's own identity (mocked client id): autostop is on by default.
          AUTOSCALER_CLIENT_ID = "11111111-2222-4333-8444-555555555555"
          # The public cloud's, picked by the mocked vault URI's suffix (vault.azure.net).
          ARM_ENDPOINT          = "https://management.azure.com/"
          AUTOSTOP_IDLE_MINUTES = "60"
          WORKER_AUTOSCALE_NAME = "ray-workers-autoscale"
          # One pool, "workers", as before pools: its scale set, its values.
          WORKER_SCALE_SETS = "ray-workers"
          WORKER_POOL       = "workers"
          RAY_RESOURCES     = "{}"
          RAY_LABELS        = ""
          # No results storage by default (results.tf).
          RESULTS_URL = ""
        },
      ]
    ]))
    error_message = "Head and worker custom data must carry the deploy-time values as base64 JSON, and no placeholder."
  }

  assert {
    condition = (
      length(azurerm_linux_virtual_machine.head.custom_data) <= 87380 &&
      length(module.worker_pool["workers"].flexible_scale_set.os_profile[0].custom_data) <= 87380
    )
    error_message = "Custom data must stay within Azure's 87,380 base64 characters."
  }
}

run "key_vault_is_private_with_a_firewall_for_the_deployer" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  assert {
    condition = (
      azurerm_key_vault.this.rbac_authorization_enabled == true &&
      azurerm_key_vault.this.purge_protection_enabled == true &&
      azurerm_key_vault.this.public_network_access_enabled == true
    )
    error_message = "The vault uses RBAC and purge protection; its public endpoint stays on for Terraform, behind the firewall."
  }

  assert {
    condition = (
      azurerm_key_vault.this.network_acls[0].default_action == "Deny" &&
      azurerm_key_vault.this.network_acls[0].bypass == "None" &&
      toset(azurerm_key_vault.this.network_acls[0].ip_rules) == toset(["203.0.113.7", "198.51.100.0/24"]) &&
      length(azurerm_key_vault.this.network_acls[0].virtual_network_subnet_ids) == 0
    )
    error_message = "The firewall admits allowed_ssh_cidrs' public entries (single addresses without /32) and nothing else."
  }

  assert {
    condition = (
      azurerm_private_endpoint.key_vault.subnet_id == azurerm_subnet.this.id &&
      azurerm_private_endpoint.key_vault.private_service_connection[0].private_connection_resource_id == azurerm_key_vault.this.id &&
      tolist(azurerm_private_endpoint.key_vault.private_service_connection[0].subresource_names) == ["vault"] &&
      azurerm_private_endpoint.key_vault.private_service_connection[0].is_manual_connection == false &&
      one(azurerm_private_endpoint.key_vault.ip_configuration).private_ip_address == "10.42.1.5"
    )
    error_message = "The vault's private endpoint sits in the cluster subnet at its 5th host (10.42.1.5)."
  }

  assert {
    condition = (
      azurerm_private_dns_zone.key_vault.name == "privatelink.vaultcore.azure.net" &&
      tolist(azurerm_private_endpoint.key_vault.private_dns_zone_group[0].private_dns_zone_ids) == [azurerm_private_dns_zone.key_vault.id] &&
      azurerm_private_dns_zone_virtual_network_link.key_vault.virtual_network_id == azurerm_virtual_network.this.id &&
      azurerm_private_dns_zone_virtual_network_link.key_vault.registration_enabled == false
    )
    error_message = "The vault's name must resolve to the private endpoint inside the virtual network (privatelink zone, linked)."
  }

  assert {
    condition = (
      azurerm_subnet.this.private_endpoint_network_policies == "NetworkSecurityGroupEnabled" &&
      try(length(azurerm_subnet.this.service_endpoints), 0) == 0
    )
    error_message = "The NSG must govern the private endpoint; no service endpoint is needed any more."
  }
}

run "cluster_token_is_a_write_only_secret" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  assert {
    condition = (
      azurerm_key_vault_secret.cluster_token.name == "ray-cluster-token" &&
      azurerm_key_vault_secret.cluster_token.value_wo_version == 1 &&
      azurerm_key_vault_secret.cluster_token.expiration_date == "2027-01-01T00:00:00Z" &&
      time_offset.cluster_token_expiry.offset_days == 365
    )
    error_message = "The token is written once (version 1) and expires 365 days later."
  }

  assert {
    condition = (
      azurerm_role_assignment.deployer_secrets_officer.role_definition_name == "Key Vault Secrets Officer" &&
      azurerm_role_assignment.deployer_secrets_officer.principal_id == "00000000-0000-4000-8000-000000000003" &&
      azurerm_role_assignment.nodes_secrets_user.role_definition_name == "Key Vault Secrets User" &&
      azurerm_role_assignment.nodes_secrets_user.principal_id == "66666666-7777-4888-8999-aaaaaaaaaaaa" &&
      azurerm_role_assignment.deployer_secrets_officer.scope == azurerm_key_vault.this.id &&
      azurerm_role_assignment.nodes_secrets_user.scope == azurerm_key_vault.this.id
    )
    error_message = "The deployer may write secrets and the nodes' identity read them, on this vault only."
  }

  assert {
    condition     = time_sleep.deployer_role_propagation.create_duration == "60s"
    error_message = "Terraform waits 60 s for the deployer's role to propagate before writing the secret."
  }
}

run "key_vault_follows_its_variables" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  variables {
    allowed_ssh_cidrs             = ["10.0.0.0/8"]
    key_vault_allowed_cidrs       = ["192.0.2.10/32"]
    cluster_token_version         = 2
    cluster_token_expiration_days = 30
    rbac_propagation_wait_seconds = 0
  }

  assert {
    condition     = tolist(azurerm_key_vault.this.network_acls[0].ip_rules) == ["192.0.2.10"]
    error_message = "key_vault_allowed_cidrs replaces allowed_ssh_cidrs on the vault's firewall."
  }

  assert {
    condition = (
      azurerm_key_vault_secret.cluster_token.value_wo_version == 2 &&
      time_offset.cluster_token_expiry.triggers["cluster_token_version"] == "2" &&
      time_offset.cluster_token_expiry.offset_days == 30 &&
      time_sleep.deployer_role_propagation.create_duration == "0s"
    )
    error_message = "A new cluster_token_version writes a new token and a new expiration date."
  }
}

run "outputs" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  assert {
    condition     = output.head_public_ip == "20.61.1.2" && output.head_private_ip == "10.42.1.4"
    error_message = "head_public_ip / head_private_ip are wrong."
  }

  assert {
    condition     = output.admin_username == "azureuser" && output.ssh_command == "ssh azureuser@20.61.1.2"
    error_message = "admin_username / ssh_command are wrong."
  }

  assert {
    condition     = output.driver_command == "python -m driver submit examples/cartpole/train.py --head azureuser@20.61.1.2"
    error_message = "driver_command must be exactly the submit line for this head."
  }

  assert {
    condition = (
      output.head_vm_id == azurerm_linux_virtual_machine.head.id &&
      output.scale_set_id == module.worker_pool["workers"].flexible_scale_set.id &&
      output.autoscale_setting_id == module.worker_pool["workers"].autoscale_settings[0].id
    )
    error_message = "head_vm_id, scale_set_id and autoscale_setting_id name the head VM, the scale set and its autoscale setting (python -m driver start)."
  }

  assert {
    condition     = output.resource_group_name == "ray-rl-rg" && length(azurerm_resource_group.this) == 1
    error_message = "By default the stack creates the resource group ray-rl-rg."
  }
}

run "existing_resource_group" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  variables {
    create_resource_group = false
    resource_group_name   = "my-existing-rg"
  }

  assert {
    condition     = length(azurerm_resource_group.this) == 0 && output.resource_group_name == "my-existing-rg"
    error_message = "With create_resource_group = false the stack uses the named group and creates none."
  }

  assert {
    condition     = module.worker_pool["workers"].flexible_scale_set.resource_group_name == "my-existing-rg"
    error_message = "Resources must go into the existing group."
  }
}

run "cpu_mode_without_autostop_has_cpu_rules_and_no_head_identity" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  variables {
    autostop_idle_minutes = 0
  }

  assert {
    condition     = length(module.worker_pool["workers"].autoscale_settings) == 1 && length(azurerm_user_assigned_identity.autoscaler) == 0 && length(module.worker_pool["workers"].role_assignments.autoscaler_scale_set) == 0
    error_message = "scaling_mode = cpu without autostop: the CPU autoscale setting, and no head identity or role."
  }

  assert {
    condition = (
      length(azurerm_role_definition.autostop) == 0 &&
      length(azurerm_role_assignment.autostop_head) == 0 &&
      length(module.worker_pool["workers"].role_assignments.autostop_scale_set) == 0 &&
      length(module.worker_pool["workers"].role_assignments.autostop_autoscale) == 0
    )
    error_message = "autostop_idle_minutes = 0: no autostop role and no assignment of it."
  }

  assert {
    condition     = length(azurerm_linux_virtual_machine.head.identity[0].identity_ids) == 1
    error_message = "Without autostop (scaling_mode = cpu): the head has the nodes' identity only."
  }

  assert {
    condition = alltrue([
      for v in [jsondecode(base64decode(one(regex("path: /etc/ray-cluster/deploy.json\\n(?:.*\\n){0,3}?\\s*content: \"([A-Za-z0-9+/=]+)\"", base64decode(azurerm_linux_virtual_machine.head.custom_data)))))] :
      v.AUTOSTOP_IDLE_MINUTES == "0" && v.AUTOSCALER_CLIENT_ID == "" && v.WORKER_AUTOSCALE_NAME == "ray-workers-autoscale"
    ])
    error_message = "Without autostop the head's deploy-time values say 0 and name no identity of its own."
  }
}

run "autostop_in_cpu_mode_may_stop_the_head_the_workers_and_their_autoscale" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  variables {
    autostop_idle_minutes = 30
  }

  assert {
    condition = (
      length(azurerm_user_assigned_identity.autoscaler) == 1 &&
      length(azurerm_linux_virtual_machine.head.identity[0].identity_ids) == 2 &&
      length(module.worker_pool["workers"].flexible_scale_set.identity[0].identity_ids) == 1 &&
      length(module.worker_pool["workers"].role_assignments.autoscaler_scale_set) == 0
    )
    error_message = "Autostop: the head gets an identity of its own, the workers do not; no Virtual Machine Contributor in cpu mode."
  }

  assert {
    condition = (
      length(azurerm_role_definition.autostop) == 1 &&
      azurerm_role_definition.autostop[0].name == "Ray cluster autostop (ray in /subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/ray-rl-rg)" &&
      azurerm_role_definition.autostop[0].scope == "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/ray-rl-rg" &&
      tolist(azurerm_role_definition.autostop[0].assignable_scopes) == ["/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/ray-rl-rg"] &&
      toset(azurerm_role_definition.autostop[0].permissions[0].actions) == toset([
        "Microsoft.Compute/virtualMachines/read",
        "Microsoft.Compute/virtualMachines/deallocate/action",
        "Microsoft.Compute/virtualMachineScaleSets/read",
        "Microsoft.Compute/virtualMachineScaleSets/write",
        "Microsoft.Insights/autoscaleSettings/read",
        "Microsoft.Insights/autoscaleSettings/write",
      ]) &&
      length(azurerm_role_definition.autostop[0].permissions[0].not_actions) == 0 &&
      try(length(azurerm_role_definition.autostop[0].permissions[0].data_actions), 0) == 0
    )
    error_message = "The autostop role: exactly deallocate/read the VM, read/write the scale set and the autoscale setting, assignable in the cluster's resource group only."
  }

  assert {
    condition = (
      azurerm_role_assignment.autostop_head[0].scope == azurerm_linux_virtual_machine.head.id &&
      module.worker_pool["workers"].role_assignments.autostop_scale_set[0].scope == module.worker_pool["workers"].flexible_scale_set.id &&
      module.worker_pool["workers"].role_assignments.autostop_autoscale[0].scope == module.worker_pool["workers"].autoscale_settings[0].id &&
      alltrue([
        for a in [azurerm_role_assignment.autostop_head[0], module.worker_pool["workers"].role_assignments.autostop_scale_set[0], module.worker_pool["workers"].role_assignments.autostop_autoscale[0]] :
        a.principal_id == azurerm_user_assigned_identity.autoscaler[0].principal_id && a.role_definition_id == azurerm_role_definition.autostop[0].role_definition_resource_id
      ])
    )
    error_message = "Autostop's role is assigned to the head's own identity on the head VM, the scale set and the autoscale setting, each alone."
  }

  assert {
    condition = alltrue([
      for v in [jsondecode(base64decode(one(regex("path: /etc/ray-cluster/deploy.json\\n(?:.*\\n){0,3}?\\s*content: \"([A-Za-z0-9+/=]+)\"", base64decode(azurerm_linux_virtual_machine.head.custom_data)))))] :
      v.AUTOSTOP_IDLE_MINUTES == "30" && v.AUTOSCALER_CLIENT_ID == "11111111-2222-4333-8444-555555555555" && v.WORKER_AUTOSCALE_NAME == "ray-workers-autoscale"
    ])
    error_message = "The head's deploy-time values carry the idle minutes, its own identity and the autoscale setting's name."
  }
}

run "autostop_in_ray_mode_adds_only_the_head_vm" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  variables {
    scaling_mode = "ray"
  }

  assert {
    condition = (
      length(azurerm_role_definition.autostop) == 1 &&
      length(azurerm_role_assignment.autostop_head) == 1 &&
      length(module.worker_pool["workers"].role_assignments.autostop_scale_set) == 0 &&
      length(module.worker_pool["workers"].role_assignments.autostop_autoscale) == 0 &&
      length(module.worker_pool["workers"].role_assignments.autoscaler_scale_set) == 1
    )
    error_message = "scaling_mode = ray: Virtual Machine Contributor on the scale set covers autostop there; autostop adds the head VM only (no autoscale setting)."
  }

  assert {
    condition     = output.autoscale_setting_id == "" && output.head_vm_id == azurerm_linux_virtual_machine.head.id
    error_message = "scaling_mode = ray: no autoscale setting id."
  }
}

run "ray_mode_hands_the_scale_set_to_rays_autoscaler" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  variables {
    scaling_mode             = "ray"
    worker_min_count         = 0
    worker_default_count     = 0
    worker_max_count         = 6
    ray_idle_timeout_minutes = 2
  }

  assert {
    condition     = length(module.worker_pool["workers"].autoscale_settings) == 0
    error_message = "scaling_mode = ray: no CPU autoscale rules."
  }

  assert {
    condition = (
      length(module.worker_pool["workers"].role_assignments.autoscaler_scale_set) == 1 &&
      module.worker_pool["workers"].role_assignments.autoscaler_scale_set[0].scope == module.worker_pool["workers"].flexible_scale_set.id &&
      module.worker_pool["workers"].role_assignments.autoscaler_scale_set[0].role_definition_name == "Virtual Machine Contributor" &&
      module.worker_pool["workers"].role_assignments.autoscaler_scale_set[0].principal_id == azurerm_user_assigned_identity.autoscaler[0].principal_id
    )
    error_message = "scaling_mode = ray: one role assignment, for the autoscaler identity, on the workers' scale set only."
  }

  assert {
    condition     = length(azurerm_linux_virtual_machine.head.identity[0].identity_ids) == 2 && length(module.worker_pool["workers"].flexible_scale_set.identity[0].identity_ids) == 1
    error_message = "scaling_mode = ray: the head has the autoscaler identity too, the workers do not."
  }

  assert {
    condition = (
      length(azurerm_role_assignment.interface_reader) == 1 &&
      azurerm_role_assignment.interface_reader[0].principal_id == azurerm_user_assigned_identity.autoscaler[0].principal_id &&
      azurerm_role_definition.interface_reader[0].permissions[0].actions == tolist(["Microsoft.Network/networkInterfaces/read"])
    )
    error_message = "scaling_mode = ray with the default (Flexible) pool: the head's identity may read the workers' network interfaces (their private IPs), and nothing else."
  }

  assert {
    condition = alltrue([
      for v in [jsondecode(base64decode(one(regex("path: /etc/ray-cluster/deploy.json\\n(?:.*\\n){0,3}?\\s*content: \"([A-Za-z0-9+/=]+)\"", base64decode(azurerm_linux_virtual_machine.head.custom_data)))))] :
      v.SCALING_MODE == "ray" && jsondecode(v.AUTOSCALER_POOLS)[0].min == 0 && jsondecode(v.AUTOSCALER_POOLS)[0].max == 6 && v.AUTOSCALER_IDLE_TIMEOUT_MINUTES == "2" && v.AUTOSCALER_CLIENT_ID == "11111111-2222-4333-8444-555555555555"
    ])
    error_message = "scaling_mode = ray: the head's deploy-time values name the mode, the worker bounds, the idle timeout and the autoscaler identity."
  }
}

# ---------------------------------------------------------------------------------------------
# Worker pools
# ---------------------------------------------------------------------------------------------

run "one_pool_by_default_with_the_names_of_before" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  assert {
    condition = (
      keys(module.worker_pool) == tolist(["workers"]) &&
      module.worker_pool["workers"].scale_set == null &&
      module.worker_pool["workers"].flexible_scale_set.name == "ray-workers" &&
      module.worker_pool["workers"].flexible_scale_set.os_profile[0].linux_configuration[0].computer_name_prefix == "ray-w" &&
      module.worker_pool["workers"].flexible_scale_set.sku_name == "Standard_D4s_v5" &&
      module.worker_pool["workers"].autoscale_settings[0].name == "ray-workers-autoscale" &&
      module.worker_pool["workers"].autoscale_settings[0].target_resource_id == module.worker_pool["workers"].flexible_scale_set.id &&
      keys(output.worker_pools) == tolist(["workers"]) &&
      output.worker_pools["workers"].scale_set_id == output.scale_set_id &&
      output.worker_pools["workers"].scale_set_name == "ray-workers" &&
      output.worker_pools["workers"].autoscale_setting_id == output.autoscale_setting_id
    )
    error_message = "Without worker_pools: one pool, workers, a Flexible scale set with the names of the single scale set before pools."
  }
}

run "a_pool_pinned_to_uniform_is_the_scale_set_of_before" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  variables {
    worker_pools = { workers = { orchestration_mode = "Uniform" } }
  }

  assert {
    condition = (
      keys(module.worker_pool) == tolist(["workers"]) &&
      module.worker_pool["workers"].flexible_scale_set == null &&
      module.worker_pool["workers"].scale_set.name == "ray-workers" &&
      module.worker_pool["workers"].scale_set.computer_name_prefix == "ray-w" &&
      module.worker_pool["workers"].scale_set.sku == "Standard_D4s_v5" &&
      module.worker_pool["workers"].scale_set.instances == 2 &&
      module.worker_pool["workers"].scale_set.overprovision == false &&
      module.worker_pool["workers"].scale_set.upgrade_mode == "Manual" &&
      module.worker_pool["workers"].scale_set.scale_in[0].rule == "NewestVM" &&
      module.worker_pool["workers"].scale_set.disable_password_authentication == true &&
      module.worker_pool["workers"].scale_set.termination_notification[0].timeout == "PT5M" &&
      one(module.worker_pool["workers"].scale_set.extension[*].type) == "ApplicationHealthLinux" &&
      module.worker_pool["workers"].scale_set.automatic_instance_repair[0].enabled == true &&
      module.worker_pool["workers"].autoscale_settings[0].name == "ray-workers-autoscale" &&
      module.worker_pool["workers"].autoscale_settings[0].target_resource_id == module.worker_pool["workers"].scale_set.id &&
      output.scale_set_id == module.worker_pool["workers"].scale_set.id
    )
    error_message = "worker_pools = { workers = { orchestration_mode = \"Uniform\" } }: the Uniform scale set of before, same names (the moved blocks keep it), overprovisioning off, NewestVM scale-in, its notice, health extension, repairs and autoscale setting."
  }
}

run "two_pools_spot_cpu_and_gpu" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  variables {
    autostop_idle_minutes = 30
    worker_pools = {
      cpu = {
        vm_size         = "Standard_F8s_v2"
        spot_enabled    = true
        eviction_policy = "Deallocate"
        max_price       = 0.25
        max_count       = 20
        ray_resources   = { simulator = 2 }
      }
      gpu = {
        vm_size       = "Standard_NC4as_T4_v3"
        min_count     = 0
        default_count = 0
        max_count     = 2
        ray_labels    = { accelerator = "t4" }
      }
    }
  }

  assert {
    condition = (
      keys(module.worker_pool) == tolist(["cpu", "gpu"]) &&
      module.worker_pool["cpu"].flexible_scale_set.name == "ray-cpu" &&
      module.worker_pool["gpu"].flexible_scale_set.name == "ray-gpu" &&
      module.worker_pool["cpu"].flexible_scale_set.os_profile[0].linux_configuration[0].computer_name_prefix == "ray-cpu-" &&
      module.worker_pool["gpu"].flexible_scale_set.os_profile[0].linux_configuration[0].computer_name_prefix == "ray-gpu-" &&
      module.worker_pool["cpu"].flexible_scale_set.sku_name == "Standard_F8s_v2" &&
      module.worker_pool["gpu"].flexible_scale_set.sku_name == "Standard_NC4as_T4_v3"
    )
    error_message = "Two pools: two scale sets named after the pools, with their sizes and host name prefixes."
  }

  assert {
    condition = (
      module.worker_pool["cpu"].flexible_scale_set.priority == "Spot" &&
      module.worker_pool["cpu"].flexible_scale_set.eviction_policy == "Deallocate" &&
      module.worker_pool["cpu"].flexible_scale_set.max_bid_price == 0.25 &&
      length(module.worker_pool["cpu"].flexible_scale_set.termination_notification) == 0 &&
      module.worker_pool["gpu"].flexible_scale_set.priority == "Regular" &&
      module.worker_pool["gpu"].flexible_scale_set.eviction_policy == null &&
      module.worker_pool["gpu"].flexible_scale_set.termination_notification[0].timeout == "PT5M"
    )
    error_message = "The Spot pool gets its eviction policy and price and no termination notice; the regular pool its notice."
  }

  assert {
    condition = alltrue([
      for name in ["cpu", "gpu"] :
      module.worker_pool[name].flexible_scale_set.automatic_instance_repair[0].enabled == true &&
      one(module.worker_pool[name].flexible_scale_set.extension[*].type) == "ApplicationHealthLinux" &&
      length(module.worker_pool[name].autoscale_settings) == 1 &&
      module.worker_pool[name].autoscale_settings[0].name == "ray-${name}-autoscale" &&
      module.worker_pool[name].autoscale_settings[0].target_resource_id == module.worker_pool[name].flexible_scale_set.id
    ]) && module.worker_pool["gpu"].autoscale_settings[0].profile[0].capacity[0].maximum == 2 && module.worker_pool["cpu"].autoscale_settings[0].profile[0].capacity[0].maximum == 20
    error_message = "Every pool has its health extension, repair policy and CPU autoscale setting with its own bounds."
  }

  assert {
    condition = alltrue([
      for name in ["cpu", "gpu"] :
      module.worker_pool[name].role_assignments.autostop_scale_set[0].scope == module.worker_pool[name].flexible_scale_set.id &&
      module.worker_pool[name].role_assignments.autostop_autoscale[0].scope == module.worker_pool[name].autoscale_settings[0].id &&
      module.worker_pool[name].role_assignments.autostop_scale_set[0].principal_id == azurerm_user_assigned_identity.autoscaler[0].principal_id
    ])
    error_message = "Autostop's role covers every pool's scale set and autoscale setting."
  }

  assert {
    condition = alltrue([
      for name, pool in { cpu = { resources = "{\"simulator\":2}", labels = "" }, gpu = { resources = "{}", labels = "accelerator=t4" } } : alltrue([
        for v in [jsondecode(base64decode(one(regex("path: /etc/ray-cluster/deploy.json\\n(?:.*\\n){0,3}?\\s*content: \"([A-Za-z0-9+/=]+)\"", base64decode(module.worker_pool[name].flexible_scale_set.os_profile[0].custom_data)))))] :
        v.WORKER_POOL == name && v.RAY_RESOURCES == pool.resources && v.RAY_LABELS == pool.labels
      ])
    ])
    error_message = "Each pool's workers get the pool's name, resources and labels."
  }

  assert {
    condition = alltrue([
      for v in [jsondecode(base64decode(one(regex("path: /etc/ray-cluster/deploy.json\\n(?:.*\\n){0,3}?\\s*content: \"([A-Za-z0-9+/=]+)\"", base64decode(azurerm_linux_virtual_machine.head.custom_data)))))] :
      v.WORKER_SCALE_SETS == "ray-cpu ray-gpu" && v.WORKER_AUTOSCALE_NAME == "ray-cpu-autoscale ray-gpu-autoscale" &&
      endswith(v.WORKER_SCALE_SET_ID, "/virtualMachineScaleSets/ray-cpu") && v.WORKER_VM_SIZE == "Standard_F8s_v2" && v.WORKER_POOL == "cpu"
    ])
    error_message = "The head's autostop names every pool's scale set and autoscale setting; the first pool (cpu) is the head's."
  }

  assert {
    condition = (
      output.scale_set_id == module.worker_pool["cpu"].scale_set_id &&
      output.autoscale_setting_id == module.worker_pool["cpu"].autoscale_setting_id &&
      keys(output.worker_pools) == tolist(["cpu", "gpu"]) &&
      output.worker_pools["gpu"].scale_set_name == "ray-gpu"
    )
    error_message = "scale_set_id and autoscale_setting_id are the first pool's; worker_pools lists every pool."
  }
}

run "a_flexible_spot_pool_with_priority_mix_and_instance_mix" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  variables {
    scaling_mode = "ray"
    worker_pools = {
      cpu = {
        vm_size      = "Standard_D4s_v5"
        spot_enabled = true
        max_count    = 20
        zones        = ["1", "2", "3"]
        zone_balance = true
        priority_mix = { base_regular_count = 1, regular_percentage_above_base = 25 }
        instance_mix = { vm_sizes = ["Standard_D4s_v5", "Standard_D4as_v5"], allocation_strategy = "CapacityOptimized" }
      }
      gpu = {
        vm_size            = "Standard_NC4as_T4_v3"
        orchestration_mode = "Uniform"
      }
    }
  }

  assert {
    condition = (
      module.worker_pool["cpu"].scale_set == null &&
      module.worker_pool["cpu"].flexible_scale_set.name == "ray-cpu" &&
      module.worker_pool["cpu"].flexible_scale_set.sku_name == "Mix" &&
      module.worker_pool["cpu"].flexible_scale_set.platform_fault_domain_count == 1 &&
      module.worker_pool["cpu"].flexible_scale_set.priority == "Spot" &&
      module.worker_pool["cpu"].flexible_scale_set.priority_mix[0].base_regular_count == 1 &&
      module.worker_pool["cpu"].flexible_scale_set.priority_mix[0].regular_percentage_above_base == 25 &&
      module.worker_pool["cpu"].flexible_scale_set.sku_profile[0].allocation_strategy == "CapacityOptimized" &&
      toset(module.worker_pool["cpu"].flexible_scale_set.sku_profile[0].vm_sizes) == toset(["Standard_D4s_v5", "Standard_D4as_v5"]) &&
      toset(module.worker_pool["cpu"].flexible_scale_set.zones) == toset(["1", "2", "3"]) &&
      module.worker_pool["cpu"].flexible_scale_set.zone_balance == true
    )
    error_message = "The Flexible pool is one Flexible scale set with its Spot Priority Mix, Instance Mix and zones."
  }

  assert {
    condition = (
      module.worker_pool["cpu"].flexible_scale_set.os_profile[0].linux_configuration[0].computer_name_prefix == "ray-cpu-" &&
      module.worker_pool["cpu"].flexible_scale_set.os_profile[0].linux_configuration[0].disable_password_authentication == true &&
      one(module.worker_pool["cpu"].flexible_scale_set.extension[*].type) == "ApplicationHealthLinux" &&
      module.worker_pool["cpu"].flexible_scale_set.automatic_instance_repair[0].enabled == true &&
      length(module.worker_pool["cpu"].flexible_scale_set.termination_notification) == 0
    )
    error_message = "The Flexible pool keeps the workers' host names, SSH-only login, health extension and repairs; Spot: no termination notice."
  }

  assert {
    condition = (
      module.worker_pool["gpu"].flexible_scale_set == null &&
      module.worker_pool["gpu"].scale_set.name == "ray-gpu" &&
      module.worker_pool["cpu"].role_assignments.autoscaler_scale_set[0].scope == module.worker_pool["cpu"].scale_set_id &&
      module.worker_pool["cpu"].scale_set_id == module.worker_pool["cpu"].flexible_scale_set.id
    )
    error_message = "The other pool pinned to Uniform is Uniform; Ray's autoscaler's role is on the Flexible scale set."
  }

  assert {
    condition = (
      length(azurerm_role_assignment.interface_reader) == 1 &&
      azurerm_role_assignment.interface_reader[0].scope == local.resource_group_id &&
      azurerm_role_definition.interface_reader[0].permissions[0].actions == tolist(["Microsoft.Network/networkInterfaces/read"])
    )
    error_message = "Ray's autoscaler may read the Flexible VMs' network interfaces (their private IPs), and nothing else, on the resource group."
  }
}

run "two_pools_in_ray_mode" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  variables {
    scaling_mode = "ray"
    worker_pools = {
      cpu = { vm_size = "Standard_F8s_v2", spot_enabled = true, min_count = 0, default_count = 0, max_count = 20, ray_resources = { simulator = 2 } }
      gpu = { vm_size = "Standard_NC4as_T4_v3", min_count = 0, default_count = 0, max_count = 2, ray_labels = { accelerator = "t4" } }
    }
  }

  assert {
    condition = alltrue([
      for name in ["cpu", "gpu"] :
      length(module.worker_pool[name].autoscale_settings) == 0 &&
      length(module.worker_pool[name].role_assignments.autoscaler_scale_set) == 1 &&
      module.worker_pool[name].role_assignments.autoscaler_scale_set[0].scope == module.worker_pool[name].flexible_scale_set.id &&
      module.worker_pool[name].role_assignments.autoscaler_scale_set[0].role_definition_name == "Virtual Machine Contributor" &&
      module.worker_pool[name].role_assignments.autoscaler_scale_set[0].principal_id == azurerm_user_assigned_identity.autoscaler[0].principal_id
    ])
    error_message = "scaling_mode = ray with two pools: no CPU rules, the head's identity is Virtual Machine Contributor on each pool's scale set."
  }

  assert {
    condition = alltrue([
      for v in [jsondecode(base64decode(one(regex("path: /etc/ray-cluster/deploy.json\\n(?:.*\\n){0,3}?\\s*content: \"([A-Za-z0-9+/=]+)\"", base64decode(azurerm_linux_virtual_machine.head.custom_data)))))] :
      jsondecode(v.AUTOSCALER_POOLS) == [
        { labels = "", max = 20, min = 0, name = "cpu", resources = { simulator = 2 }, scale_set = "ray-cpu", vm_size = "Standard_F8s_v2" },
        { labels = "accelerator=t4", max = 2, min = 0, name = "gpu", resources = {}, scale_set = "ray-gpu", vm_size = "Standard_NC4as_T4_v3" },
      ]
    ])
    error_message = "scaling_mode = ray with two pools: the head's AUTOSCALER_POOLS lists both pools, the first first, as Ray's autoscaler plans with them."
  }
}

run "gpu_head" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  variables {
    head_vm_size = "Standard_NC4as_T4_v3"
    os_image     = "ubuntu-24.04"
  }

  assert {
    condition = (
      azurerm_linux_virtual_machine.head.size == "Standard_NC4as_T4_v3" &&
      azurerm_linux_virtual_machine.head.source_image_reference[0].offer == "ubuntu-24_04-lts" &&
      module.worker_pool["workers"].flexible_scale_set.sku_name == "Standard_D4s_v5" &&
      keys(module.worker_pool) == tolist(["workers"])
    )
    error_message = "A GPU head (the node detects its GPUs at boot) with one CPU pool of workers."
  }
}

run "a_spot_head_is_deallocated_on_eviction_at_its_max_price" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    head_priority  = "Spot"
    head_max_price = 0.125
  }

  assert {
    condition     = azurerm_linux_virtual_machine.head.priority == "Spot" && azurerm_linux_virtual_machine.head.eviction_policy == "Deallocate" && azurerm_linux_virtual_machine.head.max_bid_price == 0.125
    error_message = "A Spot head must be deallocated on eviction (its disk holds the checkpoints), at head_max_price."
  }
}

run "the_head_is_regular_by_default" {
  command = plan
  module {
    source = "./modules/cluster"
  }

  assert {
    condition     = azurerm_linux_virtual_machine.head.priority == "Regular" && azurerm_linux_virtual_machine.head.eviction_policy == null
    error_message = "The head is a regular VM unless head_priority says Spot."
  }
}
