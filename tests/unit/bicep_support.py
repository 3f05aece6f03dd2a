"""What the Bicep stack's tests share: the files, the parity table between the two stacks, and
deploying azuredeploy.json with tests/armeval.py against what Azure's resources would report."""

from __future__ import annotations

import json
import re
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

from armeval import Context, Deployment, deploy
from checkov_support import checkov_binary

REPO = Path(__file__).resolve().parents[2]
BICEP = REPO / "infra" / "bicep"
MAIN = BICEP / "main.bicep"
TEMPLATE = BICEP / "azuredeploy.json"
MODULES = BICEP / "modules"

CLIENT_ID = "11111111-2222-4333-8444-555555555555"
PRINCIPAL_ID = "99999999-8888-4777-8666-555555555555"
HEAD_PUBLIC_IP = "20.1.2.3"

# Terraform's own inputs and the reason Bicep has none of them.
TERRAFORM_ONLY = {
    "resource_group_name": "Bicep deploys into the resource group it is given (az deployment "
    "group create -g, the portal's form, or `python -m driver up --resource-group`).",
    "create_resource_group": "Same: the resource group exists before an ARM deployment "
    "starts (`python -m driver up` creates it when it is missing).",
    "key_vault_allowed_cidrs": "ARM writes the token through the control plane, so the vault "
    "has no public endpoint and no firewall to open.",
    "rbac_propagation_wait_seconds": "Same: no deployer role on the vault's data plane to wait "
    "for.",
    "create_image_gallery": "Bicep's node image template (infra/bicep/image/) creates the gallery "
    "and the image definition itself, with the same names and properties.",
    "cluster_token_version": "Every ARM deployment that leaves clusterToken out writes a new "
    "token (newGuid() defaults are evaluated on every deployment, and ARM cannot write a secret "
    "only when it is missing): a redeployment is a rotation, there is no version to raise.",
}
# Bicep's own parameters and the reason Terraform has none of them.
BICEP_ONLY = {
    "clusterToken": "The token: Terraform generates it as an ephemeral value; ARM can only "
    "generate it as a secure parameter's default (newGuid() is allowed nowhere else).",
    "deploymentTime": "utcNow() is allowed only in a parameter default: the time the token's "
    "expiration date counts from (Terraform: time_offset).",
}
# Shared, but not alike: the difference and why.
DIFFERENT = {
    "location": "Required in Terraform; in Bicep it defaults to resourceGroup().location, as "
    "Azure's templates do.",
    "scale_out_cpu_percent": "Terraform's number takes fractions; ARM parameters have no "
    "fractional type, so Bicep takes whole percentages (same limits).",
    "scale_in_cpu_percent": "Same as scale_out_cpu_percent.",
    "node_image_id": "Terraform's null is Bicep's empty string (an ARM parameter cannot default "
    "to null): both boot the os image's marketplace image.",
    "head_max_price": "Terraform's number (default -1) is Bicep's text (default '-1'): ARM "
    "parameters have no fractional type and a Spot price is a fraction of a dollar; both "
    "accept -1 or a price above 0 up to 1000, with the same messages.",
    "worker_pools": "Terraform's map of pools by name (snake_case attributes) is Bicep's array of "
    "pools, each with its name (camelCase attributes): ARM has no map type, and module loops run "
    "over arrays. Empty in both is one pool, workers, made of the worker_* inputs; the first pool "
    "(Terraform: by name in alphabetical order; Bicep: the array's first) is the head's.",
}
# What the stacks decide besides their parameters (tests/unit/stack_parity.py reads each fact
# from both stacks) and differ in: the fact and why. Every other fact is equal.
BEHAVIOUR_DIFFERENT = {
    "key_vault_name": "Both are `<prefix>-kv-` and a hash of the subscription, the resource "
    "group and the prefix, 23 characters at most, but not the same hash: ARM has no sha1() and "
    "Terraform no uniqueString(). Terraform takes the first 23 - 4 - length(prefix) hexadecimal "
    "digits of sha1 (16 for `ray`), Bicep as many of uniqueString()'s 13 characters. The same "
    "cluster gets another vault name from each stack; changing Terraform's would replace the "
    "vault, and with it the token and every VM, of clusters already running.",
}
# Output names: Terraform's snake_case, Bicep's camelCase.
OUTPUTS = {
    "head_public_ip": "headPublicIp",
    "head_private_ip": "headPrivateIp",
    "admin_username": "adminUsername",
    "ssh_command": "sshCommand",
    "scale_set_id": "scaleSetId",
    "head_vm_id": "headVmId",
    "autoscale_setting_id": "autoscaleSettingId",
    "resource_group_name": "resourceGroupName",
    "driver_command": "driverCommand",
    "worker_pools": "workerPools",
    "results_url": "resultsUrl",
}
# Terraform's own outputs: the ids a root that calls infra/terraform/modules/cluster wires on
# (issue 22: "outputs with the ids people wire on", as Azure Verified Modules have). An ARM
# deployment is not called as a module from Terraform, and Bicep's own modules are not part of
# this comparison: the Bicep stack does not output them.
TERRAFORM_ONLY_OUTPUTS = {
    "resource_group_id",
    "vnet_id",
    "vnet_name",
    "subnet_id",
    "network_security_group_id",
    "scale_set_ids",
    "node_identity",
    "head_identity",
    "key_vault_id",
    "key_vault_uri",
}


