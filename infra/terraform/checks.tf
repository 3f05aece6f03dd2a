# Rules that compare two inputs. Terraform before 1.9 cannot refer to another variable in a
# validation block, so they are preconditions of terraform_data (built into Terraform, no
# provider): `terraform plan` stops on them before anything is created in Azure.
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
