"""The helper process that talks to the results store (Azure Blob Storage), never the trainer.

pyarrow's ``AzureFileSystem`` aborts the whole process (SIGABRT) when its managed-identity token
request fails (tests/unit/test_azurite.py), so everything that reads or writes the store runs
here, in a process of its own that the training process starts, feeds and outlives
(:mod:`harness.store`). This file imports only the standard library and pyarrow (the nodes have
both; the harness package is not imported: it runs as a script, ``python blobsync.py ...``).

Layout of a run in the store, ``<container>/<submission id>/``::

    progress.csv, events.out.tfevents.*, summary.json   mirrored from the run folder
    checkpoints/000010/checkpoint/...                     one prefix per checkpoint
    checkpoints/000010/progress.csv                       the rows up to that checkpoint
    latest.json                                           the pointer, written last

A checkpoint is published only once every one of its files is up, by writing ``latest.json``
(``{"checkpoint": "checkpoints/000010", "iteration", "env_steps", "files": {name: size}}``) with
one Put Blob request: a single request replaces a blob atomically, where pyarrow's output
stream first creates an empty blob and commits the content later (a reader, or a kill, in
between would see an empty pointer). So a pointer never names an incomplete checkpoint, and a
killed uploader leaves the previous pointer.

``upload``: reads JSON commands on stdin (``sync``, ``checkpoint``, ``finish``), writes JSON
events on stdout (``ready``, ``uploaded``, ``published``, ``error``, ``done``). ``fetch``: the
latest checkpoint of a run into a local folder (``checkpoint/`` and ``progress.csv``, the run
folder layout the local resume reads), one JSON line on stdout.

Failures are one line (``{"event": "error", "message": ...}``), never a traceback: no token
from the metadata service, a missing container, a 403 from storage (no role on the container).
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import re
import shutil
import ssl
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

URL_ENV = "RAYDRIVER_RESULTS_URL"
"""The results container's URL: ``https://ACCOUNT.blob.core.windows.net/CONTAINER`` on Azure,
``https://HOST:PORT/ACCOUNT/CONTAINER`` for Azurite (its path style)."""
CLIENT_ID_ENV = "RAYDRIVER_RESULTS_CLIENT_ID"
"""The managed identity's client id (else ``AZURE_CLIENT_ID``, azure-identity's variable)."""
IMDS_ENV = "AZURE_POD_IDENTITY_AUTHORITY_HOST"
"""Where Azure's C++ SDK (pyarrow's) asks for tokens instead of 169.254.169.254; read here too."""
IMDS_DEFAULT = "http://169.254.169.254"
STORAGE_SCOPE = "https://storage.azure.com"
API_VERSION = "2021-08-06"
LATEST = "latest.json"
CHECKPOINTS = "checkpoints"
SYNC_INTERVAL_S = 10.0
"""The run folder's plain files go up at most this often while training (and at every
checkpoint and at the end)."""
MIRROR_SHARE = 0.05
"""At most this share of the uploader's time goes to mirroring: a mirror that took D seconds
waits D / MIRROR_SHARE before the next one. Changed files go up whole (as Ray Tune's syncer
does), and a week's progress.csv and TensorBoard files grow to many megabytes: their uploads
then come less often instead of taking ever more of the node."""
UPLOADER_NICENESS = 10
"""The uploader runs this much nicer than training: on a node whose cores the env runners and
the learner keep busy, uploads take the CPU they leave (benchmarks/results_store.py)."""
CHUNK = 4 << 20
AZURE_ERROR = re.compile(r"Azure Error: \[(\w*)\] (\d{3})")
AZURE_NO_ANSWER = re.compile(r"Azure Error: \[\w*\] (\D.*)")
"""Azure's C++ SDK when no HTTP answer came (no connection, a reset): the reason follows."""


class StoreError(Exception):
    """A one-line reason the store cannot be used; ``transient``: a later try may succeed
    (no connection, a timeout, 5xx)."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


RETRY_DELAYS_S = (2.0, 5.0, 10.0, 20.0)
"""Pauses before a checkpoint whose upload failed on something that may pass is uploaded again
(37 s in all: a network blip, storage restarting); 403 and a missing container are final."""


def transient(e: BaseException) -> bool:
    """Whether an error of pyarrow's (Azure's C++ SDK) may pass: a status of 408, 429 or 5xx, or
    none (no connection, a reset, a timeout). A local file's error (it has an errno) is not."""
    if isinstance(e, OSError) and e.errno is not None:
        return False
    found = AZURE_ERROR.search(str(e))
    if found is None:
        return True
    status = int(found.group(2))
    return status in (408, 429) or status >= 500


