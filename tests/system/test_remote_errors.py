"""Bad input on the remote path: each gives one line on stderr, exit code 2 (130 for Ctrl-C), no
traceback and nothing left running. Real sshd heads from tests/headhost.py; the ones that must
misbehave (no Ray, no ready marker, no token, a changed host key) are bare heads of their own,
so the shared Ray head is never disturbed."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from driver.cli import main
from headhost import HeadHost, assert_nothing_left, driver_env, leftovers_snapshot
from support import FIXTURES, REPO, driver_timeout, error_lines, run_driver

SCRIPT = str(FIXTURES / "jobs" / "succeed.py")


def _home(tmp_path: Path, *heads: HeadHost) -> Path:
    home = tmp_path / "driver-home"
    home.mkdir(exist_ok=True)
    (home / "known_hosts").write_text("".join(h.sshd.known_hosts_line for h in heads if h.sshd))
    return home


def drive(home: Path, *argv: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    return run_driver(*argv, home=home, env=driver_env(home), timeout=timeout)


def one_error(r: subprocess.CompletedProcess[str], code: int = 2) -> str:
    """The single line a failing command printed (after any progress lines), checked."""
    assert r.returncode == code, r.stderr
    assert "Traceback" not in r.stderr
    errors = [ln for ln in error_lines(r.stderr) if ln.startswith("error:")]
    assert len(errors) == 1, r.stderr
    assert error_lines(r.stderr)[-1] == errors[0], r.stderr
    return errors[0]


def _drive_then_ready(
    home: Path,
    head: HeadHost,
    *argv: str,
    timeout: float | None = None,
    on_grace: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the driver; write the head's ready marker once the driver printed that it waits
    (and call ``on_grace`` once it says it waits for the Jobs API of the just-ready head)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "driver", *argv],
        cwd=REPO,
        env={**os.environ, **driver_env(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []

    def read_stderr() -> None:
        assert proc.stderr is not None
        for ln in proc.stderr:
            lines.append(ln)
            if "waiting for the head to finish bootstrapping" in ln:
                head.write_ready()
            if on_grace is not None and "waiting for Ray's Jobs API on the head" in ln:
                on_grace()

    out: list[str] = []
    readers = [
        threading.Thread(target=read_stderr, daemon=True),
        threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True),  # type: ignore[union-attr]
    ]
    for t in readers:
        t.start()
    try:
        proc.wait(timeout=driver_timeout(argv, timeout))
    finally:
        proc.kill()
    for t in readers:
        t.join(60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "".join(out), "".join(lines))


# -- reaching the head -------------------------------------------------------------------------
def test_missing_script_fails_before_connecting(head_host: HeadHost, tmp_path: Path) -> None:
    home = _home(tmp_path, head_host)
    before = head_host.ssh_peers()
    r = drive(home, "submit", *head_host.cli_args, "no/such/train.py")
    assert error_lines(r.stderr) == [
        "error: no such file: no/such/train.py (expected a Python script or a folder with one)"
    ]
    assert r.returncode == 2
    assert head_host.ssh_peers() == before


def test_connection_refused_is_retried_with_backoff_then_reported(
    make_head_host: Callable[[], HeadHost], tmp_path: Path
) -> None:
    head = make_head_host()
    home = _home(tmp_path, head)
    started = time.monotonic()
    r = drive(
        home,
        "status",
        "x",
        "--head",
        f"root@{head.ip}:2299",
        "-i",
        str(head.user_key),
        "--retries",
        "2",
    )
    line = one_error(r)
    assert line.startswith(
        f"error: cannot reach the head {head.ip}:2299 over SSH after 3 attempts in "
    )
    assert "connection refused — expected sshd there" in line
    assert "retry 1 of 2 in 1 s" in r.stderr and "retry 2 of 2 in 2 s" in r.stderr
    assert time.monotonic() - started >= 3  # the back-off really waited


def test_a_port_that_never_sends_an_ssh_banner_is_retried_with_backoff(tmp_path: Path) -> None:
    """Something accepts TCP there but never speaks SSH (an overloaded or frozen sshd): like a
    head that does not answer, worth another attempt, and --retries counts."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    home = tmp_path / "driver-home"
    started = time.monotonic()
    try:
        r = drive(
            home, "list", "--head", f"root@127.0.0.1:{port}", "--connect-timeout", "1",
            "--retries", "2",
        )  # fmt: skip
    finally:
        listener.close()
    line = one_error(r)
    assert line.startswith(
        f"error: cannot reach the head 127.0.0.1:{port} over SSH after 3 attempts"
    )
    assert "no SSH banner within 1 s" in line
    assert "retry 1 of 2 in 1 s" in r.stderr and "retry 2 of 2 in 2 s" in r.stderr, r.stderr
    assert time.monotonic() - started >= 3 * 1 + 1 + 2  # three 1 s waits for a banner, back-off


