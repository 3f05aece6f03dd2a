"""scripts/lanes.py: the closing of scripts/test.sh's lanes (one line per lane, one closing
line for the suite, exit status 0 only when every lane passed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lanes
import pytest


def _junit(
    path: Path, tests: int, failures: int = 0, errors: int = 0, skipped: int = 0, body: str = ""
) -> str:
    """A lane's JUnit XML as pytest writes it: its counts, and ``body`` (its test cases)."""
    path.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">'
        f'<testsuite name="pytest" errors="{errors}" failures="{failures}" skipped="{skipped}"'
        f' tests="{tests}" time="12.5">{body}</testsuite></testsuites>'
    )
    return str(path)


def test_two_green_lanes_add_up_and_exit_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "e2e.log"
    log.write_text("tests/e2e/test_x.py ....\nE2E-LOG-LINE\n")
    host = _junit(tmp_path / "host.xml", tests=100, skipped=2)
    e2e = _junit(tmp_path / "e2e.xml", tests=40)
    rc = lanes.main(["--log", str(log), f"host=0:{host}", f"e2e=0:{e2e}"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "E2E-LOG-LINE" in out
    assert "host: 98 passed, 0 failed, 2 skipped" in out
    assert out.rstrip().splitlines()[-1] == "suite: 138 passed, 0 failed, 2 skipped"


def test_a_failed_test_in_either_lane_fails_the_suite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host = _junit(tmp_path / "host.xml", tests=10)
    e2e = _junit(tmp_path / "e2e.xml", tests=5, failures=1, errors=1)
    assert lanes.main([f"host=0:{host}", f"e2e=1:{e2e}"]) == 1
    assert capsys.readouterr().out.rstrip().endswith("suite: 13 passed, 2 failed, 0 skipped")


@pytest.mark.parametrize("rc", [1, 2, 5])
def test_a_lane_that_failed_without_a_failed_test_still_counts_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rc: int
) -> None:
    """pytest killed (no report), or exiting non-zero with no failed test (internal error,
    nothing collected): the closing line never says 0 failed then."""
    host = _junit(tmp_path / "host.xml", tests=10)
    e2e = _junit(tmp_path / "e2e.xml", tests=0) if rc == 5 else str(tmp_path / "absent.xml")
    assert lanes.main([f"host=0:{host}", f"e2e={rc}:{e2e}"]) == 1
    out = capsys.readouterr().out
    assert out.rstrip().endswith("suite: 10 passed, 1 failed, 0 skipped")
    if rc != 5:
        assert f"e2e: pytest exited {rc} and wrote no report" in out


def test_a_malformed_lane_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="is not NAME=RC:JUNIT_XML"):
        lanes.main(["host:0"])


