# Inputs. Names translate 1:1 to the Bicep stack's parameters in camelCase
# (allowed_ssh_cidrs -> allowedSshCidrs); resource_group_name and create_resource_group are
# Terraform's own (Bicep deploys into a resource group given to `az deployment group create`).
# Each validation names its variable and shows the expected form; rules that compare two inputs
# are preconditions in checks.tf (Terraform < 1.9 cannot compare variables in a validation).

# ---------------------------------------------------------------------------------------------
# Required
# ---------------------------------------------------------------------------------------------

variable "location" {
  type        = string
  description = "(Required) Azure region for every resource, e.g. \"westeurope\" or \"eastus\" (`az account list-locations -o table`)."

  validation {
    condition     = can(regex("^[a-z][a-z0-9]+$", var.location))
    error_message = "location must be an Azure region name in lower case without spaces, e.g. \"westeurope\"."
  }
}

variable "allowed_ssh_cidrs" {
  type        = list(string)
  nullable    = false
  description = "(Required) IPv4 CIDRs allowed to reach the head over SSH (port 22), e.g. [\"203.0.113.7/32\"]. Nothing else is reachable from outside the virtual network. The whole Internet (0.0.0.0/0, *, Internet, Any, any /0) is refused."

  validation {
    condition     = length(var.allowed_ssh_cidrs) > 0
    error_message = "allowed_ssh_cidrs must list at least one IPv4 CIDR, e.g. [\"203.0.113.7/32\"] (your address: curl -s https://ifconfig.me)."
  }

  validation {
    condition     = alltrue([for c in var.allowed_ssh_cidrs : !contains(["*", "internet", "any", "0.0.0.0/0"], lower(trimspace(c))) && !endswith(trimspace(c), "/0")])
    error_message = "allowed_ssh_cidrs must not open SSH to the whole Internet (0.0.0.0/0, *, Internet, Any or any /0): list your own addresses, e.g. [\"203.0.113.7/32\"]."
  }

  validation {
    condition     = alltrue([for c in var.allowed_ssh_cidrs : can(regex("^[0-9]{1,3}(\\.[0-9]{1,3}){3}/[0-9]{1,2}$", c)) && can(cidrhost(c, 0))])
    error_message = "allowed_ssh_cidrs: every entry must be an IPv4 CIDR such as \"203.0.113.7/32\" or \"198.51.100.0/24\"."
  }
}

variable "admin_ssh_public_key" {
  type        = string
  description = "(Required) OpenSSH public key of the admin user, one line: \"ssh-ed25519 AAAA... you@host\" or \"ssh-rsa AAAA...\" (RSA 2048 bits or more). The contents of ~/.ssh/id_ed25519.pub, not its path. Password login is disabled."

  validation {
    condition     = can(regex("^(ssh-ed25519|ssh-rsa) [A-Za-z0-9+/]+={0,3}( [^\\r\\n]*)?$", trimspace(var.admin_ssh_public_key)))
    error_message = "admin_ssh_public_key must be one OpenSSH public key line, ed25519 or RSA: \"ssh-ed25519 AAAA... you@host\" (the contents of ~/.ssh/id_ed25519.pub, not the file name)."
  }
}

# ---------------------------------------------------------------------------------------------
# Optional: placement and names
# ---------------------------------------------------------------------------------------------

variable "resource_group_name" {
  type        = string
  default     = "ray-rl-rg"
  description = "(Optional) Resource group to create (create_resource_group = true) or to deploy into (false)."

  validation {
    condition     = can(regex("^[-\\w.()]{0,89}[-\\w()]$", var.resource_group_name))
    error_message = "resource_group_name must be 1-90 letters, digits, '-', '_', '.', '(' or ')', not ending in '.', e.g. \"ray-rl-rg\"."
  }
}

variable "create_resource_group" {
  type        = bool
  default     = true
  description = "(Optional) true: create resource_group_name in location; false: use the existing resource group of that name."
}

