"""Submission ids and downloads cannot reach outside their folders, against a real sshd and Ray
head (headhost.py): one id validator for every verb, no symlink followed on the head, changed
files fetched again even when their size is the same."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from headhost import HeadHost, driver_env
from support import FIXTURES, error_lines, run_driver

ID_RULE = (
    "a submission id is 1-128 letters, digits, '_', '.' or '-' starting with a letter or digit"
)


def drive(head: HeadHost, home: Path, *args: str):  # type: ignore[no-untyped-def]
    verb, *rest = args
    return run_driver(verb, *head.cli_args, *rest, home=home, env=driver_env(home))


@pytest.mark.parametrize(
    "bad", ["../../../../tmp/x", "/tmp/x", "a/b/c", "..", ".hidden", "x" * 129, ""]
)
@pytest.mark.parametrize("verb", ["download", "status", "logs", "stop"])
def test_every_verb_refuses_an_id_that_is_not_a_plain_name(
    head_host: HeadHost, home: Path, tmp_path: Path, verb: str, bad: str
) -> None:
    dest = tmp_path / "dest"
    r = drive(head_host, home, verb, bad, *(["--results", str(dest)] if verb == "download" else []))
    assert r.returncode == 2
    lines = error_lines(r.stderr)
    assert len(lines) == 1 and ID_RULE in lines[0], r.stderr
    assert not dest.exists() and not Path("/tmp/x").exists()


@pytest.mark.parametrize("bad", ["../../x", "a/b/c"])
def test_submit_refuses_such_an_id_before_anything_reaches_the_head(
    head_host: HeadHost, home: Path, bad: str
) -> None:
    before = set(os.listdir(head_host.results_dir))
    r = drive(
        head_host, home, "submit", "--submission-id", bad, str(FIXTURES / "jobs" / "succeed.py")
    )
    assert r.returncode == 2 and ID_RULE in r.stderr
    assert "Submitted" not in r.stderr
    listed = drive(head_host, home, "list", "--json")
    assert bad not in listed.stdout  # no job left PENDING that nothing can stop
    assert set(os.listdir(head_host.results_dir)) == before


def test_download_refuses_a_results_folder_that_is_a_symlink(
    head_host: HeadHost, home: Path, tmp_path: Path
) -> None:
    sid = "paths-link-1"
    (head_host.results_dir / sid).symlink_to("/etc")
    try:
        r = drive(head_host, home, "download", sid, "--results", str(tmp_path / "r"))
    finally:
        (head_host.results_dir / sid).unlink()
    assert r.returncode == 2
    assert error_lines(r.stderr) == [
        f"error: /var/lib/ray-cluster/results/{sid} on the head is a symlink (to /etc): "
        "refusing to follow it (a job's results folder is a real folder)"
    ]
    assert not (tmp_path / "r" / sid / "passwd").exists()


def test_symlinks_inside_the_results_are_left_out(
    head_host: HeadHost, home: Path, tmp_path: Path
) -> None:
    sid = "paths-link-2"
    folder = head_host.results_dir / sid
    (folder / "sub").mkdir(parents=True)
    (folder / "real.txt").write_text("real\n")
    (folder / "passwd").symlink_to("/etc/passwd")
    (folder / "sub" / "etc").symlink_to("/etc")
    r = drive(head_host, home, "download", sid, "--results", str(tmp_path / "r"))
    assert r.returncode == 0, r.stderr
    got = sorted(
        str(p.relative_to(tmp_path / "r" / sid)) for p in (tmp_path / "r" / sid).rglob("*")
    )
    assert got == ["real.txt"]  # the link to a folder was not followed
    assert "Left out 2 entries that are symlinks, special files or not plain names" in r.stderr


def test_a_changed_file_of_the_same_size_is_fetched_again(
    head_host: HeadHost, home: Path, tmp_path: Path
) -> None:
    sid = "paths-mtime-1"
    folder = head_host.results_dir / sid
    folder.mkdir(parents=True)
    (folder / "metrics.csv").write_text("step,return\n1,10\n")
    dest = tmp_path / "r"
    assert drive(head_host, home, "download", sid, "--results", str(dest)).returncode == 0
    assert (dest / sid / "metrics.csv").read_text() == "step,return\n1,10\n"
    time.sleep(1.1)
    (folder / "metrics.csv").write_text("step,return\n1,99\n")  # same size, new content
    r = drive(head_host, home, "download", sid, "--results", str(dest))
    assert r.returncode == 0, r.stderr
    assert "Downloaded 1 file" in r.stderr
    assert (dest / sid / "metrics.csv").read_text() == "step,return\n1,99\n"
    r = drive(head_host, home, "download", sid, "--results", str(dest))
    assert "Downloaded 0 files" in r.stderr and "1 already there" in r.stderr
