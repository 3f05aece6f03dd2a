"""The rehearsal's Blob storage (python/nodekit/rehearsal/services/azurite.py): Azurite over HTTPS
with OAuth, reached as a node reaches a storage account on Azure: a managed-identity token from
the (fake) metadata service, TLS with the rehearsal's CA. On loopback, no root; Azurite from
scripts/setup.d/20-azurite.sh (scripts/test.sh runs it)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from blob_support import blob_request
from driver.errors import DriverError
from fakes.local_blob import CLIENT_ID, Blob
from nodekit import render
from nodekit.rehearsal.services import azurite, imds
from nodekit.rehearsal.standins.azure_node import STORAGE_RESOURCE, VAULT_RESOURCE, issue_token

API = azurite.API_VERSION


def _node_token(blob: Blob, resource: str = STORAGE_RESOURCE) -> str:
    """The node's token, asked for as azure-identity asks the metadata service."""
    query = urllib.parse.urlencode(
        {"api-version": "2018-02-01", "resource": resource, "client_id": CLIENT_ID}
    )
    request = urllib.request.Request(
        f"{blob.imds.url}/metadata/identity/oauth2/token?{query}", headers={"Metadata": "true"}
    )
    with urllib.request.urlopen(request, timeout=60) as r:
        token: str = json.load(r)["access_token"]
    return token


