"""Render the cloud-init documents every node boots from: ``cloud-init/rendered/*.yaml``.

Inputs, each from its one source of truth:
  - the templates in ``cloud-init/templates/`` (a shared base plus head and worker parts);
  - render-time settings in ``cloud-init/config.yaml`` (optionally overridden by ``--config``);
  - the Ray/torch/gymnasium pins from this package's metadata (pyproject.toml: Ray's in the
    core dependencies, the rest in the ``local`` extra);
  - paths and ports from :mod:`driver.layout`;
  - the deploy-time placeholder names from ``cloud-init/placeholders.yaml``.

The rendered documents keep the placeholders (``@@NAME@@``); Terraform and Bicep fill them at
deploy time with ``replace()``, and :func:`fill` does the same for the rehearsal cluster and tests.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.metadata
import io
import json
import lzma
import os
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from driver import layout, package
from driver.errors import DriverError
from driver.yamlfile import load_mapping

ROLES = ("head", "worker")
CLUSTER_PACKAGES = ("ray", "torch", "gymnasium", "pillow")
"""The pinned packages every node installs, at exactly the driver's versions: pyproject's core
dependencies and its local extra (what local Ray trains with) hold them, Ray's extras spread
over the two (``ray[default]==...`` and ``ray[rllib]``)."""
CUSTOM_DATA_LIMIT = 87_380
"""Azure's limit on custom data, in base64 characters."""
PLACEHOLDER = "@@DEPLOY_VALUES@@"
"""The one placeholder in the rendered documents: base64 of the deploy-time values as JSON."""
PLACEHOLDER_RE = re.compile(r"@@([A-Z][A-Z0-9_]*)@@")
DEPLOY_NAME_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")
REQUIREMENTS_PATH = f"{layout.CONFIG_DIR}/requirements.txt"
LOCK_PATH = f"{layout.CONFIG_DIR}/requirements.lock"
"""On the nodes: every package of the environment, pinned, with the hashes of its files."""
LOCK_FILE = "node-lock.txt"
"""In cloud-init/: the lock, written by scripts/lock_nodes.py from :func:`lock_inputs`."""
AUTOSCALER_LOCK_FILE = "autoscaler-lock.txt"
"""In cloud-init/: the head's extra packages for Ray's autoscaler on Azure (pyproject.toml's
``autoscaler`` extra and what they need beyond the node lock), written by scripts/lock_nodes.py."""
AUTOSCALER_LOCK_PATH = f"{layout.CONFIG_DIR}/autoscaler-requirements.lock"
CUDA_LOCK_FILE = "node-lock-cuda.txt"
"""In cloud-init/: the GPU variant's additions to the node lock, written by scripts/lock_nodes.py:
PyPI's torch wheel for Linux (the CUDA build) at the pinned version and the ``nvidia-*``
libraries and what else it needs beyond node-lock.txt, pinned with hashes. A node whose PCI bus
shows an NVIDIA GPU installs it in place of the CPU torch from TORCH_INDEX_URL."""
CUDA_LOCK_PATH = f"{layout.CONFIG_DIR}/requirements-cuda.lock"
GPU_KINDS = ("none", "nvidia")
"""What the bootstrap's ``detect_gpu`` finds on the PCI bus: part of the install digest."""
AUTOSCALER_EXTRA = "autoscaler"
LOCK_PYTHONS = ("3.10", "3.11", "3.12")
"""Python versions the lock holds files for: the images' (Ubuntu 22.04, Debian 12, Ubuntu 24.04)."""
LOCK_DIGEST_RE = re.compile(r"^# inputs: ([0-9a-f]{64})$", re.M)
NODE_CHECK_PATH = "/usr/local/lib/ray-cluster/node_check.py"
SCHEDULED_EVENTS_PATH = "/usr/local/lib/ray-cluster/scheduled_events.py"
HEALTH_PATH = "/usr/local/lib/ray-cluster/health.py"
AUTOSCALER_PROVIDER_PATH = "/usr/local/lib/ray-cluster/azure_vmss_provider.py"
"""On the head: Ray's node provider for the workers' scale set (scaling_mode = "ray")."""
AUTOSTOP_PATH = "/usr/local/lib/ray-cluster/autostop.py"
"""On the head: the autostop agent (ray-autostop.service), next to the node provider whose Azure
client it uses."""
NODE_MODULES = ("scheduled_events", "health", "azure_vmss_provider", "autostop")
"""Modules of :mod:`nodekit.node` embedded in the documents, read from this package."""
BUNDLE_PATH = f"{layout.STATE_DIR}/node-files.tar.xz"
"""On every node: its files but the deploy-time values, as one xz-compressed tar (:func:`bundle`)
that the document's write_files writes and its first runcmd entry unpacks (:data:`UNPACK`):
compressed together, they take about a fifth less custom data than each gzip-compressed on its
own."""
UNPACK = """\
import os, sys, tarfile
archive, root = sys.argv[1:]
with tarfile.open(archive) as bundle:
    for member in bundle:
        if not member.isfile():
            sys.exit(f"{archive}: {member.name} is not a plain file")
        path = os.path.join(root, member.name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, member.mode)
        os.fchmod(fd, member.mode)
        with os.fdopen(fd, "wb") as out:
            out.write(bundle.extractfile(member).read())
        print(f"unpacked {path} ({member.mode:04o})")
"""
"""The documents' first runcmd entry, ``python3 -c UNPACK ARCHIVE ROOT``: every file of the
archive written under ROOT at its path with its mode (cloud-init's write_files cannot decompress
xz; python3 is on every image cloud-init runs on, its own interpreter). Files only, owned by
whoever runs it (root at boot); a file that exists is overwritten in place."""
BOOTSTRAP_PATH = "/usr/local/sbin/ray-cluster-bootstrap"
"""The node bootstrap (cloud-init/templates/files/ray-cluster-bootstrap.sh.j2), one script for
every role: ``ray-cluster-bootstrap head|worker`` at first boot, ``... install`` to bake an
image."""
CUSTOMIZER = "install.sh"
"""In cloud-init/rendered/: the image customizer, which writes the files the bootstrap's install
phase reads (as the documents' archives hold them) and runs ``ray-cluster-bootstrap install``."""
INSTALL_VALUE_NAMES = (
    "PIP_INDEX_URL",
    "TORCH_INDEX_URL",
    "APT_SOURCE",
    "EXTRA_PIP_PACKAGES",
    "EXTRA_APT_PACKAGES",
)
"""The deploy-time values the install phase reads (``ray-cluster-bootstrap install`` needs only
these)."""
INSTALL_DIGEST_VALUES = ("EXTRA_PIP_PACKAGES", "EXTRA_APT_PACKAGES", "TORCH_INDEX_URL")
"""The install values that change what gets installed: part of the install digest, with the GPU
kind the node's hardware shows (:data:`GPU_KINDS`). (The package index and apt source only say
where from: the lock's hashes hold what comes.)"""
READY_TIMEOUT_S = 1800
TOKEN_TIMEOUT_S = 1200
"""How long a node keeps trying to read the cluster token (role assignments take minutes)."""


