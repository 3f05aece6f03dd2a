"""Seconds Ray's autoscaler takes to follow demand, on a rehearsal cluster in scaling mode ray
(root, Linux): the head alone, Ray's autoscaler on it driving the fake scale set whose new
instances boot as worker containers (tests/e2e/autoscale_cluster.py).

One job asks for a CPU the cluster does not have (the head offers none), on a cluster whose
workers boot from the node image (baked) and on one whose workers install at boot (cold,
``--no-image``), each booted and removed in turn. Printed as JSON, per method:

  demand_to_running_s   from the job's task being submitted (pending demand) to that task
                        running on the worker the autoscaler added: the autoscaler's reaction,
                        the scale set's capacity raise, the worker's boot and join;
  idle_to_deleted_s     from the task's end (the worker idle) to its instance deleted and its
                        container gone: idle_timeout_minutes, the autoscaler's rounds, the
                        drain, the Terminate notice the worker acknowledges.

    sudo .venv/bin/python benchmarks/autoscale.py            # boots its own clusters, prints JSON
    sudo .venv/bin/python benchmarks/autoscale.py --method baked
    sudo .venv/bin/python benchmarks/autoscale.py --reuse    # a cluster already up (kept)
    sudo .venv/bin/python benchmarks/autoscale.py --smoke --reuse   # that it works: 1 cycle

``--smoke`` checks that it works, not how fast (the JSON says ``"smoke": true``): one cycle,
on one cluster (the first method's, baked unless ``--method`` says otherwise; with ``--reuse``
the running one).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))


METHODS = ("baked", "cold")
"""baked: the workers boot from the node image (``rehearse up``'s default); cold: they install
at boot (``--no-image``)."""


def measure(ac: Any, runs: int) -> list[dict[str, float]]:
    """``runs`` scale-out/scale-in cycles on the cluster that is up."""
    out = []
    cluster = ac.Cluster.load()
    with tempfile.TemporaryDirectory() as tmp:
        job = ac.write_job(Path(tmp) / "demand", ac.DEMAND_JOB)
        env = {**os.environ, "RAYDRIVER_HOME": str(Path(tmp) / "home")}
        for i in range(runs):
            r = subprocess.run(
                [sys.executable, "-m", "driver", "submit", *cluster.cluster_args,
                 "--submission-id", f"bench-{int(time.time())}-{i}", str(job)],
                cwd=REPO, env=env, capture_output=True, text=True, timeout=3600,
            )  # fmt: skip
            if r.returncode != 0:
                raise RuntimeError(f"the job failed: {r.stderr[-2000:]}")
            line = next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))
            result = json.loads(line[len("RESULT ") :])
            gone = cluster.wait(
                "the idle worker is deleted",
                lambda: cluster.instances() == [] and cluster.containers() == {},
                ac.IDLE_TIMEOUT_MINUTES * 60 + 600,
            )
            out.append(
                {
                    "demand_to_running_s": round(result["started"] - result["submitted"], 1),
                    "idle_to_deleted_s": round(gone - result["started"], 1),
                }
            )
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--reuse", action="store_true", help="use a cluster already up, keep it")
    p.add_argument("--runs", type=int, default=1, help="scale-out/scale-in cycles (default 1)")
    p.add_argument(
        "--method", choices=METHODS, action="append", help="baked or cold (default: both)"
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help="check that it runs: one cycle on one cluster (the first method's); not a measurement",
    )
    args = p.parse_args()
    if args.smoke:
        args.runs = 1
    import autoscale_cluster as ac

    if os.geteuid() != 0:
        print("error: the rehearsal cluster needs root", file=sys.stderr)
        return 2
    report: dict[str, Any] = {
        "benchmark": "autoscale",
        "smoke": args.smoke,
        "cluster": "rehearsal, scaling mode ray, head + 0..2 workers",
        "cpus": os.cpu_count(),
        "idle_timeout_s": ac.IDLE_TIMEOUT_MINUTES * 60,
        "targets": {"baked_demand_to_running_s": 30},
    }
    if args.reuse:
        state = ac.Rehearsal(ac.NAME).load()
        methods = ["baked" if state is not None and state.image else "cold"]
    else:
        methods = [m for m in METHODS if m in (args.method or METHODS)]
        methods = methods[:1] if args.smoke else methods
    for method in methods:
        if not args.reuse:
            up = ac.up(image=method == "baked")
            if up.returncode != 0:
                print(f"error: rehearse up failed: {up.stderr[-2000:]}", file=sys.stderr)
                return 1
        load = os.getloadavg()[0]
        try:
            runs = measure(ac, args.runs)
        except RuntimeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        finally:
            if not args.reuse:
                ac.down()
        report[method] = {"load_1min_at_start": round(load, 2), "runs": runs}
        print(json.dumps({"method": method, **report[method]}), file=sys.stderr, flush=True)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
