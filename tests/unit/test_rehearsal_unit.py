"""The rehearsal cluster's checks and building blocks that need no containers."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from driver.errors import DriverError
from nodekit import render
from nodekit.rehearsal import bake, system
from nodekit.rehearsal.cluster import Node, Rehearsal
from nodekit.rehearsal.image import ETC_HOSTS, document_requirements, write_simple_index
from nodekit.rehearsal.services import packages
from rehearsal_support import unit_cluster, unit_state
from support import REPO


def test_needs_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(system.os, "geteuid", lambda: 1000)
    with pytest.raises(DriverError, match=r"needs root .* run it with sudo"):
        system.require_root_linux()


def test_needs_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(system.sys, "platform", "darwin")
    with pytest.raises(DriverError, match="needs Linux"):
        system.require_root_linux()


def test_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(system.os, "geteuid", lambda: 0)  # as root, so the next check runs
    real = system.shutil.which
    monkeypatch.setattr(system.shutil, "which", lambda t: None if t == "debootstrap" else real(t))
    with pytest.raises(DriverError, match=r"apt-get install debootstrap\)"):
        system.require_root_linux()


@pytest.mark.parametrize("name", ["", "UPPER", "has-dash", "waytoolongname", "1st"])
def test_cluster_names_fit_interface_names(name: str) -> None:
    with pytest.raises(DriverError, match="rehearsal name"):
        Rehearsal(name)


@pytest.mark.parametrize("subnet", ["10.0.0.0/30", "fd00::/64", "not-a-net"])
def test_subnets_are_checked(subnet: str) -> None:
    with pytest.raises(DriverError, match="--subnet"):
        Rehearsal("x", subnet=subnet)


def test_a_subnet_overlapping_a_host_route_is_refused() -> None:
    routes = subprocess.run(["ip", "-4", "-o", "route", "show"], capture_output=True, text=True)
    nets = [ln.split()[0] for ln in routes.stdout.splitlines() if ln.split()[0] != "default"]
    assert nets, "this machine has no IPv4 route to overlap"
    taken = ipaddress.ip_network(nets[0], strict=False)
    with pytest.raises(DriverError, match="overlaps the host route"):
        Rehearsal(
            "x", subnet=str(taken.supernet(new_prefix=min(taken.prefixlen, 24)))
        )._check_subnet_free()
    Rehearsal("x", subnet="10.254.254.0/24")._check_subnet_free()  # a free one passes


def test_document_requirements_come_from_the_rendered_documents() -> None:
    docs = {r: (REPO / "cloud-init" / "rendered" / f"{r}.yaml").read_text() for r in render.ROLES}
    needs = document_requirements(docs)
    config = render.load_config()
    assert needs.os_packages == sorted(config["os_packages"])
    for pin in render.cluster_pins().requirements:
        assert pin in needs.requirements
    assert f"uv=={config['uv_version']}" in needs.requirements
    assert set(config["head_packages"]) <= set(needs.requirements)
    assert needs.lock == (REPO / "cloud-init" / "node-lock.txt").read_text()


def test_simple_index_is_one_pip_can_install_from(tmp_path: Path) -> None:
    """The wheelhouse's PEP 503 index, read by pip itself."""
    files = tmp_path / "files"
    files.mkdir()
    wheel = files / "Tiny_Pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("tiny_pkg/__init__.py", "VALUE = 42\n")
        z.writestr(
            "Tiny_Pkg-1.0.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: Tiny-Pkg\nVersion: 1.0\n",
        )
        z.writestr(
            "Tiny_Pkg-1.0.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        z.writestr("Tiny_Pkg-1.0.dist-info/RECORD", "")
    assert write_simple_index(tmp_path) == 1
    assert (tmp_path / "simple" / "tiny-pkg" / "index.html").exists()
    target = tmp_path / "installed"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-cache-dir",
            "--isolated",
            "--index-url",
            (tmp_path / "simple").as_uri(),
            "--target",
            str(target),
            "tiny-pkg==1.0",
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    assert (target / "tiny_pkg" / "__init__.py").read_text() == "VALUE = 42\n"


# -- the node image (issue 20) --------------------------------------------------------------------
def _rendered() -> dict[str, str]:
    return {r: (REPO / "cloud-init" / "rendered" / f"{r}.yaml").read_text() for r in render.ROLES}


def test_the_image_is_keyed_by_the_digest_the_nodes_bootstrap_expects() -> None:
    """The layer's key is render.install_digest of the INSTALL_INPUTS_DIGEST that both
    documents' bootstrap carries and the cluster's install values."""
    docs = _rendered()
    bootstrap = render.document_files(docs["worker"])[render.BOOTSTRAP_PATH]
    carried = re.search(r"^INSTALL_INPUTS_DIGEST=(\w+)$", bootstrap, re.M)
    assert carried
    assert bake.inputs_digest(docs) == carried.group(1)
    values = render.deploy_value_samples()
    assert bake.install_digest(docs, values) == render.install_digest(carried.group(1), values)
    assert bake.install_values(values) == {n: values[n] for n in render.INSTALL_VALUE_NAMES}
    other = {**values, "EXTRA_APT_PACKAGES": values["EXTRA_APT_PACKAGES"] + " xvfb"}
    assert bake.install_digest(docs, other) != bake.install_digest(docs, values)


def _cluster_values(tmp_path: Path, name: str, subnet: str, http_port: int = 8470) -> dict:
    r = unit_cluster(tmp_path, name, subnet, http_port)
    state = unit_state(name, subnet, http_port, head_root=str(tmp_path))
    return {"values": r.deploy_values(state), "state": state}


def test_clusters_side_by_side_share_one_image_and_each_resolves_its_torch_index(
    tmp_path: Path,
) -> None:
    """TORCH_INDEX_URL, part of the install digest, names the torch index instead of the
    bridge's address: clusters on other subnets with the same --http-port (the test lanes')
    expect one node image, and each node's /etc/hosts resolves the name on its own bridge."""
    docs = _rendered()
    a = _cluster_values(tmp_path, "a", "10.213.0.0/24")
    b = _cluster_values(tmp_path, "b", "10.214.0.0/24")
    other_port = _cluster_values(tmp_path, "c", "10.215.0.0/24", http_port=8490)
    assert a["values"]["PIP_INDEX_URL"] != b["values"]["PIP_INDEX_URL"]  # not in the digest
    assert bake.install_digest(docs, a["values"]) == bake.install_digest(docs, b["values"])
    assert bake.install_digest(docs, other_port["values"]) != bake.install_digest(docs, a["values"])
    host = urllib.parse.urlsplit(a["values"]["TORCH_INDEX_URL"]).hostname
    hosts = packages.etc_hosts(b["state"], ETC_HOSTS)
    assert hosts.startswith(ETC_HOSTS)
    assert hosts.splitlines()[-1].split() == ["10.214.0.1", host]


def _waits_for_the_bake(
    images: bake.Images, digest: str, wait: Callable[[Callable[[str], None]], None]
) -> list[str]:
    """Run ``wait(say)`` in a thread while ``digest`` is being baked (its lock held here): it
    must say why it waits while it waits, and not get through until the bake ends. All it
    said."""
    said: list[str] = []
    done = threading.Event()

    def waiter() -> None:
        wait(said.append)
        done.set()

    with images.locked(digest):
        thread = threading.Thread(target=waiter)
        thread.start()
        deadline = time.monotonic() + 10
        while not said and time.monotonic() < deadline:
            time.sleep(0.01)
        assert said and not done.is_set(), said  # said while it waits, and waiting
    thread.join(10)
    assert done.is_set()
    return said


def test_a_bake_under_way_is_waited_for_and_said(tmp_path: Path) -> None:
    """A second `up` of the same digest waits for the first one's bake, and says so."""
    images = bake.Images(tmp_path / "images")
    digest = "ab" * 32

    def second(say: Callable[[str], None]) -> None:
        with images.locked(digest, say):
            pass

    said = _waits_for_the_bake(images, digest, second)
    assert said == [f"node image {digest[:12]}: being baked by another `up`; waiting"]


def test_mirrors_start_only_after_a_bake_under_way(tmp_path: Path) -> None:
    """`up` waits for any bake in progress (`rehearse prepare --bake`'s) before it starts its
    mirrors, which then start with what that bake fetched; no lock held: no wait."""
    images = bake.Images(tmp_path / "images")
    images.wait_for_bakes()  # no image folder yet
    digest = "cd" * 32
    said = _waits_for_the_bake(images, digest, images.wait_for_bakes)
    assert said == [f"node image {digest[:12]}: being baked; waiting for it first"]
    images.wait_for_bakes(said.append)  # released: passes at once, says nothing more
    assert len(said) == 1


def test_a_cluster_pypi_mirror_starts_with_the_files_other_clusters_fetched(
    tmp_path: Path,
) -> None:
    """Complete files of the other clusters' PyPI mirror caches are hard-linked into this
    cluster's before its proxpi starts; a file still downloading (proxpi's partial name) and a
    file the cluster has already are left alone."""
    bake_cache = packages.mirror_cache(tmp_path, "bake") / "pypi"
    wheel = bake_cache / "files-pythonhosted-org" / "ab" / "ray-2.60.0-cp311.whl"
    wheel.parent.mkdir(parents=True)
    wheel.write_bytes(b"wheel")
    partial = wheel.with_name("torch.whl" + packages.PARTIAL_SUFFIX)
    partial.write_bytes(b"half")
    own = packages.mirror_cache(tmp_path, "pytest") / "pypi"
    mine = own / "files-pythonhosted-org" / "cd" / "gymnasium.whl"
    mine.parent.mkdir(parents=True)
    mine.write_bytes(b"own")
    (bake_cache / mine.relative_to(own)).parent.mkdir(parents=True)
    (bake_cache / mine.relative_to(own)).write_bytes(b"other")

    assert packages.seed_pypi_mirror(tmp_path, "pytest") == 1
    linked = own / wheel.relative_to(bake_cache)
    assert linked.read_bytes() == b"wheel"
    assert os.stat(linked).st_ino == os.stat(wheel).st_ino  # a link, not a copy
    assert not (own / partial.relative_to(bake_cache)).exists()
    assert mine.read_bytes() == b"own"
    assert packages.seed_pypi_mirror(tmp_path, "pytest") == 0  # nothing new


def _with_bootstrap(document: str, change: Callable[[str], str]) -> str:
    """The document with its bootstrap (in the document's archive) changed."""
    bootstrap = render.document_files(document)[render.BOOTSTRAP_PATH]
    return render.replace_files(document, {render.BOOTSTRAP_PATH: change(bootstrap)})


def test_documents_that_disagree_on_the_install_are_refused_in_one_line() -> None:
    docs = _rendered()
    moved = _with_bootstrap(
        docs["head"], lambda b: re.sub(r"^INSTALL_INPUTS_DIGEST=\w+$", "INSTALL_INPUTS_DIGEST=" +
                                       "0" * 64, b, flags=re.M)
    )  # fmt: skip
    with pytest.raises(DriverError, match="different install digests"):
        bake.inputs_digest({**docs, "head": moved})
    gone = _with_bootstrap(docs["worker"], lambda b: b.replace("INSTALL_INPUTS_DIGEST=", "X="))
    with pytest.raises(DriverError, match="worker document's bootstrap carries no"):
        bake.inputs_digest({**docs, "worker": gone})


def test_a_node_disk_stacks_the_image_over_the_root_filesystem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(system, "run", lambda cmd, **kw: calls.append(list(cmd)))
    a, b = tmp_path / "image", tmp_path / "rootfs"
    system.mount_overlay([a, b], tmp_path / "u", tmp_path / "w", tmp_path / "m", "test")
    system.mount_overlay(b, tmp_path / "u", tmp_path / "w", tmp_path / "m", "test")
    assert calls[0][calls[0].index("-o") + 1].startswith(f"lowerdir={a}:{b},upperdir=")
    assert calls[1][calls[1].index("-o") + 1].startswith(f"lowerdir={b},upperdir=")


def test_old_image_layers_go_the_newest_and_the_ones_in_use_stay(tmp_path: Path) -> None:
    images = bake.Images(tmp_path / "images", clusters=tmp_path / "clusters")
    digests = [f"{i:x}" * 64 for i in range(1, 5 + bake.KEEP)]
    for age, digest in enumerate(digests):
        (images.layer(digest)).mkdir(parents=True)
        (images.folder(digest) / ".complete").write_text("{}")
        os.utime(images.folder(digest) / ".complete", (1000 + age, 1000 + age))
    # Another cluster's state names the second oldest (its nodes may be down, not unmounted).
    other = tmp_path / "clusters" / "other"
    other.mkdir(parents=True)
    (other / "state.json").write_text(json.dumps({"image": str(images.layer(digests[1]))}))
    removed = images.prune(keep=digests[0])  # the oldest, but the one this cluster uses
    assert sorted(removed) == sorted(images.folder(d) for d in digests[2:4])
    left = {p.name for p in (tmp_path / "images").iterdir() if p.is_dir()}
    assert left == {images.folder(d).name for d in (*digests[:2], *digests[4:])}
    assert len(digests[4:]) == bake.KEEP


def test_a_layer_another_prune_removed_meanwhile_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two clusters' `up` prune side by side: one finds a layer listed that the other removed
    before it looked (the race that once failed `rehearse up` with a missing .complete)."""
    images = bake.Images(tmp_path / "images")
    digests = [f"{i:x}" * 64 for i in range(1, 3 + bake.KEEP)]
    for age, digest in enumerate(digests):
        images.layer(digest).mkdir(parents=True)
        (images.folder(digest) / ".complete").write_text("{}")
        os.utime(images.folder(digest) / ".complete", (1000 + age, 1000 + age))
    gone = images.folder("f" * 64) / ".complete"  # listed, then removed by the other prune
    listing = Path.glob

    def glob_with_a_vanished_layer(self: Path, pattern: str):  # type: ignore[no-untyped-def]
        yield from listing(self, pattern)
        if pattern == "*/.complete":
            yield gone

    monkeypatch.setattr(Path, "glob", glob_with_a_vanished_layer)
    removed = images.prune(keep=digests[-1])
    assert sorted(removed) == sorted(images.folder(d) for d in digests[:2])
    assert not gone.parent.exists()


def test_workers_with_values_that_are_no_deploy_time_value_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DriverError, match="no deploy-time value NOT_A_VALUE"):
        Rehearsal("x", base=tmp_path).add_workers(1, values={"NOT_A_VALUE": "1"})


def test_rehearse_up_and_add_worker_take_no_image() -> None:
    from nodekit.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["rehearse", "up"]).image is True
    assert parser.parse_args(["rehearse", "up", "--no-image"]).image is False
    assert parser.parse_args(["rehearse", "add-worker", "--no-image"]).image is False


def test_prepare_as_a_user_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from nodekit.cli import main

    monkeypatch.setattr(system.os, "geteuid", lambda: 1000)
    assert main(["rehearse", "prepare"]) != 0
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "needs root" in line


def test_a_documents_folder_without_its_customizer_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in _rendered().items():
        (docs / f"{name}.yaml").write_text(text)
    with pytest.raises(DriverError, match=r"install\.sh is missing .* --no-image"):
        Rehearsal._customizer(docs)
    (docs / render.CUSTOMIZER).write_text("#!/bin/bash\n")
    assert Rehearsal._customizer(docs) == docs / render.CUSTOMIZER


# -- a stand-in on the bridge starting ---------------------------------------------------------
LISTEN_LATE = """
import socket, sys, time
time.sleep(float(sys.argv[2]))
s = socket.create_server(("127.0.0.1", int(sys.argv[1])))
time.sleep(600)
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_stand_in_that_listens_late_is_waited_for() -> None:
    """The wait is for the port, not a fixed time: a stand-in slow to start (Azurite on a loaded
    machine) is waited for, up to a bound on a hang that is far beyond its start."""
    from nodekit.rehearsal.services import PORT_WAIT_S, wait_for_port

    assert PORT_WAIT_S >= 120
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-c", LISTEN_LATE, str(port), "1.5"])
    try:
        wait_for_port("127.0.0.1", port, "the late stand-in", pid=proc.pid)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_a_stand_in_whose_process_ends_is_an_error_at_once() -> None:
    import time

    from nodekit.rehearsal.services import wait_for_port

    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    started = time.monotonic()
    with pytest.raises(DriverError) as e:
        wait_for_port("127.0.0.1", port, "the broken stand-in", pid=proc.pid, limit=600)
    assert str(e.value).startswith(
        f"the broken stand-in did not start on 127.0.0.1:{port}: its process ended ("
    )
    assert time.monotonic() - started < 300  # its end, not the 600 s bound
    proc.wait()
    with pytest.raises(DriverError, match=r"did not start on 127\.0\.0\.1:\d+ within 1 s: "):
        wait_for_port("127.0.0.1", port, "nothing", limit=1)


@pytest.mark.parametrize("elsewhere", [False, True])
def test_the_printed_down_line_addresses_the_cluster_up_booted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, elsewhere: bool
) -> None:
    """Pasted as printed, `down` finds the same cluster folder and subnet as the `up`."""
    import shlex

    from nodekit.cli import PROG, build_parser, down_command
    from nodekit.rehearsal.state import BASE_ENV

    if elsewhere:
        monkeypatch.setenv(BASE_ENV, str(tmp_path / "a base"))
    else:
        monkeypatch.delenv(BASE_ENV, raising=False)
    up = build_parser().parse_args(
        ["rehearse", "up", "--name", "side", "--subnet", "10.99.7.0/24", "--workers", "0"]
    )
    booted = Rehearsal(up.name, subnet=up.subnet)
    words = shlex.split(down_command(booted.name, str(booted.subnet), booted.base))
    monkeypatch.delenv(BASE_ENV, raising=False)  # only what the line carries counts
    while "=" in words[0]:
        key, value = words.pop(0).split("=", 1)
        monkeypatch.setenv(key, value)
    assert words[: len(PROG.split())] == PROG.split()
    down = build_parser().parse_args(words[len(PROG.split()) :])
    assert down.func.__name__ == "cmd_rehearse_down"
    addressed = Rehearsal(down.name, subnet=down.subnet)
    assert (addressed.name, addressed.subnet) == ("side", ipaddress.ip_network("10.99.7.0/24"))
    assert addressed.dir == booted.dir