REPO_ENV = "NODEKIT_REPO"


def repo_root() -> Path:
    """The repository checkout the toolkit works on (templates, rendered documents, stacks).

    ``$NODEKIT_REPO`` if set; else the checkout this package was installed from in editable
    mode; else the current folder or one of its parents. Called when a command runs, never at
    import, so an installed wheel's ``--help`` works anywhere.
    """
    explicit = os.environ.get(REPO_ENV)
    candidates = [Path(explicit)] if explicit else []
    if not explicit:
        here = Path.cwd().resolve()
        candidates += [Path(__file__).resolve().parents[2], here, *here.parents]
    for root in candidates:
        if (root / "cloud-init" / "templates").is_dir():
            return root
    where = f"${REPO_ENV} ({explicit})" if explicit else "the current folder or its parents"
    raise DriverError(
        f"cannot find the repository's cloud-init/templates in {where}: run from a checkout "
        f"of the repository, or set {REPO_ENV}"
    )


def cloud_init_dir() -> Path:
    return repo_root() / "cloud-init"


# -- inputs --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pins:
    requirements: tuple[str, ...]
    """e.g. ``ray[default,rllib]==2.60.0``, as written in pyproject.toml."""
    versions: dict[str, str]
    """e.g. ``{"ray": "2.60.0", ...}``."""


def _exact_version(req: Any) -> str:
    """The version a requirement pins with ``==``; an error for any other specifier."""
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator != "==":
        raise DriverError(f"pyproject.toml must pin {req.name} exactly (==), got {str(req)!r}")
    return str(specs[0].version)


