"""The azurerm (and random) provider schema, read offline, and a checker for .tf files.

Why this exists: ``terraform init`` cannot download providers on this machine, so neither
``terraform validate`` nor a plan can tell us that an argument or block is misspelled or that a
required argument is missing. The schema is still available offline: the CDK for Terraform
bindings on PyPI (``cdktf-cdktf-provider-azurerm==14.23.1`` = azurerm 4.55.0,
``cdktf-cdktf-provider-random==12.0.1`` = random 3.7.2, ``cdktf-cdktf-provider-time==11.0.1`` =
time 0.13.1) carry a jsii assembly (``_jsii/*.jsii.tgz`` → ``package/.jsii``, JSON) that
describes every resource's configuration struct.

Ephemeral resources (``ephemeral "random_password" ...``, Terraform 1.10+) are not in the
assemblies: cdktf never modelled them. Their arguments come from ``EPHEMERAL_RESOURCES`` below,
written from the providers' own documentation, and ``extract`` adds them to the schema.

How the assembly maps to Terraform names (proved on every property by ``extract``):

* A resource is a jsii *class* whose initializer takes ``(scope, id, config: <X>Config)``. Its
  docs link ends in ``/docs/resources/<name>`` (or ``/docs/data-sources/<name>``); the Terraform
  type is ``<provider>_<name>`` (``azurerm_linux_virtual_machine_scale_set``).
* Every property of a config struct is documented with a registry link whose anchor is the
  snake_case Terraform name (``...#admin_username LinuxVirtualMachineScaleSet#admin_username``).
  That anchor, not a case conversion of the camelCase property name, is the name we use;
  ``extract`` also checks that camelCase(anchor) equals the property name and records any
  exception, so a change in the generator cannot go unnoticed.
* A property without ``"optional": true`` is required (``Required`` in the provider schema, or
  a block with ``min_items >= 1``).
* A property whose summary reads ``"<name> block."`` is a nested block; its type is a jsii
  struct (one block) or an array of structs (a list/set of blocks). A struct-typed property
  without that summary is an attribute in "attribute-as-blocks" mode (``security_rule`` of
  ``azurerm_network_security_group``): Terraform accepts it both as an attribute and as blocks.
* ``id`` on SDKv2 resources is listed by cdktf but is computed: it is left out.

Usage::

    python scripts/azurerm_schema.py extract --out .tools/azurerm-schema/schema.json WHEEL...
    python scripts/azurerm_schema.py check --schema .tools/azurerm-schema/schema.json DIR

The set-up step ``scripts/setup.d/10-azurerm-schema.sh`` downloads the wheels and runs
``extract``; ``tests/test_terraform_schema.py`` runs ``check`` on the stack and on broken
fixtures.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_FORMAT = 2
"""Bumped whenever the layout of the extracted JSON changes (the set-up step re-extracts).
2: providers carry ``ephemeral_resources``."""

_DOC_LINK = re.compile(
    r"registry\.terraform\.io/providers/(?P<ns>[\w-]+)/(?P<provider>[\w-]+)/(?P<version>[\w.-]+)"
    r"/docs(?:/(?P<kind>resources|data-sources)/(?P<name>\w+))?(?:#(?P<anchor>\w+))?"
)

# Arguments and blocks that Terraform itself understands in every resource/data block.
META_ATTRIBUTES = {"count", "for_each", "depends_on", "provider"}
META_BLOCKS = {"lifecycle", "provisioner", "connection"}
# Arguments of a provider block that are Terraform's, not the provider's.
PROVIDER_META_ATTRIBUTES = {"alias", "version"}
# Terraform's built-in provider (terraform.io/builtin/terraform): no download, no assembly.
BUILTIN_TERRAFORM = {
    "provider_version": "builtin",
    "assembly": "terraform.io/builtin/terraform",
    "provider": {"attributes": {}, "blocks": {}},
    "resources": {
        "terraform_data": {
            "attributes": {"input": {"required": False}, "triggers_replace": {"required": False}},
            "blocks": {},
        }
    },
    "data_sources": {},
    "ephemeral_resources": {},
}


# Ephemeral resource types, by provider, in the schema's own layout. Only types this repository
# uses are listed; an ephemeral block of any other type is reported as unknown.
EPHEMERAL_RESOURCES: dict[str, dict[str, Any]] = {
    "random": {
        # hashicorp/terraform-provider-random docs/ephemeral-resources/password.md (3.7.x):
        # length is required; the rest optional. No keepers and no `number` (unlike the
        # random_password resource); result and bcrypt_hash are read-only.
        "random_password": {
            "attributes": {
                "length": {"required": True},
                **{
                    name: {"required": False}
                    for name in (
                        "lower",
                        "min_lower",
                        "min_numeric",
                        "min_special",
                        "min_upper",
                        "numeric",
                        "override_special",
                        "special",
                        "upper",
                    )
                },
            },
            "blocks": {},
        },
    },
}


def camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


# --------------------------------------------------------------------------------------------
# Extraction: jsii assembly -> compact schema
# --------------------------------------------------------------------------------------------


def load_assembly(wheel: Path) -> dict[str, Any]:
    """The jsii assembly (``package/.jsii``) inside a cdktf provider wheel, as JSON."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.endswith(".jsii.tgz") and "/_jsii/" in n]
        if len(names) != 1:
            raise ValueError(f"{wheel}: expected one _jsii/*.jsii.tgz, found {names}")
        blob = zf.read(names[0])
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tf:
        member = tf.extractfile("package/.jsii")
        if member is None:
            raise ValueError(f"{wheel}: package/.jsii missing from {names[0]}")
        return json.load(member)


