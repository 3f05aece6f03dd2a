"""``completion bash|zsh|tcsh``: a shell completion script, made from the parser by shtab.

shtab writes a static script from the argparse tree, so a TAB runs no Python (argcomplete, the
alternative, runs the command on every TAB). The script completes ``raydriver``, the console
script with the same command line as ``python -m driver`` (a shell completes a command by its
first word, and ``python`` is not this one's).
"""

from __future__ import annotations

import argparse

from driver.cli.options import Verbs, verb
from driver.errors import EXIT_OK, DriverError

COMMAND = "raydriver"
"""pyproject.toml's [project.scripts] name for driver.cli:main (a test holds them equal)."""

SHELLS = ("bash", "zsh", "tcsh")
"""Shells shtab writes scripts for (a test holds them among shtab's SUPPORTED_SHELLS)."""

PATHS = {"FILE": "FILE", "SCRIPT": "FILE", "KEY": "FILE", "DIR": "DIRECTORY"}
"""Arguments whose metavar says they name a path: the shell completes files (or folders)."""

INSTALL = {
    "bash": f"{COMMAND} completion bash > ~/.local/share/bash-completion/completions/{COMMAND}",
    "zsh": f'{COMMAND} completion zsh > "${{fpath[1]}}/_{COMMAND}"',
    "tcsh": f"{COMMAND} completion tcsh > ~/.{COMMAND}.tcsh; echo 'source ~/.{COMMAND}.tcsh' >> "
    "~/.tcshrc",
}


def add_completion(verbs: Verbs, name: str) -> None:
    p = verb(
        verbs,
        name,
        "Print a shell completion script for the raydriver command.",
        f"Print a completion script for `{COMMAND}` (the same command line as `python -m "
        "driver`, installed with the package) made from this parser by shtab: every group, "
        "command and flag completes, and paths where a flag takes a file. Install it with:\n\n"
        + "\n".join(f"  {line}" for line in INSTALL.values()),
        cluster=False,
    )
    p.add_argument("shell", metavar="SHELL", choices=SHELLS, help=", ".join(SHELLS))
    p.set_defaults(func=cmd_completion)


def script(shell: str) -> str:
    """The completion script for ``shell``, for the parser ``raydriver`` runs."""
    try:
        import shtab
    except ImportError:
        raise DriverError(
            "completion needs shtab, which the driver's install brings: pip install shtab"
        ) from None
    from driver.cli import build_parser, walk

    parser = build_parser(prog=COMMAND)
    for _, p in walk(parser):
        for action in p._actions:
            path = PATHS.get(str(action.metavar))
            if path is not None:
                action.complete = getattr(shtab, path)  # type: ignore[attr-defined]
    return str(shtab.complete(parser, shell=shell))


def cmd_completion(args: argparse.Namespace) -> int:
    print(script(args.shell))
    return EXIT_OK
