"""PrioritizedEpisodeReplayBuffer: an :class:`EpisodeReplayBuffer` with a prioritized sampler.

::

    buf = PrioritizedEpisodeReplayBuffer(1_000_000, Prioritized(0.6, 0.4), NStep(3, 0.99))
    buf.add(episodes)
    batch = buf.sample(256)                 # batch["weights"]: importance weights
    td = learner.update(batch)              # one TD error per row
    buf.update_priorities(batch["indices"], td)

Nothing here but the composition: storage, units, checkpoints and stats are the base buffer's;
sampling, weights and priorities are the sampler's
(:class:`~offline_prelearner.replay.samplers.prioritized.Prioritized`).
Priorities (and ``beta``) are part of :meth:`get_state` / :meth:`save`, so a loaded buffer draws
the same next sample as the one saved.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError
from .replay_buffer import EpisodeReplayBuffer
from .samplers.base import UpdatableSampler
from .samplers.prioritized import Prioritized
from .units.base import SampleUnit

__all__ = ["PrioritizedEpisodeReplayBuffer"]


class PrioritizedEpisodeReplayBuffer(EpisodeReplayBuffer):
    """Prioritized replay over episodes.

    Args:
        capacity: Slots of ring storage: timesteps plus one final observation per episode.
        sampler: Any :class:`~offline_prelearner.replay.samplers.base.UpdatableSampler`; default
            ``Prioritized()`` (alpha 0.6, beta 0.4, eps 1e-6, stratified).
        unit: What each step expands into (default ``Transition()``).
        seed: Seed of the buffer's random generator.
        learning_starts: No samples before this many timesteps were added.
    """

    sampler: UpdatableSampler

    def __init__(
        self,
        capacity: int,
        sampler: UpdatableSampler | None = None,
        unit: SampleUnit | None = None,
        *,
        seed: int | None = None,
        learning_starts: int = 0,
    ) -> None:
        sampler = Prioritized() if sampler is None else sampler
        if not isinstance(sampler, UpdatableSampler):
            raise ConfigError(
                "sampler of a PrioritizedEpisodeReplayBuffer must implement update_priorities "
                f"(UpdatableSampler), found {type(sampler).__name__}"
            )
        super().__init__(capacity, sampler, unit, seed=seed, learning_starts=learning_starts)
        if isinstance(sampler, Prioritized):  # its trees now, as the capacity is known
            sampler.reserve(self.capacity)

    def update_priorities(self, indices: npt.ArrayLike, priorities: npt.ArrayLike) -> int:
        """New priorities for sampled rows: ``indices`` is a sample's ``"indices"`` column,
        ``priorities`` one TD error (or priority) per row. Rows whose episode was evicted or
        moved since they were sampled are ignored. Returns how many were applied.

        Args:
            indices: int64 handles, the ``"indices"`` column of a :meth:`sample` (any shape).
            priorities: One TD error or priority per handle, same shape; the sampler stores
                ``|x| + eps`` (the last of duplicate handles wins).

        Returns:
            How many priorities were applied (stale handles are counted in :meth:`stats`).

        Raises:
            TypeError: ``indices`` are not integers (another column was passed).
            ValueError: The shapes differ, or a priority is NaN or infinite (nothing applied).
        """
        return self.sampler.update_priorities(
            self.storage, np.asarray(indices), np.asarray(priorities)
        )

    def stats(self) -> dict[str, int]:
        """The base counters plus ``priority_updates`` applied and ``priority_updates_stale``."""
        out = super().stats()
        out["priority_updates"] = int(getattr(self.sampler, "updates_applied", 0))
        out["priority_updates_stale"] = int(getattr(self.sampler, "updates_stale", 0))
        return out
