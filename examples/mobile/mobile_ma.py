"""mobile-env's multi-agent scenarios for RLlib, with seeding that works.

mobile-env (https://github.com/stefanbschneider/mobile-env, 2.1.0) is the maintained successor
of DeepCoMP by the same authors: user equipments (UEs) move among base stations and each UE
chooses which station to connect to (coordinated multipoint); the multi-agent handler makes
every UE an agent with its own observation and reward. ``RLlibMAWrapper`` (shipped with
mobile-env) turns it into RLlib's MultiAgentEnv.

One fix on top: mobile-env 2.1.0 ignores ``reset(seed=...)`` (it computes reseeded settings
and drops them), so every env copy replays the seed-0 movements and arrivals, and gymnasium's
env checker fails ("reset(seed=123) is non-deterministic"). :func:`reseed` hands the seed to
the simulation's parts the way mobile-env's own ``seeding`` rotates it; with it, RLlib's
per-runner seeds give each env runner its own traffic.
"""

from __future__ import annotations

from typing import Any

from mobile_env.core.base import MComCore
from mobile_env.handlers.multi_agent import MComMAHandler
from mobile_env.scenarios.large import MComLarge
from mobile_env.scenarios.medium import MComMedium
from mobile_env.scenarios.small import MComSmall
from mobile_env.wrappers.multi_agent import RLlibMAWrapper

SEEDED_PARTS = ("arrival", "channel", "scheduler", "movement", "utility")
"""In the order of MComCore.seeding's keys: part k gets seed + k + 1."""


def reseed(core: Any, seed: int) -> None:
    """Make the next ``reset`` start the simulation from ``seed``."""
    core.seed = seed
    core.rng = None
    for k, name in enumerate(SEEDED_PARTS):
        part = getattr(core, name)
        if hasattr(part, "rng"):
            part.seed = seed + k + 1
            part.rng = None


def _reset(self: Any, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
    if seed is not None:
        reseed(self, seed)
    return MComCore.reset(self, seed=seed, options=options)


SCENARIOS: dict[str, type[MComCore]] = {
    name: type(f"Seeded{cls.__name__}", (cls,), {"reset": _reset, "__module__": __name__})
    for name, cls in {"small": MComSmall, "medium": MComMedium, "large": MComLarge}.items()
}
"""mobile-env's scenarios, each with a ``reset(seed=...)`` that seeds."""


def make(scenario: str = "small") -> MComCore:
    """The gymnasium env (observations and actions are dicts keyed by UE id)."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario: expected one of {', '.join(SCENARIOS)}, got {scenario!r}")
    return SCENARIOS[scenario](config={"handler": MComMAHandler})


class MobileMultiAgent(RLlibMAWrapper):
    """RLlib's view: one agent per UE (agent ids are the UE ids 0..N-1).

    ``env_config``: ``scenario`` (small, medium, large; default small).
    """

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__(make((config or {}).get("scenario", "small")))
