"""Checkpoint write and restore times, the cluster storage against the node's own disk: one JSON
object.

    python -m driver submit benchmarks/cluster_storage.py --head ...   # on a cluster's head
    python benchmarks/cluster_storage.py --shared DIR --local DIR      # any two folders
    python benchmarks/cluster_storage.py --smoke --shared DIR --local DIR   # it runs, untimed

On a cluster (docs/results-and-storage.md: "Cluster storage") ``--shared`` defaults to a folder in
``/mnt/cluster_storage`` (the results container, mounted by rclone without a write cache: a file
is in Blob storage when its ``close()`` returns) and ``--local`` to one on the node's disk.

A checkpoint here is what RLlib's learner writes for a model, in plain torch: the model's state
and Adam's (weights and both moments), one ``torch.save`` file per component as RLlib's
``save_to_path`` lays them out, and a small JSON beside them. Two models: CartPole's
(RLlib's default MLP, 2 x 256, separate policy and value networks) and Pong's
(benchmarks/learner_update.py's ``PongModel``, the examples' APPO network). *Write*: from the
first file opened to the last one closed. *Restore*: every file read back and ``torch.load``-ed,
in a fresh process' manner (a new open per file). The median over ``--repeats`` is reported.

``--smoke``: one repetition of the CartPole checkpoint (the JSON says ``"smoke": true``; its
figures measure nothing).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learner_update import PongModel

SHARED_DEFAULT = "/mnt/cluster_storage/benchmarks"


def cartpole_model() -> nn.Module:
    """RLlib's default model for CartPole (fcnet_hiddens [256, 256], vf_share_layers False)."""

    def mlp(outputs: int) -> nn.Sequential:
        return nn.Sequential(
            nn.Linear(4, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, outputs)
        )

    model = nn.Module()
    model.pi = mlp(2)
    model.vf = mlp(1)
    return model


def checkpoint_state(model: nn.Module) -> dict[str, dict]:
    """The files of a checkpoint: the module's state, the optimizer's (after one step, so Adam
    has both moments), and its metadata."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    optimizer.step()
    return {"module_state.pt": model.state_dict(), "optimizer_state.pt": optimizer.state_dict()}


def write(folder: Path, files: dict[str, dict]) -> float:
    folder.mkdir(parents=True)
    start = time.perf_counter()
    for name, state in files.items():
        with open(folder / name, "wb") as f:
            torch.save(state, f)
    with open(folder / "metadata.json", "w") as f:
        json.dump({"files": sorted(files)}, f)
    return time.perf_counter() - start


def restore(folder: Path) -> float:
    start = time.perf_counter()
    names = json.loads((folder / "metadata.json").read_text())["files"]
    for name in names:
        with open(folder / name, "rb") as f:
            torch.load(io.BytesIO(f.read()), weights_only=True)
    return time.perf_counter() - start


def measure(root: Path, files: dict[str, dict], repeats: int) -> dict:
    writes, restores = [], []
    for i in range(repeats):
        folder = root / f"checkpoint_{i:06d}"
        writes.append(write(folder, files))
        restores.append(restore(folder))
    return {
        "write_s": round(statistics.median(writes), 4),
        "restore_s": round(statistics.median(restores), 4),
        "writes_s": [round(x, 4) for x in writes],
        "restores_s": [round(x, 4) for x in restores],
    }


def size(files: dict[str, dict]) -> int:
    total = 0
    for state in files.values():
        buffer = io.BytesIO()
        torch.save(state, buffer)
        total += buffer.tell()
    return total


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=None, help=f"default: {SHARED_DEFAULT}/<run>")
    p.add_argument("--local", type=Path, default=None, help="default: a folder in $TMPDIR")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--smoke", action="store_true", help="one CartPole checkpoint, untimed")
    p.add_argument("--out", type=Path, help="also write the JSON here")
    args = p.parse_args()
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    run = f"cluster-storage-{os.getpid()}-{int(time.time())}"
    shared_parent = args.shared or Path(SHARED_DEFAULT)
    if not shared_parent.parent.is_dir():
        p.error(f"{shared_parent.parent} does not exist: give --shared DIR (no cluster storage?)")
    shared = shared_parent / run
    local = (args.local or Path(tempfile.gettempdir())) / run
    torch.manual_seed(0)
    models = {"cartpole": cartpole_model()}
    if not args.smoke:
        models["pong"] = PongModel()
    repeats = 1 if args.smoke else args.repeats
    result: dict = {
        "benchmark": "cluster_storage",
        "smoke": args.smoke,
        "host": platform.node(),
        "shared": str(shared),
        "local": str(local),
        "repeats": repeats,
        "load_before": os.getloadavg()[0],
        "models": {},
    }
    try:
        for name, model in models.items():
            files = checkpoint_state(model)
            result["models"][name] = {
                "checkpoint_bytes": size(files),
                "shared": measure(shared / name, files, repeats),
                "local": measure(local / name, files, repeats),
            }
    finally:
        for folder in (shared, local):
            shutil.rmtree(folder, ignore_errors=True)
    result["load_after"] = os.getloadavg()[0]
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
