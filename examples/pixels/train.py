"""PPO (or APPO) from pixels: miniworld rendered by a simulator process per env into an X display.

The Malmo pattern (Minecraft agents trained through Project Malmo): every env starts its own
simulator process, talks to it over a local TCP port derived from its env runner's index, and
renders into the node's virtual display (`:99` on the cluster's nodes; a private Xvfb when
there is no DISPLAY, so local Ray works too):

    python -m driver submit examples/pixels/train.py
    python -m driver submit examples/pixels/train.py -- --num-env-runners 4 --algo appo

On a cluster each env runner asks for one unit of the nodes' ``simulator`` resource per env
(cloud-init gives each worker as many units as it has CPUs), so no node runs more simulators
than it has cores. Observations are 84x84x3 float frames in [0, 1]; the policy is RLlib's CNN.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pixels_env import DEFAULT_TASK, PixelsEnv, display_problem

import harness

SIMULATOR_RESOURCE = "simulator"
"""The custom resource the cluster's workers offer, one unit per CPU (cloud-init's `ray start
--resources`; python/driver/layout.py's SIMULATOR_RESOURCE, held equal by a test)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = harness.parser(__doc__, max_env_steps=20_000, num_env_runners=1)
    p.add_argument("--algo", choices=("ppo", "appo"), default="ppo", help="(default: ppo)")
    p.add_argument("--task", default=DEFAULT_TASK, help=f"miniworld env (default: {DEFAULT_TASK})")
    p.add_argument("--size", type=int, default=84, help="frame width and height (default: 84)")
    p.add_argument(
        "--envs-per-env-runner",
        type=int,
        default=2,
        help="envs (simulator processes) per env runner (default: 2)",
    )
    p.add_argument(
        "--train-batch-size",
        type=int,
        default=1000,
        help="env steps per training iteration (default: 1000)",
    )
    p.add_argument("--lr", type=float, default=3e-4, help="learning rate (default: 3e-4)")
    return p.parse_args(argv)


def simulator_resources(envs_per_env_runner: int) -> dict[str, float]:
    """One ``simulator`` unit per env where the cluster offers it (local Ray does not)."""
    import ray

    if ray.cluster_resources().get(SIMULATOR_RESOURCE, 0) > 0:
        return {SIMULATOR_RESOURCE: float(envs_per_env_runner)}
    return {}


def build_config(args: argparse.Namespace) -> Any:
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    if args.algo == "appo":
        from ray.rllib.algorithms.appo import APPOConfig

        config: Any = APPOConfig().training(vf_loss_coeff=0.5, entropy_coeff=0.01)
    else:
        from ray.rllib.algorithms.ppo import PPOConfig

        config = PPOConfig().training(
            minibatch_size=min(128, args.train_batch_size), num_epochs=4, entropy_coeff=0.01
        )
    return (
        config.environment(PixelsEnv, env_config={"task": args.task, "size": args.size})
        .env_runners(
            num_env_runners=args.num_env_runners,
            num_envs_per_env_runner=args.envs_per_env_runner,
            num_cpus_per_env_runner=1,
            custom_resources_per_env_runner=simulator_resources(args.envs_per_env_runner),
            rollout_fragment_length="auto",
        )
        .learners(num_learners=0)
        .training(train_batch_size_per_learner=args.train_batch_size, lr=args.lr)
        .rl_module(
            model_config=DefaultModelConfig(
                conv_filters=[(16, 8, 4), (32, 4, 2), (64, 3, 1)],
                conv_activation="relu",
                head_fcnet_hiddens=[256],
                vf_share_layers=True,
            )
        )
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # The env runners' nodes are like this one (local Ray; a cluster's head has the workers'
    # packages and display): no display here, none there, and one line says why.
    problem = display_problem()
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    return harness.run("pixels", build_config, args)


if __name__ == "__main__":
    sys.exit(main())
