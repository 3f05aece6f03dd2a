"""``python -m driver``: submit RLlib jobs to a Ray cluster and bring the results back.

A thin layer: each verb is one function in the module of its group (:mod:`.jobs`,
:mod:`.cluster`, :mod:`.local`, :mod:`.results`), registered next to its parser; shared options
live in :mod:`.options` and everything shown to a person in :mod:`.output`. The work is done by the
library modules they call, which never print. This module maps errors to exit codes.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from driver.cli import cluster, image, jobs, local, node, power, price, results
from driver.cli.options import EPILOG, Parser
from driver.cli.output import PROG, say
from driver.errors import DriverError, run_main


class _Version(argparse.Action):
    """``--version``: argparse's own action, with the version read only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(
            option_strings,
            dest,
            nargs=0,
            default=argparse.SUPPRESS,
            help="show program's version number and exit",
        )

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        import driver

        print(f"{parser.prog} {driver.__version__}")  # stdout, as argparse's own action
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
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
    parser.add_argument("--version", action=_Version)
    verbs = parser.add_subparsers(dest="verb", metavar="COMMAND", parser_class=Parser)
    verbs.required = True
    jobs.register(verbs)
    cluster.register(verbs)
    power.register(verbs)
    price.register(verbs)
    image.register(verbs)
    local.register(verbs)
    node.register(verbs)
    results.register(verbs)
    return parser


def _split_trailing(argv: list[str]) -> tuple[list[str], list[str]]:
    """Arguments after the first ``--`` belong to the job (submit) or the remote command (ssh)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def _quiet_library_logs() -> None:
    """paramiko logs a traceback for a refused channel, azure-identity every credential it tried:
    the driver reports what failed in one line instead."""
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    logging.getLogger("azure").setLevel(logging.CRITICAL)


def _dispatch(argv: list[str]) -> int:
    if argv and argv[0] in node.ALIASES:  # the toolkit parses its own arguments
        return node.run_toolkit(
            argparse.Namespace(toolkit_verb=argv[0], rest=argv[1:], trailing=[])
        )
    own, trailing = _split_trailing(argv)
    args = build_parser().parse_args(own)
    if trailing and not getattr(args, "trailing_args", False):
        raise DriverError(
            f"{PROG} {args.verb}: arguments after `--` are only for submit, ssh and exec"
        )
    args.trailing = trailing
    return int(args.func(args))


def main(argv: Sequence[str] | None = None) -> int:
    """The entry point; tests call it in-process with ``argv``."""
    _quiet_library_logs()
    return run_main(lambda: _dispatch(list(sys.argv[1:] if argv is None else argv)), say)