def test_the_closing_lists_the_slowest_tests_and_the_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The slowest tests of all lanes (from each case's time in the JUnit XML), and the load
    samples summed up, before the closing line."""
    unit = tmp_path / "unit.xml"
    unit.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0"'
        ' failures="0" skipped="0" tests="2" time="9">'
        '<testcase classname="tests.unit.test_a" name="test_quick" time="1.5"/>'
        '<testcase classname="tests.unit.test_a" name="test_slow" time="7.25"/>'
        "</testsuite></testsuites>"
    )
    e2e = tmp_path / "e2e.xml"
    e2e.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0"'
        ' failures="0" skipped="0" tests="1" time="300">'
        '<testcase classname="tests.e2e.test_b" name="test_boot" time="300.0"/>'
        "</testsuite></testsuites>"
    )
    load = tmp_path / "load.txt"
    load.write_text("".join(f"{1000 + 10 * i} {v}\n" for i, v in enumerate([1, 2, 3, 8, 30])))
    rc = lanes.main(["--slowest", "2", "--load", str(load), f"unit=0:{unit}", f"e2e=0:{e2e}"])
    out = capsys.readouterr().out.rstrip().splitlines()
    assert rc == 0
    i = out.index("== the 2 slowest tests (seconds, set-up included)")
    assert out[i + 1].split() == ["300.0", "e2e", "tests.e2e.test_b::test_boot"]
    assert out[i + 2].split() == ["7.2", "unit", "tests.unit.test_a::test_slow"]
    assert out[-2].startswith("load (1-min average, 5 samples over 0.7 min, ")
    assert "median 3.0" in out[-2] and "max 30.0" in out[-2]
    assert out[-1] == "suite: 3 passed, 0 failed, 0 skipped"


def _cases(path: Path, cases: dict[str, str], why: str = "x") -> str:
    """A JUnit XML of test cases of this module: name -> "passed", "failure" or "error"; each
    failure's text ``why``."""
    body = "".join(
        f'<testcase classname="tests.unit.test_lanes" name="{name}" time="1.0">'
        + ("" if outcome == "passed" else f'<{outcome} message="m">{why}</{outcome}>')
        + "</testcase>"
        for name, outcome in cases.items()
    )
    failures = sum(o == "failure" for o in cases.values())
    errors = sum(o == "error" for o in cases.values())
    return _junit(path, len(cases), failures, errors, body=body)


def test_print_failed_gives_the_failed_tests_node_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unit = _cases(tmp_path / "unit.xml", {"test_a[x-1]": "failure", "test_b": "passed"})
    e2e = _cases(tmp_path / "e2e.xml", {"test_c": "error"})
    assert lanes.main(["--print-failed", f"unit=1:{unit}", f"e2e=1:{e2e}"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "tests/unit/test_lanes.py::test_a[x-1]",
        "tests/unit/test_lanes.py::test_c",
    ]


def test_a_test_that_passes_when_rerun_alone_is_listed_and_no_longer_fails_the_suite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unit = _cases(tmp_path / "unit.xml", {"test_a": "failure", "test_b": "passed"})
    rerun = _cases(tmp_path / "rerun.xml", {"test_a": "passed"})
    assert lanes.main(["--rerun", rerun, f"unit=1:{unit}"]) == 0
    out = capsys.readouterr().out.rstrip().splitlines()
    i = out.index("== 1 failed in their lane and passed when rerun alone (flaky under load)")
    assert out[i + 1].split() == ["unit", "tests/unit/test_lanes.py::test_a"]
    assert out[-1] == "suite: 2 passed (1 on a rerun), 0 failed, 0 skipped"


@pytest.mark.parametrize(
    ("lane", "rerun"),
    [
        ({"test_a": "failure"}, {"test_a": "failure"}),  # failed again
        ({"test_a": "failure", "test_b": "error"}, {"test_a": "passed"}),  # one not rerun
    ],
    ids=["failed-again", "one-of-two"],
)
def test_a_failure_the_rerun_did_not_pass_still_fails_the_suite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], lane: dict[str, str], rerun: dict[str, str]
) -> None:
    unit = _cases(tmp_path / "unit.xml", lane)
    again = _cases(tmp_path / "rerun.xml", rerun)
    assert lanes.main(["--rerun", again, f"unit=1:{unit}"]) == 1
    left = sum(o != "passed" for o in lane.values()) - sum(o == "passed" for o in rerun.values())
    assert capsys.readouterr().out.rstrip().splitlines()[-1].endswith(f", {left} failed, 0 skipped")


def test_a_lane_that_crashed_is_not_saved_by_a_rerun(tmp_path: Path) -> None:
    """pytest's exit 2 or more (interrupted, internal error) fails the lane whatever passed."""
    unit = _cases(tmp_path / "unit.xml", {"test_a": "failure"})
    rerun = _cases(tmp_path / "rerun.xml", {"test_a": "passed"})
    assert lanes.main(["--rerun", rerun, f"unit=2:{unit}"]) == 1


def test_the_closing_shows_the_end_of_each_failure_its_reruns_if_it_failed_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """CI shows the output's end, where the lanes' logs can be cut: each failed test's own end
    comes just before the closing line, the rerun's when it failed alone too."""
    lane_text = "\n".join(f"lane line {i}" for i in range(30))
    unit = _cases(tmp_path / "unit.xml", {"test_a": "failure", "test_b": "error"}, lane_text)
    rerun = _cases(tmp_path / "rerun.xml", {"test_a": "failure"}, "RERUN-FAILED-ALONE")
    assert lanes.main(["--why-lines", "5", "--rerun", rerun, f"unit=1:{unit}"]) == 1
    out = capsys.readouterr().out.rstrip().splitlines()
    i = out.index("== why they failed (the end of each failure, 5 lines at most)")
    assert out[i + 1] == "-- unit: tests/unit/test_lanes.py::test_a (and on its rerun alone)"
    assert out[i + 2].strip() == "RERUN-FAILED-ALONE"
    assert out[i + 3] == "-- unit: tests/unit/test_lanes.py::test_b"
    assert [line.strip() for line in out[i + 4 : i + 9]] == [
        f"lane line {n}" for n in range(25, 30)
    ]
    assert out[i + 9] == "suite: 0 passed, 2 failed, 0 skipped"


