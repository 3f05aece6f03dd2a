"""The Bicep stack held to its compiled template and to the Terraform stack.

- main.bicep as pycep-parser 0.5.1 reads it (checkov's Bicep parser) against azuredeploy.json:
  parameter names, types, defaults and limits; resource types and API versions, module by module;
  outputs and their types.
- Both against infra/terraform through bicep_support.PARAMETERS / OUTPUTS, the one table from
  snake_case to camelCase, in both directions, defaults and limits included.
- A drifted copy of each side makes each comparison fail (the comparisons are functions that
  return the differences, so the drift tests call the same code).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from terraform_docs import outputs as tf_outputs
from terraform_docs import variables as tf_variables

from bicep_support import (
    BEHAVIOUR_DIFFERENT,
    BICEP_ONLY,
    DIFFERENT,
    MAIN,
    MODULES,
    OUTPUTS,
    PARAMETERS,
    TERRAFORM_ONLY,
    TERRAFORM_ONLY_OUTPUTS,
    camel,
    pycep,
    template,
)
from stack_parity import (
    RESULTS_ACCOUNT,
    TF_TO_ARM,
    _hcl,
    bicep_tags,
    expand,
    parity_differences,
    terraform_blocks,
    terraform_console,
    terraform_facts,
    terraform_locals,
    terraform_tags,
)

# The cluster module (infra/terraform calls it and passes everything through).
STACK = MAIN.parents[1] / "terraform" / "modules" / "cluster"

LIMITS = {"min_value": "minValue", "max_value": "maxValue", "min_length": "minLength",
          "max_length": "maxLength", "allowed": "allowedValues"}  # fmt: skip


def bicep_parameters(parsed: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """pycep's parameters in ARM's words: type (secure strings as securestring), literal
    default (None when required, "<expression>" when computed), limits."""
    found = {}
    for name, p in parsed["parameters"].items():
        decorators = {d["type"]: d.get("argument") for d in p["decorators"]}
        secure = "secure" in decorators
        kind = (
            {"string": "securestring", "object": "secureObject"}[p["type"]] if secure else p["type"]
        )
        default = p.get("default")
        if isinstance(default, dict) and {"operator", "function"} & set(default):
            default = "<expression>"
        entry = {"type": kind, "default": default}
        entry.update({LIMITS[k]: v for k, v in decorators.items() if k in LIMITS})
        found[name] = entry
    return found


def arm_parameters(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = {}
    for name, p in doc["parameters"].items():
        default = p.get("defaultValue")
        if isinstance(default, str) and default.startswith("[") and not default.startswith("[["):
            default = "<expression>"
        entry = {
            "type": p["type"].lower().replace("secureobject", "secureObject"),
            "default": default,
        }
        entry.update({k: p[k] for k in LIMITS.values() if k in p})
        found[name] = entry
    return found


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    out = [f"{k}: only in the first" for k in sorted(set(a) - set(b))]
    out += [f"{k}: only in the second" for k in sorted(set(b) - set(a))]
    out += [f"{k}: {a[k]!r} != {b[k]!r}" for k in sorted(set(a) & set(b)) if a[k] != b[k]]
    return out


def bicep_resources() -> dict[str, list[tuple[str, str]]]:
    """Each module's resources as (type, apiVersion), sorted; main.bicep declares none. An
    ``existing`` resource is only named (bicep build emits none)."""
    found = {}
    for name, module in pycep(MAIN)["modules"].items():
        parsed = pycep(MODULES.parent / module["detail"]["path"])
        found[name] = sorted(
            (r["type"], r["api_version"])
            for r in parsed.get("resources", {}).values()
            if not r.get("existing")
        )
    return found


def arm_resources(doc: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    """Each nested deployment's resources, keyed by the module it was compiled from: the one
    whose file's `metadata name` its template carries (a module loop's deployment name is an
    expression of the item, not the module's)."""
    by_metadata = {}
    for name, module in pycep(MAIN)["modules"].items():
        text = (MODULES.parent / module["detail"]["path"]).read_text()
        [title] = re.findall(r"^metadata name = '(.*)'$", text, re.M)
        by_metadata[title] = name
    found = {}
    for dep in doc["resources"]:
        assert dep["type"] == "Microsoft.Resources/deployments", dep["type"]
        module = by_metadata[dep["properties"]["template"]["metadata"]["name"]]
        found[module] = sorted(
            (r["type"], r["apiVersion"]) for r in dep["properties"]["template"]["resources"]
        )
    return found


