"""APPO (or IMPALA) on Atari Pong, modelled on RLlib's tuned APPO Pong example.

CPU env runners on the workers step ``ALE/Pong-v5`` (ale-py ships the ROM) through RLlib's
Atari preprocessing (64x64 grey frames, 4 stacked by connectors, clipped rewards); the learner
runs in the job's main process on the head, on its GPU with ``--num-gpus-per-learner 1``, or, with
``--num-learners 1``, in an actor of its own that Ray places on a node with a free GPU (a GPU
worker pool, which Ray's autoscaler scales out for it); ``--env-runner-resources`` keeps the env
runners on the pool that offers a resource of its own:

    python -m driver submit examples/pong/train.py
    python -m driver submit examples/pong/train.py --head azureuser@HEAD -- --num-env-runners 13
    python -m driver submit examples/pong/train.py --head azureuser@HEAD -- --num-env-runners 13 \
        --num-learners 1 --num-gpus-per-learner 1 --env-runner-resources '{"cpu_pool": 1}'
    python -m driver submit examples/pong/train.py -- --algo impala

It stops at a mean return of 18, after an hour of training or after 10 million env steps,
whichever comes first (``--stop-reward``, ``--stop-seconds``, ``--max-env-steps``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import harness

ENV_ID = "ALE/Pong-v5"
ENV_NAME = "pong-preprocessed"
"""The name the preprocessed env is registered under with Ray Tune's registry."""
FRAMES = 4


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = harness.parser(
        __doc__,
        stop_reward=18.0,
        stop_seconds=3600.0,
        max_env_steps=10_000_000,
        num_env_runners=2,
    )
    p.add_argument(
        "--algo",
        choices=("appo", "impala"),
        default="appo",
        help="APPO (IMPALA's successor) or IMPALA itself (default: appo)",
    )
    p.add_argument(
        "--envs-per-env-runner", type=int, default=2, help="Pongs per env runner (default: 2)"
    )
    p.add_argument(
        "--train-batch-size",
        type=int,
        default=500,
        help="env steps per learner update (default: 500, as RLlib's tuned example)",
    )
    p.add_argument(
        "--num-gpus-per-learner",
        type=float,
        default=0,
        help="GPUs for the learner in the job's main process on the head (default: 0, CPU)",
    )
    p.add_argument(
        "--num-learners",
        type=int,
        choices=range(0, 9),
        default=0,
        metavar="N",
        help="0: the learner in the job's main process, on the head (default); N >= 1: N "
        "learner actors, each with --num-gpus-per-learner GPUs, placed by Ray (a GPU pool)",
    )
    p.add_argument(
        "--env-runner-resources",
        type=_resources,
        default={},
        metavar="JSON",
        help="custom Ray resources each env runner asks for, e.g. '{\"cpu_pool\": 1}' to keep "
        "the runners on the pool that offers cpu_pool (default: none)",
    )
    p.add_argument("--lr", type=float, default=5e-4, help="learning rate (default: 5e-4)")
    return p.parse_args(argv)


def _resources(text: str) -> dict[str, float]:
    """A JSON object of custom resource names to amounts (CPU and GPU have flags of their own)."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and k and type(v) in (int, float) and v > 0 for k, v in value.items()
    ):
        raise argparse.ArgumentTypeError(
            f"expected a JSON object of resource names to amounts > 0, got {text!r}"
        )
    if {"CPU", "GPU"} & set(value):
        raise argparse.ArgumentTypeError(
            "CPU and GPU are not custom resources: each env runner takes 1 CPU, and the learner "
            "--num-gpus-per-learner GPUs"
        )
    return {str(k): float(v) for k, v in value.items()}


def make_pong(env_config: dict[str, Any]) -> Any:
    """ALE Pong as the old NoFrameskip-v4 (no sticky actions), through RLlib's Atari wrappers."""
    import ale_py
    import gymnasium as gym
    from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack

    gym.register_envs(ale_py)
    env = gym.make(
        ENV_ID,
        frameskip=1,
        full_action_space=False,
        repeat_action_probability=0.0,
        render_mode="rgb_array",
    )
    return wrap_atari_for_new_api_stack(env, dim=64, framestack=None)


def _env_to_module(env: Any, spaces: Any = None, device: Any = None) -> Any:
    from ray.rllib.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule

    return FrameStackingEnvToModule(num_frames=FRAMES)


def _learner_connector(input_observation_space: Any, input_action_space: Any) -> Any:
    from ray.rllib.connectors.learner.frame_stacking import FrameStackingLearner

    return FrameStackingLearner(num_frames=FRAMES)


def build_config(args: argparse.Namespace) -> Any:
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.tune.registry import register_env

    register_env(ENV_NAME, make_pong)
    if args.algo == "appo":
        from ray.rllib.algorithms.appo import APPOConfig

        config: Any = APPOConfig().training(
            target_network_update_freq=2,
            circular_buffer_num_batches=4,
            circular_buffer_iterations_per_batch=2,
        )
    else:
        from ray.rllib.algorithms.impala import IMPALAConfig

        config = IMPALAConfig()
    return (
        config.environment(ENV_NAME, clip_rewards=True)
        .env_runners(
            num_env_runners=args.num_env_runners,
            num_envs_per_env_runner=args.envs_per_env_runner,
            num_cpus_per_env_runner=1,
            custom_resources_per_env_runner=args.env_runner_resources,
            env_to_module_connector=_env_to_module,
        )
        .learners(
            num_learners=args.num_learners,
            num_gpus_per_learner=args.num_gpus_per_learner,
            learner_connector=_learner_connector,
        )
        .training(
            train_batch_size_per_learner=args.train_batch_size,
            lr=args.lr,
            vf_loss_coeff=1.0,
            # Exploration fades out over the first 3M steps, as in the tuned example.
            entropy_coeff=[[0, 0.01], [3_000_000, 0.0]],
            broadcast_interval=5,
        )
        .rl_module(
            model_config=DefaultModelConfig(
                vf_share_layers=True,
                conv_filters=[(16, 4, 2), (32, 4, 2), (64, 4, 2), (128, 4, 2)],
                conv_activation="relu",
                head_fcnet_hiddens=[256],
            )
        )
        # APPO samples asynchronously: an iteration may end before any env step is reported.
        # At least one learner batch of env steps per iteration keeps every progress row a step.
        .reporting(min_sample_timesteps_per_iteration=args.train_batch_size)
    )


def main(argv: list[str] | None = None) -> int:
    return harness.run("pong", build_config, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