def test_failures_alike_are_shown_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A module's fixture that failed fails each of its tests with the same report."""
    unit = _cases(tmp_path / "unit.xml", {"test_a": "error", "test_b": "error"}, "FIXTURE-DOWN")
    assert lanes.main([f"unit=1:{unit}"]) == 1
    out = capsys.readouterr().out.rstrip().splitlines()
    i = out.index("-- unit: tests/unit/test_lanes.py::test_a")
    assert out[i + 1 : i + 4] == [
        "   FIXTURE-DOWN",
        "-- unit: tests/unit/test_lanes.py::test_b",
        "   (the same as the one above)",
    ]


# -- the plan: which test files run in which lane ---------------------------------------------


def test_the_plan_runs_every_test_file_once_and_the_pinned_ones_in_their_lane() -> None:
    files = lanes.test_files()
    planned = lanes.plan(files, json.loads(lanes.COSTS.read_text()))
    everywhere = [f for fs in planned.values() for f in fs]
    assert sorted(everywhere) == files and len(set(everywhere)) == len(files)
    assert planned["autoscale"] == ["tests/e2e/test_autoscale.py"]
    # tests/system first, then the autostop cluster's tests (it boots after the start's rush)
    system = [f for f in files if f.startswith("tests/system/")]
    assert planned["autostop"] == [*system, "tests/e2e/test_autostop.py"]
    e2e = [f for f in files if f.startswith("tests/e2e/")]
    assert set(e2e) - set(planned["e2e"]) == {
        "tests/e2e/test_autoscale.py", "tests/e2e/test_autostop.py"
    }  # fmt: skip
    assert not [f for f in planned["e2e"] if not f.startswith("tests/e2e/")]
    for name, fs in planned.items():  # pytest cannot hold two modules of one name in a run
        assert len({Path(f).name for f in fs}) == len(fs), name


def test_files_are_packed_longest_first_onto_the_lane_with_the_least_so_far() -> None:
    files = [
        "tests/e2e/test_x.py",
        "tests/unit/test_a.py",
        "tests/unit/test_b.py",
        "tests/unit/test_c.py",
        "tests/unit/test_d.py",
        "tests/unit/test_new.py",
    ]
    costs = {
        "tests/e2e/test_x.py": {"s": 900.0, "cpu_s": 90.0},
        "tests/unit/test_a.py": {"s": 500.0, "cpu_s": 50.0},
        "tests/unit/test_b.py": {"s": 400.0, "cpu_s": 40.0},
        "tests/unit/test_c.py": {"s": 100.0, "cpu_s": 10.0},
        "tests/unit/test_d.py": {"s": 50.0, "cpu_s": 5.0},
    }  # one CPU share for all: each lane's files in name order
    planned = lanes.plan(files, costs)
    # Longest first onto unit or bench: a 500 -> unit (0), b 400 -> bench (0), the new file
    # (the median file: 400) -> bench (400, less than unit's 500), c 100 -> unit (500, less than
    # bench's 800), d 50 -> unit (600).
    assert planned["unit"] == [
        "tests/unit/test_a.py",
        "tests/unit/test_c.py",
        "tests/unit/test_d.py",
    ]
    assert planned["bench"] == ["tests/unit/test_b.py", "tests/unit/test_new.py"]
    assert planned["e2e"] == ["tests/e2e/test_x.py"]  # a cluster lane takes none of them


def test_a_module_is_never_packed_beside_one_of_its_name() -> None:
    files = ["tests/system/test_same.py", "tests/unit/test_same.py", "tests/unit/test_big.py"]
    costs = {
        "tests/e2e/test_same.py": {"s": 10.0, "cpu_s": None},
        "tests/unit/test_same.py": {"s": 5.0, "cpu_s": None},
        "tests/unit/test_big.py": {"s": 50.0, "cpu_s": None},
    }
    planned = lanes.plan(files, costs)
    assert "tests/unit/test_same.py" not in planned["e2e"]


