"""The Terraform stack's custom data: the committed rendered cloud-init documents, with exactly
the deploy-time placeholders of cloud-init/placeholders.yaml filled in, under Azure's limit.

Terraform cannot run the stack here (no provider), so the proof is structural: parse locals.tf,
check that its ``deploy_values`` map and its nested ``replace()`` cover exactly the placeholder
names, that ``file()`` points at the committed documents, and that the largest values the
variables accept (their validations are exercised in test_terraform_validations.py) still fit.
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


def test_deploy_values_are_keyed_by_exactly_the_placeholder_names() -> None:
    deploy_values = locals_block()["deploy_values"]
    assert set(deploy_values) == placeholder_names()
    assert set(MAX_VALUE_LENGTHS) == placeholder_names()


def test_variable_defaults_are_the_placeholder_defaults() -> None:
    """A deploy-time value a user leaves out is the same in every stack: placeholders.yaml's."""
    doc = hcl2.load((STACK / "variables.tf").open())
    defaults = {
        name.strip('"'): body.get("default")
        for block in doc["variable"]
        for name, body in block.items()
    }
    expected = render.placeholder_defaults()
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


def test_replace_chain_fills_each_placeholder_once_from_its_own_value() -> None:
    expression = locals_block()["custom_data"]
    pairs = re.findall(r'"@@(\w+)@@", local\.deploy_values\.(\w+)\)', expression)
    assert [a for a, b in pairs if a != b] == [], f"placeholder filled from another value: {pairs}"
    names = [a for a, _ in pairs]
    assert sorted(names) == sorted(placeholder_names()), names
    assert len(names) == len(set(names))
    # Nothing else is substituted: every @@ in the expression belongs to one of those pairs.
    assert expression.count("@@") == 2 * len(pairs)
    assert expression.count("replace(") == len(pairs)


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
    samples = yaml.safe_load(PLACEHOLDERS.read_text())
    text = rendered(role)
    for name in placeholder_names():  # the order of the replace() chain does not matter here
        text = text.replace(f"@@{name}@@", str(samples[name]["sample"]))
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
    text = rendered(role)
    for name, longest in MAX_VALUE_LENGTHS.items():
        text = text.replace(f"@@{name}@@", "x" * longest)
    size = len(base64.b64encode(text.encode()))
    assert size <= CUSTOM_DATA_LIMIT, f"{role}: {size} base64 characters at worst"
