"""The driver reads what Ray Tune wrote to the results store (python/driver/store.py): a user's
Tune experiment under ``ray_results/<experiment>/`` in Tune's own layout, next to the harness's
runs. ``runs``, ``download`` and ``plot`` through the real command line against Azurite (the
``env`` fixture, see test_results_remote.py); the layout is a real Ray 2.60 experiment's, two
trials of a function trainable that saved a checkpoint every second iteration."""

from __future__ import annotations

import json
import os
from pathlib import Path

from blob_support import laptop_driver, put_blob
from driver.store import last_checkpoint
from fakes.local_blob import Blob

TRIALS = (
    "trainable_3af3f_00000_0_x=1_2026-11-28_12-07-09",
    "trainable_3af3f_00001_1_x=2_2026-11-28_12-07-09",
)
TOP = (
    ".validate_storage_marker",
    "basic-variant-state-2026-11-28_12-07-09.json",
    "experiment_state-2026-11-28_12-07-09.json",
    "trainable.pkl",
    "tuner.pkl",
)
PLAIN = ("events.out.tfevents.1795867632.vm", "params.json", "params.pkl", "result.json")
CHECKPOINT_FILES = ("learner/w.bin", "state.json")
HEADER = (
    "env_runners/episode_return_mean,num_env_steps_sampled_lifetime,timestamp,"
    "checkpoint_dir_name,done,training_iteration,trial_id,time_total_s\n"
)


def _progress(x: int, checkpoints: int) -> str:
    """Tune's progress.csv: a row every iteration, every second one naming its checkpoint."""
    rows = []
    for i in range(1, 2 * checkpoints + 1):
        named = f"checkpoint_{i // 2 - 1:06d}" if i % 2 == 0 else ""
        rows.append(f"{x * i},{100 * i},1795867632,{named},False,{i},t{x},{0.5 * i}\n")
    return HEADER + "".join(rows)


def _experiment(blob: Blob, name: str) -> None:
    """Trial 0: checkpoints 0 and 1, both named by its results. Trial 1: also a checkpoint 2
    no row names yet (still being written: one of its two files is there)."""
    prefix = f"ray_results/{name}"
    for top in TOP:
        put_blob(blob, f"{prefix}/{top}", b"{}" if top.endswith(".json") else b"top")
    for x, trial in enumerate(TRIALS, start=1):
        put_blob(blob, f"{prefix}/{trial}/progress.csv", _progress(x, 2).encode())
        for plain in PLAIN:
            put_blob(blob, f"{prefix}/{trial}/{plain}", f"{trial} {plain}".encode())
        for n in (0, 1):
            for f in CHECKPOINT_FILES:
                put_blob(blob, f"{prefix}/{trial}/checkpoint_{n:06d}/{f}", f"{n} {f}".encode())
    put_blob(blob, f"{prefix}/{TRIALS[1]}/checkpoint_000002/state.json", b"half")


