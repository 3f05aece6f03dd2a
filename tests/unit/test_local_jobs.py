"""The embedded default end to end: real local Ray, real Jobs API, no mocks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from driver.localray import LocalRay, session_pids
from support import FIXTURES, REPO, driver_timeout, error_lines, run_driver

JOBS = FIXTURES / "jobs"


def _status(sid: str, home: Path) -> str:
    r = run_driver("status", sid, "--json", home=home)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["status"]


def test_submit_succeeding_script_exits_0(driver_home: Path, tmp_path: Path) -> None:
    r = run_driver(
        "submit",
        "--env",
        "GREETING=hello",
        "--results",
        str(tmp_path / "res"),
        "--submission-id",
        "ok-1",
        str(JOBS / "succeed.py"),
        "--",
        "--flag",
        "two words",
        home=driver_home,
    )
    assert r.returncode == 0, r.stderr
    assert "SQUARES [0, 1, 4, 9]" in r.stdout
    assert 'ARGS ["--flag", "two words"]' in r.stdout
    assert "GREETING hello" in r.stdout
    assert (tmp_path / "res" / "ok-1" / "out.txt").read_text() == "done\n"
    assert "Job ok-1 succeeded." in r.stderr
    assert "python -m driver job logs ok-1 --follow" in r.stderr  # next commands are printed
    assert _status("ok-1", driver_home) == "SUCCEEDED"


def test_py_modules_from_runtime_env_yaml_are_importable(driver_home: Path, tmp_path: Path) -> None:
    """A job folder's runtime_env.yaml ships a shared folder as an importable module."""
    (tmp_path / "shared" / "harness").mkdir(parents=True)
    (tmp_path / "shared" / "harness" / "__init__.py").write_text("GREETING = 'from harness'\n")
    job = tmp_path / "job"
    job.mkdir()
    (job / "runtime_env.yaml").write_text(
        "py_modules: [../shared/harness]\nenv_vars: {WHO: yaml, OVERRIDDEN: yaml}\n"
    )
    (job / "train.py").write_text(
        "import os, harness\n"
        "print('HARNESS', harness.GREETING, os.environ['WHO'], os.environ['OVERRIDDEN'])\n"
    )
    r = run_driver(
        "submit",
        "--submission-id",
        "pymod-1",
        "--env",
        "OVERRIDDEN=flag",
        str(job / "train.py"),
        home=driver_home,
    )
    assert r.returncode == 0, r.stderr
    assert "HARNESS from harness yaml flag" in r.stdout
    assert f"Uploading module {(tmp_path / 'shared' / 'harness').resolve()}: 1 file" in r.stderr


def test_submit_failing_script_exits_1(driver_home: Path) -> None:
    r = run_driver("submit", "--submission-id", "fail-1", str(JOBS / "fail.py"), home=driver_home)
    assert r.returncode == 1, r.stderr
    assert "this job fails on purpose" in r.stdout  # the job's own traceback is job output
    last = error_lines(r.stderr)[-1]
    assert last.startswith("Job fail-1 failed: Job entrypoint command failed with exit code 1")
    assert "Traceback" not in r.stderr
    assert _status("fail-1", driver_home) == "FAILED"


def test_no_wait_status_logs_stop_list(driver_home: Path) -> None:
    r = run_driver(
        "submit",
        "--no-wait",
        "--submission-id",
        "sleep-1",
        str(JOBS / "sleep.py"),
        home=driver_home,
    )
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 300  # a job's start on a loaded machine: a bound on a hang
    while "tick 1" not in run_driver("logs", "sleep-1", home=driver_home).stdout:
        assert time.monotonic() < deadline, "job never printed"
        time.sleep(1)
    assert _status("sleep-1", driver_home) == "RUNNING"
    listed = run_driver("list", "--json", home=driver_home)
    assert "sleep-1" in [j["submission_id"] for j in json.loads(listed.stdout)]
    r = run_driver("stop", "sleep-1", home=driver_home)
    assert r.returncode == 0, r.stderr
    assert _status("sleep-1", driver_home) == "STOPPED"
    # Following a stopped job reports it with the "failed or stopped" exit code.
    assert run_driver("logs", "sleep-1", "--follow", home=driver_home).returncode == 1


