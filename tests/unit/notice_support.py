"""An eviction notice as a node's watcher publishes it (python/nodekit/node/scheduled_events.py):
a JSON value under ``notice/NODE_ID`` in Ray's KV, for the jobs' harness to read."""

from __future__ import annotations

import json
import time

from harness import notice


def put_notice(node_id: str, event_id: str, not_before: float, node_ip: str = "10.0.0.5") -> None:
    """A Preempt notice for ``node_id`` in the KV of the Ray this process is connected to."""
    from ray.experimental.internal_kv import _internal_kv_put

    value = {
        "node_id": node_id,
        "node_ip": node_ip,
        "event_id": event_id,
        "event_type": "Preempt",
        "not_before": not_before,
        "announced": time.time(),
    }
    _internal_kv_put(
        notice.NOTICE_PREFIX + node_id, json.dumps(value), namespace=notice.KV_NAMESPACE
    )
