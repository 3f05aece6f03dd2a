"""The Pong model's learner update on each device torch can use (CPU, CUDA): one JSON object.

    python benchmarks/learner_update.py
    python benchmarks/learner_update.py --batch-sizes 500 2000 8000 --threads 16 4
    python benchmarks/learner_update.py --devices cpu --batch-sizes 500 --repeats 3 --out x.json
    python benchmarks/learner_update.py --smoke   # one fragment, one update: it runs, untimed

What examples/pong/train.py's learner computes per update, in plain torch so that it runs where
torch is installed and Ray is not (a GPU machine without packages): RLlib's default CNN encoder
for the example's DefaultModelConfig (conv_filters (16,4,2) (32,4,2) (64,4,2) (128,4,2), relu,
"same" padding, on 64x64x4 channels-last frames), its policy head (256 relu, 6 Pong actions) and
value head (256 relu, 1) on the shared encoder, and APPO's loss as RLlib's APPOTorchLearner
computes it (the target network's logits, V-trace over rollout fragments of 50, the clipped
surrogate (clip 0.4), value loss x1.0, entropy x0.01), then backward, global-norm clipping at 40
and Adam at lr 5e-4; every 16 updates the target network is synced (tau 1), as the example's
target_network_update_freq 2 x 4 buffered batches x 2 uses each does.
tests/unit/test_learner_update.py checks the model against RLlib's module for the example.

Not measured: the learner connector (frame stacking, done on the CPU before the update), the
circular buffer and Ray's actors around it. ``ms_per_update`` has the batch on the device
already; ``ms_per_update_with_copy`` (CUDA) copies it from pageable host memory first, as the
learner does with each batch; ``ms_per_update_with_pinned_copy`` from page-locked memory. Each
update is timed alone (cuda synchronized), after warm-up
updates; the median is reported, with the 1-minute load average before and after the run.
``env_steps_per_s`` is what one learner absorbs: samples per second over the 2 updates each
env step feeds (circular_buffer_iterations_per_batch).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import torch
from torch import nn

FRAME = (64, 64, 4)
"""64x64 grey frames, 4 stacked (RLlib's Atari preprocessing, stacked by connectors)."""
ACTIONS = 6
CONV_FILTERS = ((16, 4, 2), (32, 4, 2), (64, 4, 2), (128, 4, 2))
HEAD_HIDDENS = (256,)
LR = 5e-4
GRAD_CLIP = 40.0
"""APPO's default grad_clip (by global norm); the example keeps it."""
CLIP_PARAM = 0.4
VF_LOSS_COEFF = 1.0
ENTROPY_COEFF = 0.01
"""The example's schedule starts at 0.01."""
GAMMA = 0.99
ROLLOUT_FRAGMENT = 50
ITERATIONS_PER_BATCH = 2
"""circular_buffer_iterations_per_batch: each env step is trained on twice."""
BATCH_SIZES = (500, 2000, 8000)
"""The example's train_batch_size, then what a learner fed by 13+ env runners may take."""
TARGET_UPDATE_EVERY = 2 * 4 * ITERATIONS_PER_BATCH
"""Updates between target syncs: target_network_update_freq x circular_buffer_num_batches x
iterations per batch (RLlib counts it in trained env steps: that times the batch size)."""


class PongModel(nn.Module):
    """RLlib's DefaultAPPOTorchRLModule for the example's DefaultModelConfig, in plain torch."""

    def __init__(self) -> None:
        super().__init__()
        size, depth = FRAME[0], FRAME[2]
        layers: list[nn.Module] = []
        for out_depth, kernel, stride in CONV_FILTERS:
            out = math.ceil(size / stride)
            pad = max((out - 1) * stride + kernel - size, 0)
            layers += [
                nn.ZeroPad2d((pad // 2, pad - pad // 2, pad // 2, pad - pad // 2)),
                nn.Conv2d(depth, out_depth, kernel, stride),
                nn.ReLU(),
            ]
            size, depth = out, out_depth
        self.cnn = nn.Sequential(*layers)
        self.pi = _head(size * size * depth, ACTIONS)
        self.vf = _head(size * size * depth, 1)

    def embed(self, obs: torch.Tensor) -> torch.Tensor:
        # Channels-last in and out of the convolutions, then flattened, as RLlib's TorchCNN.
        return self.cnn(obs.permute(0, 3, 1, 2)).permute(0, 2, 3, 1).flatten(1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        embedding = self.embed(obs)
        return self.pi(embedding), self.vf(embedding).squeeze(-1)


def _head(width: int, outputs: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for hidden in HEAD_HIDDENS:
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    return nn.Sequential(*layers, nn.Linear(width, outputs))


def make_batch(size: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """A learner batch of ``size`` env steps on the CPU: float32 frames in [-1, 1] as RLlib's
    preprocessing gives them, actions and their behaviour log-probs, sparse rewards and ends."""
    g = torch.Generator().manual_seed(seed)
    behaviour = torch.log_softmax(torch.randn(size, ACTIONS, generator=g), -1)
    actions = torch.randint(ACTIONS, (size,), generator=g)
    return {
        "obs": torch.rand(size, *FRAME, generator=g) * 2 - 1,
        "actions": actions,
        "behaviour_logp": behaviour.gather(1, actions[:, None]).squeeze(1),
        "rewards": torch.randint(-1, 2, (size,), generator=g).float()
        * (torch.rand(size, generator=g) < 0.02),
        "terminateds": (torch.rand(size, generator=g) < 0.001).float(),
    }


def _time_major(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, ROLLOUT_FRAGMENT).transpose(0, 1)


def vtrace(
    target_logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    discounts: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLlib's vtrace_torch ([T, B] tensors, rho and pg-rho clipped at 1)."""
    rhos = torch.exp(target_logp - behaviour_logp)
    clipped, cs = rhos.clamp(max=1.0), rhos.clamp(max=1.0)
    values_next = torch.cat([values[1:], bootstrap[None]])
    deltas = clipped * (rewards + discounts * values_next - values)
    acc = [torch.zeros_like(bootstrap)]
    for t in reversed(range(len(discounts))):
        acc.append(deltas[t] + discounts[t] * cs[t] * acc[-1])
    vs = torch.stack(acc[1:]).flip(0) + values
    vs_next = torch.cat([vs[1:], bootstrap[None]])
    return vs.detach(), (clipped * (rewards + discounts * vs_next - values)).detach()


def appo_loss(model: PongModel, target: PongModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """APPOTorchLearner.compute_loss_for_module for full rollout fragments (no KL term)."""
    logits, values = model(batch["obs"])
    with torch.no_grad():
        old_logits = target.pi(target.embed(batch["obs"]))
    dist = torch.distributions.Categorical(logits=logits)
    old_logp = _time_major(torch.log_softmax(old_logits, -1).gather(1, batch["actions"][:, None]))
    behaviour = _time_major(batch["behaviour_logp"])
    logp = _time_major(dist.log_prob(batch["actions"]))
    values_tm = _time_major(values)
    bootstrap = torch.cat([values_tm[0][1:], values_tm[0][:1]])
    discounts = (1.0 - _time_major(batch["terminateds"])) * GAMMA
    targets, advantages = vtrace(
        old_logp, behaviour, discounts, _time_major(batch["rewards"]), values_tm, bootstrap
    )
    is_ratio = torch.clip(torch.exp(behaviour - old_logp), 0.0, 2.0)
    ratio = is_ratio * torch.exp(logp - behaviour)
    surrogate = torch.minimum(
        advantages * ratio, advantages * torch.clip(ratio, 1 - CLIP_PARAM, 1 + CLIP_PARAM)
    )
    pi_loss = -surrogate.mean()
    vf_loss = 0.5 * (values_tm - targets).pow(2).mean()
    return pi_loss + VF_LOSS_COEFF * vf_loss - ENTROPY_COEFF * dist.entropy().mean()


class Learner:
    """The model, its target network and Adam on one device; ``update`` is one learner step."""

    def __init__(self, device: str, seed: int = 0) -> None:
        torch.manual_seed(seed)
        self.device = torch.device(device)
        self.model = PongModel().to(self.device)
        self.target = copy.deepcopy(self.model).requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=LR)
        self.updates = 0

    def update(self, batch: dict[str, torch.Tensor]) -> float:
        batch = {k: v.to(self.device) for k, v in batch.items()}
        loss = appo_loss(self.model, self.target, batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), GRAD_CLIP)
        self.optimizer.step()
        self.updates += 1
        if self.updates % TARGET_UPDATE_EVERY == 0:
            self.target.load_state_dict(self.model.state_dict())
        return loss.item()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(learner: Learner, batch: dict[str, torch.Tensor], warmup: int, repeats: int) -> dict:
    """Median milliseconds of one update, each timed alone after ``warmup`` updates."""
    times = []
    for i in range(warmup + repeats):
        _sync(learner.device)
        start = time.perf_counter()
        learner.update(batch)
        _sync(learner.device)
        if i >= warmup:
            times.append((time.perf_counter() - start) * 1000)
    ms = statistics.median(times)
    samples = len(batch["obs"]) * 1000 / ms
    return {
        "ms_per_update": round(ms, 3),
        "ms_min": round(min(times), 3),
        "ms_max": round(max(times), 3),
        "updates_per_s": round(1000 / ms, 2),
        "samples_per_s": round(samples),
        "env_steps_per_s": round(samples / ITERATIONS_PER_BATCH),
        "repeats": repeats,
    }


def run_device(device: str, sizes: list[int], warmup: int, repeats: int) -> dict:
    learner = Learner(device)
    out: dict[str, Any] = {}
    for size in sizes:
        cpu_batch = make_batch(size)
        if learner.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(learner.device)
        resident = {k: v.to(learner.device) for k, v in cpu_batch.items()}
        out[str(size)] = measure(learner, resident, warmup, repeats)
        if learner.device.type == "cuda":
            copied = measure(learner, cpu_batch, warmup, repeats)
            out[str(size)]["ms_per_update_with_copy"] = copied["ms_per_update"]
            out[str(size)]["env_steps_per_s_with_copy"] = copied["env_steps_per_s"]
            # The same copy from page-locked host memory (the GPU reads it directly, no
            # staging through a pinned buffer): what a learner that pins its batches gets.
            pinned = {k: v.pin_memory() for k, v in cpu_batch.items()}
            from_pinned = measure(learner, pinned, warmup, repeats)
            out[str(size)]["ms_per_update_with_pinned_copy"] = from_pinned["ms_per_update"]
            out[str(size)]["env_steps_per_s_with_pinned_copy"] = from_pinned["env_steps_per_s"]
            del pinned
            out[str(size)]["peak_memory_mib"] = round(torch.cuda.max_memory_allocated() / 2**20)
        del resident
    return out


def speedup(cpu: dict, cuda: dict) -> dict:
    """CPU milliseconds per update over the GPU's, per batch size: batch resident on the GPU,
    and copied from the host with each update."""
    return {
        size: {
            "resident": round(cpu[size]["ms_per_update"] / cuda[size]["ms_per_update"], 1),
            "with_copy": round(
                cpu[size]["ms_per_update"] / cuda[size]["ms_per_update_with_copy"], 1
            ),
        }
        for size in cpu
    }


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: need a positive integer")
    return value


def _batch_size(text: str) -> int:
    value = _positive(text)
    if value % ROLLOUT_FRAGMENT:
        raise argparse.ArgumentTypeError(
            f"{text}: need a multiple of the rollout fragment length {ROLLOUT_FRAGMENT}"
        )
    return value


def _cpu_model() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    names = [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")]
    return names[0] if names else platform.processor() or platform.machine()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """Bad input gets one line, not the usage too."""
        self.exit(2, f"error: {message}\n")


def main() -> int:
    ap = _Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-sizes", type=_batch_size, nargs="+", default=list(BATCH_SIZES))
    ap.add_argument(
        "--devices",
        nargs="+",
        choices=("cpu", "cuda"),
        default=["cpu", "cuda"],
        help="where to measure (cuda is left out, and said so, where torch sees no GPU)",
    )
    ap.add_argument(
        "--threads",
        type=_positive,
        nargs="+",
        help="CPU runs, one per torch thread count (default: torch's own count)",
    )
    ap.add_argument("--warmup", type=_positive, default=3, help="updates before timing")
    ap.add_argument("--repeats", type=_positive, default=20, help="timed updates on a GPU")
    ap.add_argument("--cpu-repeats", type=_positive, default=5, help="timed updates on the CPU")
    ap.add_argument("--out", type=Path, help="also write the JSON to this file")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help=f"check that it runs: one batch of {ROLLOUT_FRAGMENT} env steps (one rollout "
        "fragment), one warm-up and one timed update per device, instead of --batch-sizes, "
        '--warmup and the repeats; the JSON says "smoke": true (not a measurement)',
    )
    args = ap.parse_args()
    if args.smoke:
        args.batch_sizes, args.warmup = [ROLLOUT_FRAGMENT], 1
        args.repeats = args.cpu_repeats = 1
    if args.out is not None and not args.out.parent.is_dir():
        ap.error(f"--out {args.out}: no such directory {args.out.parent}")
    cuda = torch.cuda.is_available()
    load_before = os.getloadavg()[0]
    out: dict[str, Any] = {
        "benchmark": "learner_update",
        "smoke": args.smoke,
        "machine": {
            "cpus": os.cpu_count(),
            "cpu": _cpu_model(),
            "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(0) if cuda else None,
            "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
            "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        },
        "model": {
            "parameters": sum(p.numel() for p in PongModel().parameters()),
            "frame": list(FRAME),
            "conv_filters": [list(f) for f in CONV_FILTERS],
            "head_hiddens": list(HEAD_HIDDENS),
            "actions": ACTIONS,
        },
        "batch_sizes": args.batch_sizes,
        "warmup": args.warmup,
        "cpu": {},
    }
    if "cpu" in args.devices:
        for threads in args.threads or [torch.get_num_threads()]:
            torch.set_num_threads(threads)
            out["cpu"][f"threads_{threads}"] = run_device(
                "cpu", args.batch_sizes, args.warmup, args.cpu_repeats
            )
    if "cuda" in args.devices and not cuda:
        out["cuda_skipped"] = "torch sees no CUDA device"
    elif "cuda" in args.devices:
        out["cuda"] = run_device("cuda", args.batch_sizes, args.warmup, args.repeats)
        out["gpu_speedup"] = {run: speedup(rows, out["cuda"]) for run, rows in out["cpu"].items()}
    out["machine"]["load_average_1min"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    text = json.dumps(out, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
