"""examples/pong: where the learner and the env runners go (the GPU learner fed by CPU workers
of another pool), as flags reach RLlib's config, and bad flags in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support import REPO, error_lines

TRAIN = REPO / "examples" / "pong" / "train.py"


@pytest.fixture(scope="module")
def train():
    sys.path[:0] = [str(REPO / "examples"), str(TRAIN.parent)]
    try:
        import importlib.util

        spec = importlib.util.spec_from_file_location("pong_train_placement", TRAIN)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.path[:2]


def test_by_default_the_learner_is_in_the_main_process_and_runners_ask_for_no_resource(
    train,
) -> None:
    config = train.build_config(train.parse_args([]))
    assert config.num_learners == 0
    assert config.num_gpus_per_learner == 0
    assert config.custom_resources_per_env_runner == {}
    assert config.num_cpus_per_env_runner == 1


def test_a_gpu_learner_actor_and_runners_held_to_the_cpu_pool(train) -> None:
    args = train.parse_args(
        [
            "--num-learners", "1", "--num-gpus-per-learner", "1",
            "--env-runner-resources", '{"cpu_pool": 1}',
        ]
    )  # fmt: skip
    config = train.build_config(args)
    assert config.num_learners == 1
    assert config.num_gpus_per_learner == 1
    # What RLlib asks Ray for each env runner: 1 CPU and one unit of the CPU pool's resource.
    assert config.custom_resources_per_env_runner == {"cpu_pool": 1.0}
    assert config.num_cpus_per_env_runner == 1


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--env-runner-resources", "cpu_pool"], "expected a JSON object"),
        (["--env-runner-resources", '{"cpu_pool": 0}'], "amounts > 0"),
        (["--env-runner-resources", '{"GPU": 1}'], "CPU and GPU are not custom resources"),
        (["--num-learners", "-1"], "invalid choice"),
    ],
)
def test_bad_placement_flags_are_one_line(flags: list[str], says: str) -> None:
    r = subprocess.run(
        [sys.executable, str(TRAIN), *flags],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(REPO / "examples"), "PATH": "/usr/bin:/bin"},
    )
    # argparse's usage, then the one line that says what is wrong; no traceback.
    assert r.returncode == 2, r.stderr
    errors = [ln for ln in error_lines(r.stderr) if "error:" in ln]
    assert len(errors) == 1 and says in errors[0], r.stderr
    assert "Traceback" not in r.stderr
