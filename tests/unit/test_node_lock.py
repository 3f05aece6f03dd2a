"""The nodes' environment is locked: cloud-init/node-lock.txt pins every package with hashes,
was made from the current inputs, and is what the rendered documents install."""

from __future__ import annotations

import re

from packaging.requirements import Requirement

from nodekit import render
from support import REPO

LOCK = REPO / "cloud-init" / render.LOCK_FILE
ENTRY = re.compile(r"^(?P<req>[^\s#][^\\]*?)\s*\\$")


def entries() -> dict[str, tuple[str, list[str]]]:
    """name → (version, hashes), parsed from the lock file's text."""
    found: dict[str, tuple[str, list[str]]] = {}
    current = None
    for line in LOCK.read_text().splitlines():
        m = ENTRY.match(line)
        if m:
            req = Requirement(m.group("req"))
            (spec,) = list(req.specifier)
            assert spec.operator == "==", line
            current = req.name.lower()
            found[current] = (spec.version, [])
        elif line.strip().startswith("--hash=sha256:"):
            assert current is not None
            digest = line.strip().removeprefix("--hash=sha256:").rstrip(" \\")
            assert re.fullmatch(r"[0-9a-f]{64}", digest), line
            found[current][1].append(digest)
    return found


def test_the_lock_was_made_from_the_current_inputs() -> None:
    recorded = render.LOCK_DIGEST_RE.search(LOCK.read_text())
    assert recorded, "the lock has no '# inputs:' line"
    inputs = render.lock_inputs(render.load_config())
    assert recorded.group(1) == render.lock_digest(inputs), (
        "cloud-init/node-lock.txt is stale: run .venv/bin/python scripts/lock_nodes.py, then "
        "python -m nodekit render"
    )


def test_every_package_is_pinned_with_hashes_and_the_pins_are_the_projects() -> None:
    locked = entries()
    assert len(locked) > 50
    assert all(hashes for _, hashes in locked.values())
    for pin in render.cluster_pins().requirements:
        req = Requirement(pin)
        if req.name == "torch":  # from PyTorch's index by exact version, not in the lock
            assert "torch" not in locked
            continue
        assert locked[req.name][0] == next(iter(req.specifier)).version, pin
    for requirement in render.load_config()["head_packages"]:
        assert Requirement(requirement).name.lower() in locked


def test_the_documents_install_exactly_the_lock() -> None:
    lock = LOCK.read_text()
    for role in render.ROLES:
        text = (REPO / "cloud-init" / "rendered" / f"{role}.yaml").read_text()
        files = render.document_files(text)
        assert files[render.LOCK_PATH] == lock
        bootstrap = files["/usr/local/sbin/ray-cluster-bootstrap"]
        assert f"--require-hashes -r {render.LOCK_PATH}" in bootstrap


def test_the_lock_tool_is_the_nodes_installer() -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    assert f'"uv=={render.load_config()["uv_version"]}"' in pyproject


AUTOSCALER_LOCK = REPO / "cloud-init" / render.AUTOSCALER_LOCK_FILE


def test_the_autoscaler_lock_adds_to_the_node_lock_for_the_head_only() -> None:
    """scaling_mode ray: the head installs pyproject's autoscaler extra from its own lock, made
    from the current pins and node lock, holding only what the node lock lacks."""
    text = AUTOSCALER_LOCK.read_text()
    recorded = render.LOCK_DIGEST_RE.search(text)
    inputs = render.lock_inputs(render.load_config())
    expected = render.lock_digest([*render.autoscaler_pins(), render.lock_digest(inputs)])
    assert recorded and recorded.group(1) == expected, (
        "cloud-init/autoscaler-lock.txt is stale: run .venv/bin/python scripts/lock_nodes.py"
    )
    names = {Requirement(m).name.lower() for m in re.findall(r"^([^\s#][^\\;]*)", text, re.M)}
    for pin in render.autoscaler_pins():
        assert Requirement(pin).name.lower() in names
    assert not names & set(entries()), "already in the node lock"
    for role in render.ROLES:
        files = render.document_files(
            (REPO / "cloud-init" / "rendered" / f"{role}.yaml").read_text()
        )
        # The install phase is one for every node (one image serves all): the lock is on both;
        # only the head carries the node provider.
        assert (render.AUTOSCALER_PROVIDER_PATH in files) == (role == "head")
        assert files[render.AUTOSCALER_LOCK_PATH] == text
        bootstrap = files["/usr/local/sbin/ray-cluster-bootstrap"]
        assert f"--require-hashes --no-deps -r {render.AUTOSCALER_LOCK_PATH}" in bootstrap
