# Every input that Azure would refuse late is refused at plan time. (The same rules are
# exercised offline with the real terraform binary in tests/test_terraform_validations.py.)

mock_provider "azurerm" {}
mock_provider "time" {}
# random is not mocked: mock providers cannot open the ephemeral random_password (see
# cluster.tftest.hcl).

variables {
  location             = "westeurope"
  allowed_ssh_cidrs    = ["203.0.113.7/32"]
  admin_ssh_public_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIP4S9mbJDa3rbswrgZDZPW0SvS6zPUB0LvnB0IkRZLgc you@example"
}

run "ssh_from_the_whole_internet_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    allowed_ssh_cidrs = ["0.0.0.0/0"]
  }
  expect_failures = [var.allowed_ssh_cidrs]
}

run "ssh_from_star_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    allowed_ssh_cidrs = ["*"]
  }
  expect_failures = [var.allowed_ssh_cidrs]
}

run "ssh_from_internet_tag_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    allowed_ssh_cidrs = ["Internet"]
  }
  expect_failures = [var.allowed_ssh_cidrs]
}

run "empty_ssh_cidrs_are_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    allowed_ssh_cidrs = []
  }
  expect_failures = [var.allowed_ssh_cidrs]
}

run "key_path_instead_of_key_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    admin_ssh_public_key = "~/.ssh/id_ed25519.pub"
  }
  expect_failures = [var.admin_ssh_public_key]
}

run "reserved_admin_username_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    admin_username = "admin"
  }
  expect_failures = [var.admin_username]
}

run "unknown_os_image_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    os_image = "ubuntu-20.04"
  }
  expect_failures = [var.os_image]
}

run "subnet_with_host_bits_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    subnet_address_prefix = "10.42.1.5/24"
  }
  expect_failures = [var.subnet_address_prefix]
}

run "quote_in_pip_package_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    extra_pip_packages = ["it's"]
  }
  expect_failures = [var.extra_pip_packages]
}

run "multi_line_apt_source_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    apt_source = "deb http://a ./\ndeb http://b ./"
  }
  expect_failures = [var.apt_source]
}

run "termination_notice_out_of_range_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    worker_termination_notice_minutes = 20
  }
  expect_failures = [var.worker_termination_notice_minutes]
}

run "repair_grace_period_out_of_range_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    worker_automatic_repair_grace_period_minutes = 5
  }
  expect_failures = [var.worker_automatic_repair_grace_period_minutes]
}

run "repair_by_restart_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    worker_automatic_repair_action = "Restart"
  }
  expect_failures = [var.worker_automatic_repair_action]
}

run "min_above_default_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    worker_min_count     = 3
    worker_default_count = 2
  }
  expect_failures = [terraform_data.input_checks]
}

run "default_above_max_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    worker_default_count = 5
    worker_max_count     = 4
  }
  expect_failures = [terraform_data.input_checks]
}

run "scale_in_threshold_above_scale_out_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    scale_in_cpu_percent  = 80
    scale_out_cpu_percent = 70
  }
  expect_failures = [terraform_data.input_checks]
}

run "subnet_outside_the_vnet_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    subnet_address_prefix = "10.43.1.0/24"
  }
  expect_failures = [terraform_data.input_checks]
}

# allowed_ssh_cidrs: the whole Internet in other spellings, judged by numbers.
run "ssh_from_a_zero_padded_prefix_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    allowed_ssh_cidrs = ["0.0.0.0/00"]
  }
  expect_failures = [var.allowed_ssh_cidrs]
}

run "ssh_cidr_with_leading_zero_octet_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    allowed_ssh_cidrs = ["010.0.0.1/32"]
  }
  expect_failures = [var.allowed_ssh_cidrs]
}

run "ssh_cidr_with_host_bits_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    allowed_ssh_cidrs = ["1.2.3.4/1"]
  }
  expect_failures = [var.allowed_ssh_cidrs]
}

run "ssh_from_two_halves_of_the_internet_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    allowed_ssh_cidrs = ["0.0.0.0/1", "128.0.0.0/1"]
  }
  expect_failures = [var.allowed_ssh_cidrs]
}

run "ssh_from_more_than_a_slash_8_in_all_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    allowed_ssh_cidrs = ["10.0.0.0/8", "203.0.113.7/32"]
  }
  expect_failures = [var.allowed_ssh_cidrs]
}

# admin_ssh_public_key: the key data is decoded.
# A real 1024-bit RSA key (ssh-keygen -t rsa -b 1024).
run "short_rsa_key_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    admin_ssh_public_key = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDKO7EiRUcoBV9uzAMHreNQWNNsY9JTBlGH/Qku8PROgqgqRd77LrhqVl7PqN45Ytyi9/rVG8Qr9QO8N53nYR1lA0AAiMav7PuYWrVjjF0EMk/usIcSRFSR+TEtZ79VCINxXVnSUie95NDOq5dOv/4C/XxtkUuq4KyeLAvcL5HG7Q== short@example"
  }
  expect_failures = [var.admin_ssh_public_key]
}

