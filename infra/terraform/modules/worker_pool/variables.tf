# Inputs of one worker pool. The root (../../workers.tf) calls this module once per pool of
# var.worker_pools and has already validated every value (../../variables.tf, ../../checks.tf).

variable "name" {
  type        = string
  description = "Name of the scale set, e.g. \"ray-workers\"."
}

variable "computer_name_prefix" {
  type        = string
  description = "Host name prefix of the pool's VMs; it must differ from every other pool's."
}

variable "location" {
  type        = string
  description = "Azure region."
}

variable "resource_group_name" {
  type        = string
  description = "Resource group of the scale set and its autoscale setting."
}

variable "tags" {
  type        = map(string)
  description = "Tags for every resource."
}

variable "vm_size" {
  type        = string
  description = "VM size of each worker of the pool."
}

variable "min_count" {
  type        = number
  description = "Fewest workers (autoscale's minimum)."
}

variable "default_count" {
  type        = number
  description = "Workers created with the scale set, and autoscale's default."
}

variable "max_count" {
  type        = number
  description = "Most workers (autoscale's maximum)."
}

variable "spot" {
  type = object({
    enabled         = bool
    eviction_policy = string
    max_price       = number
  })
  description = "Spot VMs (eviction policy Delete or Deallocate, max price in US dollars per hour or -1 for the on-demand price), or regular ones (enabled = false)."
}

variable "zones" {
  type        = list(string)
  description = "Availability zones of the pool's VMs, e.g. [\"1\", \"2\"]; [] (regional): Azure places them in the region, in no zone it names."
}

variable "zone_balance" {
  type        = bool
  description = "With two zones or more: keep the pool's VMs spread evenly over its zones (Azure refuses a scale-out that would unbalance them)."
}

variable "orchestration_mode" {
  type        = string
  description = "\"Flexible\" (azurerm_orchestrated_virtual_machine_scale_set, the only one with priority_mix and instance_mix; the cluster's default) or \"Uniform\" (azurerm_linux_virtual_machine_scale_set)."
}

variable "priority_mix" {
  type = object({
    base_regular_count            = number
    regular_percentage_above_base = number
  })
  description = "Flexible Spot pools: Spot Priority Mix (the first base_regular_count VMs regular, then regular_percentage_above_base % of the rest regular, the others Spot), or null."
}

variable "instance_mix" {
  type = object({
    vm_sizes            = list(string)
    allocation_strategy = string
  })
  description = "Flexible pools: Instance Mix (the VM sizes the pool may take and Azure's allocation strategy, LowestPrice or CapacityOptimized), or null: every VM is vm_size."
}

variable "termination_notice_minutes" {
  type        = number
  description = "Minutes between a regular worker's Terminate scheduled event and its deletion (Spot VMs cannot have it)."
}

variable "automatic_repair" {
  type = object({
    enabled              = bool
    grace_period_minutes = number
    action               = string
  })
  description = "Automatic instance repair of unhealthy workers."
}

variable "health_probe" {
  type        = any
  description = "The Application Health extension's settings (the workers' loopback health endpoint)."
}

variable "admin_username" {
  type        = string
  description = "Admin user (SSH key login only)."
}

variable "admin_ssh_public_key" {
  type        = string
  description = "The admin user's OpenSSH public key, one line."
}

variable "source_image_id" {
  type        = string
  description = "A gallery image version the workers boot from, or null for source_image_reference."
}

variable "source_image_reference" {
  type = object({
    publisher = string
    offer     = string
    sku       = string
  })
  description = "The marketplace image (latest version) when source_image_id is null."
}

variable "subnet_id" {
  type        = string
  description = "The cluster subnet."
}

variable "identity_id" {
  type        = string
  description = "The nodes' user-assigned identity (reads the cluster token)."
}

variable "encryption_at_host_enabled" {
  type        = bool
  description = "Encrypt temp disks and caches at the host."
}

variable "custom_data" {
  type        = string
  sensitive   = true
  description = "The pool's filled worker cloud-init document (plain text; sent as base64)."
}

variable "scaling_mode" {
  type        = string
  description = "\"cpu\": an Azure Monitor autoscale setting on average CPU; \"ray\": none (Ray's autoscaler on the head sets the count)."
}

variable "cpu_autoscale" {
  type = object({
    name                       = string
    scale_out_cpu_percent      = number
    scale_in_cpu_percent       = number
    scale_out_cooldown_minutes = number
    scale_in_cooldown_minutes  = number
  })
  description = "The CPU autoscale setting (scaling_mode = \"cpu\"): its name and rules."
}

variable "head_principal_id" {
  type        = string
  description = "Principal id of the head's own identity (Ray's autoscaler, autostop), or null without one."
}

variable "autostop" {
  type = object({
    enabled                   = bool
    role_definition_id        = string
    scale_set_assignment_name = string
    autoscale_assignment_name = string
  })
  description = "Autostop's custom role (its resource id) and the names of its assignments on this pool's scale set and autoscale setting; enabled = false: no assignment."
}
