"""The cluster's Blob storage on the bridge: Azurite, Azure's own storage emulator (npm package
``azurite``, installed by scripts/setup.d/20-azurite.sh into ``.tools/azurite``).

It serves what a storage account with Entra ID only serves a VM:

- HTTPS, with the bridge address's certificate that Key Vault's stand-in made
  (:func:`keyvault.tls`), signed by the CA the nodes trust;
- ``--oauth basic``: a request needs a bearer token whose issuer, audience
  (``https://storage.azure.com``) and lifetime Azurite checks, and the nodes get theirs from
  their metadata service as on Azure (it checks no signature; one without a token, with an
  expired one or one for another resource is refused with 403);
- one storage account, :data:`ACCOUNT` (``AZURITE_ACCOUNTS``), with the container
  :data:`CONTAINER`, made as the deployment makes it on Azure. The account's key is made here
  and given to nobody: on Azure shared-key access is off, and the nodes use tokens only.

Its URL is the account's, in Azurite's path style (``https://HOST:PORT/ACCOUNT``, not
``https://ACCOUNT.blob.core.windows.net``): a client is given the account name and the
authority ``HOST:PORT`` (pyarrow's ``AzureFileSystem(account, blob_storage_authority=...,
dfs_storage_authority=...)``, azure-storage-blob's ``BlobServiceClient(url)``).

Its data outlives the cluster, as a storage account outlives the compute on Azure (the stacks
keep results in their own resource group): it lives in ``<base>/results/<name>``
(:func:`data_dir`), outside the cluster folder, so ``down`` stops Azurite (its command line names
the cluster folder's certificate) and keeps the blobs unless told ``--delete-results``; and
:func:`serve` serves the kept blobs on loopback with the cluster gone (``rehearse storage``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from driver.errors import DriverError
from driver.procs import pids_with_cmdline, spawn
from nodekit import render
from nodekit.rehearsal.services import Context, keyvault, port, wait_for_port
from nodekit.rehearsal.standins import azure_node
from nodekit.rehearsal.state import State

ACCOUNT = "rehearsalresults"
"""The storage account's name (3 to 24 lower-case letters and digits, as on Azure)."""
CONTAINER = "results"
API_VERSION = "2021-08-06"
"""The Blob API version of the requests made here (Azurite 3.35 knows it)."""
BINARY = ".tools/azurite/node_modules/.bin/azurite-blob"
"""Azurite's Blob service alone (no Queue, no Table), in the repository."""
SETUP = "scripts/setup.d/20-azurite.sh"


def binary() -> Path:
    """Azurite's Blob service (installed by :data:`SETUP`)."""
    found = render.repo_root() / BINARY
    if not os.access(found, os.X_OK):
        raise DriverError(
            f"the rehearsal's Blob storage is Azurite, and {found} is missing: run {SETUP}"
        )
    return found


def url(state: State) -> str:
    """The storage account's URL the nodes use."""
    return account_url(state.host_ip, port(state, "azurite"))


def account_url(host: str, blob_port: int) -> str:
    return f"https://{host}:{blob_port}/{ACCOUNT}"


RESULTS = "results"
"""Under the rehearsal's base folder: one folder of kept blobs per cluster name."""


def data_dir(base: Path, name: str) -> Path:
    """The blobs and Azurite's metadata of cluster ``name``: outside its cluster folder, kept
    by ``down`` (unless ``--delete-results``)."""
    return base / RESULTS / name


def command(host: str, blob_port: int, cert: Path, key: Path, data: Path) -> list[str]:
    """Azurite's Blob service on host:port over HTTPS with OAuth, its data in ``data``."""
    return [
        str(binary()),
        "--blobHost",
        host,
        "--blobPort",
        str(blob_port),
        "--cert",
        str(cert),
        "--key",
        str(key),
        "--oauth",
        "basic",
        "--location",
        str(data),
        # The Azure SDKs send newer API versions than an emulator release knows (pyarrow 26's
        # C++ SDK: 2026-10-06); Azurite refuses them unless told not to check.
        "--skipApiVersionCheck",
        # Azurite reports usage to Microsoft unless told not to (and the bridge has no way out).
        "--disableTelemetry",
        "--silent",
    ]


def environment(account_key: str) -> dict[str, str]:
    """Azurite's environment: its one account (``AZURITE_ACCOUNTS``, name:key)."""
    return {**os.environ, "AZURITE_ACCOUNTS": f"{ACCOUNT}:{account_key}"}


def new_account_key() -> str:
    return base64.b64encode(secrets.token_bytes(64)).decode()