@dataclass(frozen=True)
class Store:
    url: str
    account: str
    container: str
    authority: str | None
    """``HOST:PORT`` for a path-style endpoint (Azurite), None for ``*.blob.core.windows.net``."""
    client_id: str | None


def parse_url(text: str, client_id: str | None = None) -> Store:
    """The store named by a container URL (see :data:`URL_ENV`); ValueError with one line."""
    url = text.strip().rstrip("/")
    parts = urllib.parse.urlsplit(url)
    path = [p for p in parts.path.split("/") if p]
    expected = (
        f"expected https://ACCOUNT.blob.core.windows.net/CONTAINER or "
        f"https://HOST:PORT/ACCOUNT/CONTAINER, got {text!r}"
    )
    if parts.scheme != "https" or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"{URL_ENV}: {expected}")
    host = parts.hostname
    if host.endswith(".blob.core.windows.net"):
        if len(path) != 1:
            raise ValueError(f"{URL_ENV}: {expected}")
        account, container, authority = host.split(".")[0], path[0], None
    else:
        if len(path) != 2:
            raise ValueError(f"{URL_ENV}: {expected}")
        account, container, authority = path[0], path[1], parts.netloc
    if not re.fullmatch(r"[a-z0-9]{3,24}", account):
        raise ValueError(
            f"{URL_ENV}: the account name {account!r} is not 3-24 lower-case letters and digits"
        )
    if not re.fullmatch(r"[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]", container):
        raise ValueError(
            f"{URL_ENV}: the container name {container!r} is not 3-63 lower-case "
            "letters, digits and single hyphens"
        )
    return Store(url, account, container, authority, client_id or None)


def from_env(env: dict[str, str] | None = None) -> Store | None:
    """The store the job's environment names, None when it names none."""
    env = dict(os.environ) if env is None else env
    text = env.get(URL_ENV, "").strip()
    if not text:
        return None
    return parse_url(text, env.get(CLIENT_ID_ENV) or env.get("AZURE_CLIENT_ID"))


def _one_line(text: str) -> str:
    return " ".join(text.split())


