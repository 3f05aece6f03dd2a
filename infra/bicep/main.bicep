metadata name = 'Ray cluster for distributed reinforcement learning'
metadata description = 'A Ray head VM and an autoscaled scale set of workers in a private network, SSH-only from the allowed addresses, booted from the committed cloud-init documents; the same cluster as infra/terraform, parameter for parameter.'

targetScope = 'resourceGroup'

// -----------------------------------------------------------------------------------------------
// Parameters. Names are the Terraform stack's variables in camelCase, with the same defaults and
// limits; rules a decorator cannot express are checked in modules/checks.bicep before anything
// is created (tests/unit/test_bicep_*.py hold the two stacks together).
// -----------------------------------------------------------------------------------------------

@description('Required. IPv4 CIDRs allowed to reach the head over SSH (port 22), e.g. ["203.0.113.7/32"]. Nothing else is reachable from outside the virtual network. The whole Internet (0.0.0.0/0, *, Internet, Any, any /0) is refused.')
@minLength(1)
param allowedSshCidrs array

@description('Required. OpenSSH public key of the admin user, one line: "ssh-ed25519 AAAA... you@host" or "ssh-rsa AAAA..." (RSA 2048 bits or more). The contents of ~/.ssh/id_ed25519.pub, not its path. Password login is disabled.')
param adminSshPublicKey string

@description('Optional. Azure region for every resource, e.g. "westeurope" or "eastus" (`az account list-locations -o table`); the resource group\'s region by default.')
param location string = resourceGroup().location

@description('Optional. Prefix of every resource name ("ray" gives ray-head, ray-workers, ...): 2-16 lower-case letters, digits or \'-\', starting with a letter.')
@minLength(2)
@maxLength(16)
param namePrefix string = 'ray'

@description('Optional. Tags for every resource that takes them.')
param tags object = {}

@description('Optional. Address space of the virtual network, an IPv4 network address between /8 and /28 in a private range: 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 (RFC 1918) or 100.64.0.0/10 (RFC 6598).')
param vnetAddressSpace string = '10.42.0.0/16'

@description('Optional. The cluster\'s subnet inside vnetAddressSpace, an IPv4 network address between /8 and /28 in a private range (the head takes its 4th host, e.g. 10.42.1.4, the Key Vault\'s private endpoint its 5th; workers take the rest).')
param subnetAddressPrefix string = '10.42.1.0/24'

@description('Optional. Minutes a TCP connection may stay silent before Azure drops it, 4-30: on the head\'s public IP (an SSH session or tunnel to the head, e.g. the driver\'s, with no traffic for this long is cut; 30 is the public IP\'s maximum) and on the NAT gateway (the nodes\' outbound connections, e.g. slow package downloads).')
@minValue(4)
@maxValue(30)
param tcpIdleTimeoutMinutes int = 30

@description('Optional. Admin user on every VM (SSH key login only); also the user the driver connects as. Lower-case, 1-32 characters, not a name Azure reserves (admin, root, ...).')
@minLength(1)
@maxLength(32)
param adminUsername string = 'azureuser'

@description('Optional. Operating system of every VM: "ubuntu-22.04", "ubuntu-24.04" or "debian-12".')
@allowed([
  'ubuntu-22.04'
  'ubuntu-24.04'
  'debian-12'
])
param osImage string = 'ubuntu-22.04'

@description('Optional. Resource ID of a gallery image version the head and every worker boot from instead of the osImage\'s marketplace image: one `python -m driver image build` baked (infra/bicep/image/; the nodes\' install phase done, so they skip it), e.g. "/subscriptions/SUB/resourceGroups/RG/providers/Microsoft.Compute/galleries/ray_nodes/images/ray-node-ubuntu-22.04/versions/1.0.0". Build it from the same osImage and install values (extraPipPackages, torchIndexUrl, ...); a node whose image holds another install installs at boot as without one. Empty boots the marketplace image.')
param nodeImageId string = ''

@description('Optional. VM size of the head (the learner runs there), e.g. "Standard_D4s_v5" or a GPU size such as "Standard_NC4as_T4_v3".')
param headVmSize string = 'Standard_D4s_v5'

@description('Optional. The head as a "Regular" VM or a "Spot" VM (the cheapest learner of a small cluster, at Spot\'s rate). An evicted Spot head is deallocated, not deleted (eviction policy Deallocate): its OS disk, addresses and checkpoints stay, the cluster\'s Ray stops until `python -m driver start` (or `submit`) starts the head again, which Azure allows only when it has Spot capacity at headMaxPrice. Its watcher tells the jobs of the Preempt notice (about 30 s) so they can checkpoint first (docs/reliability.md). Changing it replaces the head VM and its disk.')
@allowed([
  'Regular'
  'Spot'
])
param headPriority string = 'Regular'

@description('Optional. With headPriority "Spot": the most the head may cost, in US dollars per hour (above 0, at most 1000), or -1: up to the regular (pay-as-you-go) price, evicted for capacity only; as text (ARM has no fractional parameter type), e.g. "0.12". Azure evicts the head when the Spot price rises above it.')
param headMaxPrice string = '-1'

@description('Optional. VM size of each worker in the scale set, e.g. "Standard_D4s_v5" or "Standard_F8s_v2" (48 characters at most); with workerPools, the size of a pool that names none.')
param workerVmSize string = 'Standard_D4s_v5'

@description('Optional. Encrypt temp disks and caches at the host on every VM. Needs the EncryptionAtHost feature on the subscription (az feature register --namespace Microsoft.Compute --name EncryptionAtHost), hence off by default.')
param encryptionAtHostEnabled bool = false

@description('Optional. Who sets the worker count: "cpu" (Azure Monitor autoscale on average CPU, the scale*CpuPercent rules) or "ray" (Ray\'s own autoscaler on the head adds workers for pending tasks and actors and removes idle ones by name after rayIdleTimeoutMinutes; no CPU rules; the head gets an identity allowed to change the worker pools\' scale sets only).')
@allowed([
  'cpu'
  'ray'
])
param scalingMode string = 'cpu'

@description('Optional. With scalingMode "ray": minutes a worker stays idle (nothing running on it) before Ray\'s autoscaler drains and deletes it, 1-1440.')
@minValue(1)
@maxValue(1440)
param rayIdleTimeoutMinutes int = 5

@description('Optional. Minutes the cluster may sit idle (no Ray job pending or running, no SSH connection to the head, tunnels included) before it stops itself: the workers go to zero and the head deallocates (compute billing stops; disks and results stay; `python -m driver submit` or `start` starts it again). 0 turns autostop off; otherwise 10-10080 (a week). On, the head gets a custom role allowed to deallocate itself, set the workers\' scale set and (scalingMode "cpu") turn the workers\' autoscale off and on, on those resources only.')
@minValue(0)
@maxValue(10080)
param autostopIdleMinutes int = 60

@description('Optional. Fewest workers autoscale keeps, 0-100. With scalingMode "ray", 0 means the cluster scales to zero when idle. With "cpu", the scale set has no CPU metric at 0 instances, so autoscale then returns to workerDefaultCount: it stays at 0 only when workerDefaultCount is 0 too.')
@minValue(0)
@maxValue(100)
param workerMinCount int = 0

@description('Optional. Workers created at deployment, and the count autoscale returns to when it cannot read the CPU metric; workerMinCount <= workerDefaultCount <= workerMaxCount.')
@minValue(0)
@maxValue(100)
param workerDefaultCount int = 2

@description('Optional. Most workers autoscale adds, 1-100 (one placement group); check your regional vCPU quota with az vm list-usage --location LOCATION.')
@minValue(1)
@maxValue(100)
param workerMaxCount int = 4

@description('Optional. Add one worker when the workers\' average CPU over 5 minutes is above this percentage (1-100).')
@minValue(1)
@maxValue(100)
param scaleOutCpuPercent int = 70

@description('Optional. Remove one worker when the workers\' average CPU over 5 minutes is below this percentage (0-99, below scaleOutCpuPercent).')
@minValue(0)
@maxValue(99)
param scaleInCpuPercent int = 30

@description('Optional. Minutes autoscale waits after adding a worker before it scales again (1-60).')
@minValue(1)
@maxValue(60)
param scaleOutCooldownMinutes int = 5

@description('Optional. Minutes autoscale waits after removing a worker before it scales again (1-60).')
@minValue(1)
@maxValue(60)
param scaleInCooldownMinutes int = 10

@description('Optional. Run workers as Spot VMs (evicted VMs are deleted; price capped at the on-demand price, maxPrice = -1). Spot workers get about 30 s notice (Preempt) instead of a termination notification.')
param workerSpotEnabled bool = false

@description('Optional. Minutes a regular (not Spot) worker gets between the Terminate scheduled event and its deletion, to drain its Ray tasks (5-15).')
@minValue(5)
@maxValue(15)
param workerTerminationNoticeMinutes int = 5

@description('Optional. Let the scale set replace a worker whose health endpoint says Unhealthy (its bootstrap failed for good, or Ray did not come back) or that never reports (Unknown), keeping the worker count. The Application Health extension reports the health either way.')
param workerAutomaticRepairEnabled bool = true

@description('Optional. Minutes after a worker is created (or updated) before it may be repaired (10-90). A cold bootstrap takes 10-15 minutes; a bootstrap still running reports Initializing, which is never repaired.')
@minValue(10)
@maxValue(90)
param workerAutomaticRepairGracePeriodMinutes int = 30

@description('Optional. What repair does to an unhealthy worker: Replace (a new VM from the current model) or Reimage (same VM, fresh OS disk; cloud-init runs again). Not Restart: a reboot keeps the failed bootstrap\'s marker, so the worker would stay Unhealthy.')
@allowed([
  'Replace'
  'Reimage'
])
param workerAutomaticRepairAction string = 'Replace'

