# The Ray cluster token (RAY_AUTH_MODE=token) lives in a Key Vault, and nowhere else: Terraform
# generates it as an ephemeral value (never in the plan or the state), writes it to the vault as
# a write-only secret value, and each node reads it at boot through its managed identity, which
# may read secrets of this one vault and nothing else. Custom data carries only where to find it
# (KEY_VAULT_URL, TOKEN_SECRET_NAME, IDENTITY_CLIENT_ID). The driver reads the token from the
# head over SSH, as before.

data "azurerm_client_config" "current" {}

ephemeral "random_password" "cluster_token" {
  length  = 48
  special = false
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

  # Reachable from the cluster's subnet (service endpoint) and from the addresses that run
  # Terraform (to write the secret); denied to everyone else.
  network_acls {
    default_action             = "Deny"
    bypass                     = "AzureServices"
    ip_rules                   = local.key_vault_ip_rules
    virtual_network_subnet_ids = [azurerm_subnet.this.id]
  }
}

# Whoever runs Terraform writes the secret (data plane, RBAC).
resource "azurerm_role_assignment" "deployer_secrets_officer" {
  scope                = azurerm_key_vault.this.id
  role_definition_name = "Key Vault Secrets Officer"
  principal_id         = data.azurerm_client_config.current.object_id
}

# The nodes' identity reads secrets of this vault only.
resource "azurerm_role_assignment" "nodes_secrets_user" {
  scope                = azurerm_key_vault.this.id
  role_definition_name = "Key Vault Secrets User"
  principal_id         = azurerm_user_assigned_identity.this.principal_id
  principal_type       = "ServicePrincipal"
}

resource "azurerm_key_vault_secret" "cluster_token" {
  name         = "ray-cluster-token"
  key_vault_id = azurerm_key_vault.this.id
  content_type = "text/plain"
  # Write-only: the value is sent to Azure and not kept in the state. Raise the version to
  # write a new token (then restart Ray on every node, or replace the VMs).
  value_wo         = ephemeral.random_password.cluster_token.result
  value_wo_version = 1

  depends_on = [azurerm_role_assignment.deployer_secrets_officer]
}
