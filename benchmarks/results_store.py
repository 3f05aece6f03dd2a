"""Time per checkpoint and CartPole's training throughput with the results store (Blob storage)
on and off, against Azurite and the fake metadata service on loopback (started here, as the
tests start them: tests/fakes/local_blob.py; Azurite from scripts/setup.d/20-azurite.sh).

    python benchmarks/results_store.py
    python benchmarks/results_store.py --repeats 5 --iterations 31
    python benchmarks/results_store.py --smoke      # the smallest run: it works, untimed

``checkpoint``: PPO on CartPole built in this process (local Ray), its checkpoint saved by the
harness (``save_checkpoint``: the local run folder) and handed to the harness's uploader
(``Uploader.checkpoint``) ``--checkpoints`` times. ``local_save_s`` is the save alone (the time
per checkpoint without a store); ``blocked_s`` is how long ``Uploader.checkpoint`` holds the
training loop (staging hard links, one command to the helper process); ``published_s`` is the
wall time from the hand-off until the helper says the checkpoint's pointer (latest.json) is
written, so a checkpoint with a store takes ``local_save_s + published_s`` until it is safe in
Blob storage, of which the loop waits ``local_save_s + blocked_s``.

``throughput``: ``examples/cartpole/train.py`` run directly on local Ray (``RAY_ADDRESS=local``),
``--iterations`` iterations with a checkpoint every 10, the store off and on in turn
(off, on, off, on, ...: load that comes and goes hits both). Env steps/s come from each run's
progress.csv as in throughput.py (iteration 1's end to the last one's, so the checkpoints at
iterations 10, 20, ... and the uploads behind them fall inside); ``outside_training_s`` is the
rest of the run (Ray's start, the final checkpoint and its upload, Ray's end). ``on_over_off``
is the median on-run's steps/s over the median off-run's (the issue's target: >= 0.95).

On Azure the store is a service elsewhere: it costs a node no CPU. Here Azurite shares the
machine's cores with training, so during the throughput runs it runs at the lowest priority
(``--storage-niceness``, 19; 0 to leave it be) and each run's ``storage_server_cpu_s`` (Azurite's
CPU time) is reported apart. The uploader is the harness's own, niced as on a node
(``blobsync.UPLOADER_NICENESS``). Steps/s are as quiet as the machine; what the store costs
whatever else runs is ``measured_span_cpu``: the CPU seconds per 1,000 env steps of the run and
everything it starts (Ray, the uploader), in a cgroup of its own (root), over the same span
(``cpu_on_over_off``: on a node whose cores training keeps busy, steps/s fall by its inverse).
Prints one JSON object. Timings are only as quiet as the
machine: its load is recorded.

``--smoke`` runs every step with the smallest settings, to show that it works (the JSON says
``"smoke": true``; its figures measure nothing): one checkpoint timed, then one throughput run
with the store on (none with it off: the same run without the store's environment), 2
iterations of 200 env steps with a checkpoint after each, so that it publishes while it trains.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "cartpole" / "train.py"
CHECKPOINT_EVERY = 10


def store_env(blob: Any) -> dict[str, str]:
    """A node's environment naming the results container of ``blob`` (as the tests set it)."""
    from fakes.local_blob import CLIENT_ID
    from harness import blobsync

    env = {k: v for k, v in os.environ.items() if k != "SSL_CERT_DIR"}
    return {
        **env,
        blobsync.URL_ENV: f"{blob.url}/results",
        blobsync.CLIENT_ID_ENV: CLIENT_ID,
        blobsync.IMDS_ENV: blob.imds.url,
        "SSL_CERT_FILE": str(blob.ca),
    }


def no_store_env() -> dict[str, str]:
    from harness import blobsync

    return {
        k: v for k, v in os.environ.items() if k not in (blobsync.URL_ENV, blobsync.CLIENT_ID_ENV)
    }