@description('Optional. Worker pools, one scale set each (at most 4), e.g. [{ name: \'cpu\', vmSize: \'Standard_F8s_v2\', spotEnabled: true, maxCount: 20 }, { name: \'gpu\', vmSize: \'Standard_NC4as_T4_v3\', minCount: 0, defaultCount: 0, maxCount: 2, rayLabels: { accelerator: \'t4\' } }]. Per pool: name (1-10 lower-case letters, digits or \'-\'), vmSize, minCount, defaultCount, maxCount, spotEnabled (what a pool leaves out is the worker* parameter\'s), evictionPolicy ("Delete" or "Deallocate") and maxPrice (US dollars per hour, or -1: the on-demand price) for Spot pools, zones (availability zones of its VMs, e.g. [\'1\', \'2\', \'3\']; [] (the default): regional, Azure places them) and zoneBalance (true: keep them strictly even across two zones or more), orchestrationMode ("Flexible", the default, or "Uniform", the scale set of clusters made before Flexible became the default: pin it to keep theirs; changing it replaces the pool\'s scale set), for Flexible pools only: priorityMix (Spot pools: Spot Priority Mix, { baseRegularCount: 1, regularPercentageAboveBase: 25 } = the first VM regular, then a quarter of the rest regular and three quarters Spot) and instanceMix (Instance Mix, { vmSizes: [\'Standard_D4s_v5\', \'Standard_D4as_v5\'], allocationStrategy: "LowestPrice" or "CapacityOptimized" }: 2-5 sizes including the pool\'s vmSize, which Ray\'s autoscaler plans with), rayResources (custom Ray resources its workers offer, e.g. { simulator: 2 }; default: one simulator slot per CPU) and rayLabels (Ray node labels besides pool = name). CPUs and GPUs come from each node\'s own detection. The pool\'s scale set is namePrefix-name. Empty (the default): one pool "workers" made of the worker* parameters, the cluster as before pools. With scalingMode "ray" Ray\'s autoscaler has one node type per pool (its CPUs and GPUs from vmSize, its rayResources and rayLabels) and scales each pool\'s scale set, to zero when minCount is 0.')
param workerPools array = []

@description('Optional. Days from writing the cluster token to the expiration date recorded on its Key Vault secret, 1-3650. The date is informational (Key Vault still returns an expired secret, so nodes keep booting): it marks the token due for rotation, and satisfies policies that require one.')
@minValue(1)
@maxValue(3650)
param clusterTokenExpirationDays int = 365

@description('Optional. Extra pip requirements installed on every node next to Ray, e.g. ["minigrid==3.0.0"]. No spaces, quotes or backslashes inside an entry; 1,024 characters in all.')
param extraPipPackages array = []

@description('Optional. Extra Debian/Ubuntu packages installed on every node with the OS packages (a simulator\'s system libraries), e.g. ["libosmesa6"]. Package names only; 1,024 characters in all.')
param extraAptPackages array = []

@description('Optional. Python package index (PEP 503 simple API) the nodes install Ray and its dependencies from. It may carry credentials (a user name and token before the host), so it is a secure parameter (kept out of the deployment history); the nodes\' custom data, and so the VMs\' model in Azure, still carry it in clear text: prefer a token that can only read the index.')
@secure()
@maxLength(512)
#disable-next-line secure-parameter-default // The default is the public index, which holds no secret; @secure() keeps a user's index credentials out of the deployment history.
param pipIndexUrl string = 'https://pypi.org/simple'

@description('Optional. Package index that serves the CPU-only torch wheel to nodes without an NVIDIA GPU; the default is PyTorch\'s CPU index. Nodes with NVIDIA GPUs do not use it: they install the CUDA build of the same torch from the nodes\' GPU lock (PyPI, pinned with hashes).')
@maxLength(512)
param torchIndexUrl string = 'https://download.pytorch.org/whl/cpu'

@description('Optional. One apt source line added before OS packages install, for private networks, e.g. "deb [trusted=yes] http://10.0.0.5/debian ./"; empty keeps the image\'s own mirrors.')
@maxLength(512)
param aptSource string = ''

@description('Optional. Resource ID of the storage account that keeps the jobs\' results (the separate stack infra/bicep/results.bicep creates it; its output storageAccountId). Empty (the default): no results storage, results stay on the head\'s disk only. Set: the cluster gets a private endpoint to the account\'s blob service in its subnet (the subnet\'s 6th host) with the privatelink.blob.core.windows.net zone, and jobs the container\'s URL (RAYDRIVER_RESULTS_URL); grant the nodes\' identity Storage Blob Data Contributor on the results container (infra/bicep/README.md). Deleting the cluster leaves the account and its results alone.')
param resultsStorageAccountId string = ''

@description('Optional. Leave it out: the Ray cluster token (RAY_AUTH_MODE=token), 64 random hexadecimal characters made at deployment. It is written to the cluster\'s Key Vault and kept nowhere else (deployment history does not keep secure parameter values). Every deployment that leaves it out writes a new token: see infra/bicep/README.md, "Redeploying".')
@secure()
@minLength(32)
param clusterToken string = replace('${newGuid()}${newGuid()}', '-', '')

@description('Optional. Leave it out: the time of this deployment (UTC), from which the token\'s expiration date counts.')
param deploymentTime string = utcNow()

// -----------------------------------------------------------------------------------------------
// Input checks. Resource Manager has no regex and no fail(): each rule is an expression of the
// inputs that yields 'ok' or the rule's message (the Terraform stack's, names in camelCase), and
// modules/checks.bicep refuses anything but 'ok'. Guards use ?: (if() evaluates only the branch it
// takes); && and || evaluate both sides, so nothing on either side may fail on a bad value.
// Written for pycep-parser 0.5.1, the Bicep parser checkov 3.3 uses: loops are for-expressions,
// lambdas appear only in filter().
// -----------------------------------------------------------------------------------------------

var digits = '0123456789'
var lowerCase = 'abcdefghijklmnopqrstuvwxyz'
var upperCase = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ'
var base64Alphabet = '${upperCase}${lowerCase}${digits}+/'
var powersOfTwo = [
  1
  2
  4
  8
  16
  32
  64
  128
  256
  512
  1024
  2048
  4096
  8192
  16384
  32768
  65536
  131072
  262144
  524288
  1048576
  2097152
  4194304
  8388608
  16777216
  33554432
  67108864
  134217728
  268435456
  536870912
  1073741824
  2147483648
  4294967296
]

// Where a virtual network may take its addresses: RFC 1918 and RFC 6598's shared space, the
// ranges Azure's virtual network FAQ names as private (first address as a number, prefix length).
var privateRanges = [
  {
    address: 167772160 // 10.0.0.0/8
    prefix: 8
  }
  {
    address: 2886729728 // 172.16.0.0/12
    prefix: 12
  }
  {
    address: 3232235520 // 192.168.0.0/16
    prefix: 16
  }
  {
    address: 1681915904 // 100.64.0.0/10
    prefix: 10
  }
]

// Every CIDR input, parsed once: the SSH entries, then the VNet, then the subnet. Canonical form:
// four decimal octets 0-255 without leading zeros, a prefix length 0-32 without a leading zero:
// one '/', three '.', five fields of 1-3 digits, each the decimal of its own number.
var cidrInputs = concat(allowedSshCidrs, [
  vnetAddressSpace
  subnetAddressPrefix
])
var cidrShapes = [for c in cidrInputs: {
  cidr: c
  fields: split(replace(c, '/', '.'), '.')
  shaped: length(split(c, '/')) == 2 && length(split(c, '.')) == 4 && !contains(last(split(c, '/')), '.') && empty(filter(split(replace(c, '/', '.'), '.'), f => length(f) < 1 || length(f) > 3 || !empty(replace(replace(replace(replace(replace(replace(replace(replace(replace(replace(f, '0', ''), '1', ''), '2', ''), '3', ''), '4', ''), '5', ''), '6', ''), '7', ''), '8', ''), '9', ''))))
}]
var cidrForms = [for s in cidrShapes: {
  cidr: s.cidr
  fields: s.fields
  canonical: s.shaped ? string(int(s.fields[0])) == s.fields[0] && string(int(s.fields[1])) == s.fields[1] && string(int(s.fields[2])) == s.fields[2] && string(int(s.fields[3])) == s.fields[3] && string(int(s.fields[4])) == s.fields[4] && int(s.fields[0]) <= 255 && int(s.fields[1]) <= 255 && int(s.fields[2]) <= 255 && int(s.fields[3]) <= 255 && int(s.fields[4]) <= 32 : false
}]
var cidrs = [for f in cidrForms: {
  cidr: f.cidr
  canonical: f.canonical
  address: f.canonical ? int(f.fields[0]) * 16777216 + int(f.fields[1]) * 65536 + int(f.fields[2]) * 256 + int(f.fields[3]) : 0
  prefix: f.canonical ? int(f.fields[4]) : 32
}]
var sshCidrs = take(cidrs, length(allowedSshCidrs))
var vnet = cidrs[length(allowedSshCidrs)]
var subnet = cidrs[length(allowedSshCidrs) + 1]

// Every entry counts in full, overlaps included (2^24 addresses is one /8 in all); an entry wider
// than /8 counts as more than that on its own.
var sshAddressCount = length(filter(sshCidrs, e => e.canonical && e.prefix < 8)) * 16777217 + length(filter(sshCidrs, e => e.canonical && e.prefix == 8)) * 16777216 + length(filter(sshCidrs, e => e.canonical && e.prefix == 9)) * 8388608 + length(filter(sshCidrs, e => e.canonical && e.prefix == 10)) * 4194304 + length(filter(sshCidrs, e => e.canonical && e.prefix == 11)) * 2097152 + length(filter(sshCidrs, e => e.canonical && e.prefix == 12)) * 1048576 + length(filter(sshCidrs, e => e.canonical && e.prefix == 13)) * 524288 + length(filter(sshCidrs, e => e.canonical && e.prefix == 14)) * 262144 + length(filter(sshCidrs, e => e.canonical && e.prefix == 15)) * 131072 + length(filter(sshCidrs, e => e.canonical && e.prefix == 16)) * 65536 + length(filter(sshCidrs, e => e.canonical && e.prefix == 17)) * 32768 + length(filter(sshCidrs, e => e.canonical && e.prefix == 18)) * 16384 + length(filter(sshCidrs, e => e.canonical && e.prefix == 19)) * 8192 + length(filter(sshCidrs, e => e.canonical && e.prefix == 20)) * 4096 + length(filter(sshCidrs, e => e.canonical && e.prefix == 21)) * 2048 + length(filter(sshCidrs, e => e.canonical && e.prefix == 22)) * 1024 + length(filter(sshCidrs, e => e.canonical && e.prefix == 23)) * 512 + length(filter(sshCidrs, e => e.canonical && e.prefix == 24)) * 256 + length(filter(sshCidrs, e => e.canonical && e.prefix == 25)) * 128 + length(filter(sshCidrs, e => e.canonical && e.prefix == 26)) * 64 + length(filter(sshCidrs, e => e.canonical && e.prefix == 27)) * 32 + length(filter(sshCidrs, e => e.canonical && e.prefix == 28)) * 16 + length(filter(sshCidrs, e => e.canonical && e.prefix == 29)) * 8 + length(filter(sshCidrs, e => e.canonical && e.prefix == 30)) * 4 + length(filter(sshCidrs, e => e.canonical && e.prefix == 31)) * 2 + length(filter(sshCidrs, e => e.canonical && e.prefix == 32))

