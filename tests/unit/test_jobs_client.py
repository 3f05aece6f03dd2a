"""JobsClient.follow when the log stream and the status calls break together."""

from __future__ import annotations

import gc
import logging
import threading
from typing import Any

import pytest

import driver.jobs
from driver.errors import ConnectionLost
from driver.jobs import JobsClient, LogStream


class _BrokenCluster:
    """A Jobs API whose log stream breaks first and whose status call then fails slowly:
    the shape of a tunnel that died mid-job."""

    def __init__(self) -> None:
        self.info_calls = 0
        self.asked = threading.Event()
        self.broke = threading.Event()

    async def tail_job_logs(self, submission_id: str) -> Any:
        import asyncio

        yield "TICK 1\n"
        while not self.asked.is_set():  # the status call is under way...
            await asyncio.sleep(0.01)
        self.broke.set()  # ... when the stream breaks
        raise RuntimeError("WebSocket connection closed unexpectedly with close code 1006")

    def get_job_info(self, submission_id: str) -> Any:
        self.info_calls += 1
        self.asked.set()
        # The stream breaks while this call waits (whatever the machine's load; the bound is
        # only against a hang).
        assert self.broke.wait(120)
        raise ConnectionError("Connection refused")


def test_a_stream_that_breaks_during_a_failing_status_call_leaves_no_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = JobsClient.__new__(JobsClient)
    client.where = "head:22"
    client._client = _BrokenCluster()  # type: ignore[assignment]
    written: list[str] = []
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        with pytest.raises(ConnectionLost):
            client.follow("job-1", LogStream(written.append), poll=0.01)
        gc.collect()
    assert written == ["TICK 1\n"]
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()], caplog.text


def test_a_dashboard_traceback_becomes_its_last_line() -> None:
    from driver.jobs import server_error

    answer = (
        "Request failed with status code 500: Traceback (most recent call last):\n"
        '  File "/opt/ray/job_head.py", line 419, in submit_job\n'
        "    resp = await job_agent_client.submit_job_internal(submit_request)\n"
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        "ValueError: Job with submission_id j-1 already exists. Please use a different one.\n"
    )
    assert server_error(answer) == (
        "Request failed with status code 500: ValueError: Job with submission_id j-1 already "
        "exists. Please use a different one."
    )
    assert server_error("Request failed with status code 400: bad\n  runtime_env") == (
        "Request failed with status code 400: bad runtime_env"
    )


class _Overloaded:
    """A Jobs API whose dashboard answers 500 the first ``failures`` times it is asked, the way
    Ray's does when its own GCS call times out on a loaded head."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[str] = []

    def _fail_or(self, name: str, value: Any) -> Any:
        self.calls.append(name)
        if len([c for c in self.calls if c == name]) <= self.failures:
            raise RuntimeError(
                "Request failed with status code 500: 500 Internal Server Error\n\n"
                "Server got itself in trouble."
            )
        return value

    def get_job_info(self, submission_id: str) -> Any:
        from ray.job_submission import JobDetails, JobStatus, JobType

        return self._fail_or(
            "info",
            JobDetails(
                type=JobType.SUBMISSION,
                submission_id=submission_id,
                entrypoint="python train.py",
                status=JobStatus.RUNNING,
            ),
        )

    def submit_job(self, **kwargs: Any) -> Any:
        return self._fail_or("submit", "j-1")


def _client(cluster: Any) -> JobsClient:
    client = JobsClient.__new__(JobsClient)
    client.where = "the head 10.0.0.4"
    client._client = cluster  # type: ignore[assignment]
    return client


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The client's back-off pauses, recorded instead of slept."""
    taken: list[float] = []
    monkeypatch.setattr(driver.jobs.time, "sleep", taken.append)
    return taken


def test_a_read_that_meets_a_server_error_is_tried_again(pauses: list[float]) -> None:
    cluster = _Overloaded(failures=2)
    assert _client(cluster).info("j-1").status == "RUNNING"
    assert cluster.calls == ["info", "info", "info"]
    assert pauses == [1.0, 2.0]


@pytest.mark.usefixtures("pauses")
def test_a_server_error_that_stays_ends_in_its_line_and_a_write_is_never_repeated() -> None:
    from driver.errors import DriverError

    cluster = _Overloaded(failures=99)
    with pytest.raises(DriverError) as failed:
        _client(cluster).info("j-1")
    assert str(failed.value).startswith(
        "job j-1: the Jobs API of the head 10.0.0.4 answered: Request failed with status code 500"
    )
    assert cluster.calls == ["info"] * (1 + len(driver.jobs.READ_RETRY_PAUSES_S))
    with pytest.raises(DriverError, match=r"submitting the job: .* status code 500"):
        _client(cluster).submit("python train.py", {}, "j-1")
    assert cluster.calls.count("submit") == 1