run "truncated_key_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    admin_ssh_public_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIP4S9mbJDa3rbswrgZDZPW0SvS6zPUB0LvnB0IkR you@example"
  }
  expect_failures = [var.admin_ssh_public_key]
}

run "key_of_another_type_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    admin_ssh_public_key = "ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIP4S9mbJDa3rbswrgZDZPW0SvS6zPUB0LvnB0IkRZLgc you@example"
  }
  expect_failures = [var.admin_ssh_public_key]
}

run "ray_as_admin_username_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    admin_username = "ray"
  }
  expect_failures = [var.admin_username]
}

run "image_account_as_admin_username_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    admin_username = "ubuntu"
  }
  expect_failures = [var.admin_username]
}

run "public_vnet_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    vnet_address_space    = "20.42.0.0/16"
    subnet_address_prefix = "20.42.1.0/24"
  }
  expect_failures = [var.vnet_address_space, var.subnet_address_prefix]
}

run "link_local_vnet_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    vnet_address_space    = "169.254.0.0/16"
    subnet_address_prefix = "169.254.1.0/24"
  }
  expect_failures = [var.vnet_address_space, var.subnet_address_prefix]
}

run "pip_option_as_package_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    extra_pip_packages = ["--index-url=https://mirror.example/simple"]
  }
  expect_failures = [var.extra_pip_packages]
}

run "idle_timeout_beyond_the_public_ip_maximum_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    tcp_idle_timeout_minutes = 31
  }
  expect_failures = [var.tcp_idle_timeout_minutes]
}

run "private_range_on_the_key_vault_firewall_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    key_vault_allowed_cidrs = ["10.1.0.0/16"]
  }
  expect_failures = [var.key_vault_allowed_cidrs]
}

run "empty_key_vault_firewall_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    key_vault_allowed_cidrs = []
  }
  expect_failures = [var.key_vault_allowed_cidrs]
}

run "ssh_from_private_ranges_only_needs_a_key_vault_address" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    allowed_ssh_cidrs = ["10.0.0.0/8"]
  }
  expect_failures = [terraform_data.input_checks]
}

run "cluster_token_version_zero_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    cluster_token_version = 0
  }
  expect_failures = [var.cluster_token_version]
}

run "cluster_token_expiration_beyond_ten_years_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    cluster_token_expiration_days = 3651
  }
  expect_failures = [var.cluster_token_expiration_days]
}

run "rbac_wait_beyond_fifteen_minutes_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    rbac_propagation_wait_seconds = 901
  }
  expect_failures = [var.rbac_propagation_wait_seconds]
}

run "unknown_scaling_mode_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    scaling_mode = "memory"
  }
  expect_failures = [var.scaling_mode]
}

run "zero_idle_timeout_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    ray_idle_timeout_minutes = 0
  }
  expect_failures = [var.ray_idle_timeout_minutes]
}

run "node_image_that_is_not_a_gallery_image_version_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    node_image_id = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-ray/providers/Microsoft.Compute/galleries/ray_nodes/images/ray-node-ubuntu-22.04"
  }
  expect_failures = [var.node_image_id]
}

run "autostop_under_ten_minutes_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    autostop_idle_minutes = 5
  }
  expect_failures = [var.autostop_idle_minutes]
}

run "autostop_beyond_a_week_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    autostop_idle_minutes = 10081
  }
  expect_failures = [var.autostop_idle_minutes]
}

run "two_pools_in_ray_mode_are_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    scaling_mode = "ray"
    worker_pools = {
      cpu = {}
      gpu = { vm_size = "Standard_NC4as_T4_v3" }
    }
  }
  expect_failures = [terraform_data.input_checks]
}

run "bad_pool_name_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    worker_pools = { "GPU_pool" = {} }
  }
  expect_failures = [var.worker_pools]
}

run "pool_counts_out_of_order_are_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    worker_pools = { gpu = { min_count = 3, default_count = 1, max_count = 4 } }
  }
  expect_failures = [terraform_data.input_checks]
}

run "spot_price_on_a_regular_pool_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    worker_pools = { cpu = { max_price = 0.1 } }
  }
  expect_failures = [var.worker_pools]
}

run "head_priority_other_than_regular_or_spot_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    head_priority = "spot"
  }
  expect_failures = [var.head_priority]
}

run "head_max_price_of_zero_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    head_priority  = "Spot"
    head_max_price = 0
  }
  expect_failures = [var.head_max_price]
}

run "head_max_price_on_a_regular_head_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    head_max_price = 0.5
  }
  expect_failures = [var.head_max_price]
}

run "a_pool_zone_that_azure_has_not_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    worker_pools = { cpu = { zones = ["4"] } }
  }
  expect_failures = [var.worker_pools]
}

run "zone_balance_with_one_zone_is_refused" {
  command = plan
  module {
    source = "./modules/cluster"
  }
  variables {
    worker_pools = { cpu = { zones = ["1"], zone_balance = true } }
  }
  expect_failures = [var.worker_pools]
}