def test_a_head_that_does_not_answer_times_out(
    make_head_host: Callable[[], HeadHost], tmp_path: Path
) -> None:
    head = make_head_host()
    home = _home(tmp_path, head)
    head.unplug()
    r = drive(home, "list", *head.cli_args, "--connect-timeout", "1", "--retries", "1")
    line = one_error(r)
    assert f"cannot reach the head {head.ip}:22 over SSH after 2 attempts" in line
    assert "no answer within 1 s" in line


def test_wrong_key_is_refused_without_retrying(
    make_head_host: Callable[[], HeadHost], tmp_path: Path
) -> None:
    from headhost import keygen

    head = make_head_host()
    home = _home(tmp_path, head)
    wrong = keygen(tmp_path / "wrong_ed25519")
    r = drive(home, "list", "--head", head.target, "-i", str(wrong))
    assert one_error(r) == (
        f"error: the head {head.ip}:22 refused the key {wrong} for user root: expected the key "
        "the cluster was deployed with (-i FILE) and the admin user (USER@HOST)"
    )
    assert "retry" not in r.stderr
    r = drive(home, "list", "--head", head.target, "-i", str(tmp_path / "nope"))
    assert (
        one_error(r) == f"error: -i: no such key file: {tmp_path / 'nope'} (expected a private key)"
    )
    r = drive(home, "list", "--head", head.target)  # no -i, no agent, no ~/.ssh keys
    assert "error: no SSH key to offer to" in one_error(r)


def test_key_from_the_usual_ssh_files(
    make_head_host: Callable[[], HeadHost], tmp_path: Path
) -> None:
    head = make_head_host()
    home = _home(tmp_path, head)
    ssh_dir = Path(driver_env(home)["HOME"]) / ".ssh"
    ssh_dir.mkdir()
    (ssh_dir / "id_ed25519").write_bytes(head.user_key.read_bytes())
    (ssh_dir / "id_ed25519").chmod(0o600)
    r = drive(home, "ssh", "--head", head.target, "--", "echo", "via-default-key")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "via-default-key"


# -- host keys ---------------------------------------------------------------------------------
def test_changed_host_key_is_refused(
    make_head_host: Callable[[], HeadHost], tmp_path: Path
) -> None:
    head = make_head_host()
    sshd = head.start_sshd(2222)
    home = tmp_path / "driver-home"
    first = sshd.fingerprint
    r = drive(home, "ssh", "--head", sshd.target, "-i", str(head.user_key), "--", "true")
    assert r.returncode == 0, r.stderr
    assert (
        f"first connection to [{head.ip}]:2222: trusting its ED25519 host key {first}" in r.stderr
    )
    known = (home / "known_hosts").read_text()

    sshd.restart_with_new_host_key()
    second = sshd.fingerprint
    assert second != first
    r = drive(home, "ssh", "--head", sshd.target, "-i", str(head.user_key), "--", "true")
    line = one_error(r)
    assert line.startswith(f"error: REFUSING the head {head.ip}:2222: its host key changed")
    assert f"expected ED25519 {first} (from {home / 'known_hosts'}), got ED25519 {second}" in line
    assert f"ssh-keygen -R '[{head.ip}]:2222' -f {home / 'known_hosts'}" in line
    assert (home / "known_hosts").read_text() == known  # never replaced silently
    assert "retry" not in r.stderr


