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
import hashlib
import re
import subprocess
from pathlib import Path

import hcl2
import pytest
import yaml

from driver import layout
from nodekit import render
from validation_cases import (
    KEY_VAULT_NAME_MAX,
    MAX_VALUE_LENGTHS,
    SECRET_NAME_MAX,
)

REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "infra" / "terraform" / "modules" / "cluster"
PLACEHOLDERS = REPO / "cloud-init" / "placeholders.yaml"
ROLES = ("head", "worker")

CUSTOM_DATA_LIMIT = render.CUSTOM_DATA_LIMIT


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
            continue  # computed at apply time (head IP, vault, identity): no default to agree on
        assert variable, f"{placeholder} has a default but no variable feeds it: {expression}"
        default = defaults[variable.group(1)]
        if isinstance(default, list):
            value = " ".join(default)
        elif isinstance(default, int | float):
            value = str(default)  # a number, as tostring() writes it
        else:
            value = default.strip('"')
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
    assert local["cloud_init_dir"] == '"${path.module}/../../../../cloud-init/rendered"'
    assert re.fullmatch(
        r'\$\{\{for role in \["head", "worker"\] : role => '
        r'file\("\$\{local\.cloud_init_dir\}/\$\{role\}\.yaml"\)\}\}',
        local["cloud_init"],
    ), local["cloud_init"]
    rendered = (STACK / "../../../../cloud-init/rendered").resolve()
    assert rendered == REPO / "cloud-init" / "rendered"
    tracked = subprocess.run(
        ["git", "ls-files", "--error-unmatch", *(f"cloud-init/rendered/{r}.yaml" for r in ROLES)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert tracked.returncode == 0, f"rendered documents are not committed: {tracked.stderr}"


def _vm_bodies(path: Path) -> list[dict]:
    doc = hcl2.load(path.open())
    return [
        body
        for block in doc.get("resource", [])
        for rtype, instances in block.items()
        if "virtual_machine" in rtype
        for name, body in instances.items()
        if not name.startswith("__")
    ]


def test_vm_gets_its_document_as_plain_base64() -> None:
    [head] = _vm_bodies(STACK / "head.tf")
    # Plain base64: Bicep has no gzip, and both stacks must send the same bytes.
    assert head["custom_data"] == '${base64encode(local.custom_data["head"])}'
    # Each worker pool's scale set, Uniform or Flexible (in os_profile): its pool's document
    # (pool_custom_data), as plain base64.
    [uniform, flexible] = _vm_bodies(STACK.parent / "worker_pool" / "main.tf")
    assert uniform["custom_data"] == "${base64encode(var.custom_data)}"
    assert flexible["os_profile"][0]["custom_data"] == "${base64encode(var.custom_data)}"
    [call] = [
        b for block in hcl2.load((STACK / "workers.tf").open())["module"] for b in block.values()
    ]
    assert call["custom_data"] == "${local.pool_custom_data[each.key]}"
    assert locals_block()["pool_custom_data"] == (
        '${{for name, pool in local.worker_pools : name => replace(local.cloud_init["worker"], '
        f'"{render.PLACEHOLDER}", base64encode(jsonencode(merge(local.deploy_values, '
        "pool.deploy_values))))}}"
    )


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


def keyvault() -> dict:
    return hcl2.load((STACK / "keyvault.tf").open())


def blocks(doc: dict, section: str, rtype: str) -> dict[str, dict]:
    """The ``section`` blocks (resource, ephemeral, ...) of type ``rtype``, by name."""
    return {
        name.strip('"'): body
        for block in doc.get(section, [])
        for kind, instances in block.items()
        if kind.strip('"') == rtype
        for name, body in instances.items()
        if not name.startswith("__")
    }


def test_cluster_token_is_ephemeral_and_reaches_only_the_write_only_secret() -> None:
    """The token is generated as an ephemeral value (never in plan or state) and handed to the
    secret's write-only value_wo; no resource of the stack keeps a token."""
    doc = keyvault()
    [token] = blocks(doc, "ephemeral", "random_password").values()
    assert token["length"] >= 32  # the placeholder contract: a Ray token of 32+ characters
    # Letters and digits only, safe in any file or header: its "special" characters are a-f.
    from stack_parity import terraform_token

    assert terraform_token(STACK)["alphabet"] == "0123456789abcdef"
    [secret] = blocks(doc, "resource", "azurerm_key_vault_secret").values()
    assert secret["value_wo"] == "${ephemeral.random_password.cluster_token.result}"
    assert "value" not in secret, "the token must never be a (stored) secret value"
    assert secret["value_wo_version"] == "${var.cluster_token_version}"
    assert f'"{secret["name"].strip(chr(34))}"' == secret["name"]
    name = secret["name"].strip('"')
    assert re.fullmatch(r"[0-9A-Za-z-]+", name) and len(name) <= SECRET_NAME_MAX
    # No random resource (random_bytes, random_password, ...) anywhere in the stack.
    for path in STACK.glob("*.tf"):
        resources = hcl2.load(path.open()).get("resource", [])
        kinds = {k.strip('"') for block in resources for k in block}
        assert not {k for k in kinds if k.startswith("random_")}, path.name


def test_token_value_is_nowhere_in_custom_data_or_outputs() -> None:
    """Only the secret's value_wo refers to the token; custom data and outputs name where the
    token is (vault, secret name, identity), never its value."""
    uses = [
        (path.name, line.strip())
        for path in sorted(STACK.glob("*.tf"))
        for line in path.read_text().splitlines()
        if "random_password.cluster_token" in line and not line.strip().startswith("#")
    ]
    assert uses == [
        ("keyvault.tf", "value_wo         = ephemeral.random_password.cluster_token.result"),
    ]
    everything = "\n".join(p.read_text() for p in STACK.glob("*.tf"))
    assert "RAY_CLUSTER_TOKEN" not in everything and "random_bytes" not in everything
    # The secret's value is never read back into anything.
    assert not re.search(r"azurerm_key_vault_secret\.cluster_token\.value\b", everything)
    deploy_values = locals_block()["deploy_values"]
    assert deploy_values["TOKEN_SECRET_NAME"] == "${azurerm_key_vault_secret.cluster_token.name}"
    assert deploy_values["KEY_VAULT_URL"] == "${azurerm_key_vault.this.vault_uri}"
    assert deploy_values["IDENTITY_CLIENT_ID"] == (
        "${azurerm_user_assigned_identity.this.client_id}"
    )
    for expression in deploy_values.values():
        assert "ephemeral" not in expression and "random" not in expression, expression
    outputs = (STACK / "outputs.tf").read_text()
    assert "ephemeral" not in outputs and "key_vault_secret" not in outputs


def test_key_vault_name_fits_its_bound_for_every_prefix() -> None:
    """locals.tf's vault name, replayed here: name_prefix (2-16 characters), "-kv-", then a sha1
    prefix that fills the name to 23 characters; Key Vault names are 3-24 letters, digits and
    '-', start with a letter, end with a letter or digit, never hold "--"."""
    expression = locals_block()["key_vault_name"]
    assert expression == (
        '"${var.name_prefix}-kv-${substr(sha1("${data.azurerm_client_config.current'
        '.subscription_id}/${local.resource_group_name}/${var.name_prefix}"), 0, 23 - '
        'length(var.name_prefix) - 4)}"'
    )
    for prefix in ("ab", "ray", "ray-cluster-2026", "r" * 16, "a1-b2-c3-d4-e5f6"):
        digest = hashlib.sha1(f"sub/rg/{prefix}".encode()).hexdigest()
        name = f"{prefix}-kv-{digest[: 23 - len(prefix) - 4]}"
        assert 3 <= len(name) <= KEY_VAULT_NAME_MAX, name
        assert re.fullmatch(r"[A-Za-z][A-Za-z0-9-]*[A-Za-z0-9]", name) and "--" not in name, name
        url = f"https://{name}.vault.azure.net/"
        assert len(url) <= MAX_VALUE_LENGTHS["KEY_VAULT_URL"]


@pytest.mark.parametrize("role", ROLES)
def test_custom_data_fits_azure_limit_with_the_longest_accepted_values(role: str) -> None:
    text = render.fill(
        rendered(role), {n: "x" * longest for n, longest in MAX_VALUE_LENGTHS.items()}
    )
    size = len(base64.b64encode(text.encode()))
    assert size <= CUSTOM_DATA_LIMIT, f"{role}: {size} base64 characters at worst"
