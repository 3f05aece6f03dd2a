"""Every resource type, argument and block of the Terraform stack exists in the azurerm 4.x (and
random, time) provider schema, and every required argument is set — checked offline.

The schema comes from the jsii assemblies of the CDK for Terraform bindings (azurerm 4.55.0,
random 3.7.2, time 0.13.1), extracted by scripts/azurerm_schema.py into
.tools/azurerm-schema/schema.json by the set-up step scripts/setup.d/10-azurerm-schema.sh;
ephemeral resources, which cdktf does not model, from the checker's own documented table. The
checker is proved on deliberately broken fixtures (tests/fixtures/terraform/broken/), and the
name mapping on resources whose schema is known.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from azurerm_schema import EPHEMERAL_RESOURCES, check_dir, check_files, load_schema

REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "infra" / "terraform"
SCHEMA = REPO / ".tools" / "azurerm-schema" / "schema.json"
BROKEN = REPO / "tests" / "fixtures" / "terraform" / "broken"


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    if not SCHEMA.exists():
        pytest.fail(
            f"{SCHEMA.relative_to(REPO)} is missing: run scripts/setup.d/10-azurerm-schema.sh "
            "(scripts/test.sh runs it)"
        )
    return load_schema(SCHEMA)


def test_schema_is_azurerm_4(schema: dict[str, Any]) -> None:
    azurerm = schema["providers"]["azurerm"]
    assert azurerm["provider_version"].startswith("4.")
    assert azurerm["assembly"] == "@cdktf/provider-azurerm@14.23.1"
    assert len(azurerm["resources"]) > 1000
    assert len(azurerm["data_sources"]) > 300
    assert schema["providers"]["random"]["provider_version"].startswith("3.")
    assert schema["providers"]["time"]["provider_version"].startswith("0.")
    assert schema["format"] == 2


def test_names_map_from_registry_anchors_as_the_provider_docs_spell_them(
    schema: dict[str, Any],
) -> None:
    """Known azurerm 4.x facts (FACTS.md, provider docs) read back from the extracted schema."""
    resources = schema["providers"]["azurerm"]["resources"]
    vmss = resources["azurerm_linux_virtual_machine_scale_set"]
    for name in ("overprovision", "custom_data", "max_bid_price", "eviction_policy", "priority"):
        assert vmss["attributes"][name] == {"required": False}
    assert vmss["attributes"]["admin_username"] == {"required": True}
    assert vmss["attributes"]["sku"] == {"required": True}
    notification = vmss["blocks"]["termination_notification"]
    assert notification["max_one"] and not notification["required"]
    assert set(notification["block"]["attributes"]) == {"enabled", "timeout"}
    assert set(vmss["blocks"]["scale_in"]["block"]["attributes"]) == {
        "rule",
        "force_deletion_enabled",
    }
    assert vmss["blocks"]["os_disk"]["required"] and vmss["blocks"]["os_disk"]["max_one"]
    nic = vmss["blocks"]["network_interface"]
    assert nic["required"] and not nic["max_one"]
    # 4.x still spells it the old way inside the scale set, the new way on the NIC resource.
    assert "enable_accelerated_networking" in nic["block"]["attributes"]
    assert "accelerated_networking_enabled" in resources["azurerm_network_interface"]["attributes"]
    assert (
        "enable_accelerated_networking" not in resources["azurerm_network_interface"]["attributes"]
    )
    trigger = resources["azurerm_monitor_autoscale_setting"]["blocks"]["profile"]["block"]
    trigger = trigger["blocks"]["rule"]["block"]["blocks"]["metric_trigger"]["block"]
    assert {k for k, v in trigger["attributes"].items() if v["required"]} == {
        "metric_name",
        "metric_resource_id",
        "operator",
        "statistic",
        "threshold",
        "time_aggregation",
        "time_grain",
        "time_window",
    }
    # Attribute-as-blocks: written as blocks in the stack, an attribute in the schema.
    assert resources["azurerm_network_security_group"]["blocks"]["security_rule"]["attribute_mode"]
    # Computed `id` is not an argument.
    assert "id" not in resources["azurerm_resource_group"]["attributes"]
    assert "length" in schema["providers"]["random"]["resources"]["random_bytes"]["attributes"]
    # Write-only arguments (Terraform 1.11) are in the assemblies like any other argument.
    secret = resources["azurerm_key_vault_secret"]["attributes"]
    assert secret["value_wo"] == secret["value_wo_version"] == {"required": False}
    assert set(schema["providers"]["time"]["resources"]["time_sleep"]["attributes"]) == {
        "create_duration",
        "destroy_duration",
        "triggers",
    }


def test_ephemeral_resources_come_from_the_documented_table(schema: dict[str, Any]) -> None:
    """cdktf has no ephemeral resources; the checker's table is what the schema carries."""
    password = schema["providers"]["random"]["ephemeral_resources"]["random_password"]
    assert password == EPHEMERAL_RESOURCES["random"]["random_password"]
    assert {k for k, v in password["attributes"].items() if v["required"]} == {"length"}
    # The resource random_password has keepers; the ephemeral one does not.
    assert "keepers" in schema["providers"]["random"]["resources"]["random_password"]["attributes"]
    assert "keepers" not in password["attributes"]
    assert schema["providers"]["azurerm"]["ephemeral_resources"] == {}


