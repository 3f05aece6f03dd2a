# The cluster as a module: no provider block. The caller configures azurerm (the root,
# infra/terraform/versions.tf, does; so does examples/as-module); these pins are what the module
# needs of it.
terraform {
  # The cluster token is an ephemeral value written to a write-only argument (keyvault.tf):
  # both need Terraform 1.11.
  required_version = ">= 1.11"

  required_providers {
    # 5.0 renames attributes this stack uses: stay on 4.x. 4.42 is the first with the Key
    # Vault's rbac_authorization_enabled (4.23 brought the secret's write-only value_wo).
    azurerm = {
      source  = "hashicorp/azurerm"
      version = "~> 4.42"
    }
    # The ephemeral random_password (the cluster token) exists since 3.7.
    random = {
      source  = "hashicorp/random"
      version = "~> 3.7"
    }
    # time_sleep (RBAC propagation) and time_offset (the token's expiration date), keyvault.tf.
    time = {
      source  = "hashicorp/time"
      version = "~> 0.13"
    }
  }
}
