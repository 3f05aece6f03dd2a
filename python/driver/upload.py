"""What ``submit`` uploads, decided before anything leaves the machine.

A job's working directory (and each ``py_modules`` folder) is packaged by Ray's own packaging
code, which honours ``.gitignore`` and ``.rayignore`` files inside the folder. This module adds
what a person expects on top and says what will go:

- files the enclosing git repository ignores (its root ``.gitignore``, ``.git/info/exclude``)
  are left out too, not only those ignored by files inside the folder;
- special files (FIFOs, sockets, devices) are left out: reading a FIFO would block forever;
- a home folder (or a folder that contains one, or ``/``) is refused, and so are files that look
  secret (SSH and cloud credentials, Terraform state, private keys) unless the user asks for
  them with ``--allow-sensitive``;
- the file count and size are reported, and a package over Ray's limit is refused before upload.
"""

from __future__ import annotations

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

    def summary(self) -> str:
        parts = [f"{self.files} file{'s' if self.files != 1 else ''}", human_size(self.bytes)]
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
        if stat.S_ISREG(st.st_mode):
            result.files += 1
            result.bytes += st.st_size
        elif not stat.S_ISDIR(st.st_mode) and not stat.S_ISLNK(st.st_mode):
            result.special.append(relative)

    _dir_travel(root, [_get_excludes(root, list(result.excludes))], visit, include_gitignore=True)
    result.excludes += [_pattern(s) for s in result.special]
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
