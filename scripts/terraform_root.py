"""The Terraform root (infra/terraform) is a thin caller of the cluster module
(infra/terraform/modules/cluster), and four of its files are generated from the module, so that
each fact has one source:

- ``variables.tf``: a copy of the module's ``variables.tf`` (names, types, defaults,
  descriptions, validations, sensitive, and the constants the validations share);
- ``main.tf``: ``module "cluster"`` passing every variable through;
- ``outputs.tf``: every output of the module passed through (same name, description,
  sensitive);
- ``moved.tf``: a ``moved`` block per resource and module call of the module (the root held them
  before the module existed: an existing state moves into ``module.cluster`` on the next plan),
  and the moves of the clusters made before worker pools (:data:`BEFORE_POOLS`).

    .venv/bin/python scripts/terraform_root.py           # rewrite the four files
    .venv/bin/python scripts/terraform_root.py --check   # exit 1 if one is stale
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import hcl2

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "infra" / "terraform"
MODULE = ROOT / "modules" / "cluster"
SOURCE = "./modules/cluster"
NAME = "cluster"
RUN = ".venv/bin/python scripts/terraform_root.py"

# What a cluster made before worker pools holds in its state (at the root then), and where each
# resource lives now: the default pool "workers" of the module (same names, nothing replaced).
_VMSS, _AUTOSCALE = "azurerm_linux_virtual_machine_scale_set", "azurerm_monitor_autoscale_setting"
BEFORE_POOLS = {
    f"{_VMSS}.workers": f"{_VMSS}.this[0]",  # Uniform: the one of count 1
    f"{_AUTOSCALE}.workers": f"{_AUTOSCALE}.this",
    "azurerm_role_assignment.autoscaler_scale_set": "azurerm_role_assignment.autoscaler_scale_set",
    "azurerm_role_assignment.autostop_scale_set": "azurerm_role_assignment.autostop_scale_set",
    "azurerm_role_assignment.autostop_autoscale": "azurerm_role_assignment.autostop_autoscale",
}
DEFAULT_POOL = 'module.worker_pool["workers"]'


def _header(what: str) -> str:
    return (
        "# GENERATED from modules/cluster by scripts/terraform_root.py. Do not edit: change the\n"
        "# module and run `.venv/bin/python scripts/terraform_root.py` (tests/unit/\n"
        "# test_terraform_module.py fails while this file is stale).\n"
        f"# This file: {what}\n"
    )


def _load() -> list[dict]:
    return [hcl2.load(path.open()) for path in sorted(MODULE.glob("*.tf"))]


def _names(section: str) -> list[str]:
    found: list[str] = []
    for doc in _load():
        for block in doc.get(section, []):
            found += [k.strip('"') for k in block if not k.startswith("__")]
    return found


def variable_names() -> list[str]:
    """The module's variables, in the order of its variables.tf."""
    return re.findall(r'^variable "(\w+)"', (MODULE / "variables.tf").read_text(), re.M)


def _blocks(text: str, kind: str) -> dict[str, str]:
    """Each top-level ``kind "name" { ... }`` block's body, by name (terraform fmt layout: the
    closing brace alone at the start of a line)."""
    return {
        m.group(1): m.group(2)
        for m in re.finditer(rf'^{kind} "(\w+)" {{\n(.*?)^}}\n', text, re.M | re.S)
    }


def variables_tf() -> str:
    return _header("a copy of its variables.tf.") + "\n" + (MODULE / "variables.tf").read_text()


def main_tf() -> str:
    names = variable_names()
    width = max(len(n) for n in names)
    lines = [
        _header("the module called with every variable passed through."),
        "# The cluster itself is the module (modules/cluster: every resource, check and",
        "# output); this root adds the azurerm provider (versions.tf) and the state. Calling the",
        "# module from your own root instead: examples/as-module and README.md.",
        f'module "{NAME}" {{',
        f'  source = "{SOURCE}"',
        "",
        *(f"  {n.ljust(width)} = var.{n}" for n in names),
        "}",
    ]
    return "\n".join(lines) + "\n"


def outputs_tf() -> str:
    blocks = _blocks((MODULE / "outputs.tf").read_text(), "output")
    out = [_header("every output of the module passed through (the driver reads them here).")]
    for name, body in blocks.items():
        description = re.search(r"^  description = (.*)$", body, re.M)
        sensitive = re.search(r"^  sensitive\s*= (\w+)$", body, re.M)
        lines = [f'output "{name}" {{']
        if description:
            lines.append(f"  description = {description.group(1)}")
        lines.append(f"  value       = module.{NAME}.{name}")
        if sensitive:
            lines.append(f"  sensitive   = {sensitive.group(1)}")
        out += ["", *lines, "}"]
    return "\n".join(out) + "\n"


def module_addresses() -> list[str]:
    """Every resource and module call of the module, by address (data sources are read again and
    ephemeral resources are never in a state: neither moves)."""
    found: list[str] = []
    for doc in _load():
        for block in doc.get("resource", []):
            for rtype, instances in block.items():
                found += [
                    f"{rtype.strip(chr(34))}.{n.strip(chr(34))}"
                    for n in instances
                    if not n.startswith("__")
                ]
        for block in doc.get("module", []):
            found += [f"module.{k.strip(chr(34))}" for k in block if not k.startswith("__")]
    return sorted(found)


def moves() -> dict[str, str]:
    """from -> to of every moved block of the root."""
    moved = {a: f"module.{NAME}.{a}" for a in module_addresses()}
    moved |= {old: f"module.{NAME}.{DEFAULT_POOL}.{new}" for old, new in BEFORE_POOLS.items()}
    return moved


def moved_tf() -> str:
    out = [
        _header("a moved block per resource and module call."),
        "# Before the module, these were resources and module calls of this root: an",
        "# existing state moves into module.cluster on the next plan, nothing replaced. The last",
        "# ones take a cluster made before worker pools (its single scale set, autoscale setting",
        '# and the head\'s roles on them) into the default pool "workers" of the module.',
    ]
    for old, new in moves().items():
        out += ["", "moved {", f"  from = {old}", f"  to   = {new}", "}"]
    return "\n".join(out) + "\n"


GENERATED = {
    "variables.tf": variables_tf,
    "main.tf": main_tf,
    "outputs.tf": outputs_tf,
    "moved.tf": moved_tf,
}


def stale() -> list[str]:
    """The generated files of the root whose text differs from what the module makes."""
    return [
        name
        for name, make in GENERATED.items()
        if not (ROOT / name).is_file() or (ROOT / name).read_text() != make()
    ]


def main(argv: list[str]) -> int:
    if argv not in ([], ["--check"]):
        print("usage: terraform_root.py [--check]", file=sys.stderr)
        return 2
    if argv == ["--check"]:
        bad = stale()
        for name in bad:
            print(f"infra/terraform/{name} is stale: run {RUN}")
        return 1 if bad else 0
    for name, make in GENERATED.items():
        (ROOT / name).write_text(make())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
