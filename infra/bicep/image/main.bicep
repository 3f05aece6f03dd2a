metadata name = 'Ray node image'
metadata description = 'An Azure Compute Gallery, an image definition and an Azure Image Builder template that bakes the install phase of the nodes\' bootstrap (the rendered image customizer) into a gallery image version on the stacks\' base image. The cluster stacks boot from that version with node_image_id / nodeImageId.'

targetScope = 'resourceGroup'

// -----------------------------------------------------------------------------------------------
// Parameters. The install values are the cluster stack's (same names, defaults and meaning):
// what a node installs at boot is what the image holds, so a node booted from it skips the
// install. A node whose image holds another install (another lock, other extras) installs again.
// -----------------------------------------------------------------------------------------------

@description('Optional. Azure region of the gallery, the image template and the image version it builds; the resource group\'s region by default. Build the image where the cluster runs.')
param location string = resourceGroup().location

@description('Optional. Prefix of every resource name ("ray" gives ray-node-image, ...): 2-16 lower-case letters, digits or \'-\', starting with a letter.')
@minLength(2)
@maxLength(16)
param namePrefix string = 'ray'

@description('Optional. Tags for every resource that takes them.')
param tags object = {}

@description('Optional. Operating system the image is built on, the cluster stack\'s osImage: "ubuntu-22.04", "ubuntu-24.04" or "debian-12". Boot the cluster with the same one.')
@allowed([
  'ubuntu-22.04'
  'ubuntu-24.04'
  'debian-12'
])
param osImage string = 'ubuntu-22.04'

@description('Optional. Name of the Image Builder template; `python -m driver image build --template NAME` runs it. A template cannot be changed once created: a new install (a new lock, other extras) needs a new name or the old template deleted.')
@minLength(1)
@maxLength(64)
param imageTemplateName string = '${namePrefix}-node-image'

@description('Optional. VM size of the build VM Image Builder boots (the install runs there).')
param buildVmSize string = 'Standard_D4s_v5'

@description('Optional. Minutes Image Builder may take for the whole build (customize and distribute), 60-960.')
@minValue(60)
@maxValue(960)
param buildTimeoutInMinutes int = 120

@description('Optional. Extra pip requirements baked in next to Ray, e.g. ["minigrid==3.0.0"]: the cluster stack\'s extraPipPackages, which must be the same for its nodes to use the baked install.')
param extraPipPackages array = []

@description('Optional. Extra Debian packages baked in, e.g. ["libglu1-mesa"]: the cluster stack\'s extraAptPackages.')
param extraAptPackages array = []

@description('Optional. Python package index (PEP 503 simple API) the build installs from. Secure parameter (kept out of the deployment history); the image template\'s customizer still carries it, base64-encoded, readable by whoever may read the template.')
@secure()
@maxLength(512)
// checkov:skip=CKV_AZURE_131:The default is the public package index, which holds no secret; @secure() keeps a user's index credentials out of the deployment history.
#disable-next-line secure-parameter-default // The default is the public index, which holds no secret.
param pipIndexUrl string = 'https://pypi.org/simple'

@description('Optional. Package index that serves the torch wheel: PyTorch\'s CPU-only index by default.')
@maxLength(512)
param torchIndexUrl string = 'https://download.pytorch.org/whl/cpu'

@description('Optional. One apt source line added before OS packages install, e.g. "deb [trusted=yes] http://10.0.0.5/debian ./"; empty keeps the image\'s own mirrors.')
@maxLength(512)
param aptSource string = ''

// -----------------------------------------------------------------------------------------------
// The base image: the cluster stack's os image -> marketplace image (infra/bicep/main.bicep and
// infra/terraform/modules/cluster/locals.tf hold the same table; tests/unit/test_image_template.py holds the
// three copies equal). Every one is a generation 2 image.
// -----------------------------------------------------------------------------------------------
var osImages = {
  'ubuntu-22.04': {
    publisher: 'Canonical'
    offer: '0001-com-ubuntu-server-jammy'
    sku: '22_04-lts-gen2'
    version: 'latest'
  }
  'ubuntu-24.04': {
    publisher: 'Canonical'
    offer: 'ubuntu-24_04-lts'
    sku: 'server'
    version: 'latest'
  }
  'debian-12': {
    publisher: 'Debian'
    offer: 'debian-12'
    sku: '12-gen2'
    version: 'latest'
  }
}

// Gallery names take letters, digits, '_' and '.' only (no '-').
var galleryName = replace('${namePrefix}_nodes', '-', '_')
var imageDefinitionName = '${namePrefix}-node-${osImage}'

// The image customizer: the install phase of the nodes' bootstrap, run once on the build VM.
// `python -m nodekit render` writes it from the same templates as the nodes' cloud-init documents.
var installScript = loadTextContent('../../../cloud-init/rendered/install.sh')

