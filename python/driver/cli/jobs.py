"""``job submit|status|logs|cancel|list``, and ``cluster status`` (what Ray's autoscaler and
the head say about the cluster)."""

from __future__ import annotations

import argparse
import json
import re
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from driver import upload
from driver.cli.options import (
    Verbs,
    find_cluster,
    job_id_arg,
    open_cluster,
    parse_pairs,
    seconds,
    submission_id,
    verb,
)
from driver.cli.output import (
    byte_bar,
    command,
    next_steps,
    plural,
    say,
    terminal_safe,
    write_out,
)
from driver.cli.power import idle_line, rate_line, report_stopped, start_if_stopped, stopped
from driver.cluster import Cluster
from driver.errors import (
    EXIT_INTERRUPTED,
    EXIT_JOB_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    ConnectionLost,
    DriverError,
)
from driver.jobs import TERMINAL, ClusterStatus, LogStream
from driver.settings import RESULTS_ENV
from driver.upload import ALLOW_FLAG
from driver.workdir import (
    ENTRYPOINT_NAMES,
    RUNTIME_ENV_FILE,
    Submission,
    resolve,
    runtime_env_for,
)


def _script(text: str) -> str:
    """SCRIPT as given, unless it is empty: ``submit "$UNSET"`` names no file at all."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "the script is empty (an unset shell variable?): expected a .py file or a folder "
            "with train.py/main.py"
        )
    return text


def add_submit(verbs: Verbs, name: str) -> None:
    p = verb(
        verbs,
        name,
        "Submit a script as a job and follow its logs.",
        "Upload the script's folder (less what .gitignore and .rayignore leave out), run "
        "`python SCRIPT ARGS...` on the cluster and stream the logs until the job ends. ARGS "
        f"go after `--`; the job writes its results to ${RESULTS_ENV}.",
    )
    p.add_argument(
        "script",
        metavar="SCRIPT",
        type=_script,
        help="a .py file, or a folder with train.py/main.py",
    )
    p.add_argument(
        "--submission-id",
        type=submission_id,
        metavar="ID",
        help="the job's id (default: FOLDER or SCRIPT name, then DATE-TIME-RANDOM)",
    )
    p.add_argument(
        "--pip",
        action="append",
        default=[],
        metavar="PKG",
        help="extra pip package for the job (repeatable)",
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment variable for the job (repeatable)",
    )
    p.add_argument(
        "--runtime-env",
        metavar="FILE",
        help=f"YAML of py_modules, pip, env_vars (default: {RUNTIME_ENV_FILE} beside SCRIPT)",
    )
    p.add_argument(
        ALLOW_FLAG,
        action="store_true",
        help="upload even a home folder or secret-looking files (.ssh, keys, *.tfstate)",
    )
    p.add_argument(
        "--no-wait",
        action="store_true",
        help="return once the job is submitted instead of following its logs",
    )
    p.add_argument(
        "--results",
        default="results",
        metavar="DIR",
        help="where a local job writes: DIR/SUBMISSION_ID (default: results)",
    )
    p.set_defaults(func=cmd_submit, trailing_args=True)


CLUSTER_STATUS = (
    "The cluster as Ray's autoscaler sees it (what `ray status` prints on the head): its nodes, "
    "CPUs and other resources in use, pending demand (tasks and actors waiting for resources) "
    "and what the autoscaler is doing (scaling_mode ray); with scaling_mode cpu no autoscaler "
    "runs on the head and the nodes are listed instead. Then the idle time and hourly rate "
    "(autostop) and the cluster storage; a stopped cluster is said to be stopped."
)


def add_status(verbs: Verbs, name: str) -> None:
    p = verb(verbs, name, "Show a job's status.")
    job_id_arg(p)
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.set_defaults(func=cmd_status)


def add_cluster_status(verbs: Verbs, name: str) -> None:
    p = verb(verbs, name, "Show the cluster's nodes, resources, demand and rate.", CLUSTER_STATUS)
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.set_defaults(func=cmd_status, submission_id=None)


def add_either_status(verbs: Verbs, name: str) -> None:
    """``status [ID]``, the shortcut of both: a job's with an id, the cluster's without."""
    p = verb(
        verbs,
        name,
        "Show a job's status, or with no job id the cluster's.",
        "With a job id: the job's state (job status). Without: the cluster's (cluster status).",
    )
    p.add_argument(
        "submission_id",
        metavar="SUBMISSION_ID",
        type=submission_id,
        nargs="?",
        help="the job's id (leave it out for the cluster's status)",
    )
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.set_defaults(func=cmd_status)


def add_logs(verbs: Verbs, name: str) -> None:
    p = verb(verbs, name, "Print a job's logs.")
    job_id_arg(p)
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    p.set_defaults(func=cmd_logs)


def add_cancel(verbs: Verbs, name: str) -> None:
    p = verb(
        verbs,
        name,
        "Cancel (stop) a running job.",
        "Ask Ray to stop the job (SIGTERM to its entrypoint, as `ray job stop`) and wait until "
        "it has.",
    )
    job_id_arg(p)
    p.add_argument("--no-wait", action="store_true", help="do not wait for the job to stop")
    p.add_argument(
        "--timeout",
        type=seconds,
        default=60.0,
        metavar="S",
        help="how long to wait for the job to stop (default: 60)",
    )
    p.set_defaults(func=cmd_cancel)


def add_list(verbs: Verbs, name: str) -> None:
    p = verb(verbs, name, "List the cluster's jobs.")
    p.add_argument("--json", action="store_true", help="print the jobs as JSON")
    p.set_defaults(func=cmd_list)


REPLACING_BREAKS = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "HOME")
"""Variables Ray's own processes for the job need: replacing them leaves a job PENDING for good."""


