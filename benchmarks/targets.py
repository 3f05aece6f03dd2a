"""The examples' learning targets over seeds, through the driver: one JSON object.

    python benchmarks/targets.py cabs --seeds 0 1 2
    python benchmarks/targets.py mobile --seeds 0 1 2
    python benchmarks/targets.py cabs --seeds 0 -- --max-env-steps 50000   # example flags
    python benchmarks/targets.py mobile --smoke   # one tiny iteration: it works, untimed
    python benchmarks/targets.py cabs --driver-args --head azureuser@10.213.0.10 -i KEY -- --lr 1e-3

Each seed is one ``python -m driver submit examples/EXAMPLE/train.py -- --seed S`` with the
example's defaults (their step budgets are the targets' budgets) on local Ray unless
``--driver-args`` name a cluster. From each RESULT line: cabs, the greedy policy's mean return
against the random policy's on the same evaluation months; mobile, the mean training return at
the end against the first iteration's, as a fraction of the first, and greedy against random.
``--smoke`` shows that it works, not what the examples reach (the JSON says ``"smoke": true``):
seed 0, one iteration at the example's smallest (``throughput.SMOKE_FLAGS``), one evaluation
episode; example flags after ``--`` still come last.
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


def run_seed(example: str, seed: int, extra: list[str], driver_args: list[str]) -> dict:
    start = time.monotonic()
    command = [sys.executable, "-m", "driver", "submit", *driver_args]
    p = subprocess.run(
        [*command, f"examples/{example}/train.py", "--", "--seed", str(seed), *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        return {"seed": seed, "exit_code": p.returncode, "error": p.stderr.strip()[-300:]}
    result = json.loads(line[len("RESULT ") :])
    result["submit_wall_s"] = round(time.monotonic() - start, 1)
    first, last = result.get("first_episode_return_mean"), result.get("episode_return_mean")
    if first is not None and last is not None and first != 0:
        result["improvement_fraction"] = round((last - first) / abs(first), 3)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("example", choices=("cabs", "mobile", "cartpole"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument(
        "--driver-args",
        nargs=argparse.REMAINDER,
        default=[],
        help="options for `python -m driver submit` (cluster selection, --results); last, "
        "before any example flags",
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="check that it runs: seed 0, one iteration at the example's smallest; not a "
        "measurement",
    )
    own, extra = sys.argv[1:], []
    if "--" in own:
        i = own.index("--")
        own, extra = own[:i], own[i + 1 :]
    args = ap.parse_args(own)
    if args.smoke:
        args.seeds = [0]
        extra = [*SMOKE_FLAGS[args.example], "--max-iterations", "1", *extra]
    runs = [run_seed(args.example, s, extra, args.driver_args) for s in args.seeds]
    keys = (
        "env_steps",
        "wall_time_s",
        "episode_return_mean",
        "first_episode_return_mean",
        "improvement_fraction",
        "greedy_return_mean",
        "random_return_mean",
        "greedy_minus_random",
    )
    summary: dict = {
        "benchmark": f"{args.example}_targets",
        "smoke": args.smoke,
        "example_flags": extra,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "runs": [{"seed": r["seed"], **{k: r[k] for k in keys if k in r}} for r in runs],
    }
    for key in ("greedy_minus_random", "improvement_fraction", "greedy_return_mean"):
        values = [r[key] for r in runs if r.get(key) is not None]
        if len(values) == len(runs):
            summary[f"min_{key}"] = min(values)
            summary[f"mean_{key}"] = round(statistics.mean(values), 3)
    print(json.dumps(summary, indent=2))
    return 0 if all("error" not in r for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
