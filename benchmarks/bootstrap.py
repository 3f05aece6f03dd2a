"""Seconds from cloud-init start to Ray node registered, on the rehearsal cluster (root, Linux).

Boots a head from the committed rendered documents, then one worker that joins the running head
(as a scale-out does), for each method, side by side in one run, in the order baked, cold,
anchor:

  baked   the nodes boot from the node image (``rehearse up``'s default): the install phase
          baked once (cloud-init/rendered/install.sh run in a container; its time is reported
          as ``bake_s`` and is not part of any boot), so a node skips its install at boot. The
          bake goes through the host's package mirrors (kept per cluster name) and fills them,
          so no method after it waits on the registries outside;
  cold    the nodes boot from the bare Debian image (``--no-image``) and install everything at
          boot with empty package caches, as every fresh Azure VM from the stacks' base image;
  anchor  the method the anchors use: the same documents with our install steps (uv, the
          hashed lock) replaced by pip at boot, cold caches: torch as ours takes it (the CPU
          build from the torch index alone, without dependencies), then one pip install of the
          nodes' top-level requirements without their pins from the package index. Unpinned,
          pip would take what the mirror offers today (newer torch and gymnasium than our
          pins): a constraints file holding the lock's versions makes it install the same
          packages at the same versions, so what differs is the method (pip resolving and
          installing vs uv installing a lock). Each pip install trusts its index's host where
          that index is plain http (the rehearsal's), as pip skips an untrusted one.

Without the baked method (``--only``), a first boot (``prime``, not reported as a method) fills
the mirrors instead.

Each method's JSON is printed on stdout as one line as soon as it is measured (progress on
stderr), then a last line with all of them and the ratios. A node's numbers come from its
readiness marker (layout.READY_MARKER): ``registered_at`` minus cloud-init's own start time, plus
the per-phase timestamps the bootstrap records; ``installed`` is what the node's environment
holds afterwards (read on the node), compared with the lock. The 1-minute load average around
and during each boot says how busy the machine was. The host-side caches (image, torch) are
built first and reported separately.

``--reuse``: each method's worker joins the head of the running cluster ``--name`` instead
(removed again once measured; the cluster is kept): the workers' figures only. ``--smoke``
checks that every step works, not how fast (the JSON says ``"smoke": true``): one cluster for
every method, its head from the node image (with ``--reuse``, the running one), and one
worker per method joining it, removed again; no prime boot (the cluster's mirrors serve).

    sudo .venv/bin/python benchmarks/bootstrap.py            # prints JSON lines
    sudo .venv/bin/python benchmarks/bootstrap.py --only baked --only anchor
    sudo .venv/bin/python benchmarks/bootstrap.py --name bb2 --subnet 10.222.0.0/24
    sudo .venv/bin/python benchmarks/bootstrap.py --smoke --reuse --name pytest --only anchor
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from driver import layout
from driver.errors import DriverError
from nodekit import render
from nodekit.rehearsal.cluster import Rehearsal
from nodekit.rehearsal.state import Node

NAME = os.environ.get("RAYDRIVER_BOOTSTRAP_REHEARSAL", "") or "bootbench"
SUBNET = os.environ.get("RAYDRIVER_BOOTSTRAP_SUBNET", "") or "10.221.0.0/24"
METHODS = ("baked", "cold", "anchor")
BOOTSTRAP = "/usr/local/sbin/ray-cluster-bootstrap"
ANCHOR_REQUIREMENTS = f"{layout.CONFIG_DIR}/anchor-requirements.txt"
ANCHOR_CONSTRAINTS = f"{layout.CONFIG_DIR}/anchor-constraints.txt"
KEY_PACKAGES = ("ray", "torch", "gymnasium", "pillow", "numpy")
# The install marker's writing (the install phase's last step: only a complete install carries it).
INSTALL_END = '    "$VENV/bin/python" - "$INSTALL_MARKER" '
# Our venv phase installs uv with pip: the anchor has no uv.
UV_INSTALL_RE = re.compile(r'retry "\$VENV/bin/pip" install [^\n]*\\\n[^\n]*"uv==[^"]+"\n')
ANCHOR_INSTALL = r"""    phase install_torch
    # The anchors' method (benchmarks/bootstrap.py): pip, no uv, no lock, no hashes. pip skips
    # a plain-http index (the rehearsal's mirror and torch index) unless its host is trusted:
    # each install trusts the host of the index it is given, taken from that index's URL.
    [ "$SCALING_MODE" = cpu ] || fail "the anchor documents are for scaling mode cpu"
    anchor_pip() {
        local index=$1 host=""
        shift
        case "$index" in http://*) host=$(echo "$index" | sed -E 's#^http://([^/:]+).*#\1#') ;; esac
        retry "$VENV/bin/pip" install --quiet --disable-pip-version-check --index-url "$index" \
            ${host:+--trusted-host "$host"} "$@"
    }
    # torch as ours takes it: the CPU build, from the torch index alone, without dependencies.
    # The install below keeps it (it satisfies the constraints; no --upgrade) and never takes
    # the package index's torch: on Linux the CUDA build, whose NVIDIA libraries filled a
    # node's /tmp when pip, given both indexes, could not use the torch index.
    anchor_pip "$TORCH_INDEX_URL" --no-deps "TORCH_REQUIREMENT"

    phase install_ray
    # One pip install of the nodes' top-level requirements without their pins; the constraints
    # hold pip to the lock's versions, so that both methods install the same packages.
    anchor_pip "$PIP_INDEX_URL" -c ANCHOR_CONSTRAINTS -r ANCHOR_REQUIREMENTS
    read -ra EXTRA <<<"$EXTRA_PIP_PACKAGES"
    if [ "${#EXTRA[@]}" -gt 0 ]; then
        anchor_pip "$PIP_INDEX_URL" "${EXTRA[@]}"
    fi

