"""Ray's Jobs API, as the driver uses it: the same calls for local Ray and for a tunnelled head.

A thin layer over ``ray.job_submission.JobSubmissionClient`` that turns its exceptions into
one-line :class:`DriverError` messages, uploads the working directory with a progress callback,
and follows logs until the job ends. The token travels only in the ``Authorization`` header.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from driver.errors import EXIT_USAGE, ConnectionLost, DriverError, NoSuchJob, one_line
from driver.progress import ByteProgress
from driver.settings import clear_ray_client_overrides

TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}

_SUBMISSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def check_submission_id(text: str) -> str:
    """The one rule for submission ids, used by every verb and for the results folder's name.

    Letters, digits, ``_``, ``.`` and ``-``, at most 128, starting with a letter or digit: the id
    names a folder on the head and here, so it may hold no ``/`` and cannot be ``..``.
    """
    if not _SUBMISSION_ID.match(text) or ".." in text:
        raise ValueError(
            f"a submission id is 1-128 letters, digits, '_', '.' or '-' starting with a letter "
            f"or digit (it names the job's results folder), got {text!r}"
        )
    return text


class SdkPreload:
    """Import Ray's Jobs SDK (~0.6 s) in a thread while the caller reaches the cluster.

    The SSH handshake and the head's replies are mostly waiting, so the two overlap. A failure
    in the thread resurfaces in the caller's own import later, with its message. Always
    :meth:`join` (the CLI does, also on errors), so no thread outlives the command.
    """

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        if "ray.job_submission" not in sys.modules:
            self._thread = threading.Thread(target=self._run, name="driver-import-ray", daemon=True)
            self._thread.start()

    @staticmethod
    def _run() -> None:
        with contextlib.suppress(BaseException):
            importlib.import_module("ray.job_submission")

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def preload_sdk() -> SdkPreload:
    return SdkPreload()


def quiet_ray_logs() -> None:
    """Ray's client libraries log at INFO ("Uploading package ..."); the CLI speaks for itself.

    Ray configures its "ray" logger when first imported, so this imports it first.
    """
    import ray.job_submission  # noqa: F401

    logging.getLogger("ray").setLevel(logging.WARNING)
    # The Jobs SDK pins its own logger to INFO ("WebSocket closed for job ...").
    logging.getLogger("ray.dashboard.modules.job.sdk").setLevel(logging.WARNING)


@dataclass(frozen=True)
class JobInfo:
    submission_id: str
    status: str
    entrypoint: str
    message: str
    start_time: float | None
    end_time: float | None
    driver_exit_code: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "submission_id": self.submission_id,
            "status": self.status,
            "entrypoint": self.entrypoint,
            "message": self.message,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "driver_exit_code": self.driver_exit_code,
        }


def _info(details: Any) -> JobInfo:
    def ms(v: Any) -> float | None:
        return v / 1000.0 if v else None

    status = details.status
    return JobInfo(
        submission_id=details.submission_id or "",
        status=getattr(status, "value", str(status)),
        entrypoint=details.entrypoint or "",
        message=details.message or "",
        start_time=ms(details.start_time),
        end_time=ms(details.end_time),
        driver_exit_code=getattr(details, "driver_exit_code", None),
    )


class _ProgressReader:
    """A file wrapper that reports how much of it has been read (requests streams it)."""

    def __init__(self, f: BinaryIO, total: int, progress: ByteProgress | None) -> None:
        self._f, self._total, self._done, self._progress = f, total, 0, progress

    def __len__(self) -> int:
        return self._total

    def read(self, n: int = -1) -> bytes:
        chunk = self._f.read(n if n and n > 0 else 1 << 20)
        self._done += len(chunk)
        if self._progress:
            self._progress(self._done, self._total)
        return chunk


READ_RETRY_PAUSES_S = (1.0, 2.0, 4.0)
"""Pauses before a read that met a server error is tried again (three more tries, 7 s)."""
SUBMIT_RETRY_PAUSES_S = (2.0, 4.0, 8.0, 15.0, 15.0, 15.0)
"""Pauses before a submit that found no job agent is tried again (about a minute in all)."""
CLOSED_WITHOUT_RESPONSE = "Remote end closed connection without response"
"""http.client's words when the dashboard closed a request's connection without answering (seen
on a heavily loaded head during a submit): the tunnel works, the job may or may not exist."""
CLOSED_RETRIES = 2
"""How often a submit whose connection the dashboard closed is tried again."""
NO_AGENT = "No available agent to submit job"
"""Ray's dashboard's answer when the head's job agent has not registered (job_head.py)."""
_SERVER_ERROR = re.compile(r"(status code|HTTP) 5\d\d\b")


