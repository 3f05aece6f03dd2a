locals {
  resource_group_name = var.create_resource_group ? azurerm_resource_group.this[0].name : data.azurerm_resource_group.existing[0].name

  # The workers' scale set, named before it exists: its id goes into the head's custom data (the
  # autoscaler's target), and the scale set itself depends on the head.
  worker_scale_set_name = "${var.name_prefix}-workers"
  worker_scale_set_id   = "/subscriptions/${data.azurerm_client_config.current.subscription_id}/resourceGroups/${local.resource_group_name}/providers/Microsoft.Compute/virtualMachineScaleSets/${local.worker_scale_set_name}"

  # The head's private address is fixed (the 4th host: Azure keeps .0-.3 of every subnet), so the
  # workers' cloud-init can name it before the head exists.
  head_private_ip = cidrhost(var.subnet_address_prefix, 4)
  # The Key Vault's private endpoint takes the next one (keyvault.tf).
  key_vault_private_ip = cidrhost(var.subnet_address_prefix, 5)

  # var.os_image -> marketplace image. Every one is a generation 2 image.
  os_images = {
    "ubuntu-22.04" = { publisher = "Canonical", offer = "0001-com-ubuntu-server-jammy", sku = "22_04-lts-gen2" }
    "ubuntu-24.04" = { publisher = "Canonical", offer = "ubuntu-24_04-lts", sku = "server" }
    "debian-12"    = { publisher = "Debian", offer = "debian-12", sku = "12-gen2" }
  }
  os_image = local.os_images[var.os_image]

  # Deploy-time values for the rendered cloud-init documents, keyed by exactly the names in
  # cloud-init/placeholders.yaml (tests/unit/test_deploy_values.py holds the lists together).
  # They reach the nodes as one JSON object: adding a value is one line here.
  deploy_values = {
    RAY_HEAD_IP        = local.head_private_ip
    KEY_VAULT_URL      = azurerm_key_vault.this.vault_uri
    TOKEN_SECRET_NAME  = azurerm_key_vault_secret.cluster_token.name
    IDENTITY_CLIENT_ID = azurerm_user_assigned_identity.this.client_id
    RAY_ADMIN_USER     = var.admin_username
    EXTRA_PIP_PACKAGES = join(" ", var.extra_pip_packages)
    EXTRA_APT_PACKAGES = join(" ", var.extra_apt_packages)
    PIP_INDEX_URL      = var.pip_index_url
    TORCH_INDEX_URL    = var.torch_index_url
    APT_SOURCE         = var.apt_source
    # Ray's autoscaler on the head (scaling_mode = "ray"; the head ignores them otherwise).
    SCALING_MODE                    = var.scaling_mode
    WORKER_SCALE_SET_ID             = local.worker_scale_set_id
    WORKER_VM_SIZE                  = var.worker_vm_size
    AUTOSCALER_MIN_WORKERS          = tostring(var.worker_min_count)
    AUTOSCALER_MAX_WORKERS          = tostring(var.worker_max_count)
    AUTOSCALER_IDLE_TIMEOUT_MINUTES = tostring(var.ray_idle_timeout_minutes)
    AUTOSCALER_CLIENT_ID            = try(azurerm_user_assigned_identity.autoscaler[0].client_id, "")
    ARM_ENDPOINT                    = local.arm_endpoint
    # The head's autostop agent (0 = off) and the autoscale setting it disables (mode cpu).
    AUTOSTOP_IDLE_MINUTES = tostring(var.autostop_idle_minutes)
    WORKER_AUTOSCALE_NAME = var.scaling_mode == "cpu" ? "${var.name_prefix}-workers-autoscale" : ""
  }

  # The autoscaler's Resource Manager endpoint, in the cloud the stack deploys to (Bicep:
  # environment().resourceManager, these exact strings). The azurerm provider exposes no endpoint
  # (data.azurerm_client_config carries ids only), but the vault's URI ends in its cloud's Key
  # Vault DNS suffix (environment().suffixes.keyvaultDns), one per cloud: the provider's own
  # `environment` (ARM_ENVIRONMENT) decides it, nothing here can disagree with it. Another cloud
  # gives "", which the head's precondition refuses (head.tf).
  arm_endpoints_by_key_vault_suffix = {
    "vault.azure.net"         = "https://management.azure.com/"
    "vault.usgovcloudapi.net" = "https://management.usgovcloudapi.net/"
    "vault.azure.cn"          = "https://management.chinacloudapi.cn/"
  }
  key_vault_dns_suffix = one(regex("^https://[^./]+\\.([^/]+)/?$", azurerm_key_vault.this.vault_uri))
  arm_endpoint         = lookup(local.arm_endpoints_by_key_vault_suffix, local.key_vault_dns_suffix, "")

  # The committed, rendered documents (python -m nodekit render writes them), with their one
  # placeholder filled. Sent as plain base64: Azure allows 87,380 base64 characters of custom
  # data, the documents use about a third of that (tests prove the bound for the longest values
  # the variables accept).
  cloud_init_dir = "${path.module}/../../cloud-init/rendered"
  cloud_init     = { for role in ["head", "worker"] : role => file("${local.cloud_init_dir}/${role}.yaml") }
  custom_data    = { for role, text in local.cloud_init : role => replace(text, "@@DEPLOY_VALUES@@", base64encode(jsonencode(local.deploy_values))) }

  # The Application Health extension's settings (rich health states): it probes each worker's
  # health endpoint (python/nodekit/node/health.py) from inside the VM, at http://localhost:PORT/
  # PATH, with port and path from python/driver/layout.py (HEALTH_PORT, HEALTH_PATH; a test holds
  # them together). The endpoint listens on 127.0.0.1 only, and no NSG rule names the port.
  # Three equal answers 5 s apart change the state. gracePeriod: how long a worker may answer
  # neither Healthy nor Unhealthy (Initializing: the bootstrap still runs) before it counts as
  # Unknown and may be repaired: 2 hours, more than the bootstrap's own time limits add up to
  # (token 20 min, Ray 30 min, the installs' retries), so the bootstrap's verdict decides and
  # the timer only catches one that hangs. Each boot starts it again.
  worker_health_probe = {
    protocol          = "http"
    port              = 8790
    requestPath       = "/health"
    intervalInSeconds = 5
    numberOfProbes    = 3
    gracePeriod       = 7200
  }

  # Key Vault names are global: 3-24 letters, digits and '-'. Derived from the subscription,
  # the resource group and the prefix, so a re-apply keeps it and another cluster differs.
  key_vault_name = "${var.name_prefix}-kv-${substr(sha1("${data.azurerm_client_config.current.subscription_id}/${local.resource_group_name}/${var.name_prefix}"), 0, 23 - length(var.name_prefix) - 4)}"
  # The vault's firewall rules (local.key_vault_ip_rules) derive from inputs alone: checks.tf.

  ssh_target = "${var.admin_username}@${azurerm_public_ip.head.ip_address}"
}
