"""The training loop: build, maybe restore, train until a stop condition, checkpoint, report."""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from harness import learner_lock
from harness.metrics import ProgressWriter
from harness.notice import Notice, Watch, act, learning_nodes, own_node, wait_gone
from harness.runs import (
    CHECKPOINT,
    PROGRESS_CSV,
    SUMMARY_JSON,
    Checkpoint,
    latest_checkpoint,
    read_progress,
    results_dir,
    run_folder,
    save_checkpoint,
)
from harness.store import StoreError, Uploader, configured, fetch_latest

HEAD_RESOURCE = "head"
"""The custom resource the cluster's head offers (cloud-init's `ray start --resources`)."""

ConfigBuilder = Callable[[argparse.Namespace], Any]
"""Flags -> an RLlib AlgorithmConfig; the harness adds seed, fault tolerance and placement."""
Evaluator = Callable[[Any, argparse.Namespace], dict[str, Any]]
"""(trained algorithm, flags) -> extra summary keys, e.g. a greedy policy's mean return."""
REBUILD_ATTEMPTS = 3
"""How many times the algorithm is built again from a notice's checkpoint, after its learner
actor's node went, before the run fails."""
REBUILD_PAUSE_S = 15.0
"""The pause between two of those attempts."""


@dataclass
class Learning:
    """The algorithm being trained, and how to build another one from the same flags (after a
    learner actor's node went)."""

    algo: Any
    build: Callable[[], Any]


class RebuildError(RuntimeError):
    """The algorithm could not be built again from a notice's checkpoint: the run ends."""


def _mean_return(result: dict[str, Any]) -> float:
    value = result.get("env_runners", {}).get("episode_return_mean", float("nan"))
    return float(value) if value is not None else float("nan")


def _timer(result: dict[str, Any], name: str) -> float | None:
    value = result.get("timers", {}).get(name)
    return round(float(value), 4) if isinstance(value, (int, float)) else None


def _first_return(rows: list[dict[str, str]]) -> float | None:
    """The run's first mean return (from the resumed run's rows, if any): where the curve began."""
    for row in rows:
        try:
            value = float(row.get("episode_return_mean") or "nan")
        except ValueError:
            continue
        if not math.isnan(value):
            return value
    return None


def apply_harness_settings(config: Any, args: argparse.Namespace) -> Any:
    """What every example's config gets, whatever the example set (and
    ``--min-iteration-seconds`` over the example's own reporting).

    Env runners lost to a preempted Spot VM or a crash are restarted as identical copies
    (RLlib's default is to fail the run). On a cluster, the algorithm and its learner stay on the
    head (``head`` resource): a job's entrypoint already runs there, and the request keeps it
    there when the config is handed to Tune instead. Local Ray has no ``head`` resource, and
    asking for one there would never be granted.
    """
    import ray

    config = config.fault_tolerance(restart_failed_env_runners=True).debugging(seed=args.seed)
    if args.min_iteration_seconds is not None:
        config = config.reporting(min_time_s_per_iteration=args.min_iteration_seconds)
    if ray.cluster_resources().get(HEAD_RESOURCE, 0) > 0:
        config = config.resources(custom_resources_for_main_process={HEAD_RESOURCE: 0.001})
    return config


def stop_reason(
    args: argparse.Namespace, ret: float, iteration: int, env_steps: int, seconds: float
) -> str | None:
    """The first stop condition met, by its flag's name (``None``: keep training)."""
    if args.stop_reward is not None and not math.isnan(ret) and ret >= args.stop_reward:
        return "stop_reward"
    if args.max_iterations is not None and iteration >= args.max_iterations:
        return "max_iterations"
    if args.max_env_steps is not None and env_steps >= args.max_env_steps:
        return "max_env_steps"
    if args.stop_seconds is not None and seconds >= args.stop_seconds:
        return "stop_seconds"
    return None