def cluster_pins() -> Pins:
    """The exact Ray/torch/gymnasium pins of this package (pyproject.toml via its metadata):
    its core dependencies and its local extra, one requirement per package (a package named in
    both, as Ray is, with the extras of both and the version pinned in either)."""
    from packaging.requirements import Requirement

    own = package.requirements()
    chosen = [r for r in own if r.marker is None]
    chosen += package.extra_requirements(package.LOCAL_EXTRA, own)
    found: dict[str, Any] = {}
    for req in chosen:
        if req.name not in CLUSTER_PACKAGES:
            continue
        if req.name in found:
            joined = Requirement(str(found[req.name]))
            joined.extras |= req.extras
            joined.specifier &= req.specifier
            req = joined
        found[req.name] = req
    missing = [p for p in CLUSTER_PACKAGES if p not in found]
    if missing:
        raise DriverError(f"pyproject.toml does not pin {', '.join(missing)}")
    return Pins(
        requirements=tuple(str(found[p]) for p in CLUSTER_PACKAGES),
        versions={p: _exact_version(found[p]) for p in CLUSTER_PACKAGES},
    )


def _deploy_value_specs() -> dict[str, dict[str, Any]]:
    data = yaml.safe_load((cloud_init_dir() / "placeholders.yaml").read_text())
    if not isinstance(data, dict) or not all(DEPLOY_NAME_RE.match(n) for n in data):
        raise DriverError("cloud-init/placeholders.yaml must map NAMES (A-Z, 0-9, _) to specs")
    return data


def deploy_value_names() -> list[str]:
    """Every deploy-time value, in the order of cloud-init/placeholders.yaml."""
    return list(_deploy_value_specs())


def deploy_value_defaults() -> dict[str, str]:
    """Deploy-time values a stack uses when the user gives none (only those that have one)."""
    return {n: str(s["default"]) for n, s in _deploy_value_specs().items() if "default" in s}


def deploy_value_samples() -> dict[str, str]:
    return {n: str(s.get("sample", "")) for n, s in _deploy_value_specs().items()}


_CONFIG_TYPES: dict[str, type | tuple[type, ...]] = {
    "os_packages": list,
    "env_packages": list,
    "head_packages": list,
    "uv_version": str,
    "head_num_cpus": int,
    "xvfb_screen": str,
    "nvidia_driver": str,
    "storage_dir_cache_s": int,
}
DEB_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
"""A Debian package name (os_packages, EXTRA_APT_PACKAGES: the bootstrap checks the same)."""
_PIP_REQ_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-\[\],<>=!~ ;:@/+]*$")


def load_config(path: Path | None = None) -> dict[str, Any]:
    """The defaults in cloud-init/config.yaml, with the keys of ``path`` (if given) over them."""
    config = yaml.safe_load((cloud_init_dir() / "config.yaml").read_text())
    if path is not None:
        config.update(load_mapping(path, "render config", _CONFIG_TYPES))
    for key, kind in _CONFIG_TYPES.items():
        if not isinstance(config.get(key), kind) or isinstance(config.get(key), bool):
            raise DriverError(f"render setting {key} must be a {kind.__name__}")  # type: ignore[union-attr]
    for p in config["os_packages"]:
        if not isinstance(p, str) or not DEB_NAME.match(p):
            raise DriverError(f"os_packages: {p!r} is not a Debian package name")
    for key in ("env_packages", "head_packages"):
        for r in config[key]:
            if not isinstance(r, str) or not _PIP_REQ_SAFE.match(r) or "'" in r:
                raise DriverError(f"{key}: {r!r} is not a pip requirement this renderer accepts")
    if config["head_num_cpus"] < 0:
        raise DriverError("head_num_cpus must be >= 0")
    if not 1 <= config["storage_dir_cache_s"] <= 300:
        raise DriverError("storage_dir_cache_s must be 1-300 (seconds)")
    if not re.fullmatch(r"\d+x\d+x\d+", config["xvfb_screen"]):
        raise DriverError("xvfb_screen must look like 1280x1024x24")
    if not re.fullmatch(r"\d{3}(-server)?", config["nvidia_driver"]):
        raise DriverError("nvidia_driver must be an Ubuntu driver branch such as 580-server")
    return config


# -- the nodes' environment -----------------------------------------------------------------
WORKLOADS_EXTRA = "workloads"
"""pyproject.toml's extra with the packages the examples' jobs import: declared once, installed
by the dev extra (tests) and on every node."""


