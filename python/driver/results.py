"""Bring a job's results folder (checkpoints, summaries, TensorBoard files) back over SFTP.

Re-running a download fetches only what is new: a file already present locally with the same
size and modification time is skipped. Each file lands as ``NAME.part`` and is renamed when
complete, so an interrupted download never leaves a truncated file that a later run would take
for finished.

What is on the head is not trusted: a job (or anyone with the ray user's rights) can put
symlinks and odd names into its results folder. Symlinks are never followed (the folder itself
may not be one), names that are not a plain file name are skipped, and every local path is
checked to stay inside the destination.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import paramiko

from driver.errors import DriverError
from driver.progress import ByteProgress


@dataclass(frozen=True)
class RemoteFile:
    path: str
    relative: PurePosixPath
    size: int
    mtime: int | None


@dataclass(frozen=True)
class DownloadReport:
    source: str
    destination: Path
    fetched: int
    skipped: int
    bytes_fetched: int
    in_place: bool = False
    """The results are already on this machine (local Ray): nothing was copied."""
    left_out: tuple[str, ...] = ()
    """Entries not downloaded: symlinks, special files, unsafe names (relative paths)."""


def _safe_name(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name


def list_files(sftp: paramiko.SFTPClient, root: str) -> tuple[list[RemoteFile], list[str]]:
    """Every regular file under ``root``, and what was left out (symlinks — never followed —,
    special files, and entries whose name is not a plain file name)."""
    files: list[RemoteFile] = []
    left_out: list[str] = []
    pending = [PurePosixPath(".")]
    while pending:
        rel = pending.pop()
        folder = str(PurePosixPath(root) / rel)
        for entry in sorted(sftp.listdir_attr(folder), key=lambda a: a.filename):
            mode = entry.st_mode or 0
            if not _safe_name(entry.filename):
                left_out.append(f"{rel}/{entry.filename!r}")
                continue
            child = rel / entry.filename
            if stat.S_ISDIR(mode):
                pending.append(child)
            elif stat.S_ISREG(mode):
                files.append(
                    RemoteFile(
                        str(PurePosixPath(root) / child), child, entry.st_size or 0, entry.st_mtime
                    )
                )
            else:  # listdir_attr reports the entry itself (lstat): a symlink stays a symlink
                left_out.append(str(child))
    return files, left_out


def _inside(root: Path, path: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def download_tree(
    sftp: paramiko.SFTPClient,
    remote_root: str,
    local_root: Path,
    progress: ByteProgress | None = None,
) -> DownloadReport:
    try:
        attrs = sftp.lstat(remote_root)
    except FileNotFoundError:
        raise DriverError(
            f"no results on the head at {remote_root}: expected the job to write there "
            "($RAYDRIVER_RESULTS_DIR) — did it run, and under this submission id?"
        ) from None
    except PermissionError:
        raise DriverError(f"may not read {remote_root} on the head (permission denied)") from None
    if stat.S_ISLNK(attrs.st_mode or 0):
        target = ""
        with contextlib.suppress(OSError):
            target = f" (to {sftp.readlink(remote_root)})"
        raise DriverError(
            f"{remote_root} on the head is a symlink{target}: refusing to follow it (a job's "
            "results folder is a real folder)"
        )
    if not stat.S_ISDIR(attrs.st_mode or 0):
        raise DriverError(f"{remote_root} on the head is not a folder")
    try:
        files, left_out = list_files(sftp, remote_root)
    except PermissionError as e:
        raise DriverError(f"may not list {e.filename or remote_root} on the head") from None
    todo: list[tuple[RemoteFile, Path]] = []
    skipped = 0
    local_root.mkdir(parents=True, exist_ok=True)
    for f in files:
        local = local_root.joinpath(*f.relative.parts)
        if not _inside(local_root, local):
            left_out.append(str(f.relative))
            continue
        same = (
            local.is_file()
            and not local.is_symlink()
            and local.stat().st_size == f.size
            and (f.mtime is None or int(local.stat().st_mtime) == int(f.mtime))
        )
        if same:
            skipped += 1
        else:
            todo.append((f, local))
    total = sum(f.size for f, _ in todo)
    done = 0
    if progress:
        progress(0, total)
    for f, local in todo:
        local.parent.mkdir(parents=True, exist_ok=True)
        part = local.with_name(local.name + ".part")
        part.unlink(missing_ok=True)  # never write through a link someone left there
        base = done

        def step(transferred: int, _total: int, base: int = base) -> None:
            if progress:
                progress(base + transferred, total)

        try:
            sftp.get(f.path, str(part), callback=step)
        except BaseException as e:
            with contextlib.suppress(OSError):
                part.unlink()
            if isinstance(e, PermissionError):
                raise DriverError(
                    f"may not read {f.path} on the head (permission denied)"
                ) from None
            if isinstance(e, OSError | paramiko.SSHException | EOFError):
                raise DriverError(f"downloading {f.path} failed: {e}") from None
            raise
        part.replace(local)
        if f.mtime:
            os.utime(local, (f.mtime, f.mtime))
        done += f.size
    if progress:
        progress(total, total)
    return DownloadReport(
        remote_root, local_root, len(todo), skipped, total, left_out=tuple(left_out)
    )
