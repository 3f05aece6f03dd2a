"""What the tests of the nodes' Azure calls share: the rehearsal's stand-in metadata service and
Compute on loopback over TLS, signing tokens with one key, and azure-identity pointed at them."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nodekit.rehearsal.standins.azure_compute import FakeCompute, compute_config
from nodekit.rehearsal.standins.azure_node import FakeImds, imds_config, tls_certificate


@dataclass
class Loopback:
    imds: FakeImds
    compute: FakeCompute
    ca: Path
    """The CA that signed the fakes' certificate (what the clients trust)."""


@contextlib.contextmanager
def loopback_azure(
    tmp_path: Path,
    vm: str,
    identities: dict[str, str],
    writers: list[str],
    scale_sets: list[dict[str, Any]],
    *,
    resource_id: str = "",
    virtual_machines: list[dict[str, Any]] | None = None,
    autoscale_settings: list[dict[str, Any]] | None = None,
    **hooks: Any,
) -> Iterator[Loopback]:
    """The metadata service of VM ``vm`` with ``identities`` (client id → principal), and
    Compute with ``scale_sets`` (VMs, autoscale settings) that ``writers`` may change;
    ``hooks``: FakeCompute's ``on_create``, ``on_delete``, ... Both stop on leaving."""
    key = secrets.token_bytes(32)
    ca, cert, cert_key = tls_certificate(tmp_path, "127.0.0.1")
    imds = FakeImds(tmp_path / "imds").start()
    try:
        imds.state.write("config.json", imds_config(key, vm, identities, resource_id=resource_id))
        compute = FakeCompute(tmp_path / "compute", cert, cert_key, **hooks).start()
        try:
            compute.state.write(
                "config.json",
                compute_config(
                    key, compute.url, writers, scale_sets, virtual_machines, autoscale_settings
                ),
            )
            yield Loopback(imds, compute, ca)
        finally:
            compute.stop()
    finally:
        imds.stop()


def use_managed_identity(monkeypatch: pytest.MonkeyPatch, imds: FakeImds) -> None:
    """azure-identity's managed identity credential asks the IMDS at this host instead of
    169.254.169.254; no other credential source may be picked up from the environment."""
    monkeypatch.setenv("AZURE_POD_IDENTITY_AUTHORITY_HOST", imds.url)
    for name in ("IDENTITY_ENDPOINT", "IDENTITY_HEADER", "MSI_ENDPOINT", "MSI_SECRET"):
        monkeypatch.delenv(name, raising=False)
