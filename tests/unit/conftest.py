"""Fixtures the unit tests of several modules share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from blob_support import answer_tokens_with, vault_token_answer
from fakes.local_blob import CLIENT_ID, Blob, local_blob
from harness import blobsync


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
