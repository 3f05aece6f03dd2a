"""Contoso Cabs: one cab driver choosing rides over 30 days, as a gymnasium env.

The ride-hailing problem the DQN/Ape-X project this repository replaces trained on Azure ML:
5 cities, the hour of day (24) and the day of week (7). Each hour the driver picks one of 25
actions, a pick-up city x a drop city:

- same-city pairs (5 of them) mean "no ride": the cab waits an hour, which costs one hour of
  driving cost;
- a pair nobody requested this hour is also no ride (the driver waited for a fare that never
  came);
- a requested pair is a ride: drive from the current city to the pick-up city (0 hours if it is
  the same city), then carry the passenger to the drop city. The reward is the revenue of the
  ride hours minus the cost of every driving hour (pick-up + ride):
  ``R * ride - C * (pick_up + ride)``.

Requests are drawn each hour from a Poisson law whose rate is the driver's city's
(``request_rates``, capped at ``max_requests``), each for a random pick-up/drop pair, as in the
original problem; the driver does not see them (the observation is only where and when: a
36-wide one-hot of city, hour and day), so it learns which choices tend to be requested.
Travel times come from a fixed table, city x city x hour x day, drawn once from
``travel_seed``, so every seed of a training run sees the same world. An episode is 30 days
(720 hours); it ends by truncation, because the observation does not hold the elapsed time (a
terminal state would ask the agent to predict the end of the month it cannot see).
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

CITIES, HOURS, DAYS = 5, 24, 7
OBS_SIZE = CITIES + HOURS + DAYS
NUM_ACTIONS = CITIES * CITIES
EPISODE_HOURS = 30 * HOURS

DEFAULTS: dict[str, Any] = {
    "revenue_per_hour": 9.0,
    "cost_per_hour": 5.0,
    "request_rates": (2.0, 12.0, 4.0, 7.0, 8.0),
    "max_requests": 15,
    "max_travel_hours": 11,
    "travel_seed": 0,
    "episode_hours": EPISODE_HOURS,
}


def travel_table(seed: int, max_hours: int) -> np.ndarray:
    """Hours from city a to city b leaving at hour h on day d: ``T[a, b, h, d]`` in 1..max."""
    rng = np.random.default_rng(seed)
    table = rng.integers(1, max_hours + 1, size=(CITIES, CITIES, HOURS, DAYS))
    for c in range(CITIES):
        table[c, c] = 0
    return table


def decode(action: int) -> tuple[int, int]:
    """Action index -> (pick-up city, drop city)."""
    return divmod(int(action), CITIES)


class ContosoCabs(gym.Env[np.ndarray, np.int64]):
    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        cfg = {**DEFAULTS, **(config or {})}
        self.revenue = float(cfg["revenue_per_hour"])
        self.cost = float(cfg["cost_per_hour"])
        self.episode_hours = int(cfg["episode_hours"])
        rates = np.asarray(cfg["request_rates"], dtype=np.float64)
        if rates.shape != (CITIES,):
            raise ValueError(f"request_rates: expected {CITIES} rates, got {rates.shape}")
        self.request_rates = rates
        self.max_requests = int(cfg["max_requests"])
        # The 20 ride pairs (pick-up != drop) a request can be for.
        self.ride_pairs = np.array([a for a in range(NUM_ACTIONS) if len(set(decode(a))) == 2])
        self.travel = travel_table(int(cfg["travel_seed"]), int(cfg["max_travel_hours"]))
        self.observation_space = gym.spaces.Box(0.0, 1.0, (OBS_SIZE,), np.float32)
        self.action_space = gym.spaces.Discrete(NUM_ACTIONS)
        self.city = self.hour = self.day = self.elapsed = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(OBS_SIZE, dtype=np.float32)
        obs[self.city] = 1.0
        obs[CITIES + self.hour] = 1.0
        obs[CITIES + HOURS + self.day] = 1.0
        return obs

    def _advance(self, hours: int) -> None:
        total = self.hour + hours
        self.hour = total % HOURS
        self.day = (self.day + total // HOURS) % DAYS
        self.elapsed += hours

    def requests(self) -> np.ndarray:
        """This hour's requests reaching the driver's city: a Poisson number (capped), each for
        a random ride pair."""
        rng = self.np_random
        n = min(int(rng.poisson(self.request_rates[self.city])), self.max_requests)
        return rng.choice(self.ride_pairs, size=n, replace=True)

    def _requested(self, action: int) -> bool:
        return bool(np.any(self.requests() == action))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        rng = self.np_random
        self.city = int(rng.integers(CITIES))
        self.hour = int(rng.integers(HOURS))
        self.day = int(rng.integers(DAYS))
        self.elapsed = 0
        return self._obs(), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        pick_up, drop = decode(int(action))
        if pick_up == drop or not self._requested(int(action)):
            reward, hours, ride = -self.cost, 1, False
            self._advance(1)
        else:
            to_pick_up = int(self.travel[self.city, pick_up, self.hour, self.day])
            self._advance(to_pick_up)
            # The ride leaves when the cab reaches the pick-up city: its hour, its day.
            riding = int(self.travel[pick_up, drop, self.hour, self.day])
            self._advance(riding)
            reward = self.revenue * riding - self.cost * (to_pick_up + riding)
            hours, ride = to_pick_up + riding, True
            self.city = drop
        # A ride that runs past the month still pays in full: the month ends after it.
        truncated = self.elapsed >= self.episode_hours
        return self._obs(), float(reward), False, truncated, {"ride": ride, "hours": hours}
