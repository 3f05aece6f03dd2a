"""Options shared by several verbs, their value types, and opening the cluster they name."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from driver import profiles
from driver.cli.output import PROG, say
from driver.cluster import Cluster
from driver.errors import EXIT_USAGE, DriverError
from driver.jobs import check_submission_id, preload_sdk, quiet_ray_logs
from driver.settings import (
    ARM_ENDPOINT_ENV,
    CLUSTER_ORDER,
    DEFAULT_ARM_ENDPOINT,
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_KEEP_CONNECTION_S,
    DEFAULT_READY_TIMEOUT_S,
    DEFAULT_RECONNECT_TIMEOUT_S,
    DEFAULT_RETRIES,
    HEAD_ENV,
    KEEP_CONNECTION_ENV,
    MAX_RETRIES,
    READY_TIMEOUT_ENV,
    RECONNECT_TIMEOUT_ENV,
    SUBSCRIPTION_ENV,
    Settings,
    parse_count,
    parse_retries,
    parse_seconds,
    parse_timeout,
    resolve,
)

if TYPE_CHECKING:
    from driver.discovery import Target

EXIT_CODES_HELP = """exit codes:
  0    the job succeeded (or the command did what it was asked)
  1    the job failed or was stopped
  2    usage error, bad input, or the cluster could not be reached (SSH, host key,
       head not ready, token, Jobs API)
  3    up/price: Azure would refuse the cluster at its maximum size (quota, VM size not
       offered or restricted in the region); up created nothing
  130  interrupted with Ctrl-C (a job already submitted keeps running)"""

EPILOG = f"{CLUSTER_ORDER}\n\n{EXIT_CODES_HELP}"

Verbs = Any  # argparse._SubParsersAction, which typeshed keeps private


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise DriverError(f"{self.prog}: {message} (see {self.prog} --help)", EXIT_USAGE)


def _type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type from a parser that raises ValueError with a readable message."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = parse.__name__
    return convert


seconds = _type(parse_seconds)
timeout = _type(parse_timeout)
count = _type(parse_count)
retries = _type(parse_retries)


def _port(text: str) -> int:
    value = parse_count(text)
    if value > 65535:
        raise ValueError(f"expected a port 0-65535, got {value}")
    return value


port = _type(_port)
submission_id = _type(check_submission_id)


def verb(
    verbs: Verbs, name: str, help: str, description: str | None = None, cluster: bool = True
) -> argparse.ArgumentParser:
    """A verb's parser; ``cluster`` adds the options that choose and reach a cluster."""
    p: argparse.ArgumentParser = verbs.add_parser(
        name,
        help=help,
        description=description or help,
        epilog=EPILOG if cluster else EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if cluster:
        add_cluster_options(p)
    return p


def job_id_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "submission_id", metavar="SUBMISSION_ID", type=submission_id, help="the job's id"
    )


def add_cluster_options(p: argparse.ArgumentParser) -> None:
    """The options of every verb that talks to a cluster (CLUSTER_ORDER says which wins)."""
    g = p.add_argument_group("cluster (first match wins: see the order below)")
    g.add_argument(
        "--head",
        metavar="[USER@]HOST[:PORT]",
        help=f"the head's SSH address (user azureuser, port 22 unless given; env {HEAD_ENV})",
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
        type=timeout,
        metavar="S",
        help="seconds per SSH connection attempt, and for the Jobs API to answer "
        f"(default {DEFAULT_CONNECT_TIMEOUT_S:.0f})",
    )
    g.add_argument(
        "--retries",
        type=retries,
        metavar="N",
        help="retries when the head refuses or does not answer, with back-off 1, 2, 4… s "
        f"(default {DEFAULT_RETRIES}, at most {MAX_RETRIES})",
    )
    g.add_argument(
        "--ready-timeout",
        type=seconds,
        metavar="S",
        help="how long to wait for a head that is still bootstrapping, and for its SSH after "
        "the driver started its VM (env "
        f"{READY_TIMEOUT_ENV}; default {DEFAULT_READY_TIMEOUT_S:.0f})",
    )
    g.add_argument(
        "--reconnect-timeout",
        type=seconds,
        metavar="S",
        help="when the connection to the head breaks while following a job, keep reconnecting "
        f"with back-off for this long (env {RECONNECT_TIMEOUT_ENV}; default "
        f"{DEFAULT_RECONNECT_TIMEOUT_S:.0f}); the job keeps running either way",
    )
    g.add_argument(
        "--keep-connection",
        type=seconds,
        metavar="S",
        help="keep the SSH connection and the Jobs API tunnel for the next commands until "
        f"idle for S seconds, as OpenSSH's ControlPersist does (env {KEEP_CONNECTION_ENV}; "
        f"default {DEFAULT_KEEP_CONNECTION_S:.0f}; 0: open one for this command only)",
    )
    g.add_argument(
        "--strict-host-keys",
        action="store_true",
        help="refuse a head whose host key is not already known (default: trust it on first "
        "use, print its fingerprint and remember it)",
    )


SETTINGS_OPTIONS = (
    "head",
    "terraform_dir",
    "resource_group",
    "deployment",
    "subscription",
    "arm_endpoint",
    "identity",
    "connect_timeout",
    "retries",
    "ready_timeout",
    "reconnect_timeout",
    "strict_host_keys",
    "keep_connection",
)
"""The options add_cluster_options adds, by their argparse names (= resolve's keywords)."""


def settings_from(args: argparse.Namespace) -> Settings:
    """The verb's options, with the environment and the saved profile under them."""
    given = {name: getattr(args, name) for name in SETTINGS_OPTIONS}
    return resolve(**given, load_profile=profiles.load)


HEAD_STARTED = "head_started"
"""Set on a command's arguments once it has started the head VM (``start``, or ``submit`` on a
stopped cluster): the connection then waits for the head's boot."""


def find_cluster(args: argparse.Namespace) -> Target:
    """The cluster the options name, found once per command (Terraform's outputs or the ARM
    deployment read here): a verb that needs it twice hands it to :func:`open_cluster`."""
    from driver.discovery import locate

    return locate(settings_from(args).cluster)


def open_cluster(
    args: argparse.Namespace, start_local: bool = False, target: Target | None = None
) -> Cluster:
    """Connect to the cluster the options name (``target``: as :func:`find_cluster` found it;
    found here when None); use the result in a ``with`` block.

    Ray's Jobs SDK is imported in a thread meanwhile: the SSH handshake is mostly waiting.
    """
    from driver.connect import connect

    settings = settings_from(args)
    preload = preload_sdk()
    try:
        cluster = connect(
            settings,
            start_local=start_local,
            results_root=Path(getattr(args, "results", "results")),
            progress=say,
            head_started=getattr(args, HEAD_STARTED, False),
            target=target,
        )
    finally:
        preload.join()
    try:
        cluster.warm_up()
        quiet_ray_logs()
    except BaseException:
        cluster.close()
        raise
    return cluster


def parse_pairs(pairs: list[str], flag: str) -> dict[str, str]:
    """``KEY=VALUE`` flags (``--env``, ``--var``) as a dict; keys are identifiers."""
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or not key.replace("_", "a").isalnum() or key[0].isdigit():
            raise DriverError(f"{flag} expects KEY=VALUE, got {pair!r}")
        env[key] = value
    return env


__all__ = ["PROG", "Parser"]
