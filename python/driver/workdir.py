"""Turn what the user passed to ``submit`` into a working directory and an entrypoint."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from driver.errors import DriverError
from driver.yamlfile import load_mapping

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
    if not path.is_file():  # a FIFO, a socket, a device: nothing Python could run from there
        raise DriverError(f"{target} is not a regular file (expected a Python script)")
    return Submission(path.resolve().parent, path.name, tuple(args))


RUNTIME_ENV_FILE = "runtime_env.yaml"
"""Read from the job's folder when present: the parts of Ray's runtime_env a job may declare."""
RUNTIME_ENV_KEYS = ("py_modules", "pip", "env_vars")


@dataclass(frozen=True)
class RuntimeEnvSpec:
    """What a job's folder declares for its runtime environment (Ray's own key names).

    ``py_modules`` are local folders, relative to the file, uploaded with the job and importable
    by their folder name on every node (how the examples share their training harness).
    """

    source: Path | None = None
    py_modules: tuple[Path, ...] = ()
    pip: tuple[str, ...] = ()
    env_vars: dict[str, str] = field(default_factory=dict)


def load_runtime_env(path: Path) -> RuntimeEnvSpec:
    """Read a runtime_env.yaml; every error is one line naming the file."""
    data = load_mapping(path, "runtime env", RUNTIME_ENV_KEYS)
    modules, pip, env_vars = (
        data.get("py_modules", []),
        data.get("pip", []),
        data.get("env_vars", {}),
    )
    if not (isinstance(modules, list) and all(isinstance(m, str) for m in modules)):
        raise DriverError(f"{path}: py_modules must be a list of folders")
    if not (isinstance(pip, list) and all(isinstance(p, str) and p for p in pip)):
        raise DriverError(f"{path}: pip must be a list of requirements")
    if not (isinstance(env_vars, dict) and all(isinstance(v, str) for v in env_vars.values())):
        raise DriverError(f"{path}: env_vars must map names to strings")
    folders = []
    for m in modules:
        folder = (path.parent / m).resolve()
        if not folder.is_dir():
            raise DriverError(f"{path}: py_modules entry {m!r} is not a folder ({folder})")
        folders.append(folder)
    return RuntimeEnvSpec(
        path, tuple(folders), tuple(pip), {str(k): v for k, v in env_vars.items()}
    )


def runtime_env_for(submission: Submission, explicit: str | None) -> RuntimeEnvSpec:
    """``--runtime-env FILE`` if given, else the job folder's runtime_env.yaml, else nothing."""
    if explicit is not None:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise DriverError(f"--runtime-env: no such file: {explicit}")
        return load_runtime_env(path)
    default = submission.working_dir / RUNTIME_ENV_FILE
    return load_runtime_env(default) if default.is_file() else RuntimeEnvSpec()