def check_job_env(env: dict[str, str]) -> dict[str, str]:
    """Refuse environment variables that would keep the job from ever starting.

    Ray starts the job's supervisor and workers with these variables: ``PATH=/opt/x`` instead of
    ``PATH=/opt/x:${PATH}`` leaves the job PENDING until Ray's start timeout (15 min).
    """
    home = env.get("HOME")
    if home is not None and home.strip() != "${HOME}":
        # Not a search path: HOME=/x:${HOME} is no home either.
        raise DriverError(
            f"--env HOME={home} would replace the home folder Ray's processes need, and the job "
            "would never start: leave HOME alone and pass the folder in a variable of your own, "
            f"e.g. MY_HOME={home}"
        )
    for name in REPLACING_BREAKS:
        if name in env and f"${{{name}}}" not in env[name]:
            raise DriverError(
                f"--env {name}={env[name]} would replace the {name} Ray's processes need, and "
                f"the job would never start: extend it instead, e.g. {name}={env[name]}:${{{name}}}"
            )
    return env


def default_submission_id(submission: Submission) -> str:
    """``cartpole-20261121-153000-ab12`` for examples/cartpole/train.py: the folder names a job
    better than a generic script name does."""
    stem = Path(submission.script).stem
    if submission.script in ENTRYPOINT_NAMES:
        stem = submission.working_dir.name
    stem = re.sub(r"[^a-z0-9-]+", "-", stem.lower()).strip("-")[:80] or "job"
    return f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def follow(cluster: Cluster, sid: str) -> int:
    """Stream the job's logs until it ends; the exit code says how it ended.

    A broken connection is healed (the cluster reconnects with back-off) and the log goes on
    where it stopped; when it cannot be healed, the job is said to keep running — never to
    have failed — with the command that reattaches.
    """
    hint = cluster.cli_hint
    stream = LogStream(write_out)
    try:
        while True:
            try:
                info = cluster.jobs().follow(sid, stream)
                break
            except ConnectionLost as e:
                try:
                    cluster.reconnect(e.message)
                except ConnectionLost as gone:
                    seen = f" (last seen {stream.status})" if stream.status else ""
                    raise ConnectionLost(
                        f"{gone.message}. Job {sid} keeps running on the cluster{seen}: "
                        f"reattach with `{command(f'job logs {sid} --follow', hint)}`"
                    ) from None
    except KeyboardInterrupt:
        say(f"\nStopped following; job {sid} keeps running.")
        say(f"  follow: {command(f'job logs {sid} --follow', hint)}")
        say(f"  cancel: {command(f'job cancel {sid}', hint)}")
        return EXIT_INTERRUPTED
    # Ray appends the job's last log lines to a failure message; they were just streamed.
    reason = info.message.splitlines()[0].rstrip(",: ") if info.message else ""
    reason = terminal_safe(reason.split(", last available logs")[0])
    say(
        f"Job {sid} {info.status.lower()}"
        + (f": {reason}" if info.status != "SUCCEEDED" and reason else ".")
    )
    return EXIT_OK if info.status == "SUCCEEDED" else EXIT_JOB_FAILED


