# Input checks that need no provider: the rules that compare two inputs, as preconditions of
# terraform_data (built into Terraform): `terraform plan` stops on them before anything is
# created in Azure.
# (tests/unit/test_terraform_validations.py plans variables.tf + checks.tf alone, offline.)

# The worker pools (workers.tf): worker_pools, each pool's settings with what it leaves out
# taken from the worker_* variables; no pool given = one pool "workers" made of the worker_*
# variables alone (the single scale set of clusters made before pools, same names). Ordered by
# name (the first one is the head's: locals.tf). A pool's scale set is NAME_PREFIX-POOL, its
# autoscale setting NAME_PREFIX-POOL-autoscale; its VMs' host names start with NAME_PREFIX-POOL-
# (the pool "workers" keeps NAME_PREFIX-w, which no other pool's prefix can match).
locals {
  worker_pool_names = length(var.worker_pools) > 0 ? keys(var.worker_pools) : ["workers"]
  # Each pool's orchestration mode: Flexible unless the pool pins "Uniform" (the pool "workers"
  # made when no pool is given is Flexible too; worker_pools = { workers = { orchestration_mode =
  # "Uniform" } } keeps the Uniform scale set of a cluster made before). Its own local: the
  # interface reader role (identity.tf) reads it too.
  worker_pool_modes = { for name in local.worker_pool_names : name => try(var.worker_pools[name].orchestration_mode, "Flexible") }
  worker_pool_settings = { for name in local.worker_pool_names : name => {
    scale_set_name       = "${var.name_prefix}-${name}"
    autoscale_name       = "${var.name_prefix}-${name}-autoscale"
    computer_name_prefix = name == "workers" ? "${var.name_prefix}-w" : "${var.name_prefix}-${name}-"
    vm_size              = coalesce(try(var.worker_pools[name].vm_size, null), var.worker_vm_size)
    min_count            = coalesce(try(var.worker_pools[name].min_count, null), var.worker_min_count)
    default_count        = coalesce(try(var.worker_pools[name].default_count, null), var.worker_default_count)
    max_count            = coalesce(try(var.worker_pools[name].max_count, null), var.worker_max_count)
    spot_enabled         = coalesce(try(var.worker_pools[name].spot_enabled, null), var.worker_spot_enabled)
    eviction_policy      = coalesce(try(var.worker_pools[name].eviction_policy, null), "Delete")
    max_price            = coalesce(try(var.worker_pools[name].max_price, null), -1)
    zones                = try(var.worker_pools[name].zones, [])
    zone_balance         = try(var.worker_pools[name].zone_balance, false)
    orchestration_mode   = local.worker_pool_modes[name]
    priority_mix         = try(var.worker_pools[name].priority_mix, null)
    instance_mix         = try(var.worker_pools[name].instance_mix, null)
    # The pool's own deploy-time values (cloud-init/placeholders.yaml).
    deploy_values = {
      WORKER_POOL   = name
      RAY_RESOURCES = jsonencode(try(var.worker_pools[name].ray_resources, {}))
      RAY_LABELS    = join(",", [for k, v in try(var.worker_pools[name].ray_labels, {}) : "${k}=${v}"])
    }
  } }
}

# The Key Vault's firewall (keyvault.tf): key_vault_allowed_cidrs, or else the entries of
# allowed_ssh_cidrs that are public (a private one is someone on a connected network, whom Key
# Vault's IP rules cannot name). A single address goes without "/32", as Key Vault keeps it.
locals {
  key_vault_allowed_cidrs = var.key_vault_allowed_cidrs != null ? var.key_vault_allowed_cidrs : [
    for c in var.allowed_ssh_cidrs : c if try(!anytrue([
      for r in local.non_public_ipv4_ranges : cidrhost("${split("/", c)[0]}/${min(tonumber(split("/", c)[1]), tonumber(split("/", r)[1]))}", 0) == cidrhost("${split("/", r)[0]}/${min(tonumber(split("/", c)[1]), tonumber(split("/", r)[1]))}", 0)
    ]), false)
  ]
  key_vault_ip_rules = [for c in local.key_vault_allowed_cidrs : endswith(c, "/32") ? trimsuffix(c, "/32") : c]
}

resource "terraform_data" "input_checks" {
  lifecycle {
    precondition {
      condition     = var.worker_min_count <= var.worker_default_count && var.worker_default_count <= var.worker_max_count
      error_message = "worker counts must satisfy worker_min_count <= worker_default_count <= worker_max_count (got ${var.worker_min_count} <= ${var.worker_default_count} <= ${var.worker_max_count})."
    }

    precondition {
      condition     = alltrue([for pool in local.worker_pool_settings : pool.min_count <= pool.default_count && pool.default_count <= pool.max_count])
      error_message = "worker_pools: every pool's counts must satisfy min_count <= default_count <= max_count (got ${join(", ", [for name, pool in local.worker_pool_settings : "${name}: ${pool.min_count} <= ${pool.default_count} <= ${pool.max_count}"])}; a count a pool leaves out is the worker_* variable's)."
    }

    precondition {
      condition     = var.scale_in_cpu_percent < var.scale_out_cpu_percent
      error_message = "scale_in_cpu_percent (${var.scale_in_cpu_percent}) must be below scale_out_cpu_percent (${var.scale_out_cpu_percent}), or autoscale flaps."
    }

    precondition {
      # Same network address once the subnet is cut to the VNet's prefix length, and not larger.
      condition     = tonumber(split("/", var.subnet_address_prefix)[1]) >= tonumber(split("/", var.vnet_address_space)[1]) && cidrhost("${split("/", var.subnet_address_prefix)[0]}/${split("/", var.vnet_address_space)[1]}", 0) == cidrhost(var.vnet_address_space, 0)
      error_message = "subnet_address_prefix (${var.subnet_address_prefix}) must lie inside vnet_address_space (${var.vnet_address_space}), e.g. \"10.42.1.0/24\" in \"10.42.0.0/16\"."
    }

    precondition {
      # Azure keeps 5 addresses of every subnet; the head and the Key Vault's private endpoint
      # take two more, the results storage's private endpoint (results.tf) one more.
      condition     = pow(2, 32 - tonumber(split("/", var.subnet_address_prefix)[1])) - (var.results_storage_account_id == "" ? 7 : 8) >= sum([for pool in local.worker_pool_settings : pool.max_count])
      error_message = "subnet_address_prefix (${var.subnet_address_prefix}) has room for ${pow(2, 32 - tonumber(split("/", var.subnet_address_prefix)[1])) - (var.results_storage_account_id == "" ? 7 : 8)} workers, fewer than the worker pools' max counts together (${sum([for pool in local.worker_pool_settings : pool.max_count])}): use a larger subnet."
    }

    precondition {
      # Terraform writes the cluster token through the vault's public endpoint (keyvault.tf).
      condition     = length(local.key_vault_ip_rules) > 0
      error_message = "The Key Vault's firewall would admit no address: allowed_ssh_cidrs (${join(", ", var.allowed_ssh_cidrs)}) has no public entry, and Terraform writes the cluster token into the vault from the public address it runs from: set key_vault_allowed_cidrs to that address, e.g. [\"203.0.113.7/32\"]."
    }
  }
}
