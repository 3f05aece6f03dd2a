"""The closing of scripts/test.sh's lanes: the background lanes' logs, then one line per lane,
the slowest tests of all lanes and the costliest in CPU, the machine's load and CPU through the
run (``--load``: the 1-minute load average and the busy CPU time that test.sh samples from its
start), and one closing line for the whole suite (``suite: N passed, N failed, N skipped``)
from each lane's JUnit XML. Exits 0 only when every lane's pytest did, or failed only by tests
that then passed when rerun alone (``--rerun``).

Where test.sh could account each lane's CPU (root, a cgroup v1 ``cpuacct`` hierarchy: the
lane's processes and everything they start, the rehearsal clusters' nodes included, stay in the
lane's group), ``--cpu DIR`` reads each lane's CPU seconds from ``DIR/NAME/cpuacct.usage``, and
each test's from its JUnit ``cpu_s`` property (tests/conftest.py). The suite's time on a
machine is bound by its CPU: the closing says how much work the run was, and the least wall time
that much work takes on the machine's cores.

    python scripts/lanes.py [--log LOG ...] [--load LOAD] [--cpu DIR] [--rerun XML]
        NAME=RC:JUNIT_XML [...]
    python scripts/lanes.py --print-failed NAME=RC:JUNIT_XML [...]

``--print-failed`` prints the pytest node ids of the lanes' failed tests, one per line, for
test.sh to rerun them alone once the lanes have ended; ``--rerun`` reads that rerun's JUnit XML.
A test that failed in its lane and passed alone is listed as such (a test that fails under the
lanes' load: a flake to fix, never hidden), and no longer fails the suite.

The lanes themselves are planned here too, by what their tests cost:

    python scripts/lanes.py --plan
    python scripts/lanes.py --record NAME=RC:JUNIT_XML [...]

``--plan`` prints one line per lane, ``NAME|VAR=VALUE ...|TEST_FILE ...``, which
test.sh runs side by side: the files of :data:`PINNED` stay in their lane (a rehearsal cluster
of the lane's own, root), and every other test file goes, longest first, to the lane whose
tests add up to the least so far (the longest-processing-time rule), by the seconds each file
took in a whole run (:data:`COSTS`; a file not in it counts as the median file). In its lane,
the files that mostly wait run first and those that keep a core busy last (by the share of
their time that was CPU, :func:`cpu_share`): the cluster lanes keep both cores busy until they
end, and after that only the packed lanes are left to use them. ``--record`` rewrites
:data:`COSTS` from a run's JUnit XMLs (`.pytest_cache/lanes/*.xml`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COSTS = REPO / "tests" / "lane_costs.json"
"""Per test file, in a whole run of the lanes (``--record``): ``s``, its seconds (set-up
included), and ``cpu_s``, the CPU seconds of its tests' processes (null where the run did not
account them)."""

PINNED: dict[str, tuple[str, ...]] = {
    "unit": (),
    # The session's rehearsal cluster (tests/e2e/conftest.py), for what no other lane claims.
    # (The reliability tests on a cluster of their own, in a sixth lane, made a fresh machine's
    # run slower, not faster: 2 cores are busy throughout, and a fourth cluster's Ray and a
    # third stream of unit tests beside it only add to what they share.)
    "e2e": ("tests/e2e",),
    "autoscale": ("tests/e2e/test_autoscale.py",),  # its own cluster, scaling mode ray
    # tests/system, then a cluster of its own: both mostly waiting (the network, idle periods);
    # its cluster boots after the start's rush.
    "autostop": ("tests/system", "tests/e2e/test_autostop.py"),
    "bench": (),
}
"""The lanes, in the order test.sh starts them (the first runs in the foreground, its output
live), with the test files or folders that must run in them, in the order they run (a longer
path wins)."""

PACKED = ("unit", "bench")
"""The lanes the other test files are packed onto (a lane's packed files run before its pinned
ones). The lanes with cluster tests take none: they are the longest already, and a session's
cluster stays up, idle, until its pytest ends."""

ENV: dict[str, dict[str, str]] = {}
"""A lane's environment (e.g. ``RAYDRIVER_E2E_NAME``/``RAYDRIVER_E2E_SUBNET``: a cluster of its
own beside the e2e lane's, tests/e2e/rehearsal_cluster.py), by lane name."""


