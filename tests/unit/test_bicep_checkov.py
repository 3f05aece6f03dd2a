"""checkov on the Bicep stack (bicep framework, pycep-parser 0.5.1 inside checkov 3.3) and on its
compiled template (arm framework): every file parsed, resources found in each, zero failed checks,
and every skip a `checkov:skip=ID:reason` inside the resource it concerns, used by checkov, with a
reason. The ARM skips are the Bicep comments, carried into the resources' metadata.checkov by
scripts/bicep_to_arm.py.

main.bicep is left out of the bicep scan by .checkov.yaml's skip-path (with the reason there):
checkov's variable renderer never finishes on its input rules. It declares no resource (tested
below), and the arm framework scans everything it compiles to."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from bicep_support import BICEP, MAIN, MODULES, pycep, template
from test_terraform_checkov import REPO, run_checkov

SKIP = re.compile(r"//\s*checkov:skip=(?P<id>[A-Z0-9_]+):(?P<reason>.*)$")


@pytest.fixture(scope="module")
def bicep_report() -> dict[str, Any]:
    return run_checkov(BICEP, "bicep")


@pytest.fixture(scope="module")
def arm_report() -> dict[str, Any]:
    return run_checkov(BICEP, "arm")


@pytest.mark.parametrize("framework", ["bicep", "arm"])
def test_no_failed_checks_and_everything_parsed(
    framework: str, bicep_report: dict[str, Any], arm_report: dict[str, Any]
) -> None:
    report = bicep_report if framework == "bicep" else arm_report
    summary = report["summary"]
    failed = [
        f"{c['check_id']} {c['resource']} ({c['file_path']}): {c['check_name']}"
        for c in report["results"]["failed_checks"]
    ]
    assert summary["failed"] == 0, failed
    # checkov reports a file it cannot parse only here, with exit code 0; and the arm framework
    # scans 0 resources of a languageVersion 2.0 template: both would hide every check.
    assert summary["parsing_errors"] == 0, report["results"].get("parsing_errors")
    assert summary["resource_count"] >= 17, summary
    assert summary["passed"] >= 20, summary


def test_the_bicep_scan_reads_every_file(bicep_report: dict[str, Any]) -> None:
    files = {c["file_path"].lstrip("/") for c in bicep_report["results"]["passed_checks"]}
    files |= {c["file_path"].lstrip("/") for c in bicep_report["results"]["skipped_checks"]}
    expected = {f"modules/{p.name}" for p in MODULES.glob("*.bicep")}
    # Modules without a checked resource type (checks, identity, autoscale) have nothing to
    # report; every module that has one is in the report.
    assert {"modules/head.bicep", "modules/workers.bicep",
            "modules/network.bicep", "modules/keyvault.bicep"} <= files <= expected  # fmt: skip


def test_main_bicep_left_out_of_the_scan_declares_no_resource() -> None:
    """What the skip-path costs: main.bicep holds parameters, variables, modules and outputs
    only, so no resource check is lost (a resource added there would be unscanned)."""
    config = yaml.safe_load((REPO / ".checkov.yaml").read_text())
    assert [p for p in config["skip-path"] if "bicep" in p] == ["infra/bicep/main\\.bicep$"]
    parsed = pycep(MAIN)
    assert parsed["modules"] and parsed["parameters"]
    assert not parsed.get("resources"), sorted(parsed["resources"])


def bicep_skips() -> list[tuple[str, int, str, str]]:
    found = []
    for path in sorted(MODULES.glob("*.bicep")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            match = SKIP.search(line)
            if match:
                name = path.relative_to(BICEP).as_posix()
                found.append((name, number, match["id"], match["reason"].strip()))
    return found


def test_every_bicep_skip_is_used_and_has_a_reason(bicep_report: dict[str, Any]) -> None:
    skipped = {
        (c["check_id"], c["file_path"].lstrip("/")): c["check_result"]["suppress_comment"]
        for c in bicep_report["results"]["skipped_checks"]
    }
    comments = bicep_skips()
    assert comments, "no skips at all? then this test is stale"
    assert len(comments) == len(bicep_report["results"]["skipped_checks"]), (comments, skipped)
    for file, line, check_id, reason in comments:
        assert (check_id, file) in skipped, f"{file}:{line} {check_id} skips nothing"
        assert len(reason) >= 40, f"{file}:{line} {check_id}: the reason is missing or too short"
        assert skipped[(check_id, file)].strip() == reason


def test_every_arm_skip_is_a_bicep_skip_and_is_used(arm_report: dict[str, Any]) -> None:
    """The compiled template skips exactly what the Bicep resources skip, with the same reasons."""
    doc = template()
    carried = []
    for deployment in doc["resources"]:
        inner = deployment.get("properties", {}).get("template", {})
        for resource in inner.get("resources", []):
            carried += resource.get("metadata", {}).get("checkov", [])
    resource_skips = [
        f"checkov:skip={check_id}:{reason}" for _, _, check_id, reason in bicep_skips()
    ]
    assert sorted(carried) == sorted(resource_skips)
    used = {
        (c["check_id"], c["check_result"]["suppress_comment"].strip())
        for c in arm_report["results"]["skipped_checks"]
    }
    assert len(arm_report["results"]["skipped_checks"]) == len(carried)
    for item in carried:
        check_id, reason = item.removeprefix("checkov:skip=").split(":", 1)
        assert (check_id, reason) in used, f"{check_id} skips nothing in azuredeploy.json"
