"""Conventions of the Terraform stack that hold it to its contracts: terraform fmt, provider
pins, variable and output conventions, the output names the driver and the Bicep stack share,
and a tfvars example with exactly the required inputs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import hcl2
import pytest
from terraform_docs import outputs, variables

from bicep_support import TERRAFORM_ONLY_OUTPUTS

REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "infra" / "terraform"
MODULE = STACK / "modules" / "cluster"
EXAMPLE = STACK / "examples" / "as-module"

# Read by `python -m driver --terraform-dir` (head_public_ip, admin_username) and mirrored by the
# Bicep stack in camelCase (headPublicIp, ...): renaming one breaks a consumer.
OUTPUT_CONTRACT = {
    "head_public_ip",
    "head_private_ip",
    "admin_username",
    "ssh_command",
    "scale_set_id",
    "head_vm_id",
    "autoscale_setting_id",
    "resource_group_name",
    "driver_command",
    "worker_pools",
    "results_url",
}
# Terraform's own: Bicep deploys into a resource group given to `az deployment group create`, and
# writes the token secret through Azure Resource Manager (control plane), so it needs neither a
# firewall opening for the deployer nor a wait for the deployer's data-plane role.
TERRAFORM_ONLY_VARIABLES = {
    "resource_group_name",
    "create_resource_group",
    "key_vault_allowed_cidrs",
    "rbac_propagation_wait_seconds",
}


def _unquote(value: str) -> str:
    return value[1:-1] if value.startswith('"') and value.endswith('"') else value


def terraform_env(tmp: Path) -> dict[str, str]:
    rc = tmp / "terraformrc"
    rc.write_text("")
    return {**os.environ, "CHECKPOINT_DISABLE": "1", "TF_CLI_CONFIG_FILE": str(rc)}


def test_terraform_fmt_check_passes(tmp_path: Path) -> None:
    if shutil.which("terraform") is None:
        pytest.fail("terraform is not on PATH")
    env = terraform_env(tmp_path)
    result = subprocess.run(
        ["terraform", "fmt", "-check", "-recursive", "-diff", "infra/terraform"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout
    # ... and the check can fail: a misaligned copy is reported.
    (tmp_path / "main.tf").write_text("locals {\n  a = 1\n  bb = 2\n}\n")
    bad = subprocess.run(
        ["terraform", "fmt", "-check", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode != 0 and "main.tf" in bad.stdout


@pytest.mark.parametrize("folder", [STACK, MODULE], ids=["root", "module"])
def test_versions_pin_terraform_and_azurerm_4(folder: Path) -> None:
    """The root and the cluster module pin the same (the module's callers get its pins)."""
    [terraform] = hcl2.load((folder / "versions.tf").open())["terraform"]
    # ephemeral resources (1.10) and write-only arguments (1.11)
    assert _unquote(terraform["required_version"]) == ">= 1.11"
    providers = {k: v for k, v in terraform["required_providers"][0].items() if k[:2] != "__"}
    assert set(providers) == {"azurerm", "random", "time"}
    assert _unquote(providers["azurerm"]["source"]) == "hashicorp/azurerm"
    # 4.x, from 4.42: the Key Vault's rbac_authorization_enabled (value_wo came in 4.23)
    assert _unquote(providers["azurerm"]["version"]) == "~> 4.42"
    assert _unquote(providers["random"]["source"]) == "hashicorp/random"
    # the ephemeral random_password exists since 3.7
    assert re.fullmatch(r"~> 3\.([7-9]|\d\d)", _unquote(providers["random"]["version"]))
    assert _unquote(providers["time"]["source"]) == "hashicorp/time"
    assert _unquote(providers["time"]["version"]) == "~> 0.13"
    # Every provider a resource or ephemeral block of the stack uses is pinned, and no other.
    used = set()
    for path in MODULE.glob("*.tf"):
        doc = hcl2.load(path.open())
        for section in ("resource", "data", "ephemeral"):
            for block in doc.get(section, []):
                used |= {k.strip('"').split("_")[0] for k in block if not k.startswith("__")}
    assert used - {"terraform"} == set(providers)


def test_only_pip_index_url_is_sensitive_and_says_where_it_still_goes() -> None:
    found = variables()
    assert {n for n, s in found.items() if s.get("sensitive") is True} == {"pip_index_url"}
    assert "custom data" in _unquote(found["pip_index_url"]["description"])


def test_every_variable_has_type_and_required_or_optional_description() -> None:
    found = variables()
    assert len(found) >= 25
    for name, spec in found.items():
        assert "type" in spec, name
        description = _unquote(spec["description"])
        required = "default" not in spec
        prefix = "(Required) " if required else "(Optional) "
        assert description.startswith(prefix), f"{name}: {description[:40]!r}"
        assert re.fullmatch(r"[a-z][a-z0-9_]*", name), name
    required = {n for n, s in found.items() if "default" not in s}
    assert required == {"location", "allowed_ssh_cidrs", "admin_ssh_public_key"}


def test_variable_names_translate_to_bicep_camel_case() -> None:
    """snake_case -> camelCase must be reversible for every input the Bicep stack shares."""
    for name in set(variables()) - TERRAFORM_ONLY_VARIABLES:
        head, *rest = name.split("_")
        camel = head + "".join(p.capitalize() for p in rest)
        back = re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel)
        assert back == name and not re.search(r"_\d|\d_", name), name


