"""The end-to-end tests' rehearsal clusters run side by side (scripts/test.sh's lanes), so no
two of them may share a subnet: each subnet written in tests/e2e/, benchmarks/ and the
lanes' plan (scripts/lanes.py: a lane's cluster of its own) belongs to one file (a
docstring that names another file's subnet is the one exception, marked below)."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUBNET = re.compile(r"\b10\.\d{1,3}\.\d{1,3}\.0/\d{2}\b")
# test_autoscale.py's docstring shows the command autoscale_cluster.py runs.
QUOTES = {("tests/e2e/test_autoscale.py", "10.218.0.0/24")}


def _files() -> list[Path]:
    found = [p for folder in ("tests/e2e", "benchmarks") for p in (REPO / folder).glob("*.py")]
    return sorted([*found, REPO / "scripts" / "lanes.py"])


def test_each_e2e_and_benchmark_subnet_belongs_to_one_file() -> None:
    owners: dict[str, set[str]] = defaultdict(set)
    for path in _files():
        name = str(path.relative_to(REPO))
        for subnet in set(SUBNET.findall(path.read_text())):
            if (name, subnet) not in QUOTES:
                owners[subnet].add(name)
    assert owners, "no subnets found: the pattern no longer matches how the tests write them"
    shared = {subnet: files for subnet, files in owners.items() if len(files) > 1}
    assert not shared, shared


def test_the_bake_bridge_is_on_no_cluster_subnet() -> None:
    """`rehearse prepare --bake` (scripts/test.sh, while it sets up) puts a bridge of its own on
    DEFAULT_BAKE_SUBNET: no test's or benchmark's cluster, nor a default `up`, may use it."""
    from nodekit.rehearsal.cluster import DEFAULT_BAKE_SUBNET, DEFAULT_SUBNET

    used = {DEFAULT_SUBNET}
    for path in _files():
        used |= set(SUBNET.findall(path.read_text()))
    assert len(used) > 3
    assert DEFAULT_BAKE_SUBNET not in used
