"""The Bicep workflow (.github/workflows/bicep.yml; actionlint runs on it in
test_terraform_workflow.py): least permissions, pinned actions, the Bicep CLI at the version the
stand-in compiler stamps, build + lint + the semantic comparison; and scripts/compare_arm.py
itself: blind to the generator's stamp and checkov's skips, not to anything else."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml
from compare_arm import compare

from support import REPO
from test_terraform_workflow import PINNED

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
    assert "bicep build infra/bicep/main.bicep" in script
    assert "bicep lint infra/bicep/main.bicep" in script
    assert (
        'scripts/compare_arm.py "$RUNNER_TEMP/compiled.json" infra/bicep/azuredeploy.json' in script
    )
    stamped = json.loads(TEMPLATE.read_text())["metadata"]["_generator"]["version"]
    assert stamped.startswith(workflow["env"]["BICEP_VERSION"].lstrip("v") + ".")


def _write(tmp: Path, name: str, doc: dict) -> Path:
    path = tmp / name
    path.write_text(json.dumps(doc, indent=1, sort_keys=True))
    return path


def test_the_comparer_ignores_the_stamp_and_the_checkov_skips(tmp_path: Path) -> None:
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
            r.pop("metadata", None)
    assert compare(_write(tmp_path, "a.json", compiled), TEMPLATE) == []


def test_the_comparer_sees_drift(tmp_path: Path) -> None:
    for drift in (
        lambda d: d["parameters"]["workerMaxCount"].update(maxValue=99),
        lambda d: d["resources"][1]["properties"]["template"]["resources"][0].update(
            apiVersion="2023-01-01"
        ),
        lambda d: d["outputs"].pop("sshCommand"),
        lambda d: d["variables"].update(extra=1),
    ):
        doc = json.loads(TEMPLATE.read_text())
        drift(doc)
        assert compare(_write(tmp_path, "b.json", doc), TEMPLATE), drift