def run(
    example: str,
    build_config: ConfigBuilder,
    args: argparse.Namespace,
    evaluate: Evaluator | None = None,
) -> int:
    """Train as the flags say and print ``RESULT {...}``; the exit code for the job.

    0: the run ended on a stop condition and, if a ``--stop-reward`` was set, reached it;
    1: it ended without reaching its ``--stop-reward``; 2: bad flags (nothing trained).
    """
    if all(
        v is None
        for v in (args.stop_reward, args.max_env_steps, args.max_iterations, args.stop_seconds)
    ):
        print("error: every stop condition is 'none': the run would never end", file=sys.stderr)
        return 2
    run_dir = results_dir(args.results_dir, example)
    store = configured()
    resume, fetched, resumed_from = None, None, None
    if args.resume:
        folder = run_folder(args.resume, run_dir)
        if store and not folder.exists() and folder.name == args.resume:
            # Not on this machine (a new head, another cluster): the run's published checkpoint.
            try:
                fetched = folder = fetch_latest(store, args.resume, args.upload_timeout)
            except StoreError as e:
                print(f"error: --resume {args.resume}: {e}", file=sys.stderr)
                return 2
            resumed_from = f"{store.url}/{args.resume}"
        try:
            resume = latest_checkpoint(folder)
        except FileNotFoundError as e:
            print(f"error: --resume {args.resume}: {e}", file=sys.stderr)
            return 2
        resumed_from = resumed_from or str(resume.path)
    earlier_rows = (
        read_progress(resume.path.parent / PROGRESS_CSV, int(resume.state["iteration"]))
        if resume
        else []
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    uploader = Uploader(store, run_dir).start() if store else None

    import ray

    ray.init(logging_level="WARNING", ignore_reinit_error=True)

    def build() -> Any:
        return apply_harness_settings(build_config(args), args).build_algo()

    learning = Learning(build(), build)
    try:
        summary = _train(
            learning, args, evaluate, run_dir, uploader, resume, resumed_from, fetched,
            earlier_rows,
        )  # fmt: skip
    except RebuildError as e:  # said in one line; the last algorithm is stopped already
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 1
    except BaseException as e:  # an error, Ctrl-C, or driver stop's SIGTERM (SystemExit)
        if not _update_threads_stopped(learning.algo, e):
            _end_now(_exit_code(e), e)
        raise
    algo = learning.algo
    stopped = _update_threads_stopped(algo)
    algo.stop()
    print("RESULT " + json.dumps(summary), flush=True)
    code = 1 if summary["reached_target"] is False else 0
    if not stopped:
        _end_now(code)
    return code


def _train(
    learning: Learning,
    args: argparse.Namespace,
    evaluate: Evaluator | None,
    run_dir: Path,
    uploader: Uploader | None,
    resume: Checkpoint | None,
    resumed_from: str | None,
    fetched: Path | None,
    earlier_rows: list[dict[str, str]],
) -> dict[str, Any]:
    """Restore (``--resume``), train until a stop condition, checkpoint, evaluate, write
    ``summary.json`` (and hand the run to the uploader): the summary. After a notice's
    checkpoint for a learner actor's node, once the node has gone, ``learning.algo`` is
    rebuilt from that checkpoint (:func:`rebuild`) and training goes on."""
    import ray

    algo = learning.algo
    learner_lock.guard(algo)  # checkpoints wait for an APPO/IMPALA update in progress
    watch = Watch.for_algorithm(algo)  # eviction notices for the learning state's nodes
    notices: list[dict[str, Any]] = []
    rebuilds: list[dict[str, Any]] = []
    here = own_node()
    time_before = 0.0
    if resume:
        algo.restore_from_path(str(resume.path))
        time_before = float(resume.state.get("time_total_s", 0.0))
        print(
            f"resumed from {resumed_from}: iteration {resume.state['iteration']}, "
            f"env steps {resume.state['env_steps']}",
            flush=True,
        )
        if fetched:
            shutil.rmtree(fetched, ignore_errors=True)
    progress = ProgressWriter(run_dir, earlier_rows)
    first = _first_return(earlier_rows)
    start = time.monotonic()
    ret, it, reason = float("nan"), int(algo.iteration), None
    steps = int(resume.state["env_steps"]) if resume else 0
    checkpoint: Path | None = None

    def state() -> dict[str, Any]:
        return {
            "iteration": it,
            "env_steps": steps,
            "time_total_s": round(time_before + time.monotonic() - start, 3),
            "episode_return_mean": None if math.isnan(ret) else ret,
            "run": str(run_dir),
            "resumed_from": resumed_from,
        }

    try:
        while reason is None:
            t0 = time.monotonic()
            result = algo.train()
            took = time.monotonic() - t0
            it = int(result.get("training_iteration", algo.iteration))
            before = steps
            steps = int(result["num_env_steps_sampled_lifetime"])
            ret = _mean_return(result)
            if first is None and not math.isnan(ret):
                first = ret
            total = time_before + time.monotonic() - start
            row = {
                "iteration": it,
                "env_steps": steps,
                "episode_return_mean": round(ret, 4),
                "episode_len_mean": result.get("env_runners", {}).get("episode_len_mean"),
                "episodes": result.get("env_runners", {}).get("num_episodes_lifetime"),
                "time_total_s": round(total, 3),
                "iteration_time_s": round(took, 3),
                "env_steps_per_s": round((steps - before) / took, 1) if took > 0 else None,
                "sample_s": _timer(result, "env_runner_sampling_timer"),
                "learn_s": _timer(result, "learner_update_timer"),
                "timestamp": round(time.time(), 3),
                "healthy_env_runners": result.get("fault_tolerance", {}).get("num_healthy_workers"),
                "env_runner_restarts": result.get("fault_tolerance", {}).get(
                    "num_remote_worker_restarts"
                ),
            }
            progress.write(row, result)
            print(
                f"iter {it:4d}  env steps {steps:8d}  mean return {ret:9.2f}  time {total:7.1f} s",
                flush=True,
            )
            reason = stop_reason(args, ret, it, steps, total)
            notice = watch.due()
            if notice is not None:  # a node of the learning state is going: save now
                notices.append(act(notice, watch, algo, run_dir, state(), uploader))
                if notices[-1]["saved"]:
                    checkpoint = run_dir / CHECKPOINT
                    # A learner actor's node: no update more on it (lost with it); once it has
                    # gone, the algorithm again from this checkpoint, its learner elsewhere.
                    if notice.node_id != here and wait_gone(notice):
                        rebuilds.append(rebuild(learning, notice, checkpoint, state()))
                        algo, acted = learning.algo, watch.acted
                        watch = Watch.for_algorithm(algo)
                        watch.acted |= acted
                    elif notice.node_id == here:
                        # This process's node (the head): no update more until the event's time
                        # (lost with it); its watcher resubmits the job with --resume.
                        wait_gone(notice, grace=0.0)
                    continue  # this iteration's checkpoint is saved (the final one follows)
            if reason is None and args.checkpoint_every and it % args.checkpoint_every == 0:
                checkpoint = save_checkpoint(algo, run_dir, state())
                if uploader:
                    uploader.checkpoint(checkpoint, state())
            elif uploader:
                uploader.sync()
        wall = time_before + time.monotonic() - start
        checkpoint = save_checkpoint(algo, run_dir, state())
        if uploader:
            uploader.checkpoint(checkpoint, state())
        extra = evaluate(algo, args) if evaluate else {}
    except BaseException:
        if uploader:  # a failed or stopped run: what is staged goes up (briefly), then the error
            progress.close()
            uploader.finish(min(args.upload_timeout, 60.0))
        raise
    finally:
        progress.close()
    reached = None if args.stop_reward is None else bool(ret >= args.stop_reward)
    summary = {
        "reached_target": reached,
        "target": args.stop_reward,
        "episode_return_mean": None if math.isnan(ret) else round(ret, 2),
        "env_steps": steps,
        "iterations": it,
        "wall_time_s": round(wall, 2),
        "checkpoint": str(checkpoint),
        "node": ray.util.get_node_ip_address(),
        "first_episode_return_mean": None if first is None else round(first, 2),
        "stopped_by": reason,
        "seed": args.seed,
        "resumed_from": resumed_from,
        "notices": notices,
        "rebuilds": rebuilds,
        **extra,
    }
    (run_dir / SUMMARY_JSON).write_text(json.dumps(summary, indent=2) + "\n")
    if uploader:
        uploader.finish(args.upload_timeout)
    return summary


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:300]}" if text else type(error).__name__