def test_user_known_hosts_is_honoured_and_strict_mode_refuses_unknown_keys(
    make_head_host: Callable[[], HeadHost], tmp_path: Path
) -> None:
    from headhost import keygen

    head = make_head_host()
    assert head.sshd is not None
    home = tmp_path / "driver-home"
    env = driver_env(home)
    # --strict-host-keys: an unknown head is refused, with the fingerprint to check.
    r = drive(home, "ssh", *head.cli_args, "--strict-host-keys", "--", "true")
    line = one_error(r)
    assert line.startswith(f"error: refusing the head {head.ip}: its ED25519 host key ")
    assert head.sshd.fingerprint in line and "--strict-host-keys is on" in line
    assert not (home / "known_hosts").exists()
    # A key in ~/.ssh/known_hosts counts as known: no first-use message, nothing stored.
    ssh_dir = Path(env["HOME"]) / ".ssh"
    ssh_dir.mkdir(parents=True)
    (ssh_dir / "known_hosts").write_text(head.sshd.known_hosts_line)
    r = drive(home, "ssh", *head.cli_args, "--strict-host-keys", "--", "true")
    assert r.returncode == 0, r.stderr
    assert "first connection" not in r.stderr
    assert not (home / "known_hosts").exists()
    # ...and a different key there is a changed key, named with that file.
    other = keygen(tmp_path / "other_host_key")
    blob = other.with_name(other.name + ".pub").read_text().split()[:2]
    (ssh_dir / "known_hosts").write_text(f"{head.ip} {' '.join(blob)}\n")
    r = drive(home, "ssh", *head.cli_args, "--", "true")
    line = one_error(r)
    assert "its host key changed" in line and f"(from {ssh_dir / 'known_hosts'})" in line


# -- the head itself ---------------------------------------------------------------------------
def test_head_never_ready_fails_after_the_bound(
    make_head_host: Callable[[], HeadHost], tmp_path: Path
) -> None:
    head = make_head_host()  # sshd only: no ready marker, ever
    home = _home(tmp_path, head)
    started = time.monotonic()
    # 15 s: the driver's first look (a few SSH reads) fits in it on a loaded machine, so it has
    # said that it waits before it gives up (4 s did not always).
    r = drive(home, "list", *head.cli_args, "--ready-timeout", "15", timeout=300)
    elapsed = time.monotonic() - started
    line = one_error(r)
    assert line.startswith(f"error: the head {head.ip}:22 is not ready after 15 s")
    assert "expected /var/lib/ray-cluster/ready of this boot, found none (cloud-init: " in line
    assert "waiting for the head to finish bootstrapping (cloud-init: " in r.stderr
    # It waited the 15 s and gave up, not the default 900 s (the rest is a loaded machine
    # starting Python and connecting: not a speed target).
    assert 15 <= elapsed < 240
    # The same bound from the environment.
    r = run_driver(
        "list", *head.cli_args, home=home, env={**driver_env(home), "RAYDRIVER_READY_TIMEOUT": "0"}
    )
    assert "is not ready after 0 s" in one_error(r)


def test_a_marker_from_an_earlier_boot_is_waited_past(
    make_head_host: Callable[[], HeadHost], tmp_path: Path
) -> None:
    """After the head restarts, its readiness marker still stands but names the earlier boot:
    the driver waits for the one of this boot instead of talking to a Ray that is not back."""
    head = make_head_host()
    home = _home(tmp_path, head)
    head.ready_marker.write_text(json.dumps({"role": "head", "boot_id": "an-earlier-boot"}))
    r = drive(home, "ssh", *head.cli_args, "--ready-timeout", "3", "--", "true")
    assert r.returncode == 0  # ssh does not wait for Ray
    r = drive(home, "list", *head.cli_args, "--ready-timeout", "15")  # see the test above
    line = one_error(r)
    assert "is not ready after 15 s" in line
    assert "(the head restarted and Ray is coming back)" in line
    assert "waiting for Ray on the head (the head restarted and Ray is coming back)" in r.stderr