# The one table between the stacks: every Terraform variable and the Bicep parameter that takes
# its place (None: Terraform-only, reason in TERRAFORM_ONLY). Tested both ways in
# test_bicep_parity.py against variables.tf, main.bicep and azuredeploy.json.
PARAMETERS: dict[str, str | None] = {
    "location": "location",
    "allowed_ssh_cidrs": "allowedSshCidrs",
    "admin_ssh_public_key": "adminSshPublicKey",
    "resource_group_name": None,
    "create_resource_group": None,
    "name_prefix": "namePrefix",
    "tags": "tags",
    "vnet_address_space": "vnetAddressSpace",
    "subnet_address_prefix": "subnetAddressPrefix",
    "tcp_idle_timeout_minutes": "tcpIdleTimeoutMinutes",
    "admin_username": "adminUsername",
    "os_image": "osImage",
    "node_image_id": "nodeImageId",
    "create_image_gallery": None,
    "head_vm_size": "headVmSize",
    "head_priority": "headPriority",
    "head_max_price": "headMaxPrice",
    "worker_vm_size": "workerVmSize",
    "encryption_at_host_enabled": "encryptionAtHostEnabled",
    "scaling_mode": "scalingMode",
    "ray_idle_timeout_minutes": "rayIdleTimeoutMinutes",
    "autostop_idle_minutes": "autostopIdleMinutes",
    "worker_min_count": "workerMinCount",
    "worker_default_count": "workerDefaultCount",
    "worker_max_count": "workerMaxCount",
    "scale_out_cpu_percent": "scaleOutCpuPercent",
    "scale_in_cpu_percent": "scaleInCpuPercent",
    "scale_out_cooldown_minutes": "scaleOutCooldownMinutes",
    "scale_in_cooldown_minutes": "scaleInCooldownMinutes",
    "worker_spot_enabled": "workerSpotEnabled",
    "worker_termination_notice_minutes": "workerTerminationNoticeMinutes",
    "worker_automatic_repair_enabled": "workerAutomaticRepairEnabled",
    "worker_automatic_repair_grace_period_minutes": "workerAutomaticRepairGracePeriodMinutes",
    "worker_automatic_repair_action": "workerAutomaticRepairAction",
    "worker_pools": "workerPools",
    "key_vault_allowed_cidrs": None,
    "cluster_token_version": None,
    # checkov:skip=CKV_SECRET_6:A parameter's name next to the word token, no secret.
    "cluster_token_expiration_days": "clusterTokenExpirationDays",
    "rbac_propagation_wait_seconds": None,
    "extra_pip_packages": "extraPipPackages",
    "extra_apt_packages": "extraAptPackages",
    "pip_index_url": "pipIndexUrl",
    "torch_index_url": "torchIndexUrl",
    "apt_source": "aptSource",
    "results_storage_account_id": "resultsStorageAccountId",
}


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.capitalize() for p in rest)


