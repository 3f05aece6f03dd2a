"""download against a hostile SFTP server: names in the listing that are not plain file names
(``../../escaped``, ``..``, ``a/b``) are left out, and nothing is written outside the destination;
a results folder that is missing or empty is one line naming where the job should have written.

A real sshd cannot serve such names (no file system holds them), so this runs paramiko's own
SFTP server in-process, over a real SSH transport on a socket pair, answering with them.
"""

from __future__ import annotations

import io
import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import paramiko
import pytest

from driver.errors import DriverError
from driver.results import download_tree

ROOT = "/results/job"
EMPTY = "/results/empty-job"
CONTENT = {
    "ok.txt": b"fine\n",
    "../../escaped": b"owned\n",
    "..": b"dotdot\n",
    "a/b": b"slash\n",
    "": b"empty\n",
}


class _Server(paramiko.ServerInterface):
    def get_allowed_auths(self, username: str) -> str:
        return "none"

    def check_auth_none(self, username: str) -> int:
        return paramiko.AUTH_SUCCESSFUL

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return (
            paramiko.OPEN_SUCCEEDED
            if kind == "session"
            else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED
        )


class _Handle(paramiko.SFTPHandle):
    def __init__(self, data: bytes, attrs: paramiko.SFTPAttributes) -> None:
        super().__init__()
        self.readfile = io.BytesIO(data)  # type: ignore[assignment]
        self.attrs = attrs

    def stat(self) -> paramiko.SFTPAttributes:  # SFTP FSTAT, which download checks
        return self.attrs


class _Hostile(paramiko.SFTPServerInterface):
    """Lists CONTENT's names under ROOT as regular files and serves their bytes."""

    def _attrs(self, name: str, data: bytes | None) -> paramiko.SFTPAttributes:
        a = paramiko.SFTPAttributes()
        a.filename = name
        a.st_mode = stat.S_IFDIR | 0o755 if data is None else stat.S_IFREG | 0o644
        a.st_size = 0 if data is None else len(data)
        a.st_mtime = a.st_atime = 1_700_000_000
        a.st_uid = a.st_gid = 1000  # the job's user, as sftp-server reports it
        return a

    def list_folder(self, path: str):  # type: ignore[no-untyped-def]
        if path == EMPTY:
            return []
        if path != ROOT:
            return paramiko.SFTP_NO_SUCH_FILE
        return [self._attrs(name, data) for name, data in CONTENT.items()]

    def stat(self, path: str):  # type: ignore[no-untyped-def]
        if path in (ROOT, EMPTY):
            return self._attrs(PurePosixPath(path).name, None)
        if not path.startswith(ROOT + "/"):
            return paramiko.SFTP_NO_SUCH_FILE
        name = path[len(ROOT) + 1 :]
        return self._attrs(name, CONTENT[name]) if name in CONTENT else paramiko.SFTP_NO_SUCH_FILE

    lstat = stat

    def open(self, path: str, flags: int, attr: paramiko.SFTPAttributes):  # type: ignore[no-untyped-def]
        name = path[len(ROOT) + 1 :]
        if name not in CONTENT:
            return paramiko.SFTP_NO_SUCH_FILE
        return _Handle(CONTENT[name], self._attrs(name, CONTENT[name]))


@pytest.fixture
def hostile_sftp() -> Iterator[paramiko.SFTPClient]:
    server_sock, client_sock = socket.socketpair()
    server = paramiko.Transport(server_sock)
    server.add_server_key(paramiko.Ed25519Key.from_private_key(io.StringIO(_host_key())))
    server.set_subsystem_handler("sftp", paramiko.SFTPServer, _Hostile)
    started = threading.Thread(
        target=server.start_server, kwargs={"server": _Server()}, daemon=True
    )
    started.start()
    client = paramiko.Transport(client_sock)
    client.start_client(timeout=120)
    client.auth_none("anyone")
    sftp = paramiko.SFTPClient.from_transport(client)
    assert sftp is not None
    try:
        yield sftp
    finally:
        sftp.close()
        client.close()
        server.close()


def _host_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return (
        Ed25519PrivateKey.generate()
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        .decode()
    )


def test_names_from_the_listing_cannot_leave_the_destination(
    hostile_sftp: paramiko.SFTPClient, tmp_path: Path
) -> None:
    dest = tmp_path / "deep" / "results" / "job"
    report = download_tree(hostile_sftp, ROOT, dest)
    assert report.fetched == 1
    assert (dest / "ok.txt").read_bytes() == b"fine\n"
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["deep/results/job/ok.txt"]
    assert not (tmp_path / "deep" / "escaped").exists() and not (tmp_path / "escaped").exists()
    # ".." never reaches us (paramiko's listdir drops "." and ".."); the others are named.
    assert sorted(report.left_out) == ["./''", "./'../../escaped'", "./'a/b'"]


@pytest.mark.parametrize(
    ("root", "state"), [(EMPTY, "holds no files"), ("/results/gone", "is missing")]
)
def test_a_missing_or_empty_results_folder_says_where_the_job_should_have_written(
    hostile_sftp: paramiko.SFTPClient, tmp_path: Path, root: str, state: str
) -> None:
    """A job that wrote outside $RAYDRIVER_RESULTS_DIR leaves its folder empty (or never made
    it): the one line says which, and the variable and path the job was given."""
    dest = tmp_path / "results" / "job"
    with pytest.raises(DriverError) as e:
        download_tree(hostile_sftp, root, dest)
    message = e.value.message
    assert "\n" not in message
    assert message.startswith(f"no results on the head at {root}: the job's results folder {state}")
    assert f"$RAYDRIVER_RESULTS_DIR={root}" in message
    assert not dest.exists()
