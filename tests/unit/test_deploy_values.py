"""The deploy-time contract: cloud-init/placeholders.yaml lists every value once, and each
place that fills the rendered documents fills exactly those names.

Fillers: Terraform's ``local.deploy_values`` (infra/terraform/modules/cluster/locals.tf), the
rehearsal cluster (:meth:`nodekit.rehearsal.cluster.Rehearsal.deploy_values`), the Bicep
stack's ``deployValues`` (infra/bicep/main.bicep) and the compiled ARM template
(infra/bicep/azuredeploy.json; what it fills in, evaluated: test_bicep_custom_data.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import hcl2

from armeval import parse_expression
from nodekit import render
from nodekit.node.azure_vmss_provider import WORKER_TYPE, autoscaling_config
from rehearsal_support import unit_cluster, unit_state
from support import REPO

STACK = REPO / "infra" / "terraform" / "modules" / "cluster"
BICEP = REPO / "infra" / "bicep"
POOL_VALUES = ("WORKER_POOL", "RAY_RESOURCES", "RAY_LABELS")
"""What each worker pool's workers get of their own, over the cluster's values."""


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
    state = unit_state(head_root=str(tmp_path))
    values = unit_cluster(tmp_path).deploy_values(state)
    assert list(values) == render.deploy_value_names()
    # ... and what it fills passes the same checks a stack's values do.
    render.fill((REPO / "cloud-init" / "rendered" / "head.yaml").read_text(), values)
    # In mode ray its autoscaler plans one node type, the default pool's, on its fake scale set.
    config = autoscaling_config({**values, "SCALING_MODE": "ray"})
    [pool] = config["provider"]["pools"]
    assert pool["node_type"] == WORKER_TYPE
    assert pool["scale_set_id"] == values["WORKER_SCALE_SET_ID"]
    assert pool["max_workers"] == state.max_workers
    worker = config["available_node_types"][WORKER_TYPE]
    assert worker["min_workers"] == state.min_workers


def bicep_deploy_values() -> list[str]:
    """The keys of main.bicep's ``var deployValues = { ... }``, in order."""
    text = (BICEP / "main.bicep").read_text()
    block = re.search(r"^var deployValues = \{\n(.*?)^\}", text, re.S | re.M)
    assert block, "main.bicep has no deployValues object"
    return re.findall(r"^  ([A-Z][A-Z0-9_]*):", block.group(1), re.M)


def arm_deploy_values() -> dict[str, list[str]]:
    """For each nested deployment given custom data in azuredeploy.json: the keys of the
    object whose JSON replaces the placeholder."""
    template = json.loads((BICEP / "azuredeploy.json").read_text())
    found = {}
    for resource in template["resources"]:
        parameters = resource.get("properties", {}).get("parameters", {})
        if "customData" not in parameters:
            continue
        node = parse_expression(parameters["customData"]["value"])
        # base64(replace(document, placeholder, base64(string(createObject(k, v, ...)))))
        assert node[:2] == ("call", "base64"), node[:2]
        replace = node[2][0]
        assert replace[:2] == ("call", "replace")
        assert replace[2][1] == ("lit", render.PLACEHOLDER)
        encoded = replace[2][2]
        assert encoded[:2] == ("call", "base64") and encoded[2][0][:2] == ("call", "string")
        create = encoded[2][0][2][0]
        if create[:2] == ("call", "union"):
            # A worker pool's: the cluster's values with the pool's own over them.
            create, own = create[2]
            assert own[:2] == ("call", "createObject")
            assert [k[1] for k in own[2][0::2]] == list(POOL_VALUES), own
        assert create[:2] == ("call", "createObject")
        found[resource["name"]] = [k[1] for k in create[2][0::2]]
    return found


def test_bicep_fills_exactly_the_listed_names() -> None:
    assert bicep_deploy_values() == render.deploy_value_names()


def test_the_arm_template_fills_exactly_the_listed_names_for_head_and_workers() -> None:
    found = arm_deploy_values()
    assert len(found) == 2, found  # the head and the workers
    for keys in found.values():
        assert keys == render.deploy_value_names()


def test_terraform_fills_each_pools_own_values_over_the_clusters() -> None:
    doc = hcl2.load((STACK / "checks.tf").open())
    merged: dict = {}
    for block in doc["locals"]:
        merged.update(block)
    pools = merged["worker_pool_settings"]
    for name in POOL_VALUES:
        assert f"{name} = " in pools, name
    assert set(POOL_VALUES) <= set(render.deploy_value_names())
