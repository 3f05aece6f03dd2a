"""The end-to-end tests' rehearsal clusters run side by side (scripts/test.sh's lanes), so no
two of them may share a subnet: each subnet written in tests/e2e/ and benchmarks/ belongs to
one file (a docstring that names another file's subnet is the one exception, marked below)."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUBNET = re.compile(r"\b10\.\d{1,3}\.\d{1,3}\.0/\d{2}\b")
# test_autoscale.py's docstring shows the command autoscale_cluster.py runs.
QUOTES = {("tests/e2e/test_autoscale.py", "10.218.0.0/24")}


def test_each_e2e_and_benchmark_subnet_belongs_to_one_file() -> None:
    owners: dict[str, set[str]] = defaultdict(set)
    for folder in ("tests/e2e", "benchmarks"):
        for path in sorted((REPO / folder).glob("*.py")):
            name = str(path.relative_to(REPO))
            for subnet in set(SUBNET.findall(path.read_text())):
                if (name, subnet) not in QUOTES:
                    owners[subnet].add(name)
    assert owners, "no subnets found: the pattern no longer matches how the tests write them"
    shared = {subnet: files for subnet, files in owners.items() if len(files) > 1}
    assert not shared, shared