def test_files(root: Path = REPO) -> list[str]:
    """Every test file of the suite, relative to the checkout, in name order."""
    return sorted(str(p.relative_to(root)) for p in (root / "tests").rglob("test_*.py"))


def pinned_lane(path: str) -> str | None:
    """The lane a test file must run in (the longest matching entry of PINNED), if any."""
    best: tuple[int, str] | None = None
    for lane, paths in PINNED.items():
        for pin in paths:
            if _under(path, pin) and (best is None or len(pin) > best[0]):
                best = (len(pin), lane)
    return best[1] if best else None


Cost = dict[str, float | None]
"""A file's entry in :data:`COSTS`: ``{"s": seconds, "cpu_s": CPU seconds or None}``."""


def cpu_share(costs: dict[str, Cost], files: list[str]) -> dict[str, float]:
    """Each file's CPU seconds over its seconds in ``costs``; the median file's where it has
    none (not in ``costs``, or its CPU not accounted)."""
    share = {}
    for f in files:
        c = costs.get(f, {})
        cpu, seconds = c.get("cpu_s"), c.get("s")
        if cpu is not None and seconds:
            share[f] = cpu / seconds
    default = statistics.median(share.values()) if share else 0.0
    return {f: share.get(f, default) for f in files}


def plan(
    files: list[str], costs: dict[str, Cost], packed: tuple[str, ...] = PACKED
) -> dict[str, list[str]]:
    """The lanes' test files: pinned ones in their lane, the others packed longest first onto
    the lane of ``packed`` with the least cost so far (ties: the earlier lane); in each lane the
    packed files first, those with the least :func:`cpu_share` first (ties: name order), then
    the pinned ones, in PINNED's order."""
    known = sorted(float(costs[f]["s"] or 0.0) for f in files if f in costs)
    default = statistics.median(known) if known else 1.0
    cost = {f: float(costs[f]["s"] or 0.0) if f in costs else default for f in files}
    share = cpu_share(costs, files)
    pinned: dict[str, list[str]] = {name: [] for name in PINNED}
    onto: dict[str, list[str]] = {name: [] for name in PINNED}
    free = []
    for f in files:
        lane = pinned_lane(f)
        if lane is None:
            free.append(f)
        else:
            pinned[lane].append(f)
    total = {name: sum(cost[f] for f in fs) for name, fs in pinned.items()}
    for f in sorted(free, key=lambda f: (-cost[f], f)):
        # pytest cannot hold two test modules of one name in a run (no __init__.py files).
        fits = [
            name
            for name in packed
            if all(Path(g).name != Path(f).name for g in pinned[name] + onto[name])
        ]
        if not fits:
            raise SystemExit(f"lanes.py: no lane can take {f}: each has a test module of its name")
        lane = min(fits, key=lambda name: (total[name], packed.index(name)))
        onto[lane].append(f)
        total[lane] += cost[f]

    def pin_order(f: str) -> tuple[int, str]:
        pins = PINNED[pinned_lane(f) or ""]
        matching = [i for i, pin in enumerate(pins) if _under(f, pin)]
        return (max(matching, key=lambda i: len(pins[i])), f)

    return {
        name: sorted(onto[name], key=lambda f: (share[f], f)) + sorted(pinned[name], key=pin_order)
        for name in PINNED
    }


def _under(path: str, pin: str) -> bool:
    return path == pin or path.startswith(pin + "/")


def record(lanes: list[Lane], path: Path = COSTS) -> dict[str, Cost]:
    """Seconds and CPU seconds per test file from the lanes' reports, written to ``path`` (a
    file that no longer exists is left out; ``cpu_s`` null where a test of it has none)."""

    def file_of(name: str) -> str:
        classname, _, test = name.partition("::")
        return node_id(classname, test).split("::")[0]

    seconds: dict[str, float] = {}
    cpu: dict[str, float | None] = {}
    for lane in lanes:
        cpu_of = {name: value for value, name in lane.cpu}
        for value, name in lane.tests:
            f = file_of(name)
            seconds[f] = seconds.get(f, 0.0) + value
            was = cpu.get(f, 0.0)
            cpu[f] = None if was is None or name not in cpu_of else was + cpu_of[name]
    costs: dict[str, Cost] = {
        f: {"s": round(s, 1), "cpu_s": None if cpu[f] is None else round(cpu[f] or 0.0, 1)}
        for f, s in sorted(seconds.items())
        if (REPO / f).is_file()
    }
    path.write_text(json.dumps(costs, indent=1) + "\n")
    return costs


