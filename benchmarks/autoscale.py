"""Seconds Ray's autoscaler takes to follow demand, on a rehearsal cluster in scaling mode ray
(root, Linux): the head alone, Ray's autoscaler on it driving the fake scale set whose new
instances boot as worker containers (tests/e2e/autoscale_cluster.py).

One job asks for a CPU the cluster does not have (the head offers none). Printed as JSON:

  demand_to_running_s   from the job's task being submitted (pending demand) to that task
                        running on the worker the autoscaler added: the autoscaler's reaction,
                        the scale set's capacity raise, the worker's cold boot and join;
  idle_to_deleted_s     from the task's end (the worker idle) to its instance deleted and its
                        container gone: idle_timeout_minutes, the autoscaler's rounds, the
                        drain, the Terminate notice the worker acknowledges.

    sudo .venv/bin/python benchmarks/autoscale.py            # boots its own cluster, prints JSON
    sudo .venv/bin/python benchmarks/autoscale.py --reuse    # a cluster already up (kept)
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--reuse", action="store_true", help="use a cluster already up, keep it")
    p.add_argument("--runs", type=int, default=1, help="scale-out/scale-in cycles (default 1)")
    args = p.parse_args()
    import autoscale_cluster as ac

    if os.geteuid() != 0:
        print("error: the rehearsal cluster needs root", file=sys.stderr)
        return 2
    if not args.reuse:
        up = ac.up()
        if up.returncode != 0:
            print(f"error: rehearse up failed: {up.stderr[-2000:]}", file=sys.stderr)
            return 1
    runs = []
    try:
        cluster = ac.Cluster.load()
        with tempfile.TemporaryDirectory() as tmp:
            job = ac.write_job(Path(tmp) / "demand", ac.DEMAND_JOB)
            env = {**os.environ, "RAYDRIVER_HOME": str(Path(tmp) / "home")}
            for i in range(args.runs):
                r = subprocess.run(
                    [sys.executable, "-m", "driver", "submit", *cluster.cluster_args,
                     "--submission-id", f"bench-{int(time.time())}-{i}", str(job)],
                    cwd=REPO, env=env, capture_output=True, text=True, timeout=3600,
                )  # fmt: skip
                if r.returncode != 0:
                    print(f"error: the job failed: {r.stderr[-2000:]}", file=sys.stderr)
                    return 1
                line = next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))
                out = json.loads(line[len("RESULT ") :])
                gone = cluster.wait(
                    "the idle worker is deleted",
                    lambda: cluster.instances() == [] and cluster.containers() == {},
                    ac.IDLE_TIMEOUT_MINUTES * 60 + 600,
                )
                runs.append(
                    {
                        "demand_to_running_s": round(out["started"] - out["submitted"], 1),
                        "idle_to_deleted_s": round(gone - out["started"], 1),
                    }
                )
    finally:
        if not args.reuse:
            ac.down()
    print(
        json.dumps(
            {
                "cluster": "rehearsal, scaling mode ray, head + 0..2 workers, cold worker boots",
                "cpus": os.cpu_count(),
                "idle_timeout_s": ac.IDLE_TIMEOUT_MINUTES * 60,
                "runs": runs,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