variable "name_prefix" {
  type        = string
  default     = "ray"
  description = "(Optional) Prefix of every resource name (\"ray\" gives ray-head, ray-workers, ...): 2-16 lower-case letters, digits or '-', starting with a letter."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,14}[a-z0-9]$", var.name_prefix))
    error_message = "name_prefix must be 2-16 lower-case letters, digits or '-', starting with a letter and not ending in '-', e.g. \"ray\"."
  }
}

variable "tags" {
  type        = map(string)
  default     = {}
  nullable    = false
  description = "(Optional) Tags for every resource that takes them."
}

# ---------------------------------------------------------------------------------------------
# Optional: network
# ---------------------------------------------------------------------------------------------

variable "vnet_address_space" {
  type        = string
  default     = "10.42.0.0/16"
  description = "(Optional) Address space of the virtual network, an IPv4 CIDR between /8 and /28."

  validation {
    condition     = can(regex("^[0-9]{1,3}(\\.[0-9]{1,3}){3}/[0-9]{1,2}$", var.vnet_address_space)) && can(cidrhost(var.vnet_address_space, 0)) && try(tonumber(split("/", var.vnet_address_space)[1]) >= 8 && tonumber(split("/", var.vnet_address_space)[1]) <= 28, false)
    error_message = "vnet_address_space must be an IPv4 CIDR between /8 and /28, e.g. \"10.42.0.0/16\"."
  }
}

variable "subnet_address_prefix" {
  type        = string
  default     = "10.42.1.0/24"
  description = "(Optional) The cluster's subnet inside vnet_address_space, an IPv4 network address between /8 and /28 (the head takes its 4th host, e.g. 10.42.1.4; workers take the rest)."

  validation {
    condition     = can(regex("^[0-9]{1,3}(\\.[0-9]{1,3}){3}/[0-9]{1,2}$", var.subnet_address_prefix)) && try(cidrhost(var.subnet_address_prefix, 0) == split("/", var.subnet_address_prefix)[0], false) && try(tonumber(split("/", var.subnet_address_prefix)[1]) >= 8 && tonumber(split("/", var.subnet_address_prefix)[1]) <= 28, false)
    error_message = "subnet_address_prefix must be an IPv4 network address between /8 and /28 whose host bits are zero, e.g. \"10.42.1.0/24\"."
  }
}

# ---------------------------------------------------------------------------------------------
# Optional: virtual machines
# ---------------------------------------------------------------------------------------------

variable "admin_username" {
  type        = string
  default     = "azureuser"
  description = "(Optional) Admin user on every VM (SSH key login only); also the user the driver connects as. Lower-case, 1-32 characters, not a name Azure reserves (admin, root, ...)."

  validation {
    condition     = can(regex("^[a-z_][a-z0-9_-]{0,31}$", var.admin_username))
    error_message = "admin_username must be 1-32 lower-case letters, digits, '_' or '-', starting with a letter or '_', e.g. \"azureuser\"."
  }

  validation {
    condition     = !contains(["1", "123", "a", "actuser", "adm", "admin", "admin1", "admin2", "administrator", "aspnet", "backup", "console", "david", "guest", "john", "owner", "root", "server", "sql", "support", "support_388945a0", "sys", "test", "test1", "test2", "test3", "user", "user1", "user2", "user3", "user4", "user5"], var.admin_username)
    error_message = "admin_username must not be a name Azure reserves (admin, administrator, root, user, test, guest, ...): choose e.g. \"azureuser\"."
  }
}

variable "os_image" {
  type        = string
  default     = "ubuntu-22.04"
  description = "(Optional) Operating system of every VM: \"ubuntu-22.04\", \"ubuntu-24.04\" or \"debian-12\"."

  validation {
    condition     = contains(["ubuntu-22.04", "ubuntu-24.04", "debian-12"], var.os_image)
    error_message = "os_image must be one of \"ubuntu-22.04\", \"ubuntu-24.04\", \"debian-12\"."
  }
}

