"""FrameStack: stacks of the last ``k`` observations, built at sample time from single frames.

Pixel data is stored once, one frame per slot; ``FrameStack(4)`` turns each sampled ``obs`` (and
``new_obs``) into ``[B, 4, *frame_shape]``: the frames of steps ``t - 3 .. t`` in order, oldest
first. Near an episode's start the missing older frames repeat the episode's first stored frame
(never a frame of another episode). It wraps any :class:`~.base.SampleUnit` -- ``Transition()``
(default), ``NStep(...)``, ``Sequence(...)`` (then ``[B, W, k, *frame_shape]``) or one of your
own -- through the protocol's ``expand(..., frames=k)``, and leaves its semantics otherwise
unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ...config import MAX_FRAME_STACK, check_int
from ...errors import ConfigError
from .base import SampleUnit
from .transition import Transition

if TYPE_CHECKING:
    from ..batch import SampleBatch
    from ..storage.ring import EpisodeStorage

__all__ = ["FrameStack"]


@dataclass(frozen=True)
class FrameStack:
    """``k`` stacked observations around the samples of ``unit``.

    Attributes:
        k: Observations per stack, in ``[1, MAX_FRAME_STACK]``; frames before an episode's
            start repeat its first frame.
        unit: What each start expands into (default :class:`Transition`); any
            :class:`SampleUnit`.

    Raises:
        ConfigError: ``k`` out of range, or ``unit`` not a :class:`SampleUnit`.
    """

    k: int
    unit: SampleUnit = field(default_factory=Transition)

    def __post_init__(self) -> None:
        k = int(self.k) if isinstance(self.k, np.integer) else self.k
        object.__setattr__(self, "k", check_int("k", k, 1, MAX_FRAME_STACK))
        if not isinstance(self.unit, SampleUnit):
            raise ConfigError(
                f"unit must implement the SampleUnit protocol, found {type(self.unit).__name__}"
            )

    def valid_starts(self, lengths: np.ndarray, done: np.ndarray) -> np.ndarray:
        """The wrapped unit's valid starts: stacking needs no more steps.

        Args:
            lengths: int stored steps of each episode (``[episodes]``).
            done: bool per episode, True when it terminated or was truncated (its last stored
                step is its last step).

        Returns:
            int64 ``[episodes]``: how many of each episode's first steps may start a sample.
        """
        return self.unit.valid_starts(lengths, done)

    def step_table(self) -> None:
        """None: a unit's cache holds single frames; the stacks are gathered per draw."""
        return None

    def expand(
        self,
        slots: np.ndarray,
        rows: np.ndarray,
        storage: EpisodeStorage,
        rng: np.random.Generator,
        frames: int | None = None,
    ) -> SampleBatch:
        """The wrapped unit's batch with every observation column a stack of ``k``
        observations.

        Args:
            slots: int64 ``[B]`` start slots, valid starts of ``storage`` as it is now.
            rows: int64 ``[B]`` table rows of those slots (their episodes).
            storage: The storage to gather from.
            rng: Passed to the wrapped unit.
            frames: Must be None: this unit stacks ``k`` frames itself.

        Returns:
            The wrapped unit's batch, observations as ``[..., k, *obs_shape]`` stacks.

        Raises:
            ConfigError: ``frames`` was given (a FrameStack wrapped in another).
        """
        if frames is not None:
            raise ConfigError("FrameStack stacks frames itself; wrap the inner unit once")
        return self.unit.expand(slots, rows, storage, rng, frames=self.k)