def print_plan(costs_path: Path = COSTS) -> None:
    costs = json.loads(costs_path.read_text()) if costs_path.is_file() else {}
    for name, files in plan(test_files(), costs).items():
        env = " ".join(f"{k}={v}" for k, v in ENV.get(name, {}).items())
        print(f"{name}|{env}|{' '.join(files)}")


@dataclass
class Lane:
    name: str
    rc: int
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0
    missing: bool = False
    tests: list[tuple[float, str]] = field(default_factory=list)
    """(seconds, test id) of each test case, set-up and tear-down included."""
    cpu: list[tuple[float, str]] = field(default_factory=list)
    """(CPU seconds, test id) of each test case whose report has them (the property ``cpu_s``
    tests/conftest.py writes when test.sh accounts the lane's CPU)."""
    cpu_s: float | None = None
    """The lane's CPU seconds: all its processes', the clusters and Ray they started included
    (test.sh's cgroup of the lane), if accounted."""
    failed_ids: list[str] = field(default_factory=list)
    """The pytest node id of each failed (or errored) test case."""
    passed_on_rerun: list[str] = field(default_factory=list)
    """Those of failed_ids that passed when rerun alone."""
    why: dict[str, str] = field(default_factory=dict)
    """A failed test's node id: its failure's text (pytest's report of it)."""

    @property
    def ok(self) -> bool:
        if self.missing:
            return False
        if self.rc == 0:
            return self.failed == 0
        # pytest's exit code 1 is "tests failed": fine if each failed one passed alone after.
        return (
            self.rc == 1
            and len(self.failed_ids) == self.failed
            and set(self.failed_ids) <= set(self.passed_on_rerun)
        )


def node_id(classname: str, name: str) -> str:
    """A JUnit test case's pytest node id: ``tests.unit.test_a`` and ``test_x[p]`` give
    ``tests/unit/test_a.py::test_x[p]`` (a test class's name, when the module has one, after
    the module's)."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        module = Path(*parts[:cut]).with_suffix(".py")
        if module.is_file() or cut == 1:
            return "::".join([str(module), *parts[cut:], name])
    raise AssertionError("unreachable")


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
        for case in suite.iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            lane.tests.append((float(case.get("time", 0.0)), name))
            for prop in case.iter("property"):
                if prop.get("name") == "cpu_s":
                    with contextlib.suppress(TypeError, ValueError):
                        lane.cpu.append((float(prop.get("value", "")), name))
            if (text := _failure(case)) is not None:
                test = node_id(case.get("classname", ""), case.get("name", ""))
                lane.failed_ids.append(test)
                lane.why[test] = text
    return lane


def _failure(case: ET.Element) -> str | None:
    """A test case's failure (or error) text; None if it did not fail."""
    found = [case.find("failure"), case.find("error")]
    # pytest's text is the whole report, whose end holds the message too.
    texts = [e.text or e.get("message", "") for e in found if e is not None]
    return "\n".join(texts) if texts else None


def failures(path: Path) -> dict[str, str]:
    """The failed test cases of a JUnit XML: node id -> failure text (none if unreadable)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return {}
    return {
        node_id(case.get("classname", ""), case.get("name", "")): text
        for case in root.iter("testcase")
        if (text := _failure(case)) is not None
    }


def tail(text: str, lines: int) -> list[str]:
    """The last ``lines`` non-blank lines of ``text``, each cut to 200 characters."""
    kept = [line.rstrip() for line in text.splitlines() if line.strip()][-lines:]
    return [line if len(line) <= 200 else line[:200] + " ..." for line in kept]


def passed_ids(path: Path) -> set[str]:
    """The node ids of the test cases that passed in a JUnit XML (none if it is unreadable)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return set()
    return {
        node_id(case.get("classname", ""), case.get("name", ""))
        for case in root.iter("testcase")
        if not any(case.find(tag) is not None for tag in ("failure", "error", "skipped"))
    }


