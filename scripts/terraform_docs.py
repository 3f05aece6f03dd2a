"""infra/terraform/README.md carries the stack's requirements / providers / resources / inputs /
outputs tables in terraform-docs' markdown format, between terraform-docs' own markers, and
they match the .tf files. terraform-docs itself is not installable here (no PyPI or Debian
package), so this module generates the same tables:

    .venv/bin/python scripts/terraform_docs.py                    # rewrite the README section
    .venv/bin/python -m pytest tests/unit/test_terraform_docs.py  # check it is current
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import hcl2

REPO = Path(__file__).resolve().parents[1]
STACK = REPO / "infra" / "terraform"
README = STACK / "README.md"
MODULE = STACK / "modules" / "cluster"
"""The tables describe the cluster module: the root (STACK) has the same inputs and outputs
(scripts/terraform_root.py copies them) and calls it."""
BEGIN, END = "<!-- BEGIN_TF_DOCS -->", "<!-- END_TF_DOCS -->"


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    return value.replace('\\"', '"').replace("\\\\", "\\")


def _expr(value: str) -> str:
    """hcl2's rendering of a non-literal expression (``${list(string)}``) -> HCL text."""
    return value[2:-1] if value.startswith("${") and value.endswith("}") else value


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(_unquote(value)) if value.startswith('"') else _expr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        items = [f"{k} = {_literal(v)}" for k, v in value.items() if not k.startswith("__")]
        return "{" + ", ".join(items) + "}"
    return json.dumps(value)


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


def _name(kind: str, name: str) -> str:
    escaped = name.replace("_", "\\_")
    return f'<a name="{kind}_{name}"></a> [{escaped}](#{kind}\\_{escaped})'


def _blocks(section: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(MODULE.glob("*.tf")):
        for block in hcl2.load(path.open()).get(section, []):
            found += [(k.strip('"'), v) for k, v in block.items() if not k.startswith("__")]
    return found


def variables() -> dict[str, dict[str, Any]]:
    return dict(_blocks("variable"))


def outputs() -> dict[str, dict[str, Any]]:
    return dict(_blocks("output"))


def tables() -> str:
    lines = ["## Requirements", "", "| Name | Version |", "|------|---------|"]
    terraform = _terraform_blocks()[0]
    version = _escape(_unquote(terraform["required_version"]))
    lines.append(f"| {_name('requirement', 'terraform')} | {version} |")
    providers = {}
    for block in terraform["required_providers"]:
        providers.update({k: v for k, v in block.items() if not k.startswith("__")})
    for name, spec in sorted(providers.items()):
        lines.append(f"| {_name('requirement', name)} | {_escape(_unquote(spec['version']))} |")

    lines += ["", "## Providers", "", "| Name | Version |", "|------|---------|"]
    for name, spec in sorted(providers.items()):
        lines.append(f"| {_name('provider', name)} | {_escape(_unquote(spec['version']))} |")

    modules = sorted(_blocks("module"))
    if modules:
        lines += [
            "",
            "## Modules",
            "",
            "| Name | Source | Version |",
            "|------|--------|---------|",
        ]
        for name, spec in modules:
            source = _unquote(spec["source"])
            lines.append(f"| {_name('module', name)} | {source} | n/a |")

    lines += ["", "## Resources", "", "| Name | Type |", "|------|------|"]
    entries = []
    for section, kind in (("resource", "resource"), ("data", "data source")):
        for rtype, instances in _blocks(section):
            for name in instances:
                if name.startswith("__"):
                    continue
                name = name.strip('"')
                provider, _, short = rtype.partition("_")
                folder = "resources" if section == "resource" else "data-sources"
                address = f"{'data.' if section == 'data' else ''}{rtype}.{name}"
                if provider == "terraform":
                    url = "https://developer.hashicorp.com/terraform/language/resources/terraform-data"
                else:
                    url = (
                        f"https://registry.terraform.io/providers/hashicorp/{provider}/latest/docs/"
                        f"{folder}/{short}"
                    )
                entries.append(f"| [{address}]({url}) | {kind} |")
    lines += sorted(entries)

    lines += [
        "",
        "## Inputs",
        "",
        "| Name | Description | Type | Default | Required |",
        "|------|-------------|------|---------|:--------:|",
    ]
    for name, spec in sorted(variables().items()):
        required = "default" not in spec
        default = "n/a" if required else f"`{_literal(spec['default'])}`"
        lines.append(
            f"| {_name('input', name)} | {_escape(_unquote(spec['description']))} "
            f"| `{_expr(spec['type'])}` | {default} | {'yes' if required else 'no'} |"
        )

    lines += ["", "## Outputs", "", "| Name | Description |", "|------|-------------|"]
    for name, spec in sorted(outputs().items()):
        lines.append(f"| {_name('output', name)} | {_escape(_unquote(spec['description']))} |")
    return "\n".join(lines)


def _terraform_blocks() -> list[dict[str, Any]]:
    found = []
    for path in sorted(MODULE.glob("*.tf")):
        found += hcl2.load(path.open()).get("terraform", [])
    return found


_SECTION = re.compile(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), re.S)


def section(text: str) -> str:
    match = _SECTION.search(text)
    assert match, f"{README.relative_to(REPO)} has no {BEGIN} ... {END} section"
    return match.group(1).rstrip("\n")


def write() -> None:
    text = README.read_text()
    section(text)  # the markers must be there
    README.write_text(_SECTION.sub(lambda _: f"{BEGIN}\n{tables()}\n{END}", text))


if __name__ == "__main__":
    write()
    sys.exit(0)