def bicep_outputs(parsed: dict[str, Any]) -> dict[str, str]:
    return {name: o["type"] for name, o in parsed["outputs"].items()}


def arm_outputs(doc: dict[str, Any]) -> dict[str, str]:
    return {name: o["type"].lower() for name, o in doc["outputs"].items()}


# -- main.bicep <-> azuredeploy.json ------------------------------------------------------------
def test_parameters_agree() -> None:
    assert differences(bicep_parameters(pycep(MAIN)), arm_parameters(template())) == []


def test_resources_agree_module_by_module() -> None:
    bicep = bicep_resources()
    assert sum(len(v) for v in bicep.values()) >= 17
    assert differences(bicep, arm_resources(template())) == []


def test_outputs_agree() -> None:
    assert differences(bicep_outputs(pycep(MAIN)), arm_outputs(template())) == []


@pytest.mark.parametrize(
    "drift",
    [
        lambda d: d["parameters"]["workerMaxCount"].update(maxValue=99),
        lambda d: d["parameters"]["namePrefix"].update(defaultValue="rai"),
        lambda d: d["parameters"]["pipIndexUrl"].update(type="string"),
        lambda d: d["parameters"].pop("aptSource"),
        lambda d: d["parameters"]["osImage"]["allowedValues"].pop(),
    ],
)
def test_a_drifted_template_fails_the_parameter_comparison(drift: Any) -> None:
    doc = copy.deepcopy(template())
    drift(doc)
    assert differences(bicep_parameters(pycep(MAIN)), arm_parameters(doc))


def test_a_drifted_template_fails_the_resource_and_output_comparisons() -> None:
    doc = copy.deepcopy(template())
    head = next(
        d for d in doc["resources"] if d["name"].endswith("-head', parameters('namePrefix'))]")
    )
    head["properties"]["template"]["resources"][0]["apiVersion"] = "2023-09-01"
    assert differences(bicep_resources(), arm_resources(doc))
    doc = copy.deepcopy(template())
    doc["outputs"]["sshCmd"] = doc["outputs"].pop("sshCommand")
    assert differences(bicep_outputs(pycep(MAIN)), arm_outputs(doc))


# -- Terraform <-> Bicep, through the table -----------------------------------------------------
def test_the_table_names_every_terraform_variable_and_every_bicep_parameter() -> None:
    assert set(PARAMETERS) == set(tf_variables())
    bicep = set(pycep(MAIN)["parameters"])
    mapped = {v for v in PARAMETERS.values() if v is not None}
    assert mapped | set(BICEP_ONLY) == bicep
    assert not mapped & set(BICEP_ONLY)
    assert {k for k, v in PARAMETERS.items() if v is None} == set(TERRAFORM_ONLY)
    # The naming rule holds for every pair: snake_case -> camelCase.
    assert all(v == camel(k) for k, v in PARAMETERS.items() if v is not None)
    assert set(OUTPUTS) | TERRAFORM_ONLY_OUTPUTS == set(tf_outputs())
    assert not set(OUTPUTS) & TERRAFORM_ONLY_OUTPUTS
    assert set(OUTPUTS.values()) == set(pycep(MAIN)["outputs"]) == set(template()["outputs"])