def _discard(algo: Any) -> None:
    """Stop an algorithm whose learner actor is gone (or half built); what fails is said."""
    try:
        algo.stop()
    except Exception as e:
        print(f"notice: stopping the previous algorithm: {_one_line(e)}", flush=True)


def _node_ips(node_ids: list[str]) -> list[str]:
    import ray

    ips = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
    return [ips.get(node, node) for node in node_ids]


def rebuild(
    learning: Learning,
    notice: Notice,
    checkpoint: Path,
    state: dict[str, Any],
    attempts: int = REBUILD_ATTEMPTS,
    pause: float = REBUILD_PAUSE_S,
) -> dict[str, Any]:
    """After ``notice``'s node (a learner actor's) went: stop ``learning.algo``, build the
    algorithm again and restore ``checkpoint`` (saved on the notice, ``state``: its harness
    state) into it, as ``--resume`` does; its learner actors land wherever Ray can place them
    (another worker, or the replacement the autoscaler brings up: building waits for it).
    ``learning.algo`` is then the new one. At most ``attempts`` tries, ``pause`` seconds
    apart; then :class:`RebuildError`. What happened, for the run's summary."""
    start = time.monotonic()
    iteration = int(state["iteration"])
    _discard(learning.algo)
    for attempt in range(1, attempts + 1):
        algo = None
        try:
            algo = learning.build()
            learner_lock.guard(algo)
            algo.restore_from_path(str(checkpoint))
            nodes = _node_ips(learning_nodes(algo)[1:])
        except Exception as e:
            why = _one_line(e)
            print(
                f"notice: rebuilding the algorithm from the checkpoint at iteration "
                f"{iteration} failed (attempt {attempt} of {attempts}): {why}",
                flush=True,
            )
            if algo is not None:
                _discard(algo)
            if attempt == attempts:
                raise RebuildError(
                    f"the algorithm could not be rebuilt from the checkpoint at iteration "
                    f"{iteration} after {notice.describe()} ({attempts} attempts; the last: "
                    f"{why}); resume by hand with --resume"
                ) from e
            time.sleep(pause)
            continue
        learning.algo = algo
        record = {
            "event_id": notice.event_id,
            "node_ip": notice.node_ip,
            "iteration": int(algo.iteration),
            "env_steps": int(state["env_steps"]),
            "attempts": attempt,
            "seconds": round(time.monotonic() - start, 1),
            "learners_on": nodes,
        }
        print(
            f"notice: {notice.node_ip} has gone: the algorithm rebuilt from the checkpoint at "
            f"iteration {record['iteration']} (env steps {record['env_steps']}) in "
            f"{record['seconds']:.1f} s, its learner on {', '.join(nodes) or 'this node'}",
            flush=True,
        )
        return record
    raise AssertionError("unreachable")