def _doc_text(entry: dict[str, Any]) -> str:
    docs = entry.get("docs", {})
    return " ".join(str(docs.get(k, "")) for k in ("summary", "remarks"))


def _struct_of(type_ref: dict[str, Any], types: dict[str, Any]) -> tuple[str | None, bool]:
    """(fqn of the jsii struct a property holds, whether it holds a collection of them)."""
    candidates: list[tuple[dict[str, Any], bool]] = [(type_ref, False)]
    while candidates:
        ref, many = candidates.pop()
        if "union" in ref:
            candidates.extend((t, many) for t in ref["union"]["types"])
        elif "collection" in ref:
            candidates.append((ref["collection"]["elementtype"], True))
        elif "fqn" in ref and types.get(ref["fqn"], {}).get("datatype"):
            return ref["fqn"], many
    return None, False


@dataclass
class Extraction:
    mismatched_names: list[str] = field(default_factory=list)
    """Properties whose camelCase name is not camelCase(anchor): reported, never guessed."""
    properties: int = 0


def _block_schema(fqn: str, types: dict[str, Any], ex: Extraction, where: str) -> dict[str, Any]:
    struct = types[fqn]
    attributes: dict[str, Any] = {}
    blocks: dict[str, Any] = {}
    for prop in struct.get("properties", []):
        link = _DOC_LINK.search(_doc_text(prop))
        if link is None or link.group("anchor") is None:
            raise ValueError(f"{fqn}.{prop['name']}: no registry anchor in its docs")
        name = link.group("anchor")
        ex.properties += 1
        if camel(name) != prop["name"]:
            ex.mismatched_names.append(f"{where}: {prop['name']} <- #{name}")
        if name == "id" and "automatically added" in _doc_text(prop):
            continue
        required = not prop.get("optional", False)
        struct_fqn, many = _struct_of(prop["type"], types)
        summary = prop.get("docs", {}).get("summary", "")
        if struct_fqn is not None:
            entry = {
                "required": required,
                "max_one": not many,
                "attribute_mode": summary != f"{name} block.",
                "block": _block_schema(struct_fqn, types, ex, f"{where}.{name}"),
            }
            blocks[name] = entry
        else:
            attributes[name] = {"required": required}
    return {"attributes": attributes, "blocks": blocks}


def extract(assembly: dict[str, Any]) -> tuple[dict[str, Any], Extraction]:
    """Provider, resource and data source schemas of one cdktf provider assembly."""
    types: dict[str, Any] = assembly["types"]
    ex = Extraction()
    provider_name = None
    version = None
    provider_block = None
    resources: dict[str, Any] = {}
    data_sources: dict[str, Any] = {}
    for t in types.values():
        if t.get("kind") != "class":
            continue
        params = t.get("initializer", {}).get("parameters", [])
        config = [p for p in params if p["name"] == "config" and "fqn" in p["type"]]
        if not config:
            continue
        link = _DOC_LINK.search(_doc_text(t))
        if link is None:
            continue
        provider_name, version = link.group("provider"), link.group("version")
        config_fqn = config[0]["type"]["fqn"]
        kind, name = link.group("kind"), link.group("name")
        if kind is None:
            provider_block = _block_schema(config_fqn, types, ex, provider_name)
            continue
        tf_type = f"{provider_name}_{name}"
        schema = _block_schema(config_fqn, types, ex, tf_type)
        (resources if kind == "resources" else data_sources)[tf_type] = schema
    if provider_name is None or provider_block is None:
        raise ValueError("no provider class found in the assembly")
    for meta in PROVIDER_META_ATTRIBUTES:
        provider_block["attributes"].pop(meta, None)
    return {
        "provider_version": version,
        "assembly": f"{assembly['name']}@{assembly['version']}",
        "provider": provider_block,
        "resources": dict(sorted(resources.items())),
        "data_sources": dict(sorted(data_sources.items())),
        "ephemeral_resources": EPHEMERAL_RESOURCES.get(provider_name, {}),
    }, ex


