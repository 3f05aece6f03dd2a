"""The custom data azuredeploy.json gives the head and the workers, evaluated with
tests/armeval.py: the committed rendered cloud-init documents with their one placeholder filled
with the values Terraform would put there for the same inputs, exactly as
``nodekit.render.fill`` (what the rehearsal cluster boots) fills them. So the rehearsal boot
(tests/e2e) covers the documents as Bicep fills them.

main.bicep is read for what the JSON cannot show: that it loads the committed documents with
loadTextContent and fills them with one replace() of the deploy-time values.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import re
from typing import Any

import pytest
import yaml

from armeval import Context
from azure_support import TOKEN_SECRET
from bicep_support import (
    CLIENT_ID,
    MAIN,
    REPO,
    check_results,
    deploy_template,
    template,
)
from nodekit import render
from validation_cases import MAX_VALUE_LENGTHS, REQUIRED_PARAMETERS, RSA_4096

ROLES = {"head": "-head", "worker": "-workers"}
DEPLOY_JSON = "/etc/ray-cluster/deploy.json"

RESULTS_ACCOUNT_ID = (
    "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/ray-results/providers/"
    "Microsoft.Storage/storageAccounts/rayresults0123456789"
)

CASES: list[dict[str, Any]] = [
    {},
    {
        "namePrefix": "ray-cluster-2026",
        "vnetAddressSpace": "192.168.0.0/16",
        "subnetAddressPrefix": "192.168.255.0/24",
        "adminUsername": "a" * MAX_VALUE_LENGTHS["RAY_ADMIN_USER"],
        "extraPipPackages": ["minigrid==3.0.0", "gymnasium[atari]>=1.0", "ale-py"],
        # user:password in the URL, built here so that no scanner takes this file for a secret.
        "pipIndexUrl": "https://" + ":".join(("user", "tok%40en")) + "@x.example/simple?a=1&b=<2>",
        "torchIndexUrl": "https://download.pytorch.org/whl/cu128",
        "aptSource": 'deb [trusted=yes] http://10.0.0.5/debian ./ "quoted" é',
        "adminSshPublicKey": RSA_4096,
    },
    {
        "vnetAddressSpace": "100.64.0.0/10",
        "subnetAddressPrefix": "100.127.255.240/28",
        "workerMaxCount": 9,
        "extraPipPackages": ["a" * 600, "b" * (MAX_VALUE_LENGTHS["EXTRA_PIP_PACKAGES"] - 601)],
        "extraAptPackages": ["a" * 600, "b" * (MAX_VALUE_LENGTHS["EXTRA_APT_PACKAGES"] - 601)],
        "pipIndexUrl": "https://x.example/" + "a" * (MAX_VALUE_LENGTHS["PIP_INDEX_URL"] - 18),
        "aptSource": "deb http://a/" + "a" * (MAX_VALUE_LENGTHS["APT_SOURCE"] - 13),
    },
    {
        "scalingMode": "ray",
        "workerMinCount": 0,
        "workerDefaultCount": 0,
        "workerMaxCount": 12,
        "rayIdleTimeoutMinutes": 3,
        "workerVmSize": "Standard_F8s_v2",
        "autostopIdleMinutes": 10080,
    },
    {"autostopIdleMinutes": 0, "namePrefix": "rlx"},
    # Results storage: its container's URL reaches the nodes.
    {"resultsStorageAccountId": RESULTS_ACCOUNT_ID},
    # Two pools: the CPU workers (the head's, the first) with resources, and a Spot GPU pool.
    {
        "workerPools": [
            {"name": "workers", "vmSize": "Standard_F8s_v2", "rayResources": {"simulator": 2}},
            {
                "name": "gpu",
                "vmSize": "Standard_NC4as_T4_v3",
                "minCount": 0,
                "defaultCount": 0,
                "maxCount": 2,
                "spotEnabled": True,
                "rayLabels": {"accelerator": "t4"},
            },
        ],
    },
]


def terraform_values(parameters: dict[str, Any], vault_uri: str) -> dict[str, str]:
    """The deploy-time values infra/terraform/modules/cluster/locals.tf computes for the same
    inputs (the first pool's: the head's, and the workers' of the pool "workers" when it is the
    first)."""
    subnet = ipaddress.ip_network(parameters.get("subnetAddressPrefix", "10.42.1.0/24"))
    prefix = parameters.get("namePrefix", "ray")
    pools = parameters.get("workerPools") or [{"name": "workers"}]
    first = pools[0]
    cpu = parameters.get("scalingMode", "cpu") == "cpu"
    return {
        "RAY_HEAD_IP": str(subnet[4]),  # cidrhost(subnet, 4)
        "KEY_VAULT_URL": vault_uri,
        "TOKEN_SECRET_NAME": TOKEN_SECRET,  # keyvault.tf's azurerm_key_vault_secret name
        "IDENTITY_CLIENT_ID": CLIENT_ID,
        "RAY_ADMIN_USER": parameters.get("adminUsername", "azureuser"),
        "EXTRA_PIP_PACKAGES": " ".join(parameters.get("extraPipPackages", [])),
        "EXTRA_APT_PACKAGES": " ".join(parameters.get("extraAptPackages", [])),
        "PIP_INDEX_URL": parameters.get("pipIndexUrl", "https://pypi.org/simple"),
        "TORCH_INDEX_URL": parameters.get("torchIndexUrl", "https://download.pytorch.org/whl/cpu"),
        "APT_SOURCE": parameters.get("aptSource", ""),
        "SCALING_MODE": parameters.get("scalingMode", "cpu"),
        "WORKER_SCALE_SET_ID": f"{Context().resource_group_id()}/providers/Microsoft.Compute"
        f"/virtualMachineScaleSets/{prefix}-{first['name']}",
        "WORKER_VM_SIZE": first.get("vmSize", parameters.get("workerVmSize", "Standard_D4s_v5")),
        # Every pool, as Terraform's jsonencode writes it (keys in order, no spaces).
        "AUTOSCALER_POOLS": json.dumps(
            [
                {
                    "labels": ",".join(f"{k}={v}" for k, v in p.get("rayLabels", {}).items()),
                    "max": p.get("maxCount", parameters.get("workerMaxCount", 4)),
                    "min": p.get("minCount", parameters.get("workerMinCount", 0)),
                    "name": p["name"],
                    "resources": p.get("rayResources", {}),
                    "scale_set": f"{prefix}-{p['name']}",
                    "vm_size": p.get("vmSize", parameters.get("workerVmSize", "Standard_D4s_v5")),
                }
                for p in pools
            ],
            separators=(",", ":"),
        ),
        "AUTOSCALER_IDLE_TIMEOUT_MINUTES": str(parameters.get("rayIdleTimeoutMinutes", 5)),
        # The head's own identity (the same mocked client id) in ray mode or with autostop.
        "AUTOSCALER_CLIENT_ID": CLIENT_ID
        if parameters.get("scalingMode") == "ray" or parameters.get("autostopIdleMinutes", 60)
        else "",
        # The public cloud's (armeval deploys there): Bicep's environment().resourceManager,
        # Terraform's picked by the vault URI's suffix (stack_parity checks every cloud).
        "ARM_ENDPOINT": "https://management.azure.com/",
        "AUTOSTOP_IDLE_MINUTES": str(parameters.get("autostopIdleMinutes", 60)),
        "WORKER_AUTOSCALE_NAME": " ".join(f"{prefix}-{p['name']}-autoscale" for p in pools)
        if cpu
        else "",
        "WORKER_SCALE_SETS": " ".join(f"{prefix}-{p['name']}" for p in pools),
        "WORKER_POOL": first["name"],
        "RAY_RESOURCES": json.dumps(first.get("rayResources", {}), separators=(",", ":")),
        "RAY_LABELS": ",".join(f"{k}={v}" for k, v in first.get("rayLabels", {}).items()),
        # results.tf: the account's name (the id's last segment) in the public cloud's suffix.
        "RESULTS_URL": (
            f"https://{account.rsplit('/', 1)[-1]}.blob.core.windows.net/results"
            if (account := parameters.get("resultsStorageAccountId"))
            else ""
        ),
    }


def custom_data(parameters: dict[str, Any], role: str) -> tuple[str, dict[str, str]]:
    """(the decoded custom data of ``role``, the values Terraform would use)."""
    d = deploy_template({**REQUIRED_PARAMETERS, **parameters})
    assert not d.refused and check_results(d) == [], d.refused
    [module] = [n for n in d.module_parameters if n.endswith(ROLES[role])]
    encoded = d.module_parameters[module]["customData"]
    [vault] = [r for r in d.resources if r["type"] == "Microsoft.KeyVault/vaults"]
    values = terraform_values(
        {**REQUIRED_PARAMETERS, **parameters}, f"https://{vault['name']}.vault.azure.net/"
    )
    return base64.b64decode(encoded, validate=True).decode(), values


def deploy_json(document: str) -> tuple[dict[str, str], str]:
    """The deploy-time values a document carries, and the document with them taken out."""
    for entry in yaml.safe_load(document)["write_files"]:
        if entry["path"] == DEPLOY_JSON:
            encoded = entry["content"]
            break
    else:
        raise AssertionError(f"no {DEPLOY_JSON} in the document")
    assert document.count(encoded) == 1
    return render.decode_deploy_values(encoded), document.replace(encoded, render.PLACEHOLDER)


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_custom_data_is_the_rendered_document_filled_as_render_fill_fills_it(
    role: str, case: int
) -> None:
    document, values = custom_data(CASES[case], role)
    rendered = (REPO / "cloud-init" / "rendered" / f"{role}.yaml").read_text()
    expected = render.fill(rendered, values)
    arm_values, arm_rest = deploy_json(document)
    fill_values, fill_rest = deploy_json(expected)
    # The same JSON object (ARM keeps the declaration order, json.dumps too; key order is not
    # part of the contract), and everything else byte for byte: the rendered document.
    assert arm_values == fill_values == values
    assert arm_rest == fill_rest == rendered
    assert len(base64.b64encode(document.encode())) <= render.CUSTOM_DATA_LIMIT


def test_the_comparison_can_fail() -> None:
    """A template whose custom data carries another head address is caught."""
    document, values = custom_data({}, "worker")
    values["RAY_HEAD_IP"] = "10.42.1.5"
    arm_values, _ = deploy_json(document)
    assert arm_values != values


def test_deploy_values_are_exactly_the_listed_names_in_order() -> None:
    """main.bicep's deployValues: the names of cloud-init/placeholders.yaml, in their order."""
    text = MAIN.read_text()
    block = re.search(r"^var deployValues = \{\n(.*?)^\}", text, re.S | re.M)
    assert block, "main.bicep has no `var deployValues = {...}`"
    names = re.findall(r"^  ([A-Z][A-Z0-9_]*):", block.group(1), re.M)
    assert names == render.deploy_value_names()


