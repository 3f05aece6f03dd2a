"""``python -m driver plot``: the curve's points are the run's progress.csv rows."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from driver.errors import DriverError
from driver.plot import plot
from support import error_lines, run_driver

HEADER = "iteration,env_steps,episode_return_mean,episode_len_mean,episodes,time_total_s\n"


def write_run(folder: Path, rows: list[tuple[int, int, str, float]]) -> Path:
    folder.mkdir(parents=True)
    lines = [f"{i},{s},{r},1,1,{t}\n" for i, s, r, t in rows]
    (folder / "progress.csv").write_text(HEADER + "".join(lines))
    return folder


def test_points_are_the_rows(tmp_path: Path) -> None:
    run = write_run(
        tmp_path / "cabs-1",
        [(1, 1000, "", 0.5), (2, 2000, "-900.5", 1.0), (3, 3000, "-400", 1.75)],
    )
    drawn = plot([run])
    assert drawn.output == run / "curve.png"
    assert drawn.output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with (run / "progress.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["episode_return_mean"]]
    steps = tuple(float(r["env_steps"]) for r in rows)
    times = tuple(float(r["time_total_s"]) for r in rows)
    returns = tuple(float(r["episode_return_mean"]) for r in rows)
    assert drawn.vs_env_steps == ((steps, returns),)
    assert drawn.vs_time == ((times, returns),)
    assert drawn.curves[0].label == "cabs-1"


def test_one_line_per_run(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", [(1, 10, "1", 1.0), (2, 20, "2", 2.0)])
    b = write_run(tmp_path / "b", [(1, 5, "3", 0.5)])
    (tmp_path / "out").mkdir()
    drawn = plot([a, b], tmp_path / "out" / "both.png")
    assert drawn.output.is_file()
    assert drawn.vs_env_steps == (((10.0, 20.0), (1.0, 2.0)), ((5.0,), (3.0,)))
    assert [c.label for c in drawn.curves] == ["a", "b"]


def test_cli_writes_the_png(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r", [(1, 10, "1", 1.0)])
    r = run_driver("plot", str(run), "-o", str(tmp_path / "c.png"), home=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "c.png").is_file()
    assert f"Wrote {tmp_path / 'c.png'}: 1 run, 1 point" in r.stderr


def _bad_inputs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "progress.csv").write_text("")
    header_only = tmp_path / "header-only"
    header_only.mkdir()
    (header_only / "progress.csv").write_text(HEADER)
    no_csv = tmp_path / "no-csv"
    no_csv.mkdir()
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    binary = tmp_path / "binary"
    binary.mkdir()
    (binary / "progress.csv").write_bytes(b"\xff\xfe\x00garbage")
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    (wrong / "progress.csv").write_text("a,b\n1,2\n")
    unreadable = tmp_path / "unreadable"
    unreadable.mkdir()
    (unreadable / "progress.csv").mkdir()  # a folder where the file should be
    return {
        "empty": (empty, "is empty"),
        "header-only": (header_only, "has no row with a mean return"),
        "no-csv": (no_csv, "no progress.csv in"),
        "not-a-folder": (a_file, "is not a folder"),
        "missing": (tmp_path / "missing", "no such folder"),
        "binary": (binary, "cannot read"),
        "wrong-columns": (wrong, "has no column env_steps, time_total_s, episode_return_mean"),
        "unreadable": (unreadable, "no progress.csv in"),
    }


def test_bad_input_is_a_driver_error(tmp_path: Path) -> None:
    for name, (path, message) in _bad_inputs(tmp_path).items():
        with pytest.raises(DriverError, match=message) as e:
            plot([path], tmp_path / f"{name}.png")
        assert e.value.exit_code == 2
        assert not (tmp_path / f"{name}.png").exists()


def test_bad_input_exits_2_in_one_line(tmp_path: Path) -> None:
    r = run_driver("plot", str(tmp_path / "missing"), home=tmp_path, timeout=120)
    assert r.returncode == 2
    assert len(error_lines(r.stderr)) == 1
    assert error_lines(r.stderr)[0].startswith("error: no such folder:")
    run = write_run(tmp_path / "r", [(1, 10, "1", 1.0)])
    r = run_driver("plot", str(run), "-o", str(tmp_path / "x.jpg"), home=tmp_path)
    assert r.returncode == 2
    assert error_lines(r.stderr) == [f"error: {tmp_path / 'x.jpg'}: expected a .png file name"]


@pytest.mark.parametrize("where", ["new/dir/x.png", "/raydriver-no-such-folder/x.png"])
def test_an_output_in_a_missing_folder_is_refused_not_created(tmp_path: Path, where: str) -> None:
    run = write_run(tmp_path / "r", [(1, 10, "1", 1.0)])
    r = run_driver("plot", str(run), "-o", where, home=tmp_path / "h", cwd=tmp_path, timeout=120)
    assert r.returncode == 2
    assert error_lines(r.stderr) == [
        f"error: cannot write {where}: {Path(where).parent} does not exist"
    ]
    assert not (tmp_path / "new").exists()
    assert not Path("/raydriver-no-such-folder").exists()
    assert sorted(p.name for p in run.iterdir()) == ["progress.csv"]


def test_a_tune_experiment_folder_is_one_line_per_trial(tmp_path: Path) -> None:
    """A downloaded Tune experiment: trial folders with RLlib's column names."""
    experiment = tmp_path / "sweep"
    header = "env_runners/episode_return_mean,num_env_steps_sampled_lifetime,time_total_s\n"
    for x, trial in ((1, "trainable_a_00000"), (2, "trainable_a_00001")):
        (experiment / trial / "checkpoint_000000").mkdir(parents=True)
        (experiment / trial / "progress.csv").write_text(
            header + "".join(f"{x * i},{100 * i},{0.5 * i}\n" for i in (1, 2, 3))
        )
    (experiment / "tuner.pkl").write_bytes(b"pickle")
    drawn = plot([experiment])
    assert drawn.output == experiment / "curve.png"
    assert [c.label for c in drawn.curves] == ["trainable_a_00000", "trainable_a_00001"]
    assert drawn.vs_env_steps == (
        ((100.0, 200.0, 300.0), (1.0, 2.0, 3.0)),
        ((100.0, 200.0, 300.0), (2.0, 4.0, 6.0)),
    )
    assert drawn.vs_time[1] == ((0.5, 1.0, 1.5), (2.0, 4.0, 6.0))
