"""The examples' shared harness, without training: flags, run folders, resume, checkpoints."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from driver.jobs import _SUBMISSION_ID, check_submission_id
from harness import flags, runs
from harness.loop import apply_harness_settings, stop_reason


def test_submission_id_rule_is_the_drivers() -> None:
    """The nodes have no driver package, so the harness repeats the rule: hold them together."""
    assert runs.SUBMISSION_ID.pattern == _SUBMISSION_ID.pattern
    for text in ("cabs-20261121-153000-ab12", "a", "x" * 128, "a.b_c-d"):
        assert runs.check_run(text) == check_submission_id(text)
    for text in ("-a", "x" * 129, "a b", "a..b", "é"):
        with pytest.raises(ValueError):
            check_submission_id(text)
        with pytest.raises(ValueError):
            runs.check_run(text)


def test_resume_run_is_an_id_next_to_this_run_or_a_path(tmp_path: Path) -> None:
    this_run = tmp_path / "results" / "cabs-2"
    assert runs.run_folder("cabs-1", this_run) == tmp_path / "results" / "cabs-1"
    assert runs.run_folder(str(tmp_path / "x"), this_run) == tmp_path / "x"
    assert runs.run_folder("./rel/run", this_run) == (Path.cwd() / "rel" / "run").resolve()


def test_results_dir_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(runs.RESULTS_ENV, str(tmp_path / "from-env"))
    assert runs.results_dir(str(tmp_path / "flag"), "cabs") == tmp_path / "flag"
    assert runs.results_dir(None, "cabs") == tmp_path / "from-env"
    monkeypatch.delenv(runs.RESULTS_ENV)
    assert runs.results_dir(None, "cabs") == (Path("results") / "cabs").resolve()


class FakeAlgo:
    """Writes what save_to_path would, or fails half-way like a job killed while saving."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def save_to_path(self, path: str) -> None:
        Path(path).mkdir(parents=True)
        (Path(path) / "algorithm_state.pkl").write_text("state")
        if self.fail:
            raise KeyboardInterrupt


def test_checkpoint_swap_keeps_one_complete_checkpoint(tmp_path: Path) -> None:
    first = runs.save_checkpoint(FakeAlgo(), tmp_path, {"iteration": 2, "env_steps": 20})
    assert first == tmp_path / "checkpoint"
    assert runs.latest_checkpoint(tmp_path).state["iteration"] == 2
    runs.save_checkpoint(FakeAlgo(), tmp_path, {"iteration": 4, "env_steps": 40})
    assert runs.latest_checkpoint(tmp_path).state["iteration"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]
    with pytest.raises(KeyboardInterrupt):
        runs.save_checkpoint(FakeAlgo(fail=True), tmp_path, {"iteration": 6, "env_steps": 60})
    found = runs.latest_checkpoint(tmp_path)  # the half-written one is not taken
    assert (found.path, found.state["iteration"]) == (tmp_path / "checkpoint", 4)
    # Killed between the two renames: the old one is still found.
    (tmp_path / "checkpoint").rename(tmp_path / "checkpoint.old")
    assert runs.latest_checkpoint(tmp_path).path == tmp_path / "checkpoint.old"
    # A checkpoint folder itself is accepted too.
    assert runs.latest_checkpoint(tmp_path / "checkpoint.old").state["env_steps"] == 40


def test_no_checkpoint_is_a_one_line_reason(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no run folder"):
        runs.latest_checkpoint(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="no complete checkpoint in"):
        runs.latest_checkpoint(tmp_path)
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / runs.STATE_JSON).write_text("{not json")
    with pytest.raises(FileNotFoundError, match="unreadable checkpoint state"):
        runs.latest_checkpoint(tmp_path)


def test_earlier_progress_is_kept_up_to_the_checkpoint(tmp_path: Path) -> None:
    rows = "iteration,env_steps,episode_return_mean\n1,10,1.5\n2,20,2.5\n3,30,3.5\n"
    (tmp_path / "progress.csv").write_text(rows)
    kept = runs.read_progress(tmp_path / "progress.csv", up_to_iteration=2)
    assert [(r["iteration"], r["env_steps"]) for r in kept] == [("1", "10"), ("2", "20")]
    assert set(kept[0]) == set(runs.PROGRESS_COLUMNS)
    assert runs.read_progress(tmp_path / "none.csv", 5) == []


