# GENERATED from modules/cluster by scripts/terraform_root.py. Do not edit: change the
# module and run `.venv/bin/python scripts/terraform_root.py` (tests/unit/
# test_terraform_module.py fails while this file is stale).
# This file: a copy of its variables.tf.

# Inputs. Names translate 1:1 to the Bicep stack's parameters in camelCase
# (allowed_ssh_cidrs -> allowedSshCidrs); resource_group_name and create_resource_group are
# Terraform's own (Bicep deploys into a resource group given to `az deployment group create`).
# Each validation names its variable and shows the expected form; rules that compare two inputs
# are preconditions in checks.tf. The constants the validations share (CIDR pattern, private
# ranges, base64 alphabet) are the locals below, in this file, so that it stands alone: the root
# (infra/terraform/variables.tf) is a generated copy of it (scripts/terraform_root.py). A
# condition refers to its own variable and to constants only: a local derived from the variable
# would make a cycle, hence the `for x in [expression] : ...` bindings in the longer conditions.

# The constants the validations share.
locals {
  # An IPv4 CIDR in canonical form: four decimal octets 0-255 without leading zeros, a prefix
  # length 0-32 without a leading zero. cidrhost() alone accepts 010.0.0.1/32 or 0.0.0.0/00.
  ipv4_cidr_pattern = "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])/(3[0-2]|[12][0-9]|[0-9])$"

  # Where a virtual network may take its addresses: RFC 1918 and RFC 6598's shared space, the
  # ranges Azure's virtual network FAQ names as private.
  private_ipv4_ranges = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"]

  # One OpenSSH public key line, ed25519 or RSA (the key types Azure takes), comment optional.
  ssh_public_key_pattern = "^(ssh-ed25519|ssh-rsa) [A-Za-z0-9+/]+={0,3}( [^\\r\\n]*)?$"

  # Addresses Key Vault's firewall never sees as a client's public address: "this network",
  # RFC 1918, RFC 6598, loopback, link-local, and 224.0.0.0/3 (multicast 224.0.0.0/4 and the
  # reserved 240.0.0.0/4).
  non_public_ipv4_ranges = ["0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16", "224.0.0.0/3"]

  # For decoding an SSH key blob in admin_ssh_public_key's validation: base64 character ->
  # value, and the ASCII codes of the characters a key type name uses.
  base64_values = { for i in range(64) : substr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", i, 1) => i }
  ascii_codes   = merge({ "-" = 45 }, { for i in range(10) : tostring(i) => 48 + i }, { for i in range(26) : substr("abcdefghijklmnopqrstuvwxyz", i, 1) => 97 + i })
}

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

  # The rules below compare numbers, not spellings: 0.0.0.0/00, 010.0.0.1/32, 1.2.3.4/1 or
  # ["0.0.0.0/1", "128.0.0.0/1"] are the whole Internet too. Each rule skips entries that are
  # not in canonical form (the first one reports those) with `? :`, not `||`: HCL evaluates
  # both sides of `||`, and cidrhost("*", 0) would be an error instead of a message.
  validation {
    condition     = alltrue([for c in var.allowed_ssh_cidrs : can(regex(local.ipv4_cidr_pattern, c))])
    error_message = "allowed_ssh_cidrs: every entry must be an IPv4 CIDR in canonical form, four decimal octets 0-255 without leading zeros and a prefix length 0-32, e.g. \"203.0.113.7/32\" or \"198.51.100.0/24\"."
  }

  validation {
    condition     = alltrue([for c in var.allowed_ssh_cidrs : can(regex(local.ipv4_cidr_pattern, c)) ? cidrhost(c, 0) == split("/", c)[0] : true])
    error_message = "allowed_ssh_cidrs: every entry must be a network address whose host bits are zero, e.g. \"198.51.100.0/24\" (not \"198.51.100.7/24\"); one address is \"198.51.100.7/32\"."
  }

  validation {
    condition     = alltrue([for c in var.allowed_ssh_cidrs : can(regex(local.ipv4_cidr_pattern, c)) ? tonumber(split("/", c)[1]) >= 8 : true])
    error_message = "allowed_ssh_cidrs: every entry must be /8 or narrower, e.g. \"203.0.113.7/32\" or \"198.51.100.0/24\"."
  }

  validation {
    # Every entry counts in full, overlaps included: 2^24 addresses is one /8 in all.
    condition     = sum(concat([0], [for c in var.allowed_ssh_cidrs : can(regex(local.ipv4_cidr_pattern, c)) ? pow(2, 32 - tonumber(split("/", c)[1])) : 0])) <= pow(2, 24)
    error_message = "allowed_ssh_cidrs must cover at most 16,777,216 addresses (one /8) in all, every entry counted, e.g. [\"203.0.113.7/32\", \"198.51.100.0/24\"]."
  }
}

