"""The sample-unit protocol: a :class:`SampleUnit` says WHAT each step a sampler chose expands
into (one transition, an n-step transition, a sequence, a frame stack), and a :class:`StepTable`
is the per-slot cache a unit may keep; plus the gathering helpers the units share.

Slots, rows and valid starts are the words of :mod:`offline_prelearner.replay.samplers.base`. A unit
reads the storage (:mod:`offline_prelearner.replay.storage`) and hands out a
:class:`~offline_prelearner.replay.batch.SampleBatch`; it never knows which sampler drew the slots.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from ...episodes import columns as C

if TYPE_CHECKING:
    from ...episodes.episode_columns import EpisodeColumns
    from ..batch import SampleBatch
    from ..storage.ring import EpisodeStorage

__all__ = [
    "AllSteps",
    "ExpandsAll",
    "SampleUnit",
    "StepTable",
    "episode_columns",
    "ones",
    "stack_index",
]


class StepTable(Protocol):
    """A per-slot cache a unit keeps in step with the buffer's valid starts (NStep's n-step
    returns, precomputed at add time so that a draw only gathers).

    The buffer feeds it the slots that become valid starts (``on_add``, the same slots its sampler
    gets), and again the ``refresh_from(first)`` slots before a placement's new starts (their
    windows may have changed when a fragment joined); ``rebuild`` after a restore. ``expand``
    gives what the unit's own ``expand`` would.
    """

    def refresh_from(self, first: np.ndarray) -> np.ndarray:
        """Slots from which windows are recomputed, given each new placement's ``first`` slot.

        Args:
            first: int64 slot of each new placement's first new valid start.

        Returns:
            int64 slots, one per placement, from which the cache is refilled (may lie before
            ``first``: earlier windows can change when a fragment joins).
        """

    def on_add(self, storage: EpisodeStorage, slots: np.ndarray) -> None:
        """Fills the cache for ``slots``, which just became valid starts.

        Args:
            storage: The storage as it is now (the slots' episodes are in its table).
            slots: int64 slots that just became valid starts.
        """

    def rebuild(self, storage: EpisodeStorage, slots: np.ndarray) -> None:
        """Refills the cache for ``slots`` (after a restore).

        Args:
            storage: The restored storage.
            slots: int64 every valid start of the restored storage.
        """

    def expand(self, slots: np.ndarray, rows: np.ndarray, storage: EpisodeStorage) -> SampleBatch:
        """The batch for start ``slots`` in table ``rows``, from the cache.

        Args:
            slots: int64 ``[B]`` start slots, valid starts of ``storage`` as it is now.
            rows: int64 ``[B]`` table rows of those slots (their episodes).
            storage: The storage to gather from.

        Returns:
            What the unit's own ``expand`` gives for these slots (without frames).
        """


@runtime_checkable
class SampleUnit(Protocol):
    """What one chosen start step expands into.

    ``valid_starts(lengths, done)`` is vectorized over episodes: for each episode of ``lengths[i]``
    stored steps (``done[i]``: terminated or truncated) how many of its first steps may start a
    sample. For a finished episode that is usually every step; for an unfinished one only the steps
    whose whole window is stored (the rest become valid when the episode continues).

    ``expand(slots, rows, storage, rng, frames=None)`` gathers the batch for those start slots
    (``rows`` are their table rows) with index arrays, no per-sample loop; ``rng`` is for units
    that draw something per sample (an n-step range). With ``frames=k`` every observation column
    comes back as the stack of the last ``k`` observations (``[B, k, *obs_shape]``, older frames
    clipped at the episode's first slot: :func:`stack_index`); that is how
    :class:`~.stack.FrameStack` stacks frames over any unit.

    ``step_table()`` is the unit's per-slot cache (a :class:`StepTable`) the buffer keeps and
    draws from instead of ``expand``, or None (the usual answer): a fresh one per call, since
    each buffer holds its own.
    """

    def valid_starts(self, lengths: np.ndarray, done: np.ndarray) -> np.ndarray:
        """Per episode, how many of its first steps may start a sample (see the class docstring).

        Args:
            lengths: int stored steps of each episode (``[episodes]``).
            done: bool per episode, True when it terminated or was truncated (its last stored
                step is its last step).

        Returns:
            int64 ``[episodes]``: how many of each episode's first steps may start a sample.
        """

    def expand(
        self,
        slots: np.ndarray,
        rows: np.ndarray,
        storage: EpisodeStorage,
        rng: np.random.Generator,
        frames: int | None = None,
    ) -> SampleBatch:
        """The batch for start ``slots`` (see the class docstring).

        Args:
            slots: int64 ``[B]`` start slots, valid starts of ``storage`` as it is now.
            rows: int64 ``[B]`` table rows of those slots (their episodes).
            storage: The storage to gather from.
            rng: The buffer's generator, for units that draw something per sample.
            frames: None for plain observations, or ``k`` for stacks of the last ``k``
                observations per observation column (:func:`stack_index`).

        Returns:
            One row per slot (a sequence unit: ``[B, W]`` columns).
        """

    def step_table(self) -> StepTable | None:
        """The unit's per-slot cache, or None (see the class docstring)."""


class AllSteps:
    """Every step of every episode of an :class:`EpisodeColumns` (all of them done), in table
    order: the index arrays a unit gathers with to expand them all at once
    (:class:`ExpandsAll`).

    Row ``i`` is step ``k[i]`` of episode ``episode[i]``; ``remaining[i]`` is the steps from it to
    the episode's end (``>= 1``), ``steps`` its index into the step arrays (a slice when the
    episodes lie contiguous there) and ``slots[i]`` the slot it would have in a fresh ring
    holding just these episodes, placed in order (episode ``e`` starts at slot
    ``sum(length[:e] + 1)``).

    Args:
        columns: The episodes, every one done.
        ids: Their ids as the storage keeps them (:func:`~..storage.table.normalize_id`).
    """

    def __init__(self, columns: EpisodeColumns, ids: list[Any]) -> None:
        length = columns.length
        self.columns = columns
        self.ids = np.empty(len(ids), object)
        self.ids[:] = ids
        self.rows = int(length.sum())
        self.episode = np.repeat(np.arange(len(length), dtype=np.int64), length)
        first = np.zeros(len(length), np.int64)  # each episode's first row
        np.cumsum(length[:-1], out=first[1:])
        self.k = np.arange(self.rows, dtype=np.int64) - first.take(self.episode)
        self.remaining = length.take(self.episode) - self.k
        self.slots = np.arange(self.rows, dtype=np.int64) + self.episode
        self.steps = columns.step_rows()

    def __len__(self) -> int:
        return self.rows

    def step_values(self, values: np.ndarray) -> np.ndarray:
        """A step column's values at every row (a new array).

        Args:
            values: One of the columns' step arrays (actions, rewards, an extra), indexed by
                step row.

        Returns:
            ``values`` gathered at every row, ``[len(self), ...]``.
        """
        if isinstance(self.steps, slice):
            out: np.ndarray = values[self.steps].copy()
            return out
        return values.take(self.steps, axis=0)

    def step_index(self) -> np.ndarray:
        """Every row's index into the step arrays, as an array."""
        if isinstance(self.steps, slice):
            return np.arange(self.steps.start, self.steps.stop, dtype=np.int64)
        return self.steps

    def observations(self, ahead: np.ndarray | int = 0) -> np.ndarray:
        """Observation ``k + ahead`` of every row's episode (``ahead <= remaining``).

        Args:
            ahead: Steps past each row's step: an int for all rows, or an int array
                ``[len(self)]`` (0 gives ``obs``, ``remaining`` the episode's final one).

        Returns:
            The observations, ``[len(self), *obs_shape]``.
        """
        return self.columns.gather_observations(self.episode, self.k + ahead)

    def common(self) -> dict[str, np.ndarray]:
        """What :func:`episode_columns` gives a buffer's draw of these rows: actions, rewards,
        extras (by their own names), ``eps_id`` and ``t``."""
        c = self.columns
        out = {C.ACTIONS: self.step_values(c.actions), C.REWARDS: self.step_values(c.rewards)}
        for name, values in c.extras.items():
            out[name] = self.step_values(values)
        out[C.EPS_ID] = self.ids.take(self.episode)
        out[C.T] = c.t_started.take(self.episode) + self.k
        return out


@runtime_checkable
class ExpandsAll(Protocol):
    """A sample unit that expands every step of whole episodes straight from their columns.

    ``expand_all(steps)`` gives, row for row and dtype for dtype, what a fresh buffer holding
    exactly those episodes (all done) gives for ``sample(total)`` under
    :class:`~..samplers.in_order.InOrder` (the ``sample_all`` rule), without ``weights`` and
    ``indices``; or None where it cannot (a unit that draws something per sample). A unit
    without it is expanded through such a buffer.
    """

    def expand_all(self, steps: AllSteps) -> SampleBatch | None:
        """Every row of ``steps`` expanded, or None (see the class docstring).

        Args:
            steps: The rows of whole, done episodes (:class:`~.base.AllSteps`), in table order.

        Returns:
            One batch row per row of ``steps``, or None where the unit cannot.
        """


def stack_index(idx: np.ndarray, first: np.ndarray, frames: int) -> np.ndarray:
    """Slots of the ``frames`` observations ending at ``idx`` (``[..., frames]``), clipped at
    ``first`` (the episode's first slot, broadcastable to ``idx``): frames before the episode's
    start repeat its first frame.

    Args:
        idx: int64 slots of the newest frame, any shape.
        first: int64 first slot of each one's episode, broadcastable to ``idx``.
        frames: Frames per stack (>= 1).

    Returns:
        int64 slots of shape ``[*idx.shape, frames]``, oldest frame first.
    """
    back = np.arange(1 - frames, 1, dtype=np.int64)
    out: np.ndarray = np.maximum(idx[..., None] + back, np.asarray(first)[..., None])
    return out


def episode_columns(
    storage: EpisodeStorage, slots: np.ndarray, rows: np.ndarray
) -> dict[str, np.ndarray]:
    """Columns every unit copies at the start step: actions, rewards, extras (by their own
    names), ``eps_id`` and ``t``.

    Args:
        storage: The storage to gather from.
        slots: int64 ``[B]`` start slots.
        rows: int64 ``[B]`` table rows of those slots (for ``eps_id`` and ``t``).

    Returns:
        Column name to ``[B, ...]`` array.
    """
    cols = storage.columns
    out = {
        C.ACTIONS: cols["actions"].take(slots, axis=0),
        C.REWARDS: cols["rewards"].take(slots),
    }
    for name in storage.extra_names:
        out[name] = cols["extras/" + name].take(slots, axis=0)
    out[C.EPS_ID] = storage.ids.take(rows)
    out[C.T] = storage.last_and_t_base()[1].take(rows) + slots
    return out


def ones(n: int, dtype: type) -> np.ndarray:
    """A read-only array of ``n`` ones, shared between calls (a constant column).

    Args:
        n: Length of the array.
        dtype: Its numpy dtype (e.g. ``np.int32`` for ``n_step``).

    Returns:
        A read-only ``[n]`` array of ones; the same object for the same ``(n, dtype)``.
    """
    key = (n, np.dtype(dtype))
    arr = _ONES.get(key)
    if arr is None:
        if len(_ONES) > 64:
            _ONES.clear()
        arr = _ONES[key] = np.ones(n, dtype)
        arr.flags.writeable = False
    return arr


_ONES: dict[tuple[int, np.dtype], np.ndarray] = {}