// Compute Gallery Artifacts Publisher (built in): read and write galleries, image definitions and
// image versions, and nothing outside Microsoft.Compute's gallery and image types (no network, no
// storage, no role assignments, no sharing of the gallery).
var galleryPublisherRoleId = '85a2d0d9-2eba-4c9c-b355-11c2cc0788ab'

// -----------------------------------------------------------------------------------------------
// Resources
// -----------------------------------------------------------------------------------------------

resource gallery 'Microsoft.Compute/galleries@2024-03-03' = {
  name: galleryName
  location: location
  tags: tags
  properties: {
    description: 'Ray cluster node images: the nodes\' install phase baked on the cluster\'s base image.'
  }
}

// One definition per operating system: its versions are the baked installs of that OS.
// TrustedLaunchSupported: the versions boot standard generation 2 VMs (what the cluster stacks
// create today) and Trusted Launch VMs alike; a plain definition could not back a Trusted Launch
// VM.
resource imageDefinition 'Microsoft.Compute/galleries/images@2024-03-03' = {
  parent: gallery
  name: imageDefinitionName
  location: location
  tags: tags
  properties: {
    description: 'A Ray cluster node (${osImage}) with the install phase of its bootstrap done.'
    osType: 'Linux'
    osState: 'Generalized'
    hyperVGeneration: 'V2'
    architecture: 'x64'
    identifier: {
      publisher: 'ray-cluster'
      offer: 'ray-node'
      sku: osImage
    }
    features: [
      {
        name: 'SecurityType'
        value: 'TrustedLaunchSupported'
      }
    ]
  }
}

// Image Builder runs as this identity when it writes the image version into the gallery.
resource builderIdentity 'Microsoft.ManagedIdentity/userAssignedIdentities@2024-11-30' = {
  name: '${namePrefix}-image-builder-id'
  location: location
  tags: tags
}

// On the gallery's resource group (this deployment's): the role Image Builder's distribution
// needs, and nothing more (see galleryPublisherRoleId).
resource builderRole 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(resourceGroup().id, builderIdentity.id, galleryPublisherRoleId)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', galleryPublisherRoleId)
    principalId: builderIdentity.properties.principalId
    principalType: 'ServicePrincipal'
  }
}

// The build: the base image, the customizer, a generalized image version in the gallery,
// replicated to this region. Image Builder checks the identity's rights when the template is
// created, hence the dependency on the role assignment.
resource imageTemplate 'Microsoft.VirtualMachineImages/imageTemplates@2024-02-01' = {
  name: imageTemplateName
  location: location
  tags: tags
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${builderIdentity.id}': {}
    }
  }
  properties: {
    buildTimeoutInMinutes: buildTimeoutInMinutes
    vmProfile: {
      vmSize: buildVmSize
      osDiskSizeGB: 64
    }
    source: {
      type: 'PlatformImage'
      publisher: osImages[osImage].publisher
      offer: osImages[osImage].offer
      sku: osImages[osImage].sku
      version: osImages[osImage].version
    }
    // Packer joins the inline lines into one /bin/sh -e script run as the build user: the
    // customizer and each value travel base64-encoded (no quoting of their contents), and the
    // customizer runs as root under bash with the install values in its environment.
    customize: [
      {
        type: 'Shell'
        name: 'ray-node-install'
        inline: [
          'printf %s \'${base64(installScript)}\' | base64 -d > /tmp/ray-node-install.sh'
          'sudo env PIP_INDEX_URL="$(printf %s \'${base64(pipIndexUrl)}\' | base64 -d)" TORCH_INDEX_URL="$(printf %s \'${base64(torchIndexUrl)}\' | base64 -d)" APT_SOURCE="$(printf %s \'${base64(aptSource)}\' | base64 -d)" EXTRA_PIP_PACKAGES="$(printf %s \'${base64(join(extraPipPackages, ' '))}\' | base64 -d)" EXTRA_APT_PACKAGES="$(printf %s \'${base64(join(extraAptPackages, ' '))}\' | base64 -d)" bash /tmp/ray-node-install.sh'
          'rm -f /tmp/ray-node-install.sh'
        ]
      }
    ]
    distribute: [
      {
        type: 'SharedImage'
        galleryImageId: imageDefinition.id
        runOutputName: 'ray-node'
        artifactTags: {
          osImage: osImage
        }
        targetRegions: [
          {
            name: location
            replicaCount: 1
            storageAccountType: 'Standard_LRS'
          }
        ]
      }
    ]
  }
  dependsOn: [
    builderRole
  ]
}

@description('Resource ID of the gallery.')
output galleryId string = gallery.id

@description('Resource ID of the image definition; each build adds a version under it.')
output imageDefinitionId string = imageDefinition.id

@description('Name of the Image Builder template (python -m driver image build --template).')
output imageTemplateName string = imageTemplate.name