// The head's private address is fixed (the subnet's 4th host: Azure keeps .0-.3 of every subnet),
// so the workers' cloud-init can name it before the head exists; the Key Vault's private endpoint
// takes the 5th.
var headAddress = subnet.address + 4
var headPrivateIp = '${headAddress / 16777216}.${headAddress / 65536 % 256}.${headAddress / 256 % 256}.${headAddress % 256}'
var keyVaultAddress = subnet.address + 5
var keyVaultPrivateIp = '${keyVaultAddress / 16777216}.${keyVaultAddress / 65536 % 256}.${keyVaultAddress / 256 % 256}.${keyVaultAddress % 256}'
// The results storage's private endpoint takes the subnet's 6th host.
var resultsAddress = subnet.address + 6
var resultsPrivateIp = '${resultsAddress / 16777216}.${resultsAddress / 65536 % 256}.${resultsAddress / 256 % 256}.${resultsAddress % 256}'

// The SSH key, decoded: the SSH wire format (RFC 4253 section 6.6, RFC 8709 for ed25519) is a
// string (uint32 length + bytes) holding the key type, then for ssh-ed25519 one string of 32
// bytes (51 bytes in all), for ssh-rsa two mpints, e and n. Each group of 4 base64 characters is
// 24 bits (3 bytes). indexOf() ignores case, hence the upper-case lookup plus 26 for a lower-case
// letter (contains() does not ignore case). An ARM loop has at most 800 iterations: the key data
// may have up to 3,200 characters (RSA keys up to 16384 bits).
var sshKey = trim(adminSshPublicKey)
var sshKeyWords = split(sshKey, ' ')
var sshKeyType = sshKeyWords[0]
var sshKeyBlob = length(sshKeyWords) > 1 ? sshKeyWords[1] : ''
var sshKeyBlobCore = replace(sshKeyBlob, '=', '')
var sshKeyPadding = length(sshKeyBlob) - length(sshKeyBlobCore)
// The key data in pieces of 4 characters (a loop over each character would stop at 800).
var sshKeyBlobChunks = [for g in range(0, length(sshKeyBlobCore) <= 3200 ? (length(sshKeyBlobCore) + 3) / 4 : 0): substring(sshKeyBlobCore, 4 * g, min(4, length(sshKeyBlobCore) - 4 * g))]
var sshKeyBlobChunksValid = [for c in sshKeyBlobChunks: contains(base64Alphabet, take(c, 1)) && contains(base64Alphabet, take(skip(c, 1), 1)) && contains(base64Alphabet, take(skip(c, 2), 1)) && contains(base64Alphabet, take(skip(c, 3), 1))]
var sshKeyIsOneLine = contains([
  'ssh-ed25519'
  'ssh-rsa'
], sshKeyType) && !empty(sshKeyBlobCore) && length(sshKeyBlobCore) <= 3200 && !contains(sshKeyBlobChunksValid, false) && sshKeyPadding <= 3 && sshKeyBlob == '${sshKeyBlobCore}${take('===', sshKeyPadding)}' && !contains(sshKey, '\r') && !contains(sshKey, '\n')
var sshKeyDecodable = sshKeyIsOneLine && length(sshKeyBlob) % 4 == 0
var base64Upper = '${upperCase}${digits}+/'
var sshKeyGroups = [for g in range(0, sshKeyDecodable ? length(sshKeyBlob) / 4 : 0): (substring(sshKeyBlob, 4 * g, 1) == '=' ? 0 : (contains(upperCase, substring(sshKeyBlob, 4 * g, 1)) ? 0 : 26) + indexOf(base64Upper, toUpper(substring(sshKeyBlob, 4 * g, 1)))) * 262144 + (substring(sshKeyBlob, 4 * g + 1, 1) == '=' ? 0 : (contains(upperCase, substring(sshKeyBlob, 4 * g + 1, 1)) ? 0 : 26) + indexOf(base64Upper, toUpper(substring(sshKeyBlob, 4 * g + 1, 1)))) * 4096 + (substring(sshKeyBlob, 4 * g + 2, 1) == '=' ? 0 : (contains(upperCase, substring(sshKeyBlob, 4 * g + 2, 1)) ? 0 : 26) + indexOf(base64Upper, toUpper(substring(sshKeyBlob, 4 * g + 2, 1)))) * 64 + (substring(sshKeyBlob, 4 * g + 3, 1) == '=' ? 0 : (contains(upperCase, substring(sshKeyBlob, 4 * g + 3, 1)) ? 0 : 26) + indexOf(base64Upper, toUpper(substring(sshKeyBlob, 4 * g + 3, 1))))]
var byteShifts = [
  65536
  256
  1
]
var sshKeySize = sshKeyDecodable ? 3 * length(sshKeyGroups) - sshKeyPadding : 0
// The first 19 bytes: the type string and, for ed25519, the length of its key.
var sshKeyHeadBytes = [for k in range(0, min(19, sshKeySize)): sshKeyGroups[k / 3] / byteShifts[k % 3] % 256]
var sshKeyTypeBytes = sshKeyType == 'ssh-ed25519' ? [
  115
  115
  104
  45
  101
  100
  50
  53
  53
  49
  57
] : [
  115
  115
  104
  45
  114
  115
  97
]
var sshKeyTypeMatches = sshKeySize >= 4 + length(sshKeyType) ? sshKeyHeadBytes[0] * 16777216 + sshKeyHeadBytes[1] * 65536 + sshKeyHeadBytes[2] * 256 + sshKeyHeadBytes[3] == length(sshKeyType) && take(skip(sshKeyHeadBytes, 4), length(sshKeyType)) == sshKeyTypeBytes : false
var sshEd25519Matches = sshKeySize == 51 ? sshKeyHeadBytes[15] * 16777216 + sshKeyHeadBytes[16] * 65536 + sshKeyHeadBytes[17] * 256 + sshKeyHeadBytes[18] == 32 : false
var sshRsaE = sshKeySize >= 15 ? sshKeyHeadBytes[11] * 16777216 + sshKeyHeadBytes[12] * 65536 + sshKeyHeadBytes[13] * 256 + sshKeyHeadBytes[14] : -1
// n's length and its first two bytes, from byte 15 + e on.
var sshRsaNBytes = [for k in range(0, sshRsaE >= 0 && sshKeySize >= 19 + sshRsaE ? min(6, sshKeySize - 15 - sshRsaE) : 0): sshKeyGroups[(15 + sshRsaE + k) / 3] / byteShifts[(15 + sshRsaE + k) % 3] % 256]
var sshRsaN = length(sshRsaNBytes) >= 4 ? sshRsaNBytes[0] * 16777216 + sshRsaNBytes[1] * 65536 + sshRsaNBytes[2] * 256 + sshRsaNBytes[3] : -1
var sshRsaMatches = sshRsaE >= 1 && sshRsaN >= 1 && sshKeySize == 19 + sshRsaE + sshRsaN
var sshKeyDataValid = sshKeyTypeMatches && (sshKeyType == 'ssh-ed25519' ? sshEd25519Matches : sshRsaMatches)
// n is an mpint: a leading zero byte only keeps it positive. 2048 bits = 256 bytes with the top
// bit set.
var sshRsaFirstByte = length(sshRsaNBytes) >= 5 ? sshRsaNBytes[4] : -1
var sshRsaSecondByte = length(sshRsaNBytes) >= 6 ? sshRsaNBytes[5] : 0
var sshRsaLongEnough = sshRsaFirstByte == 0 ? sshRsaN - 1 > 256 || (sshRsaN - 1 == 256 && sshRsaSecondByte >= 128) : sshRsaN > 256 || (sshRsaN == 256 && sshRsaFirstByte >= 128)

// The characters of the inputs that are names: is each one allowed? (Longer values are refused
// by their rules before any loop would need more than 800 iterations.)
var locationChars = [for i in range(0, min(length(location), 800)): contains('${lowerCase}${digits}', substring(location, i, 1))]
var namePrefixChars = [for i in range(0, min(length(namePrefix), 800)): contains('${lowerCase}${digits}-', substring(namePrefix, i, 1))]
// Each character of the extra apt packages (joined without a separator, so a space is refused
// too): a copy loop takes 800 at most, the second one the rest.
var extraAptPackagesJoined = join(extraAptPackages, '')
var extraAptPackagesChars = [for i in range(0, min(length(extraAptPackagesJoined), 800)): contains('${lowerCase}${digits}+.-', substring(extraAptPackagesJoined, i, 1))]
var extraAptPackagesMoreChars = [for i in range(800, length(extraAptPackagesJoined) > 800 ? min(length(extraAptPackagesJoined), 1600) - 800 : 0): contains('${lowerCase}${digits}+.-', substring(extraAptPackagesJoined, i, 1))]
var adminUsernameChars = [for i in range(0, min(length(adminUsername), 800)): contains('${lowerCase}${digits}_-', substring(adminUsername, i, 1))]
// headMaxPrice: -1, or a decimal number (digits and at most one '.', neither first nor last) read
// with json() only once its form is known.
var headMaxPriceChars = [for i in range(0, min(length(headMaxPrice), 800)): contains('${digits}.', substring(headMaxPrice, i, 1))]
var headMaxPriceForm = length(headMaxPrice) >= 1 && length(headMaxPrice) <= 20 && !contains(headMaxPriceChars, false) && length(split(headMaxPrice, '.')) <= 2 && take(headMaxPrice, 1) != '.' && !endsWith(headMaxPrice, '.')
var headVmSizeChars = [for i in range(0, min(length(headVmSize), 800)): contains('${lowerCase}${digits}_-', toLower(substring(headVmSize, i, 1)))]
var workerVmSizeChars = [for i in range(0, min(length(workerVmSize), 800)): contains('${lowerCase}${digits}_-', toLower(substring(workerVmSize, i, 1)))]