variable "head_vm_size" {
  type        = string
  default     = "Standard_D4s_v5"
  description = "(Optional) VM size of the head (the learner runs there), e.g. \"Standard_D4s_v5\" or a GPU size such as \"Standard_NC4as_T4_v3\"."

  validation {
    condition     = can(regex("(?i)^standard_[a-z0-9_-]+$", var.head_vm_size))
    error_message = "head_vm_size must be an Azure VM size such as \"Standard_D4s_v5\"."
  }
}

variable "worker_vm_size" {
  type        = string
  default     = "Standard_D4s_v5"
  description = "(Optional) VM size of each worker in the scale set, e.g. \"Standard_D4s_v5\" or \"Standard_F8s_v2\"."

  validation {
    condition     = can(regex("(?i)^standard_[a-z0-9_-]+$", var.worker_vm_size))
    error_message = "worker_vm_size must be an Azure VM size such as \"Standard_D4s_v5\"."
  }
}

variable "encryption_at_host_enabled" {
  type        = bool
  default     = false
  description = "(Optional) Encrypt temp disks and caches at the host on every VM. Needs the EncryptionAtHost feature on the subscription (az feature register --namespace Microsoft.Compute --name EncryptionAtHost), hence off by default."
}

# ---------------------------------------------------------------------------------------------
# Optional: workers and autoscale
# ---------------------------------------------------------------------------------------------

variable "worker_min_count" {
  type        = number
  default     = 0
  description = "(Optional) Fewest workers autoscale keeps, 0-100. The scale set has no CPU metric at 0 instances, so autoscale then returns to worker_default_count: it stays at 0 only when worker_default_count is 0 too."

  validation {
    condition     = var.worker_min_count >= 0 && var.worker_min_count <= 100 && floor(var.worker_min_count) == var.worker_min_count
    error_message = "worker_min_count must be a whole number from 0 to 100."
  }
}

variable "worker_default_count" {
  type        = number
  default     = 2
  description = "(Optional) Workers created at deployment, and the count autoscale returns to when it cannot read the CPU metric; worker_min_count <= worker_default_count <= worker_max_count."

  validation {
    condition     = var.worker_default_count >= 0 && var.worker_default_count <= 100 && floor(var.worker_default_count) == var.worker_default_count
    error_message = "worker_default_count must be a whole number from 0 to 100."
  }
}

variable "worker_max_count" {
  type        = number
  default     = 4
  description = "(Optional) Most workers autoscale adds, 1-100 (one placement group); check your regional vCPU quota with az vm list-usage --location LOCATION."

  validation {
    condition     = var.worker_max_count >= 1 && var.worker_max_count <= 100 && floor(var.worker_max_count) == var.worker_max_count
    error_message = "worker_max_count must be a whole number from 1 to 100."
  }
}

variable "scale_out_cpu_percent" {
  type        = number
  default     = 70
  description = "(Optional) Add one worker when the workers' average CPU over 5 minutes is above this percentage (1-100)."

  validation {
    condition     = var.scale_out_cpu_percent >= 1 && var.scale_out_cpu_percent <= 100
    error_message = "scale_out_cpu_percent must be between 1 and 100."
  }
}

variable "scale_in_cpu_percent" {
  type        = number
  default     = 30
  description = "(Optional) Remove one worker when the workers' average CPU over 5 minutes is below this percentage (0-99, below scale_out_cpu_percent)."

  validation {
    condition     = var.scale_in_cpu_percent >= 0 && var.scale_in_cpu_percent <= 99
    error_message = "scale_in_cpu_percent must be between 0 and 99."
  }
}

variable "scale_out_cooldown_minutes" {
  type        = number
  default     = 5
  description = "(Optional) Minutes autoscale waits after adding a worker before it scales again (1-60)."

  validation {
    condition     = var.scale_out_cooldown_minutes >= 1 && var.scale_out_cooldown_minutes <= 60 && floor(var.scale_out_cooldown_minutes) == var.scale_out_cooldown_minutes
    error_message = "scale_out_cooldown_minutes must be a whole number from 1 to 60."
  }
}

