"""A gymnasium env whose simulator is a separate process rendering with OpenGL into an X display:
the pattern the Malmo project used for Minecraft, with miniworld (Farama) as the simulator.

Each ``PixelsEnv``:

- starts its simulator (``simulator.py``) as a child process listening on 127.0.0.1 on a port
  derived from the env runner's ``worker_index`` and the env's slot in its process
  (``port_for``): every env on a node gets its own port (a taken port, e.g. another job's, moves
  the env to its next slot);
- renders into the node's display (``DISPLAY``, ``:99`` on the cluster's nodes); with no
  ``DISPLAY`` it starts a private ``Xvfb`` (what ``xvfb-run -a`` does) and, if there is no Xvfb
  either, fails with one line (``NoDisplay``);
- restarts a simulator that crashed: the episode it was in ends (``truncated``, with
  ``info["simulator_restarted"]``) and the next one runs on the new process;
- ends its simulator (and its private Xvfb) on ``close()``; if the env runner's process dies
  instead, its children get SIGTERM from the kernel (``PR_SET_PDEATHSIG``) and the simulator also
  ends when its connection closes or its parent changes.

Observations are float32 frames in [0, 1] (``size x size x 3``): what RLlib's default CNN
expects.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Client
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from simulator import no_delay

SIMULATOR = Path(__file__).resolve().with_name("simulator.py")
BASE_PORT = 20000
"""First simulator port: above Ray's worker ports (10002-19999 by default) and below Linux's
ephemeral range (32768-60999), like Malmo's 10000+ range but out of Ray's way."""
SLOTS_PER_RUNNER = 16
"""Ports per env runner: worker_index w owns BASE_PORT + 16 w ... + 15."""
PORT_TAKEN = 98
"""simulator.py's exit code when its port is in use."""
DEFAULT_TASK = "MiniWorld-OneRoom-v0"
START_TIMEOUT_S = 60.0
"""How long a simulator may take to open its display and world (llvmpipe compiles shaders)."""
MAX_RESTARTS = 5
"""Restarts in a row after which the env gives up (its env runner then fails and is restarted)."""
_PR_SET_PDEATHSIG = 1

_slots = itertools.count()
"""This process's envs, in the order they were made (sub-envs of one env runner share its
worker_index, so this tells them apart)."""


class NoDisplay(RuntimeError):
    """No X display can be had; its message is one line."""


class SimulatorError(RuntimeError):
    """The simulator could not start; its message is one line."""


def port_for(worker_index: int, slot: int, base: int = BASE_PORT) -> int:
    """The simulator port of env ``slot`` in env runner ``worker_index`` (0: the local one)."""
    if not 0 <= slot < SLOTS_PER_RUNNER:
        raise SimulatorError(f"env slot {slot} out of range: at most {SLOTS_PER_RUNNER} per runner")
    port = base + worker_index * SLOTS_PER_RUNNER + slot
    if port > 32767:
        raise SimulatorError(
            f"worker_index {worker_index} puts the simulator port at {port}, in Linux's "
            "ephemeral range: use fewer env runners per job or a lower base_port"
        )
    return port


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def display_problem() -> str | None:
    """Why no display can be had here (one line), or None: a check for a job's entrypoint."""
    if os.environ.get("DISPLAY") or shutil.which("Xvfb"):
        return None
    return (
        "pixels: no X display: DISPLAY is unset and Xvfb is not installed "
        "(apt-get install xvfb, or run under xvfb-run)"
    )


