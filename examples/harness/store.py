"""The training process's side of the results store: it starts the helper process
(:mod:`harness.blobsync`, the only code that talks to storage), hands it work without waiting,
and turns what it reports into one line each in the job's log.

Nothing here can stop training: a store that cannot be used (no token, no role, no container,
the helper killed) is one ``results store: ...`` line, and the run folder stays complete.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import blobsync
from harness.blobsync import Store, StoreError
from harness.runs import PROGRESS_CSV

STAGING = ".uploads"
"""In the run folder: each checkpoint as the helper uploads it (hard links of the checkpoint's
files and a copy of progress.csv), so the next checkpoint's swap cannot change it under the
helper. Not mirrored (a dot entry); removed once uploaded."""
SCRIPT = Path(blobsync.__file__)
RESTARTS = 3
"""How often a helper that died is replaced (at the next checkpoint) in one run."""
HELPER_LOG = ".uploader.log"
"""In the run folder: the helper's stderr (what pyarrow prints when it aborts), not mirrored."""

Log = Callable[[str], None]


def _say(line: str) -> None:
    print(line, flush=True)


def configured(log: Log = _say) -> Store | None:
    """The store the environment names, None when none (or a bad URL: said in one line)."""
    try:
        return blobsync.from_env()
    except ValueError as e:
        log(f"results store: {e}; results stay in the local run folder only")
        return None


