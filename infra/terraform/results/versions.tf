terraform {
  required_version = ">= 1.11"

  required_providers {
    # The cluster stack's (../versions.tf): 4.x, 4.42 or later.
    azurerm = {
      source  = "hashicorp/azurerm"
      version = "~> 4.42"
    }
  }
}

# The subscription comes from ARM_SUBSCRIPTION_ID, credentials from `az login` (as the cluster
# stack). The account refuses shared keys (Entra ID only): the provider must use Entra ID for
# whatever it reads through the storage data plane.
provider "azurerm" {
  features {}
  storage_use_azuread = true
}
