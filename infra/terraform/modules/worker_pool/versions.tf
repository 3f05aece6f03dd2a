# A child module: no provider block. The caller's azurerm configuration applies (the root's
# versions.tf pins it).
terraform {
  required_version = ">= 1.11"

  required_providers {
    azurerm = {
      source  = "hashicorp/azurerm"
      version = "~> 4.42"
    }
  }
}
