"""benchmarks/learner_update.py measures the Pong example's learner: its plain-torch model is
RLlib's module for examples/pong/train.py's config (same layers, same outputs), its loss and
update are APPOTorchLearner's (same loss, same parameters after updates from the same start),
and the script prints the JSON it promises."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from support import REPO, error_lines

SCRIPT = REPO / "benchmarks" / "learner_update.py"
MODULE_ID = "default_policy"


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load("learner_update_benchmark", SCRIPT)


@pytest.fixture(scope="module")
def pong() -> Iterator[dict[str, Any]]:
    """RLlib's learner for examples/pong/train.py's defaults, built from the example's own
    config, on the spaces the example's env and env-to-module connector give (no Ray started)."""
    train = _load("pong_train", REPO / "examples" / "pong" / "train.py")
    config = train.build_config(train.parse_args([]))
    env = train.make_pong({})
    try:
        stacking = train._env_to_module(env)
        stacking.input_action_space = env.action_space
        stacking.input_observation_space = env.observation_space
        spaces = {MODULE_ID: (stacking.observation_space, env.action_space)}
    finally:
        env.close()
    torch.manual_seed(0)
    learner = config.build_learner(spaces=spaces)
    yield {
        "config": config,
        "learner": learner,
        "module": learner.module[MODULE_ID].unwrapped(),
        "spaces": spaces[MODULE_ID],
    }