def load_summary(path: Path, cores: int) -> str:
    """One line on the load through the run, from test.sh's samples ``EPOCH LOAD1 [BUSY
    [KERNEL STEAL]]`` per line (/proc/stat's jiffies so far, see cpu_summary)."""
    samples = _samples(path)
    if samples is None:
        return f"load: no samples ({path})"
    if len(samples) < 2:
        return f"load: {len(samples)} sample(s), too few to say ({path})"
    loads = sorted(s.load for s in samples)
    minutes = (samples[-1].at - samples[0].at) / 60
    above = sum(1 for load in loads if load > 2 * cores) / len(loads)
    return (
        f"load (1-min average, {len(loads)} samples over {minutes:.1f} min, {cores} cores): "
        f"median {statistics.median(loads):.1f}, 90th percentile "
        f"{loads[int(0.9 * (len(loads) - 1))]:.1f}, max {loads[-1]:.1f}; "
        f"above {2 * cores} for {above:.0%} of the run"
    )


@dataclass(frozen=True)
class Sample:
    """One of test.sh's load samples: when, the 1-minute load, and /proc/stat's jiffies so far
    (None where the line has no such column): busy, the kernel's part of busy, the host's."""

    at: float
    load: float
    busy: float | None = None
    kernel: float | None = None
    steal: float | None = None


def _samples(path: Path) -> list[Sample] | None:
    samples: list[Sample] = []
    try:
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) in (2, 3, 5):
                samples.append(Sample(*map(float, parts)))
    except (OSError, ValueError):
        return None
    return samples


CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
"""/proc/stat's unit (jiffies per second)."""


def cpu_summary(path: Path, cores: int, lanes_cpu_s: float | None = None) -> str | None:
    """One line on the CPU the run used, from the load samples' busy jiffies (none without
    them): the machine's busy CPU seconds over the run, how much of its cores that was, and the
    least wall time that much work takes on them; the kernel's part of the busy time and the
    time the host took from the machine's cores (steal), where sampled (the same tests' CPU
    has varied by machine: benchmarks/README.md); the lanes' own share when accounted."""
    samples = [s for s in _samples(path) or [] if s.busy is not None]
    if len(samples) < 2:
        return None
    first, last = samples[0], samples[-1]
    seconds = last.at - first.at
    busy = (last.busy - first.busy) / CLOCK_TICKS  # type: ignore[operator]
    if seconds <= 0 or busy < 0:
        return None
    parts = ""
    if first.kernel is not None and last.kernel is not None and busy > 0:
        kernel = (last.kernel - first.kernel) / CLOCK_TICKS / busy
        steal = (last.steal - first.steal) / CLOCK_TICKS / (seconds * cores)  # type: ignore[operator]
        parts = f"; the kernel's part {kernel:.0%}, the host took {steal:.0%} of the cores"
    lanes = f", the lanes' own {lanes_cpu_s:,.0f} s" if lanes_cpu_s is not None else ""
    return (
        f"CPU: {busy:,.0f} s busy over {seconds / 60:.1f} min on {cores} cores "
        f"({busy / (seconds * cores):.0%}){lanes}{parts}; this much work takes at least "
        f"{busy / cores / 60:.1f} min here"
    )


def lane_cpu(groups: Path, name: str) -> float | None:
    """A lane's CPU seconds from its cpuacct cgroup in ``groups`` (test.sh's), if there."""
    try:
        return int((groups / name / "cpuacct.usage").read_text()) / 1e9
    except (OSError, ValueError):
        return None


