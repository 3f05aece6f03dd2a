"""Seconds from cloud-init start to Ray node registered, on the rehearsal cluster (root, Linux).

Boots a head from the committed rendered documents, then one worker that joins the running head
(as a scale-out does), three times:

  cold    the nodes start with empty package caches, as every fresh Azure VM does;
  warm    the nodes find their uv cache filled (as a custom image or a reimaged VM would carry
          it): a first "prime" boot fills a host folder mounted into the nodes, the second
          boot is measured;
  anchor  the method the anchors use, side by side: the same documents with the install step
          replaced by an unpinned `pip install "ray[default,rllib]" torch gymnasium` (pip, no
          uv, no pins), cold caches. Offline, "unpinned" resolves to the same versions, because
          the host-served index holds only those: the difference measured is the installer.

Each node's numbers come from its readiness marker (layout.READY_MARKER): ``registered_at`` minus
cloud-init's own start time, plus the per-phase timestamps the bootstrap records. The host-side
caches (image, apt repository, wheelhouse) are built first and reported separately.

    sudo .venv/bin/python benchmarks/bootstrap.py            # prints JSON
    sudo .venv/bin/python benchmarks/bootstrap.py --only cold
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

from nodekit import render
from nodekit.rehearsal.cluster import Rehearsal

NAME = "bench"
SUBNET = "10.217.0.0/24"
BOOTSTRAP = "/usr/local/sbin/ray-cluster-bootstrap"


def anchor_documents(out: Path) -> Path:
    """The rendered documents with the anchors' install method instead of ours."""
    out.mkdir(parents=True, exist_ok=True)
    for role in render.ROLES:
        doc = yaml.safe_load((render.rendered_dir() / f"{role}.yaml").read_text())
        script = next(f for f in doc["write_files"] if f["path"] == BOOTSTRAP)
        text = script["content"]
        start = text.index('retry "$VENV/bin/pip" install')
        end = text.index("phase start_ray")
        # The head's own tools (TensorBoard) as the render config lists them, for both methods.
        head_tools = render.load_config()["head_packages"] if role == "head" else []
        extra = "".join(f' "{r}"' for r in head_tools)
        script["content"] = (
            text[:start]
            + "phase install_ray\n"
            + '"$VENV/bin/pip" install --quiet --disable-pip-version-check --index-url '
            + '"$PIP_INDEX_URL" ${PIP_HOST:+--trusted-host "$PIP_HOST"} '
            + f'"ray[default,rllib]" torch gymnasium{extra}\n\n'
            + text[end:]
        )
        (out / f"{role}.yaml").write_text(
            "#cloud-config\n" + yaml.safe_dump(doc, sort_keys=False, width=1000)
        )
    return out


def _timings(marker: dict) -> dict:
    t0 = marker["cloud_init_start"]
    phases = {
        k: round(v - t0, 1) for k, v in sorted(marker["phases"].items(), key=lambda kv: kv[1])
    }
    # The package install: from the first install step to Ray's start (ours: torch + Ray with uv;
    # anchor: pip install of everything).
    first = min(v for k, v in marker["phases"].items() if k.startswith("install_"))
    return {
        "cloud_init_to_registered_s": round(marker["registered_at"] - t0, 1),
        "python_install_s": round(marker["phases"]["start_ray"] - first, 1),
        "phases_s": phases,
    }


def boot(label: str, documents: Path | None, warm: bool) -> dict:
    """Head alone first, then one worker joining the running head (as a scale-out does)."""
    r = Rehearsal(NAME, subnet=SUBNET)
    r.down()

    def say(m: str) -> None:
        print(f"[{label}] {m}", file=sys.stderr, flush=True)

    start = time.monotonic()
    try:
        state = r.up(workers=0, documents_dir=documents, warm_node_cache=warm, progress=say)
        head_wall = time.monotonic() - start
        t = time.monotonic()
        worker = r.add_workers(1, progress=say)[0]
        result = {
            "head_wall_s": round(head_wall, 1),
            "worker_wall_s": round(time.monotonic() - t, 1),
        }
        for node in (state.head, worker):
            m = r.marker(node)
            assert m is not None
            result[node.role] = _timings(m)
        return result
    finally:
        r.down()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["cold", "warm", "anchor"], action="append")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print(
            "benchmarks/bootstrap.py needs root (it boots rehearsal clusters): sudo "
            ".venv/bin/python benchmarks/bootstrap.py",
            file=sys.stderr,
        )
        return 2
    wanted = args.only or ["cold", "warm", "anchor"]
    report: dict = {"benchmark": "bootstrap", "workers": 1}

    t = time.monotonic()
    Rehearsal(NAME, subnet=SUBNET).down()
    cache = Rehearsal(NAME, subnet=SUBNET)
    docs = {r: (render.rendered_dir() / f"{r}.yaml").read_text() for r in render.ROLES}
    from nodekit.rehearsal.image import document_requirements

    needs = document_requirements(docs)
    cache.cache.ensure_rootfs(print)
    torch = next(r for r in needs.requirements if r.startswith("torch=="))
    torch_index = render.deploy_value_defaults()["TORCH_INDEX_URL"]
    cache.cache.ensure_torch(torch, torch_index, print)
    report["host_caches_s"] = round(time.monotonic() - t, 1)

    if "cold" in wanted:
        report["cold"] = boot("cold", None, warm=False)
    if "warm" in wanted:
        shutil.rmtree(cache.base / "node-cache", ignore_errors=True)
        report["warm_prime"] = boot("prime", None, warm=True)
        report["warm"] = boot("warm", None, warm=True)
    if "anchor" in wanted:
        with tempfile.TemporaryDirectory() as tmp:
            report["anchor"] = boot("anchor", anchor_documents(Path(tmp)), warm=False)

    def worker(k: str) -> float | None:
        return report.get(k, {}).get("worker", {}).get("cloud_init_to_registered_s")

    def install(k: str) -> float | None:
        return report.get(k, {}).get("worker", {}).get("python_install_s")

    for mine in ("cold", "warm"):
        if worker(mine) and worker("anchor"):
            report[f"worker_{mine}_vs_anchor"] = round(worker(mine) / worker("anchor"), 3)
            report[f"worker_{mine}_install_vs_anchor_install"] = round(
                install(mine) / install("anchor"), 3
            )
    report["targets"] = {"worker_warm_s": 45, "worker_warm_vs_anchor": 0.25}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
