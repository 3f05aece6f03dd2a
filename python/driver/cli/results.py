"""``results download|runs|plot``, and reading a results store (Blob storage) with no cluster."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from driver import layout
from driver.cli.options import Verbs, open_cluster, verb
from driver.cli.output import byte_bar, listed, plural, say, shown, size, terminal_safe
from driver.errors import EXIT_OK, DriverError
from driver.jobs import check_submission_id
from driver.store import (
    RESULTS_URL_ENV,
    NoRun,
    Store,
    StoreDownload,
    StoreUrl,
    tune_experiment,
    url_from,
)


def run_name(text: str) -> str:
    """A run's id (a submission id), or a Tune experiment as ``ray_results/EXPERIMENT``."""
    if (experiment := tune_experiment(text)) is not None:
        return experiment
    try:
        return check_submission_id(text)
    except ValueError as e:
        raise DriverError(f"{text!r}: {e}") from None


def results_url_arg(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--results-url",
        metavar="URL",
        help=f"{what} the results store, with no cluster: the deployment's output results_url "
        f"(https://ACCOUNT.blob.core.windows.net/results; env {RESULTS_URL_ENV}; az login)",
    )


def add_download(verbs: Verbs, name: str) -> None:
    p = verb(
        verbs,
        name,
        "Bring a job's results and checkpoints back from the head.",
        f"Copy {layout.RESULTS_DIR}/ID on the head to DIR/ID over SFTP, skipping files "
        "already there with the same size (local Ray: say where they are). With a results "
        "store, read the run's published files and last checkpoint from Blob storage instead, "
        "with no cluster, resuming a partial download.",
    )
    p.add_argument(
        "submission_id",
        metavar="ID",
        type=run_name,
        help="the job's id; with a results store also a Tune experiment, "
        "ray_results/EXPERIMENT (to DIR/ray_results/EXPERIMENT)",
    )
    p.add_argument(
        "--results",
        default="results",
        metavar="DIR",
        help="local folder (default: results)",
    )
    results_url_arg(p, "download from")
    p.add_argument(
        "--plot",
        action="store_true",
        help="then draw its learning curve to DIR/ID/curve.png (as results plot)",
    )
    p.set_defaults(func=cmd_download)


def add_plot(verbs: Verbs, name: str) -> None:
    p = verb(
        verbs,
        name,
        "Draw learning curves from runs' progress.csv.",
        "Draw the mean episode return against env steps and against training time, one line "
        "per run, from each run's own progress.csv (written by the examples' harness), and "
        "save it as a PNG. Runs resumed from another carry its rows, so their curve is whole. "
        "With a results store (--results-url or its env), RUN is a run's id there (a folder "
        "that exists here is still read as a folder unless --results-url is given).",
        cluster=False,
    )
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="a run's results folder (results/SUBMISSION_ID), or with a results store its "
        "submission id; or several",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="the PNG to write (default: RESULTS_DIR/curve.png for one run folder, "
        "SUBMISSION_ID.png for one run in the store, curves.png for several)",
    )
    results_url_arg(p, "read progress.csv from")
    p.set_defaults(func=cmd_plot)


def add_runs(verbs: Verbs, name: str) -> None:
    p = verb(
        verbs,
        name,
        "List the runs in the results store (Blob storage), with no cluster.",
        "List the runs the jobs mirrored to the results store: one line each with the run's "
        "id, its last published checkpoint and iteration, the time of its last write and its "
        "size; and the Tune experiments in the cluster storage (ray_results/EXPERIMENT, with "
        "their trial count). Reads the store with your Azure credential (az login); works "
        "after the cluster is down or destroyed.",
        cluster=False,
    )
    results_url_arg(p, "list")
    p.add_argument("--json", action="store_true", help="print the runs as JSON")
    p.set_defaults(func=cmd_runs)


def need_store(args: argparse.Namespace) -> StoreUrl:
    found = url_from(args.results_url)
    if found is None:
        raise DriverError(
            f"no results store given: pass --results-url URL or set {RESULTS_URL_ENV} (the "
            "cluster's deployment output results_url)"
        )
    return found


def plot_runs(runs: list[Path], output: Path | None) -> None:
    """Plot and say what was drawn (also used by ``download --plot``)."""
    from driver.plot import plot

    drawn = plot(runs, output)
    points = sum(len(c.returns) for c in drawn.curves)
    say(f"Wrote {drawn.output}: {plural(len(drawn.curves), 'run')}, {plural(points, 'point')}")


def cmd_plot(args: argparse.Namespace) -> int:
    output = Path(args.output) if args.output else None
    url = url_from(args.results_url)
    stored = [
        r for r in args.runs if url is not None and (args.results_url or not Path(r).is_dir())
    ]
    if not stored:
        plot_runs([Path(r) for r in args.runs], output)
        return EXIT_OK
    assert url is not None
    for run in stored:
        run_name(run)
    with tempfile.TemporaryDirectory(prefix="raydriver-plot-") as tmp, Store(url) as store:
        folders = []
        for run in args.runs:
            if run not in stored:
                folders.append(Path(run))
                continue
            experiment = store.experiment(run) if "/" in run else None
            if experiment is None:
                try:
                    folders.append(store.fetch_progress(run, Path(tmp) / run))
                    continue
                except NoRun as e:  # no harness run of that name: a Tune experiment's?
                    experiment = store.experiment_instead(run, e)
            # A Tune experiment: one line per trial.
            folders.extend(store.trial_progress(experiment, Path(tmp) / experiment))
        if output is None and len(stored) == len(args.runs) == 1:
            output = Path(f"{stored[0].rsplit('/', 1)[-1]}.png")
        plot_runs(folders, output)
    return EXIT_OK