def cmd_submit(args: argparse.Namespace) -> int:
    submission = resolve(args.script, args.trailing)
    spec = runtime_env_for(submission, args.runtime_env)
    env = check_job_env({**spec.env_vars, **parse_pairs(args.env, "--env")})
    sid = args.submission_id or default_submission_id(submission)
    # Decide what goes before connecting: a refusal costs nothing.
    plans = [upload.plan(submission.working_dir, args.allow_sensitive)]
    plans += [upload.plan(m, args.allow_sensitive, "a py_modules folder") for m in spec.py_modules]
    target = find_cluster(args)  # once: both what follows use it
    start_if_stopped(args, target)  # a cluster that autostop stopped starts first
    with open_cluster(args, start_local=True, target=target) as cluster:
        client = cluster.jobs()
        hint = cluster.cli_hint
        if args.submission_id:  # refused before anything is uploaded, not after
            existing = client.find(sid)
            if existing is not None:
                raise DriverError(
                    f"{cluster.description} already has a job {sid} ({existing.status}): give "
                    f"another --submission-id (see {command(f'job logs {sid}', hint)})",
                    EXIT_USAGE,
                )
        uris = []
        for i, plan in enumerate(plans):
            module = i > 0
            say(f"Uploading {'module ' if module else ''}{plan.root}: {plan.summary()}")
            uris.append(
                client.upload_package(
                    plan.root,
                    plan.excludes,
                    module=module,
                    progress=byte_bar(f"uploading {plan.root.name}"),
                )
            )
        env.setdefault(RESULTS_ENV, cluster.results_dir(sid))
        runtime_env: dict = {"working_dir": uris[0], "env_vars": env}
        if uris[1:]:
            runtime_env["py_modules"] = uris[1:]
        pip = [*spec.pip, *args.pip]
        if pip:
            runtime_env["pip"] = pip
        try:
            client.submit(
                submission.entrypoint,
                runtime_env,
                submission_id=sid,
                metadata={"submitted_by": "python -m driver"},
            )
        except KeyboardInterrupt:
            say(f"\nInterrupted while submitting; check with: {command(f'job status {sid}', hint)}")
            return EXIT_INTERRUPTED
        say(f"Submitted job {sid} to {cluster.description}: {submission.entrypoint}")
        say(next_steps(sid, hint))
        if args.no_wait:
            return EXIT_OK
        return follow(cluster, sid)


def cmd_status(args: argparse.Namespace) -> int:
    if args.submission_id is None:
        return cluster_status(args)
    with open_cluster(args) as cluster:
        info = cluster.jobs().info(args.submission_id)
    if args.json:
        print(json.dumps(info.as_dict(), indent=2))
    else:
        message = terminal_safe(info.message)
        print(f"{info.submission_id}: {info.status}" + (f" ({message})" if message else ""))
    return EXIT_OK


