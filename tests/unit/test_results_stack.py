"""The results storage stacks (issue 21): infra/terraform/results and infra/bicep/results.bicep
(compiled to results.json), and how the cluster stacks take the account by id.

Checked offline: the Terraform stack against the azurerm schema, the compiled template against
Azure's resource type definitions, both for the same security settings (Entra ID only, TLS 1.2,
no public blobs, no public network unless addresses are listed, soft delete), the same inputs
with the same defaults, the same outputs; and the cluster stacks' role, endpoint and value.
checkov runs on both through test_terraform_checkov.py / test_bicep_checkov.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import hcl2
import pytest
from azurerm_schema import check_dir, load_schema

from arm_template_support import TYPES, resource_errors
from armeval import Context, deploy
from bicep_support import REPO, camel

TF = REPO / "infra" / "terraform" / "results"
CLUSTER_TF = REPO / "infra" / "terraform" / "modules" / "cluster"
BICEP = REPO / "infra" / "bicep" / "results.bicep"
ARM = REPO / "infra" / "bicep" / "results.json"
SCHEMA = REPO / ".tools" / "azurerm-schema" / "schema.json"
ACCOUNT_ID = (
    "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/ray-results/providers/"
    "Microsoft.Storage/storageAccounts/rayres0123456789abcdef"
)
# Terraform-only inputs: Bicep deploys into a group given to `az deployment group create`
# (location defaults to it), and reads no signed-in user, so it takes the principal's id.
TERRAFORM_ONLY = {"resource_group_name"}
BICEP_ONLY = {"deployerPrincipalId"}


def unquote(value: Any) -> Any:
    """python-hcl2's values without the quotes it keeps around strings."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    if isinstance(value, list):
        return [unquote(v) for v in value]
    if isinstance(value, dict):
        return {unquote(k): unquote(v) for k, v in value.items() if k != "__is_block__"}
    return value