def _ssh_config(words: list[str]) -> dict[str, list[str]]:
    """What OpenSSH itself makes of an ssh command line (`ssh -G`: resolved, not connected)."""
    assert words[0] == "ssh"
    r = subprocess.run(
        ["ssh", "-F", "/dev/null", "-G", *words[1:]],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        check=True,
    )
    config: dict[str, list[str]] = {}
    for line in r.stdout.splitlines():
        key, _, value = line.partition(" ")
        config.setdefault(key, []).append(value)
    return config


def test_the_worker_ssh_line_goes_through_the_head_checking_both_against_the_cluster_file(
    tmp_path: Path,
) -> None:
    """-J would hand neither -i nor the cluster's known_hosts to the head's hop: the line's
    ProxyCommand carries both, and OpenSSH reads them so for both hops."""
    import shlex

    from nodekit.cli import ssh_command

    key, known = tmp_path / "a dir" / "id_ed25519", tmp_path / "a dir" / "known_hosts"
    key.parent.mkdir()
    key.write_text("not read by ssh -G\n")
    line = ssh_command(str(key), known, "azureuser", "10.213.0.11", via="10.213.0.10")
    worker = _ssh_config(shlex.split(line))
    assert (worker["hostname"], worker["user"]) == (["10.213.0.11"], ["azureuser"])
    assert worker["userknownhostsfile"] == [str(known)]
    assert str(key) in worker["identityfile"]
    hop = shlex.split(worker["proxycommand"][0].replace("%h:%p", "10.213.0.11:22"))
    head = _ssh_config(hop)
    assert (head["hostname"], head["user"]) == (["10.213.0.10"], ["azureuser"])
    assert head["userknownhostsfile"] == [str(known)]
    assert str(key) in head["identityfile"]
    assert hop[hop.index("-W") + 1] == "10.213.0.11:22"
    direct = _ssh_config(shlex.split(ssh_command(str(key), known, "azureuser", "10.213.0.10")))
    assert "proxycommand" not in direct and direct["userknownhostsfile"] == [str(known)]


