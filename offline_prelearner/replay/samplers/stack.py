"""FrameStack: stacks of the last ``k`` observations, built at sample time from single frames.

Pixel data is stored once, one frame per slot; ``FrameStack(4)`` turns each sampled ``obs`` (and
``new_obs``) into ``[B, 4, *frame_shape]``: the frames of steps ``t - 3 .. t`` in order, oldest
first. Near an episode's start the missing older frames repeat the episode's first stored frame
(never a frame of another episode). It wraps another unit -- ``Transition()`` (default),
``NStep(...)`` or ``Sequence(...)`` (then ``[B, W, k, *frame_shape]``) -- and leaves its semantics
otherwise unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ...errors import ConfigError
from .n_step import NStep
from .sequence import Sequence
from .transition import Transition

if TYPE_CHECKING:
    from ..batch import SampleBatch
    from ..storage import EpisodeStorage

__all__ = ["FrameStack"]


@dataclass(frozen=True)
class FrameStack:
    """``k`` stacked observations around the samples of ``unit``."""

    k: int
    unit: Transition | NStep | Sequence = field(default_factory=Transition)

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, (int, np.integer)) or self.k < 1:
            raise ConfigError(f"k must be an int >= 1, found {self.k!r}")
        object.__setattr__(self, "k", int(self.k))
        if not isinstance(self.unit, (Transition, NStep, Sequence)):
            raise ConfigError(
                f"unit must be Transition, NStep or Sequence, found {type(self.unit).__name__}"
            )

    def valid_starts(self, lengths: np.ndarray, done: np.ndarray) -> np.ndarray:
        return self.unit.valid_starts(lengths, done)

    def expand(
        self,
        slots: np.ndarray,
        rows: np.ndarray,
        storage: EpisodeStorage,
        rng: np.random.Generator,
    ) -> SampleBatch:
        return self.unit.expand(slots, rows, storage, rng, frames=self.k)
