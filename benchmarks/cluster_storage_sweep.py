"""A two-trial Tune sweep's env steps per second with its storage in the cluster storage against
the node's own disk: one JSON object.

    python -m driver submit benchmarks/cluster_storage_sweep.py --head ...   # on a cluster
    python benchmarks/cluster_storage_sweep.py --shared DIR --local DIR      # any two folders
    python benchmarks/cluster_storage_sweep.py --smoke --shared DIR --local DIR  # it runs, untimed

The sweep is the user's of tests/fixtures/jobs/tune_sweep.py (:data:`SWEEP`; a test holds the
two equal): two PPO trials on CartPole, one learning rate each, a checkpoint every 2 iterations
and one at the end, here with a fixed seed and ``--iterations`` iterations. It runs with Tune's
``storage_path`` in ``--shared`` and in ``--local`` in turn (local, shared, local, shared, ...:
load that comes and goes hits both), ``--repeats`` times each, after an untimed one-iteration
sweep (a Ray's first sweep starts slower), on the Ray the job runs on (``RAY_ADDRESS``) or else
on a local Ray of its own. On a cluster (docs/results-and-storage.md: "Cluster storage")
``--shared`` defaults to a folder in ``/mnt/cluster_storage``, the rclone mount without a write
cache that ``~/ray_results`` links to, and ``--local`` to one on the node's disk
(on a cluster of several nodes each trial's checkpoints then stay on the node it ran on).

Per sweep: ``env_steps_per_s``, the env steps sampled by both trials (each one's
``num_env_steps_sampled_lifetime``) over the wall time of ``Tuner.fit`` (the trials' start, their
training, the checkpoints' copies into the storage, Tune's syncs of its state and results);
per trial, its env steps over Tune's ``time_total_s``, the training steps alone (the checkpoints
are saved between them). ``shared_over_local``: the median shared sweep's env steps/s over the
median local one's; the goal (issue 36) is at most 5 % slower, ``>= 0.95``. The experiments are
deleted after each sweep.

``--smoke``: one iteration, one sweep each of :data:`SMOKE_SWEEP` (the JSON says
``"smoke": true``; its figures measure nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster_storage import SHARED_DEFAULT

GOAL = 0.95
"""Issue 36: the sweep with the shared folder at most 5 % slower than without it."""

SWEEP: dict[str, Any] = {
    "num_env_runners": 1,
    "num_cpus_per_env_runner": 1,
    "lr": [1e-3, 3e-4],
    "train_batch_size_per_learner": 400,
    "minibatch_size": 100,
    "num_epochs": 2,
    "checkpoint_frequency": 2,
    "checkpoint_at_end": True,
    "max_failures": 2,
}
"""tests/fixtures/jobs/tune_sweep.py's settings (tests/unit/test_benchmark_smoke.py compares)."""
SMOKE_SWEEP: dict[str, Any] = {**SWEEP, "lr": SWEEP["lr"][:1], "num_env_runners": 0}
"""The least that runs the benchmark's whole path: one trial (the first learning rate) that
samples in its own process (no env runner actor: one Ray worker process fewer to start, which
on 2 loaded cores costs tens of seconds; the sweep's CPU is mostly its processes' imports)."""
SEED = 0


def sweep(
    storage: Path, name: str, iterations: int, settings: dict[str, Any] = SWEEP
) -> dict[str, Any]:
    """One sweep of ``settings`` (:data:`SWEEP`) with its storage in ``storage``: its wall time,
    env steps/s, and each trial's figures."""
    from ray import tune
    from ray.rllib.algorithms.ppo import PPOConfig

    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(
            num_env_runners=settings["num_env_runners"],
            num_cpus_per_env_runner=settings["num_cpus_per_env_runner"],
        )
        .training(
            lr=tune.grid_search(settings["lr"]),
            train_batch_size_per_learner=settings["train_batch_size_per_learner"],
            minibatch_size=settings["minibatch_size"],
            num_epochs=settings["num_epochs"],
        )
        .debugging(seed=SEED)
    )
    tuner = tune.Tuner(
        "PPO",
        param_space=config,
        run_config=tune.RunConfig(
            name=name,
            storage_path=str(storage),
            stop={"training_iteration": iterations},
            checkpoint_config=tune.CheckpointConfig(
                checkpoint_frequency=settings["checkpoint_frequency"],
                checkpoint_at_end=settings["checkpoint_at_end"],
            ),
            failure_config=tune.FailureConfig(max_failures=settings["max_failures"]),
            verbose=0,
        ),
    )
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    results = tuner.fit()
    wall = time.perf_counter() - start
    trials = []
    for r in results:
        if r.error:
            raise RuntimeError(f"a trial of {name} failed: {r.error}")
        path = Path(r.path)
        if not path.is_relative_to(storage):
            raise RuntimeError(f"a trial of {name} kept its results in {path}, not in {storage}")
        checkpoints = sorted(path.glob("checkpoint_*"))
        steps = int(r.metrics["num_env_steps_sampled_lifetime"])
        trials.append(
            {
                "lr": r.config["lr"],
                "iterations": r.metrics["training_iteration"],
                "env_steps": steps,
                "time_total_s": round(r.metrics["time_total_s"], 3),
                "env_steps_per_s": round(steps / r.metrics["time_total_s"], 1),
                "checkpoints": len(checkpoints),
                "last_checkpoint_bytes": sum(
                    p.stat().st_size for p in checkpoints[-1].rglob("*") if p.is_file()
                ),
            }
        )
    env_steps = sum(t["env_steps"] for t in trials)
    return {
        "wall_s": round(wall, 3),
        "env_steps": env_steps,
        "env_steps_per_s": round(env_steps / wall, 1),
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "trials": trials,
    }


