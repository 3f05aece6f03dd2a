"""A full disk on the driver's side: each command says which file it could not write, in one
line, and leaves no empty or partial file behind. The disk is a small tmpfs (root), filled up."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from headhost import HeadHost, driver_env
from support import error_lines, run_driver

NO_SPACE = "No space left on device"


@pytest.fixture
def full(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs with no byte left (folders can still be made)."""
    mount = tmp_path / "full"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], check=True)
    try:
        with open(mount / "filler", "wb", buffering=0) as f, pytest.raises(OSError) as e:
            while True:
                f.write(b"\0" * 4096)
        assert e.value.strerror == NO_SPACE
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def _entries(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "progress.csv").write_text(
        "env_steps,time_total_s,episode_return_mean\n4000,5.0,20.0\n8000,9.5,41.0\n"
    )
    return run


def test_plot_on_a_full_disk_names_the_file_and_leaves_no_empty_png(
    full: Path, tmp_path: Path
) -> None:
    before = _entries(full)
    r = run_driver("plot", str(_run(tmp_path)), "-o", str(full / "x.png"), home=tmp_path / "h")
    assert r.returncode == 2
    assert error_lines(r.stderr) == [f"error: cannot write {full / 'x.png'}: {NO_SPACE}"]
    assert _entries(full) == before


def test_saving_the_profile_on_a_full_disk_names_it_and_leaves_no_tmp_file(
    full: Path, tmp_path: Path
) -> None:
    home = full / "driver-home"
    r = run_driver("use", "--head", "root@198.51.100.7", home=home)
    assert r.returncode == 2
    assert error_lines(r.stderr) == [
        f"error: cannot save the profile {home / 'profile.json'}: {NO_SPACE}"
    ]
    assert [p.name for p in home.iterdir()] == []


def test_download_onto_a_full_disk_names_the_local_file_and_leaves_no_part(
    make_head_host: Callable[[], HeadHost], full: Path, tmp_path: Path
) -> None:
    head = make_head_host()
    head.write_ready()
    sid = "full-1"
    (head.results_dir / sid).mkdir()
    (head.results_dir / sid / "big.bin").write_bytes(os.urandom(1 << 20))
    assert head.sshd is not None
    home = tmp_path / "home"
    home.mkdir()
    (home / "known_hosts").write_text(head.sshd.known_hosts_line)
    before = _entries(full)
    r = run_driver(
        "download",
        *head.cli_args,
        sid,
        "--results",
        str(full),
        home=home,
        env=driver_env(home),
    )
    assert r.returncode == 2
    assert error_lines(r.stderr)[-1] == (
        f"error: cannot write {full / sid / 'big.bin'}: {NO_SPACE}"
    ), r.stderr
    assert [ln for ln in error_lines(r.stderr) if ln.startswith("error:")] == [
        error_lines(r.stderr)[-1]
    ]
    assert _entries(full) == [*before, sid]  # its folder, nothing in it
