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
from pathlib import Path
from typing import Any

import pytest

from bicep_support import REPO, pycep, template

TYPES = Path("/work/shared/azure-types/arm_types.json")
if not TYPES.exists():
    TYPES = REPO.parent / "shared" / "azure-types" / "arm_types.json"
STRING = r"'(?:[^']|'')*'"
CALL = re.compile(r"\b(parameters|variables|resourceId|reference)\(")


def args_of(text: str, start: int) -> list[str]:
    """The top-level arguments of the call whose '(' is at ``start``, as text."""
    depth, args, current, i = 0, [], "", start
    while i < len(text):
        c = text[i]
        if c == "'":
            m = re.compile(STRING).match(text, i)
            assert m, text[i:]
            current += m.group(0)
            i = m.end()
            continue
        if c in "([":
            depth += 1
            if depth > 1:
                current += c
        elif c in ")]":
            depth -= 1
            if depth == 0:
                args.append(current.strip())
                return [a for a in args if a]
            current += c
        elif c == "," and depth == 1:
            args.append(current.strip())
            current = ""
        else:
            current += c
        i += 1
    raise AssertionError(f"unbalanced: {text[start:]}")


def strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node] if node.startswith("[") and not node.startswith("[[") else []
    if isinstance(node, dict):
        return [s for v in node.values() for s in strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in strings(v)]
    return []


