"""The Terraform stack's input validations, exercised with the real terraform binary.

Variables and the cross-input preconditions (checks.tf, a provider-less terraform_data) need no
provider, so a copy of just those two files inits and plans offline. Each bad value must be
refused with its own message and by the objects the table says (what `terraform test`'s
expect_failures names), each good value must plan cleanly, and every validation and
precondition of the stack must be exercised by at least one bad case here. The same table makes
infra/terraform/tests/validations.tftest.hcl (scripts/terraform_validation_tests.py), which
GitHub's terraform workflow runs against the whole module with mock providers.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hcl2
import pytest

from support import REPO
from terraform_support import MODULE, STACK, error_messages, terraform_env
from validation_cases import BAD, GOOD, REFUSED, REQUIRED, Refused, case_id, console

RULE_FAILED = {"Invalid value for variable", "Resource precondition failed"}
"""The summaries of a failed validation and of a failed precondition."""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("terraform") is None:
        pytest.fail("terraform is not on PATH (the validations are checked with the real binary)")
    work = tmp_path_factory.mktemp("tf-variables")
    for name in ("variables.tf", "checks.tf"):
        shutil.copy(MODULE / name, work / name)
    init = subprocess.run(
        ["terraform", "init", "-input=false", "-no-color"],
        cwd=work,
        env=terraform_env(work),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert init.returncode == 0, f"terraform init (no providers) failed:\n{init.stderr}"
    return work


def tfvars(variables: dict[str, Any]) -> tuple[str, dict[int, str]]:
    """The required inputs plus ``variables`` as a .tfvars.json text, and the offset of each
    variable's value in it (where terraform points a refused value)."""
    text, starts = "{", {}
    for i, (name, value) in enumerate({**REQUIRED, **variables}.items()):
        text += (", " if i else "") + json.dumps(name) + ": "
        starts[len(text)] = name
        text += json.dumps(value)
    return text + "}", starts


