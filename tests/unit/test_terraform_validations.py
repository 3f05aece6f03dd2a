"""The Terraform stack's input validations, exercised with the real terraform binary.

Variables and the cross-input preconditions (checks.tf, a provider-less terraform_data) need no
provider, so a copy of just those two files inits and plans offline. Each bad value must be
refused with its own message, each good value must plan cleanly, and every validation and
precondition of the stack must be exercised by at least one bad case here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import hcl2
import pytest

from test_terraform_custom_data import MAX_VALUE_LENGTHS

REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "infra" / "terraform"

ED25519 = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIP4S9mbJDa3rbswrgZDZPW0SvS6zPUB0LvnB0IkRZLgc you@example"
)
RSA = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7" + "A" * 300 + "== you@example"
REQUIRED = {
    "location": "westeurope",
    "allowed_ssh_cidrs": ["203.0.113.7/32"],
    "admin_ssh_public_key": ED25519,
}

# (variables, fragment of the expected error message)
BAD: list[tuple[dict[str, Any], str]] = [
    ({"location": "West Europe"}, "location must be an Azure region name"),
    ({"allowed_ssh_cidrs": []}, "allowed_ssh_cidrs must list at least one IPv4 CIDR"),
    ({"allowed_ssh_cidrs": ["0.0.0.0/0"]}, "must not open SSH to the whole Internet"),
    ({"allowed_ssh_cidrs": ["203.0.113.7/32", "*"]}, "must not open SSH to the whole Internet"),
    ({"allowed_ssh_cidrs": ["Internet"]}, "must not open SSH to the whole Internet"),
    ({"allowed_ssh_cidrs": ["any"]}, "must not open SSH to the whole Internet"),
    ({"allowed_ssh_cidrs": ["10.1.2.3/0"]}, "must not open SSH to the whole Internet"),
    ({"allowed_ssh_cidrs": ["203.0.113.7"]}, "every entry must be an IPv4 CIDR"),
    ({"allowed_ssh_cidrs": ["300.1.1.1/32"]}, "every entry must be an IPv4 CIDR"),
    ({"allowed_ssh_cidrs": ["2001:db8::/32"]}, "every entry must be an IPv4 CIDR"),
    ({"admin_ssh_public_key": ""}, "admin_ssh_public_key must be one OpenSSH public key line"),
    ({"admin_ssh_public_key": "~/.ssh/id_ed25519.pub"}, "admin_ssh_public_key must be one"),
    ({"admin_ssh_public_key": "ecdsa-sha2-nistp256 AAAAE2Vj"}, "admin_ssh_public_key must be"),
    ({"admin_ssh_public_key": ED25519 + "\n" + ED25519}, "admin_ssh_public_key must be one"),
    ({"resource_group_name": "rg with spaces"}, "resource_group_name must be 1-90"),
    ({"resource_group_name": "ends-in-dot."}, "resource_group_name must be 1-90"),
    ({"resource_group_name": "r" * 91}, "resource_group_name must be 1-90"),
    ({"name_prefix": "Ray"}, "name_prefix must be 2-16 lower-case"),
    ({"name_prefix": "r"}, "name_prefix must be 2-16 lower-case"),
    ({"name_prefix": "ray-"}, "name_prefix must be 2-16 lower-case"),
    ({"name_prefix": "r" * 17}, "name_prefix must be 2-16 lower-case"),
    ({"vnet_address_space": "10.0.0.0/7"}, "vnet_address_space must be an IPv4 CIDR"),
    ({"vnet_address_space": "10.42.0.0/29"}, "vnet_address_space must be an IPv4 CIDR"),
    ({"vnet_address_space": "ten.0.0.0/16"}, "vnet_address_space must be an IPv4 CIDR"),
    ({"subnet_address_prefix": "10.42.1.5/24"}, "subnet_address_prefix must be an IPv4 network"),
    ({"subnet_address_prefix": "10.42.1.0/29"}, "subnet_address_prefix must be an IPv4 network"),
    ({"admin_username": "AzureUser"}, "admin_username must be 1-32 lower-case"),
    ({"admin_username": "a" * 33}, "admin_username must be 1-32 lower-case"),
    ({"admin_username": "o'brien"}, "admin_username must be 1-32 lower-case"),
    ({"admin_username": "root"}, "admin_username must not be a name Azure reserves"),
    ({"admin_username": "admin"}, "admin_username must not be a name Azure reserves"),
    ({"os_image": "ubuntu-20.04"}, "os_image must be one of"),
    ({"head_vm_size": "D4s_v5"}, "head_vm_size must be an Azure VM size"),
    ({"worker_vm_size": "Standard D4s v5"}, "worker_vm_size must be an Azure VM size"),
    ({"worker_min_count": -1}, "worker_min_count must be a whole number from 0 to 100"),
    ({"worker_min_count": 1.5}, "worker_min_count must be a whole number from 0 to 100"),
    ({"worker_default_count": 101}, "worker_default_count must be a whole number from 0 to 100"),
    ({"worker_max_count": 0}, "worker_max_count must be a whole number from 1 to 100"),
    ({"worker_max_count": 101}, "worker_max_count must be a whole number from 1 to 100"),
    ({"scale_out_cpu_percent": 0}, "scale_out_cpu_percent must be between 1 and 100"),
    ({"scale_out_cpu_percent": 101}, "scale_out_cpu_percent must be between 1 and 100"),
    ({"scale_in_cpu_percent": -1}, "scale_in_cpu_percent must be between 0 and 99"),
    ({"scale_in_cpu_percent": 100}, "scale_in_cpu_percent must be between 0 and 99"),
    ({"scale_out_cooldown_minutes": 0}, "scale_out_cooldown_minutes must be a whole number"),
    ({"scale_out_cooldown_minutes": 2.5}, "scale_out_cooldown_minutes must be a whole number"),
    ({"scale_in_cooldown_minutes": 61}, "scale_in_cooldown_minutes must be a whole number"),
    ({"worker_termination_notice_minutes": 4}, "worker_termination_notice_minutes must be"),
    ({"worker_termination_notice_minutes": 16}, "worker_termination_notice_minutes must be"),
    ({"extra_pip_packages": ["minigrid 3.0.0"]}, "extra_pip_packages: each entry must be one"),
    ({"extra_pip_packages": ["it's"]}, "extra_pip_packages: each entry must be one"),
    ({"extra_pip_packages": ["back\\slash"]}, "extra_pip_packages: each entry must be one"),
    (
        {"extra_pip_packages": ["a" * 600, "b" * (MAX_VALUE_LENGTHS["EXTRA_PIP_PACKAGES"] - 600)]},
        "extra_pip_packages must come to 1,024 characters or fewer",
    ),
    ({"pip_index_url": "ftp://mirror.example/simple"}, "pip_index_url must be one http(s) URL"),
    ({"pip_index_url": "https://pypi.org/simple'"}, "pip_index_url must be one http(s) URL"),
    ({"pip_index_url": "https://pypi.org/ simple"}, "pip_index_url must be one http(s) URL"),
    (
        {"pip_index_url": "https://x.example/" + "a" * (MAX_VALUE_LENGTHS["PIP_INDEX_URL"] - 17)},
        "pip_index_url must be one http(s) URL",
    ),
    ({"torch_index_url": "download.pytorch.org/whl/cpu"}, "torch_index_url must be one http(s)"),
    ({"torch_index_url": "https://x\\y"}, "torch_index_url must be one http(s) URL"),
    ({"apt_source": "http://10.0.0.5/debian ./"}, "apt_source must be empty or one line"),
    ({"apt_source": "deb http://a ./\ndeb http://b ./"}, "apt_source must be empty or one line"),
    ({"apt_source": "deb 'http://a' ./"}, "apt_source must be empty or one line"),
    (
        {"apt_source": "deb http://a/" + "a" * (MAX_VALUE_LENGTHS["APT_SOURCE"] - 12)},
        "apt_source must be empty or one line",
    ),
    # checks.tf: rules that compare two inputs
    ({"worker_min_count": 3, "worker_default_count": 2}, "worker_min_count <= worker_default"),
    ({"worker_default_count": 5, "worker_max_count": 4}, "worker_min_count <= worker_default"),
    (
        {"scale_in_cpu_percent": 70, "scale_out_cpu_percent": 70},
        "scale_in_cpu_percent (70) must be below scale_out_cpu_percent (70)",
    ),
    ({"subnet_address_prefix": "10.43.1.0/24"}, "must lie inside vnet_address_space"),
    (
        {"vnet_address_space": "10.42.1.0/24", "subnet_address_prefix": "10.42.0.0/16"},
        "must lie inside vnet_address_space",
    ),
    ({"subnet_address_prefix": "10.42.1.0/28", "worker_max_count": 11}, "has room for 10 workers"),
]

GOOD: list[dict[str, Any]] = [
    {},  # the defaults
    {"allowed_ssh_cidrs": ["203.0.113.7/32", "198.51.100.0/24", "192.0.2.128/25"]},
    {"admin_ssh_public_key": ED25519 + "\n"},
    {"admin_ssh_public_key": RSA},
    {"location": "eastus2", "resource_group_name": "My_RG-(ray).1", "create_resource_group": False},
    {"name_prefix": "ab"},
    {"name_prefix": "ray-cluster-2026"},
    {"vnet_address_space": "10.0.0.0/8", "subnet_address_prefix": "10.200.0.0/16"},
    {"vnet_address_space": "192.168.0.0/24", "subnet_address_prefix": "192.168.0.16/28"},
    {"admin_username": "ray_ops"},
    {"admin_username": "a" * MAX_VALUE_LENGTHS["RAY_ADMIN_USER"]},
    {"os_image": "ubuntu-24.04"},
    {"os_image": "debian-12"},
    {"head_vm_size": "Standard_NC4as_T4_v3", "worker_vm_size": "standard_f8s_v2"},
    {"worker_min_count": 0, "worker_default_count": 0, "worker_max_count": 1},
    {"worker_min_count": 100, "worker_default_count": 100, "worker_max_count": 100},
    {"scale_out_cpu_percent": 100, "scale_in_cpu_percent": 99},
    {"scale_out_cooldown_minutes": 60, "scale_in_cooldown_minutes": 1},
    {"worker_spot_enabled": True, "worker_termination_notice_minutes": 15},
    {"encryption_at_host_enabled": True, "tags": {"project": "ray-rl"}},
    {"extra_pip_packages": ["minigrid==3.0.0", "gymnasium[atari]>=1.0", "ale-py"]},
    {"extra_pip_packages": ["a" * 600, "b" * (MAX_VALUE_LENGTHS["EXTRA_PIP_PACKAGES"] - 601)]},
    {"pip_index_url": "http://10.0.0.5:8080/simple/"},
    {"pip_index_url": "https://x.example/" + "a" * (MAX_VALUE_LENGTHS["PIP_INDEX_URL"] - 18)},
    {"torch_index_url": "https://download.pytorch.org/whl/cu128"},
    {"torch_index_url": "https://x.example/" + "a" * (MAX_VALUE_LENGTHS["TORCH_INDEX_URL"] - 18)},
    {"apt_source": "deb [trusted=yes] http://10.0.0.5/debian ./"},
    {"apt_source": "deb http://a/" + "a" * (MAX_VALUE_LENGTHS["APT_SOURCE"] - 13)},
]


def _env(tmp: Path) -> dict[str, str]:
    cli_config = tmp / "terraformrc"
    cli_config.write_text("")
    return {
        **os.environ,
        "CHECKPOINT_DISABLE": "1",  # no version check against HashiCorp's servers
        "TF_IN_AUTOMATION": "1",
        "TF_CLI_CONFIG_FILE": str(cli_config),
    }


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("terraform") is None:
        pytest.fail("terraform is not on PATH (the validations are checked with the real binary)")
    work = tmp_path_factory.mktemp("tf-variables")
    for name in ("variables.tf", "checks.tf"):
        shutil.copy(STACK / name, work / name)
    init = subprocess.run(
        ["terraform", "init", "-input=false", "-no-color"],
        cwd=work,
        env=_env(work),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert init.returncode == 0, f"terraform init (no providers) failed:\n{init.stderr}"
    return work


def plan(work: Path, variables: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    """``terraform plan`` with the required inputs plus ``variables``: (exit code, errors)."""
    var_file = work / "case.tfvars.json"
    var_file.write_text(json.dumps({**REQUIRED, **variables}))
    result = subprocess.run(
        ["terraform", "plan", "-input=false", "-no-color", "-json", "-lock=false",
         f"-var-file={var_file.name}"],
        cwd=work,
        env=_env(work),
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    errors = []
    for line in result.stdout.splitlines():
        message = json.loads(line)
        diagnostic = message.get("diagnostic")
        if diagnostic and diagnostic["severity"] == "error":
            errors.append(diagnostic)
    return result.returncode, errors


def _case_id(case: tuple[dict[str, Any], str] | dict[str, Any]) -> str:
    variables = case[0] if isinstance(case, tuple) else case
    text = ",".join(f"{k}={json.dumps(v)}" for k, v in variables.items()) or "defaults"
    return text if len(text) < 60 else text[:57] + "..."


@pytest.mark.parametrize("case", BAD, ids=[_case_id(c) for c in BAD])
def test_bad_value_is_refused_with_its_message(workdir: Path, case: tuple[dict, str]) -> None:
    variables, expected = case
    code, errors = plan(workdir, variables)
    details = [e["detail"] for e in errors]
    assert code != 0, f"{variables} was accepted"
    assert any(expected in d for d in details), f"expected {expected!r} among {details}"


@pytest.mark.parametrize("variables", GOOD, ids=[_case_id(c) for c in GOOD])
def test_good_value_passes(workdir: Path, variables: dict[str, Any]) -> None:
    code, errors = plan(workdir, variables)
    assert code == 0 and not errors, [e["detail"] for e in errors]


def test_required_inputs_have_no_default(workdir: Path) -> None:
    var_file = workdir / "none.tfvars.json"
    var_file.write_text("{}")
    result = subprocess.run(
        ["terraform", "plan", "-input=false", "-no-color", "-lock=false",
         f"-var-file={var_file.name}"],
        cwd=workdir, env=_env(workdir), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode != 0
    for name in REQUIRED:
        assert f'"{name}" is not set' in result.stderr.replace("\n", " ") or (
            f"var.{name}" in result.stderr
        ), result.stderr


def _messages(path: Path, kind: str) -> list[str]:
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


def _prefix(message: str) -> str:
    """The literal start of a message, before its first interpolation or escaped quote."""
    return message.split("${")[0].split('\\"')[0]


@pytest.mark.parametrize(
    "kind,file", [("validation", "variables.tf"), ("precondition", "checks.tf")]
)
def test_every_rule_is_exercised(workdir: Path, kind: str, file: str) -> None:
    """No validation or precondition of the stack goes without a bad case above."""
    observed = {e["detail"] for variables, _ in BAD for e in plan(workdir, variables)[1]}
    messages = _messages(STACK / file, kind)
    assert len(messages) >= (20 if kind == "validation" else 4)
    untested = [m for m in messages if not any(_prefix(m) in seen for seen in observed)]
    assert not untested, f"{kind}s no bad case triggers: {untested}"