def _args(argv: list[str], **defaults: object) -> argparse.Namespace:
    return flags.parser("doc", **defaults).parse_args(argv)  # type: ignore[arg-type]


def test_flags_defaults_and_none() -> None:
    args = _args([], stop_reward=450.0, max_env_steps=60_000)
    assert (args.stop_reward, args.max_env_steps, args.max_iterations) == (450.0, 60_000, None)
    assert (args.checkpoint_every, args.num_env_runners, args.seed) == (10, 1, 0)
    assert args.upload_timeout == 600.0
    assert _args(["--upload-timeout", "30"]).upload_timeout == 30.0
    args = _args(["--target", "none", "--max-iterations", "2", "--resume", "cabs-1"])
    assert (args.stop_reward, args.max_iterations, args.resume) == (None, 2, "cabs-1")
    assert _args([]).min_iteration_seconds is None
    assert _args(["--min-iteration-seconds", "0"]).min_iteration_seconds == 0.0
    assert _args(["--min-iteration-seconds", "none"]).min_iteration_seconds is None


def test_min_iteration_seconds_replaces_the_algorithms_own(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray
    from ray.rllib.algorithms.appo import APPOConfig

    monkeypatch.setattr(ray, "cluster_resources", lambda: {})  # local Ray: no head resource
    kept = apply_harness_settings(APPOConfig(), _args([]))
    assert kept.min_time_s_per_iteration == 10  # RLlib's default for APPO
    config = apply_harness_settings(APPOConfig(), _args(["--min-iteration-seconds", "0.5"]))
    assert config.min_time_s_per_iteration == 0.5


@pytest.mark.parametrize(
    "argv",
    [
        ["--resume", "bad id"],
        ["--max-iterations", "0"],
        ["--stop-reward", "nan"],
        ["--upload-timeout", "0"],
        ["--upload-timeout", "inf"],
        ["--upload-timeout", "soon"],
        ["--min-iteration-seconds", "-1"],
        ["--min-iteration-seconds", "inf"],
        ["--min-iteration-seconds", "soon"],
    ],
)
def test_bad_flags_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        _args(argv)
    assert e.value.code == 2


def test_stop_conditions_first_met_wins() -> None:
    args = _args(["--max-iterations", "5", "--max-env-steps", "100", "--stop-seconds", "9"])
    args.stop_reward = 10.0
    assert stop_reason(args, float("nan"), 1, 1, 0) is None
    assert stop_reason(args, 10.0, 5, 100, 9) == "stop_reward"
    assert stop_reason(args, 9.0, 5, 100, 9) == "max_iterations"
    assert stop_reason(args, 9.0, 4, 100, 9) == "max_env_steps"
    assert stop_reason(args, 9.0, 4, 99, 9) == "stop_seconds"
    assert stop_reason(args, 9.0, 4, 99, 8.9) is None


def test_state_file_is_json(tmp_path: Path) -> None:
    runs.save_checkpoint(FakeAlgo(), tmp_path, {"iteration": 1, "env_steps": 5})
    assert json.loads((tmp_path / "checkpoint" / runs.STATE_JSON).read_text())["env_steps"] == 5


def test_progress_cells_are_plain_numbers(tmp_path: Path) -> None:
    """RLlib hands numpy scalars: the CSV must hold numbers the plot can read."""
    import csv

    import numpy as np

    from harness.metrics import ProgressWriter

    writer = ProgressWriter(tmp_path, [{"iteration": "1", "env_steps": "3"}])
    row = {
        "iteration": 2,
        "env_steps": np.int64(5),
        "episode_return_mean": float("nan"),
        "episode_len_mean": np.float64(2.5),
    }
    writer.write(row, {"env_runners": {"x": np.float32(1.0), "flag": True, "name": "a"}})
    writer.close()
    with (tmp_path / "progress.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["env_steps"] for r in rows] == ["3", "5"]
    assert rows[1]["episode_len_mean"] == "2.5" and rows[1]["episode_return_mean"] == ""
    assert list(tmp_path.glob("events.out.tfevents.*"))
