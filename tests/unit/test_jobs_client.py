"""JobsClient.follow when the log stream and the status calls break together."""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

import pytest

from driver.errors import ConnectionLost
from driver.jobs import JobsClient, LogStream


class _BrokenCluster:
    """A Jobs API whose log stream breaks first and whose status call then fails slowly:
    the shape of a tunnel that died mid-job."""

    def __init__(self) -> None:
        self.info_calls = 0

    async def tail_job_logs(self, submission_id: str) -> Any:
        import asyncio

        yield "TICK 1\n"
        await asyncio.sleep(0.05)
        raise RuntimeError("WebSocket connection closed unexpectedly with close code 1006")

    def get_job_info(self, submission_id: str) -> Any:
        self.info_calls += 1
        time.sleep(0.3)  # the stream breaks while this call waits
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
