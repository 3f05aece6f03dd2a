"""examples/pixels: the simulator-per-env pattern against a real Xvfb and a real miniworld.

Each env starts ``simulator.py`` as a child process that renders with OpenGL (Mesa's llvmpipe)
into an X display; these tests check what the example's README promises of it: frames, ports,
the display it renders into, restarts, and that no simulator or Xvfb outlives its env.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest

from support import REPO

EXAMPLE = REPO / "examples" / "pixels"
sys.path.insert(0, str(EXAMPLE))

import pixels_env  # noqa: E402

XVFB = shutil.which("Xvfb")
"""From scripts/apt-packages.txt (xvfb), which scripts/test.sh installs."""


def gone(pid: int, within: float = 120.0) -> bool:
    """The process ended (a zombie counts as ended: only its parent can reap it)."""
    deadline = time.monotonic() + within
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def x_peers(pid: int) -> set[int]:
    """Pids at the other end of ``pid``'s unix-socket connections (its X server among them)."""
    out = subprocess.run(["ss", "-xpH"], capture_output=True, text=True, check=True).stdout
    inode_owner: dict[str, set[int]] = {}
    peer_of: dict[str, str] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 8:
            continue
        local, peer = parts[5], parts[7]
        pids = {int(p.split("=")[1]) for p in line.split(",") if p.startswith("pid=")}
        inode_owner.setdefault(local, set()).update(pids)
        peer_of[local] = peer
    peers: set[int] = set()
    for inode, owners in inode_owner.items():
        if pid in owners:
            peers |= inode_owner.get(peer_of[inode], set())
    return peers - {pid}


@pytest.fixture
def no_display(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)


@pytest.fixture
def node_display(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, int]]:
    """An Xvfb like the nodes' `:99`, started by the test, as DISPLAY."""
    assert XVFB, "no Xvfb: apt-get install xvfb (scripts/apt-packages.txt)"
    read, write = os.pipe()
    proc = subprocess.Popen(
        [str(XVFB), "-displayfd", str(write), "-screen", "0", "320x240x24", "-nolisten", "tcp"],
        pass_fds=(write,),
        stderr=subprocess.DEVNULL,
    )
    os.close(write)
    number = b""
    while not number.endswith(b"\n"):
        chunk = os.read(read, 16)
        assert chunk, "the test's Xvfb did not start"
        number += chunk
    os.close(read)
    display = f":{int(number)}"
    monkeypatch.setenv("DISPLAY", display)
    yield display, proc.pid
    proc.terminate()
    proc.wait(10)


def test_frames_are_float_in_0_1_of_the_right_shape_on_a_private_xvfb(no_display: None) -> None:
    env = pixels_env.PixelsEnv({"size": 84})
    try:
        assert env.display.startswith(":") and env._xvfb is not None
        obs, _ = env.reset(seed=0)
        assert obs.shape == (84, 84, 3) and obs.dtype == np.float32
        assert env.observation_space.contains(obs)
        assert 0.0 <= obs.min() < obs.max() <= 1.0  # a rendered room, not a blank frame
        assert env.action_space.n == 3  # OneRoom: turn left, turn right, move forward
        frames = [obs]
        for action in (0, 0, 2):
            obs, reward, *_ = env.step(action)
            assert obs.shape == (84, 84, 3) and isinstance(reward, float)
            frames.append(obs)
        assert not np.array_equal(frames[0], frames[1])  # turning changes the view
        again, _ = env.reset(seed=0)
        assert np.array_equal(again, frames[0])  # a seed fixes the world
    finally:
        env.close()


def test_renders_into_the_display_it_is_given_and_talks_to_that_xvfb(
    node_display: tuple[str, int],
) -> None:
    display, xvfb_pid = node_display
    env = pixels_env.PixelsEnv({})
    try:
        env.reset(seed=1)
        assert env._xvfb is None and env.display == display  # no private Xvfb
        assert environ_of(env.pid)["DISPLAY"] == display
        assert xvfb_pid in x_peers(env.pid)  # its X connection ends at that Xvfb
    finally:
        env.close()


def test_envs_of_one_process_and_of_two_runners_get_different_ports(
    node_display: tuple[str, int],
) -> None:
    from ray.rllib.env.env_context import EnvContext

    envs = [
        pixels_env.PixelsEnv(EnvContext({}, worker_index=1)),
        pixels_env.PixelsEnv(EnvContext({}, worker_index=1)),
        pixels_env.PixelsEnv(EnvContext({}, worker_index=2)),
    ]
    try:
        ports = [e.port for e in envs]
        assert len(set(ports)) == 3, ports
        assert all(pixels_env.BASE_PORT <= p < pixels_env.BASE_PORT + 48 for p in ports)
        assert ports[2] >= pixels_env.BASE_PORT + 2 * pixels_env.SLOTS_PER_RUNNER
        for e in envs:
            conns = psutil.Process(e.pid).net_connections(kind="tcp")
            assert any(c.laddr.port == e.port and c.laddr.ip == "127.0.0.1" for c in conns)
    finally:
        for e in envs:
            e.close()


def test_a_taken_port_moves_the_env_to_its_next_slot(node_display: tuple[str, int]) -> None:
    """Two processes with the same worker_index (another job on the node) do not collide."""
    import socket

    first_port = pixels_env.port_for(5, 0)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", first_port))
        taken.listen()
        env = pixels_env.PixelsEnv({"worker_index": 5})
        try:
            assert env.port != first_port and env.port == pixels_env.port_for(5, env.slot)
            env.reset(seed=0)
        finally:
            env.close()


