"""The rehearsal's Blob storage on loopback, for the tests and the benchmarks: Azurite started by
``nodekit.rehearsal.services.azurite.start`` (HTTPS with OAuth, the container ``results``), with
what Key Vault's stand-in leaves it (the certificate for 127.0.0.1, the token key, the CA), and
one node's metadata service (:class:`nodekit.rehearsal.standins.azure_node.FakeImds`) handing
out tokens for :data:`CLIENT_ID`. No root, no pytest::

    with local_blob(folder) as blob:
        blob.url        # https://127.0.0.1:PORT/rehearsalresults
        blob.stop(); blob.start()   # Azurite down and up again, same port and data
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from driver.procs import pid_alive
from nodekit.rehearsal.services import Context, azurite, keyvault
from nodekit.rehearsal.standins.azure_node import FakeImds, imds_config, tls_certificate
from nodekit.rehearsal.state import State, StateFile

CLIENT_ID = "7d1e3c52-0c5e-4b8e-9a34-2f6f0e1d9c11"
"""The node's managed identity (the metadata service knows it as ``principal-0``)."""


@dataclass
class Blob:
    url: str
    """The account's URL, as the nodes get it."""
    ca: Path
    imds: FakeImds
    token_key: bytes
    data: Path
    context: Context
    """What started Azurite (its state records Azurite's process)."""

    @property
    def port(self) -> int:
        return int(urllib.parse.urlsplit(self.url).port or 443)

    @property
    def path(self) -> str:
        return urllib.parse.urlsplit(self.url).path

    @property
    def process_groups(self) -> list[int]:
        """Azurite's process groups (each process it started leads one)."""
        return [
            int(i.removeprefix("pid:")) for i in self.context.state.created if i.startswith("pid:")
        ]

    def stop(self) -> None:
        """Stop Azurite (what ``down`` stops); its data stays."""
        _stop(self.context)

    def start(self) -> None:
        """Start Azurite again on the same port with the same data."""
        assert azurite.start(self.context) == self.url


def _stop(context: Context, timeout: float = 30) -> None:
    """Stop the processes ``context`` started, and wait until they are gone (their port free)."""
    created = context.state.created
    for item in [i for i in created if i.startswith("pid:")]:
        pid = int(item.removeprefix("pid:"))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        created.remove(item)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def local_blob(base: Path) -> Iterator[Blob]:
    """Azurite and a metadata service on loopback, their files under ``base``; both stopped at
    the end."""
    cluster = base / "cluster"
    azure = cluster / "azure"
    ca, _, _ = tls_certificate(azure / "tls", "127.0.0.1")
    token_key = secrets.token_bytes(32)
    (azure / keyvault.SHARED).write_text(json.dumps({"token_key": token_key.hex(), "ca": str(ca)}))
    state = State(
        name="blobtest",
        subnet="",
        bridge="",
        host_ip="127.0.0.1",
        http_port=free_port() - 5,
        ssh_key="",
    )
    metadata = FakeImds(base / "imds")
    (base / "imds" / "config.json").write_text(
        json.dumps(imds_config(token_key, "vm-0", {CLIENT_ID: "principal-0"}))
    )
    metadata.start()
    context = Context("blobtest", cluster, base, state, StateFile(cluster / "state.json"))
    try:
        url = azurite.start(context)
        yield Blob(url, ca, metadata, token_key, azurite.data_dir(base, "blobtest"), context)
    finally:
        metadata.stop()
        _stop(context)
