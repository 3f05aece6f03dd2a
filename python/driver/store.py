"""Read a cluster's results store (Azure Blob Storage) directly, with no cluster and no SSH.

Jobs mirror their run folder to the cluster's ``results`` container (examples/harness/store.py
and blobsync.py write it); this module lists the runs there and downloads one run's published
files, with the user's own Azure credential (azure-identity's ``DefaultAzureCredential``: the
``az login`` of a laptop, a managed identity on a VM). Layout of a run, ``<container>/<id>/``::

    progress.csv, events.out.tfevents.*, summary.json   mirrored from the run folder
    checkpoints/000010/checkpoint/...                     one prefix per checkpoint
    checkpoints/000010/progress.csv                       the rows up to that checkpoint
    latest.json                                           the pointer, written last

``latest.json`` (``{"checkpoint": "checkpoints/000010", "iteration", "env_steps", "files":
{name: size}}``) names the last *complete* checkpoint; a newer prefix is one still uploading
(or one whose uploader was killed), so a download takes the run's plain files and exactly the
files the pointer lists, never a half-written checkpoint.

Ray Tune's own experiments (a user's ``Tuner``, whose default storage is the container mounted
on the nodes) are under ``ray_results/<experiment>/``, in Tune's layout::

    experiment_state-<timestamp>.json, tuner.pkl, trainable.pkl, basic-variant-state-*.json
    <trial>/params.json, params.pkl, progress.csv, result.json, events.out.tfevents.*
    <trial>/checkpoint_000000/..., checkpoint_000001/...   numbered from 0

:meth:`Store.runs` lists each as one run (``ray_results/<experiment>``, with its trial count);
:meth:`Store.download_experiment` takes its top-level files, each trial's plain files and each
trial's last complete checkpoint (:func:`last_checkpoint` says which is complete and why).

What is in the store is not trusted more than what is on a head: a job (or anyone with write
access to the container) chooses blob names, so a name that is not a plain relative path
(``..``, a leading ``/``, a backslash, control characters) is left out and said, every local
path is checked to stay inside the destination, and nothing is written through a symlink (a
link found where a file goes is removed first; no link is ever created).

A download resumes: each file is written as a partial file named by the blob's name and version
(:func:`partial`: its ETag and size) and renamed when complete; only that file is continued,
with a range read that asks for the same ETag, never another local file (a truncated copy, the
blob ``NAME.part`` of the same run). A complete file (same size, modification time set to the
blob's) is skipped; a full disk leaves the partial file for the next try. Whatever the store
says is read within bounds (:mod:`driver.untrusted`): latest.json up to
:data:`MAX_POINTER_BYTES` and JSON nested at most 64 deep; a file this file system cannot hold
as named is left out, not the run.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import hashlib
import json
import os
import pickletools
import re
import stat
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

from driver import untrusted
from driver.errors import DriverError, one_line
from driver.progress import ByteProgress
from driver.results import inside, local_error, write_all
from driver.untrusted import redact_url

RESULTS_URL_ENV = "RAYDRIVER_RESULTS_URL"
"""The results container's URL (also what the harness reads on the nodes)."""
EMULATOR_ENV = "RAYDRIVER_RESULTS_EMULATOR"
"""``HOST:PORT`` of a storage emulator (Azurite) the user means: the one host besides Azure's
storage endpoint that gets the user's Azure token (``rehearse storage`` prints it)."""
MAX_POINTER_BYTES = 8 << 20
"""latest.json lists a checkpoint's files: ~100 bytes each."""
LATEST = "latest.json"
PROGRESS_CSV = "progress.csv"
CHECKPOINTS = "checkpoints"
TUNE_ROOT = "ray_results"
"""Tune's default storage on the nodes (the ``ray`` user's ~/ray_results) is this prefix."""
TUNE_CHECKPOINT = re.compile(r"checkpoint_(\d{6,})")
CHECKPOINT_COLUMN = "checkpoint_dir_name"
"""The column of a Tune trial's progress.csv naming the checkpoint a result came with."""
EXPERIMENT_STATE = re.compile(r"experiment_state-[0-9_-]+\.json")
"""Tune's state of an experiment, at its top: one per start, the newest name the current one."""
MAX_STATE_BYTES = 64 << 20
"""An experiment state holds each trial's config and checkpoint list: kilobytes to megabytes."""
STORAGE_SCOPE = "https://storage.azure.com/.default"
CHUNK = 4 << 20
EXPECTED = (
    "expected the results container's URL, https://ACCOUNT.blob.core.windows.net/CONTAINER "
    "(or Azurite's https://HOST:PORT/ACCOUNT/CONTAINER)"
)
RETRY: dict[str, Any] = {"retry_total": 3, "initial_backoff": 1, "increment_base": 2}
"""Storage's default retries wait 15 s, 18 s, 24 s... on an address that does not answer."""


