# Input checks that need no provider: the constants the validations in variables.tf share, and
# the rules that compare two inputs, as preconditions of terraform_data (built into Terraform):
# `terraform plan` stops on them before anything is created in Azure.
# (tests/unit/test_terraform_validations.py plans variables.tf + checks.tf alone, offline.)

locals {
  # An IPv4 CIDR in canonical form: four decimal octets 0-255 without leading zeros, a prefix
  # length 0-32 without a leading zero. cidrhost() alone accepts 010.0.0.1/32 or 0.0.0.0/00.
  ipv4_cidr_pattern = "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])/(3[0-2]|[12][0-9]|[0-9])$"

  # Where a virtual network may take its addresses: RFC 1918 and RFC 6598's shared space, the
  # ranges Azure's virtual network FAQ names as private.
  private_ipv4_ranges = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"]

  # One OpenSSH public key line, ed25519 or RSA (the key types Azure takes), comment optional.
  ssh_public_key_pattern = "^(ssh-ed25519|ssh-rsa) [A-Za-z0-9+/]+={0,3}( [^\\r\\n]*)?$"

  # For decoding an SSH key blob in admin_ssh_public_key's validation: base64 character ->
  # value, and the ASCII codes of the characters a key type name uses.
  base64_values = { for i in range(64) : substr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", i, 1) => i }
  ascii_codes   = merge({ "-" = 45 }, { for i in range(10) : tostring(i) => 48 + i }, { for i in range(26) : substr("abcdefghijklmnopqrstuvwxyz", i, 1) => 97 + i })
}

resource "terraform_data" "input_checks" {
  lifecycle {
    precondition {
      condition     = var.worker_min_count <= var.worker_default_count && var.worker_default_count <= var.worker_max_count
      error_message = "worker counts must satisfy worker_min_count <= worker_default_count <= worker_max_count (got ${var.worker_min_count} <= ${var.worker_default_count} <= ${var.worker_max_count})."
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
      # Azure keeps 5 addresses of every subnet; the head takes one more.
      condition     = pow(2, 32 - tonumber(split("/", var.subnet_address_prefix)[1])) - 6 >= var.worker_max_count
      error_message = "subnet_address_prefix (${var.subnet_address_prefix}) has room for ${pow(2, 32 - tonumber(split("/", var.subnet_address_prefix)[1])) - 6} workers, fewer than worker_max_count (${var.worker_max_count}): use a larger subnet."
    }
  }
}
