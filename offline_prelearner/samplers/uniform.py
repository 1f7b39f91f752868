"""Uniform: every valid start step is equally likely, whatever episode it belongs to."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .base import SamplerState, ValidStarts

if TYPE_CHECKING:
    from ..buffers.storage import EpisodeStorage

__all__ = ["Uniform"]


class Uniform:
    """Draws valid start steps uniformly, with replacement.

    One integer draw per sample picks a position among all ``valid.total`` valid starts; a binary
    search in the per-episode cumulative counts (recomputed only when the table changes) turns it
    into an episode row and an offset: ``O(B log E)`` per batch, independent of the capacity.
    Stateless apart from that cache.
    """

    def __init__(self) -> None:
        self._valid: ValidStarts | None = None
        self._cum = np.zeros(0, np.int64)

    def __repr__(self) -> str:
        return "Uniform()"

    def sample(
        self,
        storage: EpisodeStorage,
        batch_size: int,
        rng: np.random.Generator,
        valid: ValidStarts,
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        if valid is not self._valid:
            self._cum = np.cumsum(valid.count)
            self._valid = valid
        cum = self._cum
        u = rng.integers(0, cum[-1], size=batch_size)
        rows = cum.searchsorted(u, side="right")
        slots = valid.first.take(rows) + (u - cum.take(rows) + valid.count.take(rows))
        return slots, {"rows": rows}

    def on_add(self, storage: EpisodeStorage, slots: np.ndarray) -> None:
        """Nothing to do: the buffer's ``valid`` already says what is sampleable."""

    def on_evict(self, storage: EpisodeStorage, slots: np.ndarray) -> None:
        """Nothing to do."""

    def state(self) -> SamplerState:
        return {}

    def set_state(self, state: SamplerState) -> None:
        self._valid = None