def _is_connection_error(e: BaseException) -> bool:
    """Whether ``e`` (or what caused it) says the connection broke, not what the server said."""
    import asyncio

    import aiohttp
    import requests

    kinds = (
        requests.ConnectionError,
        requests.Timeout,
        aiohttp.ClientConnectionError,
        asyncio.TimeoutError,
        ConnectionError,
        TimeoutError,
    )
    seen: set[int] = set()
    current: BaseException | None = e
    while current is not None and id(current) not in seen:
        if isinstance(current, kinds):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    text = str(e)
    return "WebSocket connection closed unexpectedly" in text or "Connection aborted" in text


class LogStream:
    """Where a job's log goes, across reconnections.

    Ray replays a job's log from its first byte to every new follower, so after a reconnection
    the characters already written are skipped: the person sees each line once.
    """

    def __init__(self, write: Callable[[str], None]) -> None:
        self._write = write
        self.written = 0
        """Characters written so far."""
        self.status = ""
        """The job's status when last seen."""
        self._seen = 0
        """Characters received on the current stream."""

    def restart(self) -> None:
        self._seen = 0

    def __call__(self, chunk: str) -> None:
        start = self._seen
        self._seen += len(chunk)
        if self._seen <= self.written:
            return
        new = chunk[max(0, self.written - start) :]
        self._write(new)
        self.written += len(new)


_EXCEPTION_LINE = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception): .+$")


def server_error(text: str) -> str:
    """What the Jobs API's answer says went wrong, on one line.

    A failure inside the dashboard comes back as HTTP 500 with the whole Python traceback
    ("Job with submission_id X already exists" is its last line); keep the status and that line.
    """
    if "Traceback (most recent call last)" not in text:
        return one_line(text, 400)
    head = text.split("Traceback (most recent call last)")[0].strip().rstrip(":")
    lines = [ln for ln in text.splitlines() if _EXCEPTION_LINE.match(ln)]
    if not lines:
        return one_line(text, 400)
    return one_line(f"{head}: {lines[-1].strip()}" if head else lines[-1], 400)


@dataclass
class ClusterStatus:
    """What ``python -m driver status`` (no job id) shows."""

    text: str
    """``ray status`` as the dashboard formats it (nodes, usage, pending demand, autoscaler)."""
    autoscaler: dict[str, Any] | None
    """The autoscaler's own report, None when no autoscaler runs (scaling_mode cpu, local Ray)."""
    autoscaler_error: str | None
    nodes: list[dict[str, Any]]

    def refused_pools(self) -> list[dict[str, Any]]:
        """The node types (pools) Ray's autoscaler last failed to launch, from its availability
        records (``autoscaler_report.node_availability_summary``, camelCase as the dashboard
        serves it): ``{"node_type", "category", "description", "attempted"}``, oldest attempt
        first. On Azure the node provider raises them for a pool Azure refused capacity for:
        the category is Azure's code, the description what Azure said, since when and when the
        pool is asked again."""
        report = (self.autoscaler or {}).get("autoscalerReport") or {}
        records = (report.get("nodeAvailabilitySummary") or {}).get("nodeAvailabilities") or {}
        refused = []
        for key, record in records.items() if isinstance(records, dict) else ():
            if not isinstance(record, dict) or record.get("isAvailable", True):
                continue
            info = record.get("unavailableNodeInformation")
            info = info if isinstance(info, dict) else {}
            refused.append(
                {
                    "node_type": str(record.get("nodeType") or key),
                    "category": str(info.get("category", "")),
                    "description": str(info.get("description", "")),
                    "attempted": float(record.get("lastCheckedTimestamp") or 0),
                }
            )
        return sorted(refused, key=lambda r: (r["attempted"], r["node_type"]))

    def as_dict(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "refused_pools": self.refused_pools(),
            "autoscaler": self.autoscaler,
            "autoscaler_error": self.autoscaler_error,
            "text": self.text,
        }


