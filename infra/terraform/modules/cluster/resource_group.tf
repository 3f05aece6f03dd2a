# The resource group: created here, or an existing one named by resource_group_name when
# create_resource_group = false (looking it up makes a wrong name fail at plan time).
resource "azurerm_resource_group" "this" {
  count = var.create_resource_group ? 1 : 0

  name     = var.resource_group_name
  location = var.location
  tags     = var.tags
}

data "azurerm_resource_group" "existing" {
  count = var.create_resource_group ? 0 : 1

  name = var.resource_group_name
}
