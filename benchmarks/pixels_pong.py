"""Env steps per second of examples/pixels and examples/pong: each env alone, then training
through the driver on local Ray (or a cluster).

    python benchmarks/pixels_pong.py
    python benchmarks/pixels_pong.py --skip-training          # the envs alone, ~1 min
    python benchmarks/pixels_pong.py --cluster-args --head azureuser@10.216.0.10 -i KEY
    python benchmarks/pixels_pong.py --smoke          # the smallest runs: it works, untimed

- ``pixels_env``: ``PixelsEnv`` (simulator process, frames over the local port, float
  conversion) stepped with random actions, and miniworld in this process for comparison (both
  need a display: the env starts a private Xvfb without DISPLAY; the in-process run is skipped
  without DISPLAY);
- ``pong_env``: ``ALE/Pong-v5`` raw, and with RLlib's Atari preprocessing (frame skip 4: one
  step of it is 4 emulator frames);
- training: the examples' defaults (pixels: PPO, 1 env runner x 2 envs; pong: APPO, 2 env
  runners x 2 envs) for a few iterations, steps/s from each run's progress.csv as
  ``throughput.py`` measures them (iteration 1's end to the last one's).

Prints one JSON object. Timings are only as quiet as the machine: run it alone.
``--smoke`` runs every step with the smallest settings, to show that it works (the JSON says
``"smoke": true``; its figures measure nothing): 20 steps of each env, and 2 training
iterations of each example at its smallest (``throughput.SMOKE_FLAGS``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from throughput import SMOKE_FLAGS, run, stop_local_ray  # noqa: E402  (as throughput.py)


def _rate(env: Any, steps: int) -> dict:
    """Random actions from seed 0, a new episode whenever one ends."""
    env.reset(seed=0)
    env.action_space.seed(0)
    start = time.perf_counter()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    seconds = time.perf_counter() - start
    return {"steps_per_s": round(steps / seconds, 1), "steps": steps, "seconds": round(seconds, 2)}


def pixels_env(steps: int) -> dict:
    sys.path.insert(0, str(REPO / "examples" / "pixels"))
    import pixels_env as px

    out: dict = {}
    env = px.PixelsEnv({})
    try:
        out["simulator_process"] = _rate(env, steps)
        out["simulator_process"]["display"] = "private Xvfb" if env._xvfb else env.display
    finally:
        env.close()
    if os.environ.get("DISPLAY"):
        import gymnasium as gym
        import miniworld  # noqa: F401

        world = gym.make(px.DEFAULT_TASK, obs_width=84, obs_height=84)
        out["in_process"] = _rate(world, steps)
        world.close()
    return out


def pong_env(steps: int) -> dict:
    import ale_py
    import gymnasium as gym
    from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack

    gym.register_envs(ale_py)
    out = {}
    for name, wrap in (("raw_frames", False), ("preprocessed_steps", True)):
        env = gym.make(
            "ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0, full_action_space=False
        )
        if wrap:
            env = wrap_atari_for_new_api_stack(env, dim=64, framestack=None)
        out[name] = _rate(env, steps)
        env.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env-steps", type=int, default=2000, help="steps of each env alone")
    ap.add_argument("--iterations", type=int, default=6, help="training iterations per run")
    ap.add_argument("--skip-training", action="store_true", help="measure the envs alone")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="check that it runs: 20 steps of each env, 2 iterations of each example at its "
        "smallest (instead of --env-steps and --iterations); not a measurement",
    )
    ap.add_argument(
        "--driver-home",
        type=Path,
        help="submit to the local Ray of this driver home (RAYDRIVER_HOME), left running "
        "(default: a fresh one in a temporary folder, stopped at the end)",
    )
    ap.add_argument(
        "--cluster-args",
        nargs=argparse.REMAINDER,
        default=[],
        help="`python -m driver submit` options naming a cluster (default: local Ray)",
    )
    args = ap.parse_args()
    if args.iterations < 2:
        ap.error("--iterations: at least 2 (a rate is measured from iteration 1's end)")
    if args.smoke:
        args.env_steps, args.iterations = 20, 2
    os.environ.setdefault("LP_NUM_THREADS", "1")
    out: dict = {
        "benchmark": "pixels_pong",
        "smoke": args.smoke,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "pixels_env": pixels_env(args.env_steps),
        "pong_env": pong_env(args.env_steps),
    }
    if not args.skip_training:
        with tempfile.TemporaryDirectory(prefix="pixels-pong-") as tmp:
            home, results = args.driver_home or Path(tmp) / "home", Path(tmp) / "results"
            stamp = time.strftime("%Y%m%d-%H%M%S")
            iterations = ["--max-iterations", str(args.iterations)]
            where = "cluster" if args.cluster_args else "local"
            smallest = SMOKE_FLAGS if args.smoke else {"pixels": [], "pong": []}
            out[f"pixels_ppo_{where}"] = run(
                "pixels",
                [*iterations, *smallest["pixels"]],
                args.cluster_args,
                home,
                results,
                f"pixels-{stamp}",
            )
            out[f"pong_appo_{where}"] = run(
                "pong",
                [*iterations, "--stop-seconds", "none", "--max-env-steps", "none"]
                + smallest["pong"],
                args.cluster_args,
                home,
                results,
                f"pong-{stamp}",
            )
            if args.driver_home is None:
                stop_local_ray(home)
    print(json.dumps(out, indent=2))
    failed = [k for k, v in out.items() if isinstance(v, dict) and "error" in v]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
