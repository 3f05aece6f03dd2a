"""Tell Azure whether this worker is worth keeping: the endpoint the scale set's Application
Health extension probes.

Runs on every worker (systemd unit ``ray-health``), with the image's own ``python3`` and the
standard library only: it must answer before the bootstrap has built Ray's environment, and
after the bootstrap failed to build it. It serves ``GET /health`` on 127.0.0.1 only (the
extension probes from inside the VM; nothing outside needs it) in the extension's "rich health
states" form, a 200 with ``{"ApplicationHealthState": ...}``:

- ``Unhealthy`` when the bootstrap gave up for good (the FAILED marker), when Ray did not come
  back after a reboot (the readiness service's own failure marker, written at this boot), or
  when ``ray-worker.service`` has failed for good after this boot's Ray was ready (it restarts
  on every exit but one: the refusal to join a head of another Ray or Python version).
  Automatic instance repair replaces such a VM; the scale set keeps its count.
- ``Healthy`` when this boot's readiness marker exists and the unit is running, restarting or
  stopped on purpose (the scheduled-events watcher stops Ray before Azure removes the VM; an
  admin may stop it: neither is a reason to replace the VM).
- ``Initializing`` while the bootstrap (or, after a reboot, Ray's return) is still under way.
  The extension accepts only Healthy and Unhealthy in the body: any other answer counts as
  *Unknown*, which during the extension's ``gracePeriod`` keeps the instance in its
  *Initializing* state (no repair) and after it lets repair replace the VM. So a bootstrap that
  hangs past that grace is treated like one that failed.

A ``Reason`` field says why, for whoever runs ``curl 127.0.0.1:PORT/health`` on the node (the
extension ignores fields it does not know).

This file is installed on the nodes by the worker's cloud-init (``python -m nodekit render``
embeds it); the tests import it and run its server on a free port.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HEALTHY, UNHEALTHY, INITIALIZING = "Healthy", "Unhealthy", "Initializing"
RUNNING_STATES = ("active", "activating", "reloading", "deactivating", "inactive")
"""``systemctl is-active`` answers that are no reason to replace the VM: running, restarting
(``Restart=always``), or stopped on purpose. Only ``failed`` is."""


@dataclass(frozen=True)
class Node:
    """Where the node keeps its markers, and how to read what the tests fake."""

    ready: str
    """The readiness marker: JSON naming the boot it was written in (``boot_id``)."""
    failed: str
    """The bootstrap's failure marker: its reason on one line."""
    restart_failed: str
    """The readiness service's failure marker at a later boot (Ray did not come back)."""
    unit_state: Callable[[], str]
    """``systemctl is-active ray-worker.service``: active, activating, inactive, failed..."""
    boot_id: Callable[[], str | None]
    boot_time: Callable[[], float]
    """When this boot began (seconds since the epoch)."""


def assess(node: Node) -> tuple[str, str]:
    """``(state, reason)``: the answer for the extension, and why."""
    reason = _first_line(node.failed)
    if reason is not None:
        return UNHEALTHY, f"the bootstrap failed: {reason}"
    boot = node.boot_id()
    marker = _read_json(node.ready)
    if marker is not None and boot is not None and marker.get("boot_id") == boot:
        state = node.unit_state()
        if state == "failed":
            return UNHEALTHY, "ray-worker.service failed after this boot's Ray was ready"
        if state in RUNNING_STATES:
            return HEALTHY, f"Ray was ready at this boot; ray-worker.service is {state}"
        return HEALTHY, f"Ray was ready at this boot; ray-worker.service state {state!r}"
    reason = _first_line(node.restart_failed)
    if reason is not None and _mtime(node.restart_failed) >= node.boot_time():
        return UNHEALTHY, f"Ray did not come back at this boot: {reason}"
    if marker is None:
        return INITIALIZING, "the bootstrap is still running"
    return INITIALIZING, "waiting for Ray to come back at this boot"


def _first_line(path: str) -> str | None:
    """The file's first line (``""`` if empty), None if there is no such file."""
    try:
        with open(path, errors="replace") as f:
            return f.readline().strip()[:300]
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"unreadable: {e}"


def _read_json(path: str) -> dict[str, object] | None:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None  # absent, or being written: not ready yet
    return data if isinstance(data, dict) else None


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


# -- the node's own facts --------------------------------------------------------------------
def systemd_unit_state(unit: str) -> Callable[[], str]:
    def state() -> str:
        try:
            out = subprocess.run(
                ["systemctl", "is-active", unit], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"unknown ({e})"
        return out.stdout.strip() or "unknown"

    return state


def read_boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return None


def read_boot_time() -> float:
    with open("/proc/uptime") as f:
        return time.time() - float(f.read().split()[0])


# -- the endpoint ----------------------------------------------------------------------------
def make_server(node: Node, host: str, port: int, path: str) -> ThreadingHTTPServer:
    """The HTTP server (not yet serving): ``GET path`` answers :func:`assess`, anything else 404."""
    last: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        server_version = "ray-health"

        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != path:
                self._send(404, {"error": f"only {path} is served here"})
                return
            state, reason = assess(node)
            if [state, reason] != last:  # one log line per change, not per probe
                last[:] = [state, reason]
                _log(f"{state}: {reason}")
            self._send(200, {"ApplicationHealthState": state, "Reason": reason})

        def _send(self, status: int, body: dict[str, str]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a probe every few seconds: the state changes are logged instead

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def _log(message: str) -> None:
    print(f"ray-health: {message}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--path", default="/health")
    p.add_argument("--host", default="127.0.0.1", help="loopback: the extension probes locally")
    p.add_argument("--ready", required=True, help="the readiness marker (JSON with boot_id)")
    p.add_argument("--failed", required=True, help="the bootstrap's failure marker")
    p.add_argument("--restart-failed", required=True, help="the readiness service's failure marker")
    p.add_argument("--service", default="ray-worker.service")
    args = p.parse_args(argv)
    node = Node(
        ready=args.ready,
        failed=args.failed,
        restart_failed=args.restart_failed,
        unit_state=systemd_unit_state(args.service),
        boot_id=read_boot_id,
        boot_time=read_boot_time,
    )
    server = make_server(node, args.host, args.port, args.path)
    _log(f"serving http://{args.host}:{args.port}{args.path}")
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
