"""benchmarks/driver_overhead.py in its smoke mode (one repetition per side, no warm-ups), so
that the benchmark cannot break unnoticed (issue 35). It starts a head of its own (headhost.py,
as the session's ``head_host``), submits one job through the driver's SSH tunnel and one with
``ray job submit`` on the head, and prints its JSON; its figures measure nothing."""

from __future__ import annotations

import subprocess

from driver.procs import pid_alive
from headhost import NS_PREFIX, RAY_START_TIMEOUT_S
from support import run_benchmark

JOB_S = 300
"""The benchmark's bound on each of its client commands (``_timed``)."""


def _orphaned_heads() -> list[str]:
    """Heads' network namespaces whose owner process is gone (``raydrv-<owner pid>-<n>``)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names = [ln.split()[0] for ln in out.splitlines() if ln.startswith(NS_PREFIX)]
    return [n for n in names if not pid_alive(int(n[len(NS_PREFIX) :].split("-")[0]))]


def test_the_driver_overhead_benchmark_runs_one_repetition_on_a_head_of_its_own() -> None:
    p, printed = run_benchmark(
        "driver_overhead", "--smoke", timeout=RAY_START_TIMEOUT_S + 6 * JOB_S
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    [report] = printed
    assert report["smoke"] is True and report["reps"] == 1
    for side in ("driver_through_ssh_tunnel", "ray_job_submit_on_head"):
        for key in ("submit_to_running_s", "first_log_line_s", "list_s"):
            figures = report[side][key]
            assert len(figures["runs"]) == 1 and figures["median"] > 0, (side, key, figures)
    assert set(report["ratio_driver_to_on_head"]) == {
        "submit_to_running_s", "first_log_line_s", "list_s",
    }  # fmt: skip
    assert all(r > 0 for r in report["ratio_driver_to_on_head"].values())
    # Its head went with it (the benchmark stops what it started; it reaped older leftovers).
    assert _orphaned_heads() == []
