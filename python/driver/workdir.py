"""Turn what the user passed to ``submit`` into a working directory and an entrypoint."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from driver.errors import DriverError

ENTRYPOINT_NAMES = ("train.py", "main.py", "__main__.py")
"""Looked for, in this order, when ``submit`` is given a folder."""


@dataclass(frozen=True)
class Submission:
    working_dir: Path
    script: str
    args: tuple[str, ...]

    @property
    def entrypoint(self) -> str:
        return shlex.join(["python", self.script, *self.args])


def resolve(target: str, args: list[str] | tuple[str, ...] = ()) -> Submission:
    """``train.py`` → its folder + ``python train.py``; a folder → its train.py/main.py."""
    path = Path(target).expanduser()
    if not path.exists():
        raise DriverError(f"no such file: {target} (expected a Python script or a folder with one)")
    if path.is_dir():
        for name in ENTRYPOINT_NAMES:
            if (path / name).is_file():
                return Submission(path.resolve(), name, tuple(args))
        expected = ", ".join(ENTRYPOINT_NAMES)
        raise DriverError(f"{target} is a folder with no entrypoint: expected one of {expected}")
    if path.suffix != ".py":
        raise DriverError(f"{target} is not a Python script (expected a .py file)")
    return Submission(path.resolve().parent, path.name, tuple(args))