def snake(name: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


@cache
def template_text() -> str:
    return TEMPLATE.read_text()


def template() -> dict[str, Any]:
    return json.loads(template_text())


def runtime(rtype: str, rid: str) -> dict[str, Any]:
    """What a deployed resource reports to reference(), as Azure answers for these types."""
    name = rid.rsplit("/", 1)[1]
    if rtype == "Microsoft.ManagedIdentity/userAssignedIdentities":
        return {"clientId": CLIENT_ID, "principalId": PRINCIPAL_ID, "tenantId": "t"}
    if rtype == "Microsoft.KeyVault/vaults":
        return {"vaultUri": f"https://{name}.vault.azure.net/"}
    if rtype == "Microsoft.Network/publicIPAddresses":
        return {"ipAddress": HEAD_PUBLIC_IP, "publicIPAllocationMethod": "Static"}
    if rtype == "Microsoft.Network/networkInterfaces":
        raise KeyError("NIC: answered by the caller, who knows the static address")
    raise KeyError(f"reference() to {rtype} is not expected")


def context(nic_ip: str = "10.42.1.4", **kwargs: Any) -> Context:
    def answer(rtype: str, rid: str) -> dict[str, Any]:
        if rtype == "Microsoft.Network/networkInterfaces":
            return {"ipConfigurations": [{"properties": {"privateIPAddress": nic_ip}}]}
        return runtime(rtype, rid)

    return Context(runtime=answer, **kwargs)


def deploy_template(
    parameters: dict[str, Any],
    text: str | None = None,
    stop_when_refused: bool = True,
    **context_args: Any,
) -> Deployment:
    doc = json.loads(text) if text is not None else template()
    return deploy(doc, parameters, context(**context_args), stop_when_refused)


def check_results(d: Deployment) -> list[str]:
    """The messages of the input rules the checks module received (not 'ok')."""
    [name] = [n for n in d.module_parameters if n.endswith("-input-checks")]
    return [r for r in d.module_parameters[name]["results"] if r != "ok"]


_PYCEP = """import json, sys
from pathlib import Path
from pycep import BicepParser
parser = BicepParser()
print(json.dumps({f: parser.parse(file_path=Path(f)) for f in sys.argv[1:]}, default=str))"""


def pycep(path: Path) -> dict[str, Any]:
    """``path`` as pycep-parser 0.5.1 reads it, the parser inside checkov's bicep framework. It
    lives in checkov's own environment (.tools/checkov, scripts/checkov-requirements.txt)."""
    key = str(path.resolve())
    stack = _pycep_stack()
    return stack[key] if key in stack else _pycep_files((path.resolve(),))[key]


@cache
def _pycep_stack() -> dict[str, dict[str, Any]]:
    """Every Bicep file under infra/bicep, parsed by one parser in one process: building
    pycep's parser (its grammar) is most of a file's second, so one parser for the twelve files
    takes ~1.3 s against ~11 s one process each, with the same trees."""
    return _pycep_files(tuple(sorted(p.resolve() for p in BICEP.rglob("*.bicep"))))


def _pycep_files(paths: tuple[Path, ...]) -> dict[str, dict[str, Any]]:
    python = checkov_binary().parent / "python"
    # A bound against a hang, not a timing: alone they parse in ~1.3 s, but in a fresh
    # machine's whole run (load up to 40 on 2 cores) one file once took over 120 s.
    result = subprocess.run(
        [str(python), "-c", _PYCEP, *map(str, paths)], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, f"pycep-parser cannot read {paths}: {result.stderr[-1500:]}"
    parsed: dict[str, dict[str, Any]] = json.loads(result.stdout)
    return parsed