def start(ctx: Context) -> str:
    """Blob storage on the bridge with its container (after :func:`keyvault.start`, whose
    certificate it serves and whose token key signs the deployment's token); the account's
    URL."""
    data = data_dir(ctx.base, ctx.name)
    if serving(data):
        raise DriverError(
            f"the results storage {data} is being served (`rehearse storage --name {ctx.name}`): "
            "stop that first"
        )
    azure = ctx.azure_dir
    shared = keyvault.shared(azure)
    cert, key = keyvault.tls(azure)
    data.mkdir(parents=True, exist_ok=True)
    blob_port = ctx.port("azurite")
    pid = ctx.spawn(
        command(ctx.host, blob_port, cert, key, data),
        azure / "azurite.log",
        environment(new_account_key()),
    )
    wait_for_port(ctx.host, blob_port, "the rehearsal's Blob storage (Azurite)", pid=pid)
    account = account_url(ctx.host, blob_port)
    token = azure_node.issue_token(
        bytes.fromhex(shared["token_key"]),
        "rehearsal-deployment",
        f"principal-{ctx.name}-deployment",
        azure_node.STORAGE_RESOURCE,
    )
    create_container(account, CONTAINER, token, Path(shared["ca"]))
    return account


def create_container(account: str, name: str, token: str, ca: Path) -> None:
    """The container ``name`` in the account at ``account`` (one already there is kept)."""
    request = urllib.request.Request(
        f"{account}/{name}?restype=container",
        method="PUT",
        headers={"Authorization": f"Bearer {token}", "x-ms-version": API_VERSION},
    )
    try:
        with urllib.request.urlopen(
            request, context=ssl.create_default_context(cafile=str(ca)), timeout=15
        ):
            return
    except urllib.error.HTTPError as e:
        if e.code == 409:  # ContainerAlreadyExists
            return
        raise DriverError(
            f"Azurite refused to create the container {name} at {account}: {e.code} "
            f"{e.headers.get('x-ms-error-code') or e.reason}"
        ) from None
    except OSError as e:
        raise DriverError(f"Azurite at {account} did not answer: {e}") from None


READER_CLIENT_ID = "00000000-0000-4000-8000-00000000a11c"
"""The identity :func:`serve`'s metadata service gives tokens to (a person's, on Azure)."""


def serve(
    base: Path,
    name: str,
    blob_port: int = 0,
    say: Callable[[str], None] = print,
    stop: threading.Event | None = None,
) -> None:
    """Serve the results storage cluster ``name`` kept (:func:`data_dir`) on loopback, with
    the cluster down, until ``stop`` is set (or SIGINT/SIGTERM): Azurite over HTTPS with OAuth
    on 127.0.0.1 (a certificate made now, signed by a CA made now), and a metadata service on
    loopback that gives this machine's processes tokens for it, as ``az login`` does a person
    on Azure. ``say`` gets the account's container URL and the environment that makes the
    driver's DefaultAzureCredential use that metadata service. Refused while the cluster's own
    Azurite serves the data (two servers on one folder would corrupt it)."""
    data = data_dir(base, name)
    if not data.is_dir():
        raise DriverError(
            f"rehearsal cluster {name!r} has no kept results storage ({data} does not exist)"
        )
    if serving(data):
        raise DriverError(
            f"the results storage of {name!r} is being served already (its cluster is up, or "
            "another `rehearse storage` runs): use that one"
        )
    blob_port = blob_port or _free_port()
    with tempfile.TemporaryDirectory(prefix=f"rehearsal-storage-{name}-") as tmp:
        folder = Path(tmp)
        ca, cert, key = azure_node.tls_certificate(folder / "tls", "127.0.0.1")
        token_key = secrets.token_bytes(32)
        (folder / "imds").mkdir()
        (folder / "imds" / "config.json").write_text(
            json.dumps(azure_node.imds_config(token_key, "laptop", {READER_CLIENT_ID: "reader"}))
        )
        metadata = azure_node.FakeImds(folder / "imds").start()
        proc = spawn(
            command("127.0.0.1", blob_port, cert, key, data),
            folder / "azurite.log",
            environment(new_account_key()),
        )
        stop = stop or threading.Event()
        main = threading.current_thread() is threading.main_thread()
        previous = {s: signal.signal(s, lambda *_: stop.set()) for s in _SIGNALS if main}
        try:
            wait_for_port("127.0.0.1", blob_port, "the results storage (Azurite)", pid=proc.pid)
            say(f"results storage of rehearsal cluster {name!r} ({data}), until Ctrl-C:")
            say(f"url: {account_url('127.0.0.1', blob_port)}/{CONTAINER}")
            say(
                "env: AZURE_TOKEN_CREDENTIALS=ManagedIdentityCredential "
                f"AZURE_POD_IDENTITY_AUTHORITY_HOST={metadata.url} "
                f"AZURE_CLIENT_ID={READER_CLIENT_ID} REQUESTS_CA_BUNDLE={ca} "
                # The driver sends an Azure token to no host but Azure's storage endpoint and
                # the emulator the user names.
                f"RAYDRIVER_RESULTS_EMULATOR=127.0.0.1:{blob_port}"
            )
            while not stop.wait(0.5):
                if proc.poll() is not None:
                    raise DriverError(f"Azurite ended (exit {proc.returncode}); see its log")
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            metadata.stop()


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def serving(data: Path) -> list[int]:
    """The Azurite processes serving ``data`` (a cluster's, or :func:`serve`'s)."""
    return pids_with_cmdline(f"--location {data}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