// nodeImageId, a gallery image version's resource ID, in its 13 '/'-separated fields:
// /subscriptions/SUB/resourceGroups/RG/providers/Microsoft.Compute/galleries/G/images/D/versions/X.Y.Z
// (fixed words in any case; the names in the characters Azure allows them, as Terraform's regex).
var nodeImageIdParts = split(nodeImageId, '/')
var nodeImageIdShaped = length(nodeImageIdParts) == 13
var wordCharacters = '${upperCase}${lowerCase}${digits}_'
var nodeImageSubscriptionChars = [for i in range(0, nodeImageIdShaped ? min(length(nodeImageIdParts[2]), 800) : 0): contains('${digits}abcdef-', toLower(substring(nodeImageIdParts[2], i, 1)))]
var nodeImageGroupChars = [for i in range(0, nodeImageIdShaped ? min(length(nodeImageIdParts[4]), 800) : 0): contains('${wordCharacters}-.()', substring(nodeImageIdParts[4], i, 1))]
var nodeImageGalleryChars = [for i in range(0, nodeImageIdShaped ? min(length(nodeImageIdParts[8]), 800) : 0): contains('${wordCharacters}.', substring(nodeImageIdParts[8], i, 1))]
var nodeImageDefinitionChars = [for i in range(0, nodeImageIdShaped ? min(length(nodeImageIdParts[10]), 800) : 0): contains('${wordCharacters}-.', substring(nodeImageIdParts[10], i, 1))]
var nodeImageVersionChars = [for i in range(0, nodeImageIdShaped ? min(length(nodeImageIdParts[12]), 800) : 0): contains('${digits}.', substring(nodeImageIdParts[12], i, 1))]
// resultsStorageAccountId: /subscriptions/SUB/resourceGroups/RG/providers/Microsoft.Storage/storageAccounts/NAME.
var resultsIdParts = split(resultsStorageAccountId, '/')
var resultsIdShaped = length(resultsIdParts) == 9
var resultsEnabled = !empty(resultsStorageAccountId)
var resultsAccountName = resultsIdShaped ? resultsIdParts[8] : ''
var resultsSubscriptionChars = [for i in range(0, resultsIdShaped ? min(length(resultsIdParts[2]), 800) : 0): contains('${digits}abcdef-', toLower(substring(resultsIdParts[2], i, 1)))]
var resultsGroupChars = [for i in range(0, resultsIdShaped ? min(length(resultsIdParts[4]), 800) : 0): contains('${wordCharacters}-.()', substring(resultsIdParts[4], i, 1))]
var resultsAccountChars = [for i in range(0, resultsIdShaped ? min(length(resultsIdParts[8]), 800) : 0): contains('${lowerCase}${digits}', substring(resultsIdParts[8], i, 1))]
var resultsIdValid = resultsIdShaped ? empty(resultsIdParts[0]) && resultsIdParts[1] == 'subscriptions' && length(resultsIdParts[2]) == 36 && !contains(resultsSubscriptionChars, false) && toLower(resultsIdParts[3]) == 'resourcegroups' && length(resultsIdParts[4]) >= 1 && length(resultsIdParts[4]) <= 90 && !contains(resultsGroupChars, false) && toLower(resultsIdParts[5]) == 'providers' && toLower(resultsIdParts[6]) == 'microsoft.storage' && toLower(resultsIdParts[7]) == 'storageaccounts' && length(resultsIdParts[8]) >= 3 && length(resultsIdParts[8]) <= 24 && !contains(resultsAccountChars, false) : false
// The account's subscription and resource group, where modules/results-role.bicep is deployed (the
// current ones without an account: a module's scope is evaluated even when it is not deployed).
var resultsSubscriptionId = resultsIdShaped ? resultsIdParts[2] : subscription().subscriptionId
var resultsResourceGroup = resultsIdShaped ? resultsIdParts[4] : resourceGroup().name
var resultsUrl = resultsEnabled ? 'https://${resultsAccountName}.blob.${environment().suffixes.storage}/results' : ''
var nodeImageIdValid = nodeImageIdShaped ? empty(nodeImageIdParts[0]) && toLower(nodeImageIdParts[1]) == 'subscriptions' && length(nodeImageIdParts[2]) == 36 && !contains(nodeImageSubscriptionChars, false) && toLower(nodeImageIdParts[3]) == 'resourcegroups' && length(nodeImageIdParts[4]) >= 1 && length(nodeImageIdParts[4]) <= 90 && !contains(nodeImageGroupChars, false) && toLower(nodeImageIdParts[5]) == 'providers' && toLower(nodeImageIdParts[6]) == 'microsoft.compute' && toLower(nodeImageIdParts[7]) == 'galleries' && length(nodeImageIdParts[8]) >= 1 && length(nodeImageIdParts[8]) <= 80 && !contains(nodeImageGalleryChars, false) && toLower(nodeImageIdParts[9]) == 'images' && length(nodeImageIdParts[10]) >= 1 && length(nodeImageIdParts[10]) <= 80 && !contains(nodeImageDefinitionChars, false) && toLower(nodeImageIdParts[11]) == 'versions' && length(split(nodeImageIdParts[12], '.')) == 3 && !contains(split(nodeImageIdParts[12], '.'), '') && !contains(nodeImageVersionChars, false) : false

// Names the VM images already use, or that the cluster uses
// (infra/terraform/modules/cluster/variables.tf says where each comes from); "ray" runs Ray and
// every job.
var azureReservedUsernames = [
  '1'
  '123'
  'a'
  'actuser'
  'adm'
  'admin'
  'admin1'
  'admin2'
  'administrator'
  'aspnet'
  'backup'
  'console'
  'david'
  'guest'
  'john'
  'owner'
  'root'
  'server'
  'sql'
  'support'
  'support_388945a0'
  'sys'
  'test'
  'test1'
  'test2'
  'test3'
  'user'
  'user1'
  'user2'
  'user3'
  'user4'
  'user5'
]
var systemUsernames = [
  'ray'
  'root'
  'daemon'
  'bin'
  'sys'
  'sync'
  'games'
  'man'
  'lp'
  'mail'
  'news'
  'uucp'
  'proxy'
  'www-data'
  'backup'
  'list'
  'irc'
  'gnats'
  'nobody'
  'adm'
  'tty'
  'disk'
  'kmem'
  'dialout'
  'fax'
  'voice'
  'cdrom'
  'floppy'
  'tape'
  'sudo'
  'audio'
  'dip'
  'operator'
  'src'
  'shadow'
  'utmp'
  'video'
  'sasl'
  'plugdev'
  'staff'
  'users'
  'nogroup'
  'messagebus'
  'sshd'
  'ssh'
  'syslog'
  'uuidd'
  'tcpdump'
  'tss'
  'landscape'
  'pollinate'
  'fwupd-refresh'
  'usbmux'
  'lxd'
  'dnsmasq'
  'polkitd'
  'dhcpcd'
  'chrony'
  'snap_daemon'
  'netdev'
  'crontab'
  'input'
  'kvm'
  'render'
  'sgx'
  'admin'
  'ubuntu'
  'debian'
]