def test_in_a_packed_lane_the_files_that_mostly_wait_run_first() -> None:
    """Packed as by their seconds, each lane's files run by the share of their time that was
    CPU, least first; a file whose CPU is unknown counts as the median file's share."""
    files = [f"tests/unit/test_{x}.py" for x in "abcdef"]
    costs: dict[str, lanes.Cost] = {
        "tests/unit/test_a.py": {"s": 100.0, "cpu_s": 95.0},  # busy
        "tests/unit/test_b.py": {"s": 90.0, "cpu_s": 9.0},  # waits
        "tests/unit/test_c.py": {"s": 80.0, "cpu_s": 60.0},
        "tests/unit/test_d.py": {"s": 70.0, "cpu_s": 7.0},
        "tests/unit/test_e.py": {"s": 10.0, "cpu_s": None},  # the median share: 0.75
        "tests/unit/test_f.py": {"s": 5.0, "cpu_s": 4.0},
    }
    planned = lanes.plan(files, costs)
    # Longest first: a -> unit, b -> bench, c -> bench (90 < 100), d -> unit, e -> unit
    # (170 = 170: the earlier lane), f -> bench (170 < 180).
    assert planned["unit"] == [
        "tests/unit/test_d.py",  # 0.1
        "tests/unit/test_e.py",  # 0.75
        "tests/unit/test_a.py",  # 0.95
    ]
    assert planned["bench"] == [
        "tests/unit/test_b.py",  # 0.1
        "tests/unit/test_c.py",  # 0.75
        "tests/unit/test_f.py",  # 0.8
    ]
    assert lanes.cpu_share(costs, files)["tests/unit/test_e.py"] == 0.75


def test_record_writes_each_files_seconds_and_cpu_from_the_lanes_reports(tmp_path: Path) -> None:
    xml = tmp_path / "u.xml"
    cpu = '<properties><property name="cpu_s" value="{}" /></properties>'
    xml.write_text(
        '<testsuites><testsuite name="pytest" tests="5" failures="0" errors="0" skipped="0"'
        ' time="9">'
        f'<testcase classname="tests.unit.test_lanes" name="test_a" time="2.5">{cpu.format(2)}'
        "</testcase>"
        f'<testcase classname="tests.unit.test_lanes" name="test_b[x]" time="1.0">{cpu.format(0.5)}'
        "</testcase>"
        f'<testcase classname="tests.unit.test_lint" name="test_a" time="3.0">{cpu.format(1)}'
        "</testcase>"
        '<testcase classname="tests.unit.test_lint" name="test_b" time="1.0"/>'
        '<testcase classname="tests.unit.test_gone" name="test_c" time="4.0"/>'
        "</testsuite></testsuites>"
    )
    out = tmp_path / "costs.json"
    costs = lanes.record([lanes.parse_lane(f"unit=0:{xml}")], out)
    # A file that no longer exists is left out; one test without its CPU leaves its file's out.
    assert costs == {
        "tests/unit/test_lanes.py": {"s": 3.5, "cpu_s": 2.5},
        "tests/unit/test_lint.py": {"s": 4.0, "cpu_s": None},
    }
    assert json.loads(out.read_text()) == costs


def test_the_committed_costs_name_only_files_that_exist() -> None:
    """A renamed or removed test file: run the suite and `scripts/lanes.py --record` its lanes."""
    costs = json.loads(lanes.COSTS.read_text())
    assert set(costs) <= set(lanes.test_files()), set(costs) - set(lanes.test_files())
    assert len(costs) >= 0.9 * len(lanes.test_files())


