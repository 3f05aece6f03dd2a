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

With ``--refused`` each cycle is followed by one where the fake Compute refuses the CPU pool's
capacity raise (``AllocationFailed``, docs/pools.md): the same job's demand goes to the other
pool (the GPU pool, which the cluster has) once Ray's autoscaler is told, and
``refused_runs`` gives the same two figures for it, with ``pool`` where the task ran: what a
refused first pool costs the demand (Azure's answer, the autoscaler's round that learns it,
the round that places the demand elsewhere).

    sudo .venv/bin/python benchmarks/autoscale.py            # boots its own clusters, prints JSON
    sudo .venv/bin/python benchmarks/autoscale.py --method baked
    sudo .venv/bin/python benchmarks/autoscale.py --reuse    # a cluster already up (kept)
    sudo .venv/bin/python benchmarks/autoscale.py --smoke --reuse   # that it works: 1 cycle
    sudo .venv/bin/python benchmarks/autoscale.py --refused  # also with the CPU pool refused

``--smoke`` checks that it works, not how fast (the JSON says ``"smoke": true``): one cycle,
on one cluster (the first method's, baked unless ``--method`` says otherwise; with ``--reuse``
the running one); with ``--refused`` that cycle is the refused one (``runs`` is empty: a plain
cycle is the same code with nothing refused).
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


def measure(
    ac: Any, runs: int, refused: bool = False, plain: bool = True
) -> dict[str, list[dict[str, Any]]]:
    """``runs`` scale-out/scale-in cycles on the cluster that is up (``runs``), each followed,
    with ``refused``, by one with the CPU pool's capacity refused (``refused_runs``); with
    ``refused`` and without ``plain``, only the refused ones."""
    from nodekit.rehearsal.standins.azure_compute import capacity_fault
    from nodekit.rehearsal.state import DEFAULT_POOL, GPU_POOL

    out: dict[str, list[dict[str, Any]]] = {"runs": [], "refused_runs": []}
    cluster = ac.Cluster.load()
    with tempfile.TemporaryDirectory() as tmp:
        job = ac.write_job(Path(tmp) / "demand", ac.DEMAND_JOB)
        env = {**os.environ, "RAYDRIVER_HOME": str(Path(tmp) / "home")}

        def cycle(tag: str) -> dict[str, Any]:
            r = subprocess.run(
                [sys.executable, "-m", "driver", "submit", *cluster.cluster_args,
                 "--submission-id", f"bench-{int(time.time())}-{tag}", str(job)],
                cwd=REPO, env=env, capture_output=True, text=True, timeout=3600,
            )  # fmt: skip
            if r.returncode != 0:
                raise RuntimeError(f"the job failed: {r.stderr[-2000:]}")
            line = next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))
            result = json.loads(line[len("RESULT ") :])
            pool = next(
                (p for p in (DEFAULT_POOL, GPU_POOL) if result["ip"] in {
                    i["ip"] for i in cluster.instances(p)
                }),
                None,
            )  # fmt: skip
            gone = cluster.wait(
                "the idle worker is deleted",
                lambda: cluster.instances() == [] and cluster.containers() == {}
                and cluster.instances(GPU_POOL) == [],
                ac.IDLE_TIMEOUT_MINUTES * 60 + 600,
            )  # fmt: skip
            return {
                "demand_to_running_s": round(result["started"] - result["submitted"], 1),
                "idle_to_deleted_s": round(gone - result["started"], 1),
                "pool": pool,
            }

        for i in range(runs):
            if plain or not refused:
                out["runs"].append(cycle(str(i)))
            if not refused:
                continue
            cluster.refuse(DEFAULT_POOL, capacity_fault("AllocationFailed"))
            try:
                out["refused_runs"].append(cycle(f"{i}-refused"))
            finally:
                cluster.refuse(DEFAULT_POOL, None)
    return out if refused else {"runs": out["runs"]}


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
    p.add_argument(
        "--refused",
        action="store_true",
        help="follow each cycle by one with the CPU pool's capacity refused (AllocationFailed)",
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
            runs = measure(ac, args.runs, args.refused, plain=not args.smoke)
        except RuntimeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        finally:
            if not args.reuse:
                ac.down()
        report[method] = {"load_1min_at_start": round(load, 2), **runs}
        print(json.dumps({"method": method, **report[method]}), file=sys.stderr, flush=True)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
