"""download against a job that swaps its files while the admin downloads them.

A real sshd with OpenSSH's sftp-server (which follows symlinks when it opens a file), the admin
logged in as root, and a "job" running on the head as user ``ray`` (the owner of the results
folder, as on a real head) that replaces the files it listed with symlinks to a file only the
admin may read. Whatever the timing, no byte of that file may reach the admin's machine.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import paramiko
import pytest

from driver import results
from driver.errors import DriverError
from driver.results import download_tree
from headhost import HeadHost, driver_env
from support import run_driver

SECRET = b"ADMIN-ONLY-SECRET-0123456789abcdef\n"
FILES = 40

# Runs on the head as user ray. "links": replace every file with a symlink to the secret (each
# one atomically, by renaming a fresh symlink over it) and answer "done N". "flip": start
# turning every file into a symlink and back into a regular file, as fast as it goes, until
# "stop", which answers "flipped N" (N swaps in all). "fifo": replace the first file with a FIFO
# (no writer ever comes), answering "fifo NAME".
SWAPPER = r"""
import os, sys, threading
folder, secret = sys.argv[1], sys.argv[2]
names = sorted(n for n in os.listdir(folder) if not n.startswith("."))
def link(n):
    tmp = os.path.join(folder, ".swap-" + n)
    os.symlink(secret, tmp)
    os.rename(tmp, os.path.join(folder, n))
def regular(n):
    tmp = os.path.join(folder, ".swap-" + n)
    with open(tmp, "wb") as f:
        f.write(b"ordinary result %s\n" % n.encode())
    os.rename(tmp, os.path.join(folder, n))
print("ready", flush=True)
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "links":
        for n in names:
            link(n)
        print("done", len(names), flush=True)
    elif cmd[0] == "fifo":
        tmp = os.path.join(folder, ".swap-fifo")
        os.mkfifo(tmp)
        os.rename(tmp, os.path.join(folder, names[0]))
        print("fifo", names[0], flush=True)
    elif cmd[0] == "flip":
        stop, count = threading.Event(), [0]
        def flip():
            while not stop.is_set():
                for n in names:
                    link(n)
                for n in names:
                    regular(n)
                count[0] += 2 * len(names)
        t = threading.Thread(target=flip)
        t.start()
        print("flipping", flush=True)
    elif cmd[0] == "stop":
        stop.set()
        t.join()
        print("flipped", count[0], flush=True)