class Client:
    """The store for one run prefix: bulk data through pyarrow, tokens and the pointer through
    the standard library."""

    def __init__(self, store: Store, prefix: str) -> None:
        self.store = store
        self.prefix = prefix
        self._token: tuple[str, float] | None = None
        self.fs: Any = None

    # -- tokens and the first check -----------------------------------------------------------
    def token(self) -> str:
        """A storage token from the metadata service, as Azure's SDKs ask for it."""
        if self._token and self._token[1] - time.time() > 300:
            return self._token[0]
        query = {"api-version": "2018-02-01", "resource": STORAGE_SCOPE}
        if self.store.client_id:
            query["client_id"] = self.store.client_id
        base = os.environ.get(IMDS_ENV, "").rstrip("/") or IMDS_DEFAULT
        request = urllib.request.Request(
            f"{base}/metadata/identity/oauth2/token?{urllib.parse.urlencode(query)}",
            headers={"Metadata": "true"},
        )
        who = f"the managed identity {self.store.client_id or '(system-assigned)'}"
        try:
            # The metadata service is link-local: never through a proxy, as Azure's SDKs ask it.
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with opener.open(request, timeout=30) as r:
                answer = json.load(r)
            token = str(answer["access_token"])
            expires = float(answer.get("expires_on") or time.time() + 600)
        except urllib.error.HTTPError as e:
            body = e.read().decode(errors="replace")
            try:
                detail = json.loads(body).get("error_description") or body
            except ValueError:
                detail = body
            raise StoreError(
                f"no storage token for {who} from the metadata service ({base}): HTTP {e.code} "
                f"{_one_line(str(detail))[:200]}"
            ) from None
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise StoreError(
                f"no storage token for {who} from the metadata service ({base}): "
                f"{_one_line(str(e))[:200]}"
            ) from None
        if expires <= time.time() + 60:
            # Storage would refuse it (403 AuthenticationFailed), which reads as a missing role.
            raise StoreError(
                f"no usable storage token for {who} from the metadata service ({base}): it "
                f"expired at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(expires))}, before "
                "it was used (is this machine's clock right?)"
            )
        self._token = (token, expires)
        return token

    def connect(self) -> None:
        """Check the token and the container, then open pyarrow's filesystem (after the token
        check: pyarrow aborts the process when it gets none)."""
        self.token()
        import pyarrow.fs as pafs

        kwargs: dict[str, Any] = {}
        if self.store.authority:
            kwargs = {
                "blob_storage_authority": self.store.authority,
                "blob_storage_scheme": "https",
                "dfs_storage_authority": self.store.authority,
                "dfs_storage_scheme": "https",
            }
        if self.store.client_id:
            kwargs["client_id"] = self.store.client_id
        self.fs = pafs.AzureFileSystem(self.store.account, **kwargs)
        try:
            info = self.fs.get_file_info(self.store.container)
        except OSError as e:
            raise StoreError(self.explain(e, f"reading the container {self.store.url}")) from None
        if info.type == pafs.FileType.NotFound:
            raise StoreError(
                f"the container {self.store.url} does not exist (the deployment makes it; "
                "check the storage account and container name)"
            )

    def explain(self, e: BaseException, doing: str) -> str:
        text = str(e)
        found = AZURE_ERROR.search(text)
        if found:
            code, status = found.group(1), found.group(2)
            if status == "403":
                return (
                    f"storage refused {doing} (403 {code}): the identity "
                    f"{self.store.client_id or '(system-assigned)'} needs the role Storage Blob "
                    f"Data Contributor on {self.store.url}"
                )
            if code == "ContainerNotFound":
                return f"the container {self.store.url} does not exist ({doing})"
            return f"{doing} failed: {status} {code}"
        no_answer = AZURE_NO_ANSWER.search(text)
        if no_answer:  # the SDK's own words before it are long and say nothing more
            return f"{doing} failed: {_one_line(no_answer.group(1))[:200]}"
        first = text.strip().splitlines()[0] if text.strip() else type(e).__name__
        return f"{doing} failed: {_one_line(first)[:300]}"

    def key(self, name: str) -> str:
        return f"{self.store.container}/{self.prefix}/{name}"

    # -- writing -------------------------------------------------------------------------------
    def put_file(self, local: Path, name: str) -> int:
        with local.open("rb") as src, self.fs.open_output_stream(self.key(name)) as out:
            size = 0
            while chunk := src.read(CHUNK):
                out.write(chunk)
                size += len(chunk)
        return size

    def put_blob(self, name: str, data: bytes) -> None:
        """One Put Blob request: the blob's content is replaced at once, never half-written."""
        if self.store.authority:
            host, path = self.store.authority, f"/{self.store.account}"
        else:
            host, path = f"{self.store.account}.blob.core.windows.net", ""
        quoted = urllib.parse.quote(f"{self.store.container}/{self.prefix}/{name}")
        conn = http.client.HTTPSConnection(host, context=ssl.create_default_context(), timeout=60)
        try:
            conn.request(
                "PUT",
                f"{path}/{quoted}",
                body=data,
                headers={
                    "Authorization": f"Bearer {self.token()}",
                    "x-ms-version": API_VERSION,
                    "x-ms-blob-type": "BlockBlob",
                    "Content-Type": "application/json",
                },
            )
            response = conn.getresponse()
            response.read()
            code = response.getheader("x-ms-error-code") or ""
        except OSError as e:
            raise StoreError(
                f"writing {name} failed: {_one_line(str(e))[:300]}", transient=True
            ) from None
        finally:
            conn.close()
        if response.status not in (200, 201):
            error = OSError(f"Azure Error: [{code or 'Error'}] {response.status}")
            raise StoreError(self.explain(error, f"writing {name}"), transient(error))

    # -- reading -------------------------------------------------------------------------------
    def read(self, name: str) -> bytes | None:
        import pyarrow.fs as pafs

        if self.fs.get_file_info(self.key(name)).type != pafs.FileType.File:
            return None
        with self.fs.open_input_stream(self.key(name)) as f:
            data: bytes = f.read()
        return data

    def get_file(self, name: str, local: Path) -> int:
        local.parent.mkdir(parents=True, exist_ok=True)
        size = 0
        with self.fs.open_input_stream(self.key(name)) as src, local.open("wb") as out:
            while chunk := src.read(CHUNK):
                out.write(chunk)
                size += len(chunk)
        return size


