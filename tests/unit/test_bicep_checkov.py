"""checkov on the Bicep stack (bicep framework, pycep-parser 0.5.1 inside checkov 3.3) and on its
compiled template (arm framework): every file parsed, resources found in each, zero failed checks,
and every skip a `checkov:skip=ID:reason` inside the resource it concerns, used by checkov, with a
reason. `bicep build` drops comments, so the compiled template carries no skip (the stand-in
writes none either): .checkov.yaml repeats the Bicep skips for azuredeploy.json, each with the
same reason, and each one is needed by the template as the real compiler writes it (the GitHub
workflow scans that one).

main.bicep is left out of the bicep scan by .checkov.yaml's skip-path (with the reason there):
checkov's variable renderer never finishes on its input rules. It declares no resource (tested
below), and the arm framework scans everything it compiles to."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from bicep_support import BICEP, MAIN, MODULES, REPO, TEMPLATE, pycep
from checkov_support import run_checkov

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
    expected = {f"modules/{p.name}" for p in MODULES.glob("*.bicep")} | {
        "image/main.bicep",
        "results.bicep",
    }
    # Modules without a checked resource type (checks, identity, autoscale) have nothing to
    # report; every module that has one is in the report, and the node image's template (its
    # secure parameter's default, skipped with its reason).
    assert {"modules/head.bicep", "modules/workers.bicep", "modules/network.bicep",
            "modules/keyvault.bicep", "image/main.bicep",
            "results.bicep"} <= files <= expected  # fmt: skip


def test_main_bicep_left_out_of_the_scan_declares_no_resource() -> None:
    """What the skip-path costs: main.bicep holds parameters, variables, modules and outputs
    only, so no resource check is lost (a resource added there would be unscanned)."""
    config = yaml.safe_load((REPO / ".checkov.yaml").read_text())
    assert [p for p in config["skip-path"] if p.startswith("infra/bicep")] == [
        "infra/bicep/main\\.bicep$"
    ]
    parsed = pycep(MAIN)
    assert parsed["modules"] and parsed["parameters"]
    assert not parsed.get("resources"), sorted(parsed["resources"])


def bicep_skips(image: bool = False, results: bool = False) -> list[tuple[str, int, str, str]]:
    """The skips of the cluster's modules (compiled into azuredeploy.json), or with ``image``
    also those of the node image's template (infra/bicep/image/main.bicep), with ``results``
    also those of the results storage's (infra/bicep/results.bicep, compiled to results.json)."""
    found = []
    paths = sorted(MODULES.glob("*.bicep")) + ([BICEP / "image" / "main.bicep"] if image else [])
    paths += [BICEP / "results.bicep"] if results else []
    for path in paths:
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
    comments = bicep_skips(image=True, results=True)
    assert comments, "no skips at all? then this test is stale"
    assert len(comments) == len(bicep_report["results"]["skipped_checks"]), (comments, skipped)
    for file, line, check_id, reason in comments:
        assert (check_id, file) in skipped, f"{file}:{line} {check_id} skips nothing"
        assert len(reason) >= 40, f"{file}:{line} {check_id}: the reason is missing or too short"
        assert skipped[(check_id, file)].strip() == reason


ARM_SKIP = re.compile(
    r"^  # (?P<id>[A-Z0-9_]+): (?P<reason>.+)\n"
    r"  - (?P=id):(?P<file>azuredeploy|results)\\\.json\$$",
    re.M,
)


def arm_skips(file: str = "azuredeploy") -> dict[str, str]:
    """.checkov.yaml's skips for a compiled template (azuredeploy.json, or results.json): check
    ID -> the reason in its comment."""
    text = (REPO / ".checkov.yaml").read_text()
    every = [(m["id"], m["file"], m["reason"].strip()) for m in ARM_SKIP.finditer(text)]
    config = yaml.safe_load(text)
    assert sorted(config["skip-check"]) == sorted(f"{i}:{f}\\.json$" for i, f, _ in every)
    return {i: reason for i, f, reason in every if f == file}


def test_the_template_skips_are_the_bicep_skips_with_the_same_reasons() -> None:
    """One reason per skipped check, written in the Bicep resource and repeated, equal, in
    .checkov.yaml for the compiled template."""
    bicep = {(check_id, reason) for _, _, check_id, reason in bicep_skips()}
    assert len({check_id for check_id, _ in bicep}) == len(bicep), "one reason per check"
    assert set(arm_skips().items()) == bicep


def test_the_results_template_skips_are_the_results_bicep_skips() -> None:
    """The same for the results storage: results.bicep's skips, repeated for results.json."""
    ours = bicep_skips(results=True)[len(bicep_skips()) :]
    assert ours and all(f == "results.bicep" for f, _, _, _ in ours)
    assert set(arm_skips("results").items()) == {(i, r) for _, _, i, r in ours}


def test_the_compiled_template_carries_no_checkov_metadata() -> None:
    """`bicep build` writes no metadata.checkov (comments are dropped): neither may the
    stand-in, or the ARM scan would pass only on the stand-in's output."""
    assert '"checkov"' not in TEMPLATE.read_text()


def test_every_template_skip_is_needed_on_the_template_as_the_workflow_scans_it(
    tmp_path: Path,
) -> None:
    """The template where the workflow puts the real compiler's output: clean with the
    repository's config, and without .checkov.yaml's template skips exactly the skipped checks
    fail, once per Bicep skip (the head VM and the workers' scale set)."""
    compiled = tmp_path / "bicep"
    compiled.mkdir()
    shutil.copy(TEMPLATE, compiled / "azuredeploy.json")
    report = run_checkov(compiled, "arm")
    assert report["summary"]["failed"] == 0, report["results"]["failed_checks"]
    assert report["summary"]["resource_count"] >= 17
    bare = tmp_path / "bare"
    bare.mkdir()
    config = yaml.safe_load((REPO / ".checkov.yaml").read_text())
    del config["skip-check"]
    (bare / ".checkov.yaml").write_text(yaml.safe_dump(config))
    unskipped = run_checkov(compiled, "arm", root=bare)
    failed = sorted(c["check_id"] for c in unskipped["results"]["failed_checks"])
    assert failed == sorted(check_id for _, _, check_id, _ in bicep_skips())
