# Your own root calling the cluster as a module (README.md: "Using the stack as a module"). The
# provider block is yours, here; the module has none. Copy this folder next to your own
# configuration and set `source` to where the module is: this path works inside the repository
# (the module reads the rendered cloud-init documents at ../../../../cloud-init/rendered from
# its own folder, so keep the repository's layout), or use a Git source,
# "git::https://github.com/OWNER/azure-ray-rl.git//infra/terraform/modules/cluster?ref=TAG".

terraform {
  required_version = ">= 1.11"

  required_providers {
    azurerm = {
      source  = "hashicorp/azurerm"
      version = "~> 4.42"
    }
    random = {
      source  = "hashicorp/random"
      version = "~> 3.7"
    }
    time = {
      source  = "hashicorp/time"
      version = "~> 0.13"
    }
  }
}

provider "azurerm" {
  features {}
}

variable "location" {
  type        = string
  description = "Azure region of the cluster."
}

variable "allowed_ssh_cidrs" {
  type        = list(string)
  description = "Public addresses allowed to SSH to the head, e.g. [\"203.0.113.7/32\"]."
}

variable "admin_ssh_public_key" {
  type        = string
  description = "OpenSSH public key line of the admin user."
}

module "ray" {
  source = "../../modules/cluster"

  location             = var.location
  allowed_ssh_cidrs    = var.allowed_ssh_cidrs
  admin_ssh_public_key = var.admin_ssh_public_key
  name_prefix          = "rl"
  resource_group_name  = "rl-cluster-rg"

  # Two pools: Spot CPU env runners, and GPU nodes for the learner that scale from zero. The
  # CPU pool's own resource holds env runners that ask for it there (examples/pong/README.md).
  # Both are Flexible scale sets (the default); the CPU pool has its first VM regular and a
  # quarter of the rest (Spot Priority Mix), each VM of whichever of two 4-vCPU sizes Azure has
  # most capacity for (Instance Mix), in three zones.
  worker_pools = {
    cpu = {
      vm_size       = "Standard_D4s_v5"
      max_count     = 8
      spot_enabled  = true
      ray_resources = { cpu_pool = 100 }
      zones         = ["1", "2", "3"]
      priority_mix  = { base_regular_count = 1, regular_percentage_above_base = 25 }
      instance_mix = {
        vm_sizes            = ["Standard_D4s_v5", "Standard_D4as_v5"]
        allocation_strategy = "CapacityOptimized"
      }
    }
    gpu = {
      vm_size       = "Standard_NC4as_T4_v3"
      min_count     = 0
      default_count = 0
      max_count     = 1
    }
  }
}

# What your own configuration wires on: the cluster subnet (e.g. a private endpoint of yours in
# it), the VNet (a peering), each pool's scale set, the nodes' identity (a role on your storage).
output "cluster_subnet_id" {
  description = "The cluster subnet's resource ID."
  value       = module.ray.subnet_id
}

output "cluster_vnet_id" {
  description = "The cluster VNet's resource ID."
  value       = module.ray.vnet_id
}

output "cluster_scale_set_ids" {
  description = "Each worker pool's scale set ID, by pool name."
  value       = module.ray.scale_set_ids
}

output "node_principal_id" {
  description = "Principal ID of the identity the nodes run as."
  value       = module.ray.node_identity.principal_id
}

output "ssh_command" {
  description = "SSH to the head."
  value       = module.ray.ssh_command
}