def test_failed_bootstrap_fails_fast_with_its_reason(
    make_head_host: Callable[[], HeadHost], tmp_path: Path
) -> None:
    head = make_head_host()
    head.write_failed("pip install ray failed: no network")
    home = _home(tmp_path, head)
    started = time.monotonic()
    r = drive(home, "submit", *head.cli_args, "--ready-timeout", "600", SCRIPT)
    assert one_error(r) == (
        "error: the head's bootstrap failed: pip install ray failed: no network (from "
        "/var/lib/ray-cluster/failed; the whole log is /var/log/cloud-init-output.log on the head)"
    )
    # At once, not after the 600 s --ready-timeout (on a loaded machine, starting Python and
    # connecting take tens of seconds: the bound is far from both).
    assert time.monotonic() - started < 300


def test_missing_token_is_reported(make_head_host: Callable[[], HeadHost], tmp_path: Path) -> None:
    head = make_head_host()
    head.write_ready()
    head.token_file.unlink()
    home = _home(tmp_path, head)
    r = drive(home, "submit", *head.cli_args, SCRIPT)
    assert one_error(r) == (
        "error: no cluster token on the head at /etc/ray-cluster/cluster-token: expected the "
        "bootstrap to write it before the ready marker (is this head set up by this project?)"
    )


FAKE_JOBS_API = """\
import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/api/version":
            body = json.dumps({"version": "4", "ray_version": "2.60.0", "ray_commit": "x",
                               "session_name": "s"}).encode()
            self.send_response(200)
        else:
            body = b"Job x does not exist"
            self.send_response(404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", 8265), H).serve_forever()
"""
"""What answers on a head's 8265 once its dashboard is up, enough for ``status``."""


def test_jobs_api_not_answering(make_head_host: Callable[[], HeadHost], tmp_path: Path) -> None:
    head = make_head_host()  # ready and with a token, but no Ray behind 127.0.0.1:8265
    home = _home(tmp_path, head)

    # The head becomes ready while the driver waits (once it has said so, not after a fixed
    # sleep that a loaded machine outruns): it goes on, then finds no Jobs API.
    # A head this command waited for gets its grace (its dashboard may come up after the
    # marker), then the one line.
    r = _drive_then_ready(
        home, head, "status", "x", *head.cli_args, "--ready-timeout", "60", timeout=300
    )
    line = one_error(r)
    assert "waiting for the head to finish bootstrapping" in r.stderr
    assert "waiting for Ray's Jobs API on the head (Connect failed); at most 45 s" in r.stderr
    assert line.startswith("error: the Ray Jobs API is not answering on the head (127.0.0.1:8265")
    assert "Connect failed" in line and "is Ray running there?" in line

    # Something accepts connections there but never answers: a bounded wait, then one line.
    hung = head.popen(
        [
            sys.executable,
            "-c",
            "import socket,time; s=socket.socket(); s.bind(('127.0.0.1', 8265)); s.listen(); "
            "print('up', flush=True); c=[s.accept() for _ in range(100)]",
        ],
        stdout=subprocess.PIPE,
        start_new_session=True,  # nsenter's child too: the port must be free again after it
    )
    try:
        assert hung.stdout is not None and hung.stdout.readline().strip() == b"up"
        r = drive(home, "list", *head.cli_args, "--connect-timeout", "2")
        line = one_error(r)
        assert line.startswith("error: the Ray Jobs API on the head (127.0.0.1:8265 there) is")
        assert "not answering: request timed out after 2 s" in line
    finally:
        os.killpg(hung.pid, signal.SIGKILL)
        hung.wait()

    # The Jobs API coming up within the grace: the command goes on to the API (which knows no
    # job x), as after a head VM started again.
    head.clear_ready()
    api: list[subprocess.Popen[bytes]] = []
    try:
        r = _drive_then_ready(
            home, head, "status", "x", *head.cli_args, "--ready-timeout", "60", timeout=300,
            on_grace=lambda: api.append(
                head.popen([sys.executable, "-c", FAKE_JOBS_API], start_new_session=True)
            ),
        )  # fmt: skip
    finally:
        for p in api:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert api, r.stderr
    line = one_error(r)
    assert "not answering" not in line and "no such job" in line, r.stderr


