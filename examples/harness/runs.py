"""A run's folder: where it is, what it holds, and finding an earlier run to resume.

One run = one folder (``$RAYDRIVER_RESULTS_DIR``, ``<results root>/<submission id>``):

    checkpoint/          the latest checkpoint (RLlib's save_to_path) + harness.json
    progress.csv         one row per training iteration (PROGRESS_COLUMNS)
    events.out.tfevents.* TensorBoard scalars (every numeric result, step = env steps)
    summary.json         the RESULT line's summary

Only the latest checkpoint is kept: it is written next to the old one and swapped in by
renames, so a job killed while saving still leaves one complete checkpoint behind.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS_ENV = "RAYDRIVER_RESULTS_DIR"
"""Set by ``python -m driver submit`` for every job (the driver's settings.RESULTS_ENV)."""
CHECKPOINT = "checkpoint"
PROGRESS_CSV = "progress.csv"
SUMMARY_JSON = "summary.json"
STATE_JSON = "harness.json"
"""Written last into a checkpoint: its presence marks the checkpoint complete."""

PROGRESS_COLUMNS = (
    "iteration",
    "env_steps",
    "episode_return_mean",
    "episode_len_mean",
    "episodes",
    "time_total_s",
    "iteration_time_s",
    "env_steps_per_s",
    "sample_s",
    "learn_s",
    "timestamp",
    "healthy_env_runners",
    "env_runner_restarts",
)
"""progress.csv's columns; ``python -m driver plot`` reads env_steps, time_total_s and
episode_return_mean. time_total_s counts training time over the run and the runs it resumes;
sample_s and learn_s are RLlib's sampling and learner-update timers (where an iteration's time
goes, e.g. local Ray against a cluster); healthy_env_runners and env_runner_restarts are RLlib's
fault-tolerance counts after the iteration (a runner lost with its node drops out of the first
and, once recreated, adds to the second)."""

SUBMISSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
"""The driver's submission id rule (driver/jobs.py), repeated because the nodes do not have the
driver package; tests/unit/test_harness.py holds the two together."""


def check_run(text: str) -> str:
    """``--resume RUN``: a path (has a ``/`` or starts with ``.``/``~``) or a submission id."""
    if not text:
        raise ValueError("expected a submission id or a path, got ''")
    if "/" in text or text.startswith((".", "~")):
        return text
    if not SUBMISSION_ID.match(text) or ".." in text:
        raise ValueError(
            f"expected a submission id (1-128 letters, digits, '_', '.' or '-' starting with a "
            f"letter or digit) or a path with a '/', got {text!r}"
        )
    return text


def results_dir(explicit: str | None, example: str) -> Path:
    """``--results-dir``, else ``$RAYDRIVER_RESULTS_DIR``, else ``results/<example>``."""
    chosen = explicit or os.environ.get(RESULTS_ENV) or str(Path("results") / example)
    return Path(chosen).expanduser().resolve()


def run_folder(run: str, this_run: Path) -> Path:
    """The folder ``--resume RUN`` names: a bare id sits next to this run's folder (the same
    results root, locally ``results/`` and on the head ``/var/lib/ray-cluster/results/``)."""
    if "/" in run or run.startswith((".", "~")):
        return Path(run).expanduser().resolve()
    return this_run.parent / run


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    state: dict[str, Any]
    """What the harness saved with it: iteration, env_steps, time_total_s, run."""


def latest_checkpoint(run: Path) -> Checkpoint:
    """The newest complete checkpoint in an earlier run's folder (or a checkpoint folder).

    Raises FileNotFoundError with a one-line reason when there is none.
    """
    if not run.is_dir():
        raise FileNotFoundError(f"no run folder {run} (expected an earlier run's results folder)")
    # A folder that is itself a checkpoint, then the run's latest, then the one a job killed
    # in the middle of a swap left behind.
    for candidate in (run, run / CHECKPOINT, run / f"{CHECKPOINT}.old"):
        state_file = candidate / STATE_JSON
        if state_file.is_file():
            try:
                state = json.loads(state_file.read_text())
            except (OSError, ValueError) as e:
                raise FileNotFoundError(f"unreadable checkpoint state {state_file}: {e}") from None
            return Checkpoint(candidate, state)
    raise FileNotFoundError(
        f"no complete checkpoint in {run} (expected {run / CHECKPOINT / STATE_JSON}; a run "
        "writes one every --checkpoint-every iterations and at the end)"
    )


def save_checkpoint(algo: Any, run: Path, state: dict[str, Any]) -> Path:
    """Save the algorithm as ``run/checkpoint``, replacing the previous one only once complete."""
    final = run / CHECKPOINT
    partial = run / f"{CHECKPOINT}.partial"
    old = run / f"{CHECKPOINT}.old"
    shutil.rmtree(partial, ignore_errors=True)
    algo.save_to_path(str(partial))
    (partial / STATE_JSON).write_text(json.dumps(state, indent=2) + "\n")
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
    partial.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def read_progress(path: Path, up_to_iteration: int) -> list[dict[str, str]]:
    """An earlier run's progress rows up to its checkpoint's iteration (later rows were not
    saved, so the resumed run redoes them)."""
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    kept = []
    for row in rows:
        try:
            if int(float(row.get("iteration") or 0)) <= up_to_iteration:
                kept.append({c: row.get(c, "") for c in PROGRESS_COLUMNS})
        except ValueError:
            continue
    return kept
