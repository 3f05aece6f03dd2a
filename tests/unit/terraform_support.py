"""Running the real terraform offline: on the cluster module's variables and preconditions
(variables.tf and checks.tf need no provider) and the error messages they declare, and on a
stack of Terraform's built-in resources for `up/down --terraform-dir`."""

from __future__ import annotations

import os
from pathlib import Path

import hcl2

from support import REPO

STACK = REPO / "infra" / "terraform"
MODULE = STACK / "modules" / "cluster"

CONFIG = """
variable "head_ip" {
  type = string
}

resource "terraform_data" "head" {
  input            = var.head_ip
  triggers_replace = var.head_ip
}

resource "terraform_data" "workers" {
  input = "workers"
}

output "head_public_ip" {
  value = terraform_data.head.output
}

output "admin_username" {
  value = "root"
}
"""
"""A configuration of Terraform's built-in resources (no provider to download) with the
outputs `up --terraform-dir` reads: the stack the up/down tests plan and apply."""


def stack_of_inputs(folder: Path, head: bool = True) -> Path:
    """``folder`` made a stack that terraform plans offline with the real inputs: the root's
    variables.tf, the cluster module's checks.tf, the example terraform.tfvars and (``head``)
    :data:`CONFIG` with a default head address. The folder, made if missing."""
    folder.mkdir(parents=True, exist_ok=True)
    for source in (STACK / "variables.tf", MODULE / "checks.tf"):
        (folder / source.name).write_text(source.read_text())
    (folder / "terraform.tfvars").write_text((STACK / "terraform.tfvars.example").read_text())
    if head:
        (folder / "main.tf").write_text(
            CONFIG.replace(
                'variable "head_ip" {', 'variable "head_ip" {\n  default = "203.0.113.9"'
            )
        )
    return folder


def terraform_env(tmp: Path) -> dict[str, str]:
    """The environment of a terraform run offline, with an empty CLI configuration in ``tmp``."""
    cli_config = tmp / "terraformrc"
    cli_config.write_text("")
    return {
        **os.environ,
        "CHECKPOINT_DISABLE": "1",  # no version check against HashiCorp's servers
        "TF_IN_AUTOMATION": "1",
        "TF_CLI_CONFIG_FILE": str(cli_config),
    }


def error_messages(path: Path, kind: str) -> list[str]:
    """The error_message of every validation (variables.tf) or precondition (checks.tf)."""
    doc = hcl2.load(path.open())
    found: list[str] = []
    if kind == "validation":
        for block in doc["variable"]:
            for body in block.values():
                found += [v["error_message"] for v in body.get("validation", [])]
    else:
        for resource in doc["resource"]:
            for instances in resource.values():
                for body in instances.values():
                    for lifecycle in body.get("lifecycle", []):
                        found += [p["error_message"] for p in lifecycle.get("precondition", [])]
    return [m.strip('"') for m in found]
