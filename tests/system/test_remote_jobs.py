"""The remote path end to end: a real sshd and a real token-auth Ray head (tests/headhost.py),
reached by ``python -m driver ... --head root@IP -i KEY`` through the SSH tunnel. No mocks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from driver.cli import main
from headhost import HeadHost, assert_nothing_left, driver_env, fingerprint, leftovers_snapshot
from support import FIXTURES, REPO, driver_timeout, error_lines, run_driver

JOBS = FIXTURES / "jobs"


@pytest.fixture
def fresh_home(tmp_path: Path) -> Path:
    """A RAYDRIVER_HOME (with an empty driver known_hosts) and a user HOME of its own."""
    (tmp_path / "user-home").mkdir()
    return tmp_path


@pytest.fixture
def home(fresh_home: Path, head_host: HeadHost) -> Path:
    """A driver home that already trusts the shared head (so errors are the only output)."""
    assert head_host.sshd is not None
    (fresh_home / "known_hosts").write_text(head_host.sshd.known_hosts_line)
    return fresh_home


def drive(
    head: HeadHost,
    *args: str,
    home: Path,
    timeout: float | None = None,
    trailing: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """``python -m driver VERB <cluster options> ARGS... [-- TRAILING...]`` as its own process."""
    verb, *rest = args
    argv = [verb, *head.cli_args, *rest, *(["--", *trailing] if trailing else [])]
    return run_driver(*argv, home=home, env=driver_env(home), timeout=timeout)


def _status(head: HeadHost, sid: str, home: Path) -> str:
    r = drive(head, "status", sid, "--json", home=home)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["status"]


def _wait_for_log(head: HeadHost, sid: str, text: str, home: Path, limit: float = 300) -> None:
    deadline = time.monotonic() + limit
    while text not in drive(head, "logs", sid, home=home).stdout:
        assert time.monotonic() < deadline, f"job {sid} never printed {text!r}"
        time.sleep(1)


def test_submit_follow_status_list_download(head_host: HeadHost, home: Path) -> None:
    sid = "remote-ok-1"
    r = drive(
        head_host,
        "submit",
        "--env",
        "GREETING=hello",
        "--submission-id",
        sid,
        str(JOBS / "succeed.py"),
        home=home,
        trailing=("--flag", "two words"),
    )
    assert r.returncode == 0, r.stderr
    assert "SQUARES [0, 1, 4, 9]" in r.stdout
    assert 'ARGS ["--flag", "two words"]' in r.stdout
    assert "GREETING hello" in r.stdout
    assert f"Submitted job {sid} to the head {head_host.target} (--head)" in r.stderr
    assert f"Job {sid} succeeded." in r.stderr
    # The next commands carry the options that reach the same cluster.
    reach = f"--head {head_host.target} -i {head_host.user_key}"
    for verb in (
        f"job logs {sid} --follow", f"job status {sid}", f"job cancel {sid}",
        f"results download {sid}",
    ):  # fmt: skip
        assert f"python -m driver {verb} {reach}" in r.stderr, r.stderr
    # The job wrote where the head's layout says, told by $RAYDRIVER_RESULTS_DIR.
    assert (head_host.results_dir / sid / "out.txt").read_text() == "done\n"
    assert _status(head_host, sid, home) == "SUCCEEDED"
    listed = drive(head_host, "list", "--json", home=home)
    assert listed.returncode == 0, listed.stderr
    assert sid in [j["submission_id"] for j in json.loads(listed.stdout)]
    plain = drive(head_host, "list", home=home)
    assert any(line.startswith(sid) and "SUCCEEDED" in line for line in plain.stdout.splitlines())

    # download: over SFTP, then again with nothing new to fetch.
    (head_host.results_dir / sid / "checkpoint").mkdir()
    (head_host.results_dir / sid / "checkpoint" / "weights.bin").write_bytes(os.urandom(300_000))
    dest = home / "results"
    r = drive(head_host, "download", sid, "--results", str(dest), home=home)
    assert r.returncode == 0, r.stderr
    assert (dest / sid / "out.txt").read_text() == "done\n"
    assert (dest / sid / "checkpoint" / "weights.bin").read_bytes() == (
        head_host.results_dir / sid / "checkpoint" / "weights.bin"
    ).read_bytes()
    assert f"Downloaded 2 files (293.0 KB) from /var/lib/ray-cluster/results/{sid}" in r.stderr
    (head_host.results_dir / sid / "later.txt").write_text("new\n")
    r = drive(head_host, "download", sid, "--results", str(dest), home=home)
    assert r.returncode == 0, r.stderr
    assert "Downloaded 1 file (4 B)" in r.stderr and "2 already there" in r.stderr, r.stderr
    assert not list(dest.rglob("*.part"))

    # The token never leaves the head: not printed, not in any file the driver wrote.
    for text in (r.stdout, r.stderr, listed.stdout):
        assert head_host.token not in text
    for f in home.rglob("*"):
        if f.is_file():
            assert head_host.token not in f.read_text(errors="replace"), f


def test_failing_job_exits_1(head_host: HeadHost, home: Path) -> None:
    r = drive(
        head_host, "submit", "--submission-id", "remote-fail-1", str(JOBS / "fail.py"), home=home
    )
    assert r.returncode == 1, r.stderr
    assert "this job fails on purpose" in r.stdout
    assert error_lines(r.stderr)[-1].startswith("Job remote-fail-1 failed: Job entrypoint")
    assert "Traceback" not in r.stderr


def test_no_wait_logs_stop(head_host: HeadHost, home: Path) -> None:
    sid = "remote-sleep-1"
    r = drive(
        head_host, "submit", "--no-wait", "--submission-id", sid, str(JOBS / "sleep.py"), home=home
    )
    assert r.returncode == 0, r.stderr
    _wait_for_log(head_host, sid, "tick 1", home)
    assert _status(head_host, sid, home) == "RUNNING"
    r = drive(head_host, "stop", sid, home=home)
    assert r.returncode == 0, r.stderr
    assert f"Job {sid}: STOPPED" in r.stderr
    assert _status(head_host, sid, home) == "STOPPED"
    r = drive(head_host, "logs", sid, "--follow", home=home)
    assert r.returncode == 1, r.stderr  # a stopped job: "failed or stopped"
    assert "tick 1" in r.stdout


def test_unknown_job_id_exits_2(head_host: HeadHost, home: Path) -> None:
    for verb in ("status", "logs", "stop"):
        r = drive(head_host, verb, "no-such-job", home=home)
        assert r.returncode == 2, (verb, r.stderr)
        lines = error_lines(r.stderr)
        assert len(lines) == 1, r.stderr
        assert lines[0].startswith("error: ") and lines[0].endswith(
            f"job no-such-job: no such job on the head {head_host.ip}"
        ), r.stderr
        assert "Traceback" not in r.stderr
    r = drive(head_host, "download", "no-such-job", "--results", str(home / "r"), home=home)
    assert r.returncode == 2
    assert "no results on the head at /var/lib/ray-cluster/results/no-such-job" in r.stderr


def test_ctrl_c_while_following_leaves_the_job_and_nothing_else(
    head_host: HeadHost,
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """In-process, so the check sees this very process's threads and sockets afterwards."""
    sid = "remote-int-1"
    r = drive(
        head_host, "submit", "--no-wait", "--submission-id", sid, str(JOBS / "sleep.py"), home=home
    )
    assert r.returncode == 0, r.stderr
    _wait_for_log(head_host, sid, "tick 1", home)
    for key, value in driver_env(home).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("RAYDRIVER_HOME", str(home))
    before = leftovers_snapshot()

    class CtrlCOnTick:
        """stdout that presses Ctrl-C once live logs arrive (SIGINT to this very process)."""

        def __init__(self, real) -> None:  # type: ignore[no-untyped-def]
            self.real, self.sent = real, False

        def write(self, text: str) -> int:
            if "tick" in text and not self.sent:
                self.sent = True
                signal.raise_signal(signal.SIGINT)
            return self.real.write(text)

        def flush(self) -> None:
            self.real.flush()

    monkeypatch.setattr(sys, "stdout", CtrlCOnTick(sys.stdout))
    code = main(["logs", sid, "--follow", *head_host.cli_args])
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert code == 130, err
    assert f"job {sid} keeps running" in err
    assert f"python -m driver job cancel {sid} --head {head_host.target}" in err
    assert "Traceback" not in err
    assert_nothing_left(before)
    assert _status(head_host, sid, home) == "RUNNING"
    assert drive(head_host, "stop", sid, home=home).returncode == 0