def tune_experiment(text: str) -> str | None:
    """``text`` when it names a Tune experiment (``ray_results/EXPERIMENT``, one folder name);
    None when it does not start with ``ray_results/``; a DriverError when it does but names no
    one folder."""
    if not text.startswith(f"{TUNE_ROOT}/"):
        return None
    experiment = text[len(TUNE_ROOT) + 1 :]
    if not safe_name(experiment) or "/" in experiment:
        raise DriverError(
            f"{untrusted.shown(text, 200)!r}: expected {TUNE_ROOT}/EXPERIMENT (one folder "
            "name, as `runs` lists it)"
        )
    return text


@dataclass(frozen=True)
class StoreUrl:
    url: str
    account_url: str
    account: str
    container: str


def parse_url(text: str, emulator: str | None = None) -> StoreUrl:
    """The container a URL names; a DriverError with one line when it names none, or when the
    driver would not send the user's Azure token to its host: only Azure's storage endpoint
    (``*.blob.core.windows.net``) gets it, or the emulator ``emulator`` names
    (``HOST:PORT``, from :data:`EMULATOR_ENV`). The URL may not carry secrets (user info, a
    query: a SAS token), and no message repeats them."""
    shown = redact_url(text)
    url = text.strip().rstrip("/")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        raise DriverError(f"{EXPECTED}, got {shown!r}") from None
    if parts.username is not None or parts.password is not None or parts.query:
        raise DriverError(
            f"{shown}: a results URL with "
            + ("user info (user:password@)" if "@" in parts.netloc else "a query (a SAS token?)")
            + " is refused (not repeated here); give the container's URL alone: the driver signs "
            "in with your Azure credential"
        )
    path = [p for p in parts.path.split("/") if p]
    bad = DriverError(f"{EXPECTED}, got {shown!r}")
    if parts.scheme != "https" or not parts.hostname or parts.fragment:
        raise bad
    host = parts.hostname
    if host.endswith(".blob.core.windows.net"):
        if len(path) != 1:
            raise bad
        account, container = host.split(".")[0], path[0]
        account_url = f"https://{parts.netloc}"
    elif host.endswith(".core.windows.net") or len(path) != 2:
        raise bad
    else:
        if _authority(emulator) != (host.lower(), port or 443):
            raise DriverError(
                f"{shown}: {host} is not Azure's storage endpoint (ACCOUNT.blob.core.windows.net), "
                "so it gets no Azure token: for an emulator (Azurite) set "
                f"{EMULATOR_ENV}={parts.netloc} "
                + (f"(it names {shown_value(emulator)})" if emulator else "(it is not set)")
            )
        account, container = path
        account_url = f"https://{parts.netloc}/{account}"
    if not re.fullmatch(r"[a-z0-9]{3,24}", account):
        raise DriverError(
            f"{shown!r}: the storage account name {account!r} is not 3-24 lower-case letters and "
            "digits"
        )
    if not re.fullmatch(r"[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]", container):
        raise DriverError(
            f"{shown!r}: the container name {container!r} is not 3-63 lower-case letters, "
            "digits and single hyphens"
        )
    return StoreUrl(f"{account_url}/{container}", account_url, account, container)


def _authority(text: str | None) -> tuple[str, int] | None:
    """``HOST:PORT`` (or a URL) as (host, port); None when it names none."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        parts = urllib.parse.urlsplit(text if "//" in text else f"//{text}")
        return ((parts.hostname or "").lower(), parts.port or 443) if parts.hostname else None
    except ValueError:
        return None


def shown_value(text: str | None) -> str:
    return repr(untrusted.shown(text or "", 80))


def url_from(given: str | None, env: Mapping[str, str] | None = None) -> StoreUrl | None:
    """The store named by ``--results-url``, else by the environment; None when neither."""
    env = os.environ if env is None else env
    text = given if given is not None else env.get(RESULTS_URL_ENV, "")
    if given is None and not text.strip():
        return None
    return parse_url(text, env.get(EMULATOR_ENV))


class NoRun(DriverError):
    """The store holds nothing under the run's id (it may name a Tune experiment instead)."""


@dataclass(frozen=True)
class Run:
    """One run in the store."""

    id: str
    checkpoint: str | None
    """The published checkpoint (``checkpoints/000010``), None before the first."""
    iteration: int | None
    last_write: datetime
    size: int
    blobs: int
    trials: int | None = None
    """A Tune experiment's (``ray_results/<experiment>``) trial count; None for a harness run."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": "run" if self.trials is None else "tune-experiment",
            "checkpoint": self.checkpoint,
            "iteration": self.iteration,
            "trials": self.trials,
            "last_write": self.last_write.isoformat(),
            "size": self.size,
            "blobs": self.blobs,
        }


@dataclass(frozen=True)
class Wanted:
    name: str
    """Relative to the run's prefix."""
    size: int
    modified: float
    """The blob's last write (epoch seconds)."""
    etag: str = ""
    """The blob's version: a partial file is resumed only for the same one."""


