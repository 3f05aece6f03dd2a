"""LocalRay.start against a stand-in ``ray`` executable that behaves as Ray 2.60's ``ray start``
does on a loaded machine: its dashboard answers before the node has registered, and the node
may miss the 30 s Ray gives it ("The current node timed out during startup")."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from driver.errors import DriverError
from driver.localray import STARTS, LocalRay

FAKE_RAY = textwrap.dedent(
    """\
    #!{python}
    # ray start --head --block ... as Ray prints it: the dashboard first, then the node's verdict.
    import http.server, sys, threading, time
    from pathlib import Path
    tries = Path({tries!r})
    n = int(tries.read_text()) + 1 if tries.exists() else 1
    tries.write_text(str(n))
    port = int(next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--dashboard-port=")))
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"success")
        def log_message(self, *a): pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    time.sleep(1.5)  # the dashboard answers; the node has not registered yet
    if n <= {failures}:
        print(Path({said!r}).read_text(), end="", flush=True)
        sys.exit(1)
    print("SUCC scripts.py:1085 -- Ray runtime started.", flush=True)
    time.sleep(600)
    """
)


MISSED = {
    # Ray 2.60's words, as a loaded CI machine logged them: an INFO line naming an RPC error,
    # the traceback, and last the exception.
    "node": (
        "2026-11-26 21:30:08,355\tINFO node.py:438 -- Failed to get node info b'RPC error: "
        "Deadline Exceeded'\n"
        "Traceback (most recent call last):\n"
        '  File "ray/_private/node.py", line 440, in __init__\n'
        "    raise Exception(\n"
        "Exception: The current node timed out during startup. This could happen because some "
        "of the raylet failed to startup or the GCS has become overloaded.\n"
    ),
    # ... or `ray start --block` up, then ended by its client server, which gave up waiting
    # for the node (this machine, loaded, in clean-clone run 17).
    "client": (
        "2026-11-26 22:42:01,458\tINFO scripts.py:1266 -- This command will now block forever "
        "until terminated by a signal.\n"
        "2026-11-26 22:42:02,461\tERR scripts.py:1307 -- Some Ray subprocesses exited "
        "unexpectedly:\n"
        "2026-11-26 22:42:02,468\tERR scripts.py:87 -- ray_client_server [exit code=1]\n"
        '  File "ray/_private/services.py", line 649, in get_node_with_retry\n'
        "    raise RuntimeError(\n"
        "RuntimeError: Timed out waiting for node info for node_id=feabc2c58e6764ae3282994ada75"
        "16bba6c0cf04343b37da874120d2.\n"
        "2026-11-26 22:42:02,481\tERR scripts.py:1315 -- Remaining processes will be killed.\n"
    ),
}
"""How a node that missed its registration ends ``ray start``, as Ray prints it."""


def _local_ray(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failures: int, missed: str = "node"
) -> LocalRay:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ray = bin_dir / "ray"
    said = tmp_path / "missed.txt"
    said.write_text(MISSED[missed])
    ray.write_text(
        FAKE_RAY.format(
            python=sys.executable,
            tries=str(tmp_path / "tries"),
            failures=failures,
            said=str(said),
        )
    )
    ray.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    return LocalRay(tmp_path / "home")


@pytest.mark.parametrize("missed", sorted(MISSED))
def test_a_node_that_misses_rays_30_s_is_started_again_and_ready_only_once_ray_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, missed: str
) -> None:
    local = _local_ray(tmp_path, monkeypatch, failures=1, missed=missed)
    said: list[str] = []
    try:
        # A generous bound: the second start is given up when less than RETRY_NEEDS_S are
        # left, and on a loaded machine the first one alone can take 60 s.
        head, started = local.start(timeout=300, progress=said.append)
        assert started and (tmp_path / "tries").read_text() == "2"
        assert any("missed Ray's 30 s to register" in line for line in said), said
        assert "Ray runtime started." in Path(head.log_file).read_text()
    finally:
        local.stop()


def test_a_node_that_misses_it_every_time_ends_in_rays_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = _local_ray(tmp_path, monkeypatch, failures=STARTS)
    with pytest.raises(DriverError) as failed:
        local.start(timeout=300)
    assert str(failed.value).startswith("local Ray did not start: 'ray start' exited with code 1")
    assert "timed out during startup" in str(failed.value)
    assert (tmp_path / "tries").read_text() == str(STARTS)
    assert local.running() is None


RAY_NODE_TIMEOUT = MISSED["node"].rstrip().splitlines()[-1].removeprefix("Exception: ")
"""The message of what Ray 2.60's ``ray.init`` raises (a bare Exception, ray/_private/node.py)
when its node misses the 30 s it is given to register: seen from benchmarks/results_store.py's
own Ray in a whole run of the suite on 2 cores."""


@pytest.mark.parametrize("misses", [1, STARTS - 1])
def test_init_local_ray_tries_again_when_the_node_misses_its_window(
    monkeypatch: pytest.MonkeyPatch, misses: int
) -> None:
    """Ray's own start in this process (benchmarks, in-process fixtures): a node that missed
    Ray's window is shut down and started again, up to STARTS times in all, with the same
    arguments; what the last start returns is returned."""
    import ray

    from driver.localray import init_local_ray

    calls: list[tuple[str, dict]] = []

    def init(**kwargs: object) -> str:
        calls.append(("init", kwargs))
        if sum(1 for c in calls if c[0] == "init") <= misses:
            raise Exception(RAY_NODE_TIMEOUT)
        return "context"

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append(("shutdown", {})))
    assert init_local_ray(address="local", num_cpus=1) == "context"
    assert calls == [("init", {"address": "local", "num_cpus": 1}), ("shutdown", {})] * misses + [
        ("init", {"address": "local", "num_cpus": 1})
    ]


def test_init_local_ray_starts_a_ray_of_its_own_unless_told_an_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without an address ``ray.init`` would join a Ray already running on the machine (another
    lane's local head) and refuse ``num_cpus``: init_local_ray asks for a local one of its own."""
    import ray

    from driver.localray import init_local_ray

    calls: list[dict] = []

    def init(**kwargs: object) -> str:
        calls.append(kwargs)
        return "context"

    monkeypatch.setattr(ray, "init", init)
    assert init_local_ray(num_cpus=1) == "context"
    assert init_local_ray(address="10.0.0.4:6379") == "context"
    assert calls == [{"address": "local", "num_cpus": 1}, {"address": "10.0.0.4:6379"}]


def test_init_local_ray_gives_up_after_its_starts_and_at_once_on_other_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ray

    from driver.localray import init_local_ray

    tries: list[int] = []

    def missed(**kwargs: object) -> None:
        tries.append(1)
        raise Exception(RAY_NODE_TIMEOUT)

    monkeypatch.setattr(ray, "init", missed)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    with pytest.raises(Exception, match="timed out during startup"):
        init_local_ray(address="local")
    assert len(tries) == STARTS

    def refused(**kwargs: object) -> None:
        tries.append(1)
        raise ValueError("When connecting to an existing cluster, num_cpus must not be provided")

    tries.clear()
    monkeypatch.setattr(ray, "init", refused)
    with pytest.raises(ValueError, match="num_cpus"):
        init_local_ray(address="auto", num_cpus=1)
    assert len(tries) == 1