def test_a_submission_id_in_use_is_refused_before_uploading(driver_home: Path) -> None:
    r = run_driver(
        "submit", "--submission-id", "twice-1", str(JOBS / "succeed.py"), home=driver_home
    )
    assert r.returncode == 0, r.stderr
    r = run_driver(
        "submit", "--submission-id", "twice-1", str(JOBS / "succeed.py"), home=driver_home
    )
    assert r.returncode == 2
    lines = error_lines(r.stderr)
    assert lines[-1].startswith("error: local Ray (http://127.0.0.1:"), lines
    assert "already has a job twice-1 (SUCCEEDED): give another --submission-id" in lines[-1]
    assert not any(ln.startswith("Uploading") for ln in lines), lines


def test_unknown_job_id_exits_2(driver_home: Path) -> None:
    run_driver("local", "start", home=driver_home)
    r = run_driver("status", "no-such-job", home=driver_home)
    assert r.returncode == 2
    assert error_lines(r.stderr) == ["error: job no-such-job: no such job on local Ray"]


def test_ctrl_c_leaves_the_job_running(driver_home: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "driver",
            "submit",
            "--submission-id",
            "int-1",
            str(JOBS / "sleep.py"),
        ],
        cwd=REPO,
        env={**os.environ, "RAYDRIVER_HOME": str(driver_home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # wait until logs are streaming
        if line.startswith("tick 2"):
            break
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=driver_timeout(["submit", "sleep.py"]))
    assert proc.returncode == 130, err
    assert "job int-1 keeps running" in err
    assert "python -m driver job cancel int-1" in err
    assert "Traceback" not in err
    assert _status("int-1", driver_home) == "RUNNING"
    assert run_driver("stop", "int-1", home=driver_home).returncode == 0


def test_local_ray_that_cannot_start_leaves_nothing(tmp_path: Path) -> None:
    # Ray cannot create its session folder where a plain file stands in the way.
    blocker = LocalRay(tmp_path).temp_dir
    blocker.write_text("not a directory")
    try:
        r = run_driver("local", "start", home=tmp_path)
    finally:
        blocker.unlink()
    assert r.returncode == 2
    lines = error_lines(r.stderr)
    assert lines[-1].startswith("error: local Ray did not start"), r.stderr
    assert "Traceback" not in r.stderr
    assert not LocalRay(tmp_path).state_file.exists()
    temp_dir = str(LocalRay(tmp_path).temp_dir)
    leftovers = subprocess.run(["pgrep", "-f", temp_dir], capture_output=True, text=True)
    assert leftovers.stdout == "", f"stray Ray processes: {leftovers.stdout}"


def test_local_stop_removes_every_process(tmp_path: Path) -> None:
    r = run_driver("local", "start", "--num-cpus", "1", home=tmp_path)
    assert r.returncode == 0, r.stderr
    head = LocalRay(tmp_path).running()
    assert head is not None
    # A job leaves worker processes behind in the head's session: they must go too.
    assert (
        run_driver(
            "submit", str(JOBS / "succeed.py"), "--results", str(tmp_path / "r"), home=tmp_path
        ).returncode
        == 0
    )
    assert len(session_pids(head.session_id)) > 3
    assert run_driver("local", "stop", home=tmp_path).returncode == 0
    assert session_pids(head.session_id) == []
    assert run_driver("local", "status", home=tmp_path).returncode == 1


@pytest.mark.slow
def test_cartpole_reaches_450_within_its_step_budget(driver_home: Path, tmp_path: Path) -> None:
    r = run_driver(
        "submit",
        "--results",
        str(tmp_path),
        "--submission-id",
        "cartpole-test",
        "examples/cartpole/train.py",
        home=driver_home,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    result = json.loads(
        next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))[len("RESULT ") :]
    )
    assert result["episode_return_mean"] >= 450
    assert result["env_steps"] <= 60_000
    assert (tmp_path / "cartpole-test" / "checkpoint").is_dir()
    assert json.loads((tmp_path / "cartpole-test" / "summary.json").read_text()) == result