def test_close_ends_the_simulator_and_the_private_xvfb(no_display: None) -> None:
    env = pixels_env.PixelsEnv({})
    env.reset(seed=0)
    assert env._xvfb is not None
    simulator, xvfb = env.pid, env._xvfb.proc.pid
    assert environ_of(simulator)["DISPLAY"] == env.display
    assert xvfb in x_peers(simulator)
    env.close()
    assert gone(simulator, within=0) and gone(xvfb, within=0)


def test_a_crashed_simulator_is_restarted_and_its_episode_truncated(
    node_display: tuple[str, int],
) -> None:
    env = pixels_env.PixelsEnv({})
    try:
        env.reset(seed=0)
        first = env.pid
        os.kill(first, signal.SIGKILL)
        obs, reward, terminated, truncated, info = env.step(2)
        assert (reward, terminated, truncated) == (0.0, False, True)
        assert info["simulator_restarted"] is True and obs.shape == (84, 84, 3)
        assert env.pid != first and gone(first)
        env.reset(seed=0)
        obs, *_ = env.step(2)  # the new simulator carries on
        assert obs.dtype == np.float32
    finally:
        env.close()


RUNNER = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import pixels_env
envs = [pixels_env.PixelsEnv({"worker_index": 3}) for _ in range(2)]
for e in envs:
    e.reset(seed=0)
print(json.dumps({"simulators": [e.pid for e in envs],
                  "xvfbs": [e._xvfb.proc.pid for e in envs if e._xvfb]}), flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("with_display", [False, True], ids=["private-xvfb", "node-display"])
def test_killing_the_env_runner_ends_its_simulators(
    with_display: bool, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    if with_display:
        request.getfixturevalue("node_display")
    else:
        monkeypatch.delenv("DISPLAY", raising=False)
    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(EXAMPLE)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert runner.stdout is not None
        pids = json.loads(runner.stdout.readline())
        assert len(pids["simulators"]) == 2 and len(pids["xvfbs"]) == (0 if with_display else 2)
        children = {p.pid for p in psutil.Process(runner.pid).children()}
        assert set(pids["simulators"]) | set(pids["xvfbs"]) <= children
    finally:
        runner.kill()  # as Ray kills an env runner: no close(), no clean-up code runs
        runner.wait()
    for pid in pids["simulators"] + pids["xvfbs"]:
        assert gone(pid), f"process {pid} outlived its env runner"


def test_without_display_or_xvfb_it_fails_with_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DISPLAY"}
    env["PATH"] = str(tmp_path)  # no Xvfb on it (python is called by its full path)
    make = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {str(EXAMPLE)!r})\n"
            "import pixels_env\ntry:\n    pixels_env.PixelsEnv({})\n"
            "except pixels_env.NoDisplay as e:\n    print(e)\n",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert make.returncode == 0, make.stderr
    assert make.stdout.splitlines() == [
        "pixels: no X display: DISPLAY is unset and Xvfb is not installed "
        "(apt-get install xvfb, or run under xvfb-run)"
    ]
    train = subprocess.run(
        [sys.executable, str(EXAMPLE / "train.py"), "--max-iterations", "1"],
        env={**env, "PYTHONPATH": str(REPO / "examples")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert train.returncode == 2
    assert train.stderr.splitlines() == [
        "error: pixels: no X display: DISPLAY is unset and Xvfb is not installed "
        "(apt-get install xvfb, or run under xvfb-run)"
    ]
    assert train.stdout == ""


def test_the_simulator_resource_is_the_one_the_workers_offer_per_cpu() -> None:
    """train.py's copy of the name (the nodes lack the driver package) is layout's, and the
    workers' `ray start` offers it with one unit per CPU; the head does not offer it."""
    from driver import layout
    from nodekit import render

    sys.path.insert(0, str(REPO / "examples"))
    import importlib.util

    spec = importlib.util.spec_from_file_location("pixels_train", EXAMPLE / "train.py")
    assert spec and spec.loader
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    assert train.SIMULATOR_RESOURCE == layout.SIMULATOR_RESOURCE
    start = render.document_files((render.rendered_dir() / "worker.yaml").read_text())[
        "/usr/local/bin/ray-cluster-start"
    ]
    head_start, worker_start = start.split("\nfi\n")
    assert '--resources="$RAY_WORKER_RESOURCES"' in worker_start
    assert "RAY_WORKER_RESOURCES" not in head_start
    # The bootstrap puts one slot per CPU under the pool's own resources (RAY_RESOURCES).
    bootstrap = render.document_files((render.rendered_dir() / "worker.yaml").read_text())[
        "/usr/local/sbin/ray-cluster-bootstrap"
    ]
    assert f'{{"{layout.SIMULATOR_RESOURCE}": int(sys.argv[1]), **json.loads(' in bootstrap
    assert '"$(nproc)" "$RAY_RESOURCES"' in bootstrap
    # ... run as it is: the pool's own resources over the slots, none given = one per CPU.
    import re

    [code] = re.findall(r"python3 -c '([^']+)' \"\$\(nproc\)\" \"\$RAY_RESOURCES\"", bootstrap)
    merged = [
        subprocess.run(
            [sys.executable, "-c", code, "4", given], capture_output=True, text=True, check=True
        ).stdout.strip()
        for given in ("", "{}", '{"simulator": 2, "big": 1}')
    ]
    sim = layout.SIMULATOR_RESOURCE
    assert merged == [f'{{"{sim}":4}}', f'{{"{sim}":4}}', f'{{"{sim}":2,"big":1}}']
    assert "pool=$WORKER_POOL${RAY_LABELS:+,$RAY_LABELS}" in bootstrap
