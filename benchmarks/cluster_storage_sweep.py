"""A two-trial Tune sweep's env steps per second with its storage in the cluster storage against
the node's own disk: one JSON object.

    python -m driver submit benchmarks/cluster_storage_sweep.py --head ...   # on a cluster
    python benchmarks/cluster_storage_sweep.py --shared DIR --local DIR      # any two folders
    python benchmarks/cluster_storage_sweep.py --batch example --iterations 8 --shared D --local D
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

The wall-clock ratio swings with the machine's load as much as with the storage, so each sweep
also measures the storage's cost by its parts, which load does not blur:

- ``client_cpu_s``: the CPU seconds (utime + stime, /proc/PID/stat) during the sweep of the
  storage client, the process(es) serving the mount that holds ``--shared`` (a FUSE mount in
  /proc/mounts; the processes whose command line has its mount point as an argument, e.g.
  ``rclone mount REMOTE /mnt/cluster_storage``); ``null`` with ``client.reason`` where there is
  none (a plain folder). Read in the local sweeps too: the client's idle cost.
- ``sweep_cpu_s``: the CPU seconds of the benchmark's cgroup during the sweep (cgroup v1
  ``cpuacct.usage``, else v2 ``cpu.stat``'s ``usage_usec``), less the client's where the client
  is in it: exact (the kernel charges every process of the cgroup, the Ray workers that exit
  during the sweep too), and the sweep's alone when the benchmark, the local Ray it starts and
  its descendants are all the cgroup holds (``sweep_cpu.others`` names any other process seen
  there; on a cluster, the node's Ray). ``null`` with ``sweep_cpu.reason`` in a root cgroup
  (every process of the machine): run it in a cgroup of its own.
- per trial, from a Tune callback in the driver: ``wall_s`` from the trial's start (its actor
  up, where Tune sets the trial's start time) to its completion (after the final checkpoint),
  ``outside_steps_s``, that wall time less Tune's ``time_total_s`` (the training steps): the
  checkpoint saves, their copies into the storage and Tune's round trips happen there; and
  ``save_s``, the sum of each save's wait (from its result to the save's processing).

Both CPU figures are the benchmark's node's: on a cluster of several nodes the other nodes'
clients and Rays are not counted.

``storage_cost`` derives, from the medians: ``client_cpu_fraction``, the client's CPU that the
shared sweeps add (theirs less the local sweeps') over a local sweep's CPU; ``blocking_fraction``,
a shared trial's time outside its steps less a local one's, over a local trial's wall time; and
``estimated_slowdown``, their sum, the slowdown of the sweep on a node whose CPUs are all busy,
checked against the goal (at most 0.05). What the estimate assumes:

- the node is CPU-saturated: each CPU second the client uses is one the sweep waits for;
- the sweep's wall time is its CPU time, so ``c`` more CPU seconds on its ``C`` slow it by ``c/C``;
- the sweep's own processes spend the same CPU either way (``sweep_cpu_shared_over_local``);
- the trials' time outside their steps differs between the folders by the storage alone;
- that time adds to the sweep's one for one (on 2-3 CPUs the trials, 2 CPUs each, run in turn);
- a trial's wall time stands for the sweep's (which also starts the trials): the fraction is
  larger than the sweep's;
- the client's CPU during a save the trial waits for is counted in both parts: the sum is an
  upper bound;
- the storage service answers as Azure's would (with a local Azurite, loopback's latency).

``--batch example`` trains each iteration as examples/cartpole/train.py does (:data:`BATCHES`):
the same sweep, ten times the training between its saves.

``--smoke``: one iteration, one sweep each of :data:`SMOKE_SWEEP` at ``--batch``'s size (the
JSON says ``"smoke": true``; its figures measure nothing).
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
BATCHES: dict[str, dict[str, int]] = {
    "fixture": {
        k: SWEEP[k] for k in ("train_batch_size_per_learner", "minibatch_size", "num_epochs")
    },
    "example": {"train_batch_size_per_learner": 4000, "minibatch_size": 128, "num_epochs": 6},
}
"""Each iteration's training, ``--batch``: ``fixture``, the sweep's own (400 env steps, 2 epochs
of 100: sized for a quick test, about 0.5 s an iteration on a 2-core machine, so a save every
~1 s of training); ``example``, examples/cartpole/train.py's (4,000 env steps, 6 epochs of 128,
as RLlib's own tuned CartPole PPO: several seconds an iteration; a test holds the two equal).
What the storage costs a sweep is a cost per save over the training between saves."""
SMOKE_SWEEP: dict[str, Any] = {**SWEEP, "lr": SWEEP["lr"][:1], "num_env_runners": 0}
"""The least that runs the benchmark's whole path: one trial (the first learning rate) that
samples in its own process (no env runner actor: one Ray worker process fewer to start, which
on 2 loaded cores costs tens of seconds; the sweep's CPU is mostly its processes' imports)."""
SEED = 0
GOAL_SLOWDOWN = round(1 - GOAL, 4)
"""The same goal for ``storage_cost``'s estimate: at most this fraction slower."""