def test_workers_keys_are_recorded_once_they_are_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`up`, `add-worker` and a scale set's new instance all wait through `wait_ready`: each
    worker's keys then land in the cluster folder's known_hosts (the head's are `up`'s own)."""
    from nodekit.rehearsal import cluster as cluster_module
    from nodekit.rehearsal.trust import KNOWN_HOSTS

    waited: list[str] = []
    monkeypatch.setattr(  # no containers here: every node counts as ready
        cluster_module,
        "_wait_ready",
        lambda _c, nodes, _t, _p: waited.extend(n.name for n in nodes),
    )
    r = Rehearsal("keys", base=tmp_path)
    nodes = []
    for name, ip in (
        ("head", "10.213.0.10"),
        ("worker-1", "10.213.0.11"),
        ("worker-2", "10.213.0.12"),
    ):
        ssh = tmp_path / name / "root" / "etc" / "ssh"
        ssh.mkdir(parents=True)
        (ssh / "ssh_host_ed25519_key.pub").write_text(f"ssh-ed25519 AAAA{name} root@x\n")
        role = "head" if name == "head" else "worker"
        nodes.append(Node(name, role, ip, "", "", str(tmp_path / name)))
    lines: list[str] = []
    (tmp_path / "worker-2" / "root" / "etc" / "ssh" / "ssh_host_ed25519_key.pub").unlink()
    r.wait_ready(None, 1, lines.append, nodes=nodes)  # type: ignore[arg-type]
    assert waited == ["head", "worker-1", "worker-2"]
    assert (r.dir / KNOWN_HOSTS).read_text() == "10.213.0.11 ssh-ed25519 AAAAworker-1\n"
    assert len(lines) == 1 and lines[0].startswith("worker-2: host keys not recorded")
