"""What ``submit`` uploads, decided before anything leaves the machine.

A job's working directory (and each ``py_modules`` folder) is packaged by Ray's own packaging
code, which honours ``.gitignore`` and ``.rayignore`` files inside the folder. This module adds
what a person expects on top and says what will go:

- files the enclosing git repository ignores (its root ``.gitignore``, ``.git/info/exclude``)
  are left out too, not only those ignored by files inside the folder;
- special files (FIFOs, sockets, devices) are left out: reading a FIFO would block forever;
- symlinks: Ray's packaging follows them (a link to a file uploads the file's bytes under the
  link's name; a link to a folder uploads the folder again, endlessly for a link to an enclosing
  folder). So a link to a file inside the folder is uploaded as a copy of that file, counted at
  its size and judged by the target's path as well as its own name (``notes.txt ->
  .ssh/id_ed25519`` looks secret); a link leading outside the folder, or to a folder, is
  refused; a broken link (or a loop of links) is left out, as Ray would skip it;
- a home folder (or a folder that contains one, or ``/``) is refused, and so are files that look
  secret (SSH and cloud credentials, Terraform state, private keys) unless the user asks for
  them with ``--allow-sensitive``;
- the file count and size are reported, and a package over Ray's limit is refused before upload.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from driver.errors import DriverError
from driver.progress import human_size

RAY_PACKAGE_LIMIT = 512 * 1024 * 1024
"""Ray refuses working_dir/py_modules packages over 512 MiB (its GCS message limit)."""
SENSITIVE_NAMES = frozenset(
    {
        ".ssh",
        ".azure",
        ".aws",
        ".kube",
        ".gnupg",
        ".docker",
        ".terraform",
        ".netrc",
        ".git-credentials",
        ".pypirc",
        ".env",
        "id_rsa",
        "id_dsa",
        "id_ecdsa",
        "id_ed25519",
        "terraform.tfstate",
        "terraform.tfstate.backup",
    }
)
SENSITIVE_SUFFIXES = (".tfstate", ".tfvars", ".pem", ".key", ".pfx", ".p12", ".ppk")
ALLOW_FLAG = "--allow-sensitive"


def _not_ray_issue_line(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Issue with path")


_WALK_LOG = logging.getLogger(f"{__name__}.walk")
_WALK_LOG.addFilter(_not_ray_issue_line)


@dataclass
class UploadPlan:
    """One folder's package: what Ray will exclude, and what will go."""

    root: Path
    excludes: list[str] = field(default_factory=list)
    """gitwildmatch patterns relative to ``root`` (Ray's ``excludes``)."""
    files: int = 0
    bytes: int = 0
    git_ignored: int = 0
    special: list[str] = field(default_factory=list)
    sensitive: list[str] = field(default_factory=list)
    links: int = 0
    """Symlinks to files inside the folder, uploaded as copies (counted in files and bytes)."""
    broken: list[str] = field(default_factory=list)
    """Symlinks that lead nowhere (or round in a loop): left out."""

    def summary(self) -> str:
        parts = [f"{self.files} file{'s' if self.files != 1 else ''}", human_size(self.bytes)]
        if self.links:
            parts.append(f"{self.links} of them through a symlink, uploaded as a copy")
        if self.broken:
            shown = ", ".join(sorted(self.broken)[:3])
            parts.append(f"{len(self.broken)} broken symlink(s) left out: {shown}")
        if self.git_ignored:
            parts.append(f"{self.git_ignored} git-ignored path(s) left out")
        if self.special:
            parts.append(
                f"{len(self.special)} special file(s) left out: {', '.join(self.special[:3])}"
            )
        return ", ".join(parts)


def _pattern(relative: str) -> str:
    """A gitwildmatch pattern matching exactly ``relative`` (from the package root)."""
    escaped = "".join("\\" + c if c in "\\*?[]!#" else c for c in relative)
    if escaped.endswith(" "):
        escaped = escaped[:-1] + "\\ "
    return "/" + escaped