class PrivateXvfb:
    """An Xvfb of this env's own on the first free display number (Xvfb -displayfd)."""

    def __init__(self, size: int) -> None:
        problem = display_problem()
        if problem:
            raise NoDisplay(problem)
        read, write = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [
                    shutil.which("Xvfb") or "Xvfb",
                    "-displayfd",
                    str(write),
                    "-screen",
                    "0",
                    f"{max(size, 64)}x{max(size, 64)}x24",
                    "-nolisten",
                    "tcp",
                ],
                pass_fds=(write,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        finally:
            os.close(write)
        try:
            number = b""
            deadline = time.monotonic() + 20
            while not number.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([read], [], [], left)[0]:
                    raise NoDisplay("pixels: the private Xvfb did not start within 20 s")
                chunk = os.read(read, 16)
                if not chunk:
                    raise NoDisplay(f"pixels: the private Xvfb exited ({self.proc.wait()})")
                number += chunk
        except BaseException:
            self.close()
            raise
        finally:
            os.close(read)
        self.display = f":{int(number)}"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class PixelsEnv(gym.Env):
    """miniworld through a simulator process; ``env_config``: ``task`` (default
    MiniWorld-OneRoom-v0), ``size`` (84), ``base_port`` (20000)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        # RLlib's EnvContext is a dict carrying worker_index as an attribute; a plain dict may
        # carry it as a key.
        worker_index = getattr(config, "worker_index", None)
        config = dict(config or {})
        self.worker_index = int(
            config.get("worker_index", 0) if worker_index is None else worker_index
        )
        self.task = str(config.get("task", DEFAULT_TASK))
        self.size = int(config.get("size", 84))
        self.base_port = int(config.get("base_port", BASE_PORT))
        self.slot = next(_slots)
        self.restarts = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Any = None
        self._xvfb: PrivateXvfb | None = None
        self._log = tempfile.NamedTemporaryFile(prefix="pixels-simulator-", suffix=".log")  # noqa: SIM115
        self._closed = False
        display = os.environ.get("DISPLAY")
        if not display:
            self._xvfb = PrivateXvfb(self.size)
            display = self._xvfb.display
        self.display = display
        try:
            ready = self._start()
        except BaseException:
            self.close()
            raise
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.size, self.size, 3), np.float32)
        self.action_space = gym.spaces.Discrete(ready["actions"])

    # -- the simulator process --------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def _start(self) -> dict[str, Any]:
        """Start the simulator on this env's port (the next slot's if taken); its ready message."""
        while True:
            self.port = port_for(self.worker_index, self.slot, self.base_port)
            try:
                return self._launch()
            except _PortTaken:
                self.slot += 1

    def _launch(self) -> dict[str, Any]:
        key = secrets.token_hex(16)
        env = {
            **os.environ,
            "DISPLAY": self.display,
            "PIXELS_SIMULATOR_KEY": key,
            "LP_NUM_THREADS": os.environ.get("LP_NUM_THREADS", "1"),  # llvmpipe: one core
        }
        self._log.seek(0)
        self._log.truncate()
        self._proc = subprocess.Popen(
            [
                sys.executable,
                str(SIMULATOR),
                "--port",
                str(self.port),
                "--task",
                self.task,
                "--size",
                str(self.size),
                "--parent",
                str(os.getpid()),
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            code = self._proc.poll()
            if code == PORT_TAKEN:
                raise _PortTaken
            if code is not None:
                raise SimulatorError(f"pixels: the simulator exited ({code}): {self._last_line()}")
            try:
                self._conn = Client(("127.0.0.1", self.port), authkey=key.encode())
                no_delay(self._conn)
                break
            except (ConnectionRefusedError, FileNotFoundError):
                if time.monotonic() > deadline:
                    self._stop()
                    raise SimulatorError(
                        f"pixels: the simulator did not listen on port {self.port} within "
                        f"{START_TIMEOUT_S:.0f} s"
                    ) from None
                time.sleep(0.05)
        left = max(1.0, deadline - time.monotonic())
        if not self._conn.poll(left):
            self._stop()
            raise SimulatorError(f"pixels: the simulator did not answer within {left:.0f} s")
        message = self._conn.recv()
        if message[0] != "ready":
            self._stop()
            raise SimulatorError(f"pixels: the simulator failed on {self.display}: {message[1]}")
        return dict(message[1])

    def _last_line(self) -> str:
        self._log.flush()
        lines = Path(self._log.name).read_text(errors="replace").strip().splitlines()
        return lines[-1] if lines else "no output"

    def _stop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError, EOFError):
                self._conn.send(("close", None))
            with contextlib.suppress(OSError):
                self._conn.close()
            self._conn = None
        if self._proc is not None:
            try:
                self._proc.wait(2)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def _restart(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
        self._stop()
        self.restarts += 1
        if self.restarts > MAX_RESTARTS:
            raise SimulatorError(
                f"pixels: the simulator crashed {MAX_RESTARTS} times in a row: {self._last_line()}"
            )
        self._start()

    def _call(self, kind: str, arg: Any) -> tuple[Any, ...]:
        assert self._conn is not None
        self._conn.send((kind, arg))
        reply = self._conn.recv()
        if reply[0] == "error":
            raise SimulatorError(f"pixels: the simulator refused {kind}: {reply[1]}")
        return tuple(reply)

    # -- gymnasium ------------------------------------------------------------------------------
    def _frame(self, obs: np.ndarray) -> np.ndarray:
        return obs.astype(np.float32) / 255.0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if self._closed:
            raise SimulatorError("pixels: reset() after close()")
        for _ in range(MAX_RESTARTS + 1):
            try:
                _, obs, info = self._call("reset", seed)
                self.restarts = 0
                return self._frame(obs), info
            except (EOFError, OSError, AssertionError):
                self._restart()
        raise SimulatorError("pixels: the simulator keeps failing at reset")

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        try:
            _, obs, reward, terminated, truncated, info = self._call("step", int(action))
        except (EOFError, OSError, AssertionError):
            # The simulator crashed mid-episode: a new one starts, this episode ends here.
            self._restart()
            _, obs, info = self._call("reset", None)
            return self._frame(obs), 0.0, False, True, {**info, "simulator_restarted": True}
        self.restarts = 0
        return self._frame(obs), reward, terminated, truncated, info

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop()
        if self._xvfb is not None:
            self._xvfb.close()
            self._xvfb = None
        self._log.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


class _PortTaken(Exception):
    pass