def test_outputs_are_the_contract_each_with_a_description() -> None:
    found = outputs()
    assert set(found) == OUTPUT_CONTRACT | TERRAFORM_ONLY_OUTPUTS
    for name, spec in found.items():
        assert _unquote(spec.get("description", "")), name
        assert "sensitive" not in spec, f"{name}: nothing secret belongs in an output"
    assert "cluster_token" not in (MODULE / "outputs.tf").read_text()


def test_driver_command_is_exactly_the_submit_line() -> None:
    local = {}
    for block in hcl2.load((MODULE / "locals.tf").open())["locals"]:
        local.update(block)
    assert local["ssh_target"] == '"${var.admin_username}@${azurerm_public_ip.head.ip_address}"'
    found = outputs()
    assert found["driver_command"]["value"] == (
        '"python -m driver submit examples/cartpole/train.py --head ${local.ssh_target}"'
    )
    assert found["ssh_command"]["value"] == '"ssh ${local.ssh_target}"'
    assert found["head_public_ip"]["value"] == "${azurerm_public_ip.head.ip_address}"
    assert found["admin_username"]["value"] == "${var.admin_username}"
    assert (REPO / "examples" / "cartpole" / "train.py").exists()


def test_tfvars_example_sets_exactly_the_required_inputs() -> None:
    example = hcl2.load((STACK / "terraform.tfvars.example").open())
    given = {k for k in example if not k.startswith("__")}
    required = {n for n, s in variables().items() if "default" not in s}
    assert given == required


