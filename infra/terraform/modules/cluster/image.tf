# The node image's gallery and image definition (create_image_gallery = true): the same two
# resources infra/bicep/image/main.bicep declares, with the same names and properties
# (tests/unit/test_terraform_stack.py holds them equal), so the image template that
# `python -m driver image build` deploys into this resource group builds its versions here.
# The cluster boots from a version through node_image_id (head.tf, workers.tf).

resource "azurerm_shared_image_gallery" "nodes" {
  count = var.create_image_gallery ? 1 : 0
  # Gallery names take letters, digits, '_' and '.' only (no '-').
  name                = replace("${var.name_prefix}_nodes", "-", "_")
  resource_group_name = local.resource_group_name
  location            = var.location
  description         = "Ray cluster node images: the nodes' install phase baked on the cluster's base image."
  tags                = var.tags
}

# One definition per operating system. trusted_launch_supported (SecurityType
# TrustedLaunchSupported): its versions boot standard generation 2 VMs, what this stack creates,
# and Trusted Launch VMs alike.
resource "azurerm_shared_image" "node" {
  count                    = var.create_image_gallery ? 1 : 0
  name                     = "${var.name_prefix}-node-${var.os_image}"
  gallery_name             = azurerm_shared_image_gallery.nodes[0].name
  resource_group_name      = local.resource_group_name
  location                 = var.location
  description              = "A Ray cluster node (${var.os_image}) with the install phase of its bootstrap done."
  os_type                  = "Linux"
  specialized              = false
  hyper_v_generation       = "V2"
  architecture             = "x64"
  trusted_launch_supported = true
  tags                     = var.tags

  identifier {
    publisher = "ray-cluster"
    offer     = "ray-node"
    sku       = var.os_image
  }
}
