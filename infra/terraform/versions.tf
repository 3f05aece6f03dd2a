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

# The subscription comes from ARM_SUBSCRIPTION_ID (export ARM_SUBSCRIPTION_ID=$(az account show
# --query id -o tsv)); credentials from `az login` or the usual ARM_* variables.
provider "azurerm" {
  features {}
}