def sweep(
    storage: Path,
    name: str,
    iterations: int,
    settings: dict[str, Any] = SWEEP,
    meters: CpuMeters | None = None,
) -> dict[str, Any]:
    """One sweep of ``settings`` (:data:`SWEEP`) with its storage in ``storage``: its wall time,
    env steps/s, the CPU ``meters`` read during it, and each trial's figures."""
    from ray import tune
    from ray.rllib.algorithms.ppo import PPOConfig

    class TrialClock(tune.Callback):
        """Each trial's start, completion and saves, on the driver's clock."""

        def __init__(self) -> None:
            self.trials: dict[str, dict[str, Any]] = {}

        def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            # A trial restarted after a failure keeps its first start.
            self.trials.setdefault(trial.trial_id, {"start": time.perf_counter(), "saves": []})

        def on_trial_result(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            self.trials[trial.trial_id]["result"] = time.perf_counter()

        def on_trial_save(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            clock = self.trials[trial.trial_id]
            clock["saves"].append(time.perf_counter() - clock["result"])

        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            self.trials[trial.trial_id]["end"] = time.perf_counter()

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
    clock = TrialClock()
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
            callbacks=[clock],
            verbose=0,
        ),
    )
    load_before = os.getloadavg()[0]
    cpu_before = meters.read() if meters else None
    start = time.perf_counter()
    results = tuner.fit()
    wall = time.perf_counter() - start
    cpu = meters.during(cpu_before, meters.read()) if meters and cpu_before else {}
    trials = []
    for r in results:
        if r.error:
            raise RuntimeError(f"a trial of {name} failed: {r.error}")
        path = Path(r.path)
        if not path.is_relative_to(storage):
            raise RuntimeError(f"a trial of {name} kept its results in {path}, not in {storage}")
        checkpoints = sorted(path.glob("checkpoint_*"))
        steps = int(r.metrics["num_env_steps_sampled_lifetime"])
        timed = clock.trials[r.metrics["trial_id"]]
        trial_wall = timed["end"] - timed["start"]
        trials.append(
            {
                "lr": r.config["lr"],
                "iterations": r.metrics["training_iteration"],
                "env_steps": steps,
                "time_total_s": round(r.metrics["time_total_s"], 3),
                "env_steps_per_s": round(steps / r.metrics["time_total_s"], 1),
                "wall_s": round(trial_wall, 3),
                "outside_steps_s": round(trial_wall - r.metrics["time_total_s"], 3),
                "saves": len(timed["saves"]),
                "save_s": round(sum(timed["saves"]), 3),
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
        **cpu,
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


def processes() -> dict[int, tuple[int, str]]:
    """Every process this one can see: its parent's pid and its name (/proc/PID/stat)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                text = (entry / "stat").read_text()
                name = text[text.index("(") + 1 : text.rindex(")")]
                table[int(entry.name)] = (int(text[text.rindex(")") + 2 :].split()[1]), name)
    return table


def process_cpu_s(pid: int) -> float:
    """The CPU seconds ``pid`` has used, all its threads (utime + stime); OSError once gone."""
    fields = Path(f"/proc/{pid}/stat").read_text()
    utime, stime = fields[fields.rindex(")") + 2 :].split()[11:13]  # fields 14 and 15
    return (int(utime) + int(stime)) / os.sysconf("SC_CLK_TCK")


def storage_client(where: dict[str, str]) -> dict[str, Any]:
    """The processes serving the mount ``where`` (:func:`mount`'s): a FUSE mount's, those whose
    command line has its mount point as an argument (``rclone mount REMOTE POINT``), their pids
    and names, or a ``reason`` there are none."""
    point, kind = where["mount_point"], where["type"]
    found: dict[str, Any] = {"mount_point": point, "type": kind, "pids": [], "names": []}
    if not kind.startswith("fuse"):
        return {**found, "reason": f"{point} is of type {kind}, the kernel's: no client process"}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            args = [os.fsdecode(a) for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
            if any(os.path.isabs(a) and os.path.normpath(a) == point for a in args[1:]):
                found["pids"].append(int(entry.name))
                found["names"].append((entry / "comm").read_text().strip())
    if not found["pids"]:
        return {**found, "reason": f"no process's command line names {point} (another namespace?)"}
    return {**found, "reason": None}


CGROUP_CPU_FILES = {"v1": "cpuacct.usage", "v2": "cpu.stat"}


def cgroup_paths(proc_cgroup: str) -> dict[str, str]:
    """A /proc/PID/cgroup's cgroups in the hierarchies that count CPU: ``v1``, cgroup v1's
    cpuacct, and ``v2``, the unified one."""
    paths = {}
    for line in proc_cgroup.splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        if hierarchy == "0" and not controllers:
            paths["v2"] = path
        elif "cpuacct" in controllers.split(","):
            paths["v1"] = path
    return paths


def cpu_cgroup(proc_cgroup: str, mounts: str) -> dict[str, Any]:
    """The cgroup whose CPU :func:`sweep` reads, for a process in ``proc_cgroup`` (a
    /proc/PID/cgroup) given ``mounts`` (/proc/mounts): v1's cpuacct, else v2, the first that is
    not the root cgroup (which holds every process of the machine); or a ``reason``."""
    roots = {}
    for line in mounts.splitlines():
        _, point, kind, options = line.split()[:4]
        if kind == "cgroup2":
            roots.setdefault("v2", point)
        elif kind == "cgroup" and "cpuacct" in options.split(","):
            roots.setdefault("v1", point)
    for version, path in sorted(cgroup_paths(proc_cgroup).items()):
        if path != "/" and version in roots:
            folder = Path(roots[version]) / path.lstrip("/")
            return {
                "cgroup": f"{version}:{path}",
                "file": str(folder / CGROUP_CPU_FILES[version]),
                "reason": None,
            }
    return {
        "cgroup": None,
        "file": None,
        "reason": "the benchmark is in no cgroup of its own that counts CPU (v1 cpuacct, v2)",
    }


def cgroup_cpu_s(file: Path) -> float:
    """A cgroup's CPU seconds so far: v1's cpuacct.usage (ns), v2's cpu.stat usage_usec."""
    text = file.read_text()
    if file.name == CGROUP_CPU_FILES["v1"]:
        return int(text) / 1e9
    return int(dict(line.split() for line in text.splitlines())["usage_usec"]) / 1e6


class CpuMeters:
    """The storage client's and the sweep's CPU seconds (the module's docstring says how)."""

    def __init__(self, shared: Path) -> None:
        self.client = storage_client(mount(shared))
        with open("/proc/self/cgroup") as own, open("/proc/mounts") as mounts:
            self.cgroup = cpu_cgroup(own.read(), mounts.read())
        self.others: set[str] = set()
        # Client processes in the sweep's cgroup: counted there too, so taken off it.
        self.inside: list[int] = []
        version, _, path = (self.cgroup["cgroup"] or ":").partition(":")
        for pid in self.client["pids"]:
            with contextlib.suppress(OSError):
                theirs = cgroup_paths(Path(f"/proc/{pid}/cgroup").read_text()).get(version, "")
                if path and (theirs == path or theirs.startswith(path.rstrip("/") + "/")):
                    self.inside.append(pid)

    def read(self) -> tuple[float | None, float | None, float | None]:
        """The client's CPU seconds so far, those of its processes in the cgroup, the cgroup's."""
        try:
            client = sum(process_cpu_s(pid) for pid in self.client["pids"])
            inside = sum(process_cpu_s(pid) for pid in self.inside)
        except OSError:  # a client process exited
            client = inside = None
        group = cgroup_cpu_s(Path(self.cgroup["file"])) if self.cgroup["file"] else None
        return (client if self.client["pids"] else None), inside, group

    def during(self, before: tuple, after: tuple) -> dict[str, float | None]:
        """The sweep's figures from its :meth:`read` before and after; notes the cgroup's
        other processes."""
        client, inside, group = (
            None if a is None or b is None else b - a for a, b in zip(before, after, strict=True)
        )
        own = None if group is None or inside is None else group - inside
        if self.cgroup["file"]:
            with contextlib.suppress(OSError):
                procs = Path(self.cgroup["file"]).with_name("cgroup.procs").read_text().split()
                table = processes()
                ours = descendants(os.getpid(), table) | set(self.client["pids"])
                self.others |= {
                    table[int(p)][1] for p in procs if int(p) not in ours and int(p) in table
                }
        return {
            "client_cpu_s": None if client is None else round(client, 3),
            "sweep_cpu_s": None if own is None else round(own, 3),
        }


def descendants(pid: int, table: dict[int, tuple[int, str]]) -> set[int]:
    """``pid`` and every process below it in ``table`` (:func:`processes`)."""
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    found: set[int] = set()
    todo = [pid]
    while todo:
        current = todo.pop()
        found.add(current)
        todo.extend(c for c in children.get(current, []) if c not in found)
    return found


def median(values: Any) -> float | None:
    """The median of ``values``, None where one of them is (a figure not measured)."""
    values = list(values)
    return None if None in values else round(statistics.median(values), 3)


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    trials = [t for r in runs for t in r["trials"]]
    return {
        "env_steps_per_s": round(statistics.median(r["env_steps_per_s"] for r in runs), 1),
        "wall_s": round(statistics.median(r["wall_s"] for r in runs), 3),
        "trial_env_steps_per_s": round(statistics.median(t["env_steps_per_s"] for t in trials), 1),
        "client_cpu_s": median(r["client_cpu_s"] for r in runs),
        "sweep_cpu_s": median(r["sweep_cpu_s"] for r in runs),
        "trial_wall_s": median(t["wall_s"] for t in trials),
        "trial_outside_steps_s": median(t["outside_steps_s"] for t in trials),
        "trial_save_s": median(t["save_s"] for t in trials),
        "runs": runs,
    }


def storage_cost(
    local: dict[str, Any], shared: dict[str, Any], reasons: dict[str, str | None]
) -> dict[str, Any]:
    """The storage's cost by its parts, from the two :func:`summary`'s medians, and the slowdown
    they add up to on a CPU-saturated node (the module's docstring says what that assumes);
    ``reasons``: why the client's or the sweep's CPU was not measured, where it was not."""

    def ratio(a: float | None, b: float | None) -> float | None:
        return None if a is None or not b else round(a / b, 4)

    def minus(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else round(a - b, 3)

    client_cpu = minus(shared["client_cpu_s"], local["client_cpu_s"])
    blocking = minus(shared["trial_outside_steps_s"], local["trial_outside_steps_s"])
    cpu_fraction = ratio(client_cpu, local["sweep_cpu_s"])
    blocking_fraction = ratio(blocking, local["trial_wall_s"])
    estimate = (
        None
        if cpu_fraction is None or blocking_fraction is None
        else round(cpu_fraction + blocking_fraction, 4)
    )
    missing = [
        f"{what}: {reasons[what]}"
        for what, value in (("client_cpu", client_cpu), ("sweep_cpu", local["sweep_cpu_s"]))
        if value is None
    ]
    return {
        "client_cpu_s": client_cpu,
        "sweep_cpu_s": local["sweep_cpu_s"],
        "client_cpu_fraction": cpu_fraction,
        "sweep_cpu_shared_over_local": ratio(shared["sweep_cpu_s"], local["sweep_cpu_s"]),
        "blocking_s": blocking,
        "trial_wall_s": local["trial_wall_s"],
        "blocking_fraction": blocking_fraction,
        "estimated_slowdown": estimate,
        "goal": f"estimated_slowdown <= {GOAL_SLOWDOWN}",
        "goal_met": None if estimate is None else estimate <= GOAL_SLOWDOWN,
        "reason": "; ".join(missing) or None,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=None, help=f"default: {SHARED_DEFAULT}/<run>")
    p.add_argument("--local", type=Path, default=None, help="default: a folder in $TMPDIR")
    p.add_argument(
        "--batch",
        choices=sorted(BATCHES),
        default="fixture",
        help="each iteration's training: the sweep's own (fixture, default) or "
        "examples/cartpole/train.py's (example)",
    )
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
    settings = {**(SMOKE_SWEEP if args.smoke else SWEEP), **BATCHES[args.batch]}

    import ray

    from driver.localray import init_local_ray

    # A job's Ray (RAY_ADDRESS), else one of its own (tried again if its node misses Ray's
    # window to register, on a loaded machine): not one another process left running.
    init_local_ray(
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
            "batch": args.batch,
            "trials": len(settings["lr"]),
            "seed": SEED,
            "iterations": iterations,
        },
        "repeats": repeats,
        "load_before": os.getloadavg()[0],
    }
    meters = CpuMeters(roots["shared"].resolve().parent)
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
                    runs[where].append(
                        sweep(root, f"sweep-{where}-{i}", iterations, settings, meters)
                    )
                shutil.rmtree(root, ignore_errors=True)
    finally:
        ray.shutdown()
        for root in roots.values():
            shutil.rmtree(root, ignore_errors=True)
    result["load_after"] = os.getloadavg()[0]
    result["client"] = meters.client
    result["sweep_cpu"] = {**meters.cgroup, "others": sorted(meters.others)}
    result["local"] = summary(runs["local"])
    result["shared"] = summary(runs["shared"])
    ratio = result["shared"]["env_steps_per_s"] / result["local"]["env_steps_per_s"]
    result["shared_over_local"] = round(ratio, 4)
    result["shared_slower_pct"] = round((1 - ratio) * 100, 2)
    result["goal"] = f"shared_over_local >= {GOAL} (at most {round((1 - GOAL) * 100)} % slower)"
    result["goal_met"] = ratio >= GOAL
    result["storage_cost"] = storage_cost(
        result["local"],
        result["shared"],
        {"client_cpu": meters.client["reason"], "sweep_cpu": meters.cgroup["reason"]},
    )
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
