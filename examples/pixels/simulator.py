"""The simulator process: one miniworld world, rendered with OpenGL into an X display and served
on a local TCP port, the way Malmo's Minecraft client serves one agent on its port.

``pixels_env.PixelsEnv`` starts one of these per env and talks to it through
``multiprocessing.connection`` (length-prefixed pickles, with a shared key so no other local
process can drive it):

    python simulator.py --port 20016 --task MiniWorld-OneRoom-v0 --size 84 --parent PID

The key comes in ``PIXELS_SIMULATOR_KEY`` (not on the command line, which every user can read).
Requests and answers:

    ("reset", seed)   -> ("obs", frame, info)
    ("step", action)  -> ("step", frame, reward, terminated, truncated, info)
    ("close", None)   -> the process ends

The first message after the connection is ``("ready", {...})`` with the action count and what
the simulator renders into, or ``("error", "one line")`` if the world could not be made (no
display, a missing GL library). Frames are uint8 ``size x size x 3``.

It ends by itself when its env goes away: the connection closing (the env runner's process
died, so the kernel closed its socket), its parent changing (the env runner was killed before it
connected), or the parent death signal ``pixels_env`` arranges. Exit codes: 0 after ``close``
or a lost connection, 98 when the port is taken, 3 for anything else before the connection.
"""

from __future__ import annotations

import argparse
import errno
import os
import socket
import sys
import threading
import time
from multiprocessing.connection import Listener
from typing import Any

KEY_ENV = "PIXELS_SIMULATOR_KEY"
PORT_TAKEN = 98
"""Exit code when the port is in use (EADDRINUSE's number): the env tries its next slot."""


def _watch_parent(parent: int) -> None:
    """Exit when the parent is gone (reparented): a backstop for the parent death signal."""
    while True:
        if os.getppid() != parent:
            os._exit(0)
        time.sleep(1.0)


def no_delay(conn: Any) -> None:
    """TCP_NODELAY on a connection's socket: a frame goes out as a 4-byte header and a body,
    and without it Nagle's algorithm holds the body's tail for the peer's delayed ACK (~40 ms
    a step)."""
    with socket.fromfd(conn.fileno(), socket.AF_INET, socket.SOCK_STREAM) as s:  # a dup
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return f"{type(e).__name__}: {text}"


def make_world(task: str, size: int) -> Any:
    """The miniworld env (imported here: pyglet opens the display at import)."""
    import gymnasium as gym
    import miniworld  # noqa: F401  (registers the MiniWorld-* envs)

    return gym.make(task, obs_width=size, obs_height=size)


def serve(conn: Any, world: Any) -> None:
    while True:
        try:
            kind, arg = conn.recv()
        except (EOFError, OSError):
            return  # the env's side closed: its process is gone
        if kind == "reset":
            obs, info = world.reset(seed=arg)
            conn.send(("obs", obs, _plain(info)))
        elif kind == "step":
            obs, reward, terminated, truncated, info = world.step(int(arg))
            conn.send(("step", obs, float(reward), terminated, truncated, _plain(info)))
        elif kind == "close":
            return
        else:
            conn.send(("error", f"unknown request {kind!r}"))


def _plain(info: dict[str, Any]) -> dict[str, Any]:
    """Only plain values cross the connection (miniworld's info may hold numpy scalars)."""
    out: dict[str, Any] = {}
    for k, v in info.items():
        if isinstance(v, (bool, int, float, str)):
            out[k] = v
        elif hasattr(v, "item") and getattr(v, "size", 0) == 1:
            out[k] = v.item()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--task", default="MiniWorld-OneRoom-v0")
    p.add_argument("--size", type=int, default=84)
    p.add_argument("--parent", type=int, required=True, help="the env's process id")
    args = p.parse_args(argv)
    if os.getppid() != args.parent:
        return 0  # the env runner died before we started watching it
    threading.Thread(target=_watch_parent, args=(args.parent,), daemon=True).start()
    key = os.environ.pop(KEY_ENV, "").encode()
    if not key:
        print(f"simulator: {KEY_ENV} is not set", file=sys.stderr)
        return 3
    try:
        listener = Listener(("127.0.0.1", args.port), authkey=key)
    except OSError as e:
        print(f"simulator: cannot listen on 127.0.0.1:{args.port}: {e}", file=sys.stderr)
        return PORT_TAKEN if e.errno == errno.EADDRINUSE else 3
    with listener:
        conn = listener.accept()
    no_delay(conn)
    with conn:
        try:
            world = make_world(args.task, args.size)
        except Exception as e:  # no display, no GLU, ...: the env reports this line
            conn.send(("error", _one_line(e)))
            return 3
        try:
            conn.send(
                (
                    "ready",
                    {
                        "actions": int(world.action_space.n),
                        "display": os.environ.get("DISPLAY", ""),
                        "pid": os.getpid(),
                    },
                )
            )
            serve(conn, world)
        finally:
            world.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