def group_cpu_s(groups: list[int]) -> float:
    """CPU seconds (user + system) of the live processes in the process groups ``groups``."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) in groups:  # pgrp; utime and stime follow at 11 and 12
            total += int(fields[11]) + int(fields[12])
    return round(total / tick, 2)


class CpuMeter:
    """The CPU time of a process and everything it starts (Ray's daemons and workers, the
    uploader), exited ones included: a cgroup of its own (v2, or v1's cpuacct; root only),
    sampled every 0.2 s so that the CPU of a span of wall time can be read off."""

    def __init__(self, name: str) -> None:
        self.samples: list[tuple[float, float]] = []
        self.why_not = ""
        unified = Path("/sys/fs/cgroup/cgroup.controllers").exists()
        base = Path("/sys/fs/cgroup") if unified else Path("/sys/fs/cgroup/cpuacct")
        self.dir = base / f"results-store-bench-{os.getpid()}-{name}"
        self.usage = (
            (lambda: _cpu_stat_usage(self.dir)) if unified else (lambda: _cpuacct_usage(self.dir))
        )
        try:
            self.dir.mkdir()
        except OSError as e:
            self.why_not = f"no cgroup for the run ({e.strerror}: {self.dir})"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def join_me(self) -> None:
        """In the child, before exec: into the cgroup."""
        if not self.why_not:
            (self.dir / "cgroup.procs").write_text(str(os.getpid()))

    def start(self) -> None:
        if not self.why_not:
            self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            self.samples.append((time.time(), self.usage()))

    def stop(self) -> None:
        if self.why_not:
            return
        self._stop.set()
        self._thread.join()
        self.samples.append((time.time(), self.usage()))
        with contextlib.suppress(OSError):
            self.dir.rmdir()

    def at(self, when: float) -> float:
        """The cgroup's CPU seconds at wall time ``when`` (interpolated between samples)."""
        before = [s for s in self.samples if s[0] <= when] or self.samples[:1]
        after = [s for s in self.samples if s[0] >= when] or self.samples[-1:]
        (t0, u0), (t1, u1) = before[-1], after[0]
        return u0 if t1 == t0 else u0 + (u1 - u0) * (when - t0) / (t1 - t0)


def _cpuacct_usage(folder: Path) -> float:
    return int((folder / "cpuacct.usage").read_text()) / 1e9


def _cpu_stat_usage(folder: Path) -> float:
    for line in (folder / "cpu.stat").read_text().splitlines():
        if line.startswith("usage_usec "):
            return int(line.split()[1]) / 1e6
    return 0.0


def renice_groups(groups: list[int], niceness: int) -> None:
    for group in groups:
        os.setpriority(os.PRIO_PGRP, group, niceness)


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 4)


def checkpoint_times(blob: Any, work: Path, count: int, batch: int) -> dict[str, Any]:
    """``count`` checkpoints of one CartPole PPO algorithm: saved locally, handed to the
    uploader, waited for until published."""
    os.environ.update(store_env(blob))
    import ray

    sys.path.insert(0, str(EXAMPLE.parent))
    import train as cartpole  # examples/cartpole/train.py

    from driver.localray import init_local_ray
    from harness import blobsync, store
    from harness.runs import save_checkpoint

    args = cartpole.parse_args(["--num-env-runners", "0", "--train-batch-size", str(batch)])
    init_local_ray(address="local", logging_level="WARNING", include_dashboard=False)
    try:
        algo = cartpole.build_config(args).debugging(seed=0).build_algo()
        result = algo.train()
        run_dir = work / "checkpoint-run"
        found = blobsync.from_env()
        assert found is not None
        said: list[str] = []
        uploader = store.Uploader(found, run_dir, said.append).start()
        local, blocked, published = [], [], []
        for i in range(count):
            state = {
                "iteration": i + 1,
                "env_steps": int(result["num_env_steps_sampled_lifetime"]),
                "time_total_s": 0.0,
            }
            t0 = time.monotonic()
            checkpoint = save_checkpoint(algo, run_dir, state)
            t1 = time.monotonic()
            uploader.checkpoint(checkpoint, state)
            t2 = time.monotonic()
            while len(uploader.published) <= i and uploader.alive():
                time.sleep(0.002)
            t3 = time.monotonic()
            if len(uploader.published) <= i:
                raise RuntimeError(f"checkpoint {i + 1} was not published: {said}")
            local.append(t1 - t0)
            blocked.append(t2 - t1)
            published.append(t3 - t2)
        files = [p for p in checkpoint.rglob("*") if p.is_file()]
        uploader.finish(120)
        algo.stop()
    finally:
        ray.shutdown()
    return {
        "checkpoints": count,
        "checkpoint_files": len(files),
        "checkpoint_bytes": sum(p.stat().st_size for p in files),
        "median_local_save_s": _median(local),
        "median_blocked_s": _median(blocked),
        "max_blocked_s": round(max(blocked), 4),
        "median_published_s": _median(published),
        "median_local_plus_published_s": _median(
            [a + b for a, b in zip(local, published, strict=True)]
        ),
        "local_save_s": [round(x, 4) for x in local],
        "blocked_s": [round(x, 4) for x in blocked],
        "published_s": [round(x, 4) for x in published],
    }