# -- Ctrl-C at the stages before a job runs (in-process: this process must be left clean) -------
@pytest.fixture
def in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "driver-home"
    for key, value in driver_env(home).items():
        monkeypatch.setenv(key, value)
    return home


class _Watched(io.TextIOBase):
    """sys.stderr as captured, telling ``seen`` once ``text`` was written to it."""

    def __init__(self, stream: Any, text: str) -> None:
        self.stream, self.text, self.seen = stream, text, threading.Event()
        self.written = ""

    def write(self, s: str) -> int:
        self.written += s
        if self.text in self.written:
            self.seen.set()
        return int(self.stream.write(s))

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False


def _ctrl_c_once_said(
    text: str, monkeypatch: pytest.MonkeyPatch, limit: float = 120
) -> tuple[threading.Thread, _Watched]:
    """Ctrl-C once the driver has said ``text`` (on a loaded machine a fixed delay may come
    before it got there), or after ``limit`` s."""
    watched = _Watched(sys.stderr, text)
    monkeypatch.setattr(sys, "stderr", watched)

    def press() -> None:
        watched.seen.wait(limit)
        time.sleep(0.5)  # into the wait that follows the line
        signal.raise_signal(signal.SIGINT)

    thread = threading.Thread(target=press, daemon=True)
    thread.start()
    return thread, watched


def test_ctrl_c_while_connecting(
    make_head_host: Callable[[], HeadHost],
    in_process: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    head = make_head_host()
    before = leftovers_snapshot()
    presser, watched = _ctrl_c_once_said("retry 1 of 9", monkeypatch)
    code = main(
        ["list", "--head", f"root@{head.ip}:2299", "-i", str(head.user_key), "--retries", "9"]
    )
    presser.join()
    monkeypatch.setattr(sys, "stderr", watched.stream)
    err = capsys.readouterr().err
    assert code == 130, err
    assert "retry 1 of 9" in err and err.rstrip().endswith("interrupted")
    assert "Traceback" not in err
    assert_nothing_left(before)


def test_ctrl_c_while_waiting_for_the_head(
    make_head_host: Callable[[], HeadHost],
    in_process: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    head = make_head_host()
    (in_process / "known_hosts").parent.mkdir(parents=True, exist_ok=True)
    (in_process / "known_hosts").write_text(head.sshd.known_hosts_line if head.sshd else "")
    peers_before = head.ssh_peers()
    before = leftovers_snapshot()
    presser, watched = _ctrl_c_once_said(
        "waiting for the head to finish bootstrapping", monkeypatch
    )
    code = main(["submit", *head.cli_args, "--ready-timeout", "300", SCRIPT])
    presser.join()
    monkeypatch.setattr(sys, "stderr", watched.stream)
    err = capsys.readouterr().err
    assert code == 130, err
    assert "waiting for the head to finish bootstrapping" in err
    assert "Traceback" not in err
    assert_nothing_left(before)
    deadline = time.monotonic() + 60  # the head's sshd sees the close: a bound on a hang
    while head.ssh_peers() != peers_before:
        assert time.monotonic() < deadline, head.ssh_peers()
        time.sleep(0.1)
