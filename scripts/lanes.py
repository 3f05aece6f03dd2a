"""The closing of scripts/test.sh's lanes: the background lanes' logs, then one line per lane
and one closing line for the whole suite (``suite: N passed, N failed, N skipped``) from each
lane's JUnit XML. Exits 0 only when every lane's pytest did.

    python scripts/lanes.py [--log LOG ...] NAME=RC:JUNIT_XML [NAME=RC:JUNIT_XML ...]
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Lane:
    name: str
    rc: int
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0
    missing: bool = False

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.missing and self.failed == 0


def parse_lane(spec: str) -> Lane:
    """``NAME=RC:PATH`` into a lane with the counts of its JUnit XML."""
    name, _, rest = spec.partition("=")
    rc, _, path = rest.partition(":")
    if not name or not rc.lstrip("-").isdigit() or not path:
        raise SystemExit(f"lanes.py: {spec!r} is not NAME=RC:JUNIT_XML")
    lane = Lane(name=name, rc=int(rc))
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        lane.missing = True
        return lane
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    for suite in suites:
        tests = int(suite.get("tests", 0))
        failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skipped = int(suite.get("skipped", 0))
        lane.passed += tests - failed - skipped
        lane.failed += failed
        lane.skipped += skipped
        lane.seconds += float(suite.get("time", 0.0))
    return lane


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--log", type=Path, action="append", default=[], help="a lane's log, printed first"
    )
    parser.add_argument("lanes", nargs="+", metavar="NAME=RC:JUNIT_XML")
    args = parser.parse_args(argv)
    for log in args.log:
        print(f"\n== {log}", flush=True)
        try:
            sys.stdout.write(log.read_text(errors="replace"))
        except OSError as e:
            print(f"(no log: {e.strerror})")
    lanes = [parse_lane(spec) for spec in args.lanes]
    print("\n== lanes")
    for lane in lanes:
        if lane.missing:
            print(f"{lane.name}: pytest exited {lane.rc} and wrote no report")
        else:
            print(
                f"{lane.name}: {lane.passed} passed, {lane.failed} failed, {lane.skipped} skipped"
                f" in {lane.seconds:.0f} s (pytest exited {lane.rc})"
            )
    passed = sum(lane.passed for lane in lanes)
    # A lane whose pytest failed with no failed test in its report (it crashed, was killed,
    # collected nothing) counts as one failure, so the closing line never reads 0 failed then.
    failed = sum(max(lane.failed, 0 if lane.ok else 1) for lane in lanes)
    skipped = sum(lane.skipped for lane in lanes)
    print(f"suite: {passed} passed, {failed} failed, {skipped} skipped")
    return 0 if all(lane.ok for lane in lanes) else 1


if __name__ == "__main__":
    sys.exit(main())