def tf_blocks(directory: Path, kind: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for path in sorted(directory.glob("*.tf")):
        for block in hcl2.load(path.open()).get(kind, []):
            found.update({k.strip('"'): unquote(v) for k, v in block.items()})
    return found


def context() -> Context:
    """What Azure answers for the account: its endpoints."""

    def answer(rtype: str, rid: str) -> dict[str, Any]:
        assert rtype == "Microsoft.Storage/storageAccounts", rtype
        name = rid.rsplit("/", 1)[1]
        return {"primaryEndpoints": {"blob": f"https://{name}.blob.core.windows.net/"}}

    return Context(runtime=answer)


def tf_resources(directory: Path) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for path in sorted(directory.glob("*.tf")):
        for block in hcl2.load(path.open()).get("resource", []):
            for rtype, instances in block.items():
                for name, body in instances.items():
                    found[f"{rtype.strip(chr(34))}.{name.strip(chr(34))}"] = unquote(body)
    return found


def arm() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(ARM.read_text())
    return doc


def arm_resource(rtype: str) -> dict[str, Any]:
    [found] = [r for r in arm()["resources"] if r["type"] == rtype]
    return found


def test_terraform_results_stack_matches_the_provider_schema() -> None:
    if not SCHEMA.exists():
        pytest.fail(f"{SCHEMA} is missing: run scripts/setup.d/10-azurerm-schema.sh")
    report = check_dir(TF, load_schema(SCHEMA))
    assert report.problems == []
    types = {r.split(".")[-2] for r in report.resources}
    assert {"azurerm_resource_group", "azurerm_storage_account", "azurerm_storage_container",
            "azurerm_role_assignment"} <= types  # fmt: skip


def test_terraform_results_stack_is_formatted() -> None:
    if shutil.which("terraform") is None:
        pytest.fail("terraform is not on PATH")
    result = subprocess.run(
        ["terraform", "fmt", "-check", "-diff", str(TF)], capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout


def test_terraform_and_provider_versions_are_the_cluster_stacks_everywhere() -> None:
    """One fact, written in every root and module (Terraform wants it in each): the results
    stack, the cluster module, the worker pool module and the example root ask for the
    Terraform and provider versions the cluster stack's root asks for
    (infra/terraform/versions.tf, whose own test says why those)."""
    root = TF.parent

    def pins(path: Path) -> dict[str, Any]:
        [terraform] = unquote(hcl2.load(path.open())["terraform"])
        providers = {
            k: (v["source"], v["version"])
            for k, v in terraform["required_providers"][0].items()
            if not k.startswith("__")  # the parser's own keys (comments)
        }
        return {"terraform": terraform["required_version"], **providers}

    expected = pins(root / "versions.tf")
    files = [
        TF / "versions.tf",
        root / "modules" / "cluster" / "versions.tf",
        root / "modules" / "worker_pool" / "versions.tf",
        *sorted((root / "examples").glob("*/main.tf")),
    ]
    assert len(files) >= 4
    for path in files:
        found = pins(path)
        # Each asks for the providers it uses, at the root's versions.
        assert found == {k: expected[k] for k in found}, path
        assert "terraform" in found and "azurerm" in found, path


def test_the_provider_uses_entra_id_for_the_data_plane() -> None:
    [provider] = [unquote(p)["azurerm"] for p in hcl2.load((TF / "versions.tf").open())["provider"]]
    assert provider["storage_use_azuread"] is True


def test_terraform_account_is_entra_id_only_private_and_soft_deleting() -> None:
    account = tf_resources(TF)["azurerm_storage_account.this"]
    assert account["shared_access_key_enabled"] is False
    assert account["min_tls_version"] == "TLS1_2"
    assert account["allow_nested_items_to_be_public"] is False
    assert account["https_traffic_only_enabled"] is True
    assert account["public_network_access_enabled"] == "${length(var.allowed_cidrs) > 0}"
    [rules] = account["network_rules"]
    assert rules["default_action"] == "Deny" and rules["ip_rules"] == "${local.ip_rules}"
    [blob] = account["blob_properties"]
    assert blob["delete_retention_policy"] == [{"days": "${var.soft_delete_days}"}]
    assert blob["container_delete_retention_policy"] == [{"days": "${var.soft_delete_days}"}]
    container = tf_resources(TF)["azurerm_storage_container.results"]
    assert container["name"] == "results" and container["container_access_type"] == "private"


def test_bicep_account_has_the_same_settings() -> None:
    props = arm_resource("Microsoft.Storage/storageAccounts")["properties"]
    assert props["allowSharedKeyAccess"] is False
    assert props["minimumTlsVersion"] == "TLS1_2"
    assert props["allowBlobPublicAccess"] is False
    assert props["supportsHttpsTrafficOnly"] is True
    assert (
        props["publicNetworkAccess"]
        == "[if(empty(parameters('allowedCidrs')), 'Disabled', 'Enabled')]"
    )
    assert props["networkAcls"]["defaultAction"] == "Deny"
    blob = arm_resource("Microsoft.Storage/storageAccounts/blobServices")["properties"]
    for policy in ("deleteRetentionPolicy", "containerDeleteRetentionPolicy"):
        assert blob[policy] == {"enabled": True, "days": "[parameters('softDeleteDays')]"}
    container = arm_resource("Microsoft.Storage/storageAccounts/blobServices/containers")
    assert container["name"].endswith("'results')]") and container["properties"] == {
        "publicAccess": "None"
    }


def test_inputs_and_outputs_are_the_same_in_both_stacks() -> None:
    variables = tf_blocks(TF, "variable")
    params = arm()["parameters"]
    assert {camel(n) for n in variables if n not in TERRAFORM_ONLY} | BICEP_ONLY == set(params)
    for name, spec in variables.items():
        if name in TERRAFORM_ONLY or "default" not in spec:
            continue
        default = spec["default"]
        default = default.strip('"') if isinstance(default, str) else default
        assert params[camel(name)]["defaultValue"] == default, name
    assert {camel(n) for n in tf_blocks(TF, "output")} == set(arm()["outputs"])


def test_the_arm_template_is_the_compiled_bicep() -> None:
    result = subprocess.run(
        [str(REPO / ".venv" / "bin" / "python"), "scripts/bicep_to_arm.py", str(BICEP)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == arm()


def test_every_results_resource_is_valid_for_its_type_and_api_version() -> None:
    if not TYPES.exists():
        pytest.fail(f"{TYPES} is missing")
    errors, unchecked = resource_errors(arm(), json.loads(TYPES.read_text()))
    assert errors == [] and unchecked == set()


def test_deployed_with_addresses_the_firewall_admits_only_those() -> None:
    d = deploy(arm(), {"allowedCidrs": ["203.0.113.7/32", "198.51.100.0/24"]}, context())
    [account] = [r for r in d.resources if r["type"] == "Microsoft.Storage/storageAccounts"]
    assert account["properties"]["publicNetworkAccess"] == "Enabled"
    assert account["properties"]["networkAcls"]["ipRules"] == [
        {"value": "203.0.113.7", "action": "Allow"},
        {"value": "198.51.100.0/24", "action": "Allow"},
    ]
    assert re.fullmatch(r"rayres[a-z0-9]{13}", account["name"])


def test_deployed_without_a_principal_grants_nobody() -> None:
    d = deploy(arm(), {}, context())
    kinds = [r["type"] for r in d.resources]
    assert "Microsoft.Authorization/roleAssignments" not in kinds
    [account] = [r for r in d.resources if r["type"] == "Microsoft.Storage/storageAccounts"]
    assert account["properties"]["publicNetworkAccess"] == "Disabled"
    granted = deploy(arm(), {"deployerPrincipalId": "00000000-0000-4000-8000-00000000000a"},
                     context())  # fmt: skip
    [role] = [
        r for r in granted.resources if r["type"] == "Microsoft.Authorization/roleAssignments"
    ]
    # Storage Blob Data Reader, on the container only.
    assert role["properties"]["roleDefinitionId"].endswith("2a2b9908-6ea1-4ae2-8e65-a410df84e7d1")
    assert re.fullmatch(
        r"Microsoft\.Storage/storageAccounts/rayres[a-z0-9]{13}/blobServices/default/containers/results",
        role["scope"],
    )


def test_cluster_role_is_on_the_results_container_only() -> None:
    role = tf_resources(CLUSTER_TF)["azurerm_role_assignment.nodes_results_contributor"]
    assert role["role_definition_name"] == "Storage Blob Data Contributor"
    assert role["scope"] == "${local.results_container_id}"
    assert role["principal_id"] == "${azurerm_user_assigned_identity.this.principal_id}"
    results = tf_blocks(CLUSTER_TF, "locals")
    assert "containers/results" in results["results_container_id"]


def test_cluster_endpoint_is_blob_on_the_subnets_sixth_host() -> None:
    endpoint = tf_resources(CLUSTER_TF)["azurerm_private_endpoint.blob"]
    [connection] = endpoint["private_service_connection"]
    assert connection["subresource_names"] == ["blob"]
    assert connection["private_connection_resource_id"] == "${var.results_storage_account_id}"
    assert tf_blocks(CLUSTER_TF, "locals")["results_private_ip"] == (
        "${cidrhost(var.subnet_address_prefix, 6)}"
    )
    zone = tf_resources(CLUSTER_TF)["azurerm_private_dns_zone.blob"]
    assert zone["name"] == "privatelink.blob.core.windows.net"


def test_bicep_cluster_with_an_account_gets_the_endpoint_and_the_url() -> None:
    from bicep_support import deploy_template
    from validation_cases import REQUIRED_PARAMETERS

    none = deploy_template(dict(REQUIRED_PARAMETERS))
    assert not any(r["type"] == "Microsoft.Network/privateEndpoints" and "blob" in r["name"]
                   for r in none.resources)  # fmt: skip
    assert none.outputs["resultsUrl"] == ""
    d = deploy_template({**REQUIRED_PARAMETERS, "resultsStorageAccountId": ACCOUNT_ID})
    [endpoint] = [r for r in d.resources if r["type"] == "Microsoft.Network/privateEndpoints"
                  and r["name"] == "ray-blob-pe"]  # fmt: skip
    props = endpoint["properties"]
    assert props["privateLinkServiceConnections"][0]["properties"] == {
        "privateLinkServiceId": ACCOUNT_ID, "groupIds": ["blob"]}  # fmt: skip
    assert props["ipConfigurations"][0]["properties"]["privateIPAddress"] == "10.42.1.6"
    assert d.outputs["resultsUrl"] == (
        "https://rayres0123456789abcdef.blob.core.windows.net/results"
    )