""".replace("ANCHOR_CONSTRAINTS", ANCHOR_CONSTRAINTS).replace(
    "ANCHOR_REQUIREMENTS", ANCHOR_REQUIREMENTS
)
"""The anchor's install phase, in place of ours from torch's install to the install marker
(``TORCH_REQUIREMENT``: torch's pin in our requirements)."""
VERSIONS_PY = (
    "import importlib.metadata as m, json, platform; print(json.dumps({'python': "
    "platform.python_version(), 'packages': {d.metadata['Name']: d.version "
    "for d in m.distributions()}}))"
)


class BenchmarkError(Exception):
    """A one-line reason the benchmark cannot run."""


def _requirement_lines(text: str) -> list[str]:
    """A requirements file's requirements, one string each, without hashes or comments."""
    out = []
    for line in text.replace("\\\n", " ").splitlines():
        line = re.sub(r"\s--hash=\S+", "", line.split(" #")[0]).strip()
        if line and not line.startswith(("#", "-")):
            out.append(line)
    return out


def anchor_inputs(documents: dict[str, str]) -> tuple[list[str], list[str]]:
    """From rendered documents: the anchor's requirements (ours, unpinned) and its constraints
    (the lock's versions, torch's pin)."""
    from packaging.requirements import Requirement

    files = render.document_files(documents["worker"])
    ours = [Requirement(r) for r in _requirement_lines(files[render.REQUIREMENTS_PATH])]
    unpinned = []
    for req in ours:
        extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
        unpinned.append(f"{req.name}{extras}")
    # torch is not in the lock (ours installs it by its pin, from the torch index, --no-deps).
    constraints = [*_requirement_lines(files[render.LOCK_PATH])]
    constraints += [str(r) for r in ours if r.name == "torch"]
    return unpinned, constraints


def anchor_documents(out: Path, source: Path | None = None) -> Path:
    """The rendered documents (from ``source``) with the anchors' install method instead of
    ours, written to ``out``."""
    source = source or render.rendered_dir()
    documents = {role: (source / f"{role}.yaml").read_text() for role in render.ROLES}
    requirements, constraints = anchor_inputs(documents)
    torch = next(c for c in constraints if c.startswith("torch=="))
    install = ANCHOR_INSTALL.replace("TORCH_REQUIREMENT", torch)
    out.mkdir(parents=True, exist_ok=True)
    for role, text in documents.items():
        script = render.document_files(text)[BOOTSTRAP]
        script, uv_lines = UV_INSTALL_RE.subn("", script)
        # From torch's install to the install marker (the install phase's end): the anchor
        # installs no autoscaler lock (scaling mode cpu only).
        start = script.find("    phase install_torch\n")
        end = script.find(INSTALL_END)
        if uv_lines != 1 or not 0 <= start < end:
            raise BenchmarkError(
                f"{source / f'{role}.yaml'}: the bootstrap no longer has the uv install and the "
                "install_torch ... install marker steps this benchmark replaces; update "
                "benchmarks/bootstrap.py"
            )
        script = script[:start] + install + script[end:]
        doc = yaml.safe_load(render.replace_files(text, {BOOTSTRAP: script}))
        doc["write_files"] += [
            {"path": p, "permissions": "0644", "content": "\n".join(lines) + "\n"}
            for p, lines in ((ANCHOR_REQUIREMENTS, requirements), (ANCHOR_CONSTRAINTS, constraints))
        ]
        (out / f"{role}.yaml").write_text(
            "#cloud-config\n" + yaml.safe_dump(doc, sort_keys=False, width=1000)
        )
    return out


def expected_versions(documents: dict[str, str], python: str) -> dict[str, str]:
    """What a node with this Python should hold: the lock's version of each package (its
    markers evaluated for that Python), and torch's pin."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    _, constraints = anchor_inputs(documents)
    env = {"python_version": ".".join(python.split(".")[:2]), "python_full_version": python}
    out = {}
    for text in constraints:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate(env):
            out[str(canonicalize_name(req.name))] = next(iter(req.specifier)).version
    return out


def compare_installed(installed: dict[str, str], expected: dict[str, str]) -> dict[str, Any]:
    """The installed packages against the expected versions (local labels such as +cpu aside)."""
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    have = {str(canonicalize_name(k)): v for k, v in installed.items()}
    differ = {
        n: {"expected": v, "installed": have[n]}
        for n, v in expected.items()
        if n in have and Version(have[n]).public != Version(v).public
    }
    missing = sorted(n for n in expected if n not in have)
    return {
        "packages": len(have),
        "key": {n: have.get(n) for n in KEY_PACKAGES},
        "same_versions_as_lock": not differ and not missing,
        "differ_from_lock": differ,
        "missing_from_lock": missing,
        "not_in_lock": {n: v for n, v in sorted(have.items()) if n not in expected},
    }


def _timings(marker: dict) -> dict:
    t0 = marker["cloud_init_start"]
    phases = {
        k: round(v - t0, 1) for k, v in sorted(marker["phases"].items(), key=lambda kv: kv[1])
    }
    # The package install: from the first install step to the first configure step (ours: torch
    # + Ray with uv; anchor: pip install of everything); none when the image held the install.
    installs = [v for k, v in marker["phases"].items() if k.startswith("install_")]
    return {
        "cloud_init_to_registered_s": round(marker["registered_at"] - t0, 1),
        "install": marker.get("install"),
        "python_install_s": (
            round(marker["phases"]["account"] - min(installs), 1) if installs else None
        ),
        "phases_s": phases,
    }


class LoadSampler:
    """The 1-minute load average before, during (highest, every 5 s) and after a boot."""

    def __init__(self) -> None:
        self.before = os.getloadavg()[0]
        self.high = self.before
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(5):
            self.high = max(self.high, os.getloadavg()[0])

    def result(self) -> dict[str, list[float] | float]:
        self._stop.set()
        self._thread.join()
        after = os.getloadavg()[0]
        return {
            "load_1min_before_after": [round(self.before, 2), round(after, 2)],
            "load_1min_max": round(max(self.high, after), 2),
        }


def node_figures(r: Rehearsal, node: Node, own: dict[str, str]) -> dict:
    """A booted node's times (its readiness marker) and what its environment holds, against
    the lock."""
    m = r.marker(node)
    if m is None:
        raise BenchmarkError(f"{node.name} has no readiness marker")
    out = _timings(m)
    env = json.loads(r.exec(node, [f"{layout.VENV_DIR}/bin/python", "-c", VERSIONS_PY]))
    out["installed"] = compare_installed(env["packages"], expected_versions(own, env["python"]))
    return out


def boot(
    name: str, subnet: str, label: str, documents: Path | None, image: bool, own: dict[str, str]
) -> dict:
    """Head alone first, then one worker joining the running head (as a scale-out does); with
    ``image`` both boot from the node image (baked first if the cache has none)."""
    r = Rehearsal(name, subnet=subnet)
    say = say_as(label)
    load = LoadSampler()
    start = time.monotonic()
    try:
        state = r.up(workers=0, documents_dir=documents, image=image, progress=say)
        head_wall = time.monotonic() - start
        t = time.monotonic()
        worker = r.add_workers(1, progress=say)[0]
        result: dict[str, Any] = {
            "image": state.image_digest or None,
            "bake_s": state.bake_s if image else None,
            "head_wall_s": round(head_wall - state.bake_s, 1),
            "worker_wall_s": round(time.monotonic() - t, 1),
        }
        for node in (state.head, worker):
            result[node.role] = node_figures(r, node, own)
        result.update(load.result())
        return result
    finally:
        r.down()


def boot_worker(
    r: Rehearsal, label: str, documents: Path | None, image: bool, own: dict[str, str]
) -> dict:
    """One worker joining the running head of ``r`` (as a scale-out does), booted from
    ``documents`` (None: the cluster's) and with ``image`` from the cluster's node image;
    removed again once measured, or once its boot failed."""
    say = say_as(label)
    state = r.load()
    if state is None:
        raise BenchmarkError(f"no rehearsal cluster {r.name!r}")
    before = {n.name for n in state.nodes}
    load = LoadSampler()
    start = time.monotonic()
    try:
        [worker] = r.add_workers(1, progress=say, image=image, documents_dir=documents)
        result: dict[str, Any] = {
            "image": state.image_digest if image else None,
            "worker_wall_s": round(time.monotonic() - start, 1),
            "worker": node_figures(r, worker, own),
        }
        result.update(load.result())
        return result
    finally:
        after = r.load()
        for node in after.nodes if after else []:
            if node.name not in before:
                say(f"removing {node.name}")
                r.remove(node.name)


def emit(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


def say_as(label: str) -> Callable[[str], None]:
    return lambda m: print(f"[{label}] {m}", file=sys.stderr, flush=True)


def check_cluster(probe: Rehearsal, reuse: bool, wanted: list[str]) -> None:
    """Refuse, in one line, a cluster the run cannot use: with ``reuse``, one that is not up
    or cannot boot the methods' workers; else one that exists (never someone else's: the
    benchmark removes only the clusters it booted) or a subnet in use."""
    name = probe.name
    if reuse:
        state = probe.load()
        if state is None:
            raise BenchmarkError(
                f"--reuse: no rehearsal cluster {name!r} is up: boot one (`python -m nodekit "
                f"rehearse up --name {name} --workers 0`), or leave out --reuse"
            )
        if "baked" in wanted and not state.image:
            raise BenchmarkError(
                f"--reuse: cluster {name!r} has no node image (booted with --no-image): the "
                "baked method needs one; --only cold --only anchor"
            )
        if "anchor" in wanted and state.scaling_mode != "cpu":
            raise BenchmarkError(
                f"--reuse: cluster {name!r} is in scaling mode {state.scaling_mode}: the "
                "anchor documents are for scaling mode cpu"
            )
        return
    if probe.load() is not None or probe.dir.exists():
        raise BenchmarkError(
            f"a rehearsal cluster {name!r} exists ({probe.dir}): choose another --name, "
            f"reuse it (--reuse), or remove it with `python -m nodekit rehearse down --name "
            f"{name} --subnet {probe.subnet}`"
        )
    probe._check_subnet_free()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--only", choices=METHODS, action="append", help="a method (repeatable)")
    ap.add_argument(
        "--name",
        default=NAME,
        help=f"rehearsal cluster name, booted and removed for every method (default {NAME}; "
        "env RAYDRIVER_BOOTSTRAP_REHEARSAL); with --reuse, the running cluster to join",
    )
    ap.add_argument(
        "--subnet",
        default=SUBNET,
        help=f"its subnet (default {SUBNET}; env RAYDRIVER_BOOTSTRAP_SUBNET)",
    )
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="boot each method's worker into the running cluster --name (kept; each worker is "
        "removed again) instead of a cluster per method: the workers' figures only",
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="check that it runs: one cluster (--name, head only, from the node image; with "
        "--reuse the running one) and one worker per method joining it; not a measurement",
    )
    args = ap.parse_args(argv)
    try:
        probe = Rehearsal(args.name, subnet=args.subnet)
    except DriverError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print(
            "error: benchmarks/bootstrap.py needs root (it boots rehearsal clusters): sudo "
            ".venv/bin/python benchmarks/bootstrap.py",
            file=sys.stderr,
        )
        return 2
    wanted = [m for m in METHODS if m in (args.only or METHODS)]
    try:
        check_cluster(probe, args.reuse, wanted)
    except (DriverError, BenchmarkError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    own = {r: (render.rendered_dir() / f"{r}.yaml").read_text() for r in render.ROLES}
    clusters = probe.base / "clusters"
    reused = probe.load() if args.reuse else None
    shared = args.smoke or args.reuse
    report: dict[str, Any] = {
        "benchmark": "bootstrap",
        "smoke": args.smoke,
        "workers": 1,
        "cluster": {
            "name": args.name,
            "subnet": reused.subnet if reused else args.subnet,
            "per_method": not shared,
            "reused": args.reuse,
        },
        "machine": {
            "cpus": os.cpu_count(),
            "load_1min_at_start": round(os.getloadavg()[0], 2),
            # Other rehearsal clusters share the cores: their boots and jobs load the figures.
            "other_rehearsal_clusters": sorted(
                p.name
                for p in (clusters.iterdir() if clusters.is_dir() else [])
                if p.name != args.name
            ),
        },
    }
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        try:
            anchor = anchor_documents(Path(tmp) / "anchor") if "anchor" in wanted else None
        except BenchmarkError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        t = time.monotonic()
        from nodekit.rehearsal.image import document_requirements

        needs = document_requirements(own)
        probe.cache.ensure_rootfs(print)
        torch = next(r for r in needs.requirements if r.startswith("torch=="))
        torch_index = render.deploy_value_defaults()["TORCH_INDEX_URL"]
        probe.cache.ensure_torch(torch, torch_index, print)
        report["host_caches_s"] = round(time.monotonic() - t, 1)
        head = {"benchmark": "bootstrap", "smoke": args.smoke}
        emit({**head, "step": "host_caches", "s": report["host_caches_s"]})

        # The baked method first: its bake fills the mirrors (else a prime boot does; one
        # cluster for every method has its mirrors filled by its own head's bake or boot).
        runs: list[tuple[str, Path | None, bool]] = (
            [] if "baked" in wanted or shared else [("prime", None, False)]
        )
        runs += [
            (m, anchor if m == "anchor" else None, m == "baked") for m in METHODS if m in wanted
        ]
        cluster = Rehearsal(args.name, subnet=args.subnet)
        try:
            if shared and not args.reuse:
                t = time.monotonic()
                try:
                    state = cluster.up(workers=0, image=True, progress=say_as("cluster"))
                    report["cluster"]["bake_s"] = state.bake_s
                    report["cluster"]["head_wall_s"] = round(time.monotonic() - t - state.bake_s, 1)
                except (DriverError, OSError) as e:
                    failed, runs = True, []
                    report["cluster"]["error"] = str(e)
            for label, documents, image in runs:
                try:
                    if shared:
                        result = boot_worker(cluster, label, documents, image, own)
                    else:
                        result = boot(args.name, args.subnet, label, documents, image, own)
                except (DriverError, BenchmarkError, OSError, ValueError) as e:
                    failed = True
                    result = {"error": str(e)}
                report[label] = result
                emit({**head, "method": label, **result})
        finally:
            if shared and not args.reuse:
                cluster.down()

    def worker(k: str) -> float | None:
        return report.get(k, {}).get("worker", {}).get("cloud_init_to_registered_s")

    def install(k: str) -> float | None:
        return report.get(k, {}).get("worker", {}).get("python_install_s")

    for mine in ("baked", "cold"):
        ours, theirs = worker(mine), worker("anchor")
        if ours and theirs:
            report[f"worker_{mine}_vs_anchor"] = round(ours / theirs, 3)
            report[f"worker_{mine}_install_vs_anchor_install"] = round(
                (install(mine) or 0) / (install("anchor") or 1), 3
            )
    baked, cold = worker("baked"), worker("cold")
    if baked and cold:
        report["worker_baked_vs_cold"] = round(baked / cold, 3)
    report["targets"] = {"worker_baked_s": 15, "worker_baked_vs_anchor": 0.25}
    emit(report)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