// Characters a value handed to the nodes may not hold (RE2's \s, a quote, a backslash).
// The worker pools: workerPools, each pool's settings with what it leaves out taken from the
// worker* parameters; none given = one pool "workers" made of the worker* parameters alone (the
// single scale set of clusters made before pools, same names). The first one is the head's. A
// pool's scale set is namePrefix-name, its autoscale setting namePrefix-name-autoscale, its VMs'
// host names start with namePrefix-name- (the pool "workers" keeps namePrefix-w). A pool's Ray
// labels become key=value pairs by taking its JSON apart (keys and values hold none of {}":,).
var defaultWorkerPools = [
  {
    name: 'workers'
  }
]
var workerPoolInputs = empty(workerPools) ? defaultWorkerPools : workerPools
var pools = [for p in workerPoolInputs: {
  name: contains(p, 'name') ? string(p.name) : ''
  scaleSetName: '${namePrefix}-${contains(p, 'name') ? string(p.name) : ''}'
  autoscaleName: '${namePrefix}-${contains(p, 'name') ? string(p.name) : ''}-autoscale'
  computerNamePrefix: (contains(p, 'name') ? string(p.name) : '') == 'workers' ? '${namePrefix}-w' : '${namePrefix}-${contains(p, 'name') ? string(p.name) : ''}-'
  vmSize: contains(p, 'vmSize') ? p.vmSize : workerVmSize
  minCount: contains(p, 'minCount') ? p.minCount : workerMinCount
  defaultCount: contains(p, 'defaultCount') ? p.defaultCount : workerDefaultCount
  maxCount: contains(p, 'maxCount') ? p.maxCount : workerMaxCount
  spotEnabled: contains(p, 'spotEnabled') ? p.spotEnabled : workerSpotEnabled
  evictionPolicy: contains(p, 'evictionPolicy') ? p.evictionPolicy : 'Delete'
  maxPrice: contains(p, 'maxPrice') ? p.maxPrice : -1
  zones: contains(p, 'zones') ? p.zones : []
  zoneBalance: contains(p, 'zoneBalance') ? p.zoneBalance : false
  // Flexible orchestration (every pool's, the pool "workers" made when none is given too, unless
  // the pool pins 'Uniform'), and what only it has (null: none).
  orchestrationMode: contains(p, 'orchestrationMode') ? p.orchestrationMode : 'Flexible'
  priorityMix: contains(p, 'priorityMix') ? {
    baseRegularPriorityCount: contains(p.priorityMix, 'baseRegularCount') ? p.priorityMix.baseRegularCount : 0
    regularPriorityPercentageAboveBase: contains(p.priorityMix, 'regularPercentageAboveBase') ? p.priorityMix.regularPercentageAboveBase : 0
  } : null
  instanceMix: contains(p, 'instanceMix') ? {
    vmSizes: contains(p.instanceMix, 'vmSizes') ? p.instanceMix.vmSizes : []
    allocationStrategy: contains(p.instanceMix, 'allocationStrategy') ? p.instanceMix.allocationStrategy : 'LowestPrice'
  } : null
  rayResources: contains(p, 'rayResources') ? string(p.rayResources) : '{}'
  rayLabels: contains(p, 'rayLabels') ? replace(replace(replace(replace(string(p.rayLabels), '{', ''), '}', ''), '"', ''), ':', '=') : ''
  resources: contains(p, 'rayResources') ? p.rayResources : {}
}]
// Every pool, first pool first, as Ray's autoscaler plans with them (AUTOSCALER_POOLS; the
// keys in Terraform's jsonencode order).
var autoscalerPools = [for p in pools: {
  labels: p.rayLabels
  max: p.maxCount
  min: p.minCount
  name: p.name
  resources: p.resources
  scale_set: p.scaleSetName
  vm_size: p.vmSize
}]
var poolScaleSetNames = [for p in pools: p.scaleSetName]
var poolAutoscaleNames = [for p in pools: p.autoscaleName]
var poolNames = [for p in pools: p.name]
var poolCounts = [for p in pools: '${p.name}: ${p.minCount} <= ${p.defaultCount} <= ${p.maxCount}']
// The characters of a pool's Ray resources' or labels' JSON: names, numbers, and the JSON itself.
var poolJsonCharacters = '${lowerCase}${upperCase}${digits}_.-{}":,'
var poolVmSizes = [for p in pools: string(p.vmSize)]
// Instance Mix's sizes of every pool, as text.
var poolMixSizes = [for p in pools: p.instanceMix == null ? '' : join(p.instanceMix.vmSizes, '')]
var poolMixSizesText = toLower(join(poolMixSizes, ''))
var poolMixSizeChars = [for i in range(0, min(length(poolMixSizesText), 800)): contains('${lowerCase}${digits}_-', substring(poolMixSizesText, i, 1))]
var poolResources = [for p in pools: p.rayResources]
var poolLabelsJson = [for p in workerPoolInputs: contains(p, 'rayLabels') ? string(p.rayLabels) : '{}']
// Each character of the pools' names, sizes, resources and labels (each list joined): allowed?
var poolNamesText = join(poolNames, '')
var poolNameChars = [for i in range(0, min(length(poolNamesText), 800)): contains('${lowerCase}${digits}-', substring(poolNamesText, i, 1))]
var poolVmSizesText = toLower(join(poolVmSizes, ''))
var poolVmSizeChars = [for i in range(0, min(length(poolVmSizesText), 800)): contains('${lowerCase}${digits}_-', substring(poolVmSizesText, i, 1))]
var poolResourcesText = join(poolResources, '')
var poolResourcesChars = [for i in range(0, min(length(poolResourcesText), 800)): contains(poolJsonCharacters, substring(poolResourcesText, i, 1))]
var poolLabelsText = join(poolLabelsJson, '')
var poolLabelsChars = [for i in range(0, min(length(poolLabelsText), 800)): contains(poolJsonCharacters, substring(poolLabelsText, i, 1))]
// Every pool's max count, added up (at most 4 pools: a longer list is refused by its own rule).
var poolMaxCountTotal = (length(pools) > 0 ? pools[0].maxCount : 0) + (length(pools) > 1 ? pools[1].maxCount : 0) + (length(pools) > 2 ? pools[2].maxCount : 0) + (length(pools) > 3 ? pools[3].maxCount : 0)
// scalingMode cpu: every pool's CPU autoscale setting.
var autoscalePools = scalingMode == 'cpu' ? pools : []

var unsafeCharacters = [
  ' '
  '\t'
  '\n'
  '\u{C}'
  '\r'
  '\''
  '\u{5C}' // a backslash (\\ at the end of a string trips pycep-parser, the parser checkov uses)
]