@dataclass(frozen=True)
class StoreDownload:
    source: str
    destination: Path
    checkpoint: str | None
    iteration: int | None
    fetched: int
    resumed: int
    skipped: int
    bytes_fetched: int
    left_out: tuple[str, ...] = ()
    """Blobs not downloaded: names that are not plain relative paths."""
    unpublished: int = 0
    """Blobs of checkpoints newer than the one the pointer names (still uploading, or their
    uploader stopped), and blobs in its folder that it does not list."""
    older: int = 0
    """Blobs of checkpoints older than the published one (published before; not downloaded)."""
    unwritable: tuple[str, ...] = ()
    """Files this file system cannot hold as named (``NAME (reason)``): a name part over 255
    bytes, a file where the store also has a folder of that name."""
    trials: tuple[tuple[str, str | None], ...] | None = None
    """A Tune experiment's trials and the checkpoint downloaded for each (None: no complete
    one); None for a harness run."""


def safe_name(name: str) -> bool:
    """A plain relative path: no empty, ``.`` or ``..`` part, no backslash or control
    character (C0, DEL, C1: U+009B is a terminal's CSI)."""
    if not name or name.startswith("/") or "\\" in name:
        return False
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in name):
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


class Store:
    """The results container, read with DefaultAzureCredential (or ``credential``)."""

    def __init__(self, url: StoreUrl, credential: Any = None) -> None:
        self.url = url
        self._credential = credential
        self._container: Any = None

    def container(self) -> Any:
        if self._container is None:
            from azure.storage.blob import ContainerClient

            credential = self._credential
            if credential is None:
                credential = untrusted.credential()
            # A token first: storage's client retries a credential that finds none (seconds of
            # back-off per request) before it says so.
            with self.errors(f"reading {self.url.url}"):
                credential.get_token(STORAGE_SCOPE)
            self._container = ContainerClient(
                self.url.account_url, self.url.container, credential=credential, **RETRY
            )
        return self._container

    def close(self) -> None:
        if self._container is not None:
            self._container.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- errors ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def errors(self, doing: str) -> Iterator[None]:
        """Azure's exceptions as one line each."""
        from azure.core.exceptions import (
            ClientAuthenticationError,
            HttpResponseError,
            ResourceModifiedError,
            ResourceNotFoundError,
            ServiceRequestError,
            ServiceResponseError,
        )

        try:
            yield
        except ClientAuthenticationError as e:
            if e.status_code is None:  # the credential's, not storage's
                raise DriverError(
                    f"no Azure credential for reading {self.url.url}: sign in with `az login` "
                    f"({_credential_reason(e.message)})"
                ) from None
            raise DriverError(self._refused(e, doing)) from None
        except ResourceModifiedError:
            raise DriverError(
                f"{doing}: the blob changed since it was listed (written again): download again"
            ) from None
        except ResourceNotFoundError as e:
            if _code(e) == "ContainerNotFound":
                raise DriverError(
                    f"the container {self.url.url} does not exist (check the storage account "
                    "and container name: the cluster's deployment output results_url)"
                ) from None
            raise DriverError(f"{doing} failed: {_status(e)}") from None
        except HttpResponseError as e:
            if e.status_code == 403:
                raise DriverError(self._refused(e, doing)) from None
            raise DriverError(f"{doing} failed: {_status(e)}") from None
        except (ServiceRequestError, ServiceResponseError) as e:
            raise DriverError(
                f"cannot reach {self.url.account_url} ({doing}): {_first_line(str(e))}"
            ) from None

    def _refused(self, e: Any, doing: str) -> str:
        return (
            f"storage refused {doing} ({_status(e)}): your Azure identity needs the role "
            f"Storage Blob Data Reader (or Contributor) on {self.url.url}, and the storage "
            "account must let your address in"
        )

    # -- listing ---------------------------------------------------------------------------------
    def _pointer(self, run: str) -> tuple[dict[str, Any] | None, bytes]:
        from azure.core.exceptions import ResourceNotFoundError

        with self.errors(f"reading {run}/{LATEST}"):
            try:
                data: bytes = (
                    self.container()
                    .get_blob_client(f"{run}/{LATEST}")
                    .download_blob(offset=0, length=MAX_POINTER_BYTES + 1, max_concurrency=1)
                    .readall()
                )
            except ResourceNotFoundError as e:
                if _code(e) == "ContainerNotFound":
                    raise
                return None, b""
        where = f"{self.url.url}/{untrusted.shown(run, 130)}/{LATEST}"
        if len(data) > MAX_POINTER_BYTES:
            raise DriverError(f"{where} is larger than {MAX_POINTER_BYTES} bytes: not a pointer")
        try:
            pointer = untrusted.loads(data)
            name = pointer["checkpoint"]
            files = pointer["files"]
            if not isinstance(name, str) or not isinstance(files, dict):
                raise TypeError
            if not safe_name(name) or not name.startswith(f"{CHECKPOINTS}/"):
                raise DriverError(
                    f"{where} names a checkpoint outside the run's checkpoints: "
                    f"{untrusted.shown(repr(name), 200)}"
                )
            for rel, size in files.items():
                if not isinstance(rel, str) or not isinstance(size, int) or size < 0:
                    raise TypeError
        except untrusted.Unreadable as e:
            raise DriverError(f"{where} is not a checkpoint pointer ({e})") from None
        except (ValueError, KeyError, TypeError):
            raise DriverError(f"{where} is not a checkpoint pointer") from None
        return pointer, data

    def runs(self) -> list[Run]:
        """Every run in the container (its first name part), newest write first."""
        found: dict[str, list[Any]] = {}
        with self.errors(f"listing {self.url.url}"):
            for blob in self.container().list_blobs():
                run, sep, rest = str(blob.name).partition("/")
                if run == TUNE_ROOT:  # ray_results/<experiment>/...: one run per experiment
                    experiment, sep, _ = rest.partition("/")
                    run = f"{TUNE_ROOT}/{experiment}"
                if sep:
                    found.setdefault(run, []).append(blob)
        runs = []
        for run, blobs in found.items():
            if run.startswith(f"{TUNE_ROOT}/"):
                # A trial is a folder of the experiment that holds files of its own.
                trials = {
                    parts[2]
                    for b in blobs
                    if len(parts := str(b.name).split("/")) == 4 and parts[2] and parts[3]
                }
                runs.append(
                    Run(
                        run,
                        None,
                        None,
                        max(b.last_modified for b in blobs),
                        sum(int(b.size or 0) for b in blobs),
                        len(blobs),
                        len(trials),
                    )
                )
                continue
            pointer = None
            if any(b.name == f"{run}/{LATEST}" for b in blobs):
                try:
                    pointer, _ = self._pointer(run)
                except DriverError:
                    pointer = None  # said by download; the listing still shows the run
            iteration = pointer.get("iteration") if pointer else None
            runs.append(
                Run(
                    run,
                    str(pointer["checkpoint"]) if pointer else None,
                    iteration if isinstance(iteration, int) else None,
                    max(b.last_modified for b in blobs),
                    sum(int(b.size or 0) for b in blobs),
                    len(blobs),
                )
            )
        return sorted(runs, key=lambda r: r.last_write, reverse=True)

    def published(
        self, run: str
    ) -> tuple[dict[str, Any] | None, bytes, list[Wanted], list[str], int, int]:
        """(pointer, its bytes, the files to download, names left out, unpublished blobs, blobs
        of older checkpoints)."""
        pointer, data = self._pointer(run)
        blobs: dict[str, Any] = {}
        with self.errors(f"listing {run} in {self.url.url}"):
            for blob in self.container().list_blobs(name_starts_with=f"{run}/"):
                blobs[str(blob.name)[len(run) + 1 :]] = blob
        if not blobs:
            raise NoRun(f"no run {run} in {self.url.url} (see `runs` for the runs there)")
        wanted: list[Wanted] = []
        left_out: list[str] = []
        unpublished = older = 0
        checkpoint = f"{pointer['checkpoint']}/" if pointer else None
        for name, blob in sorted(blobs.items()):
            if name == LATEST:
                continue  # written from the pointer read above: the one the files match
            if not safe_name(name):
                left_out.append(name)
                continue
            if name.startswith(f"{CHECKPOINTS}/"):
                if checkpoint is None or not name.startswith(checkpoint):
                    # checkpoints/NNNNNN/...: the same width, so the names sort as the numbers
                    folder = "/".join(name.split("/")[:2]) + "/"
                    if checkpoint is not None and folder < checkpoint:
                        older += 1
                    else:
                        unpublished += 1
                    continue
                if pointer and name[len(checkpoint) :] not in pointer["files"]:
                    unpublished += 1  # not part of the published checkpoint
                    continue
            wanted.append(
                Wanted(
                    name,
                    int(blob.size or 0),
                    blob.last_modified.timestamp(),
                    str(blob.etag or ""),
                )
            )
        if pointer and checkpoint:
            have = {w.name: w.size for w in wanted}
            for rel, size in pointer["files"].items():
                name = checkpoint + rel
                if not safe_name(name):
                    left_out.append(name)
                elif have.get(name) != size:
                    raise DriverError(
                        f"{self.url.url}/{run}/{name} is "
                        + ("missing" if name not in have else f"{have[name]} bytes")
                        + f", the published checkpoint ({LATEST}) says {size} bytes"
                    )
        return pointer, data, wanted, left_out, unpublished, older

    def fetch_progress(self, run: str, folder: Path) -> Path:
        """RUN's mirrored progress.csv into ``folder`` (made here), for plotting."""
        from azure.core.exceptions import ResourceNotFoundError

        name = f"{run}/{PROGRESS_CSV}"
        with self.errors(f"reading {name}"):
            try:
                # Streamed to the file: the blob's size is the store's to choose.
                stream = self.container().get_blob_client(name).download_blob(max_concurrency=1)
            except ResourceNotFoundError as e:
                if _code(e) == "ContainerNotFound":
                    raise
                if not any(True for _ in self.container().list_blobs(name_starts_with=f"{run}/")):
                    raise NoRun(
                        f"no run {run} in {self.url.url} (see `runs` for the runs there)"
                    ) from None
                raise DriverError(
                    f"no {PROGRESS_CSV} for {run} in {self.url.url} yet (the run finished no "
                    "iteration)"
                ) from None
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / PROGRESS_CSV
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW, 0o644)
        except OSError as e:
            raise local_error(target, e) from None
        with os.fdopen(fd, "wb", buffering=0) as out, self.errors(f"reading {name}"):
            for chunk in stream.chunks():
                write_all(out, chunk, target)
        return folder

    # -- downloading -----------------------------------------------------------------------------
    def download(
        self, run: str, destination: Path, progress: ByteProgress | None = None
    ) -> StoreDownload:
        pointer, data, wanted, left_out, unpublished, older = self.published(run)
        _prepare(destination)
        got = self._get(run, wanted, destination, progress, left_out)
        if pointer:
            _write_whole(destination / LATEST, data)
        iteration = pointer.get("iteration") if pointer else None
        return StoreDownload(
            f"{self.url.url}/{run}",
            destination,
            str(pointer["checkpoint"]) if pointer else None,
            iteration if isinstance(iteration, int) else None,
            got.fetched,
            got.resumed,
            got.skipped,
            got.bytes,
            tuple(left_out),
            unpublished,
            older,
            tuple(got.unwritable),
        )

    def _get(
        self,
        run: str,
        wanted: list[Wanted],
        destination: Path,
        progress: ByteProgress | None,
        left_out: list[str],
    ) -> _Got:
        """The ``wanted`` blobs of RUN's prefix into ``destination``: a complete file is
        skipped, a partial one continued; a name whose folder would leave ``destination`` is
        added to ``left_out``."""
        got = _Got()
        todo: list[tuple[Wanted, Path, int]] = []
        for w in wanted:
            local = destination.joinpath(*PurePosixPath(w.name).parts)
            # The folder must stay inside; a link at the file's own name is replaced.
            if not inside(destination, local.parent):
                left_out.append(w.name)
                continue
            start = _resume_from(local, w)
            if start is None:
                got.skipped += 1
            else:
                todo.append((w, local, start))
        total = sum(w.size - start for w, _, start in todo)
        if progress:
            progress(0, total)
        for w, local, start in todo:
            base = got.bytes

            def step(done: int, base: int = base) -> None:
                if progress:
                    progress(min(base + done, total), total)

            try:
                self._fetch(run, w, local, start, step)
            except _Unwritable as e:
                got.unwritable.append(f"{untrusted.shown(w.name, 80)} ({e})")
                continue
            got.fetched += 1
            got.resumed += start > 0
            got.bytes += w.size - start
        if progress:
            progress(total, total)
        return got

    # -- Tune experiments ------------------------------------------------------------------------
    def experiment(self, name: str) -> str | None:
        """The Tune experiment NAME means, as ``ray_results/<experiment>``: NAME itself when it
        starts with ``ray_results/``; ``ray_results/NAME`` when the store has no harness run
        NAME but has that experiment (a harness run of the same name wins); else None."""
        if (named := tune_experiment(name)) is not None:
            return named
        if not safe_name(name) or "/" in name or self._holds(f"{name}/"):
            return None
        return f"{TUNE_ROOT}/{name}" if self._holds(f"{TUNE_ROOT}/{name}/") else None

    def experiment_instead(self, name: str, e: NoRun) -> str:
        """After :class:`NoRun` for NAME: the Tune experiment ``ray_results/NAME``, or ``e``
        raised again when there is none."""
        found = self.experiment(name) if "/" not in name else None
        if found is None:
            raise e
        return found

    def _holds(self, prefix: str) -> bool:
        with self.errors(f"listing {untrusted.shown(prefix, 200)} in {self.url.url}"):
            listed = self.container().list_blobs(name_starts_with=prefix, results_per_page=1)
            return next(iter(listed), None) is not None

    def _experiment_blobs(self, name: str) -> dict[str, Any]:
        """The experiment's blobs by their name under ``name/``; one line when it has none."""
        blobs: dict[str, Any] = {}
        with self.errors(f"listing {untrusted.shown(name, 200)} in {self.url.url}"):
            for blob in self.container().list_blobs(name_starts_with=f"{name}/"):
                blobs[str(blob.name)[len(name) + 1 :]] = blob
        if not blobs:
            raise DriverError(
                f"no Tune experiment {untrusted.shown(name, 200)} in {self.url.url} (see `runs` "
                "for the runs and experiments there)"
            )
        return blobs

    def trial_progress(self, name: str, folder: Path) -> list[Path]:
        """Each trial's progress.csv of the experiment ``name`` into ``folder/<trial>/``, for
        plotting; the trial folders, in name order."""
        blobs = self._experiment_blobs(name)
        wanted = [
            _wanted(rel, blob)
            for rel, blob in sorted(blobs.items())
            if safe_name(rel) and len(rel.split("/")) == 2 and rel.endswith(f"/{PROGRESS_CSV}")
        ]
        if not wanted:
            raise DriverError(
                f"no trial of {untrusted.shown(name, 200)} in {self.url.url} has a "
                f"{PROGRESS_CSV} yet (no trial finished an iteration)"
            )
        _prepare(folder)
        got = self._get(name, wanted, folder, None, [])
        if got.unwritable:
            raise DriverError(f"cannot write {folder}: {', '.join(got.unwritable)}")
        return [folder / w.name.split("/")[0] for w in wanted]

    def download_experiment(
        self, name: str, destination: Path, progress: ByteProgress | None = None
    ) -> StoreDownload:
        """The Tune experiment ``name`` (``ray_results/<experiment>``) into ``destination``:
        its top-level files, each trial's plain files and each trial's last complete checkpoint
        (:func:`last_checkpoint`), so the folder restores with ``Tuner.restore`` and a trial's
        checkpoint with ``Algorithm.from_checkpoint``."""
        blobs = self._experiment_blobs(name)
        left_out: list[str] = []
        plain: list[Wanted] = []
        trials: set[str] = set()
        checkpoints: dict[str, dict[int, tuple[str, list[Wanted]]]] = {}
        for rel, blob in sorted(blobs.items()):
            if not safe_name(rel):
                left_out.append(rel)
                continue
            parts = rel.split("/")
            if len(parts) >= 2:
                trials.add(parts[0])
            found = TUNE_CHECKPOINT.fullmatch(parts[1]) if len(parts) >= 3 else None
            if found:
                by_number = checkpoints.setdefault(parts[0], {})
                by_number.setdefault(int(found.group(1)), (parts[1], []))[1].append(
                    _wanted(rel, blob)
                )
            else:
                plain.append(_wanted(rel, blob))
        _prepare(destination)
        # The trials' progress.csv and Tune's newest state first: they say which checkpoints
        # are complete.
        first = [w for w in plain if w.name == f"{w.name.split('/')[0]}/{PROGRESS_CSV}"]
        states = sorted(w.name for w in plain if EXPERIMENT_STATE.fullmatch(w.name))
        first += [w for w in plain if states and w.name == states[-1]]
        got = self._get(name, first, destination, None, left_out)
        registered = registered_checkpoints(destination / states[-1]) if states else None
        chosen: list[Wanted] = []
        picked: list[tuple[str, str | None]] = []
        older = unpublished = 0
        for trial in sorted(trials):
            by_number = checkpoints.get(trial, {})
            last = last_checkpoint(
                destination / trial / PROGRESS_CSV,
                by_number,
                None if registered is None else registered.get(trial, set()),
            )
            for number, (_, files) in by_number.items():
                if number == last:
                    chosen.extend(files)
                elif last is not None and number < last:
                    older += len(files)
                else:
                    unpublished += len(files)
            picked.append((trial, by_number[last][0] if last is not None else None))
        rest = self._get(
            name, [w for w in plain if w not in first] + chosen, destination, progress, left_out
        )
        return StoreDownload(
            f"{self.url.url}/{name}",
            destination,
            None,
            None,
            got.fetched + rest.fetched,
            got.resumed + rest.resumed,
            got.skipped + rest.skipped,
            got.bytes + rest.bytes,
            tuple(left_out),
            unpublished,
            older,
            tuple(got.unwritable + rest.unwritable),
            tuple(picked),
        )

    def _fetch(self, run: str, w: Wanted, local: Path, start: int, step: Any) -> None:
        """The blob into ``local``, through its partial file (:func:`partial`), continued from
        ``start``; the range read asks for the listed version (its ETag), so a blob written
        again meanwhile is an error, never a mix of two versions."""
        from azure.core import MatchConditions

        part = partial(local, w)
        try:
            local.parent.mkdir(parents=True, exist_ok=True)
            most = 255
            with contextlib.suppress(OSError, ValueError):
                most = os.pathconf(local.parent, "PC_NAME_MAX")
            if len(os.fsencode(local.name)) > most:  # found now, not after the download
                raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
            if not start:
                for stale in _partials(local):  # earlier versions' partial files
                    stale.unlink()
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | _NOFOLLOW
            fd = os.open(part, flags, 0o644)
        except OSError as e:
            raise _unwritable(local, e) from None
        with os.fdopen(fd, "ab", buffering=0) as out:
            if start != os.fstat(out.fileno()).st_size:
                out.truncate(0)
                start = 0
            got = 0
            with self.errors(f"downloading {run}/{w.name}"):
                stream = (
                    self.container()
                    .get_blob_client(f"{run}/{w.name}")
                    .download_blob(
                        offset=start,
                        length=w.size - start,
                        max_concurrency=1,
                        **(
                            {"etag": w.etag, "match_condition": MatchConditions.IfNotModified}
                            if w.etag
                            else {}
                        ),
                    )
                    if w.size > start
                    else None
                )
                for chunk in stream.chunks() if stream is not None else ():
                    write_all(out, chunk, local)
                    got += len(chunk)
                    step(got)
        if start + got != w.size:
            raise DriverError(
                f"{run}/{w.name} changed during the download ({start + got} bytes read, "
                f"{w.size} listed): download again"
            )
        try:
            os.utime(part, (w.modified, w.modified))
            _remove_link(local)
            part.replace(local)
        except OSError as e:
            if e.errno in _NOT_HERE:
                part.unlink(missing_ok=True)
            raise _unwritable(local, e) from None


