"""Uniform: every valid start step is equally likely, whatever episode it belongs to."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .base import SamplerState, ValidStarts

if TYPE_CHECKING:
    from ..storage.ring import EpisodeStorage

__all__ = ["Uniform"]

_LUT_MIN_ROWS = 2048  # below this a plain binary search is as fast (its array stays in cache)


class Uniform:
    """Draws valid start steps uniformly, with replacement.

    One integer draw per sample picks a position ``u`` among all ``valid.total`` valid starts;
    the row holding it is found in the cumulative per-episode counts, recomputed only when the
    table changes (``O(rows)``). For large tables a lookup table of buckets of ``w`` positions
    (``w`` a power of two near half the mean episode count) gives each draw's row to within a
    step or two, and a vectorized fix-up finishes the job: about two random memory accesses per
    sample instead of a binary search's ``log2(E)``. The lookup table costs ``O(rows +
    buckets)`` to build, so it is built only for the *second* batch drawn from an unchanged
    table: add-then-sample loops (a new table every batch) binary-search, repeated sampling
    gets the table. Both find the same row, so draws do not depend on which is used. Cost is
    ``O(B)`` per batch otherwise; the lookup table takes ``4 / w`` bytes per valid start.
    Stateless otherwise.
    """

    def __init__(self) -> None:
        self._valid: ValidStarts | None = None
        self._total = 0
        self._rows = np.zeros(0, np.int64)  # rows with a valid start
        self._cum = np.zeros(0, np.int64)  # cumulative counts over those rows
        self._shift = np.zeros(0, np.int64)  # slot = u + shift[row]
        self._lut: np.ndarray | None = None
        self._bits = 0
        self._drawn = 0  # batches drawn since the table last changed

    def __repr__(self) -> str:
        return "Uniform()"

    def _prepare(self, valid: ValidStarts) -> None:
        count = valid.count
        rows = np.flatnonzero(count)
        cum = np.cumsum(count.take(rows))
        self._rows, self._cum = rows, cum
        # Position u of row r is slot first[r] + (u - (cum[r] - count[r])).
        self._shift = valid.first.take(rows) - cum + count.take(rows)
        self._total = int(cum[-1]) if len(cum) else 0
        self._lut = None  # built on the second batch drawn from this table (see sample)
        self._drawn = 0
        self._valid = valid

    def _build_lut(self) -> None:
        cum = self._cum
        mean = self._total / len(cum)
        self._bits = int(min(6, max(0, np.floor(np.log2(max(mean / 2, 1.0))))))
        # lut[j] is the first row whose cum exceeds j * w, i.e. the row holding position j * w.
        # Row r holds the buckets j with cum[r - 1] <= j * w < cum[r]: the j from
        # ceil(cum[r - 1] / w) to ceil(cum[r] / w) - 1. One repeat, O(rows + buckets).
        ends = (cum + ((1 << self._bits) - 1)) >> self._bits  # ceil(cum / w)
        self._lut = np.repeat(np.arange(len(cum), dtype=np.int32), np.diff(ends, prepend=0))

    def sample(
        self,
        storage: EpisodeStorage,
        batch_size: int,
        rng: np.random.Generator,
        valid: ValidStarts,
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """``batch_size`` valid starts drawn uniformly with replacement, and their table rows in
        ``info``.

        Args:
            storage: Unused: ``valid`` says everything the draw needs.
            batch_size: How many slots to draw (with replacement).
            rng: The buffer's generator; one ``rng.random(batch_size)`` call per batch.
            valid: The valid starts; a new object (a changed table) rebuilds the cumulative
                counts, the same object reuses them.

        Returns:
            int64 ``[batch_size]`` slots, and ``info`` with ``"rows"``: the table row of each.
        """
        if valid is not self._valid:
            self._prepare(valid)
        # floor(U[0, 1) * total) is uniform on 0..total - 1 up to 2**-53 (and never total: the
        # product of a double below 1 and an integer below 2**53 rounds below it); it costs a
        # third of rng.integers.
        u = (rng.random(batch_size) * self._total).astype(np.int64)
        cum = self._cum
        self._drawn += 1
        if self._lut is None and self._drawn == 2 and len(cum) >= _LUT_MIN_ROWS:
            self._build_lut()
        if self._lut is None:
            r = cum.searchsorted(u, side="right")
        else:
            r = self._lut.take(u >> self._bits)
            while True:  # advance draws whose row ends before them; a step or two at most
                behind = cum.take(r) <= u
                if not behind.any():
                    break
                r += behind
        return u + self._shift.take(r), {"rows": self._rows.take(r)}

    def on_add(self, storage: EpisodeStorage, slots: np.ndarray) -> None:
        """Nothing to do: the buffer's ``valid`` already says what is sampleable.

        Args:
            storage: Unused.
            slots: Unused.
        """

    def on_evict(self, storage: EpisodeStorage, slots: np.ndarray) -> None:
        """Nothing to do: the next ``valid`` leaves the evicted slots out.

        Args:
            storage: Unused.
            slots: Unused.
        """

    def state(self) -> SamplerState:
        """An empty state: draws come only from the buffer's generator."""
        return {}

    def set_state(self, state: SamplerState) -> None:
        """Forgets the cached valid starts.

        Args:
            state: Ignored (:meth:`state` is empty).
        """
        self._valid = None
