"""Bring a job's results folder (checkpoints, summaries, TensorBoard files) back over SFTP.

Re-running a download fetches only what is new: a file already present locally with the same
size and modification time is skipped. Each file lands as ``NAME.part`` and is renamed when
complete, so an interrupted download never leaves a truncated file that a later run would take
for finished.

What is on the head is not trusted: a job (or anyone with the ray user's rights) can put
symlinks and odd names into its results folder, and change them while the download runs.
Symlinks in the listing are left out (the folder itself may not be one), names that are not a
plain file name are skipped, and every local path is checked to stay inside the destination.

A listing is only a snapshot, and OpenSSH's sftp-server follows symlinks when it opens a file
(SFTP has no O_NOFOLLOW, and its attributes carry no inode number). So a job that swaps a listed
file for a symlink (to a file only the admin may read) after the listing would make the admin's
session open the link's target. What we read is therefore never decided by a path: each file is
opened first, then the *open handle* is checked with SFTP FSTAT (the attributes of the inode the
handle reads, whatever the path now says) and only read if it is a regular file owned by the
results folder's owner (the job's user, ``ray``). That user owns whatever it could plant or
swap; a file it may not read belongs to someone else (root, the admin), so a handle that a swap
or a hard link steered to it is closed unread and the name is reported as changed during the
download. Only the handle's own size is read, so a file that grows meanwhile cannot stream
forever. An lstat after the open would not do: the job can swap the regular file back between
the open and that lstat. Left: a job can make sftp-server block (a FIFO swapped in blocks its
open); the driver then gives up after STALL_TIMEOUT_S without an answer, having read nothing.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, BinaryIO

from driver.errors import DriverError
from driver.progress import ByteProgress
from driver.settings import RESULTS_ENV

if TYPE_CHECKING:  # paramiko is imported where it is used: short commands never need it
    import paramiko

STALL_TIMEOUT_S = 120.0
"""Give up when the head's SFTP server sends nothing for this long during a download."""
CHUNK = 32768


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
    changed: tuple[str, ...] = ()
    """Listed files not downloaded because they vanished, or were no longer a regular file of
    the results folder's owner, when opened (relative paths)."""