def workload_pins(extra: str = WORKLOADS_EXTRA) -> list[str]:
    """An extra's requirements (by default ``workloads``), as written in pyproject.toml (each
    pinned ==)."""
    pins = []
    for req in package.extra_requirements(extra):
        _exact_version(req)
        pins.append(str(req))
    return pins


def node_requirements(config: dict[str, Any]) -> list[str]:
    """What every node installs: the cluster pins, the examples' packages (the ``workloads``
    extra), the environment packages and the head's tools (one set for every role, so head and
    workers run identical versions)."""
    return [
        *cluster_pins().requirements,
        *workload_pins(),
        *config["env_packages"],
        *config["head_packages"],
    ]


def lock_inputs(config: dict[str, Any]) -> list[str]:
    """The requirements the lock resolves: the nodes' own, with torch replaced by its runtime
    dependencies (torch itself comes from PyTorch's index, --no-deps, by exact version)."""
    from packaging.requirements import Requirement

    pins = cluster_pins()
    try:
        installed = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        raise DriverError("torch is not installed: its dependencies go into the lock") from None
    if installed.split("+")[0] != pins.versions["torch"]:
        raise DriverError(f"installed torch {installed} is not the pinned {pins.versions['torch']}")
    torch_deps = [
        str(req)
        for text in importlib.metadata.requires("torch") or []
        if (req := Requirement(text)).marker is None or "extra" not in str(req.marker)
    ]
    own = [r for r in node_requirements(config) if Requirement(r).name != "torch"]
    return sorted(set(own) | set(torch_deps), key=str.lower)


def lock_digest(inputs: list[str]) -> str:
    """What the lock was made from: its inputs and the Pythons it covers."""
    text = "\n".join([*inputs, *LOCK_PYTHONS])
    return hashlib.sha256(text.encode()).hexdigest()


def b64(text: str) -> str:
    """cloud-init's ``encoding: b64`` of a text (UTF-8)."""
    return base64.b64encode(text.encode()).decode()


def bundle(files: list[dict[str, Any]]) -> bytes:
    """Files (``path``: absolute, ``permissions``: octal text, ``content``: text) as one
    xz-compressed tar: each at its path (without the leading ``/``) with its mode, owned by
    root, without timestamps, in the given order; byte-stable for the golden files."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        seen = set()
        for f in files:
            path = f["path"]
            if not path.startswith("/") or path in seen or ".." in path.split("/"):
                raise DriverError(f"{path}: a node's files have distinct absolute paths")
            seen.add(path)
            data = f["content"].encode()
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode = len(data), int(f["permissions"], 8)
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    data = raw.getvalue()
    # A dictionary as large as the archive: all it can use, and all a node must allocate.
    lzma2 = {"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME}
    return lzma.compress(data, filters=[{**lzma2, "dict_size": max(len(data), 4096)}])


def unbundle(data: bytes) -> list[dict[str, Any]]:
    """The inverse of :func:`bundle` (the files as :data:`UNPACK` writes them)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:xz") as tar:
        out = []
        for member in tar:
            reader = tar.extractfile(member)
            if not member.isfile() or reader is None:
                raise DriverError(f"the node's archive holds {member.name}, not a plain file")
            content = reader.read().decode()
            permissions = f"{member.mode:04o}"
            out.append({"path": "/" + member.name, "permissions": permissions, "content": content})
    return out


def without_docstrings(text: str) -> str:
    """Python source without its docstrings (the lines they span, found by ``ast``; every
    other line byte for byte): the head's custom data has no room for the autostop agent's
    documentation, which stays in python/nodekit/node/ and docs/. A body that is only a
    docstring keeps it."""
    import ast

    drop: set[int] = set()
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if not isinstance(body, list) or len(body) < 2:
            continue
        for stmt in body:
            if (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
                and stmt.end_lineno is not None
            ):
                drop.update(range(stmt.lineno, stmt.end_lineno + 1))
    lines = text.splitlines(keepends=True)
    return "".join(line for n, line in enumerate(lines, 1) if n not in drop)


_HEREDOC_RE = re.compile(
    r"<<(-?)[ \t]*(?:'([^'\n]+)'|\"([^\"\n]+)\"|\\?([A-Za-z_]\w*))(?=[\s;&|<>)])"
)
"""A here-document's operator and word: quoted whole, or a plain name (``<<E"O"F`` is none)."""
_WORD_START = " \t;&|()<>"
"""What a ``#`` that starts a comment follows (or the line's start)."""


