variable "location" {
  type        = string
  description = "(Required) Azure region of the results storage, e.g. \"westeurope\" (the cluster's, so the nodes write within the region)."

  validation {
    condition     = can(regex("^[a-z][a-z0-9]+$", var.location))
    error_message = "location must be an Azure region name in lower case without spaces, e.g. \"westeurope\"."
  }
}

variable "resource_group_name" {
  type        = string
  default     = "ray-results"
  description = "(Optional) The resource group this stack creates for the results storage, apart from any cluster's: deleting a cluster's group leaves it alone."

  validation {
    condition     = can(regex("^[-\\w.()]{0,89}[-\\w()]$", var.resource_group_name))
    error_message = "resource_group_name must be 1-90 letters, digits, '_', '-', '.', '(' or ')', not ending in '.', e.g. \"ray-results\"."
  }
}

variable "name_prefix" {
  type        = string
  default     = "ray"
  description = "(Optional) Start of the storage account's name, 2-10 lower-case letters and digits; the rest derives from the subscription and the resource group, so a re-apply keeps the name and another group gets another."

  validation {
    condition     = can(regex("^[a-z][a-z0-9]{1,9}$", var.name_prefix))
    error_message = "name_prefix must be 2-10 lower-case letters and digits, starting with a letter, e.g. \"ray\"."
  }
}

variable "allowed_cidrs" {
  type        = list(string)
  default     = []
  nullable    = false
  description = "(Optional) Public IPv4 addresses (CIDRs, /8 to /32) that may reach the account's public endpoint, e.g. your laptop's for `python -m driver download`. Empty (the default): the public endpoint is off, and only the clusters' private endpoints reach the account."

  validation {
    condition     = alltrue([for c in var.allowed_cidrs : can(regex("^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])/([89]|[12][0-9]|3[02])$", c))])
    error_message = "allowed_cidrs: every entry must be a public IPv4 CIDR in canonical form with a prefix length from /8 to /30 or /32 (Azure Storage refuses /31), e.g. \"203.0.113.7/32\"."
  }

  validation {
    condition     = alltrue([for c in var.allowed_cidrs : can(regex("/", c)) ? can(cidrhost(c, 0)) && try(cidrhost(c, 0) == split("/", c)[0], false) : true])
    error_message = "allowed_cidrs: every entry must be a network address whose host bits are zero, e.g. \"198.51.100.0/24\"; one address is \"203.0.113.7/32\"."
  }

  # Storage's firewall sees public addresses only: private ranges are refused in IP rules.
  validation {
    condition = alltrue([for c in var.allowed_cidrs : try(!anytrue([
      for r in ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "0.0.0.0/8", "224.0.0.0/3"] : cidrhost("${split("/", c)[0]}/${min(tonumber(split("/", c)[1]), tonumber(split("/", r)[1]))}", 0) == cidrhost("${split("/", r)[0]}/${min(tonumber(split("/", c)[1]), tonumber(split("/", r)[1]))}", 0)
    ]), true)])
    error_message = "allowed_cidrs: the storage firewall admits public addresses only; none may touch a private or special range (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10, 127.0.0.0/8, 169.254.0.0/16, 0.0.0.0/8, 224.0.0.0/3), e.g. [\"203.0.113.7/32\"]."
  }
}

variable "soft_delete_days" {
  type        = number
  default     = 14
  description = "(Optional) Days a deleted blob or container can still be restored (blob and container soft delete), 1-365."

  validation {
    condition     = var.soft_delete_days >= 1 && var.soft_delete_days <= 365 && floor(var.soft_delete_days) == var.soft_delete_days
    error_message = "soft_delete_days must be a whole number of days from 1 to 365, e.g. 14."
  }
}

variable "deployer_role" {
  type        = string
  default     = "reader"
  description = "(Optional) What the user who runs Terraform may do with the results container's blobs: \"reader\" (Storage Blob Data Reader: `python -m driver download` and `plot` from a laptop), \"contributor\" (Storage Blob Data Contributor: also delete runs) or \"none\". Needs the right to create role assignments (Owner, or User Access Administrator)."

  validation {
    condition     = contains(["none", "reader", "contributor"], var.deployer_role)
    error_message = "deployer_role must be \"none\", \"reader\" or \"contributor\"."
  }
}

variable "tags" {
  type        = map(string)
  default     = {}
  nullable    = false
  description = "(Optional) Tags for every resource."
}