def test_the_account_url_is_https_on_the_bridge_with_the_rehearsal_ca(blob: Blob) -> None:
    assert blob.url == f"https://127.0.0.1:{blob.port}/{azurite.ACCOUNT}"
    trusting = ssl.create_default_context(cafile=str(blob.ca))
    with (
        socket.create_connection(("127.0.0.1", blob.port), timeout=60) as raw,
        trusting.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
    # Without the rehearsal's CA the certificate is not trusted: it is that CA's.
    with (
        socket.create_connection(("127.0.0.1", blob.port), timeout=60) as raw,
        pytest.raises(ssl.SSLCertVerificationError),
    ):
        ssl.create_default_context().wrap_socket(raw, server_hostname="127.0.0.1")


@pytest.mark.parametrize("resource", [STORAGE_RESOURCE, STORAGE_RESOURCE.rstrip("/")])
def test_a_node_writes_lists_and_reads_blobs_with_its_managed_identity_token(
    blob: Blob, resource: str
) -> None:
    token = _node_token(blob, resource)
    name = f"run-{secrets.token_hex(4)}/checkpoint_000010/state.pkl"
    data = secrets.token_bytes(3000)
    status, code, _ = blob_request(
        blob, "PUT", f"results/{name}", token, data, {"x-ms-blob-type": "BlockBlob"}
    )
    assert (status, code) == (201, "")
    status, _, listing = blob_request(
        blob, "GET", f"results?restype=container&comp=list&prefix={name.split('/')[0]}/", token
    )
    assert status == 200
    assert f"<Name>{name}</Name>".encode() in listing
    assert blob_request(blob, "GET", f"results/{name}", token) == (200, "", data)
    # The token came from the metadata service, for the node's identity and this resource.
    asked = [r["query"] for r in blob.imds.state.lines("requests.jsonl")]
    assert {"api-version": "2018-02-01", "resource": resource, "client_id": CLIENT_ID} in asked
    # Azurite keeps its data in the cluster folder.
    assert any(p.is_file() for p in blob.data.rglob("*"))


def _expired(blob: Blob) -> str:
    an_hour_ago = time.time() - 3600
    return issue_token(
        blob.token_key, CLIENT_ID, "principal-0", STORAGE_RESOURCE, an_hour_ago, lifetime_s=600
    )


@pytest.mark.parametrize(
    ("why", "token", "code"),
    [
        ("no token", lambda blob: None, "AuthorizationFailure"),
        ("an expired token", _expired, "AuthenticationFailed"),
        (
            "a token for Key Vault",
            lambda blob: _node_token(blob, VAULT_RESOURCE),
            "AuthenticationFailed",
        ),
        ("not a token", lambda blob: "not-a-jwt", "AuthenticationFailed"),
    ],
)
def test_azurite_refuses_a_request_without_a_valid_storage_token(
    blob: Blob, why: str, token: object, code: str
) -> None:
    good = _node_token(blob)
    name = f"refused-{secrets.token_hex(4)}.txt"
    assert (
        blob_request(
            blob, "PUT", f"results/{name}", good, b"kept", {"x-ms-blob-type": "BlockBlob"}
        )[0]
        == 201
    )
    assert callable(token)
    given = token(blob)
    status, error, body = blob_request(blob, "GET", f"results/{name}", given)
    assert (status, error) == (403, code), why
    assert b"kept" not in body
    status, error, _ = blob_request(
        blob, "PUT", f"results/{name}", given, b"overwritten", {"x-ms-blob-type": "BlockBlob"}
    )
    assert (status, error) == (403, code), why
    assert blob_request(blob, "GET", f"results/{name}", good) == (200, "", b"kept")


PYARROW_NODE = """
import json, sys
import pyarrow.fs as pafs
account, authority, client_id, prefix, what = sys.argv[1:6]
fs = pafs.AzureFileSystem(
    account, client_id=client_id,
    blob_storage_authority=authority, blob_storage_scheme="https",
    dfs_storage_authority=authority, dfs_storage_scheme="https",
)
if what == "read":
    with fs.open_input_stream(f"results/{prefix}/progress.csv") as f:
        print(json.dumps({"progress": f.read().decode()}))
    sys.exit(0)
with fs.open_output_stream(f"results/{prefix}/checkpoint_000001/weights.bin") as f:
    f.write(b"w" * 100000)
with fs.open_output_stream(f"results/{prefix}/progress.csv") as f:
    f.write(b"iteration,reward\\n1,9.5\\n")
found = fs.get_file_info(pafs.FileSelector(f"results/{prefix}", recursive=True))
with fs.open_input_stream(f"results/{prefix}/progress.csv") as f:
    progress = f.read().decode()
print(json.dumps({"files": sorted((i.path, i.size) for i in found if i.is_file),
                  "progress": progress}))
"""


def _pyarrow_node(
    blob: Blob,
    client_id: str,
    prefix: str,
    what: str = "write",
    trust: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """pyarrow's AzureFileSystem in a process of its own, as on a node: the managed identity
    ``client_id`` (Azure's C++ SDK asks the metadata service at
    AZURE_POD_IDENTITY_AUTHORITY_HOST instead of 169.254.169.254: loopback here), the
    rehearsal's CA as the trusted CA (``trust``, else SSL_CERT_FILE: the OpenSSL in pyarrow's
    wheel reads them)."""
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "SSL_CERT_DIR")},
        "AZURE_POD_IDENTITY_AUTHORITY_HOST": blob.imds.url,
        **(trust if trust is not None else {"SSL_CERT_FILE": str(blob.ca)}),
    }
    return subprocess.run(
        [
            sys.executable,
            "-c",
            PYARROW_NODE,
            azurite.ACCOUNT,
            f"127.0.0.1:{blob.port}",
            client_id,
            prefix,
            what,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_pyarrow_azure_filesystem_writes_lists_and_reads_with_the_managed_identity(
    blob: Blob,
) -> None:
    prefix = f"run-{secrets.token_hex(4)}"
    done = _pyarrow_node(blob, CLIENT_ID, prefix)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["files"] == [
        [f"results/{prefix}/checkpoint_000001/weights.bin", 100000],
        [f"results/{prefix}/progress.csv", 23],
    ]
    assert out["progress"] == "iteration,reward\n1,9.5\n"
    read = _pyarrow_node(blob, CLIENT_ID, prefix, "read")
    assert json.loads(read.stdout) == {"progress": "iteration,reward\n1,9.5\n"}, read.stderr
    # What pyarrow wrote is a blob a plain Blob client reads with the node's token.
    assert blob_request(blob, "GET", f"results/{prefix}/progress.csv", _node_token(blob))[2] == (
        b"iteration,reward\n1,9.5\n"
    )
    asked = [r["query"] for r in blob.imds.state.lines("requests.jsonl")]
    assert {
        "api-version": "2018-02-01",
        "resource": STORAGE_RESOURCE.rstrip("/"),
        "client_id": CLIENT_ID,
    } in asked


def test_a_rehearsal_node_trusts_the_ca_where_pyarrow_looks(blob: Blob, tmp_path: Path) -> None:
    """A node's /etc/ssl/certs as ``imds.trust_ca`` leaves it: pyarrow's own OpenSSL finds the
    CA by its subject hash there (the bundle alone, which Python's ssl and curl read, is not
    enough for it)."""
    certs = tmp_path / "etc/ssl/certs"
    certs.mkdir(parents=True)
    (certs / "ca-certificates.crt").write_text("")
    bundle_only = _pyarrow_node(
        blob,
        CLIENT_ID,
        "untrusted",
        trust={"SSL_CERT_DIR": str(certs), "SSL_CERT_FILE": str(certs / "nothing.pem")},
    )
    assert bundle_only.returncode == 1
    assert "SSL peer certificate" in bundle_only.stderr, bundle_only.stderr[-2000:]
    imds.trust_ca(tmp_path, blob.ca)
    imds.trust_ca(tmp_path, blob.ca)  # again, as at a node's next boot: one link
    assert (certs / "ca-certificates.crt").read_text().count("BEGIN CERTIFICATE") == 2
    assert len([p for p in certs.iterdir() if p.name.endswith(".0")]) == 1
    trusted = _pyarrow_node(
        blob,
        CLIENT_ID,
        "trusted",
        trust={"SSL_CERT_DIR": str(certs), "SSL_CERT_FILE": str(certs / "nothing.pem")},
    )
    assert trusted.returncode == 0, trusted.stderr[-2000:]


def test_pyarrow_aborts_the_process_when_the_identity_gets_no_token(blob: Blob) -> None:
    """pyarrow 26: a failed token request (an identity not attached to the VM, as here; the
    metadata service unreachable or answering 500 does the same) throws Azure's C++
    AuthenticationException past Arrow in reads (open_input_stream/file, copy_file,
    get_file_info of a container), and the process aborts (SIGABRT) instead of raising OSError.
    Whatever reads or writes results with it must run in a process of its own that the trainer
    outlives, and check the identity first with azure-identity."""
    done = _pyarrow_node(blob, "not-attached-to-this-vm", "never", "read")
    assert done.returncode == -signal.SIGABRT, (done.returncode, done.stderr[-2000:])
    assert "AuthenticationException" in done.stderr
    assert "Identity not found" in done.stderr


def test_a_missing_azurite_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(render, "repo_root", lambda: tmp_path)
    with pytest.raises(DriverError) as e:
        azurite.binary()
    assert str(e.value) == (
        f"the rehearsal's Blob storage is Azurite, and {tmp_path / azurite.BINARY} is missing: "
        f"run {azurite.SETUP}"
    )
