"""``python -m driver``: submit RLlib jobs to a Ray cluster and bring the results back.

One grammar, ``python -m driver NOUN VERB``: the verbs are grouped by what they act on
(:data:`GRAMMAR`: ``job``, ``cluster``, ``results``; ``local`` and ``image`` have their own
modules), as ``ray job submit|status|logs|stop|list`` and SkyPilot's ``sky start|stop|down``
are. The flat verbs of earlier releases stay as :data:`SHORTCUTS`: the same parser and handler
under the old name, left out of the top level's list of commands and listed in its epilog.

A thin layer: each verb is one function in the module of its group (:mod:`.jobs`,
:mod:`.cluster`, :mod:`.local`, :mod:`.results`), whose parser an ``add_VERB`` function next to it
builds; shared options live in :mod:`.options` and everything shown to a person in
:mod:`.output`. The work is done by the library modules they call, which never print. This
module maps errors to exit codes.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Iterator, Sequence

from driver.cli import cluster, completion, image, jobs, local, node, power, price, results
from driver.cli.options import EPILOG, HelpFormatter, Parser, Verbs, group
from driver.cli.output import PROG, say
from driver.errors import DriverError, run_main

Adder = Callable[[Verbs, str], None]

GRAMMAR: dict[str, tuple[str, dict[str, Adder]]] = {
    "job": (
        "Submit, follow, cancel and list jobs (as `ray job` does).",
        {
            "submit": jobs.add_submit,
            "status": jobs.add_status,
            "logs": jobs.add_logs,
            "cancel": jobs.add_cancel,
            "list": jobs.add_list,
        },
    ),
    "cluster": (
        "Create, start, show, price, reach and delete the cluster.",
        {
            "up": cluster.add_up,
            "down": cluster.add_down,
            "start": power.add_start,
            "status": jobs.add_cluster_status,
            "price": price.add_price,
            "use": cluster.add_use,
            "ssh": cluster.add_ssh,
            "exec": cluster.add_exec,
            "dashboard": cluster.add_dashboard,
        },
    ),
    "results": (
        "Bring a job's results back, list the results store's runs, plot learning curves.",
        {
            "download": results.add_download,
            "runs": results.add_runs,
            "plot": results.add_plot,
        },
    ),
}
"""Each group (noun) with its help and its verbs' parsers, in the order ``--help`` lists them."""

SHORTCUTS: dict[str, str] = {
    "submit": "job submit",
    "status": "job status",  # and without an id, cluster status
    "logs": "job logs",
    "stop": "job cancel",
    "list": "job list",
    "download": "results download",
    "runs": "results runs",
    "plot": "results plot",
    "up": "cluster up",
    "down": "cluster down",
    "start": "cluster start",
    "price": "cluster price",
    "use": "cluster use",
    "ssh": "cluster ssh",
    "exec": "cluster exec",
    "dashboard": "cluster dashboard",
}
"""The flat verbs of earlier releases and what they stand for: same options, same handler.
``status`` alone keeps its optional id (a job's status with one, the cluster's without)."""

_SHORTCUT_ADDERS: dict[str, Adder] = {"status": jobs.add_either_status}


def _shortcut_epilog() -> str:
    """The shortcuts by group, made from SHORTCUTS: ``stop (= cancel)`` where the name changed."""
    rows: dict[str, list[str]] = {noun: [] for noun in GRAMMAR}
    for old, new in SHORTCUTS.items():
        noun, name = new.split()
        rows[noun].append(old if old == name else f"{old} (= {name})")
    rows["cluster"].append("status without ID")
    lines = [f"  {noun + ':':<9}{', '.join(names)}" for noun, names in rows.items()]
    head = "shortcuts: the flat verbs of earlier releases, as `submit` for `job submit`"
    return "\n".join([head, *lines])


class _Hidden:
    """The top level's subparsers as a shortcut's adder sees them: the parser it adds is not
    listed among the commands (no ``help``) and its description says what it stands for."""

    def __init__(self, verbs: Verbs, stands_for: str) -> None:
        self._verbs, self._stands_for = verbs, stands_for

    def add_parser(self, name: str, **kwargs: object) -> argparse.ArgumentParser:
        kwargs.pop("help", None)
        kwargs["description"] = f"Shortcut of `{PROG} {self._stands_for}`. {kwargs['description']}"
        parser: argparse.ArgumentParser = self._verbs.add_parser(name, **kwargs)
        return parser


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


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = Parser(
        prog=prog,
        description=(
            "Submit RLlib jobs to a Ray cluster on Azure (over SSH) or to a local Ray head, "
            "follow them and bring their results back: COMMAND is a group and its verb."
        ),
        epilog=f"{_shortcut_epilog()}\n\n{EPILOG}",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action=_Version)
    verbs = parser.add_subparsers(dest="verb", metavar="COMMAND", parser_class=Parser)
    verbs.required = True
    for noun, (help, adders) in GRAMMAR.items():
        nested = group(verbs, noun, help)
        for name, add in adders.items():
            add(nested, name)
    local.register(verbs)
    image.register(verbs)
    completion.add_completion(verbs, "completion")
    node.register(verbs)
    for old, new in SHORTCUTS.items():
        noun, name = new.split()
        add = _SHORTCUT_ADDERS.get(old) or GRAMMAR[noun][1][name]
        add(_Hidden(verbs, new), old)
    return parser


def walk(
    parser: argparse.ArgumentParser, depth: int = 0
) -> Iterator[tuple[int, argparse.ArgumentParser]]:
    """Every parser of the tree, depth first in the parser's order: this one, then each
    command's (the shortcuts' too), with its depth."""
    yield depth, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from walk(sub, depth + 1)


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
            f"{getattr(args, 'prog', PROG)}: arguments after `--` are only for job submit, "
            "cluster ssh and cluster exec"
        )
    args.trailing = trailing
    return int(args.func(args))


def main(argv: Sequence[str] | None = None) -> int:
    """The entry point; tests call it in-process with ``argv``."""
    _quiet_library_logs()
    return run_main(lambda: _dispatch(list(sys.argv[1:] if argv is None else argv)), say)