"""


class Job:
    """The swapper, as user ray on the head."""

    def __init__(self, head: HeadHost, folder: str, secret: str) -> None:
        self.proc = head.popen(
            [
                "setpriv",
                "--reuid=ray",
                "--regid=ray",
                "--init-groups",
                "/usr/bin/python3",
                "-c",
                SWAPPER,
                folder,
                secret,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert self.read() == "ready"

    def read(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().decode().strip()

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command.encode() + b"\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture
def race(make_head_host: Callable[[], HeadHost]) -> Iterator[tuple[HeadHost, str, Path]]:
    """A bare head with user ray, a results folder of FILES files owned by ray, and a secret
    only root (the admin here) may read. Yields (head, submission id, host path of the folder)."""
    head = make_head_host()
    head.run(
        [
            "sh",
            "-c",
            "getent group ray >/dev/null || groupadd --system ray; "
            "id -u ray >/dev/null 2>&1 || useradd --system --no-log-init -M -g ray -d / "
            "-s /bin/sh ray",
        ]
    )
    uid = int(head.run(["id", "-u", "ray"]).stdout)
    gid = int(head.run(["id", "-g", "ray"]).stdout)
    secret = head.config_dir / "admin-only"
    secret.write_bytes(SECRET)
    secret.chmod(0o600)
    sid = "race-1"
    folder = head.results_dir / sid
    folder.mkdir(parents=True)
    for i in range(FILES):
        f = folder / f"ckpt-{i:02d}.bin"
        f.write_bytes(b"ordinary result %d\n" % i)
        os.chown(f, uid, gid)
    os.chown(folder, uid, gid)
    yield head, sid, folder


def _sftp(head: HeadHost) -> tuple[paramiko.SSHClient, paramiko.SFTPClient]:
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    client.connect(
        head.ip,
        username="root",
        key_filename=str(head.user_key),
        look_for_keys=False,
        allow_agent=False,
        timeout=20,
    )
    return client, client.open_sftp()


def _holding_the_secret(dest: Path) -> list[str]:
    return sorted(
        str(p.relative_to(dest))
        for p in dest.rglob("*")
        if p.is_file() and SECRET in p.read_bytes()
    )


def test_files_swapped_for_symlinks_after_the_listing_are_not_followed(
    race: tuple[HeadHost, str, Path], tmp_path: Path
) -> None:
    head, sid, _ = race
    job = Job(head, f"/var/lib/ray-cluster/results/{sid}", "/etc/ray-cluster/admin-only")
    swapped: list[str] = []

    def progress(done: int, total: int) -> None:
        # Called once the listing is done and before the first file is fetched: the job swaps
        # every listed file for a symlink to the secret right then.
        if not swapped:
            job.send("links")
            swapped.append(job.read())

    client, sftp = _sftp(head)
    dest = tmp_path / "r" / sid
    try:
        report = download_tree(sftp, f"/var/lib/ray-cluster/results/{sid}", dest, progress)
    finally:
        sftp.close()
        client.close()
        job.close()
    assert swapped == [f"done {FILES}"]  # the swap happened between the listing and the fetch
    assert _holding_the_secret(dest) == []
    assert report.fetched == 0
    assert report.left_out == ()
    assert sorted(report.changed) == [f"ckpt-{i:02d}.bin" for i in range(FILES)]
    assert not list(dest.rglob("*.part"))


def test_a_job_flipping_its_files_during_downloads_never_gets_the_secret_copied(
    race: tuple[HeadHost, str, Path], tmp_path: Path
) -> None:
    head, sid, _ = race
    assert head.sshd is not None
    home = tmp_path / "home"
    home.mkdir()
    (home / "known_hosts").write_text(head.sshd.known_hosts_line)
    job = Job(head, f"/var/lib/ray-cluster/results/{sid}", "/etc/ray-cluster/admin-only")
    try:
        for n in range(3):
            job.send("flip")
            assert job.read() == "flipping"  # the job is swapping before the download starts
            dest = tmp_path / f"r{n}"
            r = run_driver(
                "download",
                *head.cli_args,
                sid,
                "--results",
                str(dest),
                home=home,
                env=driver_env(home),
            )
            job.send("stop")  # ... and is still swapping when it has ended
            line = job.read()
            assert line.startswith("flipped ") and int(line.split()[1]) > 0, line
            assert _holding_the_secret(dest / sid) == [], r.stderr
            # Files that vanish or change under the download are left out, not an error.
            assert r.returncode == 0, r.stderr
            assert "Traceback" not in r.stderr
    finally:
        job.close()


def test_a_fifo_swapped_in_after_the_listing_stalls_the_download_only_until_the_timeout(
    race: tuple[HeadHost, str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sftp-server blocks for good opening a FIFO with no writer; the driver must not."""
    head, sid, _ = race
    monkeypatch.setattr(results, "STALL_TIMEOUT_S", 2.0, raising=False)
    job = Job(head, f"/var/lib/ray-cluster/results/{sid}", "/etc/ray-cluster/admin-only")
    swapped: list[str] = []

    def progress(done: int, total: int) -> None:
        if not swapped:
            job.send("fifo")
            swapped.append(job.read())

    client, sftp = _sftp(head)
    outcome: list[BaseException | results.DownloadReport] = []

    def download() -> None:
        try:
            outcome.append(
                download_tree(sftp, f"/var/lib/ray-cluster/results/{sid}", dest, progress)
            )
        except BaseException as e:  # handed to the test's thread
            outcome.append(e)

    dest = tmp_path / "r" / sid
    started = time.monotonic()
    worker = threading.Thread(target=download, daemon=True)
    worker.start()
    worker.join(timeout=60)
    elapsed = time.monotonic() - started
    hung = worker.is_alive()
    client.close()  # also ends a download that still hangs (today's behaviour)
    job.close()
    assert swapped == ["fifo ckpt-00.bin"]  # the FIFO was there when the file was opened
    assert not hung, "download still blocked on the FIFO after 60 s"
    assert len(outcome) == 1 and isinstance(outcome[0], DriverError), outcome
    assert str(outcome[0]) == (
        f"the head's SFTP server sent nothing for 2 s while downloading "
        f"/var/lib/ray-cluster/results/{sid}/ckpt-00.bin (a job can block it with a FIFO put "
        "there); 0 file(s) were downloaded before"
    )
    assert elapsed < 30
    assert not list(dest.rglob("*.part"))


def test_a_file_in_the_results_that_the_jobs_user_does_not_own_is_left_out(
    race: tuple[HeadHost, str, Path], tmp_path: Path
) -> None:
    """What a hard link to someone else's file, or a folder swapped for a link before the
    listing, looks like in the listing: an entry the job's user does not own."""
    head, sid, folder = race
    (folder / "not-the-jobs.txt").write_bytes(SECRET)  # root's, in ray's folder
    client, sftp = _sftp(head)
    dest = tmp_path / "r" / sid
    try:
        report = download_tree(sftp, f"/var/lib/ray-cluster/results/{sid}", dest)
    finally:
        sftp.close()
        client.close()
    assert report.left_out == ("not-the-jobs.txt (owned by uid 0, not the job's user)",)
    assert report.fetched == FILES
    assert _holding_the_secret(dest) == []
