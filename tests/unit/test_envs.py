"""The examples' environments: gymnasium's env checker, and the rules their READMEs state."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from support import REPO


def load(example: str, module: str) -> ModuleType:
    """An example's module, imported from its folder the way the job imports it."""
    folder = REPO / "examples" / example
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location(module, folder / f"{module}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module] = mod
    spec.loader.exec_module(mod)
    return mod


cabs = load("cabs", "contoso_cabs")
mobile = load("mobile", "mobile_ma")


@pytest.mark.filterwarnings("ignore:.*(spec|render).*")
def test_cabs_passes_gymnasiums_env_checker() -> None:
    check_env(cabs.ContosoCabs())


def test_cabs_spaces_and_observation() -> None:
    env = cabs.ContosoCabs()
    assert env.observation_space.shape == (36,) and env.action_space.n == 25
    obs, _ = env.reset(seed=3)
    assert obs.sum() == 3 and set(np.unique(obs)) == {0.0, 1.0}
    assert obs[env.city] == 1 and obs[5 + env.hour] == 1 and obs[5 + 24 + env.day] == 1


def test_cabs_no_ride_costs_one_idle_hour() -> None:
    env = cabs.ContosoCabs()
    env.reset(seed=0)
    for city in range(5):  # the same-city pairs
        hour, day, elapsed = env.hour, env.day, env.elapsed
        _, reward, _, _, info = env.step(np.int64(city * 5 + city))
        assert (reward, info["ride"], info["hours"]) == (-5.0, False, 1)
        assert env.elapsed == elapsed + 1 and env.hour == (hour + 1) % 24
        assert env.day == (day + (hour + 1) // 24) % 7


def test_cabs_ride_pays_ride_hours_and_costs_driving_hours() -> None:
    env = cabs.ContosoCabs({"request_rates": (50.0,) * 5})  # every pair requested
    env.reset(seed=1)
    start, hour, day = env.city, env.hour, env.day
    pick_up, drop = (start + 1) % 5, (start + 2) % 5
    to_pick_up = int(env.travel[start, pick_up, hour, day])
    total = hour + to_pick_up
    riding = int(env.travel[pick_up, drop, total % 24, (day + total // 24) % 7])
    _, reward, _, _, info = env.step(np.int64(pick_up * 5 + drop))
    assert info["ride"] and info["hours"] == to_pick_up + riding
    assert reward == 9 * riding - 5 * (to_pick_up + riding)
    assert env.city == drop and 1 <= riding <= 11


def test_cabs_unrequested_ride_is_no_ride() -> None:
    env = cabs.ContosoCabs({"request_rates": (0.0,) * 5})  # nobody ever asks
    env.reset(seed=1)
    _, reward, _, _, info = env.step(np.int64(1 * 5 + 2))
    assert (reward, info["ride"]) == (-5.0, False)


def test_cabs_month_ends_by_truncation_after_720_hours() -> None:
    env = cabs.ContosoCabs()
    env.reset(seed=0)
    steps, done = 0, False
    while not done:
        _, _, terminated, truncated, _ = env.step(np.int64(0))  # no ride: one hour each
        assert not terminated
        steps, done = steps + 1, truncated
    assert steps == 720 and env.elapsed == 720


def test_cabs_travel_table_is_fixed_by_its_seed() -> None:
    a, b = cabs.ContosoCabs().travel, cabs.ContosoCabs().travel
    assert a.shape == (5, 5, 24, 7) and np.array_equal(a, b)
    assert not np.array_equal(a, cabs.ContosoCabs({"travel_seed": 1}).travel)
    assert all((a[c, c] == 0).all() for c in range(5))
    assert a[0, 1].min() >= 1 and a.max() <= 11


def test_cabs_random_policy_loses_about_1100_a_month() -> None:
    env = cabs.ContosoCabs()
    returns = []
    for seed in range(10):
        env.reset(seed=seed)
        env.action_space.seed(seed)
        total, done = 0.0, False
        while not done:
            _, r, _, truncated, _ = env.step(env.action_space.sample())
            total, done = total + r, truncated
        returns.append(total)
    assert -1400 < float(np.mean(returns)) < -900


# Rewards are per-UE dicts (a multi-agent env): gymnasium's passive checker warns, and accepts.
@pytest.mark.filterwarnings("ignore:.*(spec|render|precision|float32|reward returned).*")
def test_mobile_passes_gymnasiums_env_checker() -> None:
    check_env(mobile.make("small"))


def test_mobile_reset_seed_is_deterministic_and_seeds_differ() -> None:
    """mobile-env 2.1.0 alone fails this: its reset ignores the seed."""
    env = mobile.MobileMultiAgent({"scenario": "small"})
    first, _ = env.reset(seed=3)
    again, _ = env.reset(seed=3)
    other, _ = env.reset(seed=4)
    assert first.keys() == again.keys()
    assert all(np.array_equal(first[k], again[k]) for k in first)
    assert any(not np.array_equal(first[k], other[k]) for k in first if k in other)


def test_mobile_agents_are_the_ues() -> None:
    env = mobile.MobileMultiAgent({"scenario": "small"})
    obs, _ = env.reset(seed=0)
    assert env.possible_agents == [0, 1, 2, 3, 4]
    assert set(obs) <= set(env.possible_agents)
    obs, rewards, _, truncateds, _ = env.step({ue: 0 for ue in obs})
    assert set(rewards) <= set(env.possible_agents) and "__all__" in truncateds
    with pytest.raises(ValueError, match="scenario"):
        mobile.make("huge")