def test_the_closing_lists_the_costliest_tests_each_lanes_cpu_and_the_runs_floor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With test.sh's CPU accounting: each lane's CPU seconds from its group, the costliest
    tests from their cpu_s properties, and the machine's busy CPU over the run (from the load
    samples' third column, jiffies) with the least wall time that much work takes."""
    unit = tmp_path / "unit.xml"
    unit.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0"'
        ' failures="0" skipped="0" tests="2" time="9">'
        '<testcase classname="tests.unit.test_a" name="test_cheap" time="5.0">'
        '<properties><property name="cpu_s" value="0.5"/></properties></testcase>'
        '<testcase classname="tests.unit.test_a" name="test_costly" time="4.0">'
        '<properties><property name="cpu_s" value="7.5"/></properties></testcase>'
        "</testsuite></testsuites>"
    )
    groups = tmp_path / "groups"
    (groups / "unit").mkdir(parents=True)
    (groups / "unit" / "cpuacct.usage").write_text("1234500000000\n")
    load = tmp_path / "load.txt"
    hz = lanes.CLOCK_TICKS
    # 600 s, the busy CPU time growing by 1,200 s of CPU: both cores busy throughout.
    load.write_text(f"1000 3.0 {100 * hz}\n1300 9.0 {700 * hz}\n1600 4.0 {1300 * hz}\n")
    rc = lanes.main(["--slowest", "1", "--load", str(load), "--cpu", str(groups), f"unit=0:{unit}"])
    out = capsys.readouterr().out.rstrip().splitlines()
    assert rc == 0
    assert "unit: 2 passed, 0 failed, 0 skipped in 9 s, 1,234 s of CPU (pytest exited 0)" in out
    i = out.index("== the 1 costliest tests (CPU seconds, all their processes)")
    assert out[i + 1].split() == ["7.5", "unit", "tests.unit.test_a::test_costly"]
    cores = lanes.os.cpu_count() or 1
    floor = 1200 / cores / 60
    assert out[-2] == (
        f"CPU: 1,200 s busy over 10.0 min on {cores} cores ({1200 / (600 * cores):.0%}), the"
        f" lanes' own 1,234 s; this much work takes at least {floor:.1f} min here"
    )


def test_the_cpu_line_gives_the_kernels_part_and_what_the_host_took_where_sampled(
    tmp_path: Path,
) -> None:
    """test.sh's five columns: busy, its kernel part and steal, all jiffies so far. Over 600 s
    on 2 cores: 1,000 s busy, 250 s of it in the kernel, 12 s stolen by the host (1 %)."""
    hz = lanes.CLOCK_TICKS
    load = tmp_path / "load.txt"
    load.write_text(
        f"1000 3.0 {100 * hz} {40 * hz} {3 * hz}\n"
        f"1300 9.0 {600 * hz} {200 * hz} {9 * hz}\n"
        f"1600 4.0 {1100 * hz} {290 * hz} {15 * hz}\n"
    )
    assert lanes.cpu_summary(load, 2) == (
        "CPU: 1,000 s busy over 10.0 min on 2 cores (83%); the kernel's part 25%, the host took"
        " 1% of the cores; this much work takes at least 8.3 min here"
    )
    # The older three columns: no such parts, and no guess at them.
    load.write_text(f"1000 3.0 {100 * hz}\n1600 4.0 {1100 * hz}\n")
    assert lanes.cpu_summary(load, 2) == (
        "CPU: 1,000 s busy over 10.0 min on 2 cores (83%); this much work takes at least 8.3 min"
        " here"
    )


def test_without_busy_samples_or_groups_the_closing_says_no_cpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Load samples of two columns (no CPU accounted) and no groups: no CPU line, no figure."""
    unit = _junit(tmp_path / "unit.xml", 1)
    load = tmp_path / "load.txt"
    load.write_text("1000 3.0\n1300 9.0\n")
    rc = lanes.main(["--load", str(load), "--cpu", str(tmp_path / "none"), f"unit=0:{unit}"])
    out = capsys.readouterr().out
    assert rc == 0 and "CPU" not in out and "costliest" not in out


def test_the_suites_conftest_puts_each_tests_cpu_in_its_report(tmp_path: Path) -> None:
    """tests/conftest.py reads the lane's usage file that RAYDRIVER_LANE_CPU names before each
    test's set-up and after its tear-down, and writes the difference as the property cpu_s."""
    usage = tmp_path / "cpuacct.usage"
    usage.write_text("2500000000\n")  # a file that does not move: 0.0 s
    report = tmp_path / "report.xml"
    test = "tests/unit/test_lanes.py::test_a_malformed_lane_is_one_line"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test,
         f"--junitxml={report}"],
        cwd=lanes.REPO, env={**os.environ, "RAYDRIVER_LANE_CPU": str(usage)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    lane = lanes.parse_lane(f"unit=0:{report}")
    assert lane.cpu == [(0.0, "tests.unit.test_lanes::test_a_malformed_lane_is_one_line")]
