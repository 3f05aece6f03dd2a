"""Options shared by several verbs, their value types, and opening the cluster they name."""

from __future__ import annotations

import argparse
import os
import textwrap
from collections.abc import Callable, Iterable
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
    TERRAFORM_SUBSCRIPTION_ENV,
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
  1    the job failed or was cancelled
  2    usage error, bad input, or the cluster could not be reached (SSH, host key, Jobs API)
  3    cluster up/price: Azure would refuse the cluster at its maximum size (quota, VM size)
  130  interrupted with Ctrl-C (a job already submitted keeps running)"""

EPILOG = f"{CLUSTER_ORDER}\n\n{EXIT_CODES_HELP}"
"""The top level's epilog; a command's own help points there (VERB_EPILOG), so it fits a screen."""

VERB_EPILOG = f"which cluster, exit codes: {PROG} --help"

Verbs = Any  # argparse._SubParsersAction, which typeshed keeps private

USAGE_OPTIONS = 4
"""A command with more optional flags than this shows them as ``[options]`` in its usage line
(they are listed below it): twelve cluster flags would fill five lines."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's layout, with a short usage line (required flags and arguments, the rest
    ``[options]``) and room for a flag's metavar before its help."""

    def __init__(self, prog: str, max_help_position: int = 30, **kwargs: Any) -> None:
        super().__init__(prog, max_help_position=max_help_position, **kwargs)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        """Paragraphs wrapped to the terminal, except a table (a paragraph with indented
        lines, as the exit codes), which is kept as written. A word is never split: a command
        (`ray health-check`) stays whole for the reader's search."""
        return "\n\n".join(
            p
            if any(ln[:1].isspace() for ln in p.splitlines())
            else textwrap.fill(
                " ".join(p.split()),
                width,
                initial_indent=indent,
                subsequent_indent=indent,
                break_on_hyphens=False,
                break_long_words=False,
            )
            for p in text.split("\n\n")
        )

    def add_usage(
        self,
        usage: str | None,
        actions: Iterable[argparse.Action],
        groups: Iterable[Any],
        prefix: str | None = None,
    ) -> None:
        actions, groups = list(actions), list(groups)
        optional = [a for a in actions if a.option_strings and not _required(a, groups)]
        if usage is None and len(optional) > USAGE_OPTIONS:
            rest = [a for a in actions if a not in optional]
            placeholder = argparse.Action([], "options", metavar="[options]")
            keep = [g for g in groups if all(a in rest for a in g._group_actions)]
            actions = [placeholder, *rest]
            groups = keep
        super().add_usage(usage, actions, groups, prefix)


def _required(action: argparse.Action, groups: Any) -> bool:
    return action.required or any(g.required and action in g._group_actions for g in groups)


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
        epilog=VERB_EPILOG,
        formatter_class=HelpFormatter,
    )
    p.set_defaults(prog=p.prog)  # for messages about the command as the user spelled it
    if cluster:
        add_cluster_options(p)
    return p


def group(verbs: Verbs, name: str, help: str, description: str | None = None) -> Verbs:
    """A noun's parser (``job``, ``cluster``, ...): the subparsers its verbs are added to."""
    p = verbs.add_parser(
        name, help=help, description=description or help, formatter_class=HelpFormatter
    )
    sub = p.add_subparsers(dest=f"{name}_verb", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    return sub


def job_id_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "submission_id", metavar="SUBMISSION_ID", type=submission_id, help="the job's id"
    )


def terraform_vars(p: argparse.ArgumentParser) -> None:
    """A Terraform configuration's inputs besides its own files (``cluster up|down``, ``price``)."""
    p.add_argument(
        "--var",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a Terraform input variable (repeatable)",
    )
    p.add_argument("--var-file", action="append", default=[], metavar="FILE", help="a .tfvars file")


SUBSCRIPTION_HELP = f"Azure subscription id (env {SUBSCRIPTION_ENV})"
ARM_ENDPOINT_HELP = (
    f"Resource Manager endpoint (env {ARM_ENDPOINT_ENV}; default {DEFAULT_ARM_ENDPOINT})"
)