variable "admin_ssh_public_key" {
  type        = string
  description = "(Required) OpenSSH public key of the admin user, one line: \"ssh-ed25519 AAAA... you@host\" or \"ssh-rsa AAAA...\" (RSA 2048 bits or more). The contents of ~/.ssh/id_ed25519.pub, not its path. Password login is disabled."

  validation {
    condition     = can(regex(local.ssh_public_key_pattern, trimspace(var.admin_ssh_public_key)))
    error_message = "admin_ssh_public_key must be one OpenSSH public key line, ed25519 or RSA: \"ssh-ed25519 AAAA... you@host\" (the contents of ~/.ssh/id_ed25519.pub, not the file name)."
  }

  # The key data, decoded: the SSH wire format (RFC 4253 section 6.6, RFC 8709 for ed25519) is a
  # string (uint32 length + bytes) holding the key type, then for ssh-ed25519 one string of 32
  # bytes (51 bytes in all), for ssh-rsa two mpints, e and n. base64decode() cannot help (it
  # wants UTF-8 text), so each group of 4 base64 characters becomes its 3 bytes arithmetically.
  validation {
    condition = !can(regex(local.ssh_public_key_pattern, trimspace(var.admin_ssh_public_key))) ? true : alltrue([
      for key in [split(" ", trimspace(var.admin_ssh_public_key))] : alltrue([
        for b in [flatten([for g in range(min(floor(length(key[1]) / 4), 1000)) : [
          for v in [sum([for j in range(4) : lookup(local.base64_values, substr(key[1], 4 * g + j, 1), 0) * pow(64, 3 - j)])] :
          [floor(v / 65536), floor(v / 256) % 256, v % 256]
          ]])] : alltrue([
          for size in [length(b) - length(regex("=*$", key[1]))] : (
            length(key[1]) % 4 == 0 && length(key[1]) <= 4000 &&
            # the type string inside the blob is the type word
            try(b[0] * 16777216 + b[1] * 65536 + b[2] * 256 + b[3] == length(key[0]), false) &&
            try(slice(b, 4, 4 + length(key[0])) == [for c in regexall(".", key[0]) : local.ascii_codes[c]], false) &&
            (key[0] == "ssh-ed25519"
              ? size == 51 && try(b[15] * 16777216 + b[16] * 65536 + b[17] * 256 + b[18] == 32, false)
              # ssh-rsa: e and n fill the blob exactly
              : try(alltrue([
                for e in [b[11] * 16777216 + b[12] * 65536 + b[13] * 256 + b[14]] : alltrue([
                  for n in [b[15 + e] * 16777216 + b[16 + e] * 65536 + b[17 + e] * 256 + b[18 + e]] : e >= 1 && n >= 1 && size == 19 + e + n
                ])
            ]), false))
          )
        ])
      ])
    ])
    error_message = "admin_ssh_public_key: the key data is not a valid ssh-ed25519 or ssh-rsa public key (it must decode to a key of the type its first word names; an ed25519 key is 51 bytes): paste the whole line of ~/.ssh/id_ed25519.pub, e.g. \"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA... you@host\"."
  }

  validation {
    # n is an mpint: a leading zero byte only keeps it positive. 2048 bits = 256 bytes with
    # the top bit set.
    condition = !(can(regex("^ssh-rsa ", trimspace(var.admin_ssh_public_key))) && can(regex(local.ssh_public_key_pattern, trimspace(var.admin_ssh_public_key)))) ? true : alltrue([
      for key in [split(" ", trimspace(var.admin_ssh_public_key))] : alltrue([
        for b in [flatten([for g in range(min(floor(length(key[1]) / 4), 1000)) : [
          for v in [sum([for j in range(4) : lookup(local.base64_values, substr(key[1], 4 * g + j, 1), 0) * pow(64, 3 - j)])] :
          [floor(v / 65536), floor(v / 256) % 256, v % 256]
          ]])] : try(alltrue([
          for e in [b[11] * 16777216 + b[12] * 65536 + b[13] * 256 + b[14]] : alltrue([
            for n in [b[15 + e] * 16777216 + b[16 + e] * 65536 + b[17 + e] * 256 + b[18 + e]] : alltrue([
              for first in [b[19 + e]] : (first == 0
                ? n - 1 > 256 || (n - 1 == 256 && b[20 + e] >= 128)
              : n > 256 || (n == 256 && first >= 128))
            ])
          ])
        ]), true) # a malformed blob is the rule above's to report
      ])
    ])
    error_message = "admin_ssh_public_key: RSA keys must have 2048 bits or more (Azure refuses shorter ones): make an ed25519 key (ssh-keygen -t ed25519) or a longer RSA key (ssh-keygen -t rsa -b 4096), e.g. \"ssh-ed25519 AAAA... you@host\"."
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
  description = "(Optional) Address space of the virtual network, an IPv4 network address between /8 and /28 in a private range: 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 (RFC 1918) or 100.64.0.0/10 (RFC 6598)."

  validation {
    condition     = can(regex(local.ipv4_cidr_pattern, var.vnet_address_space)) && try(cidrhost(var.vnet_address_space, 0) == split("/", var.vnet_address_space)[0] && tonumber(split("/", var.vnet_address_space)[1]) >= 8 && tonumber(split("/", var.vnet_address_space)[1]) <= 28, false)
    error_message = "vnet_address_space must be an IPv4 network address between /8 and /28 in canonical form (no leading zeros) whose host bits are zero, e.g. \"10.42.0.0/16\"."
  }

  # Azure's virtual network FAQ: RFC 1918 ranges, or RFC 6598's shared space, "treated as a
  # private IP address space in Azure"; never 224.0.0.0/4, 127.0.0.0/8, 169.254.0.0/16 or
  # 168.63.129.16 (Azure's DNS and health probes), which none of the four contains. A public
  # range would hide those Internet addresses from the nodes.
  validation {
    condition = !can(regex(local.ipv4_cidr_pattern, var.vnet_address_space)) ? true : anytrue([
      for r in local.private_ipv4_ranges : tonumber(split("/", var.vnet_address_space)[1]) >= tonumber(split("/", r)[1]) && cidrhost("${split("/", var.vnet_address_space)[0]}/${split("/", r)[1]}", 0) == split("/", r)[0]
    ])
    error_message = "vnet_address_space must lie in a private range, 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 or 100.64.0.0/10 (public ranges, loopback 127.0.0.0/8, link-local 169.254.0.0/16, multicast 224.0.0.0/4 and Azure's 168.63.129.16 are refused), e.g. \"10.42.0.0/16\"."
  }
}

variable "subnet_address_prefix" {
  type        = string
  default     = "10.42.1.0/24"
  description = "(Optional) The cluster's subnet inside vnet_address_space, an IPv4 network address between /8 and /28 in a private range (the head takes its 4th host, e.g. 10.42.1.4, the Key Vault's private endpoint its 5th, the results storage's private endpoint its 6th; workers take the rest)."

  validation {
    condition     = can(regex(local.ipv4_cidr_pattern, var.subnet_address_prefix)) && try(cidrhost(var.subnet_address_prefix, 0) == split("/", var.subnet_address_prefix)[0] && tonumber(split("/", var.subnet_address_prefix)[1]) >= 8 && tonumber(split("/", var.subnet_address_prefix)[1]) <= 28, false)
    error_message = "subnet_address_prefix must be an IPv4 network address between /8 and /28 in canonical form (no leading zeros) whose host bits are zero, e.g. \"10.42.1.0/24\"."
  }

  validation {
    condition = !can(regex(local.ipv4_cidr_pattern, var.subnet_address_prefix)) ? true : anytrue([
      for r in local.private_ipv4_ranges : tonumber(split("/", var.subnet_address_prefix)[1]) >= tonumber(split("/", r)[1]) && cidrhost("${split("/", var.subnet_address_prefix)[0]}/${split("/", r)[1]}", 0) == split("/", r)[0]
    ])
    error_message = "subnet_address_prefix must lie in a private range, 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 or 100.64.0.0/10 (public ranges, loopback, link-local, multicast and Azure's 168.63.129.16 are refused), e.g. \"10.42.1.0/24\"."
  }
}

variable "tcp_idle_timeout_minutes" {
  type        = number
  default     = 30
  description = "(Optional) Minutes a TCP connection may stay silent before Azure drops it, 4-30: on the head's public IP (an SSH session or tunnel to the head, e.g. the driver's, with no traffic for this long is cut; 30 is the public IP's maximum) and on the NAT gateway (the nodes' outbound connections, e.g. slow package downloads)."

  validation {
    condition     = var.tcp_idle_timeout_minutes >= 4 && var.tcp_idle_timeout_minutes <= 30 && floor(var.tcp_idle_timeout_minutes) == var.tcp_idle_timeout_minutes
    error_message = "tcp_idle_timeout_minutes must be a whole number from 4 to 30 (Azure's range for a public IP), e.g. 30."
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

  # Names the VM images already use, or that the cluster uses: creating the admin user would
  # fail at first boot, or would make the admin someone else. "ray" runs Ray and every job; the
  # admin has passwordless sudo, so an admin called ray would let any job become root.
  # Sources: Debian's base-passwd 3.6.1 passwd.master and group.master (Debian 12; Ubuntu
  # 22.04's 3.5.52 adds gnats), and the /etc/passwd and /etc/group of Ubuntu 22.04 and 24.04
  # server cloud images and Debian 12 cloud images (dbus, openssh-server, rsyslog, uuid-runtime,
  # tcpdump, tpm-udev, landscape-common, pollinate, fwupd, usbmuxd, lxd, dnsmasq, polkitd,
  # dhcpcd, chrony, snapd), plus the images' cloud-init default users ubuntu and debian. Names
  # starting with "systemd-" or "_" are system accounts by convention (systemd-network,
  # systemd-timesync, _apt, _chrony, ...).
  validation {
    condition = !(startswith(var.admin_username, "systemd-") || startswith(var.admin_username, "_") || contains([
      "ray",
      "root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp", "proxy",
      "www-data", "backup", "list", "irc", "gnats", "nobody",
      "adm", "tty", "disk", "kmem", "dialout", "fax", "voice", "cdrom", "floppy", "tape", "sudo",
      "audio", "dip", "operator", "src", "shadow", "utmp", "video", "sasl", "plugdev", "staff",
      "users", "nogroup",
      "messagebus", "sshd", "ssh", "syslog", "uuidd", "tcpdump", "tss", "landscape", "pollinate",
      "fwupd-refresh", "usbmux", "lxd", "dnsmasq", "polkitd", "dhcpcd", "chrony", "snap_daemon",
      "netdev", "crontab", "input", "kvm", "render", "sgx", "admin",
      "ubuntu", "debian",
    ], var.admin_username))
    error_message = "admin_username must not be ray (the Ray service user: jobs run as ray, and the admin may sudo) nor an account or group the images already have (root, daemon, bin, sys, nobody, www-data, sudo, sshd, syslog, messagebus, ubuntu, debian, systemd-*, _*, ...): choose e.g. \"azureuser\"."
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

variable "node_image_id" {
  type        = string
  default     = null
  description = "(Optional) Resource ID of a gallery image version the head and every worker boot from instead of the os_image's marketplace image: one `python -m driver image build` baked (the nodes' install phase done, so they skip it), e.g. \"/subscriptions/SUB/resourceGroups/RG/providers/Microsoft.Compute/galleries/ray_nodes/images/ray-node-ubuntu-22.04/versions/1.0.0\". Build it from the same os_image and install values (extra_pip_packages, torch_index_url, ...); a node whose image holds another install installs at boot as without one. null boots the marketplace image."

  validation {
    condition     = var.node_image_id == null || can(regex("(?i)^/subscriptions/[0-9a-f-]{36}/resourceGroups/[-\\w.()]{1,90}/providers/Microsoft\\.Compute/galleries/[\\w.]{1,80}/images/[-\\w.]{1,80}/versions/[0-9]+\\.[0-9]+\\.[0-9]+$", var.node_image_id))
    error_message = "node_image_id must be a gallery image version's resource ID, /subscriptions/SUB/resourceGroups/RG/providers/Microsoft.Compute/galleries/GALLERY/images/DEFINITION/versions/MAJOR.MINOR.PATCH (what `python -m driver image build` prints), or left out."
  }
}

variable "create_image_gallery" {
  type        = bool
  default     = false
  nullable    = false
  description = "(Optional) Create the Azure Compute Gallery and the image definition of the node image (image.tf) in the cluster's resource group, as infra/bicep/image/ declares them (same names and properties): `python -m driver image build --resource-group RG` then adds image versions to them."
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

variable "head_priority" {
  type        = string
  default     = "Regular"
  description = "(Optional) The head as a \"Regular\" VM or a \"Spot\" VM (the cheapest learner of a small cluster, at Spot's rate). An evicted Spot head is deallocated, not deleted (eviction policy Deallocate): its OS disk, addresses and checkpoints stay, the cluster's Ray stops until `python -m driver start` (or `submit`) starts the head again, which Azure allows only when it has Spot capacity at head_max_price. Its watcher tells the jobs of the Preempt notice (about 30 s) so they can checkpoint first (docs/reliability.md). Changing it replaces the head VM and its disk."

  validation {
    condition     = contains(["Regular", "Spot"], var.head_priority)
    error_message = "head_priority must be \"Regular\" or \"Spot\"."
  }
}

variable "head_max_price" {
  type        = number
  default     = -1
  description = "(Optional) With head_priority = \"Spot\": the most the head may cost, in US dollars per hour (above 0, at most 1000), or -1: up to the regular (pay-as-you-go) price, evicted for capacity only. Azure evicts the head when the Spot price rises above it."

  validation {
    condition     = var.head_max_price == -1 || (var.head_max_price > 0 && var.head_max_price <= 1000)
    error_message = "head_max_price must be -1 (up to the regular price) or a price in US dollars per hour above 0 (at most 1000)."
  }

  validation {
    condition     = var.head_max_price == -1 || var.head_priority == "Spot"
    error_message = "head_max_price applies to a Spot head only: set head_priority = \"Spot\", or leave it out."
  }
}

variable "worker_vm_size" {
  type        = string
  default     = "Standard_D4s_v5"
  description = "(Optional) VM size of each worker in the scale set, e.g. \"Standard_D4s_v5\" or \"Standard_F8s_v2\" (48 characters at most); with worker_pools, the size of a pool that names none."

  validation {
    condition     = can(regex("(?i)^standard_[a-z0-9_-]+$", var.worker_vm_size)) && length(var.worker_vm_size) <= 48
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

variable "scaling_mode" {
  type        = string
  default     = "cpu"
  description = "(Optional) Who sets the worker count: \"cpu\" (Azure Monitor autoscale on average CPU, the scale_*_cpu_percent rules) or \"ray\" (Ray's own autoscaler on the head adds workers for pending tasks and actors and removes idle ones by name after ray_idle_timeout_minutes; no CPU rules; the head gets an identity allowed to change the worker pools' scale sets only)."

  validation {
    condition     = contains(["cpu", "ray"], var.scaling_mode)
    error_message = "scaling_mode must be \"cpu\" or \"ray\"."
  }
}

variable "ray_idle_timeout_minutes" {
  type        = number
  default     = 5
  description = "(Optional) With scaling_mode = \"ray\": minutes a worker stays idle (nothing running on it) before Ray's autoscaler drains and deletes it, 1-1440."

  validation {
    condition     = var.ray_idle_timeout_minutes >= 1 && var.ray_idle_timeout_minutes <= 1440 && floor(var.ray_idle_timeout_minutes) == var.ray_idle_timeout_minutes
    error_message = "ray_idle_timeout_minutes must be a whole number from 1 to 1440."
  }
}

variable "autostop_idle_minutes" {
  type        = number
  default     = 60
  description = "(Optional) Minutes the cluster may sit idle (no Ray job pending or running, no SSH connection to the head, tunnels included) before it stops itself: the workers go to zero and the head deallocates (compute billing stops; disks and results stay; `python -m driver submit` or `start` starts it again). 0 turns autostop off; otherwise 10-10080 (a week). On, the head gets a custom role allowed to deallocate itself, set the workers' scale set and (scaling_mode = \"cpu\") turn the workers' autoscale off and on, on those resources only."

  validation {
    # 0, or 10 to 10080: under 10 minutes a cluster would stop between a job and the next
    # submit, or while a head that just started is still booting; above a week, turn it off.
    condition     = var.autostop_idle_minutes >= 0 && var.autostop_idle_minutes <= 10080 && floor(var.autostop_idle_minutes) == var.autostop_idle_minutes && (var.autostop_idle_minutes == 0 || var.autostop_idle_minutes > 9)
    error_message = "autostop_idle_minutes must be 0 (autostop off) or a whole number of minutes from 10 to 10080 (a week), e.g. 60."
  }
}

variable "worker_min_count" {
  type        = number
  default     = 0
  description = "(Optional) Fewest workers autoscale keeps, 0-100. With scaling_mode = \"ray\", 0 means the cluster scales to zero when idle. With \"cpu\", the scale set has no CPU metric at 0 instances, so autoscale then returns to worker_default_count: it stays at 0 only when worker_default_count is 0 too."

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

variable "worker_automatic_repair_enabled" {
  type        = bool
  default     = true
  description = "(Optional) Let the scale set replace a worker whose health endpoint says Unhealthy (its bootstrap failed for good, or Ray did not come back) or that never reports (Unknown), keeping the worker count. The Application Health extension reports the health either way."
}

variable "worker_automatic_repair_grace_period_minutes" {
  type        = number
  default     = 30
  description = "(Optional) Minutes after a worker is created (or updated) before it may be repaired (10-90). A cold bootstrap takes 10-15 minutes; a bootstrap still running reports Initializing, which is never repaired."

  validation {
    condition     = var.worker_automatic_repair_grace_period_minutes >= 10 && var.worker_automatic_repair_grace_period_minutes <= 90 && floor(var.worker_automatic_repair_grace_period_minutes) == var.worker_automatic_repair_grace_period_minutes
    error_message = "worker_automatic_repair_grace_period_minutes must be a whole number from 10 to 90 (Azure's range)."
  }
}

variable "worker_automatic_repair_action" {
  type        = string
  default     = "Replace"
  description = "(Optional) What repair does to an unhealthy worker: Replace (a new VM from the current model) or Reimage (same VM, fresh OS disk; cloud-init runs again). Not Restart: a reboot keeps the failed bootstrap's marker, so the worker would stay Unhealthy. Azure changes the action of an enabled policy only after it was disabled: apply with worker_automatic_repair_enabled = false first."

  validation {
    condition     = contains(["Replace", "Reimage"], var.worker_automatic_repair_action)
    error_message = "worker_automatic_repair_action must be Replace or Reimage (Restart keeps a failed bootstrap's marker, and the worker would stay Unhealthy)."
  }
}

variable "worker_pools" {
  type = map(object({
    vm_size         = optional(string)
    min_count       = optional(number)
    default_count   = optional(number)
    max_count       = optional(number)
    spot_enabled    = optional(bool)
    eviction_policy = optional(string)
    max_price       = optional(number)
    zones           = optional(list(string), [])
    zone_balance    = optional(bool, false)
    ray_resources   = optional(map(number), {})
    ray_labels      = optional(map(string), {})
    # Flexible orchestration and what only it has.
    orchestration_mode = optional(string, "Flexible")
    priority_mix = optional(object({
      base_regular_count            = optional(number, 0)
      regular_percentage_above_base = optional(number, 0)
    }))
    instance_mix = optional(object({
      vm_sizes            = list(string)
      allocation_strategy = optional(string, "LowestPrice")
    }))
  }))
  default     = {}
  nullable    = false
  description = "(Optional) Worker pools, one scale set each, by name (1-10 lower-case letters, digits or '-'; at most 4 pools), e.g. { cpu = { vm_size = \"Standard_F8s_v2\", spot_enabled = true, max_count = 20 }, gpu = { vm_size = \"Standard_NC4as_T4_v3\", min_count = 0, default_count = 0, max_count = 2, ray_labels = { accelerator = \"t4\" } } }. Per pool: vm_size, min_count, default_count, max_count, spot_enabled (what a pool leaves out is the worker_* variable's), eviction_policy (\"Delete\" or \"Deallocate\") and max_price (US dollars per hour, or -1: the on-demand price) for Spot pools, zones (availability zones of its VMs, e.g. [\"1\", \"2\", \"3\"]; [] (the default): regional, Azure places them) and zone_balance (true: keep them strictly even across two zones or more), orchestration_mode (\"Flexible\", the default, or \"Uniform\", the scale set of clusters made before Flexible became the default: pin it to keep theirs; changing it replaces the pool's scale set), for Flexible pools only: priority_mix (Spot pools: Spot Priority Mix, { base_regular_count = 1, regular_percentage_above_base = 25 } = the first VM regular, then a quarter of the rest regular and three quarters Spot) and instance_mix (Instance Mix, { vm_sizes = [\"Standard_D4s_v5\", \"Standard_D4as_v5\"], allocation_strategy = \"LowestPrice\" or \"CapacityOptimized\" }: 2-5 sizes including the pool's vm_size, which Ray's autoscaler plans with), ray_resources (custom Ray resources its workers offer, e.g. { simulator = 2 }; default: one simulator slot per CPU) and ray_labels (Ray node labels besides pool = NAME). CPUs and GPUs come from each node's own detection. The pool's scale set is NAME_PREFIX-POOL. {} (the default): one pool \"workers\" made of the worker_* variables, the cluster as before pools. With scaling_mode = \"ray\" Ray's autoscaler has one node type per pool (its CPUs and GPUs from vm_size, its ray_resources and ray_labels) and scales each pool's scale set, to zero when min_count is 0."

  validation {
    condition     = length(var.worker_pools) <= 4 && alltrue([for name in keys(var.worker_pools) : can(regex("^[a-z]([a-z0-9-]{0,8}[a-z0-9])?$", name))])
    error_message = "worker_pools: at most 4 pools with distinct names, each 1-10 lower-case letters, digits or '-', starting with a letter and not ending in '-', e.g. cpu or gpu."
  }

  validation {
    condition     = alltrue([for p in values(var.worker_pools) : p.vm_size == null || (can(regex("(?i)^standard_[a-z0-9_-]+$", coalesce(p.vm_size, "-"))) && length(coalesce(p.vm_size, "-")) <= 48)])
    error_message = "worker_pools: every vm_size must be an Azure VM size such as \"Standard_D4s_v5\"."
  }

  validation {
    condition = alltrue(flatten([for p in values(var.worker_pools) : [
      for c in [p.min_count, p.default_count] : c == null || try(c >= 0 && c <= 100 && floor(c) == c, false)
    ]])) && alltrue([for p in values(var.worker_pools) : p.max_count == null || try(p.max_count >= 1 && p.max_count <= 100 && floor(p.max_count) == p.max_count, false)])
    error_message = "worker_pools: min_count and default_count must be whole numbers from 0 to 100, max_count from 1 to 100."
  }

  validation {
    condition     = alltrue([for p in values(var.worker_pools) : (p.eviction_policy == null || contains(["Delete", "Deallocate"], coalesce(p.eviction_policy, "-"))) && (p.max_price == null || try(p.max_price == -1 || (p.max_price > 0 && p.max_price <= 1000), false))])
    error_message = "worker_pools: eviction_policy must be \"Delete\" or \"Deallocate\", max_price -1 (the on-demand price) or a price in US dollars per hour above 0 (at most 1000)."
  }

  validation {
    condition     = alltrue([for name, p in var.worker_pools : p.eviction_policy == null && p.max_price == null || coalesce(p.spot_enabled, var.worker_spot_enabled)])
    error_message = "worker_pools: eviction_policy and max_price apply to Spot pools only: set spot_enabled = true in the pool (or worker_spot_enabled = true), or leave them out."
  }

  validation {
    condition     = alltrue([for p in values(var.worker_pools) : length(p.zones) <= 3 && length(distinct(p.zones)) == length(p.zones) && alltrue([for z in p.zones : contains(["1", "2", "3"], z)])])
    error_message = "worker_pools: zones must list distinct availability zones \"1\", \"2\" or \"3\" (at most 3), e.g. [\"1\", \"2\"], or be left out (regional)."
  }

  validation {
    condition     = alltrue([for p in values(var.worker_pools) : !p.zone_balance || length(p.zones) > 1])
    error_message = "worker_pools: zone_balance needs two zones or more in the pool's zones (Azure refuses it otherwise)."
  }

  validation {
    condition     = alltrue([for p in values(var.worker_pools) : contains(["Uniform", "Flexible"], p.orchestration_mode)])
    error_message = "worker_pools: orchestration_mode must be \"Uniform\" or \"Flexible\"."
  }

  validation {
    condition     = alltrue([for p in values(var.worker_pools) : p.orchestration_mode == "Flexible" || p.priority_mix == null && p.instance_mix == null])
    error_message = "worker_pools: priority_mix and instance_mix need orchestration_mode = \"Flexible\" (Azure has Spot Priority Mix and Instance Mix on Flexible scale sets only)."
  }

  validation {
    condition     = alltrue([for p in values(var.worker_pools) : p.priority_mix == null || coalesce(p.spot_enabled, var.worker_spot_enabled)])
    error_message = "worker_pools: priority_mix mixes regular VMs into a Spot pool: set spot_enabled = true in the pool (or worker_spot_enabled = true), or leave it out."
  }

  validation {
    condition     = alltrue([for p in values(var.worker_pools) : p.priority_mix == null || try(p.priority_mix.base_regular_count >= 0 && p.priority_mix.base_regular_count <= 100 && floor(p.priority_mix.base_regular_count) == p.priority_mix.base_regular_count && p.priority_mix.regular_percentage_above_base >= 0 && p.priority_mix.regular_percentage_above_base <= 100 && floor(p.priority_mix.regular_percentage_above_base) == p.priority_mix.regular_percentage_above_base, false)])
    error_message = "worker_pools: priority_mix needs base_regular_count a whole number from 0 to 100 and regular_percentage_above_base a whole number from 0 to 100, e.g. { base_regular_count = 1, regular_percentage_above_base = 25 }."
  }

  validation {
    condition     = alltrue([for p in values(var.worker_pools) : p.instance_mix == null || try(length(p.instance_mix.vm_sizes) >= 2 && length(p.instance_mix.vm_sizes) <= 5 && length(distinct([for s in p.instance_mix.vm_sizes : lower(s)])) == length(p.instance_mix.vm_sizes) && alltrue([for s in p.instance_mix.vm_sizes : can(regex("(?i)^standard_[a-z0-9_-]+$", s)) && length(s) <= 48]) && contains(["LowestPrice", "CapacityOptimized"], p.instance_mix.allocation_strategy), false)])
    error_message = "worker_pools: instance_mix needs 2-5 distinct Azure VM sizes in vm_sizes, e.g. [\"Standard_D4s_v5\", \"Standard_D4as_v5\"], and allocation_strategy \"LowestPrice\" or \"CapacityOptimized\"."
  }

  validation {
    condition     = alltrue([for p in values(var.worker_pools) : p.instance_mix == null || try(contains([for s in p.instance_mix.vm_sizes : lower(s)], lower(coalesce(p.vm_size, var.worker_vm_size))), true)])
    error_message = "worker_pools: instance_mix's vm_sizes must include the pool's vm_size (or worker_vm_size), the size Ray's autoscaler plans the pool's CPUs and GPUs with."
  }

  # Ray refuses CPU, GPU and memory as custom resources (ray start --num-cpus/--num-gpus set
  # them: each node detects its own); the rest follows Ray's resource and label syntax.
  validation {
    condition = alltrue([for p in values(var.worker_pools) : alltrue([
      for k, v in p.ray_resources : can(regex("^[A-Za-z_][A-Za-z0-9_.-]*$", k)) && !contains(["CPU", "GPU", "memory", "object_store_memory"], k) && v >= 0
    ]) && length(jsonencode(p.ray_resources)) <= 64])
    error_message = "worker_pools: ray_resources must map Ray resource names (letters, digits, '_', '.', '-'; not CPU, GPU, memory or object_store_memory: each node detects those) to numbers >= 0, 64 characters of JSON at most."
  }

  validation {
    condition = alltrue([for p in values(var.worker_pools) : alltrue([
      for k, v in p.ray_labels : can(regex("^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$", k)) && can(regex("^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$", v)) && k != "pool"
    ]) && length(join(",", [for k, v in p.ray_labels : "${k}=${v}"])) <= 64])
    error_message = "worker_pools: ray_labels must map label names to values, each 1-63 letters, digits, '_', '.' or '-' starting and ending with a letter or digit, not the name pool (every node has pool = its pool's name), 64 characters in all at most."
  }
}

# ---------------------------------------------------------------------------------------------
# Optional: the cluster token in Key Vault (keyvault.tf)
# ---------------------------------------------------------------------------------------------

variable "key_vault_allowed_cidrs" {
  type        = list(string)
  default     = null
  description = "(Optional) Public IPv4 addresses or CIDRs the Key Vault's firewall admits, e.g. [\"203.0.113.7/32\"]. The address Terraform runs from must be among them: Terraform writes the cluster token into the vault, and reads it back on every plan, through the vault's data plane. null takes the public entries of allowed_ssh_cidrs. The nodes reach the vault through its private endpoint whatever this says."

  validation {
    condition     = var.key_vault_allowed_cidrs == null || try(length(var.key_vault_allowed_cidrs) > 0, false)
    error_message = "key_vault_allowed_cidrs must be null (the public entries of allowed_ssh_cidrs) or list at least one public IPv4 address, e.g. [\"203.0.113.7/32\"] (your address: curl -s https://ifconfig.me)."
  }

  validation {
    condition     = alltrue([for c in coalesce(var.key_vault_allowed_cidrs, []) : can(regex(local.ipv4_cidr_pattern, c))])
    error_message = "key_vault_allowed_cidrs: every entry must be an IPv4 CIDR in canonical form, four decimal octets 0-255 without leading zeros and a prefix length 0-32, e.g. \"203.0.113.7/32\"."
  }

  validation {
    condition     = alltrue([for c in coalesce(var.key_vault_allowed_cidrs, []) : can(regex(local.ipv4_cidr_pattern, c)) ? cidrhost(c, 0) == split("/", c)[0] : true])
    error_message = "key_vault_allowed_cidrs: every entry must be a network address whose host bits are zero, e.g. \"198.51.100.0/24\"; one address is \"203.0.113.7/32\"."
  }

  validation {
    condition     = alltrue([for c in coalesce(var.key_vault_allowed_cidrs, []) : can(regex(local.ipv4_cidr_pattern, c)) ? tonumber(split("/", c)[1]) >= 8 : true])
    error_message = "key_vault_allowed_cidrs: every entry must be /8 or narrower (never the whole Internet), e.g. \"203.0.113.7/32\"."
  }

  validation {
    condition     = sum(concat([0], [for c in coalesce(var.key_vault_allowed_cidrs, []) : can(regex(local.ipv4_cidr_pattern, c)) ? pow(2, 32 - tonumber(split("/", c)[1])) : 0])) <= pow(2, 24)
    error_message = "key_vault_allowed_cidrs must cover at most 16,777,216 addresses (one /8) in all, every entry counted, e.g. [\"203.0.113.7/32\"]."
  }

  # Key Vault's firewall sees the public address a request comes from; it refuses private
  # ranges in IP rules (Add-AzKeyVaultNetworkRule: "any IP range inside 10.0.0.0-10.255.255.255
  # (private IP addresses) cannot be used"). Two CIDRs overlap when they agree on the shorter
  # prefix of the two.
  validation {
    condition = alltrue([for c in coalesce(var.key_vault_allowed_cidrs, []) : can(regex(local.ipv4_cidr_pattern, c)) ? !anytrue([
      for r in local.non_public_ipv4_ranges : cidrhost("${split("/", c)[0]}/${min(tonumber(split("/", c)[1]), tonumber(split("/", r)[1]))}", 0) == cidrhost("${split("/", r)[0]}/${min(tonumber(split("/", c)[1]), tonumber(split("/", r)[1]))}", 0)
    ]) : true])
    error_message = "key_vault_allowed_cidrs: Key Vault's firewall admits public addresses only; none may touch a private or special range (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10, 127.0.0.0/8, 169.254.0.0/16, 0.0.0.0/8, 224.0.0.0/3): list the public address Terraform runs from, e.g. [\"203.0.113.7/32\"]."
  }
}

variable "cluster_token_version" {
  type        = number
  default     = 1
  description = "(Optional) Version of the Ray cluster token, a whole number from 1. Raise it to write a new random token into Key Vault (and a new expiration date); then restart Ray on every node or replace the VMs: running nodes keep the token they read at boot."

  validation {
    condition     = var.cluster_token_version >= 1 && floor(var.cluster_token_version) == var.cluster_token_version
    error_message = "cluster_token_version must be a whole number from 1, e.g. 2 to rotate the token."
  }
}

variable "cluster_token_expiration_days" {
  type        = number
  default     = 365
  description = "(Optional) Days from writing the cluster token to the expiration date recorded on its Key Vault secret, 1-3650. The date is informational (Key Vault still returns an expired secret, so nodes keep booting): it marks the token due for rotation with cluster_token_version, and satisfies policies that require one."

  validation {
    condition     = var.cluster_token_expiration_days >= 1 && var.cluster_token_expiration_days <= 3650 && floor(var.cluster_token_expiration_days) == var.cluster_token_expiration_days
    error_message = "cluster_token_expiration_days must be a whole number from 1 to 3650, e.g. 365."
  }
}

variable "rbac_propagation_wait_seconds" {
  type        = number
  default     = 60
  description = "(Optional) Seconds Terraform waits, 0-900, after granting itself Key Vault Secrets Officer on the new vault and before writing the token: role assignments take a while to reach Key Vault's data plane. If the write still fails with 403 ForbiddenByRbac, run terraform apply again."

  validation {
    condition     = var.rbac_propagation_wait_seconds >= 0 && var.rbac_propagation_wait_seconds <= 900 && floor(var.rbac_propagation_wait_seconds) == var.rbac_propagation_wait_seconds
    error_message = "rbac_propagation_wait_seconds must be a whole number from 0 to 900, e.g. 60."
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

  # The node hands the list to pip as requirements: an option (-e, -r FILE, --index-url=...)
  # would change how pip installs, or where from.
  validation {
    condition     = alltrue([for p in var.extra_pip_packages : !startswith(p, "-")])
    error_message = "extra_pip_packages: entries are requirements, not pip options: none may start with '-' (\"--index-url=...\", \"-e\", \"-r ...\"); set pip_index_url for another index, e.g. [\"minigrid==3.0.0\"]."
  }

  validation {
    condition     = length(join(" ", var.extra_pip_packages)) <= 1024
    error_message = "extra_pip_packages must come to 1,024 characters or fewer (joined by spaces)."
  }
}

variable "extra_apt_packages" {
  type        = list(string)
  default     = []
  nullable    = false
  description = "(Optional) Extra Debian/Ubuntu packages installed on every node with the OS packages (a simulator's system libraries), e.g. [\"libosmesa6\"]. Package names only; 1,024 characters in all."

  # The node hands the list to apt-get: a name, never an option.
  validation {
    condition     = alltrue([for p in var.extra_apt_packages : can(regex("^[a-z0-9][a-z0-9+.-]+$", p))])
    error_message = "extra_apt_packages: each entry must be one Debian package name (lower-case letters, digits, '+', '-' and '.', starting with a letter or digit, 2 characters or more), e.g. \"libosmesa6\"."
  }

  validation {
    condition     = length(join(" ", var.extra_apt_packages)) <= 1024
    error_message = "extra_apt_packages must come to 1,024 characters or fewer (joined by spaces)."
  }
}

variable "pip_index_url" {
  type        = string
  default     = "https://pypi.org/simple"
  sensitive   = true
  description = "(Optional) Python package index (PEP 503 simple API) the nodes install Ray and its dependencies from. It may carry credentials (a user name and token before the host), so Terraform hides it in plans and logs (sensitive); the nodes' custom data, and so the Terraform state and the VMs' model in Azure, still carry it in clear text: prefer a token that can only read the index."

  validation {
    condition     = can(regex("^https?://[^\\s'\\\\]+$", var.pip_index_url)) && length(var.pip_index_url) <= 512
    error_message = "pip_index_url must be one http(s) URL of at most 512 characters without spaces, single quotes or backslashes, e.g. \"https://pypi.org/simple\"."
  }
}

variable "torch_index_url" {
  type        = string
  default     = "https://download.pytorch.org/whl/cpu"
  description = "(Optional) Package index that serves the CPU-only torch wheel to nodes without an NVIDIA GPU; the default is PyTorch's CPU index. Nodes with NVIDIA GPUs do not use it: they install the CUDA build of the same torch from the nodes' GPU lock (PyPI, pinned with hashes)."

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

variable "results_storage_account_id" {
  type        = string
  default     = ""
  nullable    = false
  description = "(Optional) Resource id of the storage account that keeps the jobs' results (the separate stack in infra/terraform/results creates it; its output storage_account_id). Empty (the default): no results storage, results stay on the head's disk only. Set: the cluster gets a private endpoint to the account's blob service in its subnet (the subnet's 6th host) with the privatelink.blob.core.windows.net zone, the nodes' identity Storage Blob Data Contributor on its `results` container only, and jobs the container's URL (RAYDRIVER_RESULTS_URL). Destroying the cluster leaves the account and its results alone."

  validation {
    condition     = var.results_storage_account_id == "" || can(regex("^/subscriptions/[0-9a-fA-F-]{36}/(?i:resourceGroups)/[-\\w.()]{1,90}/(?i:providers/Microsoft\\.Storage/storageAccounts)/[a-z0-9]{3,24}$", var.results_storage_account_id))
    error_message = "results_storage_account_id must be empty or a storage account's resource id, /subscriptions/GUID/resourceGroups/GROUP/providers/Microsoft.Storage/storageAccounts/NAME (3-24 lower-case letters and digits): what the results storage stack outputs."
  }
}
