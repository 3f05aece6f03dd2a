"""``python -m driver``: submit RLlib jobs to a Ray cluster and bring the results back.

A thin layer: each verb is one function that parses nothing and prints everything; the work is
done by the modules it calls (discovery, ssh, remote, results, profiles, terraform). Library
code never prints.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import os
import re
import secrets
import shlex
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from driver import __version__, layout
from driver.errors import (
    EXIT_INTERRUPTED,
    EXIT_JOB_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    DriverError,
)
from driver.workdir import ENTRYPOINT_NAMES, Submission

PROG = "python -m driver"

EXIT_CODES_HELP = """exit codes:
  0    the job succeeded (or the command did what it was asked)
  1    the job failed or was stopped
  2    usage error, bad input, or the cluster could not be reached (SSH, host key,
       head not ready, token, Jobs API)
  130  interrupted with Ctrl-C (a job already submitted keeps running)"""

CLUSTER_HELP = """which cluster (first match wins):
  1. --head [USER@]HOST[:PORT], or $RAYDRIVER_HEAD
  2. --terraform-dir DIR: head_public_ip, admin_username from `terraform output -json`
  3. --resource-group RG --deployment NAME: headPublicIp, adminUsername from the ARM
     deployment's outputs (signed in with azure-identity's DefaultAzureCredential)
  4. the profile saved by `python -m driver use ...`
  5. otherwise local Ray on 127.0.0.1 (started by submit)"""

EPILOG = f"{CLUSTER_HELP}\n\n{EXIT_CODES_HELP}"
READY_TIMEOUT_ENV = "RAYDRIVER_READY_TIMEOUT"


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


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text}")
    return value


def _port(text: str) -> int:
    value = _non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a port 0-65535, got {value}")
    return value


def _job_id_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("submission_id", metavar="SUBMISSION_ID", help="the job's submission id")


def _add_cluster_options(p: argparse.ArgumentParser) -> None:
    """The options every verb that talks to a cluster takes (see CLUSTER_HELP for the order)."""
    from driver.discovery import (
        ARM_ENDPOINT_ENV,
        DEFAULT_ARM_ENDPOINT,
        DEFAULT_USER,
        HEAD_ENV,
        SUBSCRIPTION_ENV,
    )
    from driver.remote import DEFAULT_READY_TIMEOUT_S
    from driver.ssh import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_RETRIES

    g = p.add_argument_group("cluster (first match wins: see the order below)")
    g.add_argument(
        "--head",
        metavar="[USER@]HOST[:PORT]",
        help=f"the head's SSH address (user {DEFAULT_USER}, port 22 unless given; env {HEAD_ENV})",
    )
    g.add_argument(
        "--terraform-dir",
        metavar="DIR",
        help="find the head from `terraform output -json` in DIR (head_public_ip, admin_username)",
    )
    g.add_argument(
        "--resource-group",
        metavar="RG",
        help="with --deployment: find the head from an ARM deployment's outputs",
    )
    g.add_argument("--deployment", metavar="NAME", help="the ARM deployment's name")
    g.add_argument(
        "--subscription", metavar="ID", help=f"Azure subscription id (env {SUBSCRIPTION_ENV})"
    )
    g.add_argument(
        "--arm-endpoint",
        metavar="URL",
        help=f"Resource Manager endpoint, for sovereign clouds (env {ARM_ENDPOINT_ENV}; "
        f"default {DEFAULT_ARM_ENDPOINT})",
    )
    g = p.add_argument_group("SSH to the head")
    g.add_argument(
        "-i",
        "--identity",
        metavar="KEY",
        help="private key file (default: the SSH agent, then ~/.ssh/id_ed25519, id_ecdsa, "
        "id_rsa; with a saved profile, its key)",
    )
    g.add_argument(
        "--connect-timeout",
        type=_seconds,
        default=DEFAULT_CONNECT_TIMEOUT_S,
        metavar="S",
        help="seconds per SSH connection attempt, and for the Jobs API to answer "
        f"(default {DEFAULT_CONNECT_TIMEOUT_S:.0f})",
    )
    g.add_argument(
        "--retries",
        type=_non_negative_int,
        default=DEFAULT_RETRIES,
        metavar="N",
        help=f"retries when the head refuses or does not answer, with back-off 1, 2, 4… s "
        f"(default {DEFAULT_RETRIES})",
    )
    g.add_argument(
        "--ready-timeout",
        type=_seconds,
        default=None,
        metavar="S",
        help="how long to wait for a head that is still bootstrapping (env "
        f"{READY_TIMEOUT_ENV}; default {DEFAULT_READY_TIMEOUT_S:.0f})",
    )
    g.add_argument(
        "--strict-host-keys",
        action="store_true",
        help="refuse a head whose host key is not already known (default: trust it on first "
        "use, print its fingerprint and remember it)",
    )


def _verb(
    verbs: argparse._SubParsersAction,  # type: ignore[type-arg]
    name: str,
    help: str,
    description: str | None = None,
    cluster: bool = True,
) -> argparse.ArgumentParser:
    p = verbs.add_parser(
        name,
        help=help,
        description=description or help,
        epilog=EPILOG if cluster else EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if cluster:
        _add_cluster_options(p)
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description=(
            "Submit RLlib jobs to a Ray cluster through Ray's Jobs API, follow them and bring "
            "their results back. A remote cluster is reached over SSH (the Jobs API is "
            "tunnelled from the head's 127.0.0.1); with no cluster given, jobs run on a local "
            "Ray head that the driver starts on 127.0.0.1."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="COMMAND", parser_class=_Parser)
    verbs.required = True

    p = _verb(
        verbs,
        "submit",
        "Submit a script as a job and follow its logs.",
        "Upload the script's folder as the job's working directory (honouring .gitignore "
        "and .rayignore), run `python SCRIPT ARGS...` on the cluster's head and stream the "
        "logs until the job ends. Arguments for the script go after `--`. The job finds its "
        "results folder in $RAYDRIVER_RESULTS_DIR.",
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

    p = _verb(verbs, "status", "Show a job's status.")
    _job_id_arg(p)
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.set_defaults(func=cmd_status)

    p = _verb(verbs, "logs", "Print a job's logs.")
    _job_id_arg(p)
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    p.set_defaults(func=cmd_logs)

    p = _verb(verbs, "stop", "Stop a running job.")
    _job_id_arg(p)
    p.add_argument("--no-wait", action="store_true", help="do not wait for the job to stop")
    p.set_defaults(func=cmd_stop)

    p = _verb(verbs, "list", "List the cluster's jobs.")
    p.add_argument("--json", action="store_true", help="print the jobs as JSON")
    p.set_defaults(func=cmd_list)

    p = _verb(
        verbs,
        "download",
        "Bring a job's results and checkpoints back from the head.",
        f"Copy the job's results folder on the head ({layout.RESULTS_DIR}/"
        "SUBMISSION_ID) to DIR/SUBMISSION_ID over SFTP; files already there with the same "
        "size are skipped. For local Ray, say where the results already are.",
    )
    _job_id_arg(p)
    p.add_argument(
        "--results",
        default="results",
        metavar="DIR",
        help="local folder; the job's files go to DIR/SUBMISSION_ID (default: results)",
    )
    p.set_defaults(func=cmd_download)

    p = _verb(
        verbs,
        "dashboard",
        "Tunnel the Ray dashboard and TensorBoard to this machine until Ctrl-C.",
    )
    p.add_argument(
        "--port", type=_port, default=0, help="local port for the dashboard (default: any free)"
    )
    p.add_argument(
        "--tensorboard-port",
        type=_port,
        default=0,
        help="local port for TensorBoard (default: any free)",
    )
    p.set_defaults(func=cmd_dashboard)

    p = _verb(
        verbs,
        "ssh",
        "Open a shell on the head, or run one command there (after `--`).",
        "With no command: an interactive shell on the head. With `-- COMMAND...`: run it "
        "there and exit with its exit code. Works while the head is still bootstrapping.",
    )
    p.set_defaults(func=cmd_ssh)

    p = _verb(
        verbs,
        "use",
        "Save (or show, or forget) the cluster the other commands use by default.",
        "Remember the given cluster options (and -i) in the driver's profile, so later "
        "commands need none. With no options, show the saved profile. The cluster token is "
        "never saved: it stays on the head.",
    )
    p.add_argument("--forget", action="store_true", help="delete the saved profile")
    p.set_defaults(func=cmd_use)

    p = _verb(
        verbs,
        "up",
        "Create or update the cluster with `terraform apply` in --terraform-dir.",
        cluster=False,
    )
    _add_terraform_options(p)
    p.set_defaults(func=cmd_up)
    p = _verb(
        verbs,
        "down",
        "Delete the cluster with `terraform destroy` in --terraform-dir.",
        cluster=False,
    )
    _add_terraform_options(p)
    p.set_defaults(func=cmd_down)

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


def _add_terraform_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--terraform-dir", required=True, metavar="DIR", help="the Terraform configuration"
    )
    p.add_argument(
        "--var",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a Terraform input variable (repeatable)",
    )
    p.add_argument("--var-file", action="append", default=[], metavar="FILE", help="a .tfvars file")


# -- connecting --------------------------------------------------------------------------------
def _cluster_options(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from driver.discovery import ClusterOptions

    return ClusterOptions.from_flags(
        head=args.head,
        terraform_dir=args.terraform_dir,
        resource_group=args.resource_group,
        deployment=args.deployment,
        subscription=args.subscription,
        arm_endpoint=args.arm_endpoint,
    )


def _ready_timeout(args: argparse.Namespace) -> float:
    from driver.remote import DEFAULT_READY_TIMEOUT_S

    if args.ready_timeout is not None:
        return float(args.ready_timeout)
    text = os.environ.get(READY_TIMEOUT_ENV)
    if not text:
        return DEFAULT_READY_TIMEOUT_S
    try:
        return _seconds(text)
    except argparse.ArgumentTypeError as e:
        raise DriverError(f"${READY_TIMEOUT_ENV}: {e}") from None


class _RayImport:
    """Import Ray's Jobs SDK (~0.6 s) in a thread while the main thread reaches the cluster.

    The SSH handshake and the head's replies are mostly waiting, so the two overlap; the thread
    is always joined before the command goes on (or fails), so none is left running.
    """

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        if "ray.job_submission" not in sys.modules:
            self._thread = threading.Thread(target=self._run, name="driver-import-ray", daemon=True)
            self._thread.start()

    @staticmethod
    def _run() -> None:
        # A failure here resurfaces in the main thread's own import, with its message.
        with contextlib.suppress(BaseException):
            importlib.import_module("ray.job_submission")

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def _connect(args: argparse.Namespace, start_local: bool = False):  # type: ignore[no-untyped-def]
    from driver.cluster import connect
    from driver.remote import RemoteCluster
    from driver.ssh import SshOptions

    ray_import = _RayImport()
    try:
        cluster = connect(
            start_local=start_local,
            results_root=Path(getattr(args, "results", "results")),
            progress=say,
            options=_cluster_options(args),
            ssh_options=SshOptions(
                identity=Path(args.identity).expanduser() if args.identity else None,
                connect_timeout=args.connect_timeout,
                retries=args.retries,
                strict_host_keys=args.strict_host_keys,
            ),
            ready_timeout=_ready_timeout(args),
        )
    except BaseException:
        ray_import.join()
        raise
    try:
        if isinstance(cluster, RemoteCluster) and args.verb != "ssh":
            # The head starts its SFTP server while this process finishes importing Ray.
            cluster.session.prefetch_sftp()
        ray_import.join()
        _quiet_ray_logs()
    except BaseException:
        ray_import.join()
        cluster.close()
        raise
    return cluster


def _quiet_ray_logs() -> None:
    """Ray's client libraries log at INFO ("Uploading package ..."); the CLI speaks for itself.

    Ray configures its "ray" logger when first imported, so this runs after that import.
    """
    import ray.job_submission  # noqa: F401

    logging.getLogger("ray").setLevel(logging.WARNING)
    # The Jobs SDK pins its own logger to INFO ("WebSocket closed for job ...").
    logging.getLogger("ray.dashboard.modules.job.sdk").setLevel(logging.WARNING)


def _default_submission_id(submission: Submission) -> str:
    """``cartpole-20261121-153000-ab12`` for examples/cartpole/train.py: the folder names a job
    better than a generic script name does."""
    stem = Path(submission.script).stem
    if submission.script in ENTRYPOINT_NAMES:
        stem = submission.working_dir.name
    stem = re.sub(r"[^a-z0-9-]+", "-", stem.lower()).strip("-") or "job"
    return f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def _parse_pairs(pairs: list[str], flag: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or not key.replace("_", "a").isalnum():
            raise DriverError(f"{flag} expects KEY=VALUE, got {pair!r}")
        env[key] = value
    return env


def _parse_env(pairs: list[str]) -> dict[str, str]:
    return _parse_pairs(pairs, "--env")


def _bar(desc: str) -> Callable[[int, int], None]:
    """A byte progress bar on stderr (only on a terminal), as a ``progress(done, total)``."""
    from tqdm import tqdm

    # No monitor thread: it would outlive a bar abandoned by Ctrl-C.
    tqdm.monitor_interval = 0
    bar: Any = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(
                total=total,
                unit="B",
                unit_scale=True,
                desc=desc,
                file=sys.stderr,
                disable=not sys.stderr.isatty(),
                leave=False,
            )
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return progress


def _upload_progress() -> Callable[[int, int], None]:
    return _bar("uploading working dir")


def _with_hint(command: str, hint: str) -> str:
    return f"{PROG} {command}" + (f" {hint}" if hint else "")


def _next_steps(sid: str, hint: str = "") -> str:
    return "\n".join(
        [
            "Next:",
            f"  {_with_hint(f'logs {sid} --follow', hint)}",
            f"  {_with_hint(f'status {sid}', hint)}",
            f"  {_with_hint(f'stop {sid}', hint)}",
            f"  {_with_hint(f'download {sid}', hint)}",
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
        say(f"  follow: {_with_hint(f'logs {sid} --follow', hint)}")
        say(f"  stop:   {_with_hint(f'stop {sid}', hint)}")
        return EXIT_INTERRUPTED
    # Ray appends the job's last log lines to a failure message; they were just streamed.
    reason = info.message.splitlines()[0].rstrip(",: ") if info.message else ""
    reason = reason.split(", last available logs")[0]
    say(
        f"Job {sid} {info.status.lower()}"
        + (f": {reason}" if info.status != "SUCCEEDED" and reason else ".")
    )
    return _exit_code_for(info.status)


# -- job verbs -----------------------------------------------------------------------------------
def cmd_submit(args: argparse.Namespace) -> int:
    from driver.cluster import RESULTS_ENV
    from driver.workdir import resolve

    submission = resolve(args.script, args.entrypoint_args)
    env = _parse_env(args.env)
    sid = args.submission_id or _default_submission_id(submission)
    cluster = _connect(args, start_local=True)
    try:
        client = cluster.jobs()
        hint = cluster.cli_hint
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
            say(f"\nInterrupted while submitting; check with: {_with_hint(f'status {sid}', hint)}")
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
            return _follow(client, args.submission_id, cluster.cli_hint)
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


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def cmd_download(args: argparse.Namespace) -> int:
    from driver.cluster import RESULTS_ENV, LocalCluster

    sid = args.submission_id
    destination = Path(args.results) / sid
    cluster = _connect(args)
    try:
        if isinstance(cluster, LocalCluster):
            where = cluster.jobs().env_var(sid, RESULTS_ENV)
            if not where:
                raise DriverError(
                    f"job {sid} has no {RESULTS_ENV} (was it submitted by {PROG}?): no results "
                    "folder to point to"
                )
            if not Path(where).is_dir():
                raise DriverError(f"job {sid} wrote no results: {where} does not exist")
            say(f"Job {sid} ran on local Ray: its results are already here: {where}")
            return EXIT_OK
        report = cluster.download(sid, destination, progress=_bar(f"downloading {sid}"))
    finally:
        cluster.close()
    say(
        f"Downloaded {report.fetched} file{'s' if report.fetched != 1 else ''} "
        f"({_size(report.bytes_fetched)}) from {report.source} to {report.destination}"
        + (f"; {report.skipped} already there" if report.skipped else "")
    )
    return EXIT_OK


def cmd_dashboard(args: argparse.Namespace) -> int:
    from driver.cluster import LocalCluster

    cluster = _connect(args)
    try:
        if isinstance(cluster, LocalCluster):
            say(f"Ray dashboard (local Ray, no tunnel needed): {cluster.head.jobs_address}")
            return EXIT_OK
        shown = cluster.dashboard(
            {"Ray dashboard": args.port, "TensorBoard": args.tensorboard_port}
        )
        for name, url, down in shown:
            print(f"{name}: {url}" + (f"  (not running on the head: {down})" if down else ""))
        sys.stdout.flush()
        say(
            f"The dashboard asks for the cluster token ({layout.TOKEN_FILE} on the head). "
            "Press Ctrl-C to close the tunnel."
        )
        try:
            while cluster.alive():
                time.sleep(0.5)
        except KeyboardInterrupt:
            say("\nClosed the tunnel.")
            return EXIT_OK
        raise DriverError(f"the SSH connection to {cluster.head.endpoint} was lost")
    finally:
        cluster.close()


def cmd_ssh(args: argparse.Namespace) -> int:
    from driver.cluster import LocalCluster

    command = " ".join(args.entrypoint_args) if args.entrypoint_args else None
    cluster = _connect(args)
    try:
        if isinstance(cluster, LocalCluster):
            raise DriverError(
                "ssh needs a remote cluster: expected --head, --terraform-dir, "
                "--resource-group/--deployment or a saved profile"
            )
        return cluster.shell(command, sys.stdin, sys.stdout, sys.stderr)
    finally:
        cluster.close()


def cmd_use(args: argparse.Namespace) -> int:
    from driver import profiles
    from driver.discovery import resolve

    options = _cluster_options(args)
    if args.forget:
        path = profiles.profile_path()
        say(f"Forgot the saved profile {path}." if profiles.forget() else "No saved profile.")
        return EXIT_OK
    if not options.any() or options.head_from_env:
        saved = profiles.load()
        if not saved:
            say("No saved profile: commands use local Ray unless given a cluster.")
            return EXIT_OK
        print(json.dumps(saved, indent=2))
        return EXIT_OK
    target = resolve(options, None)  # fails now, not on the next command, if it cannot resolve
    profile = options.as_profile()
    if args.identity:
        key = Path(args.identity).expanduser()
        if not key.is_file():
            raise DriverError(f"-i: no such key file: {args.identity} (expected a private key)")
        profile["identity"] = str(key.resolve())
    path = profiles.save(profile)
    say(f"Saved to {path}: later commands use {target.head} ({target.source}).")
    return EXIT_OK


# -- infrastructure verbs ------------------------------------------------------------------------
def cmd_up(args: argparse.Namespace) -> int:
    from driver import terraform
    from driver.discovery import from_terraform

    variables = _parse_pairs(args.var, "--var")
    say(f"terraform init + apply in {args.terraform_dir} (its output follows)")
    terraform.apply(args.terraform_dir, variables, args.var_file)
    head = from_terraform(args.terraform_dir)
    hint = shlex.join(["--terraform-dir", args.terraform_dir])
    say(f"Cluster is up: head {head}. It bootstraps for a few minutes; the driver waits for it.")
    say(f"Next:\n  {PROG} submit examples/cartpole/train.py {hint}\n  {PROG} use {hint}")
    return EXIT_OK


def cmd_down(args: argparse.Namespace) -> int:
    from driver import terraform

    variables = _parse_pairs(args.var, "--var")
    say(f"terraform destroy in {args.terraform_dir} (its output follows)")
    terraform.destroy(args.terraform_dir, variables, args.var_file)
    say("Cluster deleted.")
    return EXIT_OK


# -- local Ray -----------------------------------------------------------------------------------
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


# -- entry point -------------------------------------------------------------------------------
TAKES_TRAILING_ARGS = ("submit", "ssh")


def _split_entrypoint_args(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def _quiet_library_logs() -> None:
    """paramiko logs a traceback for a refused channel, azure-identity every credential it tried:
    the driver reports what failed in one line instead."""
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    logging.getLogger("azure").setLevel(logging.CRITICAL)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _quiet_library_logs()
    own, entrypoint_args = _split_entrypoint_args(argv)
    try:
        args = build_parser().parse_args(own)
        if entrypoint_args and args.verb not in TAKES_TRAILING_ARGS:
            raise DriverError(
                f"{PROG} {args.verb}: arguments after `--` are only for submit and ssh"
            )
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
    except OSError as e:
        # The machine said no (a file, a permission, a port): one line, not a traceback.
        where = f": {e.filename}" if e.filename else ""
        say(f"error: {e.strerror or e}{where}")
        return EXIT_USAGE