def test_the_documents_are_loaded_from_the_committed_files_and_filled_with_one_replace() -> None:
    text = MAIN.read_text()
    for role in ROLES:
        assert (
            f"var {role}CloudInit = loadTextContent('../../cloud-init/rendered/{role}.yaml')"
            in text
        )
        # The head's: the cluster's values; each pool's workers': theirs over them.
        own = "union(deployValues, {" if role == "worker" else "deployValues"
        assert (
            f"customData: base64(replace({role}CloudInit, '{render.PLACEHOLDER}', "
            f"base64(string({own}" in text
        )
    # ... and the compiled template carries the documents as they are committed.
    variables = template()["variables"]
    for role in ROLES:
        committed = (REPO / "cloud-init" / "rendered" / f"{role}.yaml").read_text()
        assert variables[f"{role}CloudInit"] == committed


def test_the_token_is_in_no_custom_data_and_no_output() -> None:
    d = deploy_template({**REQUIRED_PARAMETERS, "clusterToken": "t0ken" * 10})
    for role in ROLES:
        [module] = [n for n in d.module_parameters if n.endswith(ROLES[role])]
        document = base64.b64decode(d.module_parameters[module]["customData"]).decode()
        assert "t0ken" not in document
        assert "t0ken" not in json.dumps(deploy_json(document)[0])
    assert "t0ken" not in json.dumps(d.outputs)
    [secret] = [r for r in d.resources if r["type"] == "Microsoft.KeyVault/vaults/secrets"]
    assert secret["properties"]["value"] == "t0ken" * 10
