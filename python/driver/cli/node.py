"""``render`` and ``rehearse``: aliases for the node toolkit (``python -m nodekit``).

The client never imports the toolkit: these verbs run it as a child process with the same
interpreter and hand back its exit code, so a laptop's ``--help`` loads nothing of it and the
toolkit's own CLI stays the one definition of its options.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys

from driver.cli.options import Verbs
from driver.errors import DriverError

ALIASES = {
    "render": "Render the cloud-init documents (alias of `python -m nodekit render`).",
    "rehearse": "Boot a local rehearsal cluster (alias of `python -m nodekit rehearse`; root).",
}


def register(verbs: Verbs) -> None:
    for name, help in ALIASES.items():
        p = verbs.add_parser(name, help=help, description=help, add_help=False)
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(func=run_toolkit, toolkit_verb=name)


def run_toolkit(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("nodekit") is None:
        raise DriverError("the node toolkit (nodekit) is not installed with this driver")
    cmd = [sys.executable, "-m", "nodekit", args.toolkit_verb, *args.rest]
    if args.trailing:
        cmd += ["--", *args.trailing]
    return subprocess.call(cmd)