def _shell_free_lines(text: str) -> list[bool] | None:
    """For each line of a shell script, whether it starts as plain code: outside every
    quoted string, command substitution and here-document, and not continued from the line
    before by a backslash. None when the script holds what this scanner does not follow
    (backquotes, a ``<<`` it cannot read, single quotes in a ``${...}`` within double quotes,
    an unterminated string or here-document)."""
    lines = text.splitlines(keepends=True)
    free: list[bool] = []
    # Contexts: code (the script's level), sub ($( ), nested), paren (a parenthesis in sub),
    # dq ("..."), sq ('...'), ansi ($'...'), brace (${...}).
    stack = ["code"]
    continued = False
    n = 0
    while n < len(lines):
        line = lines[n]
        free.append(stack == ["code"] and not continued)
        continued = False
        pending: list[tuple[bool, str]] = []
        i = 0
        while i < len(line):
            top, c, two = stack[-1], line[i], line[i : i + 2]
            if top == "sq":
                if c == "'":
                    stack.pop()
            elif c == "\\" and top != "sq":
                continued = line[i + 1 :] == "\n"
                i += 1
            elif top == "ansi":
                if c == "'":
                    stack.pop()
            elif c == "`":
                return None
            elif two in ("$(", "${"):
                stack.append("sub" if two == "$(" else "brace")
                i += 1
            elif top == "dq":
                if c == '"':
                    stack.pop()
            elif c == '"':
                stack.append("dq")
            elif c == "'":
                if top == "brace" and "dq" in stack:
                    return None
                stack.append("sq")
            elif top == "brace":
                if c == "}":
                    stack.pop()
            elif two == "$'":
                stack.append("ansi")
                i += 1
            elif c == "#" and (i == 0 or line[i - 1] in _WORD_START):
                break  # a comment: the rest of the line
            elif two == "<<" and line[i : i + 3] != "<<<":
                heredoc = _HEREDOC_RE.match(line, i)
                if heredoc is None:
                    return None
                strip, *words = heredoc.groups()
                pending.append((strip == "-", next(w for w in words if w is not None)))
                i = heredoc.end() - 1
            elif line[i : i + 3] == "<<<":
                i += 2
            elif top in ("sub", "paren") and c == "(":
                stack.append("paren")
            elif top in ("sub", "paren") and c == ")":
                stack.pop()
            i += 1
        n += 1
        for strip, word in pending:  # their bodies follow, in order, each to its word
            while True:
                if n == len(lines):
                    return None
                body = lines[n].rstrip("\n")
                free.append(False)
                n += 1
                if (body.lstrip("\t") if strip else body) == word:
                    break
    return free if stack == ["code"] and not continued else None


def compact_shell(text: str) -> str:
    """A shell script as the nodes get it: without its comment lines (a line whose first
    non-blank character is ``#``; not the ``#!`` first line, not shellcheck's directives,
    which the tests' shellcheck reads, not the ``# ----`` section lines, which mark the
    phases) and blank lines, every other line byte for byte. Only lines that start as plain
    code go: here-documents, multi-line strings and lines continued by a backslash stay as
    they are, and a script :func:`_shell_free_lines` cannot follow stays whole. The custom
    data has no room for the comments, which stay in the templates."""
    free = _shell_free_lines(text)
    if free is None:
        return text
    kept = []
    for n, (line, is_free) in enumerate(zip(text.splitlines(keepends=True), free, strict=True), 1):
        stripped = line.strip()
        if is_free and (
            not stripped
            or (
                stripped.startswith("#")
                and not (n == 1 and line.startswith("#!"))
                and not stripped.startswith(("# shellcheck", "# ----"))
            )
        ):
            continue
        kept.append(line)
    return "".join(kept)


def compact_unit(text: str) -> str:
    """A systemd unit as the nodes get it: without its comment lines (first non-blank
    character ``#`` or ``;``) and blank lines, every other line byte for byte. A unit with a
    line continued by a backslash stays whole (comments and blank lines there mean
    something else). The comments stay in the templates."""
    lines = text.splitlines(keepends=True)
    if any(line.rstrip("\r\n").endswith("\\") for line in lines):
        return text
    return "".join(line for line in lines if line.strip() and line.lstrip()[0] not in "#;")