def test_tfvars_example_passes_the_validations(tmp_path: Path) -> None:
    if shutil.which("terraform") is None:
        pytest.fail("terraform is not on PATH")
    # The root's variables (a copy of the module's) and the module's checks, as `price` plans them.
    shutil.copy(STACK / "variables.tf", tmp_path / "variables.tf")
    shutil.copy(MODULE / "checks.tf", tmp_path / "checks.tf")
    shutil.copy(STACK / "terraform.tfvars.example", tmp_path / "example.tfvars")
    env = terraform_env(tmp_path)
    for command in (
        ["terraform", "init", "-input=false", "-no-color"],
        ["terraform", "plan", "-input=false", "-no-color", "-var-file=example.tfvars"],
    ):
        result = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_tftest_files_reference_what_the_stack_has() -> None:
    """terraform test runs only on GitHub; here at least every address a test names must exist:
    resources, variables in expect_failures and run variables, outputs, mocked providers."""
    resources = set()
    for path in MODULE.glob("*.tf"):
        for block in hcl2.load(path.open()).get("resource", []):
            for rtype, instances in block.items():
                resources |= {f"{rtype.strip(chr(34))}.{n.strip(chr(34))}" for n in instances}
    known_vars, known_outputs = set(variables()), set(outputs())
    module_outputs: dict[str, set[str]] = {}
    for path in MODULE.glob("*.tf"):
        for block in hcl2.load(path.open()).get("module", []):
            for name, call in block.items():
                source = MODULE / call["source"].strip('"')
                module_outputs[name.strip('"')] = {
                    k.strip('"')
                    for p in source.glob("*.tf")
                    for b in hcl2.load(p.open()).get("output", [])
                    for k in b
                }
    assert set(module_outputs) == {"worker_pool"}
    example_outputs = {
        k.strip('"') for b in hcl2.load((EXAMPLE / "main.tf").open())["output"] for k in b
    }
    files = sorted((STACK / "tests").glob("*.tftest.hcl"))
    assert len(files) >= 2
    runs = 0
    targets: dict[str, set[str | None]] = {}
    for path in files:
        # What a test names, its comments left out (a generated file's header names its script).
        text = "\n".join(
            line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")
        )
        doc = hcl2.load(path.open())
        mocked = {k.strip('"') for block in doc.get("mock_provider", []) for k in block}
        # random stays real: mock providers cannot open ephemeral resources (Terraform's
        # internal/providers/mock.go, 1.11-1.15: "No ephemeral resource types in mock
        # providers"), and the cluster token is an ephemeral random_password.
        assert mocked == {"azurerm", "time"}, path.name
        assert set(doc.get("variables", [{}])[0]) - {"__is_block__"} <= known_vars
        for block in doc["run"]:
            for name, run in block.items():
                runs += 1
                # The module itself (every file but root.tftest.hcl: they name its resources),
                # the root (None) or a root of one's own that calls the module.
                [source] = [_unquote(m["source"]) for m in run.get("module", [])] or [None]
                assert source in (None, "./modules/cluster", "./examples/as-module"), source
                targets.setdefault(path.name, set()).add(source)
                assert run.get("command") == "plan", f"{path.name} {name}: plan only"
                assert run.get("assert") or run.get("expect_failures"), f"{path.name} {name}"
                for variables_block in run.get("variables", []):
                    unknown = set(variables_block) - {"__is_block__"} - known_vars
                    assert not unknown, f"{path.name} {name}: {unknown}"
                for failure in run.get("expect_failures", []):
                    target = failure.strip("${}")
                    assert target.removeprefix("var.") in known_vars or target in resources
        used = set(re.findall(r"\b((?:azurerm|random|terraform|time)_\w+\.\w+)", text))
        assert used <= resources, f"{path.name}: {used - resources}"
        # A child module's values are its outputs: module.NAME["KEY"].OUTPUT, declared there.
        for name, output in re.findall(r"\bmodule\.(\w+)\[[^\]]+\]\.(\w+)", text):
            assert output in module_outputs.get(name, set()), f"{path.name}: module.{name}.{output}"
        assert set(re.findall(r"\boutput\.(\w+)", text)) <= known_outputs | example_outputs
    assert runs >= 20
    assert targets.pop("root.tftest.hcl") == {None, "./examples/as-module"}
    assert targets and all(t == {"./modules/cluster"} for t in targets.values()), targets


def _locals() -> dict[str, object]:
    found: dict[str, object] = {}
    for block in hcl2.load((MODULE / "locals.tf").open())["locals"]:
        found.update(block)
    return found


def test_health_probe_targets_the_endpoint_layout_names() -> None:
    """The extension probes what the workers serve: port and path from python/driver/layout.py,
    http with a JSON body (rich health states), and a grace longer than the bootstrap's own time
    limits (the token's, and Ray's readiness)."""
    from driver import layout
    from nodekit import render

    probe = _locals()["worker_health_probe"]
    assert isinstance(probe, dict)
    assert probe["protocol"] == '"http"'
    assert probe["port"] == layout.HEALTH_PORT
    assert probe["requestPath"] == f'"{layout.HEALTH_PATH}"'
    assert 5 <= probe["intervalInSeconds"] <= 60 and 1 <= probe["numberOfProbes"] <= 24
    assert render.TOKEN_TIMEOUT_S + render.READY_TIMEOUT_S < probe["gracePeriod"] <= 14400
    # Every pool's scale set gets it (modules/worker_pool, called from workers.tf).
    workers = (MODULE / "workers.tf").read_text()
    assert "health_probe = local.worker_health_probe" in workers
    pool = (STACK / "modules" / "worker_pool" / "main.tf").read_text()
    assert "settings                   = jsonencode(var.health_probe)" in pool


def test_no_network_rule_opens_the_health_port() -> None:
    """The endpoint is loopback-only: no NSG rule names its port (the rules that admit the
    cluster's own traffic name every port, '*', and the endpoint does not listen there)."""
    from driver import layout

    network = hcl2.load((MODULE / "network.tf").open())
    rules = [
        rule
        for block in network["resource"]
        for nsg in block.get('"azurerm_network_security_group"', {}).values()
        for rule in nsg.get("security_rule", [])
    ]
    assert rules, "no security_rule found in network.tf"
    for rule in rules:
        ports = [rule.get("destination_port_range", ""), *rule.get("destination_port_ranges", [])]
        for port in ports:
            assert str(layout.HEALTH_PORT) not in str(port), rule
    assert str(layout.HEALTH_PORT) not in (MODULE / "network.tf").read_text()
