"""Every benchmark that needs no root runs in its smoke mode (``--smoke``: its whole code path
with the smallest settings, one repetition) and prints the JSON it documents, so that a benchmark
that no longer runs fails the suite (issue 35: benchmarks/bootstrap.py's anchor failed for a
while before anyone looked). Nothing here is timed: the figures of a smoke run measure nothing,
and the JSON says so (``"smoke": true``). The benchmarks that need root are run in their smoke
mode by tests/system/test_driver_overhead_benchmark.py (a head of their own) and on the rehearsal
clusters the e2e lanes boot anyway (tests/e2e/test_bootstrap_benchmark.py, test_autoscale.py).

Those that submit jobs submit them to the session's local Ray (``driver_home``: cartpole.py and
targets.py through RAYDRIVER_HOME, as a user's go to the user's; throughput.py and
pixels_pong.py, which otherwise start a fresh one, with ``--driver-home``), so that none of them
starts a local Ray of its own: on 2 cores loaded by the suite's other lanes that costs tens of
seconds. results_store.py starts its own Rays (in its process and in each training run), as it
measures them.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest

from driver import layout
from support import REPO, run_benchmark

BENCHMARKS = sorted(p.stem for p in (REPO / "benchmarks").glob("*.py"))
RUN_S = 900
"""A submit's bound, as tests/unit/test_examples.py's (on a loaded 2-core machine the local
head's start and the job's imports take minutes)."""


def positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def rate_ok(run: dict[str, Any], iterations: int) -> None:
    """A run measured as throughput.py measures it: from its progress.csv."""
    assert "error" not in run, run
    assert run["iterations"] == iterations, run
    for key in ("env_steps_per_s", "measured_env_steps", "measured_s", "submit_wall_s"):
        assert positive(run[key]), (key, run)


def test_every_benchmark_has_a_smoke_mode_tested() -> None:
    """A new benchmark gets its smoke run here, in tests/system or on a rehearsal cluster."""
    tested = {
        "autoscale": REPO / "tests" / "e2e" / "test_autoscale.py",
        "bootstrap": REPO / "tests" / "e2e" / "test_bootstrap_benchmark.py",
        "driver_overhead": REPO / "tests" / "system" / "test_driver_overhead_benchmark.py",
    }
    for name in BENCHMARKS:
        assert "--smoke" in (REPO / "benchmarks" / f"{name}.py").read_text(), name
        where = tested.get(name, Path(__file__))
        smoke_run = re.compile(rf'run_benchmark\(\s*"{name}",(\s*"[^"]*",)*\s*"--smoke"')
        assert smoke_run.search(where.read_text()), f"{name}: no smoke run in {where}"


def test_the_learner_update_benchmark_in_smoke_mode() -> None:
    p, printed = run_benchmark("learner_update", "--smoke", timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    [out] = printed
    assert out["smoke"] is True and out["batch_sizes"] == [50] and out["warmup"] == 1
    [(threads, sizes)] = out["cpu"].items()
    assert threads == f"threads_{out['machine']['torch_threads']}"
    update = sizes["50"]
    assert update["repeats"] == 1
    for key in ("ms_per_update", "updates_per_s", "samples_per_s", "env_steps_per_s"):
        assert positive(update[key]), (key, update)
    # Without a GPU, said so; with one, measured there too (with and without the copies).
    if out["machine"]["gpu"] is None:
        assert out["cuda_skipped"] == "torch sees no CUDA device"
    else:
        assert positive(out["cuda"]["50"]["ms_per_update_with_pinned_copy"])
        assert positive(out["gpu_speedup"][threads]["50"]["with_copy"])


@pytest.mark.slow
def test_the_cartpole_benchmark_in_smoke_mode(driver_home: Path, tmp_path: Path) -> None:
    p, printed = run_benchmark(
        "cartpole", "--smoke", "--driver-args", "--results", str(tmp_path),
        home=driver_home, timeout=RUN_S,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    [out] = printed
    assert out["smoke"] is True and out["reached"] == "1/1"
    [run] = out["runs"]
    assert run["seed"] == 0 and run["exit_code"] == 0 and run["reached_target"] is True
    assert run["episode_return_mean"] >= out["target"]
    for key in ("env_steps", "train_wall_s", "submit_wall_s"):
        assert positive(run[key]), (key, run)
    assert out["median_env_steps"] == out["max_env_steps"] == run["env_steps"]
    assert out["median_submit_wall_s"] == run["submit_wall_s"]


@pytest.mark.slow
def test_the_targets_benchmark_in_smoke_mode(driver_home: Path, tmp_path: Path) -> None:
    """cabs: the greedy policy against the random one, from the example's RESULT line."""
    p, printed = run_benchmark(
        "targets", "cabs", "--smoke", "--driver-args", "--results", str(tmp_path),
        home=driver_home, timeout=RUN_S,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    [out] = printed
    assert out["smoke"] is True and out["benchmark"] == "cabs_targets"
    [run] = out["runs"]
    assert run["seed"] == 0 and positive(run["env_steps"]) and positive(run["wall_time_s"])
    for key in ("greedy_return_mean", "random_return_mean", "greedy_minus_random"):
        assert math.isfinite(run[key]), (key, run)
    assert math.isclose(
        run["greedy_minus_random"], run["greedy_return_mean"] - run["random_return_mean"],
        abs_tol=0.11,
    )  # fmt: skip
    assert out["min_greedy_minus_random"] == run["greedy_minus_random"]


@pytest.mark.slow
def test_the_throughput_benchmark_in_smoke_mode(driver_home: Path) -> None:
    p, printed = run_benchmark(
        "throughput", "--smoke", "--driver-home", str(driver_home), timeout=2 * RUN_S
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    [out] = printed
    assert out["smoke"] is True
    assert list(out["cabs_dqn_local"]) == ["0_env_runners"]
    rate_ok(out["cabs_dqn_local"]["0_env_runners"], 2)
    local = out["cartpole_ppo_0_env_runners"]["local"]
    rate_ok(local, 2)
    assert local["measured_env_steps"] == 200  # iteration 2's: the smoke's smallest iterations
    for key in ("upload_and_submit", "job_start_to_training", "after_training"):
        assert isinstance(local["fixed_cost_s"][key], float), local


@pytest.mark.slow
def test_the_pixels_pong_benchmark_in_smoke_mode(driver_home: Path) -> None:
    """Both envs alone (PixelsEnv's simulator in a private Xvfb where there is no DISPLAY, as
    in the suite), then each example trained through the driver."""
    p, printed = run_benchmark(
        "pixels_pong", "--smoke", "--driver-home", str(driver_home), timeout=2 * RUN_S
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    [out] = printed
    assert out["smoke"] is True
    simulator = out["pixels_env"]["simulator_process"]
    assert simulator["steps"] == 20 and positive(simulator["steps_per_s"])
    assert simulator["display"] == os.environ.get("DISPLAY", "private Xvfb")
    for name in ("raw_frames", "preprocessed_steps"):
        assert out["pong_env"][name]["steps"] == 20 and positive(
            out["pong_env"][name]["steps_per_s"]
        )
    rate_ok(out["pixels_ppo_local"], 2)
    rate_ok(out["pong_appo_local"], 2)


@pytest.mark.slow
def test_the_results_store_benchmark_in_smoke_mode() -> None:
    """Against Azurite and the fake metadata service on loopback, as the benchmark starts them:
    the checkpoint published, and a run with the store on publishing while it trains."""
    p, printed = run_benchmark("results_store", "--smoke", timeout=3 * RUN_S)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    [out] = printed
    assert out["smoke"] is True and out["train_batch_size"] == 200
    checkpoint = out["checkpoint"]
    assert checkpoint["checkpoints"] == 1 and positive(checkpoint["checkpoint_files"])
    for key in ("median_local_save_s", "median_blocked_s", "median_published_s"):
        assert positive(checkpoint[key]), (key, checkpoint)
    throughput = out["throughput"]
    assert throughput["iterations"] == 2 and throughput["checkpoint_every"] == 1
    assert throughput["runs"]["off"] == []
    [on] = throughput["runs"]["on"]
    assert "error" not in on, on
    assert on["iterations"] == 2 and positive(on["env_steps_per_s"]), on
    # A checkpoint after each iteration: the first published while the run trained on.
    assert on["published"] == 2 and on["store_problems"] == [] and on["final_upload"], on


@pytest.mark.slow
def test_the_notice_checkpoint_benchmark_in_smoke_mode() -> None:
    """Against Azurite and the fake metadata service on loopback, as the benchmark starts them:
    a notice for its own Ray node acted on by the harness for each model, each checkpoint
    published and its hold released."""
    p, printed = run_benchmark("notice_checkpoint", "--smoke", timeout=RUN_S)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    [out] = printed
    assert out["smoke"] is True and list(out["models"]) == ["cartpole", "pong"]
    for name, model in out["models"].items():
        assert model["repeats"] == 1 and model["holds_left"] == [], (name, model)
        assert positive(model["median_notice_to_published_s"]), (name, model)
        [line] = model["lines"]
        assert line.startswith("notice: Azure Preempt for 127.0.0.1 (event ") and (
            "checkpoint at iteration 1 published in " in line
        ), line
    smoke_batch = _module("notice_checkpoint").SMOKE_BATCH
    assert out["models"]["cartpole"]["train_batch_size"] == smoke_batch
    # Pong's checkpoint is an order of magnitude bigger than CartPole's (as RLlib's are).
    assert (
        out["models"]["pong"]["checkpoint_bytes"]
        > 10 * out["models"]["cartpole"]["checkpoint_bytes"]
    )
    assert out["goal"]["pong_notice_to_published_s_at_most"] == 15.0
    assert isinstance(out["goal"]["met"], bool)


def test_the_cluster_storage_benchmark_in_smoke_mode(tmp_path: Path) -> None:
    """Any two folders stand for the mount and the disk: a CartPole checkpoint written and read
    back in each, and nothing of it left."""
    shared, local = tmp_path / "shared", tmp_path / "local"
    shared.mkdir()
    local.mkdir()
    p, printed = run_benchmark(
        "cluster_storage", "--smoke", "--shared", str(shared), "--local", str(local), timeout=300
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    [out] = printed
    assert out["smoke"] is True and list(out["models"]) == ["cartpole"]
    cartpole = out["models"]["cartpole"]
    assert cartpole["checkpoint_bytes"] > 1_000_000
    for where in ("shared", "local"):
        assert positive(cartpole[where]["write_s"]) and positive(cartpole[where]["restore_s"])
    assert not any(shared.iterdir()) and not any(local.iterdir())
    # Its default is in the cluster storage (it runs on nodes, where the driver is not).
    default = re.search(r'^SHARED_DEFAULT = "(.*)"$', _source("cluster_storage"), re.M)
    assert default and default[1].startswith(layout.CLUSTER_STORAGE_DIR + "/")
    p, _ = run_benchmark("cluster_storage", "--shared", "/nonexistent/x/y", timeout=300)
    assert p.returncode == 2 and "does not exist" in p.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_the_cluster_storage_sweep_benchmark_in_smoke_mode(tmp_path: Path) -> None:
    """Two folders stand for the mount and the disk: the smoke's one-trial sweep (the sweep's
    first learning rate, sampled in the trial's own process) run in each on a local Ray of its
    own, its checkpoint and results in the folder given, and nothing of it left; the storage's
    cost by its parts, where plain folders have no storage client."""
    shared, local = tmp_path / "shared", tmp_path / "local"
    shared.mkdir()
    local.mkdir()
    p, printed = run_benchmark(
        "cluster_storage_sweep", "--smoke", "--shared", str(shared), "--local", str(local),
        env={"RAY_ADDRESS": ""}, timeout=RUN_S,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    [out] = printed
    assert out["smoke"] is True and out["repeats"] == 1 and out["sweep"]["iterations"] == 1
    assert out["sweep"]["lr"] == _module("cluster_storage_sweep").SWEEP["lr"][:1]
    assert out["sweep"]["trials"] == 1 and out["sweep"]["num_env_runners"] == 0
    assert out["sweep"]["batch"] == "fixture"  # the default: the fixture's own training
    fixture = _module("cluster_storage_sweep").BATCHES["fixture"]
    assert {k: out["sweep"][k] for k in fixture} == fixture
    for where, folder in (("shared", shared), ("local", local)):
        assert Path(out["folders"][where]).parent == folder
        assert out["mounts"][where]["mount_point"] in [str(p) for p in (folder, *folder.parents)]
        [run] = out[where]["runs"]
        assert positive(run["wall_s"]) and positive(run["env_steps_per_s"]), run
        assert [t["lr"] for t in run["trials"]] == out["sweep"]["lr"]
        for trial in run["trials"]:
            assert trial["iterations"] == 1 and trial["checkpoints"] == 1, trial  # at the end
            assert positive(trial["env_steps"]) and positive(trial["env_steps_per_s"]), trial
            assert trial["last_checkpoint_bytes"] > 1_000_000, trial
            # The trial's wall time holds its steps and its one save, which it waited for.
            assert trial["saves"] == 1 and positive(trial["save_s"]), trial
            outside = trial["wall_s"] - trial["time_total_s"]
            assert math.isclose(trial["outside_steps_s"], outside, abs_tol=2e-3), trial
            assert trial["save_s"] < trial["outside_steps_s"] < trial["wall_s"] < run["wall_s"]
        assert run["env_steps"] == sum(t["env_steps"] for t in run["trials"])
        assert not any(folder.iterdir())
        # A plain folder has no storage client; the sweep's CPU where a cgroup of its own counts it.
        assert run["client_cpu_s"] is None
        if out["sweep_cpu"]["file"]:
            assert positive(run["sweep_cpu_s"]), run
        else:
            assert run["sweep_cpu_s"] is None and out["sweep_cpu"]["reason"]
    assert out["client"]["pids"] == [] and "no client process" in out["client"]["reason"]
    ratio = out["shared"]["env_steps_per_s"] / out["local"]["env_steps_per_s"]
    assert math.isclose(out["shared_over_local"], ratio, abs_tol=1e-4)
    assert out["goal_met"] is (ratio >= 0.95) and "0.95" in out["goal"]
    cost = out["storage_cost"]
    blocking = out["shared"]["trial_outside_steps_s"] - out["local"]["trial_outside_steps_s"]
    assert math.isclose(cost["blocking_s"], blocking, abs_tol=2e-3)
    assert math.isclose(
        cost["blocking_fraction"], blocking / out["local"]["trial_wall_s"], abs_tol=1e-3
    )
    assert cost["estimated_slowdown"] is None and cost["goal_met"] is None
    assert cost["reason"].startswith("client_cpu: ") and "0.05" in cost["goal"]


def test_the_cluster_storage_sweep_is_the_users_sweep() -> None:
    """The benchmark measures tests/fixtures/jobs/tune_sweep.py's sweep: every setting that
    fixture gives its config and its tuner as a literal (the grid of learning rates included),
    the benchmark's too."""
    fixture = ast.parse((REPO / "tests" / "fixtures" / "jobs" / "tune_sweep.py").read_text())
    made = [
        n.value
        for n in ast.walk(fixture)
        if isinstance(n, ast.Assign)
        and [ast.unparse(t) for t in n.targets] in (["config"], ["tuner"])
        and not ast.unparse(n.value).startswith("tune.Tuner.restore(")  # the resume: no settings
    ]
    assert len(made) == 2
    settings = {}
    for call in (n for tree in made for n in ast.walk(tree) if isinstance(n, ast.Call)):
        for keyword in call.keywords:
            value = keyword.value
            if isinstance(value, ast.Call) and getattr(value.func, "attr", "") == "grid_search":
                [value] = value.args
            with contextlib.suppress(ValueError):
                settings[keyword.arg] = ast.literal_eval(value)
    assert settings == _module("cluster_storage_sweep").SWEEP


def test_the_cluster_storage_sweep_example_batch_is_the_cartpole_examples() -> None:
    """``--batch example`` trains each iteration as examples/cartpole/train.py does by default:
    its ``--train-batch-size`` default, the minibatch it takes from it (at most 128) and its
    epochs, read from the example's source."""
    example = ast.parse((REPO / "examples" / "cartpole" / "train.py").read_text())
    calls = [n for n in ast.walk(example) if isinstance(n, ast.Call)]
    [batch] = [
        ast.literal_eval(k.value)
        for c in calls
        if c.args
        and isinstance(c.args[0], ast.Constant)
        and c.args[0].value == "--train-batch-size"
        for k in c.keywords
        if k.arg == "default"
    ]
    [training] = [c for c in calls if getattr(c.func, "attr", "") == "training"]
    given = {k.arg: ast.unparse(k.value) for k in training.keywords}
    assert given["train_batch_size_per_learner"] == "args.train_batch_size"
    assert given["minibatch_size"] == "min(128, args.train_batch_size)"
    assert _module("cluster_storage_sweep").BATCHES["example"] == {
        "train_batch_size_per_learner": batch,
        "minibatch_size": min(128, batch),
        "num_epochs": ast.literal_eval(given["num_epochs"]),
    }


def _module(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _source(name: str) -> str:
    return (REPO / "benchmarks" / f"{name}.py").read_text()