# --------------------------------------------------------------------------------------------
# Checking: parsed HCL -> findings
# --------------------------------------------------------------------------------------------


def _unquote(label: str) -> str:
    return label[1:-1] if len(label) >= 2 and label[0] == label[-1] == '"' else label


def _is_block(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, dict) and v.get("__is_block__") for v in value)
    )


def _check_body(body: dict[str, Any], schema: dict[str, Any], where: str, meta: bool) -> list[str]:
    """Findings for one block body against its schema (recursively)."""
    problems: list[str] = []
    attrs, blocks = schema["attributes"], schema["blocks"]
    seen: set[str] = set()
    for key, value in body.items():
        if key.startswith("__") and key.endswith("__"):
            continue
        if key == "dynamic" and isinstance(value, list):
            for dyn in value:
                for label, dyn_body in dyn.items():
                    if label.startswith("__"):
                        continue
                    name = _unquote(label)
                    seen.add(name)
                    if name not in blocks:
                        problems.append(f"{where}: dynamic block {name!r} is not a block here")
                        continue
                    for content in dyn_body.get("content", []):
                        problems += _check_body(
                            content, blocks[name]["block"], f"{where}.{name}", meta=False
                        )
            continue
        if _is_block(value):
            if meta and key in META_BLOCKS:
                if key == "lifecycle":
                    problems += _check_ignore_changes(value, schema, where)
                continue
            if key not in blocks:
                kind = "an argument, not a block" if key in attrs else "not a known block"
                problems.append(f"{where}: {key!r} is {kind}")
                continue
            seen.add(key)
            if blocks[key]["max_one"] and len(value) > 1:
                problems.append(f"{where}: block {key!r} may appear only once")
            for item in value:
                problems += _check_body(item, blocks[key]["block"], f"{where}.{key}", meta=False)
            continue
        # an argument
        if meta and key in META_ATTRIBUTES:
            continue
        if key in attrs or (key in blocks and blocks[key]["attribute_mode"]):
            seen.add(key)
            continue
        kind = "a block, not an argument" if key in blocks else "not a known argument"
        problems.append(f"{where}: {key!r} is {kind}")
    for name, spec in {**attrs, **blocks}.items():
        if spec["required"] and name not in seen:
            problems.append(f"{where}: required {name!r} is missing")
    return problems


def _check_ignore_changes(lifecycle: list[dict[str, Any]], schema: dict[str, Any], where: str):
    """``lifecycle { ignore_changes = [...] }`` must name the resource's own arguments."""
    problems = []
    for block in lifecycle:
        names = block.get("ignore_changes", [])
        if not isinstance(names, list):  # `all`
            continue
        for name in names:
            top = re.split(r"[.\[]", str(name).strip('"'), maxsplit=1)[0]
            if top not in schema["attributes"] and top not in schema["blocks"]:
                problems.append(f"{where}: lifecycle.ignore_changes names unknown {top!r}")
    return problems


def load_schema(path: Path) -> dict[str, Any]:
    data = json.loads(Path(path).read_text())
    if data.get("format") != SCHEMA_FORMAT:
        raise ValueError(f"{path}: schema format {data.get('format')} != {SCHEMA_FORMAT}")
    return data


def parse_tf(path: Path) -> dict[str, Any]:
    import hcl2  # python-hcl2 (dev extra)

    with open(path) as fh:
        return hcl2.load(fh)


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)
    resources: list[str] = field(default_factory=list)
    """``type.name`` of every resource, ``data.type.name`` of every data source and
    ``ephemeral.type.name`` of every ephemeral resource checked."""
    arguments: int = 0
    """Arguments and blocks checked (every key of every checked body, nested ones included)."""