def cmd_runs(args: argparse.Namespace) -> int:
    with Store(need_store(args)) as store:
        runs = store.runs()
        where = store.url.url
    if args.json:
        print(json.dumps([r.as_dict() for r in runs], indent=2))
        return EXIT_OK
    if not runs:
        say(f"No runs in {where}.")
        return EXIT_OK
    # Ids and checkpoints are the store's text: one field each, no terminal control, no line
    # breaks (a run id with "\n" would print a line of its own).
    ids = {r.id: shown(r.id, 200) for r in runs}
    width = max(len(i) for i in ids.values())
    for r in runs:
        checkpoint = shown(r.checkpoint, 100) if r.checkpoint else None
        published = (
            f"Tune experiment, {plural(r.trials, 'trial')}"
            if r.trials is not None
            else f"{checkpoint} (iteration {r.iteration})"
            if checkpoint and r.iteration is not None
            else checkpoint or "no checkpoint yet"
        )
        written = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.last_write.timestamp()))
        print(f"{ids[r.id]:<{width}}  {published:<36}  {written}  {size(r.size):>9}")
    sys.stdout.flush()
    return EXIT_OK


def download_from_store(url: StoreUrl, sid: str, results: Path) -> StoreDownload:
    """``download`` with a results store: the run's published files, into RESULTS/SID; a Tune
    experiment (``ray_results/NAME``, or NAME when no run has that id) into
    RESULTS/ray_results/NAME."""
    with Store(url) as store:
        experiment = store.experiment(sid) if "/" in sid else None
        if experiment is None:
            try:
                report = store.download(sid, results / sid, progress=byte_bar(f"downloading {sid}"))
            except NoRun as e:  # no harness run of that name: a Tune experiment's?
                experiment = store.experiment_instead(sid, e)
        if experiment is not None:
            report = store.download_experiment(
                experiment, results / experiment, progress=byte_bar(f"downloading {experiment}")
            )
    if report.trials is not None:
        without = [shown(t, 100) for t, checkpoint in report.trials if checkpoint is None]
        what = f"Tune experiment of {plural(len(report.trials), 'trial')}, " + (
            "each with its last complete checkpoint"
            if not without
            else f"{len(report.trials) - len(without)} with their last complete checkpoint, "
            f"none yet for {listed(without)}"
        )
    elif report.checkpoint:
        what = f"checkpoint {shown(report.checkpoint, 100)} (iteration {report.iteration})"
    else:
        what = "no checkpoint published yet"
    say(
        f"Downloaded {plural(report.fetched, 'file')} ({size(report.bytes_fetched)}) from "
        f"{report.source} to {report.destination}: {what}"
        + (f"; {report.resumed} resumed" if report.resumed else "")
        + (f"; {report.skipped} already there" if report.skipped else "")
    )
    if report.older:
        say(
            f"Left out {plural(report.older, 'file')} of older checkpoints "
            + (
                "(only each trial's last complete one is downloaded)"
                if report.trials is not None
                else "(published before; only the one latest.json names is downloaded)"
            )
        )
    if report.unpublished:
        say(
            f"Left out {plural(report.unpublished, 'file')} of checkpoints "
            + (
                "no result of their trial names yet (still being written, or the trial "
                "stopped while writing)"
                if report.trials is not None
                else "not published (newer than latest.json: still uploading, or their "
                "uploader stopped)"
            )
        )
    if report.left_out:
        say(
            f"Left out {plural(len(report.left_out), 'blob')} whose names are not plain "
            f"relative paths: {listed([repr(x) for x in report.left_out])}"
        )
    if report.unwritable:
        say(
            f"Left out {plural(len(report.unwritable), 'file')} this file system cannot hold "
            f"as named: {listed([shown(x, 200) for x in report.unwritable])}"
        )
    return report


def cmd_download(args: argparse.Namespace) -> int:
    sid = args.submission_id
    store = url_from(args.results_url)
    if store is not None:
        stored = download_from_store(store, sid, Path(args.results))
        if args.plot:
            plot_runs([stored.destination], None)
        return EXIT_OK
    if "/" in sid:
        raise DriverError(
            f"{terminal_safe(sid)} is a Tune experiment: it is read from the results store, "
            f"give --results-url URL (or set {RESULTS_URL_ENV})"
        )
    with open_cluster(args) as cluster:
        report = cluster.download(
            sid, Path(args.results) / sid, progress=byte_bar(f"downloading {sid}")
        )
    if report.in_place:
        say(f"Job {sid} ran on local Ray: its results are already here: {report.source}")
    else:
        say(
            f"Downloaded {plural(report.fetched, 'file')} ({size(report.bytes_fetched)}) from "
            f"{report.source} to {report.destination}"
            + (f"; {report.skipped} already there" if report.skipped else "")
        )
    if report.left_out:
        count = len(report.left_out)
        say(
            f"Left out {count} {'entry' if count == 1 else 'entries'} that are symlinks, "
            f"special files or not plain names: {listed(report.left_out)}"
        )
    if report.changed:
        say(
            f"Left out {plural(len(report.changed), 'file')} that changed on the head during the "
            f"download (gone, or no longer a regular file of the job's user): "
            f"{listed(report.changed)}; "
            "download again once the job has finished writing"
        )
    if args.plot:
        plot_runs([report.destination], None)
    return EXIT_OK
