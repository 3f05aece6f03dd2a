"""Helpers every kind of test shares: where the repository is, and running the driver the way a
user does, as a separate process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
FIXTURES = TESTS / "fixtures"


def run_driver(
    *args: str,
    home: Path,
    cwd: Path | None = None,
    timeout: float = 600,
    env: dict[str, str] | None = None,
    module: str = "driver",
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd or REPO,
        env={**os.environ, "RAYDRIVER_HOME": str(home), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def job_failure(r: subprocess.CompletedProcess[str], width: int = 300) -> str:
    """A failed ``submit``'s story for an assertion message: the job's last traceback, if it
    printed one, then the tail of its output and the driver's stderr, each line cut to
    ``width`` characters (an exception can carry a megabyte of arrays in its message)."""

    def cut(text: str) -> str:
        return "\n".join(
            line if len(line) <= width else line[:width] + f" ... ({len(line)} chars)"
            for line in text.splitlines()
        )

    out = r.stdout or ""
    start = out.rfind("Traceback (most recent call last)")
    traceback = cut(out[start:])[:6000] if start >= 0 else "(no traceback in the job's output)"
    end, stderr = cut(out)[-2000:], cut(r.stderr)[-2000:]
    return f"{traceback}\n--- output's end:\n{end}\n--- stderr:\n{stderr}"


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def run_benchmark(
    name: str,
    *args: str,
    timeout: float,
    home: Path | None = None,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """``benchmarks/NAME.py ARGS`` as its docstring says to run it (from the repository, as a
    separate process; with ``home``, the driver's home for the local Ray it submits to): the
    process, and every JSON object it printed on stdout, in order (each benchmark prints one,
    or one line per step and then the whole), with the lines that are not JSON left out."""
    p = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / f"{name}.py"), *args],
        cwd=REPO,
        env={
            **os.environ,
            **({"RAYDRIVER_HOME": str(home)} if home is not None else {}),
            **(env or {}),
        },
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return p, json_objects(p.stdout)


def json_objects(text: str) -> list[dict[str, Any]]:
    """The JSON objects in ``text`` that start a line (indented over many lines or on one)."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while at < len(text):
        end = text.find("\n", at)
        end = len(text) if end < 0 else end + 1
        if text.startswith("{", at):
            try:
                obj, stop = decoder.raw_decode(text, at)
            except json.JSONDecodeError:
                pass
            else:
                found.append(obj)
                at = stop
                continue
        at = end
    return found
