"""The sample-unit protocol carries what the buffer used to pick by type: frame stacking over any
unit (``expand(..., frames=k)``) and the unit's per-slot cache (``step_table()``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from buffer_helpers import make_episode

from offline_prelearner.errors import ConfigError
from offline_prelearner.replay import EpisodeReplayBuffer
from offline_prelearner.replay.batch import SampleBatch
from offline_prelearner.replay.storage.ring import EpisodeStorage
from offline_prelearner.replay.units import NStep, Transition
from offline_prelearner.replay.units.n_step import FixedNStepTable
from offline_prelearner.replay.units.stack import FrameStack


@dataclass(frozen=True)
class Scaled:
    """A user's unit (no built-in base): transitions with rewards times ``scale``."""

    scale: float = 2.0

    def valid_starts(self, lengths: np.ndarray, done: np.ndarray) -> np.ndarray:
        return Transition().valid_starts(lengths, done)

    def expand(
        self,
        slots: np.ndarray,
        rows: np.ndarray,
        storage: EpisodeStorage,
        rng: np.random.Generator,
        frames: int | None = None,
    ) -> SampleBatch:
        batch = Transition().expand(slots, rows, storage, rng, frames=frames)
        batch["rewards"] = batch["rewards"] * self.scale
        return batch

    def step_table(self) -> None:
        return None


def _episodes() -> list:
    return [make_episode(i, 6 + i, seed=i) for i in range(5)]


def _sample(unit: object, n: int = 64) -> SampleBatch:
    buf = EpisodeReplayBuffer(200, unit=unit, seed=3)  # type: ignore[arg-type]
    buf.add(_episodes())
    return buf.sample(n)


def test_frame_stack_over_a_user_defined_unit() -> None:
    mine, ref = _sample(FrameStack(3, Scaled())), _sample(FrameStack(3, Transition()))
    assert mine["obs"].shape == (64, 3, 2) and mine["new_obs"].shape == (64, 3, 2)
    np.testing.assert_array_equal(mine["obs"], ref["obs"])
    np.testing.assert_array_equal(mine["new_obs"], ref["new_obs"])
    np.testing.assert_allclose(mine["rewards"], 2 * ref["rewards"])


def test_frame_stack_refuses_what_is_not_a_unit() -> None:
    with pytest.raises(ConfigError, match="SampleUnit protocol"):
        FrameStack(2, object())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="k must be"):
        FrameStack(True)  # type: ignore[arg-type]


@dataclass(frozen=True)
class MyNStep(NStep):
    """A subclass of NStep: it keeps the precomputed table (``type(unit) is NStep`` lost it)."""


def test_a_subclass_of_nstep_keeps_its_table() -> None:
    assert isinstance(MyNStep(3, 0.9).step_table(), FixedNStepTable)
    assert NStep((1, 3), 0.9).step_table() is None and NStep(1).step_table() is None
    assert FrameStack(2, NStep(3)).step_table() is None
    mine, ref = _sample(MyNStep(3, 0.9)), _sample(NStep((3, 3), 0.9))  # table vs range path
    for k in ("obs", "new_obs", "rewards", "terminateds", "truncateds", "n_step"):
        np.testing.assert_allclose(mine[k], ref[k], rtol=1e-6)