def test_env_that_would_keep_a_job_from_starting_is_refused(driver_home: Path) -> None:
    r = run_driver(
        "submit", "--env", "PATH=/nonexistent", str(JOBS / "succeed.py"), home=driver_home
    )
    assert r.returncode == 2
    assert error_lines(r.stderr) == [
        "error: --env PATH=/nonexistent would replace the PATH Ray's processes need, and the job "
        "would never start: extend it instead, e.g. PATH=/nonexistent:${PATH}"
    ]
    r = run_driver(
        "submit",
        "--submission-id",
        "env-path-ok",
        "--env",
        "PATH=/opt/extra:${PATH}",
        str(JOBS / "succeed.py"),
        home=driver_home,
    )
    assert r.returncode == 0, r.stderr


def test_stop_of_a_job_that_never_starts_ends_in_bounded_time(driver_home: Path) -> None:
    """A job Ray cannot start stays PENDING; stop says so instead of waiting forever."""
    from ray.job_submission import JobSubmissionClient

    head = LocalRay(driver_home).start()[0]
    client = JobSubmissionClient(
        head.jobs_address, headers={"Authorization": f"Bearer {head.token()}"}
    )
    sid = client.submit_job(
        entrypoint="python -c pass",
        submission_id="stuck-pending-1",
        runtime_env={"env_vars": {"PATH": "/nonexistent"}},  # what the driver now refuses
    )
    time.sleep(3)
    assert _status(sid, driver_home) == "PENDING"
    started = time.monotonic()
    r = run_driver("stop", sid, "--timeout", "5", home=driver_home, timeout=300)
    assert time.monotonic() - started < 200  # bounded (5 s and a loaded machine's start-up)
    assert r.returncode == 2
    [line] = error_lines(r.stderr)
    assert line.startswith(f"error: asked Ray to stop job {sid}, but it is still PENDING after 5 s")


def test_control_sequences_from_a_job_do_not_reach_the_terminal(
    driver_home: Path, tmp_path: Path
) -> None:
    """A job's output may carry escape sequences that retitle, clear or rewrite a terminal (or
    hide text), with ESC or as 8-bit C1 controls (U+009B CSI, U+009D OSC): colours stay, the
    rest is removed before it is printed."""
    job = tmp_path / "escapes"
    job.mkdir()
    (job / "train.py").write_text(
        "print('\\x1b]0;pwned title\\x07\\x1b[2J\\x1b[H\\x1b]8;;http://evil\\x1b\\\\link"
        "\\x9b2J\\x9b?1049h\\x9d0;c1 title\\x07\\x85"
        "\\x1b]8;;\\x1b\\\\ \\x1b[31mred\\x1b[0m bell\\x07 done')\n"
    )
    r = run_driver(
        "submit", "--submission-id", "escapes-1", str(job / "train.py"), home=driver_home
    )
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.endswith("done"))
    assert line == "link \x1b[31mred\x1b[0m bell done"
    logs = run_driver("logs", "escapes-1", home=driver_home).stdout
    assert "\x1b]" not in logs and "\x1b[2J" not in logs and "\x07" not in logs
    assert not [c for c in logs if 0x80 <= ord(c) <= 0x9F], repr(logs)


def test_status_without_a_job_id_shows_the_cluster(driver_home: Path) -> None:
    """Local Ray runs no autoscaler: `status` lists its nodes (the head, its CPUs); --json
    carries the nodes and says there is no autoscaler report."""
    run_driver("local", "start", home=driver_home)
    r = run_driver("status", home=driver_home)
    assert r.returncode == 0, r.stderr
    assert "1 node alive (no Ray autoscaler runs on this cluster):" in r.stdout
    assert " head " in r.stdout and "ALIVE" in r.stdout
    r = run_driver("status", "--json", home=driver_home)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["autoscaler"] is None
    [node] = doc["nodes"]
    assert node["head"] and node["state"] == "ALIVE" and node["resources"]["CPU"] >= 1
