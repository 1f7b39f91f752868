"""InOrder: every valid start slot once, in episode (table) order; for ``sample_all`` jobs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .base import SamplerState, ValidStarts

if TYPE_CHECKING:
    from ..storage.ring import EpisodeStorage

__all__ = ["InOrder"]


class InOrder:
    """Draws the first ``batch_size`` valid start slots, episode by episode, step by step.

    Not random and not a replay sampler: used on a buffer that holds exactly the episodes to emit
    (``sample(valid_starts().total)`` gives each valid transition or sequence once).
    """

    def __repr__(self) -> str:
        return "InOrder()"

    def sample(
        self,
        storage: EpisodeStorage,
        batch_size: int,
        rng: np.random.Generator,
        valid: ValidStarts,
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The first ``batch_size`` valid starts, episodes in placement (ring) order; no weights.

        Args:
            storage: Unused: the order comes from ``valid``.
            batch_size: How many slots to return; fewer come back if ``valid.total`` is smaller.
            rng: Unused: the sampler is deterministic.
            valid: The valid starts of every table row.

        Returns:
            The slots (int64, at most ``batch_size``), and an empty info dict.
        """
        order = np.argsort(valid.first, kind="stable")  # table rows in ring (placement) order
        slots = valid.__class__(valid.first[order], valid.count[order], valid.version).slots()
        return slots[:batch_size], {}

    def on_add(self, storage: EpisodeStorage, slots: np.ndarray) -> None:
        """Nothing to learn: the order comes from the valid starts.

        Args:
            storage: Unused.
            slots: Unused.
        """
        pass

    def on_evict(self, storage: EpisodeStorage, slots: np.ndarray) -> None:
        """Nothing to forget: the order comes from the valid starts.

        Args:
            storage: Unused.
            slots: Unused.
        """
        pass

    def state(self) -> SamplerState:
        """An empty state: the sampler keeps nothing."""
        return {}

    def set_state(self, state: SamplerState) -> None:
        """Nothing to restore.

        Args:
            state: Ignored (:meth:`state` is empty).
        """
        pass
