terraform {
  # Variable validations and preconditions below work from 1.6; `terraform test` with
  # mock_provider (infra/terraform/tests) needs 1.7 or later.
  required_version = ">= 1.6"

  required_providers {
    # 5.0 renames attributes this stack uses: stay on 4.x.
    azurerm = {
      source  = "hashicorp/azurerm"
      version = "~> 4.0"
    }
    # random_bytes (the cluster token) exists since 3.6.
    random = {
      source  = "hashicorp/random"
      version = "~> 3.6"
    }
  }
}

# The subscription comes from ARM_SUBSCRIPTION_ID (export ARM_SUBSCRIPTION_ID=$(az account show
# --query id -o tsv)); credentials from `az login` or the usual ARM_* variables.
provider "azurerm" {
  features {}
}
