"""Every example through ``python -m driver submit`` on local Ray: two small iterations, a
checkpoint, then ``--resume`` continuing from it for one more (counters go on, progress.csv
carries over)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from support import job_failure, run_driver

pytestmark = pytest.mark.slow

SMALL = {
    "cartpole": ["--train-batch-size", "500", "--stop-reward", "none", "--num-env-runners", "0"],
    "cabs": [
        "--learning-starts",
        "200",
        "--rollout-fragment-length",
        "50",
        "--train-batch-size",
        "32",
        "--eval-episodes",
        "1",
    ],
    "mobile": ["--train-batch-size", "300", "--eval-episodes", "1", "--num-env-runners", "0"],
    # One simulator process per env, in a private Xvfb (the test's machine has no DISPLAY).
    "pixels": [
        "--train-batch-size",
        "200",
        "--envs-per-env-runner",
        "1",
        "--num-env-runners",
        "0",
    ],
    "pong": [
        "--train-batch-size",
        "100",
        "--num-env-runners",
        "0",
        "--envs-per-env-runner",
        "1",
        "--stop-reward",
        "none",
        "--min-iteration-seconds",
        "0",
    ],
}
"""Flags that keep each example's iterations small; the stop conditions are the test's. (APPO
and IMPALA iterate for at least 10 s by default: pong's iterations end once they have a batch,
its min_sample_timesteps_per_iteration.) Every example samples in the job's own process
(``--num-env-runners 0``: one Ray worker process fewer to start, ~10 CPU s a run; for pong's
APPO two, its env runner and the state server RLlib starts for remote runners); the end-to-end
tests run cartpole's and pixels' runners on the rehearsal's workers."""


def result_of(stdout: str) -> dict:
    line = next(ln for ln in stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def progress_rows(run: Path) -> list[dict[str, str]]:
    with (run / "progress.csv").open() as f:
        return list(csv.DictReader(f))


def submit(example: str, sid: str, results: Path, home: Path, *args: str):
    return run_driver(
        "submit",
        "--results",
        str(results),
        "--submission-id",
        sid,
        f"examples/{example}/train.py",
        "--",
        *SMALL[example],
        *args,
        home=home,
        timeout=900,
    )


@pytest.mark.parametrize("example", sorted(SMALL))
def test_two_iterations_checkpoint_then_resume(
    example: str, driver_home: Path, tmp_path: Path
) -> None:
    first_id, second_id = f"{example}-first", f"{example}-resumed"
    r = submit(example, first_id, tmp_path, driver_home, "--max-iterations", "2")
    assert r.returncode == 0, job_failure(r)
    assert "Uploading module" in r.stderr and "harness" in r.stderr  # py_modules shipped it
    first = result_of(r.stdout)
    run = tmp_path / first_id
    assert (first["iterations"], first["stopped_by"]) == (2, "max_iterations")
    assert first["checkpoint"] == str(run / "checkpoint")
    assert (run / "checkpoint" / "harness.json").is_file()
    assert json.loads((run / "summary.json").read_text()) == first
    assert list(run.glob("events.out.tfevents.*")), "no TensorBoard event file"
    rows = progress_rows(run)
    assert [int(r["iteration"]) for r in rows] == [1, 2]
    assert int(rows[-1]["env_steps"]) == first["env_steps"] > int(rows[0]["env_steps"]) > 0
    if example == "cartpole":  # `download --plot` of a local run draws its curve there
        r = run_driver("download", "--results", str(tmp_path), "--plot", first_id, home=driver_home)
        assert r.returncode == 0, r.stderr
        assert (run / "curve.png").is_file()
        assert "curve.png: 1 run, 2 points" in r.stderr

    # A bare id is the earlier run's folder next to this one's.
    r = submit(
        example, second_id, tmp_path, driver_home, "--max-iterations", "3", "--resume", first_id
    )
    assert r.returncode == 0, job_failure(r)
    second = result_of(r.stdout)
    assert f"resumed from {run / 'checkpoint'}: iteration 2" in r.stdout
    assert second["resumed_from"] == str(run / "checkpoint")
    assert second["iterations"] == 3  # 1 more, not 3 from scratch
    assert second["env_steps"] > first["env_steps"]
    assert second["wall_time_s"] > first["wall_time_s"]
    rows = progress_rows(tmp_path / second_id)
    assert [int(r["iteration"]) for r in rows] == [1, 2, 3]
    steps = [int(r["env_steps"]) for r in rows]
    assert steps == sorted(steps) and steps[1] == first["env_steps"]
    assert steps[-1] == second["env_steps"]


def test_resume_of_a_run_without_checkpoint_exits_2(driver_home: Path, tmp_path: Path) -> None:
    (tmp_path / "empty-run").mkdir()
    r = submit("cartpole", "cp-bad-resume", tmp_path, driver_home, "--resume", "empty-run")
    assert r.returncode == 1, r.stderr  # the job failed: the driver's code for a failed job
    assert "error: --resume empty-run: no complete checkpoint in" in r.stdout
    assert "Traceback" not in r.stdout
