"""Checking a compiled ARM template as Azure would: every parameters()/variables()/resourceId()
call and every dependsOn entry resolves to something the template declares (in the scope that
can see it), and each resource's properties are valid for its type and API version, against
Azure's own resource type definitions (TYPES: extracted from Azure/bicep-types-az, not in the
repository). The cluster's, the node image's and the results storage's templates are held to
it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from bicep_support import REPO, pycep

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