def _emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def _files(folder: Path) -> list[tuple[Path, str]]:
    """Every regular file under ``folder`` (no links), with its name relative to it."""
    found = []
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            found.append((path, path.relative_to(folder).as_posix()))
    return found


class Uploader:
    """The ``upload`` loop: commands arrive on stdin, the work is done one at a time, a newer
    checkpoint replaces one not started yet."""

    def __init__(self, client: Client, run_dir: Path) -> None:
        self.client = client
        self.run_dir = run_dir
        self.commands: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.mirrored: dict[str, tuple[int, int]] = {}
        self.last_sync = 0.0
        self.sync_every = SYNC_INTERVAL_S
        """Seconds between mirrors: SYNC_INTERVAL_S, or longer after a long mirror."""
        self.reported: set[str] = set()
        self.failures = 0

    def error(self, message: str) -> None:
        self.failures += 1
        if message not in self.reported:  # the same failure is said once
            self.reported.add(message)
            _emit("error", message=message)

    def read_stdin(self) -> None:
        for line in sys.stdin:
            try:
                self.commands.put(json.loads(line))
            except ValueError:
                continue
        self.commands.put(None)  # the trainer is gone (or done): finish what is queued

    def mirror(self) -> None:
        """The run folder's plain files (not checkpoints, not dot entries) that changed."""
        self.last_sync = time.monotonic()
        try:
            self._mirror()
        finally:
            took = time.monotonic() - self.last_sync
            self.sync_every = max(SYNC_INTERVAL_S, took / MIRROR_SHARE)

    def _mirror(self) -> None:
        for path, name in _files(self.run_dir):
            top = name.split("/")[0]
            if top.startswith(".") or top.startswith("checkpoint"):
                continue
            try:
                stat = path.stat()
            except OSError:
                continue
            mark = (stat.st_size, stat.st_mtime_ns)
            if self.mirrored.get(name) == mark:
                continue
            try:
                self.client.put_file(path, name)
            except FileNotFoundError:
                continue
            except OSError as e:
                self.error(self.client.explain(e, f"uploading {name}"))
                return
            self.mirrored[name] = mark

    def checkpoint(self, command: dict[str, Any]) -> None:
        """Upload a staged checkpoint and publish it; one that failed on something that may
        pass (no connection, a timeout, 5xx) is uploaded again after each of
        :data:`RETRY_DELAYS_S`, unless a newer checkpoint waits. Said in one line when it is
        not published."""
        staged = Path(command["dir"])
        try:
            for delay in (*RETRY_DELAYS_S, None):
                failed = self._checkpoint_once(staged, command)
                if failed is None:
                    name = f"{CHECKPOINTS}/{command['name']}"
                    _emit("published", checkpoint=name, iteration=command.get("iteration"))
                    return
                message, may_pass = failed
                if not may_pass or delay is None or self._newer_checkpoint_waits():
                    tries = RETRY_DELAYS_S.index(delay) + 1 if delay else len(RETRY_DELAYS_S) + 1
                    self.error(
                        f"checkpoint {command['name']} not published: {message}"
                        + (f" ({tries} tries)" if may_pass and tries > 1 else "")
                    )
                    return
                time.sleep(delay)
        finally:
            shutil.rmtree(staged, ignore_errors=True)

    def _checkpoint_once(self, staged: Path, command: dict[str, Any]) -> tuple[str, bool] | None:
        """One try: every file, then the pointer. None when published, else (why, whether a
        later try may succeed)."""
        name = f"{CHECKPOINTS}/{command['name']}"
        sizes: dict[str, int] = {}
        try:
            for path, rel in _files(staged):
                sizes[rel] = self.client.put_file(path, f"{name}/{rel}")
                _emit("uploaded", file=f"{name}/{rel}")
            self.mirror()
            pointer = {
                "checkpoint": name,
                "iteration": command.get("iteration"),
                "env_steps": command.get("env_steps"),
                "files": sizes,
                "published": round(time.time(), 3),
            }
            self.client.put_blob(LATEST, (json.dumps(pointer, indent=2) + "\n").encode())
        except StoreError as e:
            return str(e), e.transient
        except OSError as e:
            return self.client.explain(e, f"uploading {name}"), transient(e)
        return None

    def _newer_checkpoint_waits(self) -> bool:
        with self.commands.mutex:
            return any(c and c.get("op") == "checkpoint" for c in self.commands.queue)

    def run(self) -> int:
        threading.Thread(target=self.read_stdin, daemon=True).start()
        pending: dict[str, Any] | None = None
        sync = finishing = False
        while True:
            timeout = None if not sync else max(0.0, self.sync_every - self._since_sync())
            try:
                command = self.commands.get(timeout=0 if finishing else timeout)
            except queue.Empty:
                command = {"op": "idle"}
            while command is not None and command.get("op") != "idle":
                op = command.get("op")
                if op == "checkpoint":
                    if pending:  # superseded before its upload began
                        shutil.rmtree(pending["dir"], ignore_errors=True)
                    pending = command
                elif op == "sync":
                    sync = True
                elif op == "finish":
                    finishing = True
                try:
                    command = self.commands.get_nowait()
                except queue.Empty:
                    command = {"op": "idle"}
            if command is None:
                finishing = True
            if pending:
                self.checkpoint(pending)
                pending, sync = None, False
                continue
            if sync and (finishing or self._since_sync() >= self.sync_every):
                self.mirror()
                sync = False
            if finishing and self.commands.empty():
                self.mirror()
                _emit("done", failures=self.failures)
                return 0

    def _since_sync(self) -> float:
        return time.monotonic() - self.last_sync