def _count_keys(body: Any) -> int:
    if isinstance(body, list):
        return sum(_count_keys(b) for b in body if isinstance(b, dict))
    if not isinstance(body, dict):
        return 0
    n = 0
    for key, value in body.items():
        if key.startswith("__"):
            continue
        n += 1
        if _is_block(value):
            n += _count_keys(value)
        elif key == "dynamic" and isinstance(value, list):
            for dyn in value:
                for label, dyn_body in dyn.items():
                    if not label.startswith("__"):
                        n += _count_keys(dyn_body.get("content", []))
    return n


def check_files(paths: list[Path], schema: dict[str, Any]) -> Report:
    """Check every resource, data source, ephemeral resource and provider block of ``paths``
    against ``schema``."""
    report = Report()
    providers = {"terraform": BUILTIN_TERRAFORM, **schema["providers"]}
    sections = (
        ("resource", "resources"),
        ("data", "data_sources"),
        ("ephemeral", "ephemeral_resources"),
    )
    for path in paths:
        doc = parse_tf(path)
        for section, kind in sections:
            for entry in doc.get(section, []):
                for raw_type, instances in entry.items():
                    tf_type = _unquote(raw_type)
                    prefix = tf_type.split("_", 1)[0]
                    for raw_name, body in instances.items():
                        if raw_name.startswith("__"):
                            continue
                        prefix_label = "" if section == "resource" else f"{section}."
                        label = f"{prefix_label}{tf_type}.{_unquote(raw_name)}"
                        where = f"{path.name}: {label}"
                        report.resources.append(label)
                        if prefix not in providers:
                            report.problems.append(f"{where}: no schema for provider {prefix!r}")
                            continue
                        known = providers[prefix][kind]
                        if tf_type not in known:
                            report.problems.append(f"{where}: unknown {section} type {tf_type!r}")
                            continue
                        report.arguments += _count_keys(body)
                        report.problems += _check_body(body, known[tf_type], where, meta=True)
        for entry in doc.get("provider", []):
            for raw_name, body in entry.items():
                name = _unquote(raw_name)
                where = f"{path.name}: provider {name}"
                if name not in providers:
                    report.problems.append(f"{where}: no schema for provider {name!r}")
                    continue
                body = {k: v for k, v in body.items() if k not in PROVIDER_META_ATTRIBUTES}
                report.arguments += _count_keys(body)
                report.problems += _check_body(body, providers[name]["provider"], where, False)
    return report


def check_dir(directory: Path, schema: dict[str, Any]) -> Report:
    """The stack's .tf files, those of its local child modules (modules/*/) and of the roots
    that call them (examples/*/)."""
    root = Path(directory)
    paths = [*root.glob("*.tf"), *root.glob("modules/*/*.tf"), *root.glob("examples/*/*.tf")]
    return check_files(sorted(paths), schema)


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def _cmd_extract(args: argparse.Namespace) -> int:
    out: dict[str, Any] = {"format": SCHEMA_FORMAT, "providers": {}, "mismatched_names": {}}
    for wheel in args.wheels:
        schema, ex = extract(load_assembly(Path(wheel)))
        name = schema["assembly"].split("/provider-")[-1].split("@")[0]
        out["providers"][name] = schema
        out["mismatched_names"][name] = ex.mismatched_names
        print(
            f"{wheel}: {name} {schema['provider_version']}: {len(schema['resources'])} resources,"
            f" {len(schema['data_sources'])} data sources, {ex.properties} properties,"
            f" {len(ex.mismatched_names)} names that are not camelCase(anchor)",
            file=sys.stderr,
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(f"{args.out}.tmp")
    tmp.write_text(json.dumps(out, separators=(",", ":"), sort_keys=True))
    tmp.replace(args.out)
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    report = check_dir(Path(args.directory), load_schema(Path(args.schema)))
    for problem in report.problems:
        print(problem)
    print(
        f"{len(report.resources)} resources/data sources, {report.arguments} arguments and blocks"
        f" checked, {len(report.problems)} problems",
        file=sys.stderr,
    )
    return 1 if report.problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("extract", help="jsii assemblies of cdktf provider wheels -> schema JSON")
    p.add_argument("--out", required=True)
    p.add_argument("wheels", nargs="+")
    p.set_defaults(func=_cmd_extract)
    p = sub.add_parser("check", help="check the .tf files of a directory against the schema")
    p.add_argument("--schema", required=True)
    p.add_argument("directory")
    p.set_defaults(func=_cmd_check)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