@dataclass
class _Got:
    fetched: int = 0
    resumed: int = 0
    skipped: int = 0
    bytes: int = 0
    unwritable: list[str] = field(default_factory=list)


def _wanted(name: str, blob: Any) -> Wanted:
    return Wanted(name, int(blob.size or 0), blob.last_modified.timestamp(), str(blob.etag or ""))


def _prepare(destination: Path) -> None:
    try:
        destination.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise local_error(destination, e) from None
    if destination.is_symlink():
        raise DriverError(f"{destination} is a symlink: refusing to write through it")


def last_checkpoint(
    progress: Path, present: Mapping[int, object], registered: set[int] | None = None
) -> int | None:
    """A Tune trial's last complete checkpoint, of the numbers in ``present`` (its
    ``checkpoint_NNNNNN`` folders in the store): the highest one a row of its progress.csv
    (``progress``, downloaded) names in the column ``checkpoint_dir_name``; None when none.

    Why a row and not "all its files are there": Tune writes no list of a checkpoint's files,
    so the store cannot say which are missing. But Ray Train persists a reported checkpoint to
    the storage (every file copied and closed; on the mounted container each file is one blob,
    committed whole) *before* the result that names it reaches Tune, which only then appends
    the row. So a checkpoint a row names is complete, and a newer one no row names yet is still
    being written (or its trial stopped mid-copy).

    A progress.csv without the column (RLlib's algorithms run by Tune write none: measured with
    Ray 2.60): the highest of ``registered``, the checkpoints Tune's experiment state lists for
    the trial (:func:`registered_checkpoints`: Tune registers one once its trainable's save,
    persisting included, has returned); without a state (None), the highest-numbered folder,
    which a running trial may still be writing. A progress.csv that cannot be read: none."""
    if not present or not _regular(progress):
        return None
    named: set[int] = set()
    try:
        with progress.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if CHECKPOINT_COLUMN not in (reader.fieldnames or []):
                if registered is None:
                    return max(present)
                return max((n for n in present if n in registered), default=None)
            for row in reader:
                found = TUNE_CHECKPOINT.fullmatch((row.get(CHECKPOINT_COLUMN) or "").strip())
                if found:
                    named.add(int(found.group(1)))
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    return max((n for n in present if n in named), default=None)


