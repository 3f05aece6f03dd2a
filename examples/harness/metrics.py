"""progress.csv and TensorBoard event files, written by the job's main process as it trains."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from harness.runs import PROGRESS_COLUMNS


def flatten(result: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
    """Every finite number in RLlib's nested result dict, as ``a/b/c`` -> value."""
    for key, value in result.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from flatten(value, name + "/")
        elif isinstance(value, bool):
            continue
        elif isinstance(value, (int, float)) and math.isfinite(value):
            yield name, float(value)
        elif hasattr(value, "item") and getattr(value, "size", 0) == 1:  # numpy/torch scalars
            number = float(value.item())
            if math.isfinite(number):
                yield name, number


class ProgressWriter:
    """Appends one row per iteration to progress.csv (flushed each time: a killed job keeps
    every finished iteration) and logs every numeric result to TensorBoard."""

    def __init__(self, run: Path, earlier_rows: list[dict[str, str]]) -> None:
        self._file = (run / "progress.csv").open("w", newline="")
        self._csv = csv.DictWriter(self._file, fieldnames=list(PROGRESS_COLUMNS))
        self._csv.writeheader()
        self._csv.writerows(earlier_rows)
        self._file.flush()
        # tensorboardX comes with ray[rllib] (Tune logs through it too).
        from tensorboardX import SummaryWriter

        self._tb = SummaryWriter(logdir=str(run), flush_secs=10)

    def write(self, row: dict[str, Any], result: Mapping[str, Any]) -> None:
        self._csv.writerow({c: _cell(row.get(c)) for c in PROGRESS_COLUMNS})
        self._file.flush()
        step = int(row["env_steps"])
        for name, value in flatten(result):
            self._tb.add_scalar(name, value, global_step=step)
        self._tb.add_scalar("harness/episode_return_mean", _number(row), global_step=step)

    def close(self) -> None:
        self._file.close()
        self._tb.close()


def _number(row: dict[str, Any]) -> float:
    value = row.get("episode_return_mean")
    return float(value) if value is not None else float("nan")


def _cell(value: Any) -> str:
    """A CSV cell: numpy scalars as plain numbers, NaN and missing as empty."""
    if value is None:
        return ""
    if hasattr(value, "item"):  # numpy / torch scalars
        value = value.item()
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return str(value)
