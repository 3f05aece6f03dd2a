"""The Terraform stack's custom data: the committed rendered cloud-init documents, their one
placeholder filled with the deploy-time values of cloud-init/placeholders.yaml, under Azure's
limit.

Terraform cannot run the stack here (no provider), so the proof is structural: parse locals.tf,
check that its ``deploy_values`` map has exactly the listed names and that one ``replace()``
puts their JSON in place of the placeholder, that ``file()`` points at the committed documents,
and that the largest values the variables accept (their validations are exercised in
test_terraform_validations.py) still fit.
"""

from __future__ import annotations

import base64
import re
import subprocess
from pathlib import Path

import hcl2
import pytest
import yaml

from driver import layout
from nodekit import render

REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "infra" / "terraform"
PLACEHOLDERS = REPO / "cloud-init" / "placeholders.yaml"
ROLES = {"head": "head.tf", "worker": "workers.tf"}

CUSTOM_DATA_LIMIT = render.CUSTOM_DATA_LIMIT

MAX_VALUE_LENGTHS = {
    "RAY_HEAD_IP": len("255.255.255.255"),
    "RAY_CLUSTER_TOKEN": 64,  # random_bytes, 32 bytes, hex (checked below)
    "RAY_ADMIN_USER": 32,  # admin_username validation
    "EXTRA_PIP_PACKAGES": 1024,  # extra_pip_packages validation (joined by spaces)
    "PIP_INDEX_URL": 512,  # pip_index_url validation
    "TORCH_INDEX_URL": 512,  # torch_index_url validation
    "APT_SOURCE": 512,  # apt_source validation
}
"""The longest value each placeholder can receive from the stack's validated variables."""


def placeholder_names() -> set[str]:
    return set(yaml.safe_load(PLACEHOLDERS.read_text()))


def locals_block() -> dict:
    doc = hcl2.load((STACK / "locals.tf").open())
    merged: dict = {}
    for block in doc["locals"]:
        merged.update(block)
    return merged


def test_every_value_has_a_length_bound() -> None:
    assert set(MAX_VALUE_LENGTHS) == placeholder_names()


def test_variable_defaults_are_the_placeholder_defaults() -> None:
    """A deploy-time value a user leaves out is the same in every stack: placeholders.yaml's."""
    doc = hcl2.load((STACK / "variables.tf").open())
    defaults = {
        name.strip('"'): body.get("default")
        for block in doc["variable"]
        for name, body in block.items()
    }
    expected = render.deploy_value_defaults()
    checked = set()
    for placeholder, expression in locals_block()["deploy_values"].items():
        variable = re.search(r"var\.(\w+)", expression)
        if placeholder not in expected:
            continue  # computed at apply time (head IP, token): no default to agree on
        assert variable, f"{placeholder} has a default but no variable feeds it: {expression}"
        default = defaults[variable.group(1)]
        value = " ".join(default) if isinstance(default, list) else default.strip('"')
        assert value == expected[placeholder], (placeholder, variable.group(1), default)
        checked.add(placeholder)
    assert checked == set(expected)
    # The driver's default SSH user is the admin user the stacks create by default.
    assert expected["RAY_ADMIN_USER"] == layout.ADMIN_USER


def test_one_replace_puts_the_values_json_in_place_of_the_placeholder() -> None:
    expression = locals_block()["custom_data"]
    assert expression == (
        "${{for role, text in local.cloud_init : role => replace(text, "
        f'"{render.PLACEHOLDER}", base64encode(jsonencode(local.deploy_values)))}}}}'
    )


def test_file_paths_are_the_committed_rendered_documents() -> None:
    local = locals_block()
    assert local["cloud_init_dir"] == '"${path.module}/../../cloud-init/rendered"'
    assert re.fullmatch(
        r'\$\{\{for role in \["head", "worker"\] : role => '
        r'file\("\$\{local\.cloud_init_dir\}/\$\{role\}\.yaml"\)\}\}',
        local["cloud_init"],
    ), local["cloud_init"]
    rendered = (STACK / "../../cloud-init/rendered").resolve()
    assert rendered == REPO / "cloud-init" / "rendered"
    tracked = subprocess.run(
        ["git", "ls-files", "--error-unmatch", *(f"cloud-init/rendered/{r}.yaml" for r in ROLES)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert tracked.returncode == 0, f"rendered documents are not committed: {tracked.stderr}"


@pytest.mark.parametrize("role", ROLES)
def test_vm_gets_its_document_as_plain_base64(role: str) -> None:
    doc = hcl2.load((STACK / ROLES[role]).open())
    bodies = [
        body
        for block in doc["resource"]
        for rtype, instances in block.items()
        if "virtual_machine" in rtype
        for name, body in instances.items()
        if not name.startswith("__")
    ]
    assert len(bodies) == 1
    # Plain base64: Bicep has no gzip, and both stacks must send the same bytes.
    assert bodies[0]["custom_data"] == f'${{base64encode(local.custom_data["{role}"])}}'


def rendered(role: str) -> str:
    path = REPO / "cloud-init" / "rendered" / f"{role}.yaml"
    if not path.exists():
        pytest.fail(f"{path.relative_to(REPO)} does not exist yet (python -m driver render)")
    return path.read_text()


@pytest.mark.parametrize("role", ROLES)
def test_filled_document_is_cloud_config_without_placeholders(role: str) -> None:
    text = render.fill(rendered(role), render.deploy_value_samples())
    assert "@@" not in text
    assert text.startswith("#cloud-config\n")
    assert isinstance(yaml.safe_load(text), dict)


def test_cluster_token_length_matches_the_bound() -> None:
    doc = hcl2.load((STACK / "identity.tf").open())
    token = next(
        instances['"cluster_token"']
        for block in doc["resource"]
        for rtype, instances in block.items()
        if rtype.strip('"') == "random_bytes"
    )
    assert 2 * token["length"] == MAX_VALUE_LENGTHS["RAY_CLUSTER_TOKEN"]  # hex: 2 chars a byte
    assert token["length"] >= 16  # the placeholder contract: 32+ hex characters


@pytest.mark.parametrize("role", ROLES)
def test_custom_data_fits_azure_limit_with_the_longest_accepted_values(role: str) -> None:
    text = render.fill(
        rendered(role), {n: "x" * longest for n, longest in MAX_VALUE_LENGTHS.items()}
    )
    size = len(base64.b64encode(text.encode()))
    assert size <= CUSTOM_DATA_LIMIT, f"{role}: {size} base64 characters at worst"
