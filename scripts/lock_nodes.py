"""Write cloud-init/node-lock.txt: every package of the nodes' environment, pinned, with hashes.

Why: below the pinned top level (Ray, gymnasium, Pillow, ...) dependencies would otherwise float,
so a worker that joins a month after the head could install other versions. The lock makes every
node install the same files, and refuses files whose hash differs.

How: ``uv pip compile --universal`` resolves the inputs (:func:`nodekit.render.lock_inputs`) once
for every Python from 3.10 (the images run 3.10, 3.11 and 3.12) into a PEP 751 ``pylock.toml``,
which lists every file of every pinned version; only the hashes of files a node can install are
kept — CPython 3.10-3.12 on manylinux x86_64 (glibc 2.35, Ubuntu 22.04's, or older) and pure
wheels — so the lock fits in custom data. torch is not in it: on a CPU node it comes from
TORCH_INDEX_URL (PyTorch's CPU index) by exact version (``--no-deps``); its dependencies are.

Two additions are resolved with the node lock's versions as constraints and hold only what the
node lock lacks (installed ``--no-deps`` next to it):
  - cloud-init/autoscaler-lock.txt: pyproject's ``autoscaler`` extra (the head's Azure SDK);
  - cloud-init/node-lock-cuda.txt, the GPU variant: torch at the pinned version from PyPI, whose
    Linux wheel is the CUDA build, with its ``nvidia-*`` libraries (and triton, cuda-bindings,
    ...). A node with an NVIDIA GPU installs it instead of the CPU torch.

    .venv/bin/python scripts/lock_nodes.py            # rewrite what is stale (needs PyPI)
    .venv/bin/python scripts/lock_nodes.py --refresh  # resolve the node lock again too
    .venv/bin/python -m nodekit render                # embed it in the documents

tests/unit/test_node_lock.py fails when the inputs change and the lock was not rewritten.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import parse_wheel_filename

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from nodekit import render

GLIBC_MAX = (2, 35)
"""Ubuntu 22.04's glibc: the oldest of the images."""


def supported_tags() -> set[Tag]:
    platforms = [f"manylinux_2_{minor}_x86_64" for minor in range(GLIBC_MAX[1], 16, -1)]
    platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    tags: set[Tag] = set()
    for version in render.LOCK_PYTHONS:
        v = tuple(int(x) for x in version.split("."))
        tags.update(cpython_tags(v, platforms=platforms))
        tags.update(compatible_tags(v, interpreter=f"cp{v[0]}{v[1]}", platforms=platforms))
    return tags


def usable_hashes(package: dict, tags: set[Tag]) -> list[str]:
    """sha256 hashes of the package's files a node can install (wheels, else the sdist)."""
    hashes = []
    for wheel in package.get("wheels", []):
        name = wheel.get("name") or wheel["url"].rsplit("/", 1)[-1]
        if parse_wheel_filename(name)[3] & tags:
            hashes.append(wheel["hashes"]["sha256"])
    if not hashes and "sdist" in package:
        hashes.append(package["sdist"]["hashes"]["sha256"])
    return hashes


def compile_lock(uv: str, inputs: list[str], constraints: list[str]) -> dict:
    """``uv pip compile`` of ``inputs`` for every locked Python, as PEP 751 pylock data."""
    with tempfile.TemporaryDirectory() as tmp:
        requirements = Path(tmp) / "requirements.in"
        requirements.write_text("\n".join(inputs) + "\n")
        constraint_file = Path(tmp) / "constraints.txt"
        constraint_file.write_text("\n".join(constraints) + "\n")
        pylock = Path(tmp) / "pylock.toml"
        oldest = render.LOCK_PYTHONS[0]
        subprocess.run(
            [
                uv,
                "pip",
                "compile",
                str(requirements),
                *(["-c", str(constraint_file)] if constraints else []),
                "--universal",
                "--python-version",
                oldest,
                "--format",
                "pylock.toml",
                "-o",
                str(pylock),
                "--quiet",
                "--no-header",
            ],
            check=True,
        )
        return tomllib.loads(pylock.read_text())


