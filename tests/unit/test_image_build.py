"""`python -m driver image build` against the fake Resource Manager (tests/fakes/fake_arm.py:
Image Builder's wire format over HTTPS, the real azure-identity and azure-core in the driver):
the image template deployed when it is missing, its build started and followed with progress to
the image version id, a failed build ending with Image Builder's message, a running build
followed rather than started twice, Ctrl-C leaving the build running with the command that
follows it, and bad input refused in one line before anything is sent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from azure_support import CREDENTIAL_ENV, SUB
from driver import image
from fakes.fake_arm import FakeAzure
from support import REPO, error_lines, run_driver

IMAGE_TEMPLATE = REPO / image.IMAGE_TEMPLATE
VERSION = "/providers/Microsoft.Compute/galleries/ray_nodes/images/ray-node-ubuntu-22.04/versions/"


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAzure]:
    azure = FakeAzure(tmp_path)
    for name in CREDENTIAL_ENV:
        monkeypatch.delenv(name, raising=False)
    azure.resource_groups.add((SUB.lower(), "rg-img"))
    try:
        yield azure
    finally:
        azure.close()


def driver(fake: FakeAzure, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**fake.env(), "AZURE_SUBSCRIPTION_ID": SUB}
    return run_driver("image", "build", *args, home=home, env=env, timeout=120)


def start_driver(fake: FakeAzure, home: Path) -> subprocess.Popen[str]:
    """``image build --resource-group rg-img`` running in the background, as a user's terminal."""
    cmd = [sys.executable, "-m", "driver", "image", "build", "--resource-group", "rg-img"]
    env = {**os.environ, **fake.env(), "AZURE_SUBSCRIPTION_ID": SUB, "RAYDRIVER_HOME": str(home)}
    return subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def stderr_until(proc: subprocess.Popen[str], text: str) -> list[str]:
    """The driver's stderr lines up to the first that holds ``text`` (or to its end)."""
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if text in line:
            break
    return seen


def deployments(fake: FakeAzure) -> list[dict]:
    return [b for m, p, b in fake.bodies if m == "PUT" and "/deployments/" in p]


def test_a_missing_template_is_deployed_then_built_with_progress(
    fake: FakeAzure, tmp_path: Path
) -> None:
    r = driver(fake, tmp_path, "--resource-group", "rg-img")
    assert r.returncode == 0, r.stderr
    # stdout is the image version id alone (for scripts); progress went to stderr
    assert r.stdout.startswith(f"/subscriptions/{SUB}/resourceGroups/rg-img")
    assert r.stdout.strip().endswith(VERSION + "1.0.1")
    [put] = deployments(fake)
    assert put["properties"]["template"] == json.loads(IMAGE_TEMPLATE.read_text())
    assert put["properties"]["parameters"]["imageTemplateName"] == {"value": "ray-node-image"}
    assert fake.runs == [(SUB.lower(), "rg-img", "ray-node-image")]
    lines = r.stderr.splitlines()
    assert any("Image template ray-node-image is missing: deploying" in x for x in lines)
    assert any("Succeeded  Microsoft.VirtualMachineImages/imageTemplates" in x for x in lines)
    progress = [x.split("min  ", 1)[1] for x in lines if "min  " in x]
    assert progress == [
        "Running (Queued)",
        "Running (Building)",
        "Running (Customizing)",
        "Running (Distributing)",
        "Succeeded (Distributing)",
    ]


def test_an_existing_template_is_run_again_without_deploying(
    fake: FakeAzure, tmp_path: Path
) -> None:
    assert driver(fake, tmp_path, "--resource-group", "rg-img").returncode == 0
    r = driver(fake, tmp_path, "--resource-group", "rg-img")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith(VERSION + "1.0.2")  # a new version
    assert len(deployments(fake)) == 1
    assert len(fake.runs) == 2


def test_a_failed_build_ends_with_image_builders_message(fake: FakeAzure, tmp_path: Path) -> None:
    fake.build_fails_with = (
        "Customizer 'ray-node-install' failed: exit status 1 (see the customization.log)"
    )
    r = driver(fake, tmp_path, "--resource-group", "rg-img")
    assert r.returncode == 1, r.stderr
    assert r.stdout == ""
    assert error_lines(r.stderr)[-1] == (
        "error: image build failed (Customizing): Customizer 'ray-node-install' failed: exit "
        "status 1 (see the customization.log)"
    )
    assert "Traceback" not in r.stderr


def test_ctrl_c_leaves_the_build_running_and_says_how_to_follow_it(
    fake: FakeAzure, tmp_path: Path
) -> None:
    """Ctrl-C while the build runs: exit 130, the command that follows it again, and nothing
    sent to Azure that would stop it (the next test: that command follows the running build)."""
    fake.build_retry_after = "1"
    fake.build_steps = ("Queued", *["Building"] * 60)
    proc = start_driver(fake, tmp_path)
    seen = stderr_until(proc, "Running (Queued)")
    assert any("Running (Queued)" in x for x in seen), seen
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert out == ""
    assert "the build of ray-node-image goes on in Azure" in err
    assert "python -m driver image build --resource-group rg-img --template ray-node-image" in err
    assert "Traceback" not in err
    # nothing was canceled: Azure's template still runs the one build started
    [template] = fake.image_templates.values()
    assert template["properties"]["lastRunStatus"]["runState"] == "Running"
    assert len(fake.runs) == 1


