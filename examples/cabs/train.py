"""DQN on Contoso Cabs (examples/cabs/contoso_cabs.py) with RLlib's new API stack.

Double, dueling, 3-step DQN with prioritized replay, on one cab driver's month of ride choices:

    python -m driver submit examples/cabs/train.py
    python -m driver submit examples/cabs/train.py -- --num-env-runners 2 --seed 1

Ape-X DQN, which the project this repository replaces ran on Azure ML, was removed from RLlib
in 2.11. Distribution here is RLlib's DQN with ``--num-env-runners N``: N env runners (on the
cluster's workers) sample in parallel and feed the one prioritized replay buffer and learner in
the job's process on the head. Unlike Ape-X, the runners are synchronous (each iteration waits
for all of them) and share one epsilon schedule instead of one epsilon each.

At the end the greedy policy (no exploration) and a uniformly random policy each play
``--eval-episodes`` months on the same seeds; their mean returns go into the ``RESULT`` line.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from contoso_cabs import ContosoCabs

import harness

EVAL_SEED = 1_000_000
"""Evaluation months use seeds from here on: never the ones training started from."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = harness.parser(__doc__, max_env_steps=50_000, num_env_runners=0)
    p.add_argument(
        "--envs-per-env-runner",
        type=int,
        default=1,
        help="cabs each env runner steps in turn (default: 1)",
    )
    p.add_argument(
        "--train-batch-size",
        type=int,
        default=256,
        help="replayed transitions per update (default: 256)",
    )
    p.add_argument(
        "--training-intensity",
        type=float,
        default=None,
        help="replayed / sampled transitions (default: RLlib's: one update per sampling call, "
        "which gathers a fragment from every env runner)",
    )
    p.add_argument(
        "--rollout-fragment-length",
        type=int,
        default=32,
        help="env steps each env runner samples per call, one update each (default: 32)",
    )
    p.add_argument(
        "--learning-starts",
        type=int,
        default=2_000,
        help="env steps sampled before the first update (default: 2000)",
    )
    p.add_argument("--lr", type=float, default=1e-3, help="learning rate (default: 1e-3)")
    p.add_argument(
        "--gamma",
        type=float,
        default=0.5,
        help="discount per decision (default: 0.5; see the README for why so short)",
    )
    p.add_argument(
        "--target-update",
        type=int,
        default=250,
        help="env steps between target network updates (default: 250)",
    )
    p.add_argument(
        "--explore-fraction",
        type=float,
        default=0.3,
        help="epsilon falls from 1 to 0.02 over this fraction of --max-env-steps (default: 0.3)",
    )
    p.add_argument(
        "--eval-episodes",
        type=int,
        default=10,
        help="months the greedy and the random policy play at the end (default: 10)",
    )
    return p.parse_args(argv)


def build_config(args: argparse.Namespace):  # -> DQNConfig
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    budget = args.max_env_steps or 50_000
    return (
        DQNConfig()
        .environment(ContosoCabs)
        .env_runners(
            num_env_runners=args.num_env_runners,
            num_envs_per_env_runner=args.envs_per_env_runner,
            rollout_fragment_length=args.rollout_fragment_length,
        )
        .learners(num_learners=0)
        .training(
            double_q=True,
            dueling=True,
            n_step=3,
            gamma=args.gamma,
            lr=args.lr,
            train_batch_size_per_learner=args.train_batch_size,
            training_intensity=args.training_intensity,
            target_network_update_freq=args.target_update,
            num_steps_sampled_before_learning_starts=args.learning_starts,
            epsilon=[(0, 1.0), (int(budget * args.explore_fraction), 0.02)],
            replay_buffer_config={
                "type": "PrioritizedEpisodeReplayBuffer",
                "capacity": 50_000,
                "alpha": 0.6,
                "beta": 0.4,
            },
            # Resume continues with the replay buffer it had (a few MB for this env).
            store_buffer_in_checkpoints=True,
        )
        .rl_module(
            # tanh: with ReLU, the first large TD errors (rewards reach +50) left every hidden
            # unit dead and Q the same in every state.
            model_config=DefaultModelConfig(fcnet_hiddens=[128, 128], fcnet_activation="tanh"),
        )
        .reporting(min_sample_timesteps_per_iteration=1_000)
    )


def play(env: ContosoCabs, choose: Any, episodes: int) -> list[float]:
    """Returns of ``episodes`` months, each from its own evaluation seed."""
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=EVAL_SEED + i)
        env.action_space.seed(EVAL_SEED + i)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(choose(obs))
            total += reward
            done = terminated or truncated
        returns.append(total)
    return returns


def evaluate(algo: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The greedy policy against a random one on the same months."""
    import numpy as np
    import torch

    module = algo.get_module()

    def greedy(obs: np.ndarray) -> int:
        with torch.no_grad():
            out = module.forward_inference({"obs": torch.from_numpy(obs[None])})
        return int(out["actions"][0])

    if args.eval_episodes < 1:
        return {}
    env = ContosoCabs()
    greedy_returns = play(env, greedy, args.eval_episodes)
    random_returns = play(env, lambda _obs: env.action_space.sample(), args.eval_episodes)
    g, r = float(np.mean(greedy_returns)), float(np.mean(random_returns))
    print(f"greedy {g:.1f}  random {r:.1f}  over {args.eval_episodes} months", flush=True)
    return {
        "greedy_return_mean": round(g, 1),
        "random_return_mean": round(r, 1),
        "greedy_minus_random": round(g - r, 1),
        "eval_episodes": args.eval_episodes,
    }


def main(argv: list[str] | None = None) -> int:
    return harness.run("cabs", build_config, parse_args(argv), evaluate=evaluate)


if __name__ == "__main__":
    sys.exit(main())