var check = {
  location: length(location) >= 2 && length(location) <= 800 && contains(lowerCase, take(location, 1)) && !contains(locationChars, false) ? 'ok' : 'location must be an Azure region name in lower case without spaces, e.g. "westeurope".'
  allowedSshCidrsNotInternet: empty(filter(allowedSshCidrs, c => contains([
    '*'
    'internet'
    'any'
    '0.0.0.0/0'
  ], toLower(trim(c))) || endsWith(trim(c), '/0'))) ? 'ok' : 'allowedSshCidrs must not open SSH to the whole Internet (0.0.0.0/0, *, Internet, Any or any /0): list your own addresses, e.g. ["203.0.113.7/32"].'
  allowedSshCidrsCanonical: empty(filter(sshCidrs, e => !e.canonical)) ? 'ok' : 'allowedSshCidrs: every entry must be an IPv4 CIDR in canonical form, four decimal octets 0-255 without leading zeros and a prefix length 0-32, e.g. "203.0.113.7/32" or "198.51.100.0/24".'
  allowedSshCidrsNetworkAddress: empty(filter(sshCidrs, e => e.address % powersOfTwo[32 - e.prefix] != 0)) ? 'ok' : 'allowedSshCidrs: every entry must be a network address whose host bits are zero, e.g. "198.51.100.0/24" (not "198.51.100.7/24"); one address is "198.51.100.7/32".'
  allowedSshCidrsPrefixLength: empty(filter(sshCidrs, e => e.prefix < 8)) ? 'ok' : 'allowedSshCidrs: every entry must be /8 or narrower, e.g. "203.0.113.7/32" or "198.51.100.0/24".'
  allowedSshCidrsTotal: sshAddressCount <= 16777216 ? 'ok' : 'allowedSshCidrs must cover at most 16,777,216 addresses (one /8) in all, every entry counted, e.g. ["203.0.113.7/32", "198.51.100.0/24"].'
  adminSshPublicKeyLine: sshKeyIsOneLine ? 'ok' : 'adminSshPublicKey must be one OpenSSH public key line, ed25519 or RSA: "ssh-ed25519 AAAA... you@host" (the contents of ~/.ssh/id_ed25519.pub, not the file name).'
  adminSshPublicKeyData: !sshKeyIsOneLine || sshKeyDataValid ? 'ok' : 'adminSshPublicKey: the key data is not a valid ssh-ed25519 or ssh-rsa public key (it must decode to a key of the type its first word names; an ed25519 key is 51 bytes): paste the whole line of ~/.ssh/id_ed25519.pub, e.g. "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA... you@host".'
  adminSshPublicKeyRsaBits: !(sshKeyIsOneLine && sshKeyType == 'ssh-rsa') || sshRsaFirstByte < 0 || sshRsaLongEnough ? 'ok' : 'adminSshPublicKey: RSA keys must have 2048 bits or more (Azure refuses shorter ones): make an ed25519 key (ssh-keygen -t ed25519) or a longer RSA key (ssh-keygen -t rsa -b 4096), e.g. "ssh-ed25519 AAAA... you@host".'
  namePrefix: length(namePrefix) >= 2 && length(namePrefix) <= 16 && contains(lowerCase, take(namePrefix, 1)) && !contains('${namePrefix}.', '-.') && !contains(namePrefixChars, false) ? 'ok' : 'namePrefix must be 2-16 lower-case letters, digits or \'-\', starting with a letter and not ending in \'-\', e.g. "ray".'
  vnetAddressSpace: vnet.canonical && vnet.address % powersOfTwo[32 - vnet.prefix] == 0 && vnet.prefix >= 8 && vnet.prefix <= 28 ? 'ok' : 'vnetAddressSpace must be an IPv4 network address between /8 and /28 in canonical form (no leading zeros) whose host bits are zero, e.g. "10.42.0.0/16".'
  vnetAddressSpacePrivate: !vnet.canonical || !empty(filter(privateRanges, r => vnet.prefix >= r.prefix && vnet.address / powersOfTwo[32 - r.prefix] == r.address / powersOfTwo[32 - r.prefix])) ? 'ok' : 'vnetAddressSpace must lie in a private range, 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 or 100.64.0.0/10 (public ranges, loopback 127.0.0.0/8, link-local 169.254.0.0/16, multicast 224.0.0.0/4 and Azure\'s 168.63.129.16 are refused), e.g. "10.42.0.0/16".'
  subnetAddressPrefix: subnet.canonical && subnet.address % powersOfTwo[32 - subnet.prefix] == 0 && subnet.prefix >= 8 && subnet.prefix <= 28 ? 'ok' : 'subnetAddressPrefix must be an IPv4 network address between /8 and /28 in canonical form (no leading zeros) whose host bits are zero, e.g. "10.42.1.0/24".'
  subnetAddressPrefixPrivate: !subnet.canonical || !empty(filter(privateRanges, r => subnet.prefix >= r.prefix && subnet.address / powersOfTwo[32 - r.prefix] == r.address / powersOfTwo[32 - r.prefix])) ? 'ok' : 'subnetAddressPrefix must lie in a private range, 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 or 100.64.0.0/10 (public ranges, loopback, link-local, multicast and Azure\'s 168.63.129.16 are refused), e.g. "10.42.1.0/24".'
  // Same network address once the subnet is cut to the VNet's prefix length, and not larger.
  subnetInsideVnet: !(vnet.canonical && subnet.canonical) || subnet.prefix >= vnet.prefix && subnet.address / powersOfTwo[32 - vnet.prefix] == vnet.address / powersOfTwo[32 - vnet.prefix] ? 'ok' : 'subnetAddressPrefix (${subnetAddressPrefix}) must lie inside vnetAddressSpace (${vnetAddressSpace}), e.g. "10.42.1.0/24" in "10.42.0.0/16".'
  // Azure keeps 5 addresses of every subnet; the head and the Key Vault's private endpoint take two
// more, the results storage's private endpoint (resultsStorageAccountId) one more.
  subnetRoom: !subnet.canonical || powersOfTwo[32 - subnet.prefix] - (empty(resultsStorageAccountId) ? 7 : 8) >= poolMaxCountTotal ? 'ok' : 'subnetAddressPrefix (${subnetAddressPrefix}) has room for ${powersOfTwo[32 - subnet.prefix] - (empty(resultsStorageAccountId) ? 7 : 8)} workers, fewer than the worker pools\' max counts together (${poolMaxCountTotal}): use a larger subnet.'
  adminUsername: length(adminUsername) >= 1 && length(adminUsername) <= 32 && contains('${lowerCase}_', take(adminUsername, 1)) && !contains(adminUsernameChars, false) ? 'ok' : 'adminUsername must be 1-32 lower-case letters, digits, \'_\' or \'-\', starting with a letter or \'_\', e.g. "azureuser".'
  adminUsernameNotReserved: !contains(azureReservedUsernames, adminUsername) ? 'ok' : 'adminUsername must not be a name Azure reserves (admin, administrator, root, user, test, guest, ...): choose e.g. "azureuser".'
  adminUsernameNotSystem: !(take(adminUsername, 8) == 'systemd-' || take(adminUsername, 1) == '_' || contains(systemUsernames, adminUsername)) ? 'ok' : 'adminUsername must not be ray (the Ray service user: jobs run as ray, and the admin may sudo) nor an account or group the images already have (root, daemon, bin, sys, nobody, www-data, sudo, sshd, syslog, messagebus, ubuntu, debian, systemd-*, _*, ...): choose e.g. "azureuser".'
  headVmSize: length(headVmSize) > 9 && length(headVmSize) <= 800 && take(toLower(headVmSize), 9) == 'standard_' && !contains(headVmSizeChars, false) ? 'ok' : 'headVmSize must be an Azure VM size such as "Standard_D4s_v5".'
  headMaxPrice: headMaxPrice == '-1' || (headMaxPriceForm ? json(headMaxPrice) > 0 && json(headMaxPrice) <= 1000 : false) ? 'ok' : 'headMaxPrice must be -1 (up to the regular price) or a price in US dollars per hour above 0 (at most 1000).'
  headMaxPriceSpotOnly: headMaxPrice == '-1' || headPriority == 'Spot' ? 'ok' : 'headMaxPrice applies to a Spot head only: set headPriority = "Spot", or leave it out.'
  nodeImageId: empty(nodeImageId) || nodeImageIdValid ? 'ok' : 'nodeImageId must be a gallery image version\'s resource ID, /subscriptions/SUB/resourceGroups/RG/providers/Microsoft.Compute/galleries/GALLERY/images/DEFINITION/versions/MAJOR.MINOR.PATCH (what `python -m driver image build` prints), or left out.'
  workerVmSize: length(workerVmSize) > 9 && length(workerVmSize) <= 48 && take(toLower(workerVmSize), 9) == 'standard_' && !contains(workerVmSizeChars, false) ? 'ok' : 'workerVmSize must be an Azure VM size such as "Standard_D4s_v5".'
  // 0, or 10 to 10080: under 10 minutes a cluster would stop between a job and the next submit,
  // or while a head that just started is still booting.
  autostopIdleMinutes: autostopIdleMinutes == 0 || autostopIdleMinutes >= 10 ? 'ok' : 'autostopIdleMinutes must be 0 (autostop off) or a whole number of minutes from 10 to 10080 (a week), e.g. 60.'
  workerCounts: workerMinCount <= workerDefaultCount && workerDefaultCount <= workerMaxCount ? 'ok' : 'worker counts must satisfy workerMinCount <= workerDefaultCount <= workerMaxCount (got ${workerMinCount} <= ${workerDefaultCount} <= ${workerMaxCount}).'
  workerPoolCounts: empty(filter(pools, p => !(p.minCount <= p.defaultCount && p.defaultCount <= p.maxCount))) ? 'ok' : 'workerPools: every pool\'s counts must satisfy minCount <= defaultCount <= maxCount (got ${join(poolCounts, ', ')}; a count a pool leaves out is the worker* parameter\'s).'
  workerPoolNames: length(workerPools) <= 4 && empty(filter(poolNames, n => length(n) < 1 || length(n) > 10 || !contains(lowerCase, take(n, 1)) || contains('${n}.', '-.') || length(filter(poolNames, m => m == n)) > 1)) && !contains(poolNameChars, false) ? 'ok' : 'workerPools: at most 4 pools with distinct names, each 1-10 lower-case letters, digits or \'-\', starting with a letter and not ending in \'-\', e.g. cpu or gpu.'
  workerPoolVmSizes: empty(filter(poolVmSizes, v => length(v) <= 9 || length(v) > 48 || take(toLower(v), 9) != 'standard_')) && !contains(poolVmSizeChars, false) ? 'ok' : 'workerPools: every vmSize must be an Azure VM size such as "Standard_D4s_v5".'
  workerPoolCountRanges: empty(filter(workerPools, p => (contains(p, 'minCount') ? p.minCount < 0 || p.minCount > 100 : false) || (contains(p, 'defaultCount') ? p.defaultCount < 0 || p.defaultCount > 100 : false) || (contains(p, 'maxCount') ? p.maxCount < 1 || p.maxCount > 100 : false))) ? 'ok' : 'workerPools: minCount and defaultCount must be whole numbers from 0 to 100, maxCount from 1 to 100.'
  workerPoolSpot: empty(filter(workerPools, p => (contains(p, 'evictionPolicy') ? !contains([
    'Delete'
    'Deallocate'
  ], p.evictionPolicy) : false) || (contains(p, 'maxPrice') ? !(p.maxPrice == -1 || p.maxPrice > 0 && p.maxPrice <= 1000) : false))) ? 'ok' : 'workerPools: evictionPolicy must be "Delete" or "Deallocate", maxPrice -1 (the on-demand price) or a price in US dollars per hour above 0 (at most 1000).'
  workerPoolSpotOnly: empty(filter(pools, p => !p.spotEnabled && (p.evictionPolicy != 'Delete' || p.maxPrice != -1))) && empty(filter(workerPools, p => !(contains(p, 'spotEnabled') ? p.spotEnabled : workerSpotEnabled) && (contains(p, 'evictionPolicy') || contains(p, 'maxPrice')))) ? 'ok' : 'workerPools: evictionPolicy and maxPrice apply to Spot pools only: set spotEnabled = true in the pool (or workerSpotEnabled = true), or leave them out.'
  workerPoolZones: empty(filter(pools, p => length(p.zones) > 3 || !empty(filter(p.zones, z => length(filter(p.zones, y => y == z)) > 1)) || !empty(filter(p.zones, z => !contains([
    '1'
    '2'
    '3'
  ], z))))) ? 'ok' : 'workerPools: zones must list distinct availability zones "1", "2" or "3" (at most 3), e.g. ["1", "2"], or be left out (regional).'
  workerPoolOrchestrationMode: empty(filter(pools, p => !contains([
    'Uniform'
    'Flexible'
  ], p.orchestrationMode))) ? 'ok' : 'workerPools: orchestrationMode must be "Uniform" or "Flexible".'
  workerPoolMixFlexible: empty(filter(pools, p => p.orchestrationMode != 'Flexible' && (p.priorityMix != null || p.instanceMix != null))) ? 'ok' : 'workerPools: priorityMix and instanceMix need orchestrationMode = "Flexible" (Azure has Spot Priority Mix and Instance Mix on Flexible scale sets only).'
  workerPoolPriorityMixSpot: empty(filter(pools, p => p.priorityMix != null && !p.spotEnabled)) ? 'ok' : 'workerPools: priorityMix mixes regular VMs into a Spot pool: set spotEnabled = true in the pool (or workerSpotEnabled = true), or leave it out.'
  workerPoolPriorityMixRange: empty(filter(pools, p => p.priorityMix == null ? false : p.priorityMix.baseRegularPriorityCount < 0 || p.priorityMix.baseRegularPriorityCount > 100 || p.priorityMix.regularPriorityPercentageAboveBase < 0 || p.priorityMix.regularPriorityPercentageAboveBase > 100)) ? 'ok' : 'workerPools: priorityMix needs baseRegularCount a whole number from 0 to 100 and regularPercentageAboveBase a whole number from 0 to 100, e.g. { baseRegularCount = 1, regularPercentageAboveBase = 25 }.'
  workerPoolInstanceMix: empty(filter(pools, p => p.instanceMix == null ? false : (length(p.instanceMix.vmSizes) < 2 || length(p.instanceMix.vmSizes) > 5 || !empty(filter(p.instanceMix.vmSizes, v => length(filter(p.instanceMix.vmSizes, y => toLower(string(y)) == toLower(string(v)))) > 1)) || !empty(filter(p.instanceMix.vmSizes, v => length(string(v)) <= 9 || length(string(v)) > 48 || take(toLower(string(v)), 9) != 'standard_')) || !contains([
    'LowestPrice'
    'CapacityOptimized'
  ], p.instanceMix.allocationStrategy)))) && !contains(poolMixSizeChars, false) ? 'ok' : 'workerPools: instanceMix needs 2-5 distinct Azure VM sizes in vmSizes, e.g. ["Standard_D4s_v5", "Standard_D4as_v5"], and allocationStrategy "LowestPrice" or "CapacityOptimized".'
  workerPoolInstanceMixSize: empty(filter(pools, p => p.instanceMix == null ? false : empty(filter(p.instanceMix.vmSizes, v => toLower(string(v)) == toLower(string(p.vmSize)))))) ? 'ok' : 'workerPools: instanceMix\'s vmSizes must include the pool\'s vmSize (or workerVmSize), the size Ray\'s autoscaler plans the pool\'s CPUs and GPUs with.'
  workerPoolZoneBalance: empty(filter(pools, p => p.zoneBalance && length(p.zones) < 2)) ? 'ok' : 'workerPools: zoneBalance needs two zones or more in the pool\'s zones (Azure refuses it otherwise).'
  // Ray refuses CPU, GPU and memory as custom resources (ray start --num-cpus/--num-gpus set
  // them: each node detects its own). Read from the JSON: an object of names to numbers.
  workerPoolRayResources: empty(filter(poolResources, r => length(r) > 64 || take(r, 1) != '{' || length(split(r, '{')) != 2 || contains(r, ':"') || length(split(r, '"')) - 1 != 2 * (length(split(r, ':')) - 1) || length(split(r, ',')) != (contains(r, ':') ? length(split(r, ':')) - 1 : 1) || contains(r, ':-') || contains(r, '"CPU":') || contains(r, '"GPU":') || contains(r, '"memory":') || contains(r, '"object_store_memory":'))) && !contains(poolResourcesChars, false) ? 'ok' : 'workerPools: rayResources must map Ray resource names (letters, digits, \'_\', \'.\', \'-\'; not CPU, GPU, memory or object_store_memory: each node detects those) to numbers >= 0, 64 characters of JSON at most.'
  workerPoolRayLabels: empty(filter(poolLabelsJson, l => take(l, 1) != '{' || length(split(l, '{')) != 2 || contains(l, '"pool":') || contains(l, '":""') || length(split(l, '"')) - 1 != 4 * (length(split(l, ':')) - 1) || length(split(l, ',')) != (contains(l, ':') ? length(split(l, ':')) - 1 : 1))) && empty(filter(pools, p => length(p.rayLabels) > 64)) && !contains(poolLabelsChars, false) ? 'ok' : 'workerPools: rayLabels must map label names to values, each 1-63 letters, digits, \'_\', \'.\' or \'-\' starting and ending with a letter or digit, not the name pool (every node has pool = its pool\'s name), 64 characters in all at most.'
  cpuThresholds: scaleInCpuPercent < scaleOutCpuPercent ? 'ok' : 'scaleInCpuPercent (${scaleInCpuPercent}) must be below scaleOutCpuPercent (${scaleOutCpuPercent}), or autoscale flaps.'
  extraPipPackages: empty(filter(extraPipPackages, p => empty(p) || !empty(filter(unsafeCharacters, u => contains(p, u))))) ? 'ok' : 'extraPipPackages: each entry must be one requirement without spaces, single quotes or backslashes, e.g. "minigrid==3.0.0".'
  // The node hands the list to pip as requirements: an option (-e, -r FILE, --index-url=...)
  // would change how pip installs, or where from.
  extraPipPackagesNoOptions: empty(filter(extraPipPackages, p => take(p, 1) == '-')) ? 'ok' : 'extraPipPackages: entries are requirements, not pip options: none may start with \'-\' ("--index-url=...", "-e", "-r ..."); set pipIndexUrl for another index, e.g. ["minigrid==3.0.0"].'
  extraPipPackagesLength: length(join(extraPipPackages, ' ')) <= 1024 ? 'ok' : 'extraPipPackages must come to 1,024 characters or fewer (joined by spaces).'
  // The node hands the list to apt-get: a name, never an option.
  extraAptPackages: empty(filter(extraAptPackages, p => length(p) < 2 || !contains('${lowerCase}${digits}', take(p, 1)))) && !contains(extraAptPackagesChars, false) && !contains(extraAptPackagesMoreChars, false) ? 'ok' : 'extraAptPackages: each entry must be one Debian package name (lower-case letters, digits, \'+\', \'-\' and \'.\', starting with a letter or digit, 2 characters or more), e.g. "libosmesa6".'
  extraAptPackagesLength: length(join(extraAptPackages, ' ')) <= 1024 ? 'ok' : 'extraAptPackages must come to 1,024 characters or fewer (joined by spaces).'
  pipIndexUrl: length(pipIndexUrl) <= 512 && (take(pipIndexUrl, 7) == 'http://' && length(pipIndexUrl) > 7 || take(pipIndexUrl, 8) == 'https://' && length(pipIndexUrl) > 8) && empty(filter(unsafeCharacters, u => contains(pipIndexUrl, u))) ? 'ok' : 'pipIndexUrl must be one http(s) URL of at most 512 characters without spaces, single quotes or backslashes, e.g. "https://pypi.org/simple".'
  torchIndexUrl: length(torchIndexUrl) <= 512 && (take(torchIndexUrl, 7) == 'http://' && length(torchIndexUrl) > 7 || take(torchIndexUrl, 8) == 'https://' && length(torchIndexUrl) > 8) && empty(filter(unsafeCharacters, u => contains(torchIndexUrl, u))) ? 'ok' : 'torchIndexUrl must be one http(s) URL of at most 512 characters without spaces, single quotes or backslashes, e.g. "https://download.pytorch.org/whl/cpu".'
  aptSource: empty(aptSource) || length(aptSource) <= 512 && (take(aptSource, 4) == 'deb ' && length(aptSource) > 4 || take(aptSource, 8) == 'deb-src ' && length(aptSource) > 8) && empty(filter([
    '\r'
    '\n'
    '\''
    '\u{5C}'
  ], u => contains(aptSource, u))) ? 'ok' : 'aptSource must be empty or one line of at most 512 characters starting with "deb ", without single quotes or backslashes, e.g. "deb [trusted=yes] http://10.0.0.5/debian ./".'
  resultsStorageAccountId: empty(resultsStorageAccountId) || resultsIdValid ? 'ok' : 'resultsStorageAccountId must be empty or a storage account\'s resource id, /subscriptions/GUID/resourceGroups/GROUP/providers/Microsoft.Storage/storageAccounts/NAME (3-24 lower-case letters and digits): what the results storage stack outputs.'
}