def plan(work: Path, variables: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    """``terraform plan`` with the required inputs plus ``variables``: (exit code, errors); each
    error carries ``"object"``: what refused the value (``var.NAME``, or the resource whose
    precondition failed), as `terraform test`'s expect_failures names it."""
    var_file = work / "case.tfvars.json"
    text, starts = tfvars(variables)
    var_file.write_text(text)
    result = subprocess.run(
        ["terraform", "plan", "-input=false", "-no-color", "-json", "-lock=false",
         f"-var-file={var_file.name}"],
        cwd=work,
        env=terraform_env(work),
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    errors = []
    for line in result.stdout.splitlines():
        message = json.loads(line)
        diagnostic = message.get("diagnostic")
        if diagnostic and diagnostic["severity"] == "error":
            where = diagnostic.get("range") or {}
            context = (diagnostic.get("snippet") or {}).get("context") or ""
            if resource := re.fullmatch(r'resource "(\w+)" "(\w+)"', context):
                diagnostic["object"] = f"{resource[1]}.{resource[2]}"
            elif where.get("filename") == var_file.name:
                diagnostic["object"] = f"var.{starts.get(where['start']['byte'], '?')}"
            errors.append(diagnostic)
    return result.returncode, errors


@pytest.fixture(scope="module")
def bad_plans(workdir: Path) -> Callable[[dict[str, Any]], tuple[int, list[dict[str, Any]]]]:
    """plan() of a bad case, each planned once per module: the case's own test and the check
    that every rule is exercised read the same plan (each plan takes 1-2 s)."""
    done: dict[str, tuple[int, list[dict[str, Any]]]] = {}

    def planned(variables: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
        key = json.dumps(variables, sort_keys=True)
        if key not in done:
            done[key] = plan(workdir, variables)
        return done[key]

    return planned


@pytest.mark.parametrize("case", REFUSED, ids=[case_id(c) for c in REFUSED])
def test_bad_value_is_refused_with_its_message(
    bad_plans: Callable[[dict[str, Any]], tuple[int, list[dict[str, Any]]]],
    case: Refused,
) -> None:
    variables, expected, fails = case
    code, errors = bad_plans(variables)
    details = [e["detail"] for e in errors]
    assert code != 0, f"{variables} was accepted"
    assert any(expected in d for d in details), f"expected {expected!r} among {details}"
    # Refused by a rule, never by an expression that broke on the bad value (HCL's || does not
    # short-circuit: cidrhost("*", 0) in a rule is an error, and `terraform test`'s
    # expect_failures does not count errors as failed validations).
    broken = [f"{e['summary']}: {e['detail']}" for e in errors if e["summary"] not in RULE_FAILED]
    assert not broken, broken
    # What refused it is what the terraform test file made of the table expects to fail, all
    # of it: a run whose plan fails on an object its expect_failures leaves out fails.
    assert sorted({e.get("object", "?") for e in errors}) == sorted(fails), errors


def test_the_terraform_test_file_is_made_of_the_table() -> None:
    """infra/terraform/tests/validations.tftest.hcl is what scripts/terraform_validation_tests.py
    makes of REFUSED: one run per bad case, none kept by hand beside the table."""
    r = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "terraform_validation_tests.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    text = (STACK / "tests" / "validations.tftest.hcl").read_text()
    assert text.count('\nrun "') == len(REFUSED)


@pytest.mark.parametrize("variables", GOOD, ids=[case_id(c) for c in GOOD])
def test_good_value_passes(workdir: Path, variables: dict[str, Any]) -> None:
    code, errors = plan(workdir, variables)
    assert code == 0 and not errors, [e["detail"] for e in errors]


def test_required_inputs_have_no_default(workdir: Path) -> None:
    var_file = workdir / "none.tfvars.json"
    var_file.write_text("{}")
    result = subprocess.run(
        ["terraform", "plan", "-input=false", "-no-color", "-lock=false",
         f"-var-file={var_file.name}"],
        cwd=workdir, env=terraform_env(workdir), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode != 0
    for name in REQUIRED:
        assert f'"{name}" is not set' in result.stderr.replace("\n", " ") or (
            f"var.{name}" in result.stderr
        ), result.stderr


def _prefix(message: str) -> str:
    """The literal start of a message, before its first interpolation or escaped quote."""
    return message.split("${")[0].split('\\"')[0]


@pytest.mark.parametrize(
    "kind,file", [("validation", "variables.tf"), ("precondition", "checks.tf")]
)
def test_every_rule_is_exercised(
    bad_plans: Callable[[dict[str, Any]], tuple[int, list[dict[str, Any]]]], kind: str, file: str
) -> None:
    """No validation or precondition of the stack goes without a bad case above."""
    observed = {e["detail"] for variables, _ in BAD for e in bad_plans(variables)[1]}
    messages = error_messages(MODULE / file, kind)
    assert len(messages) >= (20 if kind == "validation" else 4)
    untested = [m for m in messages if not any(_prefix(m) in seen for seen in observed)]
    assert not untested, f"{kind}s no bad case triggers: {untested}"


@pytest.mark.parametrize(
    "variables,rules",
    [
        ({}, ["203.0.113.7"]),  # /32 -> the bare address, as Key Vault keeps it
        (
            {"allowed_ssh_cidrs": ["10.0.0.0/9", "203.0.113.7/32", "192.168.0.0/24"]},
            ["203.0.113.7"],  # private entries cannot be named on Key Vault's firewall
        ),
        (
            {"allowed_ssh_cidrs": ["198.51.100.0/24", "100.64.0.0/10", "169.254.1.0/24"]},
            ["198.51.100.0/24"],
        ),
        (
            {"allowed_ssh_cidrs": ["10.0.0.0/8"], "key_vault_allowed_cidrs": ["192.0.2.10/32"]},
            ["192.0.2.10"],  # the variable replaces allowed_ssh_cidrs
        ),
        (
            {"key_vault_allowed_cidrs": ["198.51.100.0/24", "192.0.2.1/32"]},
            ["198.51.100.0/24", "192.0.2.1"],
        ),
    ],
    ids=["default", "private-dropped", "cgnat-link-local-dropped", "variable", "two"],
)
def test_key_vault_firewall_rules(workdir: Path, variables: dict, rules: list[str]) -> None:
    assert console(workdir, variables, "local.key_vault_ip_rules") == rules


# -- worker pools: the default pool is the single scale set of before ----------------------------
# The addresses of the resources a cluster made before worker pools holds in its state
# (git show 2b843b6:infra/terraform/{workers,autoscale,identity}.tf), and their names then. The
# root's moved.tf (scripts/terraform_root.py) takes them into the module's default pool.
BEFORE_POOLS = {
    "azurerm_linux_virtual_machine_scale_set.workers": "linux_virtual_machine_scale_set",
    "azurerm_monitor_autoscale_setting.workers": "monitor_autoscale_setting",
    "azurerm_role_assignment.autoscaler_scale_set": "role_assignment",
    "azurerm_role_assignment.autostop_scale_set": "role_assignment",
    "azurerm_role_assignment.autostop_autoscale": "role_assignment",
}


def test_moved_blocks_take_the_single_scale_set_into_the_default_pool(workdir: Path) -> None:
    """Offline, what `terraform plan` on an existing state would rely on: every resource of
    before has a moved block (the root's moved.tf) into the same resource in
    module.cluster.module.worker_pool["workers"], that pool is what the defaults make, under the
    names of before (a changed name or host name prefix would replace the scale set), and the
    pool's resources exist in the module."""
    module: set[str] = set()
    for path in (STACK / "modules" / "worker_pool").glob("*.tf"):
        for block in hcl2.load(path.open()).get("resource", []):
            for rtype, instances in block.items():
                module |= {f"{rtype.strip(chr(34))}.{n.strip(chr(34))}" for n in instances}
    every = {
        m["from"].strip("${}"): m["to"].strip("${}")
        for m in hcl2.load((STACK / "moved.tf").open())["moved"]
    }
    moved = {k: v for k, v in every.items() if k in BEFORE_POOLS}
    assert set(moved) == set(BEFORE_POOLS)
    for old, new in moved.items():
        prefix = 'module.cluster.module.worker_pool["workers"].'
        assert new.startswith(prefix), new
        # The Uniform scale set has a count (one, or none in a Flexible pool): its index 0.
        inner = new.removeprefix(prefix).removesuffix("[0]")
        assert inner in module, inner
        assert inner.split(".")[0] == old.split(".")[0], (old, new)
    pools = console(workdir, {}, "local.worker_pool_settings")
    assert list(pools) == ["workers"]
    assert {k: pools["workers"][k] for k in ("scale_set_name", "autoscale_name")} == {
        "scale_set_name": "ray-workers",  # was "${var.name_prefix}-workers"
        "autoscale_name": "ray-workers-autoscale",  # was "${var.name_prefix}-workers-autoscale"
    }
    assert pools["workers"]["computer_name_prefix"] == "ray-w"  # was "${var.name_prefix}-w"
    # ... but it is a Flexible scale set now, which replaces the Uniform one of before (`up`
    # says so) unless the pool pins Uniform: then it is the pool of before, setting for setting
    # (the same names, sizes and deploy-time values: nothing but the mode differs).
    assert pools["workers"]["orchestration_mode"] == "Flexible"
    pinned = {"worker_pools": {"workers": {"orchestration_mode": "Uniform"}}}
    kept = console(workdir, pinned, "local.worker_pool_settings")
    assert list(kept) == ["workers"] and kept["workers"]["orchestration_mode"] == "Uniform"
    assert {**kept["workers"], "orchestration_mode": "Flexible"} == pools["workers"]
    # ... and made of the worker_* variables, as the scale set was.
    given = {
        "worker_vm_size": "Standard_F8s_v2",
        "worker_min_count": 1,
        "worker_default_count": 3,
        "worker_max_count": 9,
        "worker_spot_enabled": True,
    }
    pool = console(workdir, given, "local.worker_pool_settings")["workers"]
    assert (pool["vm_size"], pool["min_count"], pool["default_count"], pool["max_count"]) == (
        "Standard_F8s_v2", 1, 3, 9
    )  # fmt: skip
    assert (pool["spot_enabled"], pool["eviction_policy"], pool["max_price"]) == (
        True,
        "Delete",
        -1,
    )
    assert pool["deploy_values"] == {
        "WORKER_POOL": "workers",
        "RAY_RESOURCES": "{}",
        "RAY_LABELS": "",
    }


def test_pools_take_what_they_leave_out_from_the_worker_variables(workdir: Path) -> None:
    given = {
        "worker_vm_size": "Standard_D8s_v5",
        "worker_pools": {
            "cpu": {"spot_enabled": True, "ray_resources": {"simulator": 2}},
            "gpu": {
                "vm_size": "Standard_NC4as_T4_v3",
                "max_count": 2,
                "ray_labels": {"b": "2", "a": "1"},
            },
        },
    }
    pools = console(workdir, given, "local.worker_pool_settings")
    assert list(pools) == ["cpu", "gpu"]
    assert pools["cpu"]["vm_size"] == "Standard_D8s_v5" and pools["cpu"]["spot_enabled"] is True
    assert (
        pools["gpu"]["vm_size"] == "Standard_NC4as_T4_v3" and pools["gpu"]["spot_enabled"] is False
    )
    assert (
        pools["gpu"]["min_count"],
        pools["gpu"]["default_count"],
        pools["gpu"]["max_count"],
    ) == (0, 2, 2)
    assert pools["cpu"]["computer_name_prefix"] == "ray-cpu-"
    assert pools["cpu"]["deploy_values"]["RAY_RESOURCES"] == '{"simulator":2}'
    assert pools["gpu"]["deploy_values"]["RAY_LABELS"] == "a=1,b=2"