def _exit_code(error: BaseException) -> int:
    """The exit code Python's exit gives the process that ``error`` ends."""
    if isinstance(error, SystemExit):
        return error.code if isinstance(error.code, int) else int(error.code is not None)
    if isinstance(error, KeyboardInterrupt):
        return 128 + signal.SIGINT  # Python ends itself with SIGINT: a shell's 130
    return 1


def _update_threads_stopped(algo: Any, error: BaseException | None = None) -> bool:
    """End the learners' update threads (APPO's, IMPALA's), each after its update in progress,
    before this process ends, however it ends (``error``: the exception that ends it): Python's
    exit would tear a thread still in an update out of torch's backward (SIGABRT, exit 134; see
    harness/learner_lock.py). False: one is still in its update after
    ``learner_lock.STOP_TIMEOUT_S``, and the process must not end by Python's exit."""
    try:
        return learner_lock.stop(algo)
    except Exception:
        if error is None:
            raise
        return True  # the error that ends the run is the one to see (guard() met this one first)


def _end_now(code: int, error: BaseException | None = None) -> NoReturn:
    """End the process with ``code`` at once, without Python's exit (an update thread is still
    in an update: see :func:`_update_threads_stopped`)."""
    if error is not None:
        traceback.print_exception(error)
    print(
        f"error: the learner's update thread is still in an update after "
        f"{learner_lock.STOP_TIMEOUT_S:.0f} s: the process ends now, without Python's exit",
        file=sys.stderr,
        flush=True,
    )
    sys.stdout.flush()
    os._exit(code)