def terraform_side() -> dict[str, dict[str, Any]]:
    """Terraform's variables in Bicep's names: required or default, and the numeric limits of
    their validation conditions (`var.x >= N`, `var.x <= M`)."""
    import re

    found = {}
    for name, v in tf_variables().items():
        target = PARAMETERS[name]
        if target is None or name in DIFFERENT:
            continue
        default = v.get("default", "<required>")
        if isinstance(default, str) and default.startswith('"'):
            default = json.loads(default)
        conditions = " ".join(c["condition"] for c in v.get("validation", []))
        low = re.search(rf"var\.{name} >= (\d+)", conditions)
        high = re.search(rf"var\.{name} <= (\d+)", conditions)
        found[target] = {
            "default": default,
            "min": low and int(low[1]),
            "max": high and int(high[1]),
        }
    return found


def bicep_side(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = {}
    for name, p in doc["parameters"].items():
        if name in BICEP_ONLY or name in {camel(k) for k in DIFFERENT}:
            continue
        default = p.get("defaultValue", "<required>")
        found[name] = {"default": default, "min": p.get("minValue"), "max": p.get("maxValue")}
    return found


def test_terraform_and_bicep_defaults_and_limits_agree() -> None:
    tf, bicep = terraform_side(), bicep_side(template())
    assert len(tf) >= 20
    assert differences(tf, bicep) == []


def test_a_drifted_terraform_default_or_limit_fails_the_comparison() -> None:
    doc = copy.deepcopy(template())
    doc["parameters"]["scaleInCooldownMinutes"]["defaultValue"] = 11
    assert differences(terraform_side(), bicep_side(doc))
    doc = copy.deepcopy(template())
    doc["parameters"]["tcpIdleTimeoutMinutes"]["minValue"] = 5
    assert differences(terraform_side(), bicep_side(doc))


def test_the_readme_table_is_the_table() -> None:
    """infra/bicep/README.md shows bicep_support's table: the two copies agree."""
    import re

    from bicep_support import BICEP

    text, outputs_table = (BICEP / "README.md").read_text().split("| Terraform output |")
    rows = re.findall(r"^\| (`[a-z_]+`|—) \| (`[A-Za-z]+`|—) \|", text, re.M)
    shown = {a.strip("`"): (None if b == "—" else b.strip("`")) for a, b in rows if a != "—"}
    assert shown == PARAMETERS
    bicep_only = {b.strip("`") for a, b in rows if a == "—"}
    assert bicep_only == set(BICEP_ONLY)
    outputs = dict(re.findall(r"^\| `([a-z_]+)` \| `([A-Za-z]+)` \|$", outputs_table, re.M))
    assert outputs == OUTPUTS


# -- Terraform <-> Bicep, decision for decision (stack_parity) ----------------------------------
def test_the_stacks_decide_alike_except_where_listed() -> None:
    """Tags, the autoscaler's endpoint in every cloud, the token's form, the vault's name: read
    from both stacks, equal except the listed differences (and each listed one still real)."""
    found = parity_differences(STACK, template())
    assert set(found) == set(BEHAVIOUR_DIFFERENT), found
    facts = terraform_facts(STACK)
    assert facts["arm_endpoint AzureUSGovernment"] == "https://management.usgovcloudapi.net/"
    assert facts["cluster_token"] == {"length": 64, "alphabet": "0123456789abcdef"}
    assert sum(k.startswith("tags ") for k in facts) >= 15
    # The nodes' one right on the results account, in its own resource group: Storage Blob Data
    # Contributor on the results container only (both stacks: Bicep's modules/results-role.bicep
    # deployed to the account's group); none without an account.
    assert facts["results_rights with account"] == [
        f"Storage Blob Data Contributor on {RESULTS_ACCOUNT}/blobServices/default/containers/"
        "results (ServicePrincipal)"
    ]
    assert facts["results_rights without"] == []
    # The head's rights: autostop's role on exactly the head VM, the scale set and the autoscale
    # setting in cpu mode; in ray mode Virtual Machine Contributor on the scale set (which holds
    # autostop's actions there) and autostop's role on the head VM; nothing without autostop.
    assert facts["head_rights cpu autostop"] == [
        "autostop on autoscale setting", "autostop on head VM", "autostop on scale set"
    ]  # fmt: skip
    assert facts["head_rights ray autostop"] == [
        "Virtual Machine Contributor on scale set", "autostop on head VM"
    ]  # fmt: skip
    assert (
        facts["head_rights cpu no autostop"] == []
        and facts["autostop_role cpu no autostop"] is None
    )
    assert len(facts["autostop_role cpu autostop"]["actions"]) == 6
    assert facts["start_outputs ray autostop"]["autoscale_setting_id"] == ""
    # The head on Spot: deallocated on eviction, at its own price or up to the regular one.
    assert facts["head_priority regular"] == {
        "priority": "Regular", "eviction policy": None, "max price": None
    }  # fmt: skip
    assert facts["head_priority spot"] == {
        "priority": "Spot", "eviction policy": "Deallocate", "max price": -1
    }  # fmt: skip
    assert facts["head_priority spot capped"]["max price"] == 0.125
    # A pool's zones: none on a regional pool; balance only with two zones or more.
    assert facts["pool_zones regional"] == {"zones": None, "zone balance": None}
    assert facts["pool_zones one zone"] == {"zones": ["2"], "zone balance": None}
    assert facts["pool_zones three balanced"] == {"zones": ["1", "2", "3"], "zone balance": True}
    # A pool's orchestration mode: one scale set of that kind; Flexible with one fault domain,
    # and the mixes only where asked (Instance Mix: the size "Mix").
    assert facts["pool_flexible uniform"] == {
        "mode": "Uniform", "scale sets": 1, "sku": "Standard_D4s_v5", "fault domains": None,
        "priority mix": None, "sku profile": None,
    }  # fmt: skip
    assert facts["pool_flexible flexible"] == {
        "mode": "Flexible", "scale sets": 1, "sku": "Standard_D4s_v5", "fault domains": 1,
        "priority mix": None, "sku profile": None,
    }  # fmt: skip
    assert facts["pool_flexible flexible mixed"] == {
        "mode": "Flexible", "scale sets": 1, "sku": "Mix", "fault domains": 1,
        "priority mix": {"baseRegularPriorityCount": 2, "regularPriorityPercentageAboveBase": 25},
        "sku profile": {"vmSizes": [{"name": "Standard_D4s_v5"}, {"name": "Standard_D4as_v5"}],
                        "allocationStrategy": "CapacityOptimized"},
    }  # fmt: skip
    # Flexible is every pool's mode unless it pins Uniform: the default pool "workers" and a
    # pool that leaves it out alike, in both stacks.
    assert facts["pool_mode no pools"] == {"workers": "Flexible"}
    assert facts["pool_mode pools leaving it out"] == {"cpu": "Flexible", "gpu": "Flexible"}
    assert facts["pool_mode workers pinned uniform"] == {"workers": "Uniform", "gpu": "Flexible"}
    # ... so the default pool in scaling mode ray reads its VMs' interfaces through the reader
    # role (a Flexible VM's interface is outside the scale set), and only in mode ray.
    assert facts["interface_reader_role ray autostop"]["actions"] == [
        "Microsoft.Network/networkInterfaces/read"
    ]
    assert facts["interface_reader_role cpu autostop"] is None
    # The head's rights and the outputs name the default pool's Flexible scale set.
    assert facts["start_outputs cpu autostop"]["scale_set_id"] == "scale set"


def test_the_type_table_names_every_resource_type_of_the_terraform_stack() -> None:
    declared = {t for t, _, _ in terraform_blocks(STACK, "resource")}
    assert declared == set(TF_TO_ARM)
    arm = {t for t in TF_TO_ARM.values() if t is not None}
    # The node image's gallery and definition (create_image_gallery) are the image template's
    # in Bicep (infra/bicep/image/): tagged alike there.
    image = bicep_tags(json.loads((MAIN.parent / "image" / "azuredeploy.json").read_text()))
    assert arm - set(bicep_tags(template())) - set(image) == {"Microsoft.Resources/resourceGroups"}
    tf_tags = terraform_tags(STACK)
    for rtype in ("Microsoft.Compute/galleries", "Microsoft.Compute/galleries/images"):
        assert tf_tags[rtype] == image[rtype] == {"the stack's tags"}, rtype


def _copy_terraform(tmp_path: Path) -> Path:
    """A copy of infra/terraform; its cluster module (with worker_pool beside it) returned."""
    stack = tmp_path / "terraform"
    skip = shutil.ignore_patterns(".terraform*", "tests", "examples", "results")
    shutil.copytree(STACK.parents[1], stack, ignore=skip)
    return stack / STACK.relative_to(STACK.parents[1])


SECRET_TAGS = (
    "  expiration_date = time_offset.cluster_token_expiry.rfc3339\n  tags            = var.tags\n"
)
TOKEN_48 = 'ephemeral "random_password" "cluster_token" {\n  length  = 48\n  special = false\n}\n'


@pytest.mark.parametrize(
    ("file", "edit", "reported"),
    [
        # Terraform's endpoint hard-coded to the public cloud's, as it was.
        ("locals.tf",
         lambda t: t.replace("= local.arm_endpoint\n", '= "https://management.azure.com"\n'),
         {"arm_endpoint AzureCloud", "arm_endpoint AzureUSGovernment",
          "arm_endpoint AzureChinaCloud"}),
        # ... or to the right one in the public cloud only.
        ("locals.tf",
         lambda t: t.replace("= local.arm_endpoint\n", '= "https://management.azure.com/"\n'),
         {"arm_endpoint AzureUSGovernment", "arm_endpoint AzureChinaCloud"}),
        # The secret without the tags.
        ("keyvault.tf",
         lambda t: t.replace(SECRET_TAGS, SECRET_TAGS.split("  tags")[0]),
         {"tags Microsoft.KeyVault/vaults/secrets"}),
        # The autostop role without the right to turn autoscale back on.
        ("identity.tf",
         lambda t: t.replace('    "Microsoft.Insights/autoscaleSettings/write",\n', ""),
         {"autostop_role cpu autostop", "autostop_role ray autostop"}),
        # Autostop's own assignment on the scale set in ray mode too.
        ("../worker_pool/main.tf",
         lambda t: t.replace('var.autostop.enabled && var.scaling_mode != "ray" ? 1 : 0',
                             "var.autostop.enabled ? 1 : 0"),
         {"head_rights ray autostop"}),
        # The autoscale setting's id as null (not "") in ray mode.
        ("../worker_pool/outputs.tf",
         lambda t: t.replace('try(azurerm_monitor_autoscale_setting.this[0].id, "")',
                             "one(azurerm_monitor_autoscale_setting.this[*].id)"),
         {"start_outputs ray autostop"}),
        # A Spot head deleted on eviction (its disk and state gone with it).
        ("head.tf",
         lambda t: t.replace('? "Deallocate" : null', '? "Delete" : null'),
         {"head_priority spot", "head_priority spot capped"}),
        # Zone balance asked of Azure with one zone too (Azure refuses it).
        ("../worker_pool/main.tf",
         lambda t: t.replace("length(var.zones) > 1 ? var.zone_balance : null",
                             "length(var.zones) > 0 ? var.zone_balance : null"),
         {"pool_zones one zone"}),
        # The default pool Uniform again in Terraform (what a pool leaves out stays Flexible).
        ("checks.tf",
         lambda t: t.replace('orchestration_mode, "Flexible")', 'orchestration_mode, "Uniform")'),
         {"pool_mode no pools", "interface_reader_role ray autostop"}),
        # ... or a pool leaving the mode out Uniform (the variable type's optional default).
        ("variables.tf",
         lambda t: t.replace('orchestration_mode = optional(string, "Flexible")',
                             'orchestration_mode = optional(string, "Uniform")'),
         {"pool_mode pools leaving it out", "pool_mode workers pinned uniform"}),
        # Spot Priority Mix's two numbers swapped in Terraform.
        ("../worker_pool/main.tf",
         lambda t: t.replace("= priority_mix.value.base_regular_count",
                             "= priority_mix.value.regular_percentage_above_base"),
         {"pool_flexible flexible mixed"}),
        # The token of 48 letters and digits.
        ("keyvault.tf",
         lambda t: re.sub(r'ephemeral "random_password" "cluster_token" \{.*?\n\}\n', TOKEN_48,
                          t, flags=re.S),
         {"cluster_token"}),
    ],
)  # fmt: skip
def test_a_terraform_copy_with_a_difference_put_back_is_reported(
    tmp_path: Path, file: str, edit: Any, reported: set[str]
) -> None:
    stack = _copy_terraform(tmp_path)
    text = (stack / file).read_text()
    changed = edit(text)
    assert changed != text, "the edit no longer applies: update the test"
    (stack / file).write_text(changed)
    found = parity_differences(stack, template())
    assert set(found) == set(BEHAVIOUR_DIFFERENT) | reported, found


def _secret(doc: dict[str, Any]) -> dict[str, Any]:
    return next(
        r
        for d in doc["resources"]
        for r in d["properties"]["template"]["resources"]
        if r["type"] == "Microsoft.KeyVault/vaults/secrets"
    )


def _autostop_role(doc: dict[str, Any]) -> dict[str, Any]:
    return next(
        r
        for d in doc["resources"]
        for r in d["properties"]["template"]["resources"]
        if r["type"] == "Microsoft.Authorization/roleDefinitions"
    )


def _head_deployment(doc: dict[str, Any]) -> dict[str, Any]:
    return next(
        d for d in doc["resources"] if d["name"].endswith("-head', parameters('namePrefix'))]")
    )


def _results_role(doc: dict[str, Any]) -> dict[str, Any]:
    return next(
        d
        for d in doc["resources"]
        if d["name"].endswith("-results-role', parameters('namePrefix'))]")
    )


def _results_role_in_the_cluster_group(doc: dict[str, Any]) -> None:
    """The role's deployment without its subscriptionId/resourceGroup, the head's dependsOn
    naming it in the cluster's group."""
    role = _results_role(doc)
    for key in ("subscriptionId", "resourceGroup"):
        role.pop(key)
    head = _head_deployment(doc)
    head["dependsOn"] = [
        dep
        if "results-role" not in dep
        else f"[resourceId('Microsoft.Resources/deployments', {role['name'][1:-1]})]"
        for dep in head["dependsOn"]
    ]


def _uniform_by_default(doc: dict[str, Any]) -> None:
    """The template's pools Uniform where they leave the mode out, as before."""
    [loop] = [c for c in doc["variables"]["copy"] if c["name"] == "pools"]
    mode = loop["input"]["orchestrationMode"]
    assert mode.endswith(", 'Flexible')]"), mode
    loop["input"]["orchestrationMode"] = mode.replace(", 'Flexible')]", ", 'Uniform')]")


@pytest.mark.parametrize(
    ("edit", "reported"),
    [
        (lambda d: _secret(d).pop("tags"), {"tags Microsoft.KeyVault/vaults/secrets"}),
        # Uniform the default again in the template: every pool that leaves the mode out, and
        # with it the interface reader of mode ray.
        (_uniform_by_default,
         {"pool_mode no pools", "pool_mode pools leaving it out",
          "pool_mode workers pinned uniform", "interface_reader_role ray autostop"}),
        # A role that may also delete VMs.
        (lambda d: _autostop_role(d)["properties"]["permissions"][0]["actions"].append(
            "Microsoft.Compute/virtualMachines/delete"),
         {"autostop_role cpu autostop", "autostop_role ray autostop"}),
        # The head VM's assignment taken away.
        (lambda d: _head_deployment(d)["properties"]["template"]["resources"].pop(),
         {"head_rights cpu autostop", "head_rights ray autostop"}),
        (lambda d: _secret(d).update(tags="[createObject()]"),
         {"tags Microsoft.KeyVault/vaults/secrets"}),
        # The nodes' role on the results container: a reader's, or in the cluster's group.
        (lambda d: _results_role(d)["properties"]["template"]["variables"].update(
            blobDataContributorRoleId="2a2b9908-6ea1-4ae2-8e65-a410df84e7d1"),
         {"results_rights with account"}),
        (_results_role_in_the_cluster_group, {"results_rights with account"}),
    ],
)  # fmt: skip
def test_a_template_with_a_difference_put_back_is_reported(edit: Any, reported: set[str]) -> None:
    doc = copy.deepcopy(template())
    edit(doc)
    assert parity_differences(STACK, doc).keys() == set(BEHAVIOUR_DIFFERENT) | reported


def test_a_template_whose_endpoint_is_the_public_clouds_is_reported() -> None:
    text = json.dumps(template())
    assert "environment().resourceManager" in text
    doc = json.loads(
        text.replace("environment().resourceManager", "'https://management.azure.com/'")
    )
    assert parity_differences(STACK, doc).keys() == set(BEHAVIOUR_DIFFERENT) | {
        "arm_endpoint AzureUSGovernment",
        "arm_endpoint AzureChinaCloud",
    }


@pytest.mark.slow  # the stand-in compiler takes 1-2 minutes on 2 shared cores
def test_a_bicep_copy_with_a_difference_put_back_is_reported(tmp_path: Path) -> None:
    """The secret's tags taken out of a copy of modules/keyvault.bicep, the copy compiled."""
    from bicep_to_arm import Compiler

    from bicep_support import REPO

    for part in ("infra/bicep", "cloud-init/rendered"):
        shutil.copytree(REPO / part, tmp_path / part)
    module = tmp_path / "infra/bicep/modules/keyvault.bicep"
    text = module.read_text()
    secret = text.index("resource secret ")
    changed = text[:secret] + text[secret:].replace("  tags: tags\n", "", 1)
    assert changed != text
    module.write_text(changed)
    doc = Compiler(tmp_path / "infra/bicep/main.bicep").template()
    assert parity_differences(STACK, doc).keys() == set(BEHAVIOUR_DIFFERENT) | {
        "tags Microsoft.KeyVault/vaults/secrets"
    }


def test_terraform_refuses_a_cloud_whose_endpoint_it_does_not_know() -> None:
    """A vault URI of another cloud (Azure Germany, retired) gives no endpoint, and the head's
    precondition refuses an empty one."""
    values = terraform_locals(STACK)
    endpoint = expand(
        _hcl(values["deploy_values"]["ARM_ENDPOINT"]),
        values,
        {"azurerm_key_vault.this.vault_uri": "https://ray-kv-0123.vault.microsoftazure.de/"},
    )
    assert terraform_console([endpoint]) == [""]
    [head] = [b for t, _, b in terraform_blocks(STACK, "resource") if t.endswith("_machine")]
    [precondition] = head["lifecycle"][0]["precondition"]
    assert precondition["condition"] == '${local.arm_endpoint != ""}'


def test_the_readme_lists_the_differences_of_decision() -> None:
    from bicep_support import BICEP

    section = (BICEP / "README.md").read_text().split("## Terraform and Bicep, decision for")[1]
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| (.+) \|$", section, re.M))
    assert rows == BEHAVIOUR_DIFFERENT
