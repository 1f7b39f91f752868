"""Validation of composite (Dict / Tuple, nested) observations leaf by leaf: the batched path (one
vector pass per leaf over a batch's episodes) decides exactly what checking each episode on its
own decides -- same kept episodes, errors, ledger, warnings -- for every policy and check."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_validate_batch import batched_equals_each_episode, draw_batches

from offline_prelearner.config import ValidateConfig
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.episodes.episode_columns import EpisodeColumns
from offline_prelearner.episodes.ledger import EpisodeBatch, Ledger
from offline_prelearner.episodes.validate import SpaceCheck, Validator
from offline_prelearner.errors import EpisodeValidationError

SPACE = gym.spaces.Dict(
    {
        "goal": gym.spaces.Dict(
            {"pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32), "id": gym.spaces.Discrete(4)}
        ),
        "pair": gym.spaces.Tuple(
            (gym.spaces.Box(0.0, 10.0, (3,), np.float32), gym.spaces.MultiBinary(2))
        ),
    }
)
KINDS = [
    "good", "good", "good", "good", "short", "empty", "open", "nan_reward", "nan_leaf",
    "pos_out", "id_out", "binary_out", "missing_leaf", "extra_leaf", "leaf_shape", "leaf64",
    "plain_obs", "act_out",
]  # fmt: skip


def episode(kind: str, k: int, n: int) -> Episode:
    rng = np.random.default_rng(k)
    n = 0 if kind == "empty" else 1 if kind == "short" else n
    obs: dict[str, Any] = {
        "goal.pos": rng.uniform(-1, 1, (n + 1, 2)).astype(np.float32),
        "goal.id": rng.integers(0, 4, n + 1),
        "pair.0": rng.uniform(0, 10, (n + 1, 3)).astype(np.float32),
        "pair.1": rng.integers(0, 2, (n + 1, 2)).astype(np.int8),
    }
    rewards = np.ones(n)
    actions = rng.integers(0, 2, n)
    at = int(rng.integers(n + 1))
    if kind == "nan_reward" and n:
        rewards[-1] = np.nan
    if kind == "nan_leaf":
        obs["pair.0"][at, 1] = np.nan
    if kind == "pos_out":
        obs["goal.pos"][at, 0] = 1.5
    if kind == "id_out":
        obs["goal.id"][at] = 4
    if kind == "binary_out":
        obs["pair.1"][at, 1] = 2
    if kind == "missing_leaf":
        del obs["goal.id"]
    if kind == "extra_leaf":
        obs["goal.extra"] = np.zeros(n + 1)
    if kind == "leaf_shape":
        obs["pair.0"] = obs["pair.0"][:, :2]
    if kind == "leaf64":
        obs["goal.pos"] = obs["goal.pos"].astype(np.float64)
    if kind == "act_out" and n:
        actions[-1] = 5
    return Episode(
        id=f"{kind}-{k}",
        observations=obs["pair.0"] if kind == "plain_obs" else obs,
        actions=actions,
        rewards=rewards,
        terminated=kind != "open",
    )


@st.composite
def cases(draw: st.DrawFn) -> tuple[dict[str, Any], list[list[Episode]]]:
    cfg: dict[str, Any] = {
        # quarantine: each refused episode also goes through the rows writer (leaf columns)
        "on_invalid": draw(st.sampled_from(["skip", "quarantine", "raise"])),
        "require_done": draw(st.booleans()),
        "check_finite_obs": draw(st.booleans()),
        "min_length": draw(st.integers(0, 2)),
    }
    if draw(st.booleans()):
        cfg["observation_space"] = SPACE
    if draw(st.booleans()):
        cfg["action_space"] = gym.spaces.Discrete(2)
    return cfg, draw_batches(draw, KINDS, episode, max_len=6, max_size=20)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_batched_leaf_checks_equal_checking_each_episode(
    case: tuple[dict[str, Any], list[list[Episode]]],
) -> None:
    batched_equals_each_episode(*case)


def test_a_clean_composite_batch_never_calls_check() -> None:
    calls = []

    class Counting(Validator):
        def check(self, ep: Episode) -> EpisodeValidationError | None:
            calls.append(ep.id)
            return super().check(ep)

    v = Counting(ValidateConfig(check_finite_obs=True, observation_space=SPACE), "skip")
    eps = [episode("good", k, 5) for k in range(20)] + [episode("pos_out", 99, 5)]
    batch = v.validate(
        EpisodeBatch(EpisodeColumns.from_episodes(eps), [6] * 21, Ledger(rows_in=126))
    )
    assert calls == ["good-0", "pos_out-99"]  # the first fixes the layout
    assert len(batch.episodes) == 20 and batch.ledger.rows_rejected == {"out_of_space": 6}


def test_the_error_names_the_leaf_and_step() -> None:
    v = Validator(ValidateConfig(observation_space=SPACE))
    ep = episode("good", 1, 4)
    ep.observations["pair.1"][3, 0] = 3  # type: ignore[call-overload]
    batch = EpisodeBatch(EpisodeColumns.from_episodes([ep]), [5], Ledger(rows_in=5))
    try:
        v.validate(batch)
    except EpisodeValidationError as e:
        assert e.reason == "out_of_space" and e.where.column == "obs.pair.1"
        assert e.where.timestep == 3 and "obs.pair.1 at t=3" in str(e)
    else:
        raise AssertionError("not refused")


def test_space_check_rows_against_each_step() -> None:
    """SpaceCheck.rows_ok (one vector pass) against the space's own contains(), step by step."""
    rng = np.random.default_rng(0)
    for space in (gym.spaces.Box(-1.0, 2.0, (3,), np.float32), gym.spaces.Discrete(5, start=-2),
                  gym.spaces.MultiDiscrete([3, 4]), gym.spaces.MultiBinary(3)):  # fmt: skip
        x = np.stack([space.sample() for _ in range(50)])
        x[rng.integers(0, 50, 7)] += np.array(3, x.dtype)
        ok = SpaceCheck(space).rows_ok(x)
        want = np.array([space.contains(r) for r in x])
        got = np.ones(len(x), bool) if ok is None else ok
        assert isinstance(got, np.ndarray)
        np.testing.assert_array_equal(got, want, err_msg=str(space))
