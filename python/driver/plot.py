"""Learning curves from a run's own ``progress.csv`` (written by the examples' harness, or by
Ray Tune for each trial of an experiment: a folder of trial folders is drawn one line per trial).

The library part of ``python -m driver plot``: it reads, draws and saves, and returns what it
drew (the points of every line, taken back from the figure) so callers and tests can check the
picture against the data without reading pixels. It never prints.
"""

from __future__ import annotations

import csv
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from driver.errors import DriverError, one_line

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PROGRESS_CSV = "progress.csv"
STEPS, TIME, RETURN = "env_steps", "time_total_s", "episode_return_mean"
"""The columns a curve needs (examples/harness/runs.py writes them)."""
COLUMNS = {
    STEPS: (
        STEPS,
        "num_env_steps_sampled_lifetime",
        "env_runners/num_env_steps_sampled_lifetime",
        "timesteps_total",
    ),
    TIME: (TIME,),
    RETURN: (
        RETURN,
        "env_runners/episode_return_mean",
        "episode_reward_mean",
        "env_runners/episode_reward_mean",
    ),
}
"""Each column and, after the harness's name, what RLlib's results under Tune call it (the
new API stack's names first)."""


@dataclass(frozen=True)
class Curve:
    """One run's points: every progress.csv row that has a mean return."""

    label: str
    source: Path
    env_steps: tuple[float, ...]
    time_s: tuple[float, ...]
    returns: tuple[float, ...]


@dataclass(frozen=True)
class Drawn:
    """What :func:`plot` drew: per run, the (x, y) points of its line on each axis."""

    output: Path
    curves: tuple[Curve, ...]
    vs_env_steps: tuple[tuple[tuple[float, ...], tuple[float, ...]], ...]
    vs_time: tuple[tuple[tuple[float, ...], tuple[float, ...]], ...]


def _number(text: str | None) -> float:
    try:
        return float(text) if text not in (None, "") else math.nan
    except ValueError:
        return math.nan


def read_curve(run: Path) -> Curve:
    """A run folder's progress.csv as a curve; a bad folder or file is a one-line DriverError."""
    if not run.exists():
        raise DriverError(f"no such folder: {run} (expected a run's results folder)")
    if not run.is_dir():
        raise DriverError(f"{run} is not a folder (expected a run's results folder)")
    path = run / PROGRESS_CSV
    if not path.is_file():
        raise DriverError(f"no {PROGRESS_CSV} in {run} (written by the examples' harness)")
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            columns = reader.fieldnames or []
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise DriverError(f"cannot read {path}: {one_line(e)}") from None
    if not columns:
        raise DriverError(f"{path} is empty (the run finished no iteration)")
    found = {c: next((n for n in names if n in columns), None) for c, names in COLUMNS.items()}
    missing = [c for c, name in found.items() if name is None]
    if missing:
        raise DriverError(f"{path} has no column {', '.join(missing)} (columns: {columns})")
    steps_, time_, return_ = (str(found[c]) for c in (STEPS, TIME, RETURN))
    points = [
        (_number(r.get(steps_)), _number(r.get(time_)), _number(r.get(return_))) for r in rows
    ]
    points = [p for p in points if not any(math.isnan(v) for v in p)]
    if not points:
        raise DriverError(f"{path} has no row with a mean return yet ({len(rows)} rows)")
    steps, times, returns = zip(*points, strict=True)
    return Curve(run.resolve().name, path, steps, times, returns)


def trials(run: Path) -> list[Path]:
    """A Tune experiment's folder (no progress.csv of its own, trial folders with one) as its
    trial folders in name order; any other folder as itself."""
    if not run.is_dir() or (run / PROGRESS_CSV).exists():
        return [run]
    try:
        found = sorted(p for p in run.iterdir() if (p / PROGRESS_CSV).is_file())
    except OSError:
        return [run]
    return found or [run]


def default_output(runs: Sequence[Path]) -> Path:
    """One run: ``RUN/curve.png`` next to its data; several: ``curves.png`` here."""
    return runs[0] / "curve.png" if len(runs) == 1 else Path("curves.png")


def _save(fig: Figure, output: Path) -> None:
    """Write the PNG whole or not at all: into a hidden file next to it, renamed when complete
    (a full disk leaves no empty or truncated PNG). The folder must exist: a mistyped ``-o``
    path is an error, not a tree of new folders."""
    folder = output.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise DriverError(f"cannot write {output}: {folder} {what}")
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=f".{output.name}.", suffix=".tmp")
    except OSError as e:
        raise DriverError(f"cannot write {output}: {e.strerror or one_line(e)}") from None
    temporary = Path(name)
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format="png", dpi=100)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temporary, 0o666 & ~_umask())
        temporary.replace(output)
    except BaseException as e:
        temporary.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise DriverError(f"cannot write {output}: {e.strerror or one_line(e)}") from None
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def plot(runs: Sequence[Path], output: Path | None = None) -> Drawn:
    """Mean episode return vs env steps and vs training time, one line per run (per trial of a
    Tune experiment's folder), as a PNG."""
    if not runs:
        raise DriverError("no run folders given")
    curves = tuple(read_curve(t) for r in runs for t in trials(Path(r)))
    output = output or default_output([Path(r) for r in runs])
    if output.suffix.lower() != ".png":
        raise DriverError(f"{output}: expected a .png file name")

    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2), layout="constrained")
    by_steps, by_time = fig.subplots(1, 2, sharey=True)
    for c in curves:
        by_steps.plot(c.env_steps, c.returns, marker=".", label=c.label)
        by_time.plot(c.time_s, c.returns, marker=".", label=c.label)
    by_steps.set_xlabel("env steps")
    by_steps.set_ylabel("mean episode return")
    by_time.set_xlabel("training time (s)")
    for ax in (by_steps, by_time):
        ax.grid(alpha=0.3)
    by_steps.legend(fontsize="small")
    fig.suptitle("learning curve" + ("s" if len(curves) > 1 else f": {curves[0].label}"))
    _save(fig, output)

    def drawn(ax: object) -> tuple[tuple[tuple[float, ...], tuple[float, ...]], ...]:
        return tuple(
            (
                tuple(float(x) for x in line.get_xdata()),
                tuple(float(y) for y in line.get_ydata()),
            )
            for line in ax.get_lines()  # type: ignore[attr-defined]
        )

    return Drawn(output, curves, drawn(by_steps), drawn(by_time))
