"""Multi-agent PPO on mobile-env (DeepCoMP's successor): every user equipment is an agent.

Each UE chooses which base station to connect to (or none) every step; its reward is its own
utility of the data rate it gets, so UEs must share the stations' capacity well:

    python -m driver submit examples/mobile/train.py
    python -m driver submit examples/mobile/train.py -- --scenario medium --policy per-agent

``--scenario`` sets the agents (small: 5 UEs and 3 stations, medium: 15/7, large: 30/13);
``--policy shared`` (default) trains one policy all UEs use, as DeepCoMP's multi-agent variant
did; ``per-agent`` trains one policy per UE. At the end the greedy policy and a uniformly
random one each play ``--eval-episodes`` episodes on the same seeds; their mean returns (summed
over UEs, like RLlib's episode return) go into the ``RESULT`` line.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mobile_ma import SCENARIOS, MobileMultiAgent, make

import harness

EVAL_SEED = 1_000_000
"""Evaluation episodes use seeds from here on: never the ones training started from."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = harness.parser(__doc__, max_env_steps=30_000, num_env_runners=1)
    p.add_argument(
        "--scenario",
        choices=sorted(SCENARIOS),
        default="small",
        help="mobile-env scenario, which sets the agents (default: small, 5 UEs)",
    )
    p.add_argument(
        "--policy",
        choices=("shared", "per-agent"),
        default="shared",
        help="one policy for all UEs, or one per UE (default: shared)",
    )
    p.add_argument(
        "--envs-per-env-runner", type=int, default=2, help="envs per env runner (default: 2)"
    )
    p.add_argument(
        "--train-batch-size",
        type=int,
        default=2_000,
        help="env steps per training iteration (default: 2000)",
    )
    p.add_argument("--lr", type=float, default=5e-4, help="learning rate (default: 5e-4)")
    p.add_argument(
        "--eval-episodes",
        type=int,
        default=5,
        help="episodes the greedy and the random policy play at the end (default: 5)",
    )
    return p.parse_args(argv)


def policy_ids(args: argparse.Namespace) -> dict[Any, str]:
    """UE id -> policy id."""
    ues = list(make(args.scenario).users)
    return {ue: "shared" if args.policy == "shared" else f"ue{ue}" for ue in ues}


def build_config(args: argparse.Namespace):  # -> PPOConfig
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    mapping = policy_ids(args)
    return (
        PPOConfig()
        .environment(MobileMultiAgent, env_config={"scenario": args.scenario})
        .env_runners(
            num_env_runners=args.num_env_runners,
            num_envs_per_env_runner=args.envs_per_env_runner,
        )
        .learners(num_learners=0)
        .multi_agent(
            policies=set(mapping.values()),
            policy_mapping_fn=lambda agent_id, episode, **kwargs: mapping[agent_id],
        )
        .training(
            train_batch_size_per_learner=args.train_batch_size,
            minibatch_size=min(256, args.train_batch_size),
            num_epochs=5,
            lr=args.lr,
            gamma=0.9,
            vf_loss_coeff=0.01,
        )
        .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[64, 64], vf_share_layers=False))
    )


def play(args: argparse.Namespace, choose: Any) -> list[float]:
    """Returns (summed over UEs) of ``--eval-episodes`` episodes, each from its own seed."""
    env = MobileMultiAgent({"scenario": args.scenario})
    returns = []
    for i in range(args.eval_episodes):
        obs, _ = env.reset(seed=EVAL_SEED + i)
        for space in env.action_spaces.values():
            space.seed(EVAL_SEED + i)
        total, done = 0.0, False
        while not done:
            obs, rewards, terminateds, truncateds, _ = env.step(choose(env, obs))
            total += sum(rewards.values())
            done = terminateds["__all__"] or truncateds["__all__"]
        returns.append(total)
    return returns


def evaluate(algo: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The greedy policy against a random one on the same episodes."""
    import numpy as np
    import torch

    if args.eval_episodes < 1:
        return {}
    mapping = policy_ids(args)
    modules = {pid: algo.get_module(pid) for pid in set(mapping.values())}

    def greedy(_env: Any, obs: dict[Any, np.ndarray]) -> dict[Any, int]:
        actions = {}
        with torch.no_grad():
            for ue, o in obs.items():
                out = modules[mapping[ue]].forward_inference({"obs": torch.from_numpy(o[None])})
                actions[ue] = int(torch.argmax(out["action_dist_inputs"][0]))
        return actions

    def random(env: Any, obs: dict[Any, np.ndarray]) -> dict[Any, int]:
        return {ue: int(env.action_spaces[ue].sample()) for ue in obs}

    g, r = float(np.mean(play(args, greedy))), float(np.mean(play(args, random)))
    print(f"greedy {g:.1f}  random {r:.1f}  over {args.eval_episodes} episodes", flush=True)
    return {
        "greedy_return_mean": round(g, 1),
        "random_return_mean": round(r, 1),
        "eval_episodes": args.eval_episodes,
        "agents": len(mapping),
        "policies": len(modules),
    }


def main(argv: list[str] | None = None) -> int:
    return harness.run("mobile", build_config, parse_args(argv), evaluate=evaluate)


if __name__ == "__main__":
    sys.exit(main())