variable "scale_in_cooldown_minutes" {
  type        = number
  default     = 10
  description = "(Optional) Minutes autoscale waits after removing a worker before it scales again (1-60)."

  validation {
    condition     = var.scale_in_cooldown_minutes >= 1 && var.scale_in_cooldown_minutes <= 60 && floor(var.scale_in_cooldown_minutes) == var.scale_in_cooldown_minutes
    error_message = "scale_in_cooldown_minutes must be a whole number from 1 to 60."
  }
}

variable "worker_spot_enabled" {
  type        = bool
  default     = false
  description = "(Optional) Run workers as Spot VMs (evicted VMs are deleted; price capped at the on-demand price, max_bid_price = -1). Spot workers get about 30 s notice (Preempt) instead of a termination notification."
}

variable "worker_termination_notice_minutes" {
  type        = number
  default     = 5
  description = "(Optional) Minutes a regular (not Spot) worker gets between the Terminate scheduled event and its deletion, to drain its Ray tasks (5-15)."

  validation {
    condition     = var.worker_termination_notice_minutes >= 5 && var.worker_termination_notice_minutes <= 15 && floor(var.worker_termination_notice_minutes) == var.worker_termination_notice_minutes
    error_message = "worker_termination_notice_minutes must be a whole number from 5 to 15."
  }
}

# ---------------------------------------------------------------------------------------------
# Optional: software (deploy-time values of the cloud-init documents, cloud-init/placeholders.yaml:
# one line, no single quote, no backslash)
# ---------------------------------------------------------------------------------------------

variable "extra_pip_packages" {
  type        = list(string)
  default     = []
  nullable    = false
  description = "(Optional) Extra pip requirements installed on every node next to Ray, e.g. [\"minigrid==3.0.0\"]. No spaces, quotes or backslashes inside an entry; 1,024 characters in all."

  validation {
    condition     = alltrue([for p in var.extra_pip_packages : can(regex("^[^\\s'\\\\]+$", p))])
    error_message = "extra_pip_packages: each entry must be one requirement without spaces, single quotes or backslashes, e.g. \"minigrid==3.0.0\"."
  }

  validation {
    condition     = length(join(" ", var.extra_pip_packages)) <= 1024
    error_message = "extra_pip_packages must come to 1,024 characters or fewer (joined by spaces)."
  }
}

variable "pip_index_url" {
  type        = string
  default     = "https://pypi.org/simple"
  description = "(Optional) Python package index (PEP 503 simple API) the nodes install Ray and its dependencies from."

  validation {
    condition     = can(regex("^https?://[^\\s'\\\\]+$", var.pip_index_url)) && length(var.pip_index_url) <= 512
    error_message = "pip_index_url must be one http(s) URL of at most 512 characters without spaces, single quotes or backslashes, e.g. \"https://pypi.org/simple\"."
  }
}

variable "torch_index_url" {
  type        = string
  default     = "https://download.pytorch.org/whl/cpu"
  description = "(Optional) Package index that serves the torch wheel; the default is PyTorch's CPU-only index; on GPU sizes use one of its CUDA indexes (https://download.pytorch.org/whl/cuXYZ)."

  validation {
    condition     = can(regex("^https?://[^\\s'\\\\]+$", var.torch_index_url)) && length(var.torch_index_url) <= 512
    error_message = "torch_index_url must be one http(s) URL of at most 512 characters without spaces, single quotes or backslashes, e.g. \"https://download.pytorch.org/whl/cpu\"."
  }
}

variable "apt_source" {
  type        = string
  default     = ""
  nullable    = false
  description = "(Optional) One apt source line added before OS packages install, for private networks, e.g. \"deb [trusted=yes] http://10.0.0.5/debian ./\"; empty keeps the image's own mirrors."

  validation {
    condition     = var.apt_source == "" || (can(regex("^deb(-src)? [^\\r\\n'\\\\]+$", var.apt_source)) && length(var.apt_source) <= 512)
    error_message = "apt_source must be empty or one line of at most 512 characters starting with \"deb \", without single quotes or backslashes, e.g. \"deb [trusted=yes] http://10.0.0.5/debian ./\"."
  }
}
