"""The node reads the cluster token from Key Vault with its managed identity: node_check.py's
``token`` command, taken from the rendered document, against the fakes of the instance metadata
service and Key Vault (python/nodekit/rehearsal/standins/azure_node.py) on loopback."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from azure_support import TOKEN_SECRET
from nodekit import render
from nodekit.rehearsal.standins.azure_node import (
    FakeImds,
    FakeKeyVault,
    imds_config,
    tls_certificate,
    vault_config,
)
from support import REPO

CLIENT_ID = "11111111-2222-4333-8444-555555555555"


@dataclass
class Azure:
    imds: FakeImds
    vault: FakeKeyVault
    ca: Path
    key: bytes
    token: str
    node_check: Path

    def command(self, tmp: Path, *extra: str, timeout: float = 5) -> list[str]:
        return [
            sys.executable,
            str(self.node_check),
            "token",
            "--vault",
            self.vault.url,
            "--secret",
            TOKEN_SECRET,
            "--client-id",
            CLIENT_ID,
            "--out",
            str(tmp / "token"),
            "--failed",
            str(tmp / "failed"),
            "--timeout",
            str(timeout),
            "--imds",
            self.imds.url,
            *extra,
        ]

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SSL_CERT_FILE": str(self.ca)}

    def run(
        self, tmp: Path, *extra: str, timeout: float = 5
    ) -> tuple[subprocess.CompletedProcess, Path, Path]:
        p = subprocess.run(
            self.command(tmp, *extra, timeout=timeout),
            capture_output=True,
            text=True,
            env=self.env,
            timeout=120,
        )
        return p, tmp / "token", tmp / "failed"

    def grant(self, readers: list[str], secrets_: dict[str, str] | None = None) -> None:
        self.vault.state.write(
            "config.json", vault_config(self.key, readers, secrets_ or {TOKEN_SECRET: self.token})
        )


@pytest.fixture
def azure(tmp_path: Path) -> Iterator[Azure]:
    key = secrets.token_bytes(32)
    token = secrets.token_hex(24)
    imds = FakeImds(tmp_path / "imds")
    imds.state.write("config.json", imds_config(key, "ray-head", {CLIENT_ID: "principal-1"}))
    ca, cert, cert_key = tls_certificate(tmp_path / "tls", "127.0.0.1")
    vault = FakeKeyVault(tmp_path / "vault", cert, cert_key)
    vault.state.write("config.json", vault_config(key, [CLIENT_ID], {TOKEN_SECRET: token}))
    source = render.document_files((REPO / "cloud-init" / "rendered" / "worker.yaml").read_text())[
        render.NODE_CHECK_PATH
    ]
    node_check = tmp_path / "node_check.py"
    node_check.write_text(source)
    imds.start()
    vault.start()
    try:
        yield Azure(imds, vault, ca, key, token, node_check)
    finally:
        imds.stop()
        vault.stop()


def test_reads_the_token_with_the_identity(azure: Azure, tmp_path: Path) -> None:
    p, out, failed = azure.run(tmp_path)
    assert p.returncode == 0, p.stderr
    assert out.read_text() == azure.token
    assert not failed.exists()
    # It asked the metadata service for a vault token for its own identity, then the vault.
    imds_calls = azure.imds.state.lines("requests.jsonl")
    assert imds_calls[0]["path"] == "/metadata/identity/oauth2/token"
    assert imds_calls[0]["query"]["client_id"] == CLIENT_ID
    assert imds_calls[0]["query"]["resource"] == "https://vault.azure.net"
    vault_calls = azure.vault.state.lines("requests.jsonl")
    assert [c["path"] for c in vault_calls] == [f"/secrets/{TOKEN_SECRET}"]
    assert vault_calls[0]["query"]["api-version"] == "7.4" and vault_calls[0]["authorization"]


def test_waits_while_the_role_propagates(azure: Azure, tmp_path: Path) -> None:
    azure.grant(readers=[])  # the role assignment has not reached the vault yet
    p = subprocess.Popen(
        azure.command(tmp_path, timeout=300),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=azure.env,
    )
    assert p.stderr is not None
    said = []
    try:
        # The role arrives once the node was refused and said it waits (not after a fixed
        # delay, which a loaded machine starting Python can outrun: it would never be refused).
        for line in p.stderr:
            said.append(line)
            if "waiting for the cluster token" in line:
                azure.grant(readers=[CLIENT_ID])
                break
        _, err = p.communicate(timeout=120)
    finally:
        p.kill()
    err = "".join(said) + err
    assert p.returncode == 0, err
    assert (tmp_path / "token").read_text() == azure.token
    assert "ForbiddenByRbac" in said[-1]  # it said why it was waiting
    # Refused, then asked again once the role was there.
    assert len(azure.vault.state.lines("requests.jsonl")) >= 2


def test_gives_up_with_the_reason_in_the_failure_marker(azure: Azure, tmp_path: Path) -> None:
    azure.grant(readers=["someone-else"])
    p, out, failed = azure.run(tmp_path, timeout=3)
    assert p.returncode == 1
    reason = failed.read_text().strip()
    assert reason.startswith("cannot read the cluster token after 3 s: Key Vault")
    assert "HTTP 403 Forbidden/ForbiddenByRbac" in reason
    assert not out.exists() or out.read_text() == ""


def test_an_identity_the_vm_does_not_have_is_named(azure: Azure, tmp_path: Path) -> None:
    azure.imds.state.write("config.json", imds_config(azure.key, "ray-head", {"other": "p"}))
    p, _, failed = azure.run(tmp_path, timeout=2)
    assert p.returncode == 1
    assert "instance metadata identity token: HTTP 400 invalid_request: Identity not found" in (
        failed.read_text()
    )


def test_refuses_plain_http_and_short_tokens(azure: Azure, tmp_path: Path) -> None:
    p = subprocess.run(
        [
            sys.executable,
            str(azure.node_check),
            "token",
            "--vault",
            "http://vault.example/",
            "--secret",
            TOKEN_SECRET,
            "--client-id",
            CLIENT_ID,
            "--out",
            str(tmp_path / "t"),
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 1 and "must be an https:// URL" in p.stderr
    azure.grant(readers=[CLIENT_ID], secrets_={TOKEN_SECRET: "short"})
    p, _, failed = azure.run(tmp_path)
    assert p.returncode == 1 and "holds 5 characters, need 32+" in failed.read_text()


def test_an_untrusted_vault_certificate_is_not_accepted(azure: Azure, tmp_path: Path) -> None:
    out = tmp_path / "token"
    p = subprocess.run(
        [
            sys.executable,
            str(azure.node_check),
            "token",
            "--vault",
            azure.vault.url,
            "--secret",
            TOKEN_SECRET,
            "--client-id",
            CLIENT_ID,
            "--out",
            str(out),
            "--timeout",
            "2",
            "--imds",
            azure.imds.url,
        ],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "SSL_CERT_FILE"},
    )
    assert p.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in p.stderr
    assert not out.exists()