def _print_top(lanes: list[Lane], figures: str, most: int, what: str) -> None:
    """The ``most`` test cases of all lanes with the highest figures (``Lane.tests`` or
    ``Lane.cpu``), if any, under a heading: ``== the N {what}``."""
    top = sorted(
        ((s, lane.name, name) for lane in lanes for s, name in getattr(lane, figures)),
        reverse=True,
    )[:most]
    if top:
        print(f"\n== the {len(top)} {what}")
        for seconds, lane_name, name in top:
            print(f"{seconds:7.1f}  {lane_name:9}  {name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--log", type=Path, action="append", default=[], help="a lane's log, printed first"
    )
    parser.add_argument("--load", type=Path, help="the load samples: EPOCH LOAD1 per line")
    parser.add_argument("--slowest", type=int, default=10, help="how many slowest tests to list")
    parser.add_argument(
        "--why-lines", type=int, default=12, help="lines of each failure's end to show"
    )
    parser.add_argument("--rerun", type=Path, help="the JUnit XML of the failed tests' rerun")
    parser.add_argument(
        "--cpu", type=Path, help="test.sh's cgroups of the lanes: DIR/NAME/cpuacct.usage"
    )
    parser.add_argument(
        "--print-failed", action="store_true", help="print the failed tests' node ids, only"
    )
    parser.add_argument(
        "--plan", action="store_true", help="print the lanes' test files (see above), only"
    )
    parser.add_argument(
        "--record", action="store_true", help=f"rewrite {COSTS.relative_to(REPO)} from the lanes"
    )
    parser.add_argument("lanes", nargs="*", metavar="NAME=RC:JUNIT_XML")
    args = parser.parse_args(argv)
    if args.plan:
        print_plan()
        return 0
    if not args.lanes:
        parser.error("give the lanes: NAME=RC:JUNIT_XML ...")
    if args.record:
        costs = record([parse_lane(spec) for spec in args.lanes])
        seconds = sum(float(c["s"] or 0.0) for c in costs.values())
        print(f"{COSTS.relative_to(REPO)}: {len(costs)} files, {seconds:.0f} s")
        return 0
    if args.print_failed:
        for lane in (parse_lane(spec) for spec in args.lanes):
            for test in lane.failed_ids:
                print(test)
        return 0
    for log in args.log:
        print(f"\n== {log}", flush=True)
        try:
            sys.stdout.write(log.read_text(errors="replace"))
        except OSError as e:
            print(f"(no log: {e.strerror})")
    lanes = [parse_lane(spec) for spec in args.lanes]
    rerun_passed = passed_ids(args.rerun) if args.rerun else set()
    for lane in lanes:
        lane.passed_on_rerun = [t for t in lane.failed_ids if t in rerun_passed]
        if args.cpu:
            lane.cpu_s = lane_cpu(args.cpu, lane.name)
    print("\n== lanes")
    for lane in lanes:
        cpu = f", {lane.cpu_s:,.0f} s of CPU" if lane.cpu_s is not None else ""
        if lane.missing:
            print(f"{lane.name}: pytest exited {lane.rc} and wrote no report{cpu}")
        else:
            print(
                f"{lane.name}: {lane.passed} passed, {lane.failed} failed, {lane.skipped} skipped"
                f" in {lane.seconds:.0f} s{cpu} (pytest exited {lane.rc})"
            )
    _print_top(lanes, "tests", args.slowest, "slowest tests (seconds, set-up included)")
    _print_top(lanes, "cpu", args.slowest, "costliest tests (CPU seconds, all their processes)")
    if args.load:
        cores = os.cpu_count() or 1
        print(load_summary(args.load, cores))
        accounted = [lane.cpu_s for lane in lanes if lane.cpu_s is not None]
        line = cpu_summary(args.load, cores, sum(accounted) if accounted else None)
        if line:
            print(line)
    # CI shows the end of this output: each failure's own end goes here, before the closing
    # (the lanes' logs above can be cut). A test that failed on its rerun too: that failure.
    again_failed = failures(args.rerun) if args.rerun else {}
    still = [
        (lane.name, t, again_failed.get(t, lane.why.get(t, "")))
        for lane in lanes
        for t in lane.failed_ids
        if t not in lane.passed_on_rerun
    ]
    if still:
        print(f"\n== why they failed (the end of each failure, {args.why_lines} lines at most)")
        shown: list[str] = []
        for lane_name, test, text in still:
            rerun = " (and on its rerun alone)" if test in again_failed else ""
            print(f"-- {lane_name}: {test}{rerun}")
            lines = tail(text, args.why_lines)
            if lines == shown:  # a module's fixture failed each of its tests alike
                print("   (the same as the one above)")
                continue
            shown = lines
            for line in lines:
                print(f"   {line}")
    flaky = [(lane.name, t) for lane in lanes for t in lane.passed_on_rerun]
    if flaky:
        print(
            f"\n== {len(flaky)} failed in their lane and passed when rerun alone (flaky under load)"
        )
        for lane_name, test in flaky:
            print(f"  {lane_name:9}  {test}")
    passed = sum(lane.passed for lane in lanes) + len(flaky)
    # A lane whose pytest failed with no failed test in its report (it crashed, was killed,
    # collected nothing) counts as one failure, so the closing line never reads 0 failed then.
    failed = sum(
        max(lane.failed - len(lane.passed_on_rerun), 0 if lane.ok else 1) for lane in lanes
    )
    skipped = sum(lane.skipped for lane in lanes)
    again = f" ({len(flaky)} on a rerun)" if flaky else ""
    print(f"suite: {passed} passed{again}, {failed} failed, {skipped} skipped")
    return 0 if all(lane.ok for lane in lanes) else 1


if __name__ == "__main__":
    sys.exit(main())
