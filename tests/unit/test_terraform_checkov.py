"""checkov on the Terraform stack, on the workflows and, for secrets, on the whole repository:
zero failed checks, and every skip is a `checkov:skip=ID:reason` comment inside the resource (or
next to the line) it concerns, used by checkov, with a reason. checkov lives in its own
environment (.tools/checkov, created by scripts/test.sh, exported as $RAYDRIVER_CHECKOV); without
it these tests fail, they do not skip.
"""

from __future__ import annotations

import random
import re
import shutil
import string
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from checkov_support import run_checkov
from support import REPO

STACK = REPO / "infra" / "terraform"
SKIP_COMMENT = re.compile(r"#\s*checkov:skip=(?P<id>[A-Z0-9_]+)(?::(?P<reason>.*))?")


@pytest.fixture(scope="module")
def terraform_report() -> dict[str, Any]:
    return run_checkov(STACK, "terraform")


def test_no_failed_checks(terraform_report: dict[str, Any]) -> None:
    summary = terraform_report["summary"]
    failed = [
        f"{c['check_id']} {c['resource']}: {c['check_name']}"
        for c in terraform_report["results"]["failed_checks"]
    ]
    assert summary["failed"] == 0, failed
    assert summary["parsing_errors"] == 0
    assert summary["passed"] >= 15
    assert summary["resource_count"] >= 15