def compact_python(text: str) -> str:
    """Python source as the nodes get it: without its docstrings (``without_docstrings``) and
    its comments (found by ``tokenize``; a line that held only a comment goes, a trailing one is
    cut; a ``#!`` first line stays), every other line byte for byte. The custom data has no
    room for the documentation, which stays in the sources and docs/."""
    import io
    import tokenize

    text = without_docstrings(text)
    comments = {
        token.start[0]: token.start[1]
        for token in tokenize.generate_tokens(io.StringIO(text).readline)
        if token.type == tokenize.COMMENT
    }
    kept = []
    for n, line in enumerate(text.splitlines(keepends=True), 1):
        column = comments.get(n)
        if column is None or (n == 1 and line.startswith("#!")):
            kept.append(line)
        elif line[:column].strip():
            kept.append(line[:column].rstrip() + "\n")
    return "".join(kept)


def _document_entries(text: str) -> dict[str, dict[str, Any]]:
    """A document's files as the node has them once its first runcmd entry ran: its
    write_files entries, decoded as cloud-init does (``b64``, ``gz+b64``), but the archive
    (:data:`BUNDLE_PATH`), which stands for the files it holds."""
    files: dict[str, dict[str, Any]] = {}
    for entry in yaml.safe_load(text).get("write_files", []):
        content = entry.get("content", "")
        encoding = entry.get("encoding", "")
        permissions = str(entry.get("permissions", "0644"))
        if entry["path"] == BUNDLE_PATH:
            for f in unbundle(base64.b64decode(content)):
                files[f["path"]] = f
            continue
        if content != PLACEHOLDER and encoding in ("b64", "base64"):
            content = base64.b64decode(content).decode()
        elif encoding in ("gz+b64", "gzip+base64"):
            content = gzip.decompress(base64.b64decode(content)).decode()
        files[entry["path"]] = {
            "path": entry["path"],
            "permissions": permissions,
            "content": content,
        }
    return files


def document_files(text: str) -> dict[str, str]:
    """A rendered document's files as ``{path: content}``: its write_files entries decoded as
    cloud-init does, and the files of its archive (:data:`BUNDLE_PATH`) in the archive's
    place; the placeholder's file, not yet filled, stays as it is."""
    return {path: f["content"] for path, f in _document_entries(text).items()}


def document_permissions(text: str) -> dict[str, str]:
    """The mode of each of :func:`document_files`, as octal text (``"0644"``)."""
    return {path: f["permissions"] for path, f in _document_entries(text).items()}


def replace_files(text: str, changes: dict[str, str]) -> str:
    """The document with files of its archive given new contents (each keeping its mode):
    the archive packed again, every other byte of the document as it was. A path the archive
    lacks is an error."""
    entry = next(
        (e for e in yaml.safe_load(text).get("write_files", []) if e["path"] == BUNDLE_PATH), None
    )
    if entry is None:
        raise DriverError(f"the document has no {BUNDLE_PATH}")
    files = unbundle(base64.b64decode(entry["content"]))
    missing = sorted(set(changes) - {f["path"] for f in files})
    if missing:
        raise DriverError(f"the document's archive holds no {', '.join(missing)}")
    files = [{**f, "content": changes.get(f["path"], f["content"])} for f in files]
    return text.replace(entry["content"], base64.b64encode(bundle(files)).decode())


def install_digest(inputs_digest: str, values: dict[str, str], gpu: str = "none") -> str:
    """The digest of an install with these deploy-time values on a node whose PCI bus shows
    ``gpu`` (:data:`GPU_KINDS`: a GPU node installs the NVIDIA driver and the CUDA lock, so an
    image baked without a GPU is not its install): what the bootstrap's ``install_digest``
    computes (and the install marker holds) from the render-time ``inputs_digest``
    (:func:`install_inputs_digest`)."""
    if gpu not in GPU_KINDS:
        raise DriverError(f"gpu must be one of {', '.join(GPU_KINDS)}, got {gpu!r}")
    lines = [inputs_digest, *(values[n] for n in INSTALL_DIGEST_VALUES), gpu]
    return hashlib.sha256("".join(f"{line}\n" for line in lines).encode()).hexdigest()


