"""The head's jobs resumed after its Ray starts again (python/nodekit/node/scheduled_events.py,
``Resumer``), against a real local Ray head and its real Jobs API, no mocks: a job that held
the head is recorded with its packages from the GCS; once Ray has started again (and no longer
knows the job) it is submitted again as ``ID-resumed`` with ``--resume ID``, its working
directory and modules restored; never twice, never after it ended; a record that cannot be
submitted stays, said once."""

from __future__ import annotations

import json
import stat
import sys
import time
from pathlib import Path

import pytest

from driver.localray import LocalRay
from driver.settings import RESULTS_ENV
from nodekit.node import scheduled_events
from nodekit.node.scheduled_events import Resumer, real_resumer
from support import run_driver

JOB = """\
import os, pathlib, sys, time
import helper, sibling
print("ARGS", sys.argv[1:], helper.NAME, sibling.NAME, flush=True)
print("WRITES", os.environ["RAYDRIVER_RESULTS_DIR"], flush=True)
if "--resume" not in sys.argv:
    while not pathlib.Path(sys.argv[2]).exists():
        time.sleep(0.2)
"""


def test_the_results_folders_variable_is_the_drivers() -> None:
    """The watcher's copy (it has only the standard library) of the variable `submit` sets."""
    assert scheduled_events.RESULTS_ENV == RESULTS_ENV


def _job(tmp_path: Path) -> Path:
    """A job folder as `submit` ships it: a working directory and a module of its own."""
    (tmp_path / "shared" / "helper").mkdir(parents=True)
    (tmp_path / "shared" / "helper" / "__init__.py").write_text("NAME = 'from-module'\n")
    job = tmp_path / "job"
    job.mkdir()
    (job / "runtime_env.yaml").write_text("py_modules: [../shared/helper]\n")
    (job / "sibling.py").write_text("NAME = 'from-working-dir'\n")
    (job / "train.py").write_text(JOB)
    return job


def _resumer(local: LocalRay, home: Path, folder: Path, lines: list[str]) -> Resumer:
    head = local.running()
    assert head is not None
    node_env = home / "node.env"
    node_env.write_text(
        f"RAY_HEAD_IP=127.0.0.1\nRAY_GCS_PORT={head.gcs_port}\nRAY_AUTH_MODE=token\n"
        f"RAY_AUTH_TOKEN_PATH={local.token_file}\n"
    )
    venv = str(Path(sys.executable).parent.parent)
    token = local.token_file.read_text().strip()
    resumer = real_resumer(venv, str(node_env), str(folder), head.jobs_address, token)
    resumer.log = lines.append
    return resumer


def _status(home: Path, sid: str) -> str:
    r = run_driver("status", sid, "--json", home=home)
    assert r.returncode == 0, r.stderr
    return str(json.loads(r.stdout)["status"])


def _until(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


@pytest.mark.slow
def test_a_recorded_job_is_resubmitted_once_after_the_heads_ray_starts_again(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    local = LocalRay(home)
    job, folder, release = _job(tmp_path), tmp_path / "resume", tmp_path / "release"
    lines: list[str] = []
    try:
        r = run_driver(
            "submit", "--submission-id", "quick", str(job / "train.py"), "--", "--resume", "x",
            home=home,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        r = run_driver(
            "submit", "--submission-id", "held", "--no-wait", str(job / "train.py"), "--",
            "--until", str(release), home=home,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        _until(lambda: _status(home, "held") == "RUNNING", 300, "the job running")

        # The notice: the jobs that held the head, recorded (one that ended, a holder that is
        # no job, and a name that could not be a file's, each said in one line).
        resumer = _resumer(local, home, folder, lines)
        resumer.record(["held", "quick", "pid4242", "../etc"], "E1")
        record = folder / "held.json"
        assert [p.name for p in folder.iterdir()] == ["held.json"]
        assert stat.S_IMODE(record.stat().st_mode) == 0o600
        saved = json.loads(record.read_text())
        assert saved["entrypoint"] == f"python train.py --until {release}"
        assert len(saved["packages"]) == 2 and all(saved["packages"].values())
        assert lines[1:] == [
            "job quick has ended (SUCCEEDED): nothing recorded",
            "job pid4242 is not in Ray's Jobs API: nothing recorded",
            "holder ../etc is not a job's submission id: nothing recorded",
        ], lines

        resumer.step()  # the head has not gone: the job runs on, the record stays
        assert record.exists() and len(lines) == 4, lines

        local.stop()  # the head goes, its Ray with it
        resumer.step()
        resumer.step()
        assert record.exists()
        assert len(lines) == 5 and lines[4].startswith("waiting for Ray's Jobs API"), lines

        local.start(num_cpus=1)  # back, its GCS empty: packages and jobs gone
        lines.clear()
        resumer = _resumer(local, home, folder, lines)
        resumer.step()
        assert not record.exists()
        assert lines == [f"resubmitted job held as held-resumed: python train.py --until "
                         f"{release} --resume held"], lines  # fmt: skip
        r = run_driver("logs", "held-resumed", "-f", home=home, timeout=300)
        assert r.returncode == 0, r.stderr
        assert (
            f"ARGS ['--until', '{release}', '--resume', 'held'] from-module from-working-dir"
            in r.stdout
        ), r.stdout
        assert _status(home, "held-resumed") == "SUCCEEDED"
        # Its own results folder next to the job's, as `submit` gives it (--resume finds the
        # job's there).
        wrote = saved["runtime_env"]["env_vars"][RESULTS_ENV]
        assert wrote.endswith("/held")
        assert f"WRITES {wrote}-resumed\n" in r.stdout, r.stdout

        # Deleted before a crash could: submitted already, never twice.
        record.write_text(json.dumps(saved))
        resumer.step()
        assert not record.exists(), lines
        assert lines[-1] == (
            "job held-resumed exists already: the record of held was submitted before"
        ), lines

        # A job that ended on this Ray (the head did not go after all): nothing to resume.
        r = run_driver(
            "submit", "--submission-id", "ended", str(job / "train.py"), "--", "--resume", "x",
            home=home,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        (folder / "ended.json").write_text(json.dumps({**saved, "submission_id": "ended"}))
        resumer.step()
        assert not (folder / "ended.json").exists()
        assert lines[-1] == "job ended ended (SUCCEEDED) on this Ray: nothing to resume", lines
        r = run_driver("status", "ended-resumed", home=home)
        assert r.returncode == 2, r.stdout  # no such job

        # One Ray refuses: the record stays, said once, tried again later.
        bad = {**saved, "submission_id": "refused", "metadata": {"n": 1}}
        (folder / "refused.json").write_text(json.dumps(bad))
        resumer.retry_s = 0.0
        count = len(lines)
        resumer.step()
        resumer.step()
        assert (folder / "refused.json").exists()
        assert len(lines) == count + 1, lines
        assert lines[-1].startswith("resubmitting refused.json failed (submitting "
                                    "refused-resumed: HTTP "), lines  # fmt: skip
        assert lines[-1].endswith(f"the record stays in {folder}, tried again every 0 s"), lines
    finally:
        release.touch()
        local.stop()