def scopes(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """(name, template, its expressions outside nested inner-scope templates)."""
    found = []
    top = {k: v for k, v in doc.items() if k != "resources"}
    top_resources = []
    for r in doc["resources"]:
        inner = r.get("properties", {}).get("template")
        if inner is not None:
            assert r["properties"]["expressionEvaluationOptions"]["scope"] == "inner"
            found += scopes(inner)
            r = {**r, "properties": {k: v for k, v in r["properties"].items() if k != "template"}}
        top_resources.append(r)
    found.append((doc.get("metadata", {}).get("name", "?"), doc, [top, *top_resources]))
    return found


def resource_args(r: dict[str, Any]) -> list[str]:
    """The arguments resourceId() takes for resource ``r`` (its name's segments)."""
    name = r["name"]
    if name.startswith("["):
        args = args_of(name, 0)
        if len(args) == 1:
            expr = args[0]
            m = re.fullmatch(r"format\('\{0\}(?:/\{\d\})+', (.*)\)", expr)
            if m:
                return args_of(expr, expr.index("("))[1:]
            return [expr]
    return [f"'{part}'" for part in name.split("/")]


def _item(args: list[str]) -> tuple[str, ...]:
    """A resource's name arguments with the item of a copy loop as any item: a loop declares
    its name with copyIndex(), a reference names one item (by index, or with another loop's
    copyIndex() over the same array)."""
    return tuple(re.sub(r"\[(copyIndex\(\)|\d+)\]", "[*]", a) for a in args)


def existing_types() -> dict[str, set[str]]:
    """The types each Bicep file (by its `metadata name`) declares ``existing``: resources it
    names but does not deploy (bicep build emits none), whose resourceId() then resolves to
    nothing in the template."""
    found: dict[str, set[str]] = {}
    for path in (REPO / "infra" / "bicep").rglob("*.bicep"):
        [title] = re.findall(r"^metadata name = '(.*)'$", path.read_text(), re.M) or ["?"]
        for r in pycep(path).get("resources", {}).values():
            if r.get("existing"):
                found.setdefault(title, set()).add(r["type"].lower())
    return found


def problems(doc: dict[str, Any]) -> list[str]:
    out = []
    existing = existing_types()
    all_resources = []
    for _, tpl, _ in scopes(doc):
        all_resources += tpl["resources"]
    ids = {(r["type"].lower(), _item(resource_args(r))) for r in all_resources}
    for r in all_resources:  # subnets declared inline in their virtual network
        for subnet in r.get("properties", {}).get("subnets", []):
            name = subnet["name"]
            name = name[1:-1] if name.startswith("[") else f"'{name}'"
            ids.add((f"{r['type'].lower()}/subnets", (*resource_args(r), name)))
    for name, tpl, nodes in scopes(doc):
        params, variables = set(tpl.get("parameters", {})), set(tpl.get("variables", {}))
        variables |= {c["name"] for c in tpl.get("variables", {}).get("copy", [])}
        for text in strings(nodes):
            for m in CALL.finditer(text):
                fn, args = m.group(1), args_of(text, m.end() - 1)
                if fn == "parameters" and args[0].strip("'") not in params:
                    out.append(f"{name}: {text[:80]}: no parameter {args[0]}")
                if fn == "variables" and args[0].strip("'") not in variables:
                    out.append(f"{name}: {text[:80]}: no variable {args[0]}")
                if fn == "resourceId":
                    key = (args[0].strip("'").lower(), _item(args[1:]))
                    if key not in ids and key[0] not in existing.get(name, set()):
                        out.append(f"{name}: resourceId{key} declared nowhere")
        local = {(r["type"].lower(), _item(resource_args(r))) for r in tpl["resources"]}
        for r in tpl["resources"]:
            for dep in r.get("dependsOn", []):
                if dep.startswith("[extensionResourceId("):
                    # a deployment in another group: extensionResourceId(group, type, names)
                    args = args_of(dep, len("[extensionResourceId"))[1:]
                else:
                    args = args_of(dep, dep.index("resourceId(") + len("resourceId"))
                if (args[0].strip("'").lower(), _item(args[1:])) not in local:
                    out.append(f"{name}: {r['name']} dependsOn {dep}, not in its template")
    return out


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
@pytest.fixture(scope="module")
def types() -> dict[str, Any]:
    if not TYPES.exists():
        pytest.skip(f"{TYPES} absent: the workflow's bicep build checks the types")
    loaded: dict[str, Any] = json.loads(TYPES.read_text())
    return loaded


def type_errors(value: Any, index: int, types: dict[str, Any], path: str) -> list[str]:
    t = types["types"][index]
    kind = t["k"]
    if isinstance(value, str) and value.startswith("[") and not value.startswith("[["):
        return []  # an expression: its value is known at deployment only
    if kind == "any":
        return []
    if kind == "union":
        options = [type_errors(value, e, types, path) for e in t["elems"]]
        return [] if any(not o for o in options) else [f"{path}: {value!r} fits none of the union"]
    if kind == "lit":
        return [] if value == t["v"] else [f"{path}: {value!r} is not {t['v']!r}"]
    if kind == "string":
        if not isinstance(value, str):
            return [f"{path}: {value!r} is not a string"]
        if len(value) < t.get("min", 0) or len(value) > t.get("max", 10**9):
            return [f"{path}: length {len(value)} outside {t.get('min')}..{t.get('max')}"]
        return []
    if kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
        return [] if ok else [f"{path}: {value!r} is not an int"]
    if kind == "bool":
        return [] if isinstance(value, bool) else [f"{path}: {value!r} is not a bool"]
    if kind == "array":
        if not isinstance(value, list):
            return [f"{path}: {value!r} is not an array"]
        return [
            e for i, v in enumerate(value) for e in type_errors(v, t["item"], types, f"{path}[{i}]")
        ]
    if not isinstance(value, dict):
        return [f"{path}: {value!r} is not an object"]
    if kind == "disc":
        # A discriminated object (Image Builder's sources, customizers, distributors): the
        # discriminator property picks the variant; the base's properties hold for every one.
        tag = value.get(t["disc"])
        if tag not in t["elems"]:
            return [f"{path}.{t['disc']}: {tag!r} is none of {sorted(t['elems'])}"]
        variant = types["types"][t["elems"][tag]]
        t = {**variant, "props": {**t.get("base", {}), **variant.get("props", {})}}
    else:
        assert kind == "object", kind
    props = {k.lower(): (k, v) for k, v in t.get("props", {}).items()}
    out = []
    for key, v in value.items():
        if key.lower() not in props:
            if "addl" in t:
                out += type_errors(v, t["addl"], types, f"{path}.{key}")
            else:
                out.append(f"{path}.{key}: no such property")
            continue
        real, (sub, flags) = props[key.lower()]
        if flags & types["flags"]["ReadOnly"] and not flags & types["flags"]["Required"]:
            out.append(f"{path}.{key}: read-only")
        out += type_errors(v, sub, types, f"{path}.{real}")
    for key, (real, (_, flags)) in props.items():
        if flags & types["flags"]["Required"] and key not in {k.lower() for k in value}:
            out.append(f"{path}.{real}: required, missing")
    return out


# Template-level keys (type and apiVersion pick the definition; scope is an extension
# resource's target), not properties of the resource body.
ARM_ONLY_KEYS = {"dependsOn", "copy", "condition", "comments", "metadata", "scope", "type",
                 "apiVersion"}  # fmt: skip


def resource_errors(doc: dict[str, Any], types: dict[str, Any]) -> tuple[list[str], set[str]]:
    """(errors, type@apiVersion checked by existence only: no property tree in the file)."""
    errors, unchecked = [], set()
    for _, tpl, _ in scopes(doc):
        for r in tpl["resources"]:
            key = f"{r['type']}@{r['apiVersion']}".lower()
            known = types["known_versions"].get(r["type"].lower(), {})
            versions = known.get("versions", [])
            if r["apiVersion"] not in versions:
                errors.append(f"{key}: Azure publishes no such type/API version")
                continue
            if key not in types["resources"]:
                # The file keeps property trees for the newest stable versions only: the
                # nearest newer one stands in (properties are added, rarely taken away).
                prefix = f"{r['type']}@".lower()
                newer = sorted(k for k in types["resources"] if k.startswith(prefix) and k > key)
                if not newer:
                    unchecked.add(key)
                    continue
                key = newer[0]
            body = {k: v for k, v in r.items() if k not in ARM_ONLY_KEYS}
            if r["type"] == "Microsoft.Resources/deployments":
                # a nested deployment's target group, a template-level key of deployments
                body = {
                    k: v for k, v in body.items() if k not in ("subscriptionId", "resourceGroup")
                }
            errors += type_errors(body, types["resources"][key]["body"], types, key)
    return errors, unchecked


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
    [role] = [
        r
        for _, tpl, _ in scopes(template())
        for r in tpl["resources"]
        if r["type"] == "Microsoft.Authorization/roleDefinitions"
    ]
    assert role["apiVersion"] == "2022-04-01"
    assert set(role) - ARM_ONLY_KEYS == {"name", "properties"}
    props = role["properties"]
    assert set(props) == {"roleName", "description", "type", "permissions", "assignableScopes"}
    assert props["type"] == "CustomRole"
    [permission] = props["permissions"]
    assert set(permission) == {"actions", "notActions"} and permission["notActions"] == []
    assert all(isinstance(a, str) and a.count("/") >= 2 for a in permission["actions"])
    assert props["assignableScopes"] == ["[resourceGroup().id]"]


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