def fetch(client: Client, run: str, into: Path) -> dict[str, Any]:
    """RUN's published checkpoint into ``into`` (``checkpoint/``, ``progress.csv``)."""
    try:
        data = client.read(LATEST)
    except OSError as e:
        raise StoreError(client.explain(e, f"reading {run}/{LATEST}")) from None
    if data is None:
        raise StoreError(f"no run {run} in {client.store.url} (no {run}/{LATEST})")
    try:
        pointer = json.loads(data)
        name, sizes = str(pointer["checkpoint"]), dict(pointer["files"])
    except (ValueError, KeyError, TypeError):
        raise StoreError(f"{client.store.url}/{run}/{LATEST} is not a checkpoint pointer") from None
    for rel, size in sizes.items():
        target = (into / rel).resolve()
        if into.resolve() not in target.parents:
            raise StoreError(f"{run}/{LATEST} names a file outside the checkpoint: {rel!r}")
        try:
            got = client.get_file(f"{name}/{rel}", target)
        except OSError as e:
            raise StoreError(client.explain(e, f"downloading {run}/{name}/{rel}")) from None
        if got != size:
            raise StoreError(f"{run}/{name}/{rel} has {got} bytes, the pointer says {size}")
    return {"checkpoint": name, "iteration": pointer.get("iteration"), "files": len(sizes)}


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(description="the results store's helper process")
    p.add_argument("verb", choices=("upload", "fetch"))
    p.add_argument("--run", required=True, help="the run's prefix (its submission id)")
    p.add_argument("--dir", required=True, help="upload: the run folder; fetch: the target")
    args = p.parse_args(argv)
    try:
        store = from_env()
    except ValueError as e:
        _emit("error", message=str(e))
        return 3
    if store is None:
        _emit("error", message=f"no results store: {URL_ENV} is not set")
        return 3
    client = Client(store, args.run)
    try:
        client.connect()
    except StoreError as e:
        _emit("error", message=str(e))
        return 3
    if args.verb == "fetch":
        try:
            found = fetch(client, args.run, Path(args.dir))
        except StoreError as e:
            _emit("error", message=str(e))
            return 3
        _emit("fetched", **found)
        return 0
    _emit("ready")
    os.nice(UPLOADER_NICENESS)
    return Uploader(client, Path(args.dir)).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
