"""The cluster's Key Vault on the bridge, holding the cluster token (HTTPS, with a CA the nodes
trust). It also makes what the other Azure stand-ins share: the key their access tokens are
signed with and the TLS certificate of the bridge address."""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path

from nodekit.rehearsal.services import Context, port, wait_for_port
from nodekit.rehearsal.standins import azure_node
from nodekit.rehearsal.state import State

# checkov:skip=CKV_SECRET_6:The name of the token's Key Vault secret, not a secret value
TOKEN_SECRET_NAME = "ray-cluster-token"
SHARED = "imds.json"
"""In the Azure folder: the token key (hex) and the CA's path, for the metadata services."""


def url(state: State) -> str:
    return f"https://{state.host_ip}:{port(state, 'keyvault')}/"


def token_key(azure_dir: Path) -> bytes:
    return (azure_dir / "token-key").read_bytes()


def tls(azure_dir: Path) -> tuple[Path, Path]:
    """The bridge address's certificate and key (Key Vault's, Compute's)."""
    return azure_dir / "tls" / "server.crt", azure_dir / "tls" / "server.key"


def shared(azure_dir: Path) -> dict[str, str]:
    """``token_key`` (hex) and ``ca`` (path of the CA certificate the nodes trust)."""
    data: dict[str, str] = json.loads((azure_dir / SHARED).read_text())
    return data


def start(ctx: Context, token: str) -> None:
    """Key Vault with ``token`` as the secret :data:`TOKEN_SECRET_NAME`, readable by the
    nodes' identity."""
    azure = ctx.azure_dir
    vault = azure / "vault"
    vault.mkdir(parents=True)
    key = secrets.token_bytes(32)
    (azure / "token-key").write_bytes(key)
    ca, cert, cert_key = azure_node.tls_certificate(azure / "tls", ctx.host)
    config = azure_node.vault_config(
        key, [ctx.state.identity_client_id], {TOKEN_SECRET_NAME: token}
    )
    (vault / "config.json").write_text(json.dumps(config))
    vault_port = ctx.port("keyvault")
    pid = ctx.spawn(
        [
            sys.executable,
            "-m",
            azure_node.__name__,
            "keyvault",
            "--bind",
            ctx.host,
            "--port",
            str(vault_port),
            "--state",
            str(vault),
            "--cert",
            str(cert),
            "--key",
            str(cert_key),
        ],
        azure / "vault.log",
    )
    wait_for_port(ctx.host, vault_port, "the rehearsal's Key Vault", pid=pid)
    (azure / SHARED).write_text(json.dumps({"token_key": key.hex(), "ca": str(ca)}))
