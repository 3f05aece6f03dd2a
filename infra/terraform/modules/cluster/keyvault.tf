# The Ray cluster token (RAY_AUTH_MODE=token) lives in a Key Vault, and nowhere else: Terraform
# generates it as an ephemeral value (never in the plan or the state), writes it to the vault as
# a write-only secret value, and each node reads it at boot through its managed identity, which
# may read secrets of this one vault and nothing else. Custom data carries only where to find it
# (KEY_VAULT_URL, TOKEN_SECRET_NAME, IDENTITY_CLIENT_ID). The driver reads the token from the
# head over SSH, as before.
#
# Network: the nodes reach the vault through a private endpoint in the cluster subnet; the
# vault's name resolves to it inside the virtual network through the privatelink.vaultcore.azure.net
# zone linked to the network (the wiring of Azure Verified Modules' Key Vault module,
# Azure/terraform-azurerm-avm-res-keyvault-vault: main.private_endpoint.tf and its
# private-endpoint example). The public endpoint stays on, but its firewall admits only
# local.key_vault_ip_rules (key_vault_allowed_cidrs, or the public entries of allowed_ssh_cidrs):
# Terraform writes the secret, and reads it back on every plan, through the vault's data plane
# (https://NAME.vault.azure.net/secrets/...) from the machine that runs it, which is outside the
# virtual network. Nothing else gets through: no trusted-service bypass, no subnet rule.

data "azurerm_client_config" "current" {}

# 64 hexadecimal characters (256 bits), the form the Bicep stack's token has (two newGuid()s
# without their dashes, ARM's only random source): the only "special" characters allowed are
# a-f, and digits the only other class.
ephemeral "random_password" "cluster_token" {
  length           = 64
  upper            = false
  lower            = false
  numeric          = true
  special          = true
  override_special = "abcdef"
}

resource "azurerm_key_vault" "this" {
  name                       = local.key_vault_name
  location                   = var.location
  resource_group_name        = local.resource_group_name
  tenant_id                  = data.azurerm_client_config.current.tenant_id
  sku_name                   = "standard"
  rbac_authorization_enabled = true
  purge_protection_enabled   = true
  soft_delete_retention_days = 7
  tags                       = var.tags

  # On, for Terraform's own data-plane calls; the firewall below decides who gets through.
  public_network_access_enabled = true

  network_acls {
    default_action             = "Deny"
    bypass                     = "None"
    ip_rules                   = local.key_vault_ip_rules
    virtual_network_subnet_ids = []
  }
}

# ---------------------------------------------------------------------------------------------
# Private access from the cluster subnet
# ---------------------------------------------------------------------------------------------

# Private DNS zone names are unique per resource group: one cluster per resource group (the
# default creates its own group).
resource "azurerm_private_dns_zone" "key_vault" {
  name                = "privatelink.vaultcore.azure.net"
  resource_group_name = local.resource_group_name
  tags                = var.tags
}

resource "azurerm_private_dns_zone_virtual_network_link" "key_vault" {
  name                  = "${var.name_prefix}-kv-dns"
  resource_group_name   = local.resource_group_name
  private_dns_zone_name = azurerm_private_dns_zone.key_vault.name
  virtual_network_id    = azurerm_virtual_network.this.id
  registration_enabled  = false
  tags                  = var.tags
}

resource "azurerm_private_endpoint" "key_vault" {
  name                          = "${var.name_prefix}-kv-pe"
  location                      = var.location
  resource_group_name           = local.resource_group_name
  subnet_id                     = azurerm_subnet.this.id
  custom_network_interface_name = "${var.name_prefix}-kv-pe-nic"
  tags                          = var.tags

  private_service_connection {
    name                           = "${var.name_prefix}-kv-psc"
    private_connection_resource_id = azurerm_key_vault.this.id
    subresource_names              = ["vault"]
    is_manual_connection           = false
  }

  # The zone group writes the vault's A record into the private zone.
  private_dns_zone_group {
    name                 = "vault"
    private_dns_zone_ids = [azurerm_private_dns_zone.key_vault.id]
  }

  # A fixed address, the subnet's 5th host: a dynamic one could take the head's (the 4th)
  # before the head's NIC exists.
  ip_configuration {
    name               = "vault"
    private_ip_address = local.key_vault_private_ip
    subresource_name   = "vault"
    member_name        = "default"
  }
}

# ---------------------------------------------------------------------------------------------
# Who may do what: RBAC on the vault (data plane)
# ---------------------------------------------------------------------------------------------

# Whoever runs Terraform writes the secret. Creating a role assignment needs
# Microsoft.Authorization/roleAssignments/write on the resource group: Owner or User Access
# Administrator.
resource "azurerm_role_assignment" "deployer_secrets_officer" {
  scope                = azurerm_key_vault.this.id
  role_definition_name = "Key Vault Secrets Officer"
  principal_id         = data.azurerm_client_config.current.object_id
}

# The nodes' identity reads secrets of this vault only. (The nodes retry the read until the
# assignment has propagated: cloud-init's node_check token --timeout.)
resource "azurerm_role_assignment" "nodes_secrets_user" {
  scope                = azurerm_key_vault.this.id
  role_definition_name = "Key Vault Secrets User"
  principal_id         = azurerm_user_assigned_identity.this.principal_id
  principal_type       = "ServicePrincipal"
}

# A new role assignment reaches Key Vault's data plane only after a while, and azurerm does not
# retry a secret write refused with 403 ForbiddenByRbac (it fails "checking for presence of
# existing Secret"). Azure Verified Modules' Key Vault module waits the same way before its
# secret operations (time_sleep.wait_for_rbac_before_secret_operations, 30 s by default;
# Azure/terraform-azurerm-avm-res-keyvault-vault#78). If a write still comes too early, run
# `terraform apply` again: the assignment exists by then.
resource "time_sleep" "deployer_role_propagation" {
  create_duration = "${var.rbac_propagation_wait_seconds}s"

  triggers = {
    role_assignment_id = azurerm_role_assignment.deployer_secrets_officer.id
  }
}

# ---------------------------------------------------------------------------------------------
# The token
# ---------------------------------------------------------------------------------------------

# The secret's expiration date: cluster_token_expiration_days after the token was written, fixed
# in the state until the token is rotated (a new cluster_token_version writes a new token and a
# new date). Key Vault's `exp` is informational for secrets ("A secret's get operation will work
# for ... expired secrets", Azure Key Vault docs, About secrets: date-time controlled
# operations): nodes keep booting after it; it marks the token due for rotation, and satisfies
# policies that require an expiration date (Azure Policy "Key Vault secrets should have an
# expiration date", checkov CKV_AZURE_41).
resource "time_offset" "cluster_token_expiry" {
  offset_days = var.cluster_token_expiration_days

  triggers = {
    cluster_token_version = var.cluster_token_version
  }
}

resource "azurerm_key_vault_secret" "cluster_token" {
  name            = "ray-cluster-token"
  key_vault_id    = azurerm_key_vault.this.id
  content_type    = "text/plain"
  expiration_date = time_offset.cluster_token_expiry.rfc3339
  tags            = var.tags
  # Write-only: the value is sent to Azure and kept neither in the plan nor in the state. A new
  # cluster_token_version writes a new token (then restart Ray on every node, or replace the
  # VMs: running nodes keep the token they read at boot).
  value_wo         = ephemeral.random_password.cluster_token.result
  value_wo_version = var.cluster_token_version

  depends_on = [time_sleep.deployer_role_propagation]
}
