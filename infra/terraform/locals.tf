locals {
  resource_group_name = var.create_resource_group ? azurerm_resource_group.this[0].name : data.azurerm_resource_group.existing[0].name

  # The head's private address is fixed (the 4th host: Azure keeps .0-.3 of every subnet), so the
  # workers' cloud-init can name it before the head exists.
  head_private_ip = cidrhost(var.subnet_address_prefix, 4)

  # var.os_image -> marketplace image. Every one is a generation 2 image.
  os_images = {
    "ubuntu-22.04" = { publisher = "Canonical", offer = "0001-com-ubuntu-server-jammy", sku = "22_04-lts-gen2" }
    "ubuntu-24.04" = { publisher = "Canonical", offer = "ubuntu-24_04-lts", sku = "server" }
    "debian-12"    = { publisher = "Debian", offer = "debian-12", sku = "12-gen2" }
  }
  os_image = local.os_images[var.os_image]

  # Deploy-time values for the rendered cloud-init documents, keyed by exactly the names in
  # cloud-init/placeholders.yaml (tests/test_terraform_custom_data.py holds the two lists
  # together). Each appears in the documents as @@NAME@@.
  deploy_values = {
    RAY_HEAD_IP        = local.head_private_ip
    RAY_CLUSTER_TOKEN  = random_bytes.cluster_token.hex
    RAY_ADMIN_USER     = var.admin_username
    EXTRA_PIP_PACKAGES = join(" ", var.extra_pip_packages)
    PIP_INDEX_URL      = var.pip_index_url
    TORCH_INDEX_URL    = var.torch_index_url
    APT_SOURCE         = var.apt_source
  }

  # The committed, rendered documents (python -m driver render writes them), filled in. Sent as
  # plain base64: Azure allows 87,380 base64 characters of custom data, the documents use about
  # a third of that (tests prove the bound for the longest values the variables accept).
  cloud_init_dir = "${path.module}/../../cloud-init/rendered"
  cloud_init     = { for role in ["head", "worker"] : role => file("${local.cloud_init_dir}/${role}.yaml") }
  custom_data = { for role, text in local.cloud_init : role => replace(replace(replace(replace(replace(replace(replace(text,
    "@@RAY_HEAD_IP@@", local.deploy_values.RAY_HEAD_IP),
    "@@RAY_CLUSTER_TOKEN@@", local.deploy_values.RAY_CLUSTER_TOKEN),
    "@@RAY_ADMIN_USER@@", local.deploy_values.RAY_ADMIN_USER),
    "@@EXTRA_PIP_PACKAGES@@", local.deploy_values.EXTRA_PIP_PACKAGES),
    "@@PIP_INDEX_URL@@", local.deploy_values.PIP_INDEX_URL),
    "@@TORCH_INDEX_URL@@", local.deploy_values.TORCH_INDEX_URL),
    "@@APT_SOURCE@@", local.deploy_values.APT_SOURCE)
  }

  ssh_target = "${var.admin_username}@${azurerm_public_ip.head.ip_address}"
}