def main() -> int:
    config = render.load_config()
    inputs = render.lock_inputs(config)
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        print("error: uv is not installed (it is in the dev extra)", file=sys.stderr)
        return 2
    node_lock = render.cloud_init_dir() / render.LOCK_FILE
    recorded = render.LOCK_DIGEST_RE.search(node_lock.read_text()) if node_lock.exists() else None
    if "--refresh" in sys.argv[1:] or not recorded or recorded[1] != render.lock_digest(inputs):
        lock = compile_lock(uv, inputs, [])
        header = [
            "# The nodes' environment, every package pinned with the hashes of the files a node "
            "can",
            f"# install (CPython {', '.join(render.LOCK_PYTHONS)}, manylinux x86_64). GENERATED by",
            "# scripts/lock_nodes.py from nodekit.render.lock_inputs -- do not edit by hand.",
            f"# inputs: {render.lock_digest(inputs)}",
        ]
        status = write_lock(lock, header, render.LOCK_FILE, skip=set())
        if status:
            return status
    else:
        print(f"{node_lock} is up to date with its inputs (--refresh resolves it again)")
    # The additions: resolved with the node lock's versions as constraints, holding only what the
    # node lock lacks (installed --no-deps next to it).
    constraints = re.findall(r"^([A-Za-z0-9._-]+==[^\\]*?)\s*\\$", node_lock.read_text(), re.M)
    pinned = {c.split("==", 1)[0].lower().replace("_", "-") for c in constraints}
    additions = [
        (
            render.AUTOSCALER_LOCK_FILE,
            render.autoscaler_pins(),
            [
                "# The head's additions for Ray's autoscaler on Azure (scaling_mode = ray): "
                "pyproject's",
                "# autoscaler extra and what it needs beyond node-lock.txt, pinned with hashes.",
            ],
        ),
        (
            render.CUDA_LOCK_FILE,
            render.cuda_lock_inputs(),
            [
                "# The GPU variant of the node lock: what a node with an NVIDIA GPU installs "
                "besides",
                "# node-lock.txt. PyPI's torch wheel for Linux is the CUDA build; with it come its",
                "# nvidia-* libraries (CUDA runtime, cuDNN, NCCL, ...), pinned with hashes.",
            ],
        ),
    ]
    for name, extra_inputs, about in additions:
        digest = render.lock_digest([*extra_inputs, render.lock_digest(inputs)])
        path = render.cloud_init_dir() / name
        recorded = render.LOCK_DIGEST_RE.search(path.read_text()) if path.exists() else None
        if "--refresh" not in sys.argv[1:] and recorded and recorded[1] == digest:
            print(f"{path} is up to date with its inputs (--refresh resolves it again)")
            continue
        extra = compile_lock(uv, extra_inputs, constraints)
        header = [
            *about,
            "# GENERATED by scripts/lock_nodes.py -- do not edit by hand.",
            f"# inputs: {digest}",
        ]
        keep = {"torch"} if name == render.CUDA_LOCK_FILE else set()
        status = write_lock(extra, header, name, skip=pinned, keep=keep)
        if status:
            return status
    return 0


def write_lock(
    lock: dict, header: list[str], name: str, skip: set[str], keep: set[str] = frozenset()
) -> int:
    """Write the lock's packages but ``skip``; torch only if ``keep`` names it."""
    tags = supported_tags()
    lines = list(header)
    for package in sorted(lock["packages"], key=lambda p: p["name"]):
        if package["name"] in skip or (package["name"] == "torch" and "torch" not in keep):
            continue
        hashes = usable_hashes(package, tags)
        if not hashes:
            print(f"error: no installable file for {package['name']}", file=sys.stderr)
            return 1
        # The lock is for Python 3.10 and later: a marker that says only that says nothing.
        trivial = f"python_full_version >= '{render.LOCK_PYTHONS[0]}'"
        marker = package.get("marker")
        marker = f" ; {marker}" if marker and marker != trivial else ""
        lines.append(f"{package['name']}=={package['version']}{marker} \\")
        lines += [
            f"    --hash=sha256:{h}" + (" \\" if i < len(hashes) - 1 else "")
            for i, h in enumerate(hashes)
        ]
    out = render.cloud_init_dir() / name
    out.write_text("\n".join(lines) + "\n")
    count = sum(1 for line in lines if "==" in line and not line.startswith("#"))
    print(f"wrote {out}: {count} packages, {out.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