def _died(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class Uploader:
    """One run's helper process: :meth:`checkpoint` and :meth:`sync` return at once;
    :meth:`finish` waits for the last upload, at most ``timeout`` seconds. A helper that dies
    (killed, or aborted by pyarrow when a token request fails mid-run) is replaced at the next
    checkpoint, at most :data:`RESTARTS` times; one that ended on a reason it gave (no token,
    no container, a bad URL: exit 3) is not."""

    def __init__(self, store: Store, run_dir: Path, log: Log = _say) -> None:
        self.store = store
        self.run_dir = run_dir
        self.run = run_dir.name
        self.log = log
        self.where = f"{store.url}/{self.run}"
        self.published: list[dict[str, Any]] = []
        self.uploaded: list[str] = []
        self.restarts = 0
        self.failures = 0
        """Uploads that failed (each said in a line when it first happened)."""
        self.declined = False
        """The helper ended on a reason it said (exit 3): not started again."""
        self._done = threading.Event()
        self._changed = threading.Condition()
        """Notified when a checkpoint is published and when a helper ends."""
        self._failed = False
        self._proc: subprocess.Popen[str] | None = None

    def start(self) -> Uploader:
        self._spawn()
        self.log(f"results store: mirroring this run to {self.where}")
        return self

    def _spawn(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with (self.run_dir / HELPER_LOG).open("a") as stderr:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    str(SCRIPT),
                    "upload",
                    "--run",
                    self.run,
                    "--dir",
                    str(self.run_dir),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=_env(self.store),
                start_new_session=True,  # a Ctrl-C to the job stops training, not the upload
            )
        done = threading.Event()
        self._proc, self._done, self._failed = proc, done, False
        threading.Thread(target=self._read, args=(proc, done), daemon=True).start()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and not self._failed

    def _read(self, proc: subprocess.Popen[str], done: threading.Event) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            kind = event.get("event")
            if kind == "error":
                self.log(f"results store: {event.get('message')}")
            elif kind == "published":
                with self._changed:
                    self.published.append(event)
                    self._changed.notify_all()
                self.log(
                    f"results store: checkpoint at iteration {event.get('iteration')} "
                    f"published as {self.where}/{event.get('checkpoint')}"
                )
            elif kind == "uploaded":
                self.uploaded.append(str(event.get("file")))
            elif kind == "done":
                self.failures += int(event.get("failures") or 0)
                done.set()
        code = proc.wait()
        if not done.is_set():
            if proc is self._proc:
                self._failed = True
            if code == 3:  # the helper said why in its own line
                self.declined = True
            else:
                again = (
                    "a new one starts at the next checkpoint"
                    if self.restarts < RESTARTS
                    else "it is not started again"
                )
                self.log(
                    f"results store: the uploader stopped ({_died(code)}; its log: "
                    f"{self.run_dir / HELPER_LOG}); {again}; the local run folder "
                    f"{self.run_dir} has every result"
                )
            done.set()
        with self._changed:
            self._changed.notify_all()

    def _send(self, command: dict[str, Any]) -> bool:
        if not self.alive() or self._proc is None or self._proc.stdin is None:
            return False
        try:
            self._proc.stdin.write(json.dumps(command) + "\n")
            self._proc.stdin.flush()
        except (OSError, ValueError):
            return False
        return True

    def sync(self) -> None:
        """Mirror the run folder's plain files soon (the helper rate-limits)."""
        self._send({"op": "sync"})

    def checkpoint(self, checkpoint: Path, state: dict[str, Any]) -> None:
        """Upload this checkpoint and publish it once complete, in the background."""
        if not self.alive():
            if self._proc is None or self.declined or self.restarts >= RESTARTS:
                return
            self._done.wait(5)  # the old helper's last words are read
            self.restarts += 1
            self._spawn()
            self.log(f"results store: uploader started again ({self.restarts} of {RESTARTS})")
        name = f"{int(state['iteration']):06d}"
        staged = self.run_dir / STAGING / name
        try:
            shutil.rmtree(staged, ignore_errors=True)
            _link_tree(checkpoint, staged / checkpoint.name)
            progress = self.run_dir / PROGRESS_CSV
            if progress.is_file():
                shutil.copyfile(progress, staged / PROGRESS_CSV)
        except OSError as e:
            self.log(f"results store: checkpoint {name} not staged for upload: {e}")
            shutil.rmtree(staged, ignore_errors=True)
            return
        self._send(
            {
                "op": "checkpoint",
                "dir": str(staged),
                "name": name,
                "iteration": state.get("iteration"),
                "env_steps": state.get("env_steps"),
            }
        )

    def wait_published(self, iteration: int, timeout: float) -> dict[str, Any] | None:
        """Wait until a checkpoint of ``iteration`` or later is published (its pointer written),
        at most ``timeout`` seconds: its ``published`` event, or None (not in time, or the
        helper is not running: a stopped one is replaced only at the next checkpoint)."""

        def found() -> dict[str, Any] | None:
            for event in reversed(self.published):
                if int(event.get("iteration") or 0) >= iteration:
                    return event
            return None

        deadline = time.monotonic() + timeout
        with self._changed:
            while (event := found()) is None and self.alive():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
        return event

    def finish(self, timeout: float) -> bool:
        """Wait for the last upload (at most ``timeout`` s); True when everything went up."""
        started = time.monotonic()
        if self._proc is None:
            return False
        if self._send({"op": "finish"}) and self._proc.stdin:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
        finished = self._done.wait(timeout)
        ok = finished and not self._failed and not self.failures
        if not finished:
            self.log(
                f"results store: gave up waiting for the final upload after {timeout:g} s; "
                f"the store may lack the last files, the local run folder {self.run_dir} has "
                "them all"
            )
            self.kill()
        elif ok:
            self.log(
                f"results store: all uploaded to {self.where} "
                f"({time.monotonic() - started:.1f} s at the end)"
            )
        elif self.failures and not self._failed:
            self.log(
                f"results store: uploading ended with {self.failures} failed upload(s), said "
                f"above; the local run folder {self.run_dir} has every result"
            )
        shutil.rmtree(self.run_dir / STAGING, ignore_errors=True)
        return ok

    def kill(self) -> None:
        if self._proc and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()


def _env(store: Store) -> dict[str, str]:
    """The helper's environment: this one, naming ``store``."""
    return {
        **os.environ,
        blobsync.URL_ENV: store.url,
        blobsync.CLIENT_ID_ENV: store.client_id or "",
    }


def _link_tree(source: Path, target: Path) -> None:
    """``source``'s files as hard links under ``target`` (copies where links fail)."""
    for path in sorted(source.rglob("*")):
        dest = target / path.relative_to(source)
        if path.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
        elif path.is_file():
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(path, dest)
            except OSError:
                shutil.copy2(path, dest)
    target.mkdir(parents=True, exist_ok=True)


def fetch_latest(store: Store, run: str, timeout: float = 600) -> Path:
    """RUN's latest published checkpoint, fetched by the helper into a new temporary folder
    (``checkpoint/``, ``progress.csv``: what :func:`harness.runs.latest_checkpoint` reads).
    Raises StoreError with one line."""
    into = Path(tempfile.mkdtemp(prefix=f"resume-{run}-"))
    try:
        done = subprocess.run(
            [sys.executable, str(SCRIPT), "fetch", "--run", run, "--dir", str(into)],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            env=_env(store),
        )
    except subprocess.TimeoutExpired:
        shutil.rmtree(into, ignore_errors=True)
        raise StoreError(f"fetching {run} from {store.url} took over {timeout:g} s") from None
    events = []
    for line in done.stdout.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    if done.returncode == 0 and any(e.get("event") == "fetched" for e in events):
        return into
    shutil.rmtree(into, ignore_errors=True)
    for e in events:
        if e.get("event") == "error":
            raise StoreError(str(e.get("message")))
    raise StoreError(f"fetching {run} from {store.url} failed ({_died(done.returncode)})")