def _safe_name(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name


def list_files(
    sftp: paramiko.SFTPClient, root: str, owner: int | None = None
) -> tuple[list[RemoteFile], list[str]]:
    """Every regular file under ``root``, and what was left out (symlinks — never followed —,
    special files, entries whose name is not a plain file name, and, when ``owner`` is given,
    entries another user owns)."""
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
            if owner is not None and entry.st_uid != owner:
                # Not the job's: a folder swapped for a link, a hard link to someone's file.
                left_out.append(f"{child} (owned by uid {entry.st_uid}, not the job's user)")
            elif stat.S_ISDIR(mode):
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


def inside(root: Path, path: Path) -> bool:
    """Whether ``path`` (links resolved) lies in ``root``."""
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def local_error(path: Path, e: OSError) -> DriverError:
    """A failed local write (a full disk, no permission) as the one line the user sees."""
    return DriverError(f"cannot write {path}: {e.strerror or e}")


def write_all(out: BinaryIO, data: bytes, local: Path) -> None:
    """All of ``data`` to the unbuffered ``out`` (a raw write may take part of it): a full disk
    fails the write that hits it, as one line naming ``local``."""
    try:
        view = memoryview(data)
        while view:
            view = view[out.write(view) or 0 :]
    except OSError as e:
        raise local_error(local, e) from None


def _fetch(
    sftp: paramiko.SFTPClient,
    f: RemoteFile,
    owner: int,
    local: Path,
    step: ByteProgress,
) -> int | None:
    """Copy one listed file to ``local`` (through ``local.part``); its size, or None when it is
    no longer the job's regular file (see the module docstring for why the handle is checked)."""
    try:
        remote = sftp.open(f.path, "rb")
    except FileNotFoundError:
        return None  # vanished since the listing (or a swapped-in link that leads nowhere)
    with remote:
        got = remote.stat()  # SFTP FSTAT: the inode this handle reads, not what the path says
        if not stat.S_ISREG(got.st_mode or 0) or got.st_uid != owner:
            return None
        size = got.st_size or 0
        part = local.with_name(local.name + ".part")
        try:
            local.parent.mkdir(parents=True, exist_ok=True)
            part.unlink(missing_ok=True)  # never write through a link someone left there
            # Unbuffered: a full disk fails the write that hits it, not a later close.
            out = open(part, "xb", buffering=0)  # noqa: SIM115 - closed below
        except OSError as e:
            raise local_error(local, e) from None
        try:
            with out:
                if size:
                    remote.prefetch(size)
                done = 0
                while done < size:
                    data = remote.read(min(CHUNK, size - done))
                    if not data:
                        break  # shrank while we read: the rest of the file is not the job's
                    write_all(out, data, local)
                    done += len(data)
                    step(done, size)
            if done < size:
                part.unlink()
                return None
            part.replace(local)
        except BaseException:
            with contextlib.suppress(OSError):
                part.unlink()
            raise
    if f.mtime:
        os.utime(local, (f.mtime, f.mtime))
    return size


_prefetch_quieted = False


def _quiet_prefetch_threads() -> None:
    """paramiko's prefetch thread (``SFTPFile.prefetch``) may still be sending read requests
    when a download stops early (a local write error, Ctrl-C, a lost head); once the connection
    closes it dies with ``OSError: Socket is closed`` and Python prints that traceback to the
    user's terminal after our one-line error (CI saw it on a full disk). Its failure is already
    the download's own error, or none at all: nothing is printed for it. Any other thread's
    exception goes to the previous hook as before."""
    global _prefetch_quieted
    if _prefetch_quieted:
        return
    import paramiko

    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if (
            args.thread is not None
            and args.thread.name.endswith("(_prefetch_thread)")
            and issubclass(args.exc_type, (OSError, EOFError, paramiko.SSHException))
        ):
            return
        previous(args)

    threading.excepthook = hook
    _prefetch_quieted = True


def no_results(remote_root: str, state: str) -> str:
    """A job that wrote its results anywhere but the folder it was given leaves this one
    missing or empty: say which, and where the job should have written."""
    return (
        f"no results on the head at {remote_root}: the job's results folder {state} — a job "
        f"submitted by python -m driver is given ${RESULTS_ENV}={remote_root} and must write "
        "there (results written elsewhere are not downloaded; did it run, under this id?)"
    )


def download_tree(
    sftp: paramiko.SFTPClient,
    remote_root: str,
    local_root: Path,
    progress: ByteProgress | None = None,
) -> DownloadReport:
    import paramiko

    try:
        attrs = sftp.lstat(remote_root)
    except FileNotFoundError:
        raise DriverError(no_results(remote_root, "is missing")) from None
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
    owner = attrs.st_uid
    if owner is None:
        raise DriverError(f"the head's SFTP server does not say who owns {remote_root}")
    try:
        files, left_out = list_files(sftp, remote_root, owner)
    except PermissionError as e:
        raise DriverError(f"may not list {e.filename or remote_root} on the head") from None
    if not files and not left_out:
        raise DriverError(no_results(remote_root, "holds no files"))
    todo: list[tuple[RemoteFile, Path]] = []
    skipped = 0
    try:
        local_root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise local_error(local_root, e) from None
    for f in files:
        local = local_root.joinpath(*f.relative.parts)
        if not inside(local_root, local):
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
    done = fetched = 0
    changed: list[str] = []
    if progress:
        progress(0, total)
    _quiet_prefetch_threads()
    channel = sftp.get_channel()
    before = channel.gettimeout() if channel is not None else None
    if channel is not None:
        channel.settimeout(STALL_TIMEOUT_S)  # a job's FIFO can stall sftp-server for good
    try:
        for f, local in todo:
            base = done

            def step(transferred: int, _total: int, base: int = base) -> None:
                if progress:
                    progress(min(base + transferred, total), total)

            try:
                got = _fetch(sftp, f, owner, local, step)
            except PermissionError:
                raise DriverError(
                    f"may not read {f.path} on the head (permission denied)"
                ) from None
            except TimeoutError:
                raise DriverError(
                    f"the head's SFTP server sent nothing for {STALL_TIMEOUT_S:.0f} s while "
                    f"downloading {f.path} (a job can block it with a FIFO put there); "
                    f"{fetched} file(s) were downloaded before"
                ) from None
            except (OSError, paramiko.SSHException, EOFError) as e:
                raise DriverError(f"downloading {f.path} failed: {e}") from None
            if got is None:
                changed.append(str(f.relative))
                continue
            fetched += 1
            done += got
    finally:
        if channel is not None:
            with contextlib.suppress(OSError):
                channel.settimeout(before)
    if progress:
        progress(total, total)
    return DownloadReport(
        remote_root,
        local_root,
        fetched,
        skipped,
        done,
        left_out=tuple(left_out),
        changed=tuple(changed),
    )