def registered_checkpoints(state: Path) -> dict[str, set[int]] | None:
    """The checkpoints Tune registered for each trial (its folder's name), from the
    experiment's ``experiment_state-*.json`` (``state``, downloaded); None when it is not one
    this can read.

    Tune writes each trial as two JSON texts, ``[trial, run metadata]`` under ``trial_data``;
    the trial's folder is ``relative_logdir``, and its checkpoints are inside the run metadata's
    ``checkpoint_manager``, a cloudpickle of Ray Train's checkpoint manager, in hex (Tune's
    ``CLOUDPICKLE_FALLBACK``). That pickle is never loaded (the store is not trusted): its
    opcodes are only listed (:func:`pickletools.genops`, which runs nothing) and each text in
    it ending in ``<trial folder>/checkpoint_NNNNNN`` is a registered checkpoint's path. Tune
    saves the state every few seconds, so a running trial's newest checkpoint may be missing
    from it: what it lists is complete, what it lacks may not be."""
    try:
        if not _regular(state) or state.stat().st_size > MAX_STATE_BYTES:
            return None
        data = json.loads(state.read_text(encoding="utf-8"))
        registered: dict[str, set[int]] = {}
        for entry in data["trial_data"]:
            trial, metadata = (json.loads(text) for text in entry)
            folder = trial["relative_logdir"]
            if not isinstance(folder, str) or not safe_name(folder) or "/" in folder:
                continue
            manager = metadata.get("checkpoint_manager")
            numbers = registered.setdefault(folder, set())
            if not isinstance(manager, dict) or not isinstance(manager.get("value"), str):
                continue
            path = re.compile(rf"(?:.*/)?{re.escape(folder)}/{TUNE_CHECKPOINT.pattern}")
            for _, arg, _ in pickletools.genops(bytes.fromhex(manager["value"])):
                found = path.fullmatch(arg) if isinstance(arg, str) else None
                if found:
                    numbers.add(int(found.group(1)))
        return registered
    except (OSError, ValueError, KeyError, TypeError, AttributeError, EOFError):
        return None


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_PARTIAL = re.compile(r"\.raydriver-[0-9a-f]{16}-[0-9a-f]{16}\.part")
_NOT_HERE = (errno.ENAMETOOLONG, errno.EISDIR, errno.ENOTDIR, errno.EEXIST)
"""Errors of one name on this file system (the store allows 1,024 characters a name and a
file next to a folder of the same name), not of the disk: that file is left out."""


