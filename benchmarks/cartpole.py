"""Env steps and wall time for PPO on CartPole to reach its target, through the driver.

Runs ``python -m driver submit examples/cartpole/train.py -- --seed S`` for each seed (local Ray
unless --head/--terraform-dir/... are given after ``--driver-args``) and prints one JSON object:

    python benchmarks/cartpole.py --seeds 0 1 2
    python benchmarks/cartpole.py --seeds 0 --driver-args --head azureuser@10.213.0.10 -i KEY
    python benchmarks/cartpole.py --smoke    # one seed, a target one tiny iteration reaches

"env_steps" and "train_wall_s" come from the example's own RESULT line; "submit_wall_s" is the
whole submit as a user sees it (upload, scheduling, Ray start-up in the job, training, checkpoint).
``--smoke`` checks that it runs, not how fast: seed 0, one env in the job's own process, 200-step
iterations, a target below a random policy's return (its first iteration reaches it; at most
2), and the JSON says ``"smoke": true``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from throughput import SMOKE_FLAGS  # noqa: E402  (each example's smallest run)

SMOKE_TARGET = 10.0
"""Below CartPole's return under a random policy (~20): the first iteration reaches it."""
SMOKE_ARGS = [*SMOKE_FLAGS["cartpole"], "--max-iterations", "2"]
"""The example's smallest iterations (200 env steps, one env in the job's own process), 2 at
most."""


def run_seed(seed: int, target: float, driver_args: list[str], flags: list[str]) -> dict:
    start = time.monotonic()
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "driver",
            "submit",
            *driver_args,
            "examples/cartpole/train.py",
            "--",
            "--seed",
            str(seed),
            "--target",
            str(target),
            *flags,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - start
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        return {"seed": seed, "exit_code": p.returncode, "error": p.stderr.strip()[-300:]}
    result = json.loads(line[len("RESULT ") :])
    return {
        "seed": seed,
        "exit_code": p.returncode,
        "reached_target": result["reached_target"],
        "episode_return_mean": result["episode_return_mean"],
        "env_steps": result["env_steps"],
        "train_wall_s": result["wall_time_s"],
        "submit_wall_s": round(wall, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--target", type=float, default=450.0)
    ap.add_argument(
        "--driver-args",
        nargs=argparse.REMAINDER,
        default=[],
        help="options for `python -m driver submit` (cluster selection)",
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help=f"check that it runs: seed 0, target {SMOKE_TARGET:g}, the example's smallest "
        "iterations (instead of --seeds and --target); not a measurement",
    )
    args = ap.parse_args()
    if args.smoke:
        args.seeds, args.target = [0], SMOKE_TARGET
    flags = SMOKE_ARGS if args.smoke else []
    runs = [run_seed(s, args.target, args.driver_args, flags) for s in args.seeds]
    ok = [r for r in runs if r.get("reached_target")]
    summary = {
        "benchmark": "cartpole_ppo_to_target",
        "smoke": args.smoke,
        "target": args.target,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "runs": runs,
        "reached": f"{len(ok)}/{len(runs)}",
    }
    if ok:
        summary["median_env_steps"] = statistics.median(r["env_steps"] for r in ok)
        summary["max_env_steps"] = max(r["env_steps"] for r in ok)
        summary["median_train_wall_s"] = statistics.median(r["train_wall_s"] for r in ok)
        summary["median_submit_wall_s"] = statistics.median(r["submit_wall_s"] for r in ok)
    print(json.dumps(summary, indent=2))
    return 0 if len(ok) == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
