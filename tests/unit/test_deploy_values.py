"""The deploy-time contract: cloud-init/placeholders.yaml lists every value once, and each
place that fills the rendered documents fills exactly those names.

Fillers: Terraform's ``local.deploy_values`` (infra/terraform/locals.tf), the rehearsal cluster
(:meth:`nodekit.rehearsal.cluster.Rehearsal.deploy_values`) and, in their own tests, the Bicep
template and its compiled ARM JSON.
"""

from __future__ import annotations

from pathlib import Path

import hcl2

from nodekit import render
from nodekit.rehearsal.cluster import Node, Rehearsal, State
from support import REPO

STACK = REPO / "infra" / "terraform"


def terraform_deploy_values() -> dict[str, str]:
    doc = hcl2.load((STACK / "locals.tf").open())
    merged: dict = {}
    for block in doc["locals"]:
        merged.update(block)
    return merged["deploy_values"]


def test_names_are_unique_upper_case_and_described() -> None:
    specs = render._deploy_value_specs()
    assert specs, "no deploy-time values"
    for name, spec in specs.items():
        assert render.DEPLOY_NAME_RE.match(name), name
        assert spec.get("description"), f"{name} has no description"
        assert "sample" in spec, f"{name} has no sample"


def test_terraform_fills_exactly_the_listed_names() -> None:
    assert list(terraform_deploy_values()) == render.deploy_value_names()


def test_the_rehearsal_fills_exactly_the_listed_names(tmp_path: Path) -> None:
    r = Rehearsal("unit", base=tmp_path)
    r.dir.mkdir(parents=True)
    (r.dir / "token").write_text("t" * 64)
    state = State(
        name="unit",
        subnet="10.213.0.0/24",
        bridge="rh-unit",
        host_ip="10.213.0.1",
        http_port=8470,
        ssh_key="k",
        nodes=[Node("head", "head", "10.213.0.10", "ns", "veth", str(tmp_path))],
    )
    values = r.deploy_values(state)
    assert list(values) == render.deploy_value_names()
    # ... and what it fills passes the same checks a stack's values do.
    render.fill((REPO / "cloud-init" / "rendered" / "head.yaml").read_text(), values)