def training_run(
    env: dict[str, str],
    work: Path,
    name: str,
    iterations: int,
    batch: int,
    server: list[int],
    checkpoint_every: int = CHECKPOINT_EVERY,
) -> dict[str, Any]:
    """One CartPole run of ``iterations`` iterations, a checkpoint every ``checkpoint_every``,
    measured from its progress.csv. The run starts a Ray of its own; a run whose Ray's node
    missed its window to register (on a loaded machine) is run again, as ``driver local start``
    tries ``ray start`` again (driver.localray), and only the run that started is measured."""
    from driver.localray import STARTS

    run_dir = work / name
    for attempt in range(1, STARTS + 1):
        shutil.rmtree(run_dir, ignore_errors=True)
        measured = _training_run(env, work, run_dir, iterations, batch, server, checkpoint_every)
        if attempt == STARTS or not measured.get("timed_out"):
            return {**measured, "ray_starts": attempt}
    raise AssertionError("unreachable")


def _training_run(
    env: dict[str, str],
    work: Path,
    run_dir: Path,
    iterations: int,
    batch: int,
    server: list[int],
    checkpoint_every: int,
) -> dict[str, Any]:
    from driver.localray import node_timed_out

    load_before = os.getloadavg()[0]
    server_cpu = group_cpu_s(server)
    meter = CpuMeter(run_dir.name)
    meter.start()
    start = time.monotonic()
    p = subprocess.run(
        [
            sys.executable,
            str(EXAMPLE),
            "--stop-reward", "none",
            "--max-iterations", str(iterations),
            "--checkpoint-every", str(checkpoint_every),
            "--train-batch-size", str(batch),
            "--max-env-steps", str(10 * iterations * batch),
            "--results-dir", str(run_dir),
        ],
        env={
            **env,
            "RAY_ADDRESS": "local",  # a Ray of its own, not one another process left running
            "PYTHONPATH": os.pathsep.join([str(REPO / "examples"), str(EXAMPLE.parent)]),
        },
        cwd=work,
        capture_output=True,
        text=True,
        preexec_fn=meter.join_me,
    )  # fmt: skip
    wall = time.monotonic() - start
    meter.stop()
    server_cpu = round(group_cpu_s(server) - server_cpu, 2)
    if p.returncode != 0:
        said = (p.stdout + p.stderr).strip()
        return {"exit_code": p.returncode, "error": said[-600:], "timed_out": node_timed_out(said)}
    with (run_dir / "progress.csv").open() as f:
        rows = list(csv.DictReader(f))
    first, last = rows[0], rows[-1]
    steps = int(last["env_steps"]) - int(first["env_steps"])
    seconds = float(last["time_total_s"]) - float(first["time_total_s"])
    cpu: dict[str, Any] = {"unavailable": meter.why_not}
    if not meter.why_not:
        # The same span as the steps/s: iteration 1's end to the last one's.
        used = meter.at(float(last["timestamp"])) - meter.at(float(first["timestamp"]))
        cpu = {"cpu_s": round(used, 2), "cpu_s_per_1000_env_steps": round(1000 * used / steps, 3)}
    result = json.loads(
        next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT "))[len("RESULT ") :]
    )
    store_lines = [ln for ln in p.stdout.splitlines() if ln.startswith("results store: ")]
    return {
        "env_steps_per_s": round(steps / seconds, 1),
        "measured_env_steps": steps,
        "measured_s": round(seconds, 2),
        "iterations": len(rows),
        "median_iteration_s": _median([float(r["iteration_time_s"]) for r in rows[1:]]),
        # Ray's start, the algorithm's build, the final checkpoint and upload, Ray's end.
        "outside_training_s": round(wall - float(result["wall_time_s"]), 1),
        "run_wall_s": round(wall, 1),
        "storage_server_cpu_s": server_cpu,
        "measured_span_cpu": cpu,
        "published": sum("published as" in ln for ln in store_lines),
        "store_problems": [
            ln
            for ln in store_lines
            if not any(ok in ln for ok in ("published as", "mirroring", "all uploaded"))
        ][:3],
        "final_upload": next((ln for ln in store_lines if "all uploaded" in ln), None),
        "load_1min_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoints", type=int, default=8, help="checkpoints timed (default: 8)")
    ap.add_argument(
        "--iterations",
        type=int,
        default=21,
        help="iterations per training run (default: 21: checkpoints at 10 and 20 fall inside "
        "the measured span)",
    )
    ap.add_argument(
        "--repeats", type=int, default=3, help="runs with the store off and on each (default: 3)"
    )
    ap.add_argument(
        "--train-batch-size",
        type=int,
        default=4000,
        help="env steps per iteration (default: 4000, the example's own; shorter iterations "
        "make the checkpoints a larger share of the run)",
    )
    ap.add_argument(
        "--storage-niceness",
        type=int,
        default=19,
        help="Azurite's niceness during the throughput runs (default: 19; on Azure the store "
        "takes no CPU of the node's)",
    )
    ap.add_argument("--skip-throughput", action="store_true", help="only the checkpoint times")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="check that it runs: 1 checkpoint, 1 run with the store on of 2 iterations of 200 "
        "env steps, a checkpoint after each; not a measurement",
    )
    args = ap.parse_args()
    if args.iterations < 2:
        ap.error("--iterations: at least 2 (a rate is measured from iteration 1's end)")
    checkpoint_every = CHECKPOINT_EVERY
    modes: tuple[str, ...] = ("off", "on")
    if args.smoke:
        modes = ("on",)
        args.checkpoints, args.iterations, args.repeats = 1, 2, 1
        args.train_batch_size, checkpoint_every = 200, 1
    sys.path[:0] = [str(REPO / "tests"), str(REPO / "examples")]
    from fakes.local_blob import local_blob
    from harness import blobsync

    out: dict[str, Any] = {
        "benchmark": "results_store",
        "smoke": args.smoke,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_1min_at_start": round(os.getloadavg()[0], 2),
        },
        "store": "Azurite over HTTPS with OAuth on loopback, tokens from the fake metadata service",
        "command": " ".join(["python", "benchmarks/results_store.py", *sys.argv[1:]]),
        "train_batch_size": args.train_batch_size,
        "uploader_niceness": blobsync.UPLOADER_NICENESS,
    }
    with tempfile.TemporaryDirectory(prefix="results-store-") as tmp:
        work = Path(tmp)
        with local_blob(work / "azurite") as blob:
            out["checkpoint"] = checkpoint_times(
                blob, work, args.checkpoints, args.train_batch_size
            )
            if not args.skip_throughput:
                server = blob.process_groups
                renice_groups(server, args.storage_niceness)
                out["storage_server_niceness"] = args.storage_niceness
                runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
                for i in range(args.repeats):
                    for mode in modes:
                        env = store_env(blob) if mode == "on" else no_store_env()
                        runs[mode].append(
                            training_run(
                                env,
                                work,
                                f"cartpole-{mode}-{i}",
                                args.iterations,
                                args.train_batch_size,
                                server,
                                checkpoint_every,
                            )
                        )
                speeds = {
                    mode: [r["env_steps_per_s"] for r in rs if "env_steps_per_s" in r]
                    for mode, rs in runs.items()
                }
                summary: dict[str, Any] = {
                    "iterations": args.iterations,
                    "checkpoint_every": checkpoint_every,
                    "order": ", ".join(modes) + ", ...",
                    "runs": runs,
                }
                if speeds["off"] and speeds["on"]:
                    off, on = statistics.median(speeds["off"]), statistics.median(speeds["on"])
                    summary["median_env_steps_per_s"] = {"off": off, "on": on}
                    summary["on_over_off"] = round(on / off, 3)
                    summary["within_5_percent"] = on / off >= 0.95
                costs = {
                    mode: [
                        r["measured_span_cpu"]["cpu_s_per_1000_env_steps"]
                        for r in rs
                        if "cpu_s_per_1000_env_steps" in r.get("measured_span_cpu", {})
                    ]
                    for mode, rs in runs.items()
                }
                if costs["off"] and costs["on"]:
                    # What the store costs in CPU, whatever else the machine runs: on a node
                    # whose cores training keeps busy, steps/s fall by this ratio's inverse.
                    off, on = statistics.median(costs["off"]), statistics.median(costs["on"])
                    summary["median_cpu_s_per_1000_env_steps"] = {"off": off, "on": on}
                    summary["cpu_on_over_off"] = round(on / off, 3)
                out["throughput"] = summary
    out["machine"]["load_1min_at_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out, indent=2))
    failed = any(
        "error" in r for rs in out.get("throughput", {}).get("runs", {}).values() for r in rs
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