def install_inputs_digest(install_code: str, files: list[dict[str, Any]], pins: Pins) -> str:
    """Render time: what decides the install phase's result, but the install values: its code,
    the files it reads (the bootstrap itself aside: its install code is here) and the versions it
    installs by name."""
    data = {
        "code": install_code,
        "files": {f["path"]: f["content"] for f in files if f["path"] != BOOTSTRAP_PATH},
        "torch": pins.versions["torch"],
        "pythons": list(LOCK_PYTHONS),
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def cuda_lock_inputs() -> list[str]:
    """What the CUDA lock resolves: torch at the pinned version, from PyPI, whose Linux wheel
    is the CUDA build and requires its ``nvidia-*`` libraries."""
    return [f"torch=={cluster_pins().versions['torch']}"]


def autoscaler_pins() -> list[str]:
    """What the head adds for Ray's autoscaler on Azure (``scaling_mode = "ray"``): the
    ``autoscaler`` extra of pyproject.toml (azure-mgmt-compute, azure-identity)."""
    return workload_pins(AUTOSCALER_EXTRA)


def read_lock(name: str = LOCK_FILE) -> str:
    path = cloud_init_dir() / name
    try:
        return path.read_text()
    except OSError:
        raise DriverError(
            f"no {path}: run `.venv/bin/python scripts/lock_nodes.py` to write it"
        ) from None


# -- rendering -----------------------------------------------------------------------------
def render(config: dict[str, Any] | None = None) -> dict[str, str]:
    """Return ``{"head.yaml": text, "worker.yaml": text, "install.sh": text}``.

    The install phase's files (the bootstrap, the OS package list, the requirements and the
    locks) are built once and given to every template, so the documents' archives and the
    image customizer carry the same bytes. A role's files (``ROLE-files.yaml.j2``, extending
    ``files.yaml.j2``) go into its document (``document.yaml.j2``) as one archive
    (:func:`bundle`), the deploy-time values' file beside it.
    """
    import jinja2

    config = load_config() if config is None else config
    pins = cluster_pins()
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(cloud_init_dir() / "templates")),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        # Shell's ${#VAR} would open a Jinja comment: comments are {## ... ##} here.
        comment_start_string="{##",
        comment_end_string="##}",
    )
    env.filters["b64"] = b64
    env.filters["without_docstrings"] = without_docstrings
    env.filters["compact_python"] = compact_python
    env.filters["compact_shell"] = compact_shell
    env.filters["compact_unit"] = compact_unit
    common = dict(
        layout=layout,
        versions=pins.versions,
        requirements_path=REQUIREMENTS_PATH,
        lock_path=LOCK_PATH,
        lock_pythons=LOCK_PYTHONS,
        node_check_path=NODE_CHECK_PATH,
        scheduled_events_path=SCHEDULED_EVENTS_PATH,
        health_path=HEALTH_PATH,
        autoscaler_provider_path=AUTOSCALER_PROVIDER_PATH,
        autostop_path=AUTOSTOP_PATH,
        autoscaler_lock_path=AUTOSCALER_LOCK_PATH,
        cuda_lock_path=CUDA_LOCK_PATH,
        ready_timeout_s=READY_TIMEOUT_S,
        token_timeout_s=TOKEN_TIMEOUT_S,
        placeholder=PLACEHOLDER,
        deploy_value_names=deploy_value_names(),
        install_value_names=INSTALL_VALUE_NAMES,
        **config,
    )
    # The install phase: no role in sight (StrictUndefined refuses one), one text for all.
    install_code = compact_shell(env.get_template("files/bootstrap-install.sh.j2").render(**common))
    files = [
        _install_file(layout.OS_PACKAGES, "0644", "".join(f"{p}\n" for p in config["os_packages"])),
        _install_file(
            REQUIREMENTS_PATH, "0644", "".join(f"{r}\n" for r in node_requirements(config))
        ),
        _install_file(LOCK_PATH, "0644", read_lock()),
        _install_file(AUTOSCALER_LOCK_PATH, "0644", read_lock(AUTOSCALER_LOCK_FILE)),
        _install_file(CUDA_LOCK_PATH, "0644", read_lock(CUDA_LOCK_FILE)),
    ]
    inputs_digest = install_inputs_digest(install_code, files, pins)
    bootstrap = compact_shell(
        env.get_template("files/ray-cluster-bootstrap.sh.j2").render(
            install_code=install_code.rstrip("\n"), install_inputs_digest=inputs_digest, **common
        )
    )
    files.append(_install_file(BOOTSTRAP_PATH, "0755", bootstrap))
    out: dict[str, str] = {}
    for role in ROLES:
        listed = env.get_template(f"{role}-files.yaml.j2").render(
            role=role,
            install_files=files,
            node_modules={
                m: (Path(__file__).parent / "node" / f"{m}.py").read_text() for m in NODE_MODULES
            },
            **common,
        )
        node_files = [
            {**f, "content": base64.b64decode(f["content"]).decode()}
            for f in yaml.safe_load(listed)["files"]
        ]
        text = env.get_template("document.yaml.j2").render(
            role=role,
            bundle_path=BUNDLE_PATH,
            bundle=base64.b64encode(bundle(node_files)).decode(),
            unpack=UNPACK,
            bootstrap_path=BOOTSTRAP_PATH,
            **common,
        )
        out[f"{role}.yaml"] = _tidy(text)
    # Not tidied: its here-documents are the files, byte for byte.
    out[CUSTOMIZER] = (
        env.get_template("install.sh.j2")
        .render(
            install_files=files,
            install_defaults={n: deploy_value_defaults()[n] for n in INSTALL_VALUE_NAMES},
            bootstrap_path=BOOTSTRAP_PATH,
            heredoc_end=HEREDOC_END,
            **common,
        )
        .rstrip("\n")
        + "\n"
    )
    return out


