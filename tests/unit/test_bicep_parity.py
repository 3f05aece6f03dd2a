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
from typing import Any

import pytest
from terraform_docs import outputs as tf_outputs
from terraform_docs import variables as tf_variables

from bicep_support import (
    BICEP_ONLY,
    DIFFERENT,
    MAIN,
    MODULES,
    OUTPUTS,
    PARAMETERS,
    TERRAFORM_ONLY,
    camel,
    pycep,
    template,
)

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
    """Each module's resources as (type, apiVersion), sorted; main.bicep declares none."""
    found = {}
    for name, module in pycep(MAIN)["modules"].items():
        parsed = pycep(MODULES.parent / module["detail"]["path"])
        found[name] = sorted(
            (r["type"], r["api_version"]) for r in parsed.get("resources", {}).values()
        )
    return found


def arm_resources(doc: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    """Each nested deployment's resources, keyed by the module name the deployment's name
    carries ('{0}-network' -> network; the checks module is '{0}-input-checks')."""
    # A conditional module (`= if (...) {...}`) keeps its body one level down.
    configs = {k: m["config"].get("config", m["config"]) for k, m in pycep(MAIN)["modules"].items()}
    modules = {c["name"]: k for k, c in configs.items()}
    found = {}
    for dep in doc["resources"]:
        assert dep["type"] == "Microsoft.Resources/deployments", dep["type"]
        suffix = dep["name"].split("{0}", 1)[1].split("'", 1)[0]
        [module] = [k for n, k in modules.items() if n == "${namePrefix}" + suffix]
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
    assert set(OUTPUTS) == set(tf_outputs())
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