def mount(path: Path) -> dict[str, str]:
    """The mount that holds ``path`` (Linux: /proc/mounts' longest mount point above it): its
    source and file system type, e.g. rclone's ``fuse.rclone``."""
    found = {"mount_point": "/", "source": "", "type": "unknown"}
    with contextlib.suppress(OSError), open("/proc/mounts") as f:
        for line in f:
            source, point, kind = line.split()[:3]
            point = point.replace("\\040", " ")
            if path.is_relative_to(point) and len(point) >= len(found["mount_point"]):
                found = {"mount_point": point, "source": source, "type": kind}
    return found


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "env_steps_per_s": round(statistics.median(r["env_steps_per_s"] for r in runs), 1),
        "wall_s": round(statistics.median(r["wall_s"] for r in runs), 3),
        "trial_env_steps_per_s": round(
            statistics.median(t["env_steps_per_s"] for r in runs for t in r["trials"]), 1
        ),
        "runs": runs,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=None, help=f"default: {SHARED_DEFAULT}/<run>")
    p.add_argument("--local", type=Path, default=None, help="default: a folder in $TMPDIR")
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--smoke", action="store_true", help="one iteration, one one-trial sweep each, untimed"
    )
    p.add_argument("--out", type=Path, help="also write the JSON here")
    args = p.parse_args()
    if args.repeats < 1 or args.iterations < 1:
        p.error("--repeats and --iterations must be at least 1")
    run = f"cluster-storage-sweep-{os.getpid()}-{int(time.time())}"
    shared_parent = args.shared or Path(SHARED_DEFAULT)
    if not shared_parent.parent.is_dir():
        p.error(f"{shared_parent.parent} does not exist: give --shared DIR (no cluster storage?)")
    roots = {
        "local": (args.local or Path(tempfile.gettempdir())) / run,
        "shared": shared_parent / run,
    }
    iterations = 1 if args.smoke else args.iterations
    repeats = 1 if args.smoke else args.repeats
    settings = SMOKE_SWEEP if args.smoke else SWEEP

    import ray

    # A job's Ray (RAY_ADDRESS), else one of its own: not one another process left running.
    ray.init(
        address=None if os.environ.get("RAY_ADDRESS") else "local",
        logging_level="WARNING",
        include_dashboard=False,
    )
    result: dict[str, Any] = {
        "benchmark": "cluster_storage_sweep",
        "smoke": args.smoke,
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "ray_cpus": ray.cluster_resources().get("CPU"),
        "folders": {k: str(v) for k, v in roots.items()},
        "mounts": {k: mount(v.resolve().parent) for k, v in roots.items()},
        "sweep": {
            **settings,
            "trials": len(settings["lr"]),
            "seed": SEED,
            "iterations": iterations,
        },
        "repeats": repeats,
        "load_before": os.getloadavg()[0],
    }
    runs: dict[str, list[dict[str, Any]]] = {"local": [], "shared": []}
    try:
        if not args.smoke:
            # The first sweep of a Ray starts slower (its workers' first imports): untimed.
            with contextlib.redirect_stdout(sys.stderr):
                result["warmup_wall_s"] = sweep(roots["local"], "warmup", 1)["wall_s"]
            shutil.rmtree(roots["local"], ignore_errors=True)
        for i in range(repeats):
            for where, root in roots.items():
                # Tune reports on stdout; the JSON is the only thing printed there.
                with contextlib.redirect_stdout(sys.stderr):
                    runs[where].append(sweep(root, f"sweep-{where}-{i}", iterations, settings))
                shutil.rmtree(root, ignore_errors=True)
    finally:
        ray.shutdown()
        for root in roots.values():
            shutil.rmtree(root, ignore_errors=True)
    result["load_after"] = os.getloadavg()[0]
    result["local"] = summary(runs["local"])
    result["shared"] = summary(runs["shared"])
    ratio = result["shared"]["env_steps_per_s"] / result["local"]["env_steps_per_s"]
    result["shared_over_local"] = round(ratio, 4)
    result["shared_slower_pct"] = round((1 - ratio) * 100, 2)
    result["goal"] = f"shared_over_local >= {GOAL} (at most {round((1 - GOAL) * 100)} % slower)"
    result["goal_met"] = ratio >= GOAL
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