def _tree(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def test_runs_lists_a_tune_experiment_as_one_row_next_to_harness_runs(
    env: Blob, tmp_path: Path
) -> None:
    url = f"{env.url}/results"
    name, run = f"sweep-list-{os.getpid()}", f"harness-{os.getpid()}"
    _experiment(env, name)
    put_blob(env, f"{run}/progress.csv", b"iteration,env_steps\n1,100\n")
    listed = laptop_driver(env, "runs", "--results-url", url, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    row = [x for x in lines if x.startswith(f"ray_results/{name} ")]
    assert len(row) == 1 and "Tune experiment, 2 trials" in row[0], lines
    assert not [x for x in lines if x.startswith(("ray_results ", f"ray_results/{name}/"))]
    assert any(x.startswith(f"{run} ") and "no checkpoint yet" in x for x in lines), lines
    as_json = json.loads(
        laptop_driver(env, "runs", "--json", "--results-url", url, cwd=tmp_path).stdout
    )
    mine = {r["id"]: r for r in as_json}
    blobs = len(TOP) + 2 * (1 + len(PLAIN) + 2 * len(CHECKPOINT_FILES)) + 1
    assert (mine[f"ray_results/{name}"]["kind"], mine[f"ray_results/{name}"]["trials"]) == (
        "tune-experiment",
        2,
    )
    assert mine[f"ray_results/{name}"]["blobs"] == blobs
    assert (mine[run]["kind"], mine[run]["trials"]) == ("run", None)


def test_download_brings_each_trials_last_complete_checkpoint(env: Blob, tmp_path: Path) -> None:
    url = f"{env.url}/results"
    name = f"sweep-dl-{os.getpid()}"
    _experiment(env, name)
    # Names a job could plant under ray_results/: never written, said.
    for planted in (f"ray_results/{name}/x/../../../y", f"ray_results/{name}//absolute"):
        put_blob(env, planted, b"planted")
    done = laptop_driver(env, "download", f"ray_results/{name}", "--results-url", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    local = tmp_path / "results" / "ray_results" / name
    expected = sorted(
        [
            *TOP,
            *[f"{t}/{p}" for t in TRIALS for p in (*PLAIN, "progress.csv")],
            *[f"{t}/checkpoint_000001/{f}" for t in TRIALS for f in CHECKPOINT_FILES],
        ]
    )
    assert _tree(local) == expected
    assert (local / TRIALS[1] / "checkpoint_000001" / "state.json").read_bytes() == b"1 state.json"
    assert (local / TRIALS[0] / "progress.csv").read_text() == _progress(1, 2)
    assert _tree(tmp_path) == sorted(f"results/ray_results/{name}/{x}" for x in expected)
    lines = done.stderr.splitlines()
    assert lines[0].startswith(f"Downloaded {len(expected)} files (") and lines[0].endswith(
        f"from {url}/ray_results/{name} to results/ray_results/{name}: Tune experiment of "
        "2 trials, each with its last complete checkpoint"
    ), lines
    assert lines[1:] == [
        "Left out 4 files of older checkpoints (only each trial's last complete one is downloaded)",
        "Left out 1 file of checkpoints no result of their trial names yet (still being "
        "written, or the trial stopped while writing)",
        "Left out 2 blobs whose names are not plain relative paths: '/absolute', 'x/../../../y'",
    ]
    # The experiment's own name, when no harness run has it, means the same: all there now.
    again = laptop_driver(env, "download", name, "--results-url", url, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert f"; {len(expected)} already there" in again.stderr.splitlines()[0]
    assert _tree(local) == expected


def test_no_such_experiment_is_one_line(env: Blob, tmp_path: Path) -> None:
    url = f"{env.url}/results"
    for verb in ("download", "plot"):
        done = laptop_driver(
            env, verb, "ray_results/never-swept", "--results-url", url, cwd=tmp_path
        )
        assert (done.returncode, done.stderr.splitlines()) == (
            2,
            [
                f"error: no Tune experiment ray_results/never-swept in {url} (see `runs` for "
                "the runs and experiments there)"
            ],
        ), done.stderr
    empty = laptop_driver(env, "download", "ray_results/", "--results-url", url, cwd=tmp_path)
    assert empty.returncode == 2 and "expected ray_results/EXPERIMENT" in empty.stderr
    assert len(empty.stderr.strip().splitlines()) == 1, empty.stderr
    assert not (tmp_path / "results").exists()


def test_plot_draws_one_curve_per_trial_from_the_store(env: Blob, tmp_path: Path) -> None:
    url = f"{env.url}/results"
    name = f"sweep-plot-{os.getpid()}"
    _experiment(env, name)
    done = laptop_driver(env, "plot", f"ray_results/{name}", "--results-url", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [f"Wrote {name}.png: 2 runs, 8 points"]
    assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_last_complete_checkpoint_is_the_last_a_result_names(tmp_path: Path) -> None:
    progress = tmp_path / "progress.csv"
    progress.write_text(_progress(1, 2))  # names checkpoint_000000 and checkpoint_000001
    assert last_checkpoint(progress, {0: "", 1: "", 2: ""}) == 1
    assert last_checkpoint(progress, {0: ""}) == 0
    assert last_checkpoint(progress, {5: ""}) is None
    assert last_checkpoint(tmp_path / "missing.csv", {0: ""}) is None
    progress.write_text("iteration,env_steps\n1,100\n")  # no column: not Tune's
    assert last_checkpoint(progress, {0: "", 3: ""}) == 3


def _tune_state(root: str, registered: dict[str, list[int]]) -> bytes:
    """An experiment_state-*.json as Tune 2.60 writes it, made by Ray's own classes: each
    trial's JSON and its run metadata, whose checkpoint manager (a cloudpickle, in hex) holds
    the checkpoints registered for it, at their paths on the node (``root``)."""
    from ray.train import Checkpoint, CheckpointConfig
    from ray.train._internal.checkpoint_manager import _CheckpointManager
    from ray.train._internal.session import _TrainingResult
    from ray.tune.trainable.metadata import _TrainingRunMetadata

    trial_data = []
    for trial, numbers in registered.items():
        metadata = _TrainingRunMetadata()
        metadata.checkpoint_manager = _CheckpointManager(CheckpointConfig())
        for n in numbers:
            path = f"{root}/{trial}/checkpoint_{n:06d}"
            result = _TrainingResult(Checkpoint(path), {"training_iteration": 2 * (n + 1)})
            metadata.checkpoint_manager.register_checkpoint(result)
        state = {"trainable_name": "PPO", "status": "RUNNING", "relative_logdir": trial}
        trial_data.append([json.dumps(state), metadata.get_json_state()])
    return json.dumps({"trial_data": trial_data, "runner_data": {}, "stats": {}}).encode()


def test_an_rllib_trials_last_checkpoint_is_the_last_tune_registered(
    env: Blob, tmp_path: Path
) -> None:
    """RLlib's algorithms run by Tune name no checkpoint in progress.csv: the last complete one
    is the last Tune's state lists. Trial 0: checkpoints 0-2 there, the state lists 0 and 1 (2
    is still being written). Trial 1: checkpoint 0 there, none listed yet: none."""
    url = f"{env.url}/results"
    name = f"sweep-rllib-{os.getpid()}"
    prefix = f"ray_results/{name}"
    header = HEADER.replace("checkpoint_dir_name,", "")
    rows = "".join(f"1.0,{100 * i},1795867632,False,{i},t,{i}\n" for i in range(1, 7))
    state = _tune_state(f"/home/ray/ray_results/{name}", {TRIALS[0]: [0, 1], TRIALS[1]: []})
    put_blob(env, f"{prefix}/experiment_state-2026-11-28_12-07-09.json", state)
    put_blob(env, f"{prefix}/experiment_state-2026-11-28_12-00-00.json", b"an older start")
    for trial, checkpoints in ((TRIALS[0], (0, 1, 2)), (TRIALS[1], (0,))):
        put_blob(env, f"{prefix}/{trial}/progress.csv", (header + rows).encode())
        for n in checkpoints:
            put_blob(env, f"{prefix}/{trial}/checkpoint_{n:06d}/state.json", f"{n}".encode())
    done = laptop_driver(env, "download", prefix, "--results-url", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    local = tmp_path / "results" / prefix
    assert [p for p in _tree(local) if "checkpoint_" in p] == [
        f"{TRIALS[0]}/checkpoint_000001/state.json"
    ]
    lines = done.stderr.splitlines()
    assert "Left out 1 file of older checkpoints" in lines[1], lines
    assert lines[2].startswith("Left out 2 files of checkpoints no result of their trial"), lines


def test_a_state_that_is_not_tunes_lists_nothing(tmp_path: Path) -> None:
    from driver.store import registered_checkpoints

    state = tmp_path / "experiment_state-1.json"
    for text in (
        b"{}",
        b"not json",
        json.dumps({"trial_data": [["{}", "{}"]]}).encode(),
        json.dumps({"trial_data": [[json.dumps({"relative_logdir": "t"}), "{}"]]}).encode(),
        json.dumps(
            {
                "trial_data": [
                    [
                        json.dumps({"relative_logdir": "t"}),
                        json.dumps({"checkpoint_manager": {"value": "zz"}}),
                    ]
                ]
            }
        ).encode(),
        json.dumps(
            {
                "trial_data": [
                    [
                        json.dumps({"relative_logdir": "t"}),
                        json.dumps({"checkpoint_manager": {"value": "ff00ff"}}),
                    ]
                ]
            }
        ).encode(),
    ):
        state.write_bytes(text)
        assert registered_checkpoints(state) in (None, {"t": set()}), text
    state.write_bytes(_tune_state("/r", {"t": [3]}))
    assert registered_checkpoints(state) == {"t": {3}}
    assert registered_checkpoints(tmp_path / "missing.json") is None