HEREDOC_END = "RAY_CLUSTER_FILE_END"
"""Ends each file's here-document in the image customizer (no file may hold it as a line)."""


def _install_file(path: str, permissions: str, content: str) -> dict[str, Any]:
    """One file of the install phase, as the documents' archives and the customizer hold it."""
    if not content.endswith("\n") or content.endswith("\n\n"):
        raise DriverError(f"{path}: the install phase's files end with exactly one newline")
    if any(line == HEREDOC_END for line in content.splitlines()):
        raise DriverError(f"{path} holds the line {HEREDOC_END}")
    return {"path": path, "permissions": permissions, "content": content}


def _tidy(text: str) -> str:
    """One trailing newline, no trailing spaces: the rendered files are committed."""
    return "\n".join(line.rstrip() for line in text.splitlines()).rstrip("\n") + "\n"


def write(documents: dict[str, str], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in documents.items():
        path = out_dir / name
        path.write_text(text)
        if name.endswith(".sh"):
            path.chmod(0o755)
        written.append(path)
    return written


def rendered_dir() -> Path:
    return cloud_init_dir() / "rendered"


# -- deploy-time values ----------------------------------------------------------------------
def encode_deploy_values(values: dict[str, str]) -> str:
    """What the stacks put in place of the placeholder: base64 of the values as a JSON object.

    Exactly the names of cloud-init/placeholders.yaml, each a one-line string.
    """
    names = deploy_value_names()
    missing = [n for n in names if n not in values]
    unknown = sorted(set(values) - set(names))
    if missing or unknown:
        raise DriverError(
            "deploy-time values must be exactly those of cloud-init/placeholders.yaml: "
            + "; ".join(
                part
                for part in (
                    f"missing {', '.join(missing)}" if missing else "",
                    f"unknown {', '.join(unknown)}" if unknown else "",
                )
                if part
            )
        )
    for name, value in values.items():
        if not isinstance(value, str) or "\n" in value or "\r" in value:
            raise DriverError(f"deploy-time value {name} must be one line of text")
    return base64.b64encode(json.dumps(values).encode()).decode()


def decode_deploy_values(encoded: str) -> dict[str, str]:
    """The inverse of :func:`encode_deploy_values` (for tests and the rehearsal's checks)."""
    data = json.loads(base64.b64decode(encoded, validate=True))
    if not isinstance(data, dict):
        raise DriverError("deploy-time values must be a JSON object")
    return data


def fill(text: str, values: dict[str, str]) -> str:
    """The document as a stack sends it: the placeholder replaced, as ``replace()`` does."""
    others = sorted(set(PLACEHOLDER_RE.findall(text)) - {PLACEHOLDER.strip("@")})
    if text.count(PLACEHOLDER) != 1 or others:
        raise DriverError(
            f"a rendered document holds {PLACEHOLDER} exactly once and no other placeholder "
            f"(found it {text.count(PLACEHOLDER)} times, others: {others or 'none'})"
        )
    return text.replace(PLACEHOLDER, encode_deploy_values(values))


def custom_data_size(text: str) -> int:
    """Length of the document as Azure custom data (base64 characters)."""
    return len(base64.b64encode(text.encode()))