def test_ctrl_c_in_a_separate_process_closes_its_ssh_connection(
    head_host: HeadHost, home: Path
) -> None:
    sid = "remote-int-2"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "driver",
            "submit",
            *head_host.cli_args,
            "--submission-id",
            sid,
            str(JOBS / "sleep.py"),
        ],
        cwd=REPO,
        env={**os.environ, "RAYDRIVER_HOME": str(home), **driver_env(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("tick 2"):
            break
    assert any(peer.startswith(f"{head_host.host_ip}:") for peer in head_host.ssh_peers())
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=driver_timeout(["submit", *head_host.cli_args, "x.py"]))
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    # The head no longer sees a connection from us: no tunnel outlived the command. (The
    # head's kernel takes in the close a moment after the process ended: a bound on a hang.)
    deadline = time.monotonic() + 60
    while ours := [p for p in head_host.ssh_peers() if p.startswith(f"{head_host.host_ip}:")]:
        assert time.monotonic() < deadline, ours
        time.sleep(0.2)
    assert _status(head_host, sid, home) == "RUNNING"
    assert drive(head_host, "stop", sid, home=home).returncode == 0


def test_first_connection_trusts_and_stores_the_host_key(
    head_host: HeadHost, fresh_home: Path
) -> None:
    home = fresh_home
    assert head_host.sshd is not None
    expected = head_host.sshd.fingerprint
    r = drive(head_host, "list", home=home)
    assert r.returncode == 0, r.stderr
    known = home / "known_hosts"
    assert (
        f"first connection to {head_host.ip}: trusting its ED25519 host key {expected} "
        f"(stored in {known})"
    ) in r.stderr
    pub = head_host.sshd.host_key.with_name(head_host.sshd.host_key.name + ".pub")
    assert known.read_text().split() == [head_host.ip, *pub.read_text().split()[:2]]
    # Second time: known, nothing to say, nothing added.
    r = drive(head_host, "list", home=home)
    assert r.returncode == 0, r.stderr
    assert "first connection" not in r.stderr
    assert len(known.read_text().splitlines()) == 1
    assert fingerprint(pub) == expected


def test_dashboard_tunnels_until_ctrl_c(head_host: HeadHost, home: Path) -> None:
    import requests

    # Something in TensorBoard's place on the head's 127.0.0.1:6006 (TensorBoard is the
    # cluster's business; the driver only forwards the port).
    board = head_host.popen(
        [sys.executable, "-m", "http.server", "6006", "--bind", "127.0.0.1"],
        cwd=head_host.workdir,
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while "127.0.0.1:6006" not in head_host.run(["ss", "-ltnH"]).stdout:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        proc = subprocess.Popen(
            [sys.executable, "-m", "driver", "dashboard", *head_host.cli_args],
            cwd=REPO,
            env={**os.environ, "RAYDRIVER_HOME": str(home), **driver_env(home)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        urls = dict(proc.stdout.readline().strip().split(": ", 1) for _ in range(2))
        ray_url, board_url = urls["Ray dashboard"], urls["TensorBoard"]
        version = requests.get(
            f"{ray_url}/api/version",
            headers={"Authorization": f"Bearer {head_host.token}"},
            timeout=60,
        )
        assert version.json()["ray_version"]
        assert requests.get(board_url, timeout=60).status_code == 200
        proc.send_signal(signal.SIGINT)
        # Closing the tunnel took over 30 s at a load of ~10 on 2 cores (as in the e2e test).
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert "Closed the tunnel." in err
        assert head_host.token not in err
        with pytest.raises(requests.ConnectionError):
            requests.get(ray_url, timeout=5)
    finally:
        board.kill()
        board.wait()


def test_ssh_runs_a_command_or_a_shell_with_its_exit_code(head_host: HeadHost, home: Path) -> None:
    r = drive(head_host, "ssh", home=home, trailing=("cat /etc/ray-cluster/cluster-token; exit 3",))
    assert r.returncode == 3, r.stderr
    assert r.stdout.strip() == head_host.token  # the user asked for it on the head
    r = subprocess.run(
        [sys.executable, "-m", "driver", "ssh", *head_host.cli_args],
        input="echo from-stdin; hostname -I; exit 4\n",
        cwd=REPO,
        env={**os.environ, "RAYDRIVER_HOME": str(home), **driver_env(home)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 4, r.stderr
    assert r.stdout.split() == ["from-stdin", head_host.ip]


def test_a_login_on_the_test_head_reads_none_of_this_machines_start_up_files(
    head_host: HeadHost, home: Path
) -> None:
    """Root's home on the test head is an empty folder of its own (headhost.py): a login there
    runs no .bashrc of this machine's root (pyenv's init, 0.1-0.4 s a login, and a 60 s wait
    for its rehash lock once a killed session left the lock behind)."""
    r = drive(head_host, "ssh", home=home, trailing=('echo "$HOME|${PYENV_ROOT-unset}"',))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"{head_host.workdir / 'root-home'}|unset"


def test_head_from_environment_and_saved_profile(head_host: HeadHost, home: Path) -> None:
    env = driver_env(home)
    # $RAYDRIVER_HEAD: nothing to repeat in the next commands except the key.
    r = run_driver(
        "submit",
        "--no-wait",
        "-i",
        str(head_host.user_key),
        "--submission-id",
        "remote-env-1",
        str(JOBS / "succeed.py"),
        home=home,
        env={**env, "RAYDRIVER_HEAD": head_host.target},
    )
    assert r.returncode == 0, r.stderr
    assert "($RAYDRIVER_HEAD)" in r.stderr
    assert f"python -m driver job status remote-env-1 -i {head_host.user_key}\n" in r.stderr

    # `use` saves the head and key; later commands need no options at all.
    r = run_driver("use", *head_host.cli_args, home=home, env=env)
    assert r.returncode == 0, r.stderr
    profile = json.loads((home / "profile.json").read_text())
    assert profile == {"head": head_host.target, "identity": str(head_host.user_key)}
    assert head_host.token not in (home / "profile.json").read_text()
    assert oct((home / "profile.json").stat().st_mode & 0o777) == "0o600"
    r = run_driver("list", "--json", home=home, env=env)
    assert r.returncode == 0, r.stderr
    assert "remote-env-1" in [j["submission_id"] for j in json.loads(r.stdout)]
    shown = run_driver("use", home=home, env=env)
    assert json.loads(shown.stdout) == profile
    assert run_driver("use", "--forget", home=home, env=env).returncode == 0
    r = run_driver("list", home=home, env=env)
    assert r.returncode == 2 and "local Ray is not running" in r.stderr, r.stderr


def test_admin_user_reads_the_token_through_group_ray(head_host: HeadHost, home: Path) -> None:
    """As on a real head: azureuser (the default user) is in group ray, the token is 0640."""
    head_host.add_user("azureuser", in_ray_group=True)
    outsider = head_host.add_user("outsider", in_ray_group=False)
    key = ["-i", str(head_host.user_key)]
    r = run_driver("list", "--head", head_host.ip, *key, home=home, env=driver_env(home))
    assert r.returncode == 0, r.stderr
    r = run_driver("status", "x", "--head", outsider, *key, home=home, env=driver_env(home))
    assert r.returncode == 2
    assert error_lines(r.stderr) == [
        "error: outsider may not read /etc/ray-cluster/cluster-token on the head (permission "
        "denied): expected it readable by group ray (mode 0640) and outsider in that group — "
        "is this the cluster's admin user?"
    ]


def test_ctrl_c_during_download_leaves_no_partial_file(
    head_host: HeadHost,
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import driver.cli.results as cli

    sid = "remote-dl-int-1"
    folder = head_host.results_dir / sid
    folder.mkdir(parents=True)
    (folder / "big.bin").write_bytes(os.urandom(8 << 20))
    for key, value in driver_env(home).items():
        monkeypatch.setenv(key, value)
    real_bar = cli.byte_bar

    def bar_that_presses_ctrl_c(desc: str):  # type: ignore[no-untyped-def]
        inner = real_bar(desc)

        def progress(done: int, total: int) -> None:
            inner(done, total)
            if 0 < done < total:
                signal.raise_signal(signal.SIGINT)

        return progress

    monkeypatch.setattr(cli, "byte_bar", bar_that_presses_ctrl_c)
    dest = home / "results"
    before = leftovers_snapshot()
    code = main(["download", sid, "--results", str(dest), *head_host.cli_args])
    err = capsys.readouterr().err
    assert code == 130, err
    assert "Traceback" not in err
    assert not (dest / sid / "big.bin").exists()
    assert not list(dest.rglob("*.part"))
    assert_nothing_left(before)
    monkeypatch.setattr(cli, "byte_bar", real_bar)
    assert main(["download", sid, "--results", str(dest), *head_host.cli_args]) == 0
    assert (dest / sid / "big.bin").read_bytes() == (folder / "big.bin").read_bytes()