class _AgentStarting:
    """Ray's dashboard while the head's job agent has not registered: a submit is answered 500
    "No available agent" (the job not created) ``missing`` times; ``created_anyway`` makes the
    first such try create the job all the same, so the next one finds its id taken."""

    def __init__(self, missing: int, created_anyway: bool = False) -> None:
        self.missing = missing
        self.created_anyway = created_anyway
        self.jobs: list[str] = []
        self.tries = 0

    def submit_job(self, submission_id: str, **kwargs: Any) -> str:
        self.tries += 1
        if submission_id in self.jobs:
            raise RuntimeError(
                "Request failed with status code 500: Traceback (most recent call last):\n"
                f"ValueError: Job with submission_id {submission_id} already exists. "
                "Please use a different one.\n"
            )
        if self.tries <= self.missing:
            if self.created_anyway and self.tries == 1:
                self.jobs.append(submission_id)
            raise RuntimeError(
                "Request failed with status code 500: No available agent to submit job, please "
                "try again later.."
            )
        self.jobs.append(submission_id)
        return submission_id


def test_a_submit_that_finds_no_job_agent_yet_is_tried_again(pauses: list[float]) -> None:
    ray = _AgentStarting(missing=2)
    assert _client(ray).submit("python train.py", {}, "j-1") == "j-1"
    assert (ray.tries, ray.jobs, pauses) == (3, ["j-1"], [2.0, 4.0])

    # A try that created the job after all: the next one finds the id taken, and that is it.
    pauses.clear()
    ray = _AgentStarting(missing=1, created_anyway=True)
    assert _client(ray).submit("python train.py", {}, "j-2") == "j-2"
    assert (ray.tries, ray.jobs, pauses) == (2, ["j-2"], [2.0])


def test_a_taken_id_or_an_agent_that_never_comes_ends_in_its_line(pauses: list[float]) -> None:
    from driver.errors import DriverError

    ray = _AgentStarting(missing=0)
    ray.jobs.append("j-1")  # taken before this submit: never mistaken for this one
    with pytest.raises(DriverError, match="j-1 already exists"):
        _client(ray).submit("python train.py", {}, "j-1")
    assert (ray.tries, pauses) == (1, [])

    ray = _AgentStarting(missing=99)
    with pytest.raises(DriverError, match="No available agent to submit job"):
        _client(ray).submit("python train.py", {}, "j-3")
    assert pauses == list(driver.jobs.SUBMIT_RETRY_PAUSES_S)
    assert ray.tries == 1 + len(driver.jobs.SUBMIT_RETRY_PAUSES_S) and ray.jobs == []


class _ClosingHead(_AgentStarting):
    """A loaded head's dashboard that closes a submit's connection without answering ``closes``
    times; ``created_anyway``: the first such try created the job all the same."""

    def __init__(self, closes: int, created_anyway: bool = False) -> None:
        super().__init__(missing=0, created_anyway=created_anyway)
        self.closes = closes

    def submit_job(self, submission_id: str, **kwargs: Any) -> str:
        import http.client

        import requests
        from urllib3.exceptions import ProtocolError

        if self.tries < self.closes:
            self.tries += 1
            if self.created_anyway and self.tries == 1:
                self.jobs.append(submission_id)
            closed = http.client.RemoteDisconnected("Remote end closed connection without response")
            raise requests.exceptions.ConnectionError(ProtocolError("Connection aborted.", closed))
        return super().submit_job(submission_id, **kwargs)


@pytest.mark.usefixtures("pauses")
def test_a_submit_whose_connection_the_head_closed_is_tried_again() -> None:
    """Seen on a heavily loaded head (clean-clone run 17): the dashboard closed the submit's
    connection without an answer. The tunnel works: the submit is tried again, and a job the
    closed try created after all is this one."""
    from driver.errors import ConnectionLost

    ray = _ClosingHead(closes=1)
    assert _client(ray).submit("python train.py", {}, "j-1") == "j-1"
    assert (ray.tries, ray.jobs) == (2, ["j-1"])
    ray = _ClosingHead(closes=1, created_anyway=True)
    assert _client(ray).submit("python train.py", {}, "j-2") == "j-2"
    assert (ray.tries, ray.jobs) == (2, ["j-2"])
    # Not for ever, and never without a submission id (a second job could be made).
    ray = _ClosingHead(closes=1 + driver.jobs.CLOSED_RETRIES)
    with pytest.raises(ConnectionLost, match="closed connection without response"):
        _client(ray).submit("python train.py", {}, "j-3")
    assert ray.tries == 1 + driver.jobs.CLOSED_RETRIES
    ray = _ClosingHead(closes=1)
    with pytest.raises(ConnectionLost):
        _client(ray).submit("python train.py", {}, None)
    assert ray.tries == 1
