"""``python -m driver``: submit RLlib jobs to a Ray cluster and bring the results back.

A thin layer: each verb is one function that parses nothing and prints everything; the work is
done by the modules it calls. Library code never prints.
"""

from __future__ import annotations

import argparse
import json
import logging
import secrets
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from driver import __version__
from driver.errors import (
    EXIT_INTERRUPTED,
    EXIT_JOB_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    DriverError,
)

PROG = "python -m driver"

EXIT_CODES_HELP = """exit codes:
  0    the job succeeded (or the command did what it was asked)
  1    the job failed or was stopped
  2    usage error, bad input, or the cluster could not be reached
  130  Ctrl-C while following a job (the job keeps running)"""


def say(message: str) -> None:
    """A line for the person at the terminal (stderr, so stdout stays the job's output)."""
    print(message, file=sys.stderr, flush=True)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise DriverError(f"{self.prog}: {message} (see {self.prog} --help)", EXIT_USAGE)


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def _job_id_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("submission_id", metavar="SUBMISSION_ID", help="the job's submission id")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description=(
            "Submit RLlib jobs to a Ray cluster through Ray's Jobs API, follow them and bring "
            "their results back. With no cluster given, jobs run on a local Ray head that the "
            "driver starts on 127.0.0.1."
        ),
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="COMMAND", parser_class=_Parser)
    verbs.required = True

    p = verbs.add_parser(
        "submit",
        help="Submit a script as a job and follow its logs.",
        description=(
            "Upload the script's folder as the job's working directory (honouring .gitignore "
            "and .rayignore), run `python SCRIPT ARGS...` on the cluster's head and stream the "
            "logs until the job ends. Arguments for the script go after `--`."
        ),
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("script", metavar="SCRIPT", help="a .py file, or a folder with train.py/main.py")
    p.add_argument("--submission-id", help="the job's id (default: SCRIPT-DATE-TIME-RANDOM)")
    p.add_argument(
        "--pip",
        action="append",
        default=[],
        metavar="PKG",
        help="extra pip package for the job's runtime environment (repeatable)",
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment variable for the job (repeatable)",
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
        help="local folder for results: a local job writes to DIR/SUBMISSION_ID (default: results)",
    )
    p.set_defaults(func=cmd_submit)

    p = verbs.add_parser("status", help="Show a job's status.")
    _job_id_arg(p)
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.set_defaults(func=cmd_status)

    p = verbs.add_parser("logs", help="Print a job's logs.")
    _job_id_arg(p)
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    p.set_defaults(func=cmd_logs)

    p = verbs.add_parser("stop", help="Stop a running job.")
    _job_id_arg(p)
    p.add_argument("--no-wait", action="store_true", help="do not wait for the job to stop")
    p.set_defaults(func=cmd_stop)

    p = verbs.add_parser("list", help="List the cluster's jobs.")
    p.add_argument("--json", action="store_true", help="print the jobs as JSON")
    p.set_defaults(func=cmd_list)

    p = verbs.add_parser(
        "local",
        help="Start, stop or inspect the local Ray head (the default cluster).",
        description=(
            "The local Ray head binds to 127.0.0.1 with token authentication; its state lives "
            "in $RAYDRIVER_HOME (default: $XDG_STATE_HOME/ray-azure-rl)."
        ),
    )
    local = p.add_subparsers(dest="local_verb", metavar="ACTION", parser_class=_Parser)
    local.required = True
    lp = local.add_parser("start", help="Start the local Ray head (no-op if it is running).")
    lp.add_argument("--num-cpus", type=_non_negative_int, help="CPUs Ray may use (default: all)")
    lp.set_defaults(func=cmd_local_start)
    lp = local.add_parser("stop", help="Stop the local Ray head the driver started.")
    lp.set_defaults(func=cmd_local_stop)
    lp = local.add_parser("status", help="Say whether the local Ray head is running.")
    lp.set_defaults(func=cmd_local_status)

    from driver import cli_node

    cli_node.register(verbs)
    return parser


# -- verbs -----------------------------------------------------------------------------------
def _connect(args: argparse.Namespace, start_local: bool = False):  # type: ignore[no-untyped-def]
    from driver.cluster import connect

    _quiet_ray_logs()
    return connect(
        start_local=start_local,
        results_root=Path(getattr(args, "results", "results")),
        progress=say,
    )


def _quiet_ray_logs() -> None:
    """Ray's client libraries log at INFO ("Uploading package ..."); the CLI speaks for itself.

    Ray configures its "ray" logger when first imported, so this runs after that import.
    """
    import ray.job_submission  # noqa: F401

    logging.getLogger("ray").setLevel(logging.WARNING)
    # The Jobs SDK pins its own logger to INFO ("WebSocket closed for job ...").
    logging.getLogger("ray.dashboard.modules.job.sdk").setLevel(logging.WARNING)


def _default_submission_id(script: str) -> str:
    stem = Path(script).stem.replace("_", "-").lower() or "job"
    return f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def _parse_env(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or not key.replace("_", "a").isalnum():
            raise DriverError(f"--env expects KEY=VALUE, got {pair!r}")
        env[key] = value
    return env


def _upload_progress():  # type: ignore[no-untyped-def]
    from tqdm import tqdm

    bar = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(
                total=total,
                unit="B",
                unit_scale=True,
                desc="uploading working dir",
                file=sys.stderr,
                disable=not sys.stderr.isatty(),
                leave=False,
            )
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return progress


def _next_steps(sid: str, hint: str = "") -> str:
    extra = f" {hint}" if hint else ""
    return "\n".join(
        [
            "Next:",
            f"  {PROG} logs {sid} --follow{extra}",
            f"  {PROG} status {sid}{extra}",
            f"  {PROG} stop {sid}{extra}",
            f"  {PROG} download {sid}{extra}",
        ]
    )


def _exit_code_for(status: str) -> int:
    return EXIT_OK if status == "SUCCEEDED" else EXIT_JOB_FAILED


def _follow(client, sid: str, hint: str) -> int:  # type: ignore[no-untyped-def]
    def write(chunk: str) -> None:
        sys.stdout.write(chunk)
        sys.stdout.flush()

    try:
        info = client.follow(sid, write)
    except KeyboardInterrupt:
        say(f"\nStopped following; job {sid} keeps running.")
        say(f"  follow: {PROG} logs {sid} --follow{(' ' + hint) if hint else ''}")
        say(f"  stop:   {PROG} stop {sid}{(' ' + hint) if hint else ''}")
        return EXIT_INTERRUPTED
    # Ray appends the job's last log lines to a failure message; they were just streamed.
    reason = info.message.splitlines()[0].rstrip(",: ") if info.message else ""
    reason = reason.split(", last available logs")[0]
    say(
        f"Job {sid} {info.status.lower()}"
        + (f": {reason}" if info.status != "SUCCEEDED" and reason else ".")
    )
    return _exit_code_for(info.status)


def cmd_submit(args: argparse.Namespace) -> int:
    from driver.cluster import RESULTS_ENV
    from driver.workdir import resolve

    submission = resolve(args.script, args.entrypoint_args)
    env = _parse_env(args.env)
    sid = args.submission_id or _default_submission_id(submission.script)
    cluster = _connect(args, start_local=True)
    try:
        client = cluster.jobs()
        hint = getattr(cluster, "cli_hint", "")
        uri = client.upload_working_dir(submission.working_dir, progress=_upload_progress())
        env.setdefault(RESULTS_ENV, cluster.results_dir(sid))
        runtime_env: dict = {"working_dir": uri, "env_vars": env}
        if args.pip:
            runtime_env["pip"] = list(args.pip)
        try:
            client.submit(
                submission.entrypoint,
                runtime_env,
                submission_id=sid,
                metadata={"submitted_by": "python -m driver"},
            )
        except KeyboardInterrupt:
            say(f"\nInterrupted while submitting; check with: {PROG} status {sid}")
            return EXIT_INTERRUPTED
        say(f"Submitted job {sid} to {cluster.description}: {submission.entrypoint}")
        say(_next_steps(sid, hint))
        if args.no_wait:
            return EXIT_OK
        return _follow(client, sid, hint)
    finally:
        cluster.close()


def cmd_status(args: argparse.Namespace) -> int:
    cluster = _connect(args)
    try:
        info = cluster.jobs().info(args.submission_id)
    finally:
        cluster.close()
    if args.json:
        print(json.dumps(info.as_dict(), indent=2))
    else:
        print(
            f"{info.submission_id}: {info.status}" + (f" ({info.message})" if info.message else "")
        )
    return EXIT_OK


def cmd_logs(args: argparse.Namespace) -> int:
    cluster = _connect(args)
    try:
        client = cluster.jobs()
        if args.follow:
            return _follow(client, args.submission_id, getattr(cluster, "cli_hint", ""))
        sys.stdout.write(client.logs(args.submission_id))
        sys.stdout.flush()
        return EXIT_OK
    finally:
        cluster.close()


def cmd_stop(args: argparse.Namespace) -> int:
    cluster = _connect(args)
    try:
        client = cluster.jobs()
        info = client.info(args.submission_id)
        if info.status in ("SUCCEEDED", "FAILED", "STOPPED"):
            say(f"Job {args.submission_id} already ended: {info.status}")
            return EXIT_OK
        client.stop(args.submission_id)
        if args.no_wait:
            say(f"Asked job {args.submission_id} to stop.")
            return EXIT_OK
        final = list(client.wait(args.submission_id, interval=0.5))[-1]
        say(f"Job {args.submission_id}: {final.status}")
        return EXIT_OK
    finally:
        cluster.close()


def cmd_list(args: argparse.Namespace) -> int:
    cluster = _connect(args)
    try:
        jobs = cluster.jobs().list()
    finally:
        cluster.close()
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
        print(f"{j.submission_id:<{width}}  {j.status:<9}  {started}  {j.entrypoint}")
    return EXIT_OK


def cmd_local_start(args: argparse.Namespace) -> int:
    from driver.localray import LocalRay
    from driver.paths import driver_home

    head, started = LocalRay(driver_home()).start(num_cpus=args.num_cpus, progress=say)
    say(
        ("Started" if started else "Already running:") + f" local Ray, Jobs API at "
        f"{head.jobs_address}, GCS at {head.gcs_address}"
    )
    return EXIT_OK


def cmd_local_stop(args: argparse.Namespace) -> int:
    from driver.localray import LocalRay
    from driver.paths import driver_home

    if LocalRay(driver_home()).stop():
        say("Stopped local Ray.")
    else:
        say("Local Ray was not running.")
    return EXIT_OK


def cmd_local_status(args: argparse.Namespace) -> int:
    from driver.localray import LocalRay
    from driver.paths import driver_home

    head = LocalRay(driver_home()).running()
    if head is None:
        print("local Ray: not running")
        return EXIT_JOB_FAILED
    print(f"local Ray: running (pid {head.pid}), Jobs API at {head.jobs_address}")
    return EXIT_OK


# -- entry point -----------------------------------------------------------------------------
def _split_entrypoint_args(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, entrypoint_args = _split_entrypoint_args(argv)
    try:
        args = build_parser().parse_args(own)
        if entrypoint_args and args.verb != "submit":
            raise DriverError(f"{PROG} {args.verb}: arguments after `--` are only for submit")
        args.entrypoint_args = entrypoint_args
        return int(args.func(args))
    except DriverError as e:
        say(f"error: {e.message}")
        return e.exit_code
    except KeyboardInterrupt:
        say("\ninterrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
