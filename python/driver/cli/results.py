"""Result verbs: plot."""

from __future__ import annotations

import argparse
from pathlib import Path

from driver.cli.options import Verbs, verb
from driver.cli.output import plural, say
from driver.errors import EXIT_OK


def register(verbs: Verbs) -> None:
    p = verb(
        verbs,
        "plot",
        "Draw learning curves from runs' progress.csv.",
        "Draw the mean episode return against env steps and against training time, one line "
        "per run, from each run's own progress.csv (written by the examples' harness), and "
        "save it as a PNG. Runs resumed from another carry its rows, so their curve is whole.",
        cluster=False,
    )
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RESULTS_DIR",
        help="a run's results folder (results/SUBMISSION_ID), or several",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="the PNG to write (default: RESULTS_DIR/curve.png for one run, curves.png for "
        "several)",
    )
    p.set_defaults(func=cmd_plot)


def plot_runs(runs: list[Path], output: Path | None) -> None:
    """Plot and say what was drawn (also used by ``download --plot``)."""
    from driver.plot import plot

    drawn = plot(runs, output)
    points = sum(len(c.returns) for c in drawn.curves)
    say(f"Wrote {drawn.output}: {plural(len(drawn.curves), 'run')}, {plural(points, 'point')}")


def cmd_plot(args: argparse.Namespace) -> int:
    plot_runs([Path(r) for r in args.runs], Path(args.output) if args.output else None)
    return EXIT_OK