class _Unwritable(Exception):
    """This one file cannot exist here as the store names it."""


def _unwritable(local: Path, e: OSError) -> Exception:
    if e.errno in _NOT_HERE:
        return _Unwritable(e.strerror or str(e))
    return local_error(local, e)


def partial(local: Path, w: Wanted) -> Path:
    """Where ``local`` is written until complete: named by the blob's name and version (ETag and
    size), so only a partial file of this very blob is ever continued, never another blob's
    file (a blob ``NAME.part`` next to ``NAME``) nor one of an older version."""
    name = hashlib.sha256(local.name.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    version = hashlib.sha256(f"{w.etag}\0{w.size}".encode()).hexdigest()[:16]
    return local.with_name(f".raydriver-{name}-{version}.part")


def _partials(local: Path) -> list[Path]:
    """``local``'s partial files of any version (regular files only)."""
    name = hashlib.sha256(local.name.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    try:
        found = list(local.parent.glob(f".raydriver-{name}-*.part"))
    except OSError:
        return []
    return [p for p in found if _PARTIAL.fullmatch(p.name) and _regular(p)]


def _first_line(text: str | None) -> str:
    lines = [x for x in (text or "").splitlines() if x.strip()]
    return one_line(lines[0] if lines else "no details")[:300]


def _credential_reason(message: str | None) -> str:
    """DefaultAzureCredential's many lines as one: the Azure CLI's reason (what a laptop
    uses), else the first credential's."""
    tried = [
        line.strip()
        for line in (message or "").splitlines()
        if line.startswith("\t") and ": " in line
    ]
    if not tried:
        return _first_line(message)
    cli = [t for t in tried if t.startswith("AzureCliCredential:")]
    return "DefaultAzureCredential found none; " + one_line((cli or tried)[0])[:200]


def _code(e: Any) -> str:
    """Storage's error code (``x-ms-error-code``), as text."""
    code = getattr(e, "error_code", None) or ""
    return str(getattr(code, "value", code))


def _status(e: Any) -> str:
    code = getattr(e, "error_code", None) or getattr(e, "reason", None) or ""
    code = getattr(code, "value", code)  # azure-storage-blob's StorageErrorCode
    return f"{e.status_code} {code}".strip() if e.status_code else _first_line(str(e))


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def _remove_link(path: Path) -> None:
    """A symlink (or anything not a regular file) where a file goes is removed, never
    followed."""
    with contextlib.suppress(FileNotFoundError):
        mode = path.lstat().st_mode
        if stat.S_ISDIR(mode):
            raise OSError(errno.EISDIR, "a folder where the store has a file", str(path))
        if not stat.S_ISREG(mode):
            path.unlink()


def _resume_from(local: Path, w: Wanted) -> int | None:
    """None: ``local`` is complete (its size and modification time the blob's); else the offset
    to continue from: the size of the partial file this driver wrote for this version of the
    blob, or 0."""
    if _regular(local):
        st = local.stat()
        if st.st_size == w.size and int(st.st_mtime) == int(w.modified):
            return None
    part = partial(local, w)
    if _regular(part):
        size = part.stat().st_size
        if 0 < size < w.size:
            return size
    return 0


def _write_whole(path: Path, data: bytes) -> None:
    part = partial(path, Wanted(path.name, len(data), 0.0, "whole"))
    try:
        _remove_link(part)
        _remove_link(path)
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "wb", buffering=0) as f:
            f.write(data)
        part.replace(path)
    except OSError as e:
        raise local_error(path, e) from None
