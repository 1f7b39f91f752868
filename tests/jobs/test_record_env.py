"""``record_env`` closes the env it made however it ends; ``DatasetInfo.env_id`` of a spec without
an ``id`` is None (not the string "None"), as ``convert``'s stats record it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from offline_prelearner.episodes.episode import Episode
from offline_prelearner.errors import ConfigError
from offline_prelearner.jobs.convert import convert_path
from offline_prelearner.jobs.dataset_info import DatasetInfo
from offline_prelearner.jobs.record import record_env


class CountsCloses(gym.Env[np.ndarray, int]):
    """A tiny real env that counts how often it was closed (over every instance)."""

    closed = 0
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action: int) -> Any:
        return np.full(2, 0.5, np.float32), 1.0, False, False, {}

    def close(self) -> None:
        type(self).closed += 1


@pytest.fixture
def counting_env() -> Any:
    env_id = "CountsCloses-v0"
    gym.register(env_id, entry_point=CountsCloses)
    CountsCloses.closed = 0
    yield env_id
    gym.registry.pop(env_id)


def test_the_env_is_closed_when_the_policy_is_refused(counting_env: str) -> None:
    with pytest.raises(ConfigError, match="policy must be 'random' or 'heuristic'"):
        record_env(counting_env, 5, policy="greedy")
    assert CountsCloses.closed == 1
    with pytest.raises(ConfigError, match="no heuristic policy"):
        record_env(counting_env, 5, policy="heuristic")
    assert CountsCloses.closed == 2


def test_the_env_is_closed_after_recording(counting_env: str) -> None:
    rec = record_env(counting_env, 5)
    assert [len(e) for e in rec.episodes] == [5] and rec.episodes[0].truncated
    assert CountsCloses.closed == 1


def test_env_id_of_a_spec_without_an_id_is_none(tmp_path: Path) -> None:
    pytest.importorskip("h5py")
    from offline_prelearner.io.formats.minari.writer import write_minari_dataset

    assert DatasetInfo(env_spec=json.dumps({"entry_point": "x:Y"})).env_id is None
    assert DatasetInfo(env_spec=json.dumps({"id": "CartPole-v1"})).env_id == "CartPole-v1"
    ep = Episode(
        id="e",
        observations=np.zeros((4, 2), np.float32),
        actions=np.array([0, 1, 0]),
        rewards=np.ones(3, np.float32),
        terminated=True,
    )
    spec = json.dumps({"entry_point": "x:Y", "max_episode_steps": 10})  # no "id"
    write_minari_dataset(tmp_path / "src", [ep], "ns/noid-v0", env_spec=spec)
    stats = convert_path(tmp_path / "src", "rows", tmp_path / "rows")
    assert stats["env_spec"] is None
