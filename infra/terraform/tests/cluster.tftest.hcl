# Plan-level tests of the stack with mocked providers: no Azure credentials, nothing is created.
# Runs on GitHub (.github/workflows/terraform.yml), where the providers download; Terraform 1.11+
# (override_during = plan gives computed attributes their mocked values at plan time).

mock_provider "azurerm" {
  override_during = plan

  mock_resource "azurerm_public_ip" {
    defaults = {
      ip_address = "20.61.1.2"
    }
  }
}

mock_provider "random" {
  override_during = plan

  mock_resource "random_bytes" {
    defaults = {
      hex    = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
      base64 = "ABEiM0RVZneImaq7zN3u/wARIjNEVWZ3iJmqu8zd7v8="
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

  assert {
    condition = (
      azurerm_monitor_autoscale_setting.workers.profile[0].capacity[0].minimum == 0 &&
      azurerm_monitor_autoscale_setting.workers.profile[0].capacity[0].default == 2 &&
      azurerm_monitor_autoscale_setting.workers.profile[0].capacity[0].maximum == 4
    )
    error_message = "Capacity must default to min 0, default 2, max 4."
  }

  assert {
    condition = one([
      for r in azurerm_monitor_autoscale_setting.workers.profile[0].rule : r
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
      for r in azurerm_monitor_autoscale_setting.workers.profile[0].rule : r
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
    condition     = azurerm_linux_virtual_machine_scale_set.workers.instances == 2
    error_message = "The scale set must start at worker_default_count."
  }
}

run "autoscale_follows_its_variables" {
  command = plan

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
      azurerm_monitor_autoscale_setting.workers.profile[0].capacity[0].minimum == 1 &&
      azurerm_monitor_autoscale_setting.workers.profile[0].capacity[0].default == 3 &&
      azurerm_monitor_autoscale_setting.workers.profile[0].capacity[0].maximum == 10
    )
    error_message = "Capacity must follow worker_min_count, worker_default_count, worker_max_count."
  }

  assert {
    condition = toset([
      for r in azurerm_monitor_autoscale_setting.workers.profile[0].rule :
      "${r.metric_trigger[0].operator}/${r.metric_trigger[0].threshold}/${r.scale_action[0].cooldown}"
    ]) == toset(["GreaterThan/85/PT3M", "LessThan/20/PT15M"])
    error_message = "Thresholds and cooldowns must follow their variables."
  }
}

run "regular_workers_get_a_termination_notice" {
  command = plan

  assert {
    condition     = azurerm_linux_virtual_machine_scale_set.workers.priority == "Regular" && azurerm_linux_virtual_machine_scale_set.workers.eviction_policy == null
    error_message = "Workers are regular VMs by default."
  }

  assert {
    condition = (
      length(azurerm_linux_virtual_machine_scale_set.workers.termination_notification) == 1 &&
      azurerm_linux_virtual_machine_scale_set.workers.termination_notification[0].enabled == true &&
      azurerm_linux_virtual_machine_scale_set.workers.termination_notification[0].timeout == "PT5M"
    )
    error_message = "Regular workers must get a 5-minute termination notification."
  }

  assert {
    condition = (
      azurerm_linux_virtual_machine_scale_set.workers.overprovision == false &&
      azurerm_linux_virtual_machine_scale_set.workers.upgrade_mode == "Manual" &&
      azurerm_linux_virtual_machine_scale_set.workers.scale_in[0].rule == "NewestVM" &&
      azurerm_linux_virtual_machine_scale_set.workers.disable_password_authentication == true
    )
    error_message = "Scale set: no overprovisioning, manual upgrades, NewestVM scale-in, SSH keys only."
  }

  assert {
    condition = alltrue([
      for ip in azurerm_linux_virtual_machine_scale_set.workers.network_interface[0].ip_configuration :
      length(ip.public_ip_address) == 0
    ])
    error_message = "Workers must have no public IP."
  }
}

run "idle_timeout_follows_its_variable" {
  command = plan

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

  variables {
    worker_spot_enabled = true
  }

  assert {
    condition = (
      azurerm_linux_virtual_machine_scale_set.workers.priority == "Spot" &&
      azurerm_linux_virtual_machine_scale_set.workers.eviction_policy == "Delete" &&
      azurerm_linux_virtual_machine_scale_set.workers.max_bid_price == -1
    )
    error_message = "Spot workers: priority Spot, eviction Delete, max price -1."
  }

  assert {
    condition     = length(azurerm_linux_virtual_machine_scale_set.workers.termination_notification) == 0
    error_message = "Spot scale sets cannot have a termination notification."
  }
}

run "head_network_and_image" {
  command = plan

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
      azurerm_linux_virtual_machine_scale_set.workers.source_image_reference[0].sku == "12-gen2"
    )
    error_message = "os_image = debian-12 must select Debian/debian-12/12-gen2 on head and workers."
  }

  assert {
    condition     = azurerm_linux_virtual_machine.head.disable_password_authentication == true && length(azurerm_linux_virtual_machine.head.boot_diagnostics) == 1
    error_message = "The head takes SSH keys only and has boot diagnostics."
  }
}

run "custom_data_is_filled" {
  command = plan

  variables {
    extra_pip_packages = ["minigrid==3.0.0", "ale-py"]
  }

  assert {
    condition = alltrue(flatten([
      for text in [
        base64decode(azurerm_linux_virtual_machine.head.custom_data),
        base64decode(azurerm_linux_virtual_machine_scale_set.workers.custom_data),
        ] : [
        !strcontains(text, "@@"),
        strcontains(text, "RAY_HEAD_IP='10.42.1.4'"),
        strcontains(text, "RAY_CLUSTER_TOKEN='00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff'"),
        strcontains(text, "RAY_ADMIN_USER='azureuser'"),
        strcontains(text, "EXTRA_PIP_PACKAGES='minigrid==3.0.0 ale-py'"),
        strcontains(text, "PIP_INDEX_URL='https://pypi.org/simple'"),
        strcontains(text, "TORCH_INDEX_URL='https://download.pytorch.org/whl/cpu'"),
      ]
    ]))
    error_message = "Head and worker custom data must carry every deploy-time value and no placeholder."
  }

  assert {
    condition = (
      length(azurerm_linux_virtual_machine.head.custom_data) <= 87380 &&
      length(azurerm_linux_virtual_machine_scale_set.workers.custom_data) <= 87380
    )
    error_message = "Custom data must stay within Azure's 87,380 base64 characters."
  }
}

run "outputs" {
  command = plan

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
    condition     = output.resource_group_name == "ray-rl-rg" && length(azurerm_resource_group.this) == 1
    error_message = "By default the stack creates the resource group ray-rl-rg."
  }
}

run "existing_resource_group" {
  command = plan

  variables {
    create_resource_group = false
    resource_group_name   = "my-existing-rg"
  }

  assert {
    condition     = length(azurerm_resource_group.this) == 0 && output.resource_group_name == "my-existing-rg"
    error_message = "With create_resource_group = false the stack uses the named group and creates none."
  }

  assert {
    condition     = azurerm_linux_virtual_machine_scale_set.workers.resource_group_name == "my-existing-rg"
    error_message = "Resources must go into the existing group."
  }
}