def test_names_that_are_not_camel_case_of_their_anchor_are_few_and_known(
    schema: dict[str, Any],
) -> None:
    """The anchor, not a case conversion, names each argument: these are where the two differ."""
    mismatched = schema["mismatched_names"]["azurerm"]
    assert len(mismatched) == 6, mismatched
    assert any("systemAttribute <- #system" in m for m in mismatched)
    assert any(
        "kerberos5IReadOnlyEnabled <- #kerberos_5i_read_only_enabled" in m for m in mismatched
    )
    assert schema["mismatched_names"]["random"] == []


def test_stack_matches_the_provider_schema(schema: dict[str, Any]) -> None:
    report = check_dir(STACK, schema)
    assert report.problems == []
    types = {r.split(".")[-2] for r in report.resources}
    assert {
        "azurerm_linux_virtual_machine",
        "azurerm_linux_virtual_machine_scale_set",
        "azurerm_monitor_autoscale_setting",
        "azurerm_network_security_group",
        "azurerm_nat_gateway",
        "azurerm_user_assigned_identity",
        "azurerm_key_vault",
        "azurerm_key_vault_secret",
        "azurerm_private_endpoint",
        "azurerm_private_dns_zone",
        "azurerm_private_dns_zone_virtual_network_link",
        "time_sleep",
        "time_offset",
    } <= types
    # The cluster token is checked too: an ephemeral resource, not a resource.
    assert "ephemeral.random_password.cluster_token" in report.resources
    assert not any(r.startswith("random_") for r in report.resources)
    assert len(report.resources) >= 25
    assert report.arguments >= 250


# fixture file -> the one problem the checker must report for it
BROKEN_EXPECTED = {
    "unknown_argument.tf": "'overprovisioning' is not a known argument",
    "unknown_block.tf": "'termination_notice' is not a known block",
    "unknown_nested_argument.tf": "metric_trigger: 'metric_namespaces' is not a known argument",
    "unknown_resource_type.tf": "unknown resource type 'azurerm_virtual_machine_scale_set_linux'",
    "unknown_data_source.tf": "unknown data type 'azurerm_resource_groups_existing'",
    "missing_required_argument.tf": "required 'allocation_method' is missing",
    "missing_required_block.tf": "required 'os_disk' is missing",
    "argument_as_block.tf": "'tags' is an argument, not a block",
    "repeated_single_block.tf": "block 'os_disk' may appear only once",
    "unknown_ignore_changes.tf": "lifecycle.ignore_changes names unknown 'instance_count'",
    "unknown_provider_argument.tf": "provider azurerm: 'skip_registration' is not a known argument",
    "unknown_ephemeral_argument.tf": "ephemeral.random_password.token: 'specials' is not a known",
    "unknown_ephemeral_type.tf": "unknown ephemeral type 'random_passwd'",
    "missing_required_ephemeral_argument.tf": "random_password.token: required 'length' is missing",
}


def test_every_broken_fixture_is_listed() -> None:
    assert sorted(p.name for p in BROKEN.glob("*.tf")) == sorted(BROKEN_EXPECTED)


@pytest.mark.parametrize("fixture", sorted(BROKEN_EXPECTED))
def test_broken_fixture_fails_with_its_problem(schema: dict[str, Any], fixture: str) -> None:
    report = check_files([BROKEN / fixture], schema)
    assert len(report.problems) == 1, report.problems
    assert BROKEN_EXPECTED[fixture] in report.problems[0], report.problems


def test_command_line_exit_codes(schema: dict[str, Any], tmp_path: Path) -> None:
    import subprocess
    import sys

    module = REPO / "scripts" / "azurerm_schema.py"
    ok = subprocess.run(
        [sys.executable, str(module), "check", "--schema", str(SCHEMA), str(STACK)],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    (tmp_path / "main.tf").write_text((BROKEN / "unknown_block.tf").read_text())
    bad = subprocess.run(
        [sys.executable, str(module), "check", "--schema", str(SCHEMA), str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1 and "termination_notice" in bad.stdout
    assert json.loads(SCHEMA.read_text())["format"] == 2


def test_the_module_and_the_root_of_ones_own_are_checked_too(
    schema: dict[str, Any], tmp_path: Path
) -> None:
    """check_dir covers the cluster module (modules/cluster, where every resource is now) and
    examples/as-module (a root that calls it with a provider block of its own): a wrong
    argument in either is reported."""
    import shutil

    copy = tmp_path / "terraform"
    shutil.copytree(STACK, copy, ignore=shutil.ignore_patterns(".terraform*", "tests", "results"))
    assert check_dir(copy, schema).problems == []
    example = copy / "examples" / "as-module" / "main.tf"
    example.write_text(example.read_text().replace("features {}", "features {}\n  bogus = 1", 1))
    network = copy / "modules" / "cluster" / "network.tf"
    network.write_text(network.read_text().replace("resource_group_name", "resource_group", 1))
    problems = check_dir(copy, schema).problems
    assert len(problems) == 3, problems  # the unknown argument, and the required one missing
    assert any("main.tf: provider azurerm: 'bogus' is not a known argument" in p for p in problems)
    assert any(p.startswith("network.tf") and "'resource_group'" in p for p in problems)