// -----------------------------------------------------------------------------------------------
// What the nodes boot from: the committed, rendered cloud-init documents (python -m nodekit render
// writes them) with their one placeholder filled with the deploy-time values of
// cloud-init/placeholders.yaml, exactly as infra/terraform/modules/cluster/locals.tf fills them.
// -----------------------------------------------------------------------------------------------

// os image -> marketplace image. Every one is a generation 2 image.
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

// A baked node image (nodeImageId, infra/bicep/image/) or the osImage's marketplace image.
var nodeImageReference = {
  id: nodeImageId
}
var imageReference = empty(nodeImageId) ? osImages[osImage] : nodeImageReference

// Key Vault names are global: 3-24 letters, digits and '-'. Derived from the resource group and
// the prefix, so a redeployment keeps it and another cluster differs.
var keyVaultName = '${namePrefix}-kv-${take(uniqueString(resourceGroup().id, namePrefix), 23 - length(namePrefix) - 4)}'
var tokenSecretName = 'ray-cluster-token'
// Every pool's CPU autoscale setting (scalingMode cpu; '' without) and scale set, named before
// they exist: the head's autostop turns them off and empties them.
var workerAutoscaleNames = scalingMode == 'cpu' ? join(poolAutoscaleNames, ' ') : ''
var headCloudInit = loadTextContent('../../cloud-init/rendered/head.yaml')
var workerCloudInit = loadTextContent('../../cloud-init/rendered/worker.yaml')

// The Application Health extension's settings (rich health states): it probes each worker's
// loopback health endpoint (python/nodekit/node/health.py; port and path from
// python/driver/layout.py, as Terraform's locals.worker_health_probe: a test holds all three
// together). gracePeriod: how long a worker may answer neither Healthy nor Unhealthy (the
// bootstrap still runs) before it counts as Unknown: 2 hours, more than the bootstrap's own limits.
var workerHealthProbe = {
  protocol: 'http'
  port: 8790
  requestPath: '/health'
  intervalInSeconds: 5
  numberOfProbes: 3
  gracePeriod: 7200
}

// -----------------------------------------------------------------------------------------------
// Resources
// -----------------------------------------------------------------------------------------------

module checks 'modules/checks.bicep' = {
  name: '${namePrefix}-input-checks'
  params: {
    // Every rule of `check`, in its order (tests/unit/test_bicep_validations.py holds the
    // two lists together).
    results: [
      check.location
      check.allowedSshCidrsNotInternet
      check.allowedSshCidrsCanonical
      check.allowedSshCidrsNetworkAddress
      check.allowedSshCidrsPrefixLength
      check.allowedSshCidrsTotal
      check.adminSshPublicKeyLine
      check.adminSshPublicKeyData
      check.adminSshPublicKeyRsaBits
      check.namePrefix
      check.vnetAddressSpace
      check.vnetAddressSpacePrivate
      check.subnetAddressPrefix
      check.subnetAddressPrefixPrivate
      check.subnetInsideVnet
      check.subnetRoom
      check.adminUsername
      check.adminUsernameNotReserved
      check.adminUsernameNotSystem
      check.headVmSize
      check.headMaxPrice
      check.headMaxPriceSpotOnly
      check.nodeImageId
      check.workerVmSize
      check.autostopIdleMinutes
      check.workerCounts
      check.workerPoolCounts
      check.workerPoolNames
      check.workerPoolVmSizes
      check.workerPoolCountRanges
      check.workerPoolSpot
      check.workerPoolSpotOnly
      check.workerPoolZones
      check.workerPoolOrchestrationMode
      check.workerPoolMixFlexible
      check.workerPoolPriorityMixSpot
      check.workerPoolPriorityMixRange
      check.workerPoolInstanceMix
      check.workerPoolInstanceMixSize
      check.workerPoolZoneBalance
      check.workerPoolRayResources
      check.workerPoolRayLabels
      check.cpuThresholds
      check.extraPipPackages
      check.extraPipPackagesNoOptions
      check.extraPipPackagesLength
      check.extraAptPackages
      check.extraAptPackagesLength
      check.pipIndexUrl
      check.torchIndexUrl
      check.aptSource
      check.resultsStorageAccountId
    ]
  }
}

module network 'modules/network.bicep' = {
  name: '${namePrefix}-network'
  params: {
    location: location
    namePrefix: namePrefix
    tags: tags
    vnetAddressSpace: vnetAddressSpace
    subnetAddressPrefix: subnetAddressPrefix
    allowedSshCidrs: allowedSshCidrs
    headPrivateIp: headPrivateIp
    tcpIdleTimeoutMinutes: tcpIdleTimeoutMinutes
  }
  dependsOn: [
    checks
  ]
}

module identity 'modules/identity.bicep' = {
  name: '${namePrefix}-identity'
  params: {
    location: location
    namePrefix: namePrefix
    tags: tags
    autoscalerEnabled: scalingMode == 'ray' || autostopIdleMinutes > 0
    autostopEnabled: autostopIdleMinutes > 0
    interfaceReaderEnabled: scalingMode == 'ray' && !empty(filter(pools, p => p.orchestrationMode == 'Flexible'))
  }
  dependsOn: [
    checks
  ]
}

module keyVault 'modules/keyvault.bicep' = {
  name: '${namePrefix}-keyvault'
  params: {
    location: location
    namePrefix: namePrefix
    tags: tags
    keyVaultName: keyVaultName
    vnetId: network.outputs.vnetId
    subnetId: network.outputs.subnetId
    privateIp: keyVaultPrivateIp
    nodesPrincipalId: identity.outputs.principalId
    secretName: tokenSecretName
    clusterToken: clusterToken
    expiresAt: dateTimeToEpoch(dateTimeAdd(deploymentTime, 'P${clusterTokenExpirationDays}D'))
  }
}