def _git_ignored(root: Path) -> list[str]:
    """Paths under ``root`` that its git repository ignores (relative, dirs end in "/")."""
    try:
        p = subprocess.run(
            [
                "git",
                "-C",
                str(root),
                "ls-files",
                "-z",
                "--others",
                "--ignored",
                "--exclude-standard",
                "--directory",
            ],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if p.returncode != 0:  # not in a repository, or no git
        return []
    return [x for x in p.stdout.decode(errors="surrogateescape").split("\0") if x]


def _looks_sensitive(name: str) -> bool:
    return name in SENSITIVE_NAMES or name.endswith(SENSITIVE_SUFFIXES)


def _is_home_or_above(root: Path) -> bool:
    home = Path.home().resolve()
    return root == Path("/") or root == home or home.is_relative_to(root)


def plan(
    root: Path, allow_sensitive: bool = False, what: str = "the working directory"
) -> UploadPlan:
    """Walk ``root`` the way Ray's packaging will, and decide what goes. Raises on refusals."""
    from ray._private.runtime_env.packaging import _dir_travel, _get_excludes

    root = root.resolve()
    if not allow_sensitive and _is_home_or_above(root):
        raise DriverError(
            f"{what} would be {root}, which holds your home folder: put the script in a folder "
            f"of its own (or pass {ALLOW_FLAG} to upload it anyway)"
        )
    result = UploadPlan(root)
    ignored = _git_ignored(root)
    result.git_ignored = len(ignored)
    result.excludes = [_pattern(p.rstrip("/")) for p in ignored]

    def link(path: Path, relative: str) -> None:
        """What Ray will do with a symlink (it follows them), decided here."""
        try:
            st = os.stat(path)  # follows, as Ray's zip will
        except OSError:  # leads nowhere, or a loop of links: Ray skips it
            result.broken.append(relative)
            return
        target = Path(os.path.realpath(path))
        shown = f"{relative} -> {os.readlink(path)}"
        if not target.is_relative_to(root):
            raise DriverError(
                f"{what} {root} holds a symlink {shown} that leads outside it ({target}): Ray "
                "would upload what it points to; copy the file in, or list the link in .rayignore"
            )
        inside = target.relative_to(root)
        if stat.S_ISDIR(st.st_mode):
            raise DriverError(
                f"{what} {root} holds a symlink {shown} to a folder "
                f"({inside.as_posix() if inside.parts else 'the folder itself'}): Ray would "
                "upload that folder again under the link's name (a link to an enclosing folder "
                "over and over); remove the link or list it in .rayignore"
            )
        if any(_looks_sensitive(part) for part in inside.parts):
            result.sensitive.append(f"{relative} (-> {inside.as_posix()})")
        if stat.S_ISREG(st.st_mode):
            result.files += 1
            result.bytes += st.st_size
            result.links += 1
        else:  # a link to a FIFO would block the packaging like the FIFO itself
            result.special.append(relative)

    def visit(path: Path) -> None:
        if path == root:
            return
        relative = str(path.relative_to(root))
        try:
            st = os.lstat(path)
        except OSError:
            return
        if _looks_sensitive(path.name):
            result.sensitive.append(relative + ("/" if stat.S_ISDIR(st.st_mode) else ""))
        if stat.S_ISLNK(st.st_mode):
            link(path, relative)
        elif stat.S_ISREG(st.st_mode):
            result.files += 1
            result.bytes += st.st_size
        elif not stat.S_ISDIR(st.st_mode) and not stat.S_ISLNK(st.st_mode):
            result.special.append(relative)

    # A refusal raised from ``visit`` ends Ray's walk (before it descends into a linked folder);
    # Ray logs every exception from its handler as "Issue with path": that line is dropped here,
    # the refusal itself is the one line the user sees.
    _dir_travel(
        root,
        [_get_excludes(root, list(result.excludes))],
        visit,
        include_gitignore=True,
        logger=_WALK_LOG,
    )
    result.excludes += [_pattern(s) for s in [*result.special, *result.broken]]
    if result.sensitive and not allow_sensitive:
        shown = ", ".join(result.sensitive[:5]) + (" ..." if len(result.sensitive) > 5 else "")
        raise DriverError(
            f"{what} {root} holds files that look secret ({shown}): move them out, list them "
            f"in .gitignore or .rayignore, or pass {ALLOW_FLAG} to upload them anyway"
        )
    if result.bytes > RAY_PACKAGE_LIMIT:
        raise DriverError(
            f"{what} {root} holds {human_size(result.bytes)} ({result.files} files), over Ray's "
            f"{human_size(RAY_PACKAGE_LIMIT)} package limit: leave data out with .rayignore and "
            "read it on the cluster instead"
        )
    return result
