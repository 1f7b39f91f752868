"""The sampler protocol: a :class:`Sampler` chooses WHICH steps; a sample unit
(:mod:`offline_prelearner.replay.units.base`) says WHAT each chosen step expands into. Any sampler
works with any unit; the buffer (``replay/replay_buffer.py``) composes them.

Vocabulary shared by every sampler and unit:

* **slot** -- an index into the storage's ring arrays, ``0 <= slot < storage.capacity``. An episode
  of ``L`` steps occupies ``L + 1`` contiguous slots ``start .. start + L`` (its ``L + 1``
  observations; actions, rewards and extras at the last slot are padding), so the step after slot
  ``i`` is slot ``i + 1`` and every window is index arithmetic.
* **row** -- an index into the storage's episode table (``storage.starts``, ``storage.lengths``,
  ...) as of the current ``storage.version``. Rows move when the table changes; never keep them.
* **valid start** -- a slot a sample may start at, given the unit. For every episode the valid
  starts are a *prefix* of its steps: offsets ``0 .. count - 1`` where ``count =
  unit.valid_starts(L, done)`` (units look forward, so only the tail of an unfinished episode can
  be unsampleable: the steps whose window is not stored yet). :class:`ValidStarts` lists them for
  all rows.
* **handle** -- an opaque int64 naming one sampled slot *and* the placement of the episode that
  held it (``storage.handles(slots, rows)``). ``storage.resolve(handles)`` gives back the slots and
  a mask that is False where the episode was evicted or moved since sampling, so priority updates
  for stale samples are dropped instead of landing on whatever now lives in that slot.

A sampler's life: ``on_add(storage, slots)`` is called with slots that just became valid starts
(new episodes, or the newly complete tail of a streaming episode); ``on_evict(storage, slots)``
with valid starts that stopped being valid (evicted episodes; the old place of an episode moved to
the head to be continued, which is then re-added at its new place). Between those calls the set of
valid starts is exactly what ``valid`` describes. ``sample`` is only called when ``valid.total >
0``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from ..storage.ring import EpisodeStorage

__all__ = [
    "Sampler",
    "SamplerState",
    "UpdatableSampler",
    "ValidStarts",
    "ranges",
]

#: What ``Sampler.state()`` returns: flat, numpy arrays only (0-d arrays for scalars), so a
#: checkpoint stores it as ``.npy`` files without pickle.
SamplerState = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class ValidStarts:
    """The valid start slots of every row of the episode table, at one storage version.

    Row ``r`` may start a sample at slots ``first[r] .. first[r] + count[r] - 1``; ``count`` is 0
    for rows whose episode is gone (the table keeps such rows until they age out).
    """

    first: np.ndarray  # int64 [rows]
    count: np.ndarray  # int64 [rows]
    version: int  # storage.version these were computed at

    @cached_property
    def total(self) -> int:
        """How many slots may start a sample."""
        return int(self.count.sum())

    def slots(self) -> np.ndarray:
        """All valid start slots, row by row (int64)."""
        return ranges(self.first, self.count)


def ranges(first: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(f, f + c)`` for each pair, without a Python loop (int64).

    Args:
        first: Start slot of each range (converted to int64), one per range.
        count: Length of each range, same shape as ``first``; a range of 0 contributes nothing.

    Returns:
        The slots of every range, in order, as one int64 array of ``count.sum()`` entries.
    """
    first = np.asarray(first, dtype=np.int64)
    count = np.asarray(count, dtype=np.int64)
    if first.shape == (1,):  # one range (one episode added): no repeat needed
        return np.arange(first[0], first[0] + max(int(count[0]), 0), dtype=np.int64)
    total = int(count.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    keep = count > 0
    first, count = first[keep], count[keep]
    ends = np.cumsum(count)
    # Each range contributes first[i] + (position - ends[i-1]).
    shift = np.repeat(first - (ends - count), count)
    out: np.ndarray = np.arange(total, dtype=np.int64) + shift
    return out


@runtime_checkable
class Sampler(Protocol):
    """Chooses which valid start slots a batch draws.

    ``sample`` returns ``(slots, info)``: ``slots`` int64 ``[batch_size]`` (valid starts), ``info``
    a dict of per-sample arrays. Known keys: ``"weights"`` (float32 ``[batch_size]``, importance
    weights; 1 when absent) and ``"rows"`` (int64 table rows of the slots, if the sampler knows them
    anyway; saves the unit a lookup). Randomness comes only from ``rng`` (the buffer's generator),
    so a checkpointed buffer replays the same draws.
    """

    def sample(
        self,
        storage: EpisodeStorage,
        batch_size: int,
        rng: np.random.Generator,
        valid: ValidStarts,
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """``(slots, info)`` for ``batch_size`` draws among ``valid`` (see the class docstring).

        Args:
            storage: The storage the slots index (its capacity, table and placement serials).
            batch_size: How many slots to draw (> 0); draws are with replacement unless the
                sampler says otherwise.
            rng: The buffer's generator, the only source of randomness.
            valid: The valid starts of every table row at the storage's current version;
                ``valid.total > 0`` is guaranteed by the caller.

        Returns:
            ``slots`` (int64 ``[batch_size]``) and ``info``, a dict of per-sample arrays
            (``"weights"``, ``"rows"``; see the class docstring).
        """

    def on_add(self, storage: EpisodeStorage, slots: np.ndarray) -> None:
        """Learns that ``slots`` became valid starts.

        Args:
            storage: The storage the slots belong to (its ``capacity`` sizes per-slot state).
            slots: int64 slots that just became valid starts (new episodes, or the newly
                complete tail of a streaming episode).
        """

    def on_evict(self, storage: EpisodeStorage, slots: np.ndarray) -> None:
        """Learns that ``slots`` no longer hold data.

        Args:
            storage: The storage the slots belong to.
            slots: int64 slots that stopped being valid starts (evicted episodes, or the old
                place of an episode moved to the head).
        """

    def state(self) -> SamplerState:
        """The sampler's state as arrays and numbers, for a checkpoint."""

    def set_state(self, state: SamplerState) -> None:
        """Restores what :meth:`state` returned.

        Args:
            state: A mapping of name to numpy array, as :meth:`state` produced it (possibly
                read back from a checkpoint's ``.npy`` files).
        """


@runtime_checkable
class UpdatableSampler(Sampler, Protocol):
    """A sampler that learns from feedback (prioritized replay).

    ``update_priorities`` takes the ``indices`` column of a sample (handles, see the module
    docstring) and one priority per handle; handles that ``storage.resolve`` reports stale are
    ignored. Returns how many were applied.
    """

    def update_priorities(
        self, storage: EpisodeStorage, handles: np.ndarray, priorities: np.ndarray
    ) -> int:
        """Sets the priorities of the samples ``handles`` names; returns how many were current.

        Args:
            storage: The storage that issued the handles; ``storage.resolve`` tells which are
                still current.
            handles: int64 handles, the ``indices`` column of a sample.
            priorities: One priority (or TD error) per handle, same length as ``handles``.

        Returns:
            How many handles were current, and so applied.
        """