// Results storage (optional, resultsStorageAccountId): the private endpoint to the account's blob
// service and its DNS zone, in the cluster's resource group (they go with the cluster; the account
// and its results stay).
module results 'modules/results.bicep' = if (resultsEnabled) {
  name: '${namePrefix}-results'
  params: {
    location: location
    namePrefix: namePrefix
    tags: tags
    vnetId: network.outputs.vnetId
    subnetId: network.outputs.subnetId
    privateIp: resultsPrivateIp
    storageAccountId: resultsStorageAccountId
    url: resultsUrl
  }
}

// The nodes' identity gets Storage Blob Data Contributor on the account's `results` container
// only: a role assignment deployed to the account's resource group (Terraform: results.tf).
module resultsRole 'modules/results-role.bicep' = if (resultsEnabled) {
  name: '${namePrefix}-results-role'
  scope: resourceGroup(resultsSubscriptionId, resultsResourceGroup)
  params: {
    storageAccountName: resultsAccountName
    principalId: identity.outputs.principalId
  }
}

// Deploy-time values for the rendered cloud-init documents, keyed by exactly the names in
// cloud-init/placeholders.yaml (tests/unit/test_deploy_values.py holds the lists together).
var deployValues = {
  RAY_HEAD_IP: headPrivateIp
  KEY_VAULT_URL: keyVault.outputs.vaultUri
  TOKEN_SECRET_NAME: keyVault.outputs.secretName
  IDENTITY_CLIENT_ID: identity.outputs.clientId
  RAY_ADMIN_USER: adminUsername
  EXTRA_PIP_PACKAGES: join(extraPipPackages, ' ')
  EXTRA_APT_PACKAGES: join(extraAptPackages, ' ')
  PIP_INDEX_URL: pipIndexUrl
  TORCH_INDEX_URL: torchIndexUrl
  APT_SOURCE: aptSource
  // Ray autoscaler on the head (scalingMode ray; the head ignores them otherwise).
  SCALING_MODE: scalingMode
  WORKER_SCALE_SET_ID: '${resourceGroup().id}/providers/Microsoft.Compute/virtualMachineScaleSets/${pools[0].scaleSetName}'
  WORKER_VM_SIZE: pools[0].vmSize
  AUTOSCALER_POOLS: string(autoscalerPools)
  AUTOSCALER_IDLE_TIMEOUT_MINUTES: string(rayIdleTimeoutMinutes)
  AUTOSCALER_CLIENT_ID: identity.outputs.autoscalerClientId
  ARM_ENDPOINT: environment().resourceManager
  // Autostop on the head (0: off), the autoscale settings it turns off (scalingMode cpu) and
  // the scale sets it empties.
  AUTOSTOP_IDLE_MINUTES: string(autostopIdleMinutes)
  WORKER_AUTOSCALE_NAME: workerAutoscaleNames
  WORKER_SCALE_SETS: join(poolScaleSetNames, ' ')
  // The first pool's own values; each pool's workers get theirs (the workers module below).
  WORKER_POOL: pools[0].name
  RAY_RESOURCES: pools[0].rayResources
  RAY_LABELS: pools[0].rayLabels
  // The results container (modules/results.bicep), '' without resultsStorageAccountId.
  RESULTS_URL: resultsEnabled ? results.outputs.url : ''
}

// The first boot installs packages (the subnet's NAT gateway and NSG must be in place) and reads
// the cluster token from Key Vault (the secret, the identity's role, the private endpoint and its
// DNS name in the network must exist): the keyVault module holds all of those.
module head 'modules/head.bicep' = {
  name: '${namePrefix}-head'
  params: {
    location: location
    namePrefix: namePrefix
    tags: tags
    subnetId: network.outputs.subnetId
    privateIp: headPrivateIp
    tcpIdleTimeoutMinutes: tcpIdleTimeoutMinutes
    vmSize: headVmSize
    priority: headPriority
    maxPrice: headMaxPrice
    adminUsername: adminUsername
    adminSshPublicKey: sshKey
    imageReference: imageReference
    encryptionAtHost: encryptionAtHostEnabled
    identityId: identity.outputs.id
    autoscalerIdentityId: identity.outputs.autoscalerId
    autostopRoleDefinitionId: identity.outputs.autostopRoleDefinitionId
    autostopPrincipalId: identity.outputs.autoscalerPrincipalId
    customData: base64(replace(headCloudInit, '@@DEPLOY_VALUES@@', base64(string(deployValues))))
  }
  dependsOn: [
    keyVault
    // The nodes may write results from their first job on (Terraform's head waits for it too).
    resultsRole
  ]
}

// One scale set per worker pool. Workers install packages at first boot (NAT gateway) and join
// the head at its private IP. (The pool "workers" keeps the deployment names of before pools.)
module workers 'modules/workers.bicep' = [for pool in pools: {
  name: pool.name == 'workers' ? '${namePrefix}-workers' : '${namePrefix}-pool-${pool.name}'
  params: {
    location: location
    tags: tags
    name: pool.scaleSetName
    computerNamePrefix: pool.computerNamePrefix
    subnetId: network.outputs.subnetId
    vmSize: pool.vmSize
    instanceCount: pool.defaultCount
    adminUsername: adminUsername
    adminSshPublicKey: sshKey
    imageReference: imageReference
    encryptionAtHost: encryptionAtHostEnabled
    identityId: identity.outputs.id
    spotEnabled: pool.spotEnabled
    evictionPolicy: pool.evictionPolicy
    maxPrice: string(pool.maxPrice)
    zones: pool.zones
    zoneBalance: pool.zoneBalance
    orchestrationMode: pool.orchestrationMode
    priorityMixPolicy: pool.priorityMix == null ? {} : pool.priorityMix
    instanceMix: pool.instanceMix == null ? {} : pool.instanceMix
    terminationNoticeMinutes: workerTerminationNoticeMinutes
    automaticRepairEnabled: workerAutomaticRepairEnabled
    automaticRepairGracePeriodMinutes: workerAutomaticRepairGracePeriodMinutes
    automaticRepairAction: workerAutomaticRepairAction
    healthProbe: workerHealthProbe
    // scalingMode ray: Ray's autoscaler acts with the head's own identity on the scale set.
    autoscalerPrincipalId: scalingMode == 'ray' ? identity.outputs.autoscalerPrincipalId : ''
    // In scalingMode ray the same identity holds Virtual Machine Contributor on the scale set
    // already, which includes autostop's actions there: no second assignment.
    autostopRoleDefinitionId: scalingMode == 'ray' ? '' : identity.outputs.autostopRoleDefinitionId
    autostopPrincipalId: identity.outputs.autoscalerPrincipalId
    // The pool's own values (WORKER_POOL, RAY_RESOURCES, RAY_LABELS) over the cluster's.
    customData: base64(replace(workerCloudInit, '@@DEPLOY_VALUES@@', base64(string(union(deployValues, {
      WORKER_POOL: pool.name
      RAY_RESOURCES: pool.rayResources
      RAY_LABELS: pool.rayLabels
    })))))
  }
  dependsOn: [
    keyVault
    head
  ]
}]

// scalingMode cpu: Azure Monitor rules on average CPU, one setting per pool.
module autoscale 'modules/autoscale.bicep' = [for (pool, i) in autoscalePools: {
  name: pool.name == 'workers' ? '${namePrefix}-autoscale' : '${namePrefix}-pool-${pool.name}-autoscale'
  params: {
    location: location
    tags: tags
    name: pool.autoscaleName
    scaleSetId: workers[i].outputs.id
    minCount: pool.minCount
    defaultCount: pool.defaultCount
    maxCount: pool.maxCount
    scaleOutCpuPercent: scaleOutCpuPercent
    scaleInCpuPercent: scaleInCpuPercent
    scaleOutCooldownMinutes: scaleOutCooldownMinutes
    scaleInCooldownMinutes: scaleInCooldownMinutes
    autostopRoleDefinitionId: identity.outputs.autostopRoleDefinitionId
    autostopPrincipalId: identity.outputs.autoscalerPrincipalId
  }
}]

// -----------------------------------------------------------------------------------------------
// Outputs. The names are a contract: `python -m driver --resource-group RG --deployment NAME`
// reads headPublicIp and adminUsername (headVmId, scaleSetId and autoscaleSettingId to start a
// stopped cluster; workerPools for every pool's); they are the Terraform stack's outputs in camelCase.
// -----------------------------------------------------------------------------------------------

@description('Public IP address of the head (SSH only, from allowedSshCidrs).')
output headPublicIp string = head.outputs.publicIp

@description('Private IP address of the head in the cluster subnet (Ray\'s GCS listens there, port 6379).')
output headPrivateIp string = head.outputs.privateIp

@description('Admin user on every VM; the user the driver connects as.')
output adminUsername string = adminUsername

@description('SSH to the head.')
output sshCommand string = 'ssh ${adminUsername}@${head.outputs.publicIp}'

@description('Resource ID of the first worker pool\'s scale set (the only one without workerPools), for az vmss commands (--ids); every pool\'s: workerPools.')
output scaleSetId string = workers[0].outputs.id

@description('Every worker pool, in order: its name, its scale set\'s id and name, and its CPU autoscale setting\'s id ("" with scalingMode "ray").')
output workerPools array = [for (p, i) in pools: {
  name: p.name
  scaleSetId: workers[i].outputs.id
  scaleSetName: p.scaleSetName
  autoscaleSettingId: scalingMode == 'cpu' ? autoscale[i].outputs.id : ''
}]

@description('Resource ID of the head VM: `python -m driver start` starts it again after autostop deallocated it.')
output headVmId string = head.outputs.id

@description('Resource ID of the first worker pool\'s CPU autoscale setting (scalingMode "cpu"), which autostop turns off and `python -m driver start` on again; "" with scalingMode "ray". Every pool\'s: workerPools.')
output autoscaleSettingId string = scalingMode == 'cpu' ? autoscale[0].outputs.id : ''

@description('Resource group that holds the cluster.')
output resourceGroupName string = resourceGroup().name

@description('Submit the CartPole example to this cluster (from the repository root).')
output driverCommand string = 'python -m driver submit examples/cartpole/train.py --head ${adminUsername}@${head.outputs.publicIp}'

@description('URL of the results container the jobs write to (RAYDRIVER_RESULTS_URL on the nodes), \'\' without resultsStorageAccountId (results on the head\'s disk only).')
output resultsUrl string = resultsUrl