def cluster_status(args: argparse.Namespace) -> int:
    target = find_cluster(args)
    if down := stopped(args, target):
        return report_stopped(args, *down)
    with open_cluster(args, target=target) as cluster:
        status = cluster.jobs().cluster_status()
        autostop = cluster.autostop_state()
        storage = cluster.storage_state()
    workers = len([n for n in status.nodes if n["state"] == "ALIVE" and not n["head"]])
    extra = [idle_line(autostop), rate_line(autostop, workers)] if autostop else []
    if storage is not None:
        extra.append(storage_line(storage))
    if args.json:
        doc = status.as_dict()
        if storage is not None:
            doc["storage"] = storage
        if autostop:
            doc["autostop"] = autostop
            doc["idle"], doc["rate"] = extra
        print(json.dumps(doc, indent=2))
        return EXIT_OK
    if status.text.strip() and status.autoscaler is not None:
        print(terminal_safe(status.text.rstrip()))
        for line in refused_lines(status):
            print(line)
        for line in extra:
            print(line)
        return EXIT_OK
    # No autoscaler reports here (scaling_mode cpu, or local Ray): the nodes, from Ray's state.
    alive = [n for n in status.nodes if n["state"] == "ALIVE"]
    print(f"{plural(len(alive), 'node')} alive (no Ray autoscaler runs on this cluster):")
    for n in sorted(status.nodes, key=lambda n: (not n["head"], n["ip"] or "")):
        cpus = n["resources"].get("CPU", 0)
        role = "head" if n["head"] else "worker"
        print(f"  {n['ip']:<15}  {role:<6}  {n['state']:<5}  {cpus:g} CPU")
    if status.text.strip():
        print(terminal_safe(status.text.rstrip()))
    for line in extra:
        print(line)
    return EXIT_OK


def refused_lines(status: ClusterStatus) -> list[str]:
    """Per pool the autoscaler could not launch (Azure refused its capacity): what Azure
    answered, since when, and when the pool is asked again (docs/pools.md)."""
    refused = status.refused_pools()
    if not refused:
        return []
    lines = ["Pools Azure refused (their demand goes to the other pools meanwhile):"]
    for r in refused:
        lines.append(terminal_safe(f"  {r['node_type']}: {r['description'] or r['category']}"))
    return lines


def storage_line(state: dict[str, Any]) -> str:
    """One line on the cluster storage (docs/results-and-storage.md), from ``storage_state``."""
    if not state.get("configured"):
        return (
            "cluster storage: none (deployed without results storage): a Tune run on several "
            "nodes needs a storage_path every node reaches"
        )
    where = terminal_safe(f"{state.get('account', '')}/{state.get('container', '')}")
    if state.get("mounted"):
        return (
            f"cluster storage: {state['path']} on every node (Blob container {where}), "
            "Tune's default ~/ray_results there"
        )
    return (
        f"cluster storage: NOT MOUNTED on the head (Blob container {where}): see "
        "`python -m driver cluster ssh -- journalctl -u ray-storage`"
    )


def cmd_logs(args: argparse.Namespace) -> int:
    with open_cluster(args) as cluster:
        if args.follow:
            return follow(cluster, args.submission_id)
        write_out(cluster.jobs().logs(args.submission_id))
        return EXIT_OK


def cmd_cancel(args: argparse.Namespace) -> int:
    with open_cluster(args) as cluster:
        client = cluster.jobs()
        info = client.info(args.submission_id)
        if info.status in ("SUCCEEDED", "FAILED", "STOPPED"):
            say(f"Job {args.submission_id} already ended: {info.status}")
            return EXIT_OK
        client.stop(args.submission_id)
        if args.no_wait:
            say(f"Asked job {args.submission_id} to stop.")
            return EXIT_OK
        deadline = time.monotonic() + args.timeout
        for final in client.wait(args.submission_id, interval=0.5):
            if final.status not in TERMINAL and time.monotonic() > deadline:
                why = f" ({terminal_safe(final.message)})" if final.message else ""
                raise DriverError(
                    f"asked Ray to stop job {args.submission_id}, but it is still "
                    f"{final.status} after {args.timeout:.0f} s{why}; a job that never started "
                    "is marked FAILED when Ray's start timeout ends (15 min by default)"
                )
        say(f"Job {args.submission_id}: {final.status}")
        return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    with open_cluster(args) as cluster:
        jobs = cluster.jobs().list()
    if args.json:
        print(json.dumps([j.as_dict() for j in jobs], indent=2))
        return EXIT_OK
    if not jobs:
        say("No jobs.")
        return EXIT_OK
    width = max(len(j.submission_id) for j in jobs)
    for j in jobs:
        started = (
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(j.start_time))
            if j.start_time
            else "-"
        )
        print(
            f"{j.submission_id:<{width}}  {j.status:<9}  {started}  {terminal_safe(j.entrypoint)}"
        )
    sys.stdout.flush()
    return EXIT_OK
