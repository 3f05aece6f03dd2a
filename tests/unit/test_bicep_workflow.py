"""The Bicep workflow (.github/workflows/bicep.yml; actionlint runs on it in
test_terraform_workflow.py): least permissions, pinned actions, the Bicep CLI at the version the
stand-in compiler stamps, build + lint + the semantic comparison + checkov on the real compiler's
template; and scripts/compare_arm.py itself: blind to the generator's stamp and the letter case
of resource types, not to anything else (checkov's metadata included)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import yaml
from bicep_to_arm import TARGETS
from compare_arm import compare

from support import REPO
from workflow_support import PINNED

WORKFLOW = REPO / ".github" / "workflows" / "bicep.yml"
TEMPLATE = REPO / "infra" / "bicep" / "azuredeploy.json"


def test_the_workflow_builds_lints_and_compares_with_least_permissions() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    assert workflow["permissions"] == {"contents": "read"}
    uses = [line for line in WORKFLOW.read_text().splitlines() if "uses:" in line]
    assert uses and all(PINNED.match(line) for line in uses), uses
    [job] = workflow["jobs"].values()
    script = "\n".join(step.get("run", "") for step in job["steps"])
    assert "releases/download/${BICEP_VERSION}/bicep-linux-x64" in script
    assert 'bicep build infra/bicep/main.bicep --outfile "$RUNNER_TEMP/bicep/azuredeploy.json"' in (
        script
    )
    assert "bicep lint infra/bicep/main.bicep" in script
    assert (
        'scripts/compare_arm.py "$RUNNER_TEMP/bicep/azuredeploy.json" infra/bicep/azuredeploy.json'
        in script
    )
    # the node image's template (infra/bicep/image/) the same way: built, linted, compared
    assert (
        "bicep build infra/bicep/image/main.bicep "
        '--outfile "$RUNNER_TEMP/bicep-image/azuredeploy.json"' in script
    )
    assert "bicep lint infra/bicep/image/main.bicep" in script
    assert (
        'scripts/compare_arm.py "$RUNNER_TEMP/bicep-image/azuredeploy.json" '
        "infra/bicep/image/azuredeploy.json" in script
    )
    assert re.search(
        r'checkov" --config-file \.checkov\.yaml \\\s+--directory "\$RUNNER_TEMP/bicep-image" '
        r"--framework arm",
        script,
    ), script
    # the results storage's template (infra/bicep/results.bicep -> results.json) the same way,
    # under the name .checkov.yaml's results skips match
    assert (
        "bicep build infra/bicep/results.bicep "
        '--outfile "$RUNNER_TEMP/bicep-results/results.json"' in script
    )
    assert "bicep lint infra/bicep/results.bicep" in script
    assert (
        'scripts/compare_arm.py "$RUNNER_TEMP/bicep-results/results.json" '
        "infra/bicep/results.json" in script
    )
    assert re.search(
        r'checkov" --config-file \.checkov\.yaml \\\s+--directory "\$RUNNER_TEMP/bicep-results" '
        r"--framework arm",
        script,
    ), script
    # every committed template the stand-in writes is one the workflow builds and compares
    for source, output in TARGETS:
        rel = output.relative_to(REPO).as_posix()
        assert f"bicep build {source.relative_to(REPO).as_posix()} " in script, source
        assert re.search(rf'compare_arm\.py "\$RUNNER_TEMP/[\w-]+/{output.name}" {rel}\n', script)
    # checkov's arm framework on what the real compiler wrote, under the name .checkov.yaml's
    # template skips match (tests/unit/test_bicep_checkov.py), with the repository's config
    assert (
        'pip" install --disable-pip-version-check -q -r scripts/checkov-requirements.txt' in script
    )
    assert re.search(
        r'checkov" --config-file \.checkov\.yaml \\\s+--directory "\$RUNNER_TEMP/bicep" '
        r"--framework arm",
        script,
    ), script
    assert {".checkov.yaml", "scripts/checkov-requirements.txt"} <= set(
        workflow[True]["pull_request"]["paths"]
    )
    stamped = json.loads(TEMPLATE.read_text())["metadata"]["_generator"]["version"]
    assert stamped.startswith(workflow["env"]["BICEP_VERSION"].lstrip("v") + ".")


def _write(tmp: Path, name: str, doc: dict) -> Path:
    path = tmp / name
    path.write_text(json.dumps(doc, indent=1, sort_keys=True))
    return path


def test_the_comparer_ignores_the_stamp_and_the_case_of_resource_types(tmp_path: Path) -> None:
    doc = json.loads(TEMPLATE.read_text())
    compiled = copy.deepcopy(doc)
    compiled["metadata"]["_generator"] = {
        "name": "bicep",
        "version": "0.99.1.1",
        "templateHash": "123",
    }
    for dep in compiled["resources"]:
        dep["properties"]["template"]["metadata"].pop("_generator", None)
        for r in dep["properties"]["template"]["resources"]:
            r["type"] = r["type"].lower()  # bicep build writes its type definitions' case
    assert compare(_write(tmp_path, "a.json", compiled), TEMPLATE) == []


def test_the_comparer_sees_drift(tmp_path: Path) -> None:
    for drift in (
        lambda d: d["parameters"]["workerMaxCount"].update(maxValue=99),
        lambda d: d["resources"][1]["properties"]["template"]["resources"][0].update(
            apiVersion="2023-01-01"
        ),
        lambda d: d["outputs"].pop("sshCommand"),
        lambda d: d["variables"].update(extra=1),
        # checkov's skips: bicep build writes none, so a template carrying them is not its output
        lambda d: d["resources"][1]["properties"]["template"]["resources"][0].update(
            metadata={"checkov": ["checkov:skip=CKV_AZURE_1:x"]}
        ),
        lambda d: d["resources"][1].update(type="Microsoft.Resources/deploymentScripts"),
    ):
        doc = json.loads(TEMPLATE.read_text())
        drift(doc)
        assert compare(_write(tmp_path, "b.json", doc), TEMPLATE), drift