def skip_comments() -> list[tuple[str, int, str, str]]:
    """(file, line, check id, reason) of every checkov skip in the stack (and in the results
    storage stack, results/, which the scan of infra/terraform includes)."""
    found = []
    paths = sorted(STACK.glob("*.tf")) + sorted(STACK.glob("modules/*/*.tf"))
    for path in paths + sorted(STACK.glob("results/*.tf")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            match = SKIP_COMMENT.search(line)
            if match:
                name = str(path.relative_to(STACK))
                found.append((name, number, match["id"], (match["reason"] or "").strip()))
    return found


def enclosing_block(path: Path, line: int) -> str | None:
    """The top-level block header a line sits in (``resource "type" "name"``), if any."""
    header = None
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        if number == line:
            return header
        if re.match(r"^\S.*\{\s*$", text):
            header = text.rstrip(" {")
        elif text.startswith("}"):
            header = None
    return None


# checkov names a child module's resource by the calls that lead to it: the cluster module is
# called by the root (module.cluster) and by examples/as-module (module.ray), each scanned once;
# worker_pool by the cluster module. Each skip in a module is one skipped check per call.
MODULE_CALLS = {
    "cluster": ("module.cluster", "module.ray"),
    "worker_pool": ("module.cluster.module.worker_pool", "module.ray.module.worker_pool"),
}


def test_every_skip_is_inside_its_resource_with_a_reason(terraform_report: dict) -> None:
    skipped = {
        (c["check_id"], c["resource"]): c["check_result"].get("suppress_comment", "")
        for c in terraform_report["results"]["skipped_checks"]
    }
    comments = skip_comments()
    calls = [
        MODULE_CALLS[file.split("/")[1]] if file.startswith("modules/") else ("",)
        for file, _, _, _ in comments
    ]
    used: set[tuple[str, str]] = set()
    for (file, line, check_id, reason), prefixes in zip(comments, calls, strict=True):
        header = enclosing_block(STACK / file, line)
        assert header and header.startswith("resource "), f"{file}:{line} is not inside a resource"
        _, rtype, name = header.split()
        address = re.escape(f"{rtype.strip(chr(34))}.{name.strip(chr(34))}")
        # checkov names a resource with a count by its index; a call where the resource's count
        # is 0 (a pool's scale set of the other orchestration mode) has nothing to skip.
        named = re.compile(
            "(?:" + "|".join(re.escape(f"{p}.") if p else "" for p in prefixes) + rf"){address}"
            r"(?:\[\d+\])?"
        )
        mine = {k for k in skipped if k[0] == check_id and named.fullmatch(k[1])}
        assert mine, f"{file}:{line} {check_id} skips nothing"
        assert len(reason) >= 40, f"{file}:{line} {check_id}: the reason is too short"
        for k in mine:
            assert skipped[k] == reason, k
        used |= mine
    assert used == set(skipped), (comments, skipped)


# What each check checkov runs on the Uniform scale set (azurerm_linux_virtual_machine_scale_set)
# inspects, read on the Flexible one's body (azurerm_orchestrated_virtual_machine_scale_set,
# where the login settings sit in os_profile.linux_configuration): checkov 3.3 has no check of
# the Flexible resource type, the default pool's, so these hold it to the Uniform checks.
def _linux(body: dict[str, Any]) -> dict[str, Any]:
    [os_profile] = body["os_profile"]
    [linux] = os_profile["linux_configuration"]
    return linux


FLEXIBLE_EQUIVALENTS = {
    # AzureScaleSetPassword, VMDisablePasswordAuthentication: password login off, written out.
    "CKV_AZURE_49": lambda b: _linux(b)["disable_password_authentication"] is True,
    "CKV_AZURE_149": lambda b: _linux(b)["disable_password_authentication"] is True,
    # LinuxVMUsesSSH: an SSH public key, and no password to fall back on.
    "CKV_AZURE_178": lambda b: (
        bool(_linux(b)["admin_ssh_key"][0]["public_key"]) and "admin_password" not in _linux(b)
    ),
    # VMAgentIsInstalled: the VM agent not turned off (the health extension needs it).
    "CKV_AZURE_179": lambda b: _linux(b).get("provision_vm_agent", True) is not False,
    # VMEncryptionAtHostEnabled (skipped on both, with the reason in worker_pool/main.tf): the
    # same variable.
    "CKV_AZURE_97": lambda b: (
        b["encryption_at_host_enabled"] == "${var.encryption_at_host_enabled}"
    ),
}


def test_the_flexible_scale_set_keeps_what_checkov_judges_on_the_uniform_one(
    terraform_report: dict,
) -> None:
    """checkov has no check of azurerm_orchestrated_virtual_machine_scale_set (the default
    pool's scale set passes it unseen), so its settings are held here to every check checkov
    runs (or is told to skip) on the Uniform scale set: a new check there fails this test until
    its Flexible equivalent is written. Also: no public IP, the nodes' identity."""
    import hcl2

    results = terraform_report["results"]
    flexible = "azurerm_orchestrated_virtual_machine_scale_set"
    seen = results["passed_checks"] + results["failed_checks"] + results["skipped_checks"]
    assert not [c for c in seen if flexible in c["resource"]], "checkov checks it now: use that"
    uniform_checks = {c["check_id"] for c in seen
                      if "azurerm_linux_virtual_machine_scale_set" in c["resource"]}  # fmt: skip
    assert uniform_checks == set(FLEXIBLE_EQUIVALENTS)
    [body] = [
        b
        for block in hcl2.load((STACK / "modules" / "worker_pool" / "main.tf").open())["resource"]
        for t, instances in block.items()
        if t.strip('"') == flexible
        for b in instances.values()
    ]
    assert [c for c, holds in FLEXIBLE_EQUIVALENTS.items() if not holds(body)] == []
    # ... and a copy with password login allowed would be caught.
    [os_profile] = body["os_profile"]
    loose = {**body, "os_profile": [{**os_profile, "linux_configuration": [
        {**_linux(body), "disable_password_authentication": False}]}]}  # fmt: skip
    assert not FLEXIBLE_EQUIVALENTS["CKV_AZURE_49"](loose)
    for nic in body["network_interface"]:
        for ip in nic["ip_configuration"]:
            assert "public_ip_address" not in ip
    [identity] = body["identity"]
    assert identity["type"].strip(chr(34)) == "UserAssigned"


def test_github_workflows_pass_checkov() -> None:
    workflows = sorted((REPO / ".github" / "workflows").glob("*.y*ml"))
    assert workflows, "no workflow to check"
    report = run_checkov(REPO / ".github", "github_actions")
    failed = [f"{c['check_id']} {c['file_path']}" for c in report["results"]["failed_checks"]]
    assert report["summary"]["failed"] == 0, failed
    assert report["summary"]["passed"] > 0


# What skip-path may leave out: the deliberately broken fixtures, and git-ignored folders that
# tools create in the work tree (not the repository's code).
ALLOWED_SKIP_PATHS = {
    "tests/fixtures/terraform/broken",
    r"/\.venv/",
    r"/\.tools/",
    r"/\.rehearsal/",
    r"/\.pytest_cache/",
    r"/\.ruff_cache/",
    r"/\.mypy_cache/",
    "/__pycache__/",
    r"\.egg-info/",
    # job results (python -m driver download), not the results storage stack
    "(?<!/infra/terraform)/results/",
    # checkov's bicep variable renderer never finishes on it (reason in .checkov.yaml); it
    # declares no resource (tests/unit/test_bicep_checkov.py).
    r"infra/bicep/main\.bicep$",
    # other people's Bicep and ARM: the stand-in compiler's corpus (its README.md)
    "tests/fixtures/bicep-corpus",
}


def test_checkov_config_is_shared_by_every_stack() -> None:
    config = yaml.safe_load((REPO / ".checkov.yaml").read_text())
    assert {"terraform", "bicep", "arm", "github_actions", "secrets"} <= set(config["framework"])
    assert config["directory"] == ["."]  # the whole repository
    assert config.get("enable-secret-scan-all-files") is True  # .py, .sh, .j2, .md too
    assert config.get("skip-download") is True  # offline: no Prisma Cloud API calls
    # Skips belong in the resources, with their reasons, never here, except the compiled ARM
    # template's (bicep build drops the Bicep comments; tests/unit/test_bicep_checkov.py holds
    # them equal to the Bicep skips); skip-path only for what is not the repository's own code.
    assert not {"soft-fail", "check"} & set(config)
    assert all(
        s.endswith((":azuredeploy\\.json$", ":results\\.json$")) for s in config["skip-check"]
    )
    assert set(config["skip-path"]) <= ALLOWED_SKIP_PATHS
    assert "tests/fixtures/terraform/broken" in config["skip-path"]


@pytest.fixture(scope="module")
def secrets_scan(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], set[str]]:
    """One secrets scan of a copy of the tracked files, with the repository's own .checkov.yaml
    (nothing local, tool environments or caches, decides the outcome), and a credential planted
    in every top-level folder (hidden ones too) and in the root, in file types checkov skips by
    default, and in the deliberately broken fixtures, which are not scanned. The report, and
    the planted files it must find."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    copy = tmp_path_factory.mktemp("secrets") / "repo"
    for name in filter(None, tracked):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, copy / name)
    tops = sorted({n.split("/")[0] for n in tracked if "/" in n})
    assert {".github", "infra", "cloud-init", "python", "scripts", "tests"} <= set(tops)
    # An AWS access key id is what every secrets scanner knows; made here, so that this file
    # holds none.
    key = "AKIA" + "".join(random.choices(string.ascii_uppercase + string.digits, k=16))
    planted = {f"{top}/planted-{i}{ext}" for i, top in enumerate(tops) for ext in (".py", ".sh")}
    planted.add("planted-root.md")
    for name in planted | {"tests/fixtures/terraform/broken/planted.py"}:
        (copy / name).write_text(f'aws_access_key_id = "{key}"\n')
    return run_checkov(None, "secrets", root=copy), planted


def test_no_secret_in_the_repository(secrets_scan: tuple[dict[str, Any], set[str]]) -> None:
    report, planted = secrets_scan
    summary = report["summary"]
    failed = [
        f"{c['check_id']} {c['file_path']}:{c['file_line_range'][0]}: {c['check_name']}"
        for c in report["results"]["failed_checks"]
        if c["file_path"].lstrip("/") not in planted
    ]
    assert failed == []
    assert summary["parsing_errors"] == 0
    # The secrets framework reports findings only, so its resource count is the number of
    # findings: the planted ones, and the skipped ones (secret *names* that look like secrets,
    # in Python and tftest files), proof that the scan reached those files.
    assert summary["failed"] == len(planted)
    assert summary["skipped"] > 0
    assert summary["skipped"] + summary["failed"] == summary["resource_count"]


def test_every_secret_skip_is_next_to_its_line_with_a_reason(
    secrets_scan: tuple[dict[str, Any], set[str]],
) -> None:
    skipped = secrets_scan[0]["results"]["skipped_checks"]
    assert skipped
    for check in skipped:
        reason = check["check_result"]["suppress_comment"]
        where = f"{check['file_path']}:{check['file_line_range'][0]}"
        assert len(reason) >= 40, f"{where} {check['check_id']}: the reason is missing or too short"
        lines = (REPO / check["file_path"].lstrip("/")).read_text().splitlines()
        first = check["file_line_range"][0]
        # checkov reads the skip on the line before, the line of, or the line after a finding.
        around = lines[max(0, first - 2) : first + 1]
        assert any(f"checkov:skip={check['check_id']}:{reason}" in line for line in around), where


def test_secrets_scan_reaches_every_part_of_the_repository(
    secrets_scan: tuple[dict[str, Any], set[str]],
) -> None:
    """Every planted credential is found; the one in the deliberately broken fixtures is not."""
    report, planted = secrets_scan
    found = {c["file_path"].lstrip("/") for c in report["results"]["failed_checks"]}
    assert found == planted


def test_checkov_parses_every_file_of_the_stack(terraform_report: dict[str, Any]) -> None:
    """checkov also reads tests/*.tftest.hcl: a file it cannot parse is a file it does not check."""
    assert terraform_report["results"].get("parsing_errors", []) == []