def _rllib_batch(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    from ray.rllib.core.columns import Columns

    return {
        Columns.OBS: batch["obs"],
        Columns.ACTIONS: batch["actions"],
        Columns.ACTION_LOGP: batch["behaviour_logp"],
        Columns.REWARDS: batch["rewards"],
        Columns.TERMINATEDS: batch["terminateds"].bool(),
        Columns.LOSS_MASK: torch.ones(len(batch["obs"]), dtype=torch.bool),
    }


def _main_parameters(module: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """The module's own parameters, without the target network's copies (``_old_*``)."""
    return [(n, p) for n, p in module.named_parameters() if not n.startswith("_old_")]


def test_the_benchmark_measures_the_examples_settings(pong: dict[str, Any]) -> None:
    config = pong["config"]
    observation_space, action_space = pong["spaces"]
    assert tuple(observation_space.shape) == bench.FRAME and action_space.n == bench.ACTIONS
    model = config.model_config
    assert [tuple(f) for f in model["conv_filters"]] == list(bench.CONV_FILTERS)
    assert tuple(model["head_fcnet_hiddens"]) == bench.HEAD_HIDDENS
    assert model["conv_activation"] == model["head_fcnet_activation"] == "relu"
    assert model["vf_share_layers"] is True
    assert config.lr == bench.LR and config.grad_clip == bench.GRAD_CLIP
    assert config.grad_clip_by == "global_norm"
    assert config.clip_param == bench.CLIP_PARAM and config.use_kl_loss is False
    assert config.vf_loss_coeff == bench.VF_LOSS_COEFF and config.gamma == bench.GAMMA
    assert config.entropy_coeff[0] == [0, bench.ENTROPY_COEFF]
    assert config.vtrace_clip_rho_threshold == config.vtrace_clip_pg_rho_threshold == 1.0
    assert config.get_rollout_fragment_length() == bench.ROLLOUT_FRAGMENT
    assert config.circular_buffer_iterations_per_batch == bench.ITERATIONS_PER_BATCH
    assert config.tau == 1.0
    assert (
        config.target_network_update_freq
        * config.circular_buffer_num_batches
        * config.circular_buffer_iterations_per_batch
    ) == bench.TARGET_UPDATE_EVERY
    assert config.train_batch_size_per_learner == bench.BATCH_SIZES[0]


def test_the_plain_model_is_rllibs_module_for_the_example(pong: dict[str, Any]) -> None:
    module, plain = pong["module"], bench.PongModel()
    theirs, ours = _main_parameters(module), list(plain.named_parameters())
    assert sum(p.numel() for _, p in ours) == sum(p.numel() for _, p in theirs) == 1_224_183
    assert [tuple(p.shape) for _, p in ours] == [tuple(p.shape) for _, p in theirs]
    with torch.no_grad():
        for (_, mine), (_, rllib) in zip(ours, theirs, strict=True):
            mine.copy_(rllib)
    batch = bench.make_batch(100, seed=1)
    logits, values = plain(batch["obs"])
    rllib_batch = _rllib_batch(batch)
    out = module.forward_train(rllib_batch)
    torch.testing.assert_close(logits, out["action_dist_inputs"], rtol=0, atol=1e-6)
    torch.testing.assert_close(values, module.compute_values(rllib_batch), rtol=0, atol=1e-6)


def test_updates_are_appo_torch_learners_updates(pong: dict[str, Any]) -> None:
    """From the same weights, three updates on one batch: the same loss each time and the same
    parameters after each, to rounding (RLlib's loss, gradient clipping and Adam against the
    benchmark's)."""
    rl_learner, module = pong["learner"], pong["module"]
    config = rl_learner.config.get_config_for_module(MODULE_ID)
    ours = bench.Learner("cpu")
    with torch.no_grad():
        for (_, mine), (_, rllib) in zip(
            ours.model.named_parameters(), _main_parameters(module), strict=True
        ):
            mine.copy_(rllib)
        for name, target in module.named_parameters():
            if name.startswith("_old_"):  # RLlib's target network starts as a copy
                main = dict(module.named_parameters())[name.replace("_old_", "", 1)]
                assert torch.equal(target, main)
    ours.target.load_state_dict(ours.model.state_dict())
    batch = bench.make_batch(150, seed=2)
    rllib_batch = _rllib_batch(batch)
    before = [p.detach().clone() for p in ours.model.parameters()]
    losses = []
    for _ in range(3):
        fwd = module.forward_train(rllib_batch)
        loss = rl_learner.compute_loss_for_module(
            module_id=MODULE_ID, config=config, batch=rllib_batch, fwd_out=fwd
        )
        grads = rl_learner.postprocess_gradients(rl_learner.compute_gradients({MODULE_ID: loss}))
        rl_learner.apply_gradients(grads)
        ours_loss = ours.update(batch)
        losses.append(ours_loss)
        assert ours_loss == pytest.approx(loss.item(), abs=1e-5)
        for (_, mine), (_, rllib) in zip(
            ours.model.named_parameters(), _main_parameters(module), strict=True
        ):
            # Adam divides each gradient element by its running RMS: an element whose gradient
            # is at the level of rounding noise (each CPU's BLAS sums in its own order; 2e-5
            # was seen on an AMD EPYC) takes a step of another size, up to lr. Another loss,
            # clipping or optimizer moves most elements by a good part of lr.
            diff = (mine - rllib).abs()
            assert diff.max() <= bench.LR / 10, diff.max()
            assert (diff > 1e-5).float().mean() <= 0.01, (diff > 1e-5).sum()
    assert losses[-1] < losses[0]  # the same batch three times: the loss goes down
    assert all(not torch.equal(b, a) for b, a in zip(before, ours.model.parameters(), strict=True))


def test_the_target_network_syncs_every_16_updates() -> None:
    learner = bench.Learner("cpu")
    batch = bench.make_batch(50)
    first = [p.clone() for p in learner.target.parameters()]
    for _ in range(bench.TARGET_UPDATE_EVERY - 1):
        learner.update(batch)
    assert all(torch.equal(a, b) for a, b in zip(first, learner.target.parameters(), strict=True))
    learner.update(batch)
    for mine, target in zip(learner.model.parameters(), learner.target.parameters(), strict=True):
        assert torch.equal(mine, target)
        assert not target.requires_grad


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )


def test_a_small_cpu_run_prints_the_json(tmp_path: Path) -> None:
    out = tmp_path / "learner.json"
    p = _run(
        *("--batch-sizes", "50", "100", "--warmup", "1", "--cpu-repeats", "2"),
        *("--threads", "1", "2", "--out", str(out)),
    )
    assert p.returncode == 0, p.stderr[-2000:]
    result = json.loads(p.stdout)
    assert json.loads(out.read_text()) == result
    assert result["benchmark"] == "learner_update" and result["batch_sizes"] == [50, 100]
    assert result["model"]["parameters"] == 1_224_183
    assert {"cpus", "cpu", "torch_threads", "torch", "cuda", "gpu"} <= set(result["machine"])
    assert set(result["cpu"]) == {"threads_1", "threads_2"}
    for rows in result["cpu"].values():
        assert set(rows) == {"50", "100"}
        for size, row in rows.items():
            assert row["repeats"] == 2
            assert 0 < row["ms_min"] <= row["ms_per_update"] <= row["ms_max"]
            assert row["updates_per_s"] == pytest.approx(1000 / row["ms_per_update"], rel=0.01)
            # Printed as a whole number: off by up to 0.5 from the exact rate (36 for 35.5 on
            # a machine loaded enough, 1.4 %).
            assert row["env_steps_per_s"] == pytest.approx(
                int(size) * row["updates_per_s"] / bench.ITERATIONS_PER_BATCH, rel=0.01, abs=0.5
            )
    if torch.cuda.is_available():
        assert set(result["cuda"]) == {"50", "100"}
        assert set(result["gpu_speedup"]) == {"threads_1", "threads_2"}
    else:  # this machine: said so, not left out silently
        assert result["cuda_skipped"] == "torch sees no CUDA device"
        assert "cuda" not in result and "gpu_speedup" not in result


def test_speedup_is_cpu_time_over_gpu_time() -> None:
    cpu = {"500": {"ms_per_update": 100.0}}
    cuda = {"500": {"ms_per_update": 4.0, "ms_per_update_with_copy": 10.0}}
    assert bench.speedup(cpu, cuda) == {"500": {"resident": 25.0, "with_copy": 10.0}}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--batch-sizes", "70"], "argument --batch-sizes: 70: need a multiple of the rollout"),
        (["--threads", "0"], "argument --threads: 0: need a positive integer"),
        (["--out", "/nonexistent/x.json"], "--out /nonexistent/x.json: no such directory"),
    ],
)
def test_bad_options_get_one_line(
    args: list[str], message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *args])
    with pytest.raises(SystemExit) as exit_:
        bench.main()
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = error_lines(err)
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err