class JobsClient:
    """Talk to one cluster's Jobs API at ``address`` (``http://127.0.0.1:PORT``).

    Every request has a timeout (Ray's own client has none, so a dead tunnel would hang a
    command); a request that fails because the connection broke raises :class:`ConnectionLost`,
    never an error that reads like the job failed.
    """

    def __init__(
        self, address: str, token: str | None, where: str = "", timeout: float = 10.0
    ) -> None:
        clear_ray_client_overrides()
        from ray.job_submission import JobSubmissionClient

        class BoundedClient(JobSubmissionClient):
            def _do_request(self, method: str, endpoint: str, **kwargs: Any) -> Any:
                kwargs.setdefault("timeout", (timeout, max(60.0, 6 * timeout)))
                return super()._do_request(method, endpoint, **kwargs)

        self.address = address
        self.where = where or address
        self.timeout = timeout
        self.token = token
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            self._client = BoundedClient(address, headers=dict(self._headers))
        except Exception as e:
            if _is_connection_error(e):
                raise ConnectionLost(
                    f"cannot reach the Ray Jobs API of {self.where}: {one_line(e, 300)}"
                ) from None
            raise DriverError(
                f"cannot reach the Ray Jobs API of {self.where} at {address}: {one_line(e, 400)}",
                EXIT_USAGE,
            ) from None

    # -- helpers ---------------------------------------------------------------------------
    def _read(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """A read (it changes nothing on the cluster), tried again after a server error.

        Ray's dashboard answers 500 ("Server got itself in trouble") when one of its own calls
        to the GCS times out, which a head under load does now and then; a command following a
        week-long job must not end on that. Writes (submit, stop) are never repeated."""
        for pause in READ_RETRY_PAUSES_S:
            try:
                return self._call(what, fn, *args)
            except DriverError as e:
                if not _SERVER_ERROR.search(str(e)):
                    raise
                time.sleep(pause)
        return self._call(what, fn, *args)

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except DriverError:
            raise
        except Exception as e:
            text = one_line(e, 400)
            if _is_connection_error(e):
                raise ConnectionLost(
                    f"lost the connection to {self.where} while {what}: {one_line(e, 200)}"
                ) from None
            if "does not exist" in text or "404" in text:
                raise NoSuchJob(f"{what}: no such job on {self.where}") from None
            raise DriverError(
                f"{what}: the Jobs API of {self.where} answered: {server_error(str(e))}",
                EXIT_USAGE,
            ) from None

    # -- working directory -----------------------------------------------------------------
    def upload_package(
        self,
        directory: Path,
        excludes: list[str] | None = None,
        module: bool = False,
        progress: ByteProgress | None = None,
    ) -> str:
        """Package ``directory`` (honouring .gitignore, .rayignore and ``excludes``), upload it
        once, and return its ``gcs://`` URI.

        ``module=False``: the folder's contents, for ``runtime_env["working_dir"]``;
        ``module=True``: the folder itself (importable by its name), for ``py_modules``. Same
        packaging as ``ray job submit``; done here so a person waiting sees upload progress.
        """
        import requests
        from ray._private.runtime_env.packaging import create_package, get_uri_for_directory
        from ray.dashboard.modules.dashboard_sdk import uri_to_http_components

        excludes = list(excludes or [])
        try:
            uri = get_uri_for_directory(str(directory), include_gitignore=True, excludes=excludes)
        except ValueError as e:
            raise DriverError(f"cannot package {directory}: {one_line(e, 400)}") from None
        if self._read("checking the package", self._client._package_exists, uri):
            if progress:
                progress(1, 1)
            return uri
        protocol, name = uri_to_http_components(uri)
        with tempfile.TemporaryDirectory() as tmp:
            package = Path(tmp) / name
            create_package(
                str(directory),
                package,
                include_gitignore=True,
                include_parent_dir=module,
                excludes=excludes,
            )
            size = package.stat().st_size
            with open(package, "rb") as f:
                try:
                    r = requests.put(
                        f"{self.address}/api/packages/{protocol}/{name}",
                        data=_ProgressReader(f, size, progress),
                        headers={**self._headers, "Content-Length": str(size)},
                        timeout=(10, 600),
                    )
                except requests.RequestException as e:
                    raise DriverError(
                        f"uploading {directory} to {self.where} failed: {one_line(e, 400)}"
                    ) from None
        if r.status_code != 200:
            raise DriverError(
                f"uploading {directory} to {self.where} failed: HTTP {r.status_code} "
                f"{' '.join(r.text.split())[:200]}"
            )
        return uri

    # -- verbs -----------------------------------------------------------------------------
    def submit(
        self,
        entrypoint: str,
        runtime_env: dict[str, Any],
        submission_id: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> str:
        """Submit, and submit again while Ray's dashboard says no agent is there to take it yet
        (a head whose agent is still starting, or slow on a loaded machine: Ray waits 10 s for
        it, then answers 500 "No available agent to submit job, please try again later"; the
        job was not created). Should an earlier try have created it after all, the next one
        finds ``submission_id`` taken: that is this job (callers check the id is free first).
        A submit whose connection the dashboard closed without answering is tried again the same
        way (up to CLOSED_RETRIES times, only with a ``submission_id``)."""
        pauses = list(SUBMIT_RETRY_PAUSES_S)
        retried = False
        closed_retries = CLOSED_RETRIES if submission_id else 0
        while True:
            try:
                return self._call(
                    "submitting the job",
                    self._client.submit_job,
                    entrypoint=entrypoint,
                    runtime_env=runtime_env,
                    submission_id=submission_id,
                    metadata=metadata,
                )
            except DriverError as e:
                if retried and submission_id and "already exists" in str(e):
                    return submission_id
                if closed_retries and isinstance(e, ConnectionLost):
                    if CLOSED_WITHOUT_RESPONSE not in str(e):
                        raise
                    closed_retries -= 1
                elif NO_AGENT not in str(e) or not pauses:
                    raise
                retried = True
                time.sleep(pauses.pop(0) if pauses else SUBMIT_RETRY_PAUSES_S[-1])

    def info(self, submission_id: str) -> JobInfo:
        return _info(self._read(f"job {submission_id}", self._client.get_job_info, submission_id))

    def find(self, submission_id: str) -> JobInfo | None:
        """The job's info, or None when the cluster has no job with this submission id."""
        try:
            return self.info(submission_id)
        except NoSuchJob:
            return None

    def env_var(self, submission_id: str, name: str) -> str | None:
        """An environment variable the job was submitted with (its runtime_env), or None."""
        details = self._read(f"job {submission_id}", self._client.get_job_info, submission_id)
        env_vars = (getattr(details, "runtime_env", None) or {}).get("env_vars") or {}
        value = env_vars.get(name)
        return str(value) if value is not None else None

    def _get_json(self, what: str, endpoint: str) -> Any:
        def get() -> Any:
            r = self._client._do_request("GET", endpoint)
            if r.status_code != 200:
                raise DriverError(
                    f"{what}: the dashboard of {self.where} answered HTTP {r.status_code}: "
                    f"{' '.join(r.text.split())[:200]}",
                    EXIT_USAGE,
                )
            return r.json()

        return self._read(what, get)

    def cluster_status(self) -> ClusterStatus:
        """The cluster as Ray's autoscaler sees it (``ray status``), and its nodes."""
        formatted = self._get_json("reading the cluster status", "/api/cluster_status?format=1")
        structured = self._get_json("reading the cluster status", "/api/cluster_status")
        nodes = self._get_json("listing nodes", "/api/v0/nodes?detail=1&limit=1000")
        data = structured.get("data", {}) if isinstance(structured, dict) else {}
        node_rows = ((nodes.get("data") or {}).get("result") or {}).get("result") or []
        return ClusterStatus(
            text=str(((formatted.get("data") or {}).get("clusterStatus")) or ""),
            autoscaler=data.get("clusterStatus") or None,
            autoscaler_error=data.get("autoscalingError") or None,
            nodes=[
                {
                    "node_id": n.get("node_id"),
                    "ip": n.get("node_ip"),
                    "state": n.get("state"),
                    "head": bool(n.get("is_head_node")),
                    "resources": n.get("resources_total") or {},
                }
                for n in node_rows
            ],
        )

    def list(self) -> list[JobInfo]:
        jobs = [_info(d) for d in self._read("listing jobs", self._client.list_jobs)]
        # Drivers that called ray.init() themselves have no submission id: not submitted jobs.
        jobs = [j for j in jobs if j.submission_id]
        return sorted(jobs, key=lambda j: j.start_time or 0)

    def stop(self, submission_id: str) -> bool:
        return bool(
            self._call(f"stopping job {submission_id}", self._client.stop_job, submission_id)
        )

    def logs(self, submission_id: str) -> str:
        return self._read(f"logs of job {submission_id}", self._client.get_job_logs, submission_id)

    def follow(
        self, submission_id: str, stream: LogStream, poll: float = 5.0, grace: float = 5.0
    ) -> JobInfo:
        """Stream the job's logs into ``stream`` until it ends; return its final info.

        The status is polled next to the log stream: once the job is terminal, the stream gets
        ``grace`` seconds to deliver what is left, so a stream that stalls cannot keep a finished
        job's command waiting. :class:`ConnectionLost` when the way to the cluster breaks;
        KeyboardInterrupt propagates with the job untouched.
        """
        stream.restart()

        import asyncio

        async def tail() -> None:
            async for chunk in self._client.tail_job_logs(submission_id):
                stream(chunk)

        async def follow() -> JobInfo | None:
            loop = asyncio.get_running_loop()
            task = asyncio.create_task(tail())
            try:
                while True:
                    done, _ = await asyncio.wait({task}, timeout=poll)
                    if done:
                        # The stream ended (or broke: a lost connection shows in the status
                        # below). Retrieve its error, or asyncio logs it as a traceback.
                        task.exception()
                        return None
                    info = await loop.run_in_executor(None, self.info, submission_id)
                    stream.status = info.status
                    if info.status in TERMINAL:
                        with contextlib.suppress(Exception):
                            await asyncio.wait_for(asyncio.shield(task), grace)
                        return info
            finally:
                # Cancel the stream if it still runs, and retrieve its end either way: a stream
                # that broke while the status call was failing would otherwise be reported by
                # asyncio as "Task exception was never retrieved", a traceback after our error.
                if not task.done():
                    task.cancel()
                with contextlib.suppress(BaseException):
                    await task

        try:
            final = asyncio.run(follow())
        except (KeyboardInterrupt, DriverError):
            raise
        except Exception as e:
            # The stream broke: a lost connection says so below; anything else falls back to
            # polling the status.
            text = one_line(e, 400)
            if "does not exist" in text:
                raise NoSuchJob(f"job {submission_id}: no such job on {self.where}") from None
            final = None
        if final is not None:
            return final
        for info in self.wait(submission_id):
            if info.status in TERMINAL:
                return info
        raise AssertionError("unreachable")

    def wait(self, submission_id: str, interval: float = 1.0) -> Iterator[JobInfo]:
        """Yield the job's info until it is terminal (the last item yielded is terminal)."""
        while True:
            info = self.info(submission_id)
            yield info
            if info.status in TERMINAL:
                return
            time.sleep(interval)