def test_a_build_already_running_is_followed(fake: FakeAzure, tmp_path: Path) -> None:
    """The command run again while a build runs (after Ctrl-C, or from another terminal)
    follows that build to its end instead of starting a second one."""
    assert driver(fake, tmp_path, "--resource-group", "rg-img").returncode == 0
    [template] = fake.image_templates.values()
    status = template["properties"]["lastRunStatus"]
    status.update(runState="Running", runSubState="Customizing")
    # Azure finishes it while the driver follows: the template's state is what it reads. It
    # finishes once the driver said it follows (not after a fixed delay, which a loaded machine
    # starting the driver outruns: it would find the build over and start another).
    fake.build_steps = ()
    proc = start_driver(fake, tmp_path)
    try:
        seen = stderr_until(proc, "is already running: following it.")
        if seen and "is already running: following it." in seen[-1]:
            template["_versions"] += 1
            status.update(runState="Succeeded", runSubState="Distributing")
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    err = "".join(seen) + err
    assert proc.returncode == 0, err
    assert "A build of ray-node-image is already running: following it." in err
    assert len(fake.runs) == 1  # no second POST run
    assert out.strip().endswith(VERSION + "1.0.2")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--resource-group", "bad rg"], "--resource-group 'bad rg' is not a resource group name"),
        (["--resource-group", "rg."], "is not a resource group name"),
        (["--resource-group", "rg-img", "--template=-x"], "is not an image template name"),
        (["--resource-group", "rg-img", "--template", "a" * 65], "is not an image template"),
        (["--resource-group", "rg-none"], "resource group rg-none does not exist in subscription"),
        (["--resource-group", "rg-img", "--parameters", "/nonexistent.json"], "cannot read"),
    ],
)
def test_bad_input_is_one_line_and_sends_nothing(
    fake: FakeAzure, tmp_path: Path, args: list[str], message: str
) -> None:
    r = driver(fake, tmp_path, *args)
    assert r.returncode == 2
    [line] = error_lines(r.stderr)
    assert line.startswith("error: ") and message in line, line
    assert fake.bodies == [] and fake.runs == []


def test_unknown_and_conflicting_parameters_are_refused(fake: FakeAzure, tmp_path: Path) -> None:
    params = tmp_path / "p.json"
    params.write_text(json.dumps({"parameters": {"osImag": {"value": "debian-12"}}}))
    r = driver(fake, tmp_path, "--resource-group", "rg-img", "--parameters", str(params))
    assert r.returncode == 2
    [line] = error_lines(r.stderr)
    assert "the template has no parameter osImag" in line
    params.write_text(json.dumps({"parameters": {"imageTemplateName": {"value": "other"}}}))
    r = driver(fake, tmp_path, "--resource-group", "rg-img", "--parameters", str(params))
    assert r.returncode == 2
    [line] = error_lines(r.stderr)
    assert "name it once" in line
    assert fake.bodies == []


def test_the_parameters_reach_the_deployment(fake: FakeAzure, tmp_path: Path) -> None:
    params = tmp_path / "p.json"
    values = {"osImage": "debian-12", "extraPipPackages": ["minigrid==3.0.0"]}
    params.write_text(json.dumps({"parameters": {k: {"value": v} for k, v in values.items()}}))
    r = driver(fake, tmp_path, "--resource-group", "rg-img", "--parameters", str(params),
               "--template", "ray-node-debian")  # fmt: skip
    assert r.returncode == 0, r.stderr
    [put] = deployments(fake)
    sent = {k: v["value"] for k, v in put["properties"]["parameters"].items()}
    assert sent == {**values, "imageTemplateName": "ray-node-debian"}
    assert fake.runs == [(SUB.lower(), "rg-img", "ray-node-debian")]


def test_the_driver_speaks_the_api_version_the_template_declares() -> None:
    [built] = [
        r
        for r in json.loads(IMAGE_TEMPLATE.read_text())["resources"]
        if r["type"] == "Microsoft.VirtualMachineImages/imageTemplates"
    ]
    assert built["apiVersion"] == image.IMAGE_API_VERSION
    [dist] = built["properties"]["distribute"]
    assert dist["runOutputName"] == image.RUN_OUTPUT
    default = json.loads(IMAGE_TEMPLATE.read_text())["parameters"]["imageTemplateName"]
    assert default["defaultValue"] == "[format('{0}-node-image', parameters('namePrefix'))]"
    assert image.DEFAULT_IMAGE_TEMPLATE_NAME == "ray-node-image"
