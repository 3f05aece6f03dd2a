"""Fixtures the unit tests of several modules share. A module that needs its own variant of
one (test_price.py's ``fake`` is the Retail Prices API) defines it, and pytest uses that one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from azure_support import CREDENTIAL_ENV, PARAMETERS
from blob_support import answer_tokens_with, vault_token_answer
from fakes.fake_arm import FakeAzure
from fakes.local_blob import CLIENT_ID, Blob, local_blob
from fakes.retail_prices import FakeRetailPrices, vm_meters
from harness import blobsync


# -- Azure Resource Manager (tests/fakes/fake_arm.py) -------------------------------------------
@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAzure]:
    """The fake Resource Manager with a deployment that outputs a head; no developer credential
    in the environment."""
    azure = FakeAzure(tmp_path)
    for name in CREDENTIAL_ENV:
        monkeypatch.delenv(name, raising=False)
    azure.next_outputs = {"headPublicIp": "20.1.2.3", "adminUsername": "azureuser"}
    try:
        yield azure
    finally:
        azure.close()


@pytest.fixture
def prices(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRetailPrices]:
    """Azure's Retail Prices API, which `up` asks before it asks for a yes."""
    items = [*vm_meters("westeurope", "Standard_D4s_v5", 0.23, spot=0.046),
             *vm_meters("eastus", "Standard_D4s_v5", 0.192, spot=0.0192)]  # fmt: skip
    with FakeRetailPrices(items) as api:
        monkeypatch.setenv("RAYDRIVER_PRICES_URL", api.url)
        yield api


@pytest.fixture
def params(tmp_path: Path) -> Path:
    """A copy of the template's parameters file, for a test to change."""
    path = tmp_path / "p.json"
    doc = json.loads(PARAMETERS.read_text())
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module")
def types() -> dict[str, Any]:
    """Azure's resource type definitions the compiled ARM templates are checked against
    (arm_template_support.TYPES, outside the repository)."""
    from arm_template_support import TYPES  # the checks' own module: loaded where they run

    if not TYPES.exists():
        pytest.skip(f"{TYPES} absent: the workflow's bicep build checks the types")
    loaded: dict[str, Any] = json.loads(TYPES.read_text())
    return loaded


# -- Blob storage: Azurite and the fake metadata service (tests/fakes/local_blob.py) ----------
@pytest.fixture(scope="module")
def blob(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Blob]:
    """Azurite started by ``azurite.start`` for a cluster on loopback, with what Key Vault's
    stand-in leaves it (the bridge address's certificate, the token key, the CA), and one
    node's metadata service (fakes/local_blob.py, which the benchmarks use too)."""
    with local_blob(tmp_path_factory.mktemp("azurite")) as started:
        yield started


@pytest.fixture
def env(blob: Blob, monkeypatch: pytest.MonkeyPatch) -> Blob:
    """A node's environment naming the rehearsal's results container."""
    monkeypatch.setenv(blobsync.URL_ENV, f"{blob.url}/results")
    monkeypatch.setenv(blobsync.CLIENT_ID_ENV, CLIENT_ID)
    monkeypatch.setenv(blobsync.IMDS_ENV, blob.imds.url)
    monkeypatch.setenv("SSL_CERT_FILE", str(blob.ca))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    return blob


@pytest.fixture
def refused(env: Blob) -> Iterator[Blob]:
    """The metadata service hands out tokens storage answers with 403."""
    faults = answer_tokens_with(env, vault_token_answer(env))
    try:
        yield env
    finally:
        faults.unlink()