def azure_options(
    g: Any, subscription: str = SUBSCRIPTION_HELP, endpoint: str = ARM_ENDPOINT_HELP
) -> None:
    """``--subscription`` and ``--arm-endpoint``: where a verb asks Resource Manager (read with
    :func:`subscription_of`, or for a cluster's head by the settings); ``g`` a parser or group."""
    g.add_argument("--subscription", metavar="ID", help=subscription)
    g.add_argument("--arm-endpoint", metavar="URL", help=endpoint)


def subscription_of(args: argparse.Namespace, terraform: bool) -> tuple[str | None, str | None]:
    """The subscription and Resource Manager endpoint to ask: the flags, then (with Terraform)
    ``$ARM_SUBSCRIPTION_ID``, then ``$AZURE_SUBSCRIPTION_ID`` and
    ``$AZURE_RESOURCE_MANAGER_ENDPOINT``."""
    names = (TERRAFORM_SUBSCRIPTION_ENV, SUBSCRIPTION_ENV) if terraform else (SUBSCRIPTION_ENV,)
    found = getattr(args, "subscription", None) or next(
        (os.environ[n] for n in names if os.environ.get(n)), None
    )
    return found, getattr(args, "arm_endpoint", None) or os.environ.get(ARM_ENDPOINT_ENV)


CLUSTER_GROUP = (
    f"which cluster (first match wins: these flags, ${HEAD_ENV}, `cluster use`'s profile, "
    "local Ray)"
)
"""settings.CLUSTER_ORDER in a line, so that a command's help fits a screen."""


def add_cluster_options(p: argparse.ArgumentParser) -> None:
    """The options of every verb that talks to a cluster (CLUSTER_ORDER says which wins); one
    line of help each, so the help of a verb with them fits a screen."""
    g = p.add_argument_group(CLUSTER_GROUP)
    g.add_argument(
        "--head",
        metavar="[USER@]HOST[:PORT]",
        help=f"the head's SSH address (user azureuser, port 22; env {HEAD_ENV})",
    )
    g.add_argument(
        "--terraform-dir", metavar="DIR", help="the head from `terraform output -json` in DIR"
    )
    g.add_argument(
        "--resource-group",
        metavar="RG",
        help="with --deployment: the head from an ARM deployment's outputs",
    )
    g.add_argument("--deployment", metavar="NAME", help="the ARM deployment's name")
    azure_options(
        g, endpoint=f"Resource Manager URL, for sovereign clouds (env {ARM_ENDPOINT_ENV})"
    )
    g = p.add_argument_group("SSH to the head")
    g.add_argument(
        "-i",
        "--identity",
        metavar="KEY",
        help="private key (default: the profile's, the SSH agent, ~/.ssh/id_*)",
    )
    g.add_argument(
        "--connect-timeout",
        type=timeout,
        metavar="S",
        help="seconds per SSH attempt and for the Jobs API to answer "
        f"(default {DEFAULT_CONNECT_TIMEOUT_S:.0f})",
    )
    g.add_argument(
        "--retries",
        type=retries,
        metavar="N",
        help=f"retries, with back-off 1, 2, 4… s (default {DEFAULT_RETRIES}, at most "
        f"{MAX_RETRIES})",
    )
    g.add_argument(
        "--ready-timeout",
        type=seconds,
        metavar="S",
        help=f"wait for a booting head (env {READY_TIMEOUT_ENV}; default "
        f"{DEFAULT_READY_TIMEOUT_S:.0f})",
    )
    g.add_argument(
        "--reconnect-timeout",
        type=seconds,
        metavar="S",
        help=f"reconnect this long (env {RECONNECT_TIMEOUT_ENV}; default "
        f"{DEFAULT_RECONNECT_TIMEOUT_S:.0f})",
    )
    g.add_argument(
        "--keep-connection",
        type=seconds,
        metavar="S",
        help=f"kept S s idle, 0: off (env {KEEP_CONNECTION_ENV}; default "
        f"{DEFAULT_KEEP_CONNECTION_S:.0f})",
    )
    g.add_argument(
        "--strict-host-keys",
        action="store_true",
        help="refuse an unknown host key (default: trust on first use and remember)",
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
