locals {
  resource_group_name = var.create_resource_group ? azurerm_resource_group.this[0].name : data.azurerm_resource_group.existing[0].name

  # The worker pools (checks.tf: local.worker_pool_settings) with their scale sets' ids.
  worker_pools = { for name, pool in local.worker_pool_settings : name => merge(pool, {
    scale_set_id = "/subscriptions/${data.azurerm_client_config.current.subscription_id}/resourceGroups/${local.resource_group_name}/providers/Microsoft.Compute/virtualMachineScaleSets/${pool.scale_set_name}"
  }) }

  # The first worker pool (local.worker_pools, in the order of their names; the
  # default pool is "workers"): its scale set's id goes into the head's custom data (the
  # resource group of every pool's scale set for Ray's autoscaler in scaling_mode = "ray",
  # which has one node type per pool: AUTOSCALER_POOLS), named before it exists
  # (the scale sets depend on the head), and so do every pool's scale set and autoscale setting
  # (scaling_mode = "cpu"), which the head's autostop turns off and empties.
  first_pool_name        = keys(local.worker_pools)[0]
  first_pool             = local.worker_pools[local.first_pool_name]
  worker_scale_set_id    = local.first_pool.scale_set_id
  worker_scale_set_names = concat([local.first_pool.scale_set_name], [for name, pool in local.worker_pools : pool.scale_set_name if name != local.first_pool_name])
  worker_autoscale_names = var.scaling_mode == "cpu" ? concat([local.first_pool.autoscale_name], [for name, pool in local.worker_pools : pool.autoscale_name if name != local.first_pool_name]) : []

  # The head's own identity (identity.tf): Ray's autoscaler (scaling_mode = "ray") and autostop
  # (autostop_idle_minutes > 0) act with it.
  head_identity_enabled = var.scaling_mode == "ray" || var.autostop_idle_minutes > 0
  autostop_enabled      = var.autostop_idle_minutes > 0
  resource_group_id     = "/subscriptions/${data.azurerm_client_config.current.subscription_id}/resourceGroups/${local.resource_group_name}"

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
    SCALING_MODE        = var.scaling_mode
    WORKER_SCALE_SET_ID = local.worker_scale_set_id
    WORKER_VM_SIZE      = local.first_pool.vm_size
    # Every pool, first pool first: Ray's autoscaler plans one node type per pool with these.
    AUTOSCALER_POOLS = jsonencode([for name, pool in local.worker_pools : {
      labels    = pool.deploy_values.RAY_LABELS
      max       = pool.max_count
      min       = pool.min_count
      name      = name
      resources = try(var.worker_pools[name].ray_resources, {})
      scale_set = pool.scale_set_name
      vm_size   = pool.vm_size
    }])
    AUTOSCALER_IDLE_TIMEOUT_MINUTES = tostring(var.ray_idle_timeout_minutes)
    AUTOSCALER_CLIENT_ID            = try(azurerm_user_assigned_identity.autoscaler[0].client_id, "")
    ARM_ENDPOINT                    = local.arm_endpoint
    # Autostop on the head (0: off), the autoscale settings it turns off (scaling_mode = "cpu")
    # and the scale sets it empties.
    AUTOSTOP_IDLE_MINUTES = tostring(var.autostop_idle_minutes)
    WORKER_AUTOSCALE_NAME = join(" ", local.worker_autoscale_names)
    WORKER_SCALE_SETS     = join(" ", local.worker_scale_set_names)
    # The first pool's own values; each pool's workers get theirs (pool_custom_data).
    WORKER_POOL   = local.first_pool_name
    RAY_RESOURCES = local.first_pool.deploy_values.RAY_RESOURCES
    RAY_LABELS    = local.first_pool.deploy_values.RAY_LABELS
    # The results container (results.tf), "" without results_storage_account_id.
    RESULTS_URL = local.results_url
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
  cloud_init_dir = "${path.module}/../../../../cloud-init/rendered"
  cloud_init     = { for role in ["head", "worker"] : role => file("${local.cloud_init_dir}/${role}.yaml") }
  custom_data    = { for role, text in local.cloud_init : role => replace(text, "@@DEPLOY_VALUES@@", base64encode(jsonencode(local.deploy_values))) }
  # Each worker pool's document: the same values with the pool's own over them (WORKER_POOL,
  # RAY_RESOURCES, RAY_LABELS).
  pool_custom_data = { for name, pool in local.worker_pools : name => replace(local.cloud_init["worker"], "@@DEPLOY_VALUES@@", base64encode(jsonencode(merge(local.deploy_values, pool.deploy_values)))) }

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
