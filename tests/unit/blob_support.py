"""Reading and writing the rehearsal's Blob storage (Azurite, tests/unit/test_azurite.py) as the
tests of the results store do: requests with a storage token, the harness's uploader, the
metadata service made to answer with other tokens, and the driver on a laptop signed in to
Azure. Its fixtures (``blob``, ``env``, ``refused``) are in conftest.py."""

from __future__ import annotations

import http.client
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

from fakes.local_blob import CLIENT_ID, Blob
from harness import blobsync, store
from nodekit.rehearsal.services import azurite
from nodekit.rehearsal.standins.azure_node import (
    STORAGE_RESOURCE,
    VAULT_RESOURCE,
    issue_token,
    laptop_env,
)
from support import REPO, driver_timeout

API = azurite.API_VERSION


def blob_request(
    blob: Blob,
    method: str,
    path: str,
    token: str | None,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
) -> tuple[int, str, bytes]:
    """(status, x-ms-error-code, body) of a Blob request under the account's path."""
    conn = http.client.HTTPSConnection(
        "127.0.0.1", blob.port, context=ssl.create_default_context(cafile=str(blob.ca)), timeout=60
    )
    sent = {"x-ms-version": API, **(headers or {})}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, f"{blob.path}/{path}", body=body, headers=sent)
        response = conn.getresponse()
        return response.status, response.getheader("x-ms-error-code") or "", response.read()
    finally:
        conn.close()


def storage_token(blob: Blob) -> str:
    """The test's own storage token (what the metadata service would issue, asked directly:
    some tests make the metadata service answer otherwise)."""
    return issue_token(blob.token_key, CLIENT_ID, "principal-0", STORAGE_RESOURCE)


def get_blob(blob: Blob, name: str) -> tuple[int, bytes]:
    status, _, body = blob_request(blob, "GET", f"results/{name}", storage_token(blob))
    return status, body


class Lines(list[str]):
    def __call__(self, line: str) -> None:
        self.append(line)


def start_uploader(folder: Path) -> tuple[store.Uploader, Lines]:
    """The harness's uploader for ``folder``, on the store the environment names (the ``env``
    fixture), and the lines it says."""
    lines = Lines()
    found = blobsync.from_env()
    assert found is not None
    return store.Uploader(found, folder, lines).start(), lines


def token_answer(blob: Blob, resource: str, issued_at: float, lifetime_s: int) -> str:
    """What the metadata service answers with a token of ours (issued at ``issued_at``)."""
    when = int(issued_at)
    return json.dumps(
        {
            "access_token": issue_token(
                blob.token_key, CLIENT_ID, "principal-0", resource, when, lifetime_s
            ),
            "client_id": CLIENT_ID,
            "expires_in": str(lifetime_s),
            "expires_on": str(when + lifetime_s),
            "ext_expires_in": str(lifetime_s),
            "not_before": str(when),
            "resource": resource,
            "token_type": "Bearer",
        }
    )


def vault_token_answer(blob: Blob) -> str:
    """What the metadata service would answer with a token storage refuses (for Key Vault)."""
    return token_answer(blob, VAULT_RESOURCE, time.time(), 86400)


def answer_tokens_with(blob: Blob, body: str) -> Path:
    faults = blob.imds.state.path / "faults.json"
    faults.write_text(
        json.dumps({"/metadata/identity/oauth2/token": {"status": 200, "body": body}})
    )
    return faults


def put_blob(blob: Blob, name: str, data: bytes) -> None:
    status, code, _ = blob_request(
        blob,
        "PUT",
        "results/" + urllib.parse.quote(name, safe="/").replace("..", "%2E%2E"),
        storage_token(blob),
        data,
        {"x-ms-blob-type": "BlockBlob"},
    )
    assert status == 201, (name, status, code)


def laptop_environment(blob: Blob) -> dict[str, str]:
    """The environment of a laptop signed in to Azure: here the credential is the fake metadata
    service's, reached through azure-identity's own variables."""
    strip = (
        "RAYDRIVER_RESULTS_URL",
        "RAYDRIVER_RESULTS_CLIENT_ID",
        "RAYDRIVER_RESULTS_EMULATOR",
        "SSL_CERT_FILE",
    )
    return {
        **{k: v for k, v in os.environ.items() if k not in strip and not k.startswith("AZURE_")},
        "PYTHONPATH": str(REPO / "python"),
        **laptop_env(blob.imds.url, CLIENT_ID, blob.ca),
        # Azurite is no Azure storage endpoint: the user names it for it to get a token.
        "RAYDRIVER_RESULTS_EMULATOR": f"127.0.0.1:{blob.port}",
    }


def laptop_driver(
    blob: Blob, *args: str, cwd: Path, extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m driver ARGS`` on that laptop."""
    environment = {**laptop_environment(blob), **(extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "driver", *args],
        env=environment,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=driver_timeout(args, 300),
    )
