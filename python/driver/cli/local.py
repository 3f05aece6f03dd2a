"""``local start|stop|status``: the embedded default's Ray head."""

from __future__ import annotations

import argparse

from driver.cli.options import Parser, Verbs, count
from driver.cli.output import say
from driver.errors import EXIT_JOB_FAILED, EXIT_OK
from driver.localray import LocalRay
from driver.settings import HOME_ENV, driver_home


def register(verbs: Verbs) -> None:
    p = verbs.add_parser(
        "local",
        help="Start, stop or inspect the local Ray head (the default cluster).",
        description=(
            "The local Ray head takes the token for every request; its state lives in "
            f"${HOME_ENV} (default: $XDG_STATE_HOME/ray-azure-rl). Each Python environment has "
            "its own head, so jobs run in the environment of the driver that submits them."
        ),
    )
    local = p.add_subparsers(dest="local_verb", metavar="ACTION", parser_class=Parser)
    local.required = True
    lp = local.add_parser("start", help="Start the local Ray head (no-op if it is running).")
    lp.add_argument("--num-cpus", type=count, help="CPUs Ray may use (default: all)")
    lp.set_defaults(func=cmd_start)
    lp = local.add_parser("stop", help="Stop the local Ray head the driver started.")
    lp.set_defaults(func=cmd_stop)
    lp = local.add_parser("status", help="Say whether the local Ray head is running.")
    lp.set_defaults(func=cmd_status)


def cmd_start(args: argparse.Namespace) -> int:
    head, started = LocalRay(driver_home()).start(num_cpus=args.num_cpus, progress=say)
    say(
        ("Started" if started else "Already running:") + f" local Ray, Jobs API at "
        f"{head.jobs_address}, GCS at {head.gcs_address}"
    )
    return EXIT_OK


def cmd_stop(args: argparse.Namespace) -> int:
    say("Stopped local Ray." if LocalRay(driver_home()).stop() else "Local Ray was not running.")
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    local = LocalRay(driver_home())
    head = local.running()
    for other in LocalRay.others(driver_home()):
        say(
            f"(another local Ray runs for {other.prefix or 'another environment'}: pid {other.pid})"
        )
    if head is None:
        print(f"local Ray: not running (for {local.prefix})")
        return EXIT_JOB_FAILED
    print(
        f"local Ray: running (pid {head.pid}) for {local.prefix}, Jobs API at {head.jobs_address}"
    )
    return EXIT_OK
