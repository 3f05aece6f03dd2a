"""Env steps per second of the examples, through the driver: cabs with 1 and 2 env runners on
local Ray, and one fixed workload (CartPole PPO, 2 env runners) on local Ray and, if given, on a
cluster (the rehearsal cluster: head + 2 workers).

    python benchmarks/throughput.py
    python benchmarks/throughput.py --cluster-args --head azureuser@10.215.0.10 -i KEY
    python benchmarks/throughput.py --smoke    # the smallest runs: that it works, not how fast

Steps/s come from each run's own progress.csv: env steps over training time between the end of
the first iteration and the end of the last, so start-up (Ray, actors, the first weights) is
left out and every setting is measured the same way; ``outside_training_s`` is the rest of the
submit (upload, job start, imports, env runner actors, checkpoint), and the whole-submit ratio
says what a short job sees. The median iteration's sampling and learner-update times (RLlib's
timers) say where training time goes. Prints one JSON object.
Timings are only as quiet as the machine: on a shared 2-core machine, run it alone.

``--smoke`` runs every step with the smallest settings, to show that it works (the JSON says
``"smoke": true``; its figures measure nothing): cabs with 0 env runners only, 2,000 env steps
(2 iterations, the second learning), CartPole with the example's smallest iterations
(:data:`SMOKE_FLAGS`: 200 env steps, sampled in the job's own process), 2 of them: the fewest
that give a rate (iteration 1's end to the last one's).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SMOKE_FLAGS = {
    "cartpole": ["--train-batch-size", "200", "--num-env-runners", "0",
                 "--envs-per-env-runner", "1"],
    "cabs": ["--learning-starts", "200", "--train-batch-size", "32", "--eval-episodes", "1"],
    "mobile": ["--train-batch-size", "300", "--num-env-runners", "0", "--eval-episodes", "1"],
    "pixels": ["--train-batch-size", "200", "--num-env-runners", "0",
               "--envs-per-env-runner", "1"],
    "pong": ["--train-batch-size", "100", "--num-env-runners", "0", "--envs-per-env-runner", "1",
             "--min-iteration-seconds", "0"],
}  # fmt: skip
"""Each example's smallest run that still does all it does (samples, learns, evaluates),
for the benchmarks' ``--smoke``: the fewest env steps per iteration, sampled in the job's own
process (for pong's APPO, no env runner actor and no state server for one), one evaluation
episode. The smoke run's stop conditions are its benchmark's."""


def run(
    example: str, args: list[str], driver_args: list[str], home: Path, results: Path, sid: str
) -> dict:
    """Submit one run and measure it from its progress.csv."""
    load_before = os.getloadavg()[0]
    start = time.monotonic()
    p = subprocess.Popen(
        [
            sys.executable,
            "-u",
            "-m",
            "driver",
            "submit",
            *driver_args,
            "--results",
            str(results),
            "--submission-id",
            sid,
            f"examples/{example}/train.py",
            "--",
            "--stop-reward",
            "none",
            "--checkpoint-every",
            "0",
            *args,
        ],
        cwd=REPO,
        env={**os.environ, "RAYDRIVER_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert p.stdout is not None
    lines: list[tuple[float, str]] = []  # when the driver printed each line
    for line in p.stdout:
        lines.append((time.monotonic() - start, line.rstrip("\n")))
    p.wait()
    wall = time.monotonic() - start
    load_after = os.getloadavg()[0]
    output = "\n".join(text for _, text in lines)
    if p.returncode != 0:
        return {"exit_code": p.returncode, "error": output.strip()[-400:]}

    def seen(prefix: str) -> float:
        return next(t for t, text in lines if text.startswith(prefix))

    result = json.loads(
        next(text for _, text in lines if text.startswith("RESULT "))[len("RESULT ") :]
    )
    progress = results / sid / "progress.csv"
    if not progress.is_file():  # a cluster run: bring its results back first
        subprocess.run(
            [
                sys.executable,
                "-m",
                "driver",
                "download",
                *driver_args,
                "--results",
                str(results),
                sid,
            ],
            cwd=REPO,
            env={**os.environ, "RAYDRIVER_HOME": str(home)},
            capture_output=True,
            check=True,
        )
    with progress.open() as f:
        rows = list(csv.DictReader(f))
    if len(rows) < 2:
        return {"exit_code": p.returncode, "error": f"{len(rows)} iteration: a rate needs 2"}
    first, last = rows[0], rows[-1]
    submitted = seen("Submitted job")
    first_iteration = seen("iter ")
    first_row_s = float(first["time_total_s"])
    result_at = seen("RESULT ")
    steps = int(last["env_steps"]) - int(first["env_steps"])
    seconds = float(last["time_total_s"]) - float(first["time_total_s"])

    def median(column: str) -> float | None:
        values = [float(r[column]) for r in rows[1:] if r.get(column)]
        return round(statistics.median(values), 3) if values else None

    return {
        "env_steps_per_s": round(steps / seconds, 1),
        "measured_env_steps": steps,
        "measured_s": round(seconds, 2),
        "iterations": len(rows),
        "median_iteration_s": median("iteration_time_s"),
        "median_sample_s": median("sample_s"),
        "median_learn_s": median("learn_s"),
        "node": result["node"],
        "submit_wall_s": round(wall, 1),
        # Upload, job start, imports, env runner actors, checkpoint: the job's fixed cost.
        "outside_training_s": round(wall - float(last["time_total_s"]), 1),
        # Where that fixed cost goes, from when the driver printed its lines (the job's own
        # lines arrive through the log stream, which lags by up to a second):
        # 1-minute load averages around the run: far above the run's own load means another
        # process shared the cores and the figures above are not this setting's.
        "load_1min_before_after": [round(load_before, 2), round(load_after, 2)],
        "fixed_cost_s": {
            # packing and uploading the working folder and the harness, submitting
            "upload_and_submit": round(submitted, 1),
            # runtime env, the job's imports, the algorithm, env runner actors on their nodes
            "job_start_to_training": round(first_iteration - submitted - first_row_s, 1),
            # the last iteration's line to the job's end, bringing the results back included
            "after_training": round(wall - result_at, 1),
        },
    }


def stop_local_ray(home: Path) -> None:
    """Stop the local Ray head the runs under this driver home started."""
    subprocess.run(
        [sys.executable, "-m", "driver", "local", "stop"],
        cwd=REPO,
        env={**os.environ, "RAYDRIVER_HOME": str(home)},
        capture_output=True,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cabs-steps", type=int, default=12_000, help="cabs env steps per run")
    ap.add_argument("--cartpole-iterations", type=int, default=8, help="at least 2 (default: 8)")
    ap.add_argument("--skip-cabs", action="store_true", help="only the CartPole comparison")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="check that it runs: the smallest runs (cabs with 0 env runners, 2,000 steps; "
        "CartPole's smallest iterations in the job's process, 2 of them); not a measurement",
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
        help="`python -m driver submit` options naming the cluster to compare with local Ray",
    )
    args = ap.parse_args()
    if args.cartpole_iterations < 2:
        ap.error("--cartpole-iterations: at least 2 (a rate is measured from iteration 1's end)")
    runners: tuple[int, ...] = (0, 1, 2)
    cartpole_runners, cartpole_flags = 2, []
    if args.smoke:
        args.cabs_steps, args.cartpole_iterations = 2_000, 2
        runners, cartpole_runners, cartpole_flags = (0,), 0, SMOKE_FLAGS["cartpole"]
    out: dict = {
        "benchmark": "throughput",
        "smoke": args.smoke,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "method": "env steps / training seconds, iteration 1 end to last iteration end",
    }
    with tempfile.TemporaryDirectory(prefix="throughput-") as tmp:
        home, results = args.driver_home or Path(tmp) / "home", Path(tmp) / "results"
        # A Ray head keeps its jobs: submission ids of this run's own.
        stamp = time.strftime("%Y%m%d-%H%M%S")
        # Learning from the second iteration on: every measured iteration samples and learns.
        cabs = ["--max-env-steps", str(args.cabs_steps), "--eval-episodes", "0"]
        cabs += ["--learning-starts", "1000"]
        # One 256-transition update per 32 sampled env steps in every case (the same learning
        # work per env step): N runners sample 32/N steps each per call.
        out["cabs_dqn_local"] = (
            {}
            if args.skip_cabs
            else {
                f"{n}_env_runners": run(
                    "cabs",
                    [
                        *cabs,
                        "--num-env-runners",
                        str(n),
                        "--rollout-fragment-length",
                        str(32 // max(n, 1)),
                    ],
                    [],
                    home,
                    results,
                    f"cabs-{n}-{stamp}",
                )
                for n in runners
            }
        )
        cartpole = ["--max-iterations", str(args.cartpole_iterations), *cartpole_flags]
        cartpole += ["--num-env-runners", str(cartpole_runners)]
        local = run("cartpole", cartpole, [], home, results, f"cartpole-local-{stamp}")
        key = f"cartpole_ppo_{cartpole_runners}_env_runners"
        out[key] = {"local": local}
        if args.driver_home is None:
            stop_local_ray(home)
        if args.cluster_args:
            sid = f"cartpole-cl-{stamp}"
            remote = run("cartpole", cartpole, args.cluster_args, home, results, sid)
            out[key]["cluster"] = remote
            if "env_steps_per_s" in remote and "env_steps_per_s" in local:
                ratio = remote["env_steps_per_s"] / local["env_steps_per_s"]
                out[key]["cluster_over_local"] = round(ratio, 3)
                whole = local["submit_wall_s"] / remote["submit_wall_s"]
                out[key]["cluster_over_local_whole_submit"] = round(whole, 3)
    print(json.dumps(out, indent=2))
    runs = [*out["cabs_dqn_local"].values(), *out[key].values()]
    return 1 if any("error" in r for r in runs if isinstance(r, dict)) else 0


if __name__ == "__main__":
    sys.exit(main())
