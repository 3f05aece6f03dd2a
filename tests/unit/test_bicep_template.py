"""azuredeploy.json on its own: the deploymentTemplate shape, every parameters()/variables()
call, every resourceId()/reference() target and every dependsOn entry resolves to something the
template declares (in the scope that can see it), and each resource's properties are valid for
its type and API version.

The types come from Azure's own resource type definitions, the ones the Bicep compiler checks
with: /work/shared/azure-types/arm_types.json (extracted from Azure/bicep-types-az; see its
README). It is not in the repository: where it is absent (GitHub), those tests skip and the
workflow's `bicep build`/`bicep lint` do the type check instead.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from arm_template_support import ARM_ONLY_KEYS, problems, resource_errors, scopes
from bicep_support import REPO, template


def test_the_template_has_the_deployment_template_shape() -> None:
    doc = template()
    assert doc["$schema"] == (
        "https://schema.management.azure.com/schemas/2019-04-01/deploymentTemplate.json#"
    )
    assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+", doc["contentVersion"])
    known = {"$schema", "contentVersion", "metadata", "parameters", "variables", "functions",
             "resources", "outputs", "languageVersion", "definitions"}  # fmt: skip
    assert set(doc) <= known
    assert doc.get("languageVersion", "1.0") == "1.0"  # checkov's arm framework reads 1.0 only
    for name, p in doc["parameters"].items():
        assert p["type"] in {"string", "securestring", "int", "bool", "array", "object",
                             "secureObject"}, name  # fmt: skip
        assert p.get("metadata", {}).get("description"), f"{name} has no description"
    for r in doc["resources"]:
        assert {"type", "apiVersion", "name"} <= set(r), r.get("name")
    for name, o in doc["outputs"].items():
        # A value, or an output copy loop (count and input) as bicep build writes a for-loop.
        assert {"type", "value"} <= set(o) or ({"type", "copy"} <= set(o) and "value" not in o), (
            name
        )


def test_every_reference_resolves() -> None:
    assert problems(template()) == []


def test_an_unresolved_reference_is_found() -> None:
    for drift in (
        lambda d: d["parameters"].pop("namePrefix"),
        lambda d: d["variables"].pop("keyVaultName"),
        lambda d: d["resources"][-1]["dependsOn"].append(
            "[resourceId('Microsoft.Resources/deployments', 'nowhere')]"
        ),
    ):
        doc = copy.deepcopy(template())
        drift(doc)
        assert problems(doc), drift


# -- properties against Azure's resource type definitions --------------------------------------
def test_every_resource_is_valid_for_its_type_and_api_version(types: dict[str, Any]) -> None:
    errors, unchecked = resource_errors(template(), types)
    assert errors == []
    # The file holds property trees for the compute, network and identity types (Network
    # 2024-07-01 against 2025-05-01, the oldest it keeps); Key Vault, private DNS, private
    # endpoints, deployments and role definitions (autostop's custom role: its properties below)
    # are checked for type and API version only.
    assert all(
        ("keyvault" in k or "private" in k or "deployments" in k or "roledefinitions" in k)
        for k in unchecked
    ), unchecked


def test_the_autostop_role_definition_has_the_shape_of_the_api() -> None:
    """roleDefinitions@2022-04-01 has no property tree in the types file: its body checked by
    hand against the REST API's RoleDefinitionProperties (roleName, description, type,
    permissions of actions/notActions, assignableScopes)."""
    roles = {
        r["name"]: r
        for _, tpl, _ in scopes(template())
        for r in tpl["resources"]
        if r["type"] == "Microsoft.Authorization/roleDefinitions"
    }
    # Autostop's role, and the interface reader of a Flexible pool in scaling mode ray.
    [role] = [r for name, r in roles.items() if "ray-cluster-autostop" in name]
    [reader] = [r for name, r in roles.items() if "ray-cluster-interface-reader" in name]
    assert reader["properties"]["permissions"] == [
        {"actions": ["Microsoft.Network/networkInterfaces/read"], "notActions": []}
    ]
    assert reader["properties"]["assignableScopes"] == ["[resourceGroup().id]"]
    assert role["apiVersion"] == "2022-04-01"
    assert set(role) - ARM_ONLY_KEYS == {"name", "properties"}
    props = role["properties"]
    assert set(props) == {"roleName", "description", "type", "permissions", "assignableScopes"}
    assert props["type"] == "CustomRole"
    [permission] = props["permissions"]
    assert set(permission) == {"actions", "notActions"} and permission["notActions"] == []
    assert all(isinstance(a, str) and a.count("/") >= 2 for a in permission["actions"])
    assert props["assignableScopes"] == ["[resourceGroup().id]"]


def test_a_deployed_flexible_pool_is_valid_for_its_type(types: dict[str, Any]) -> None:
    """The Flexible scale set's properties are expressions in the template (a pool's mode and
    mixes): deployed (armeval) with a Flexible Spot pool with Spot Priority Mix, Instance Mix and
    zones, the scale set as Azure would receive it is held to the type definitions."""
    from bicep_support import camel, deploy_template
    from validation_cases import REQUIRED

    pool = {"name": "cpu", "orchestrationMode": "Flexible", "spotEnabled": True,
            "vmSize": "Standard_D4s_v5", "zones": ["1", "2"], "zoneBalance": True,
            "priorityMix": {"baseRegularCount": 1, "regularPercentageAboveBase": 50},
            "instanceMix": {"vmSizes": ["Standard_D4s_v5", "Standard_D4as_v5"],
                            "allocationStrategy": "LowestPrice"}}  # fmt: skip
    d = deploy_template({**{camel(k): v for k, v in REQUIRED.items()}, "workerPools": [pool]})
    assert not d.refused, d.refused
    [vmss] = [r for r in d.resources if r["type"] == "Microsoft.Compute/virtualMachineScaleSets"]
    props = vmss["properties"]
    assert props["orchestrationMode"] == "Flexible" and vmss["sku"]["name"] == "Mix"
    assert props["skuProfile"]["vmSizes"] == [{"name": "Standard_D4s_v5"},
                                              {"name": "Standard_D4as_v5"}]  # fmt: skip
    # Flexible leaves out (null) what it does not have: overprovisioning, a scale-in policy.
    assert props["overprovision"] is None and props["scaleInPolicy"] is None
    body = {k: v for k, v in vmss.items() if k in ("type", "apiVersion", "name", "location",
                                                   "tags", "sku", "zones", "identity",
                                                   "properties")}  # fmt: skip
    errors, unchecked = resource_errors({"resources": [_without_nulls(body)]}, types)
    assert errors == [] and not unchecked


def _without_nulls(value: Any) -> Any:
    """A deployed body as the resource provider reads it: a property set to null is absent
    (the pattern ``cond ? x : null`` of the stack's templates)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def test_a_wrong_property_is_found(types: dict[str, Any]) -> None:
    doc = copy.deepcopy(template())
    vmss = next(
        r for _, tpl, _ in scopes(doc) for r in tpl["resources"]
        if r["type"] == "Microsoft.Compute/virtualMachineScaleSets"
    )  # fmt: skip
    vmss["properties"]["overprovisioned"] = False
    vmss["properties"]["singlePlacementGroup"] = "yes"
    errors, _ = resource_errors(doc, types)
    assert any("overprovisioned: no such property" in e for e in errors), errors
    assert any("singlePlacementGroup" in e and "not a bool" in e for e in errors), errors
    doc = copy.deepcopy(template())
    doc["resources"][0]["apiVersion"] = "2099-01-01"
    assert resource_errors(doc, types)[0]


def test_workers_health_probe_and_repair_policy_match_terraform() -> None:
    """The Application Health extension's settings and the repair policy: one decision, two
    stacks (Terraform's locals.worker_health_probe, the template's workerHealthProbe)."""
    import hcl2

    from driver import layout

    terraform: dict[str, Any] = {}
    for block in hcl2.load((REPO / "infra/terraform/modules/cluster/locals.tf").open())["locals"]:
        terraform.update(block)
    arm = template()
    probe = arm["variables"]["workerHealthProbe"]
    unquoted = {
        k: v.strip('"') if isinstance(v, str) else v
        for k, v in terraform["worker_health_probe"].items()
    }
    assert probe == unquoted
    assert (probe["port"], probe["requestPath"]) == (layout.HEALTH_PORT, layout.HEALTH_PATH)
    text = json.dumps(arm)
    for needle in (
        '"type": "ApplicationHealthLinux"',
        '"publisher": "Microsoft.ManagedServices"',
        '"automaticRepairsPolicy"',
        '"allowExtensionOperations": true',
    ):
        assert needle in text, needle
