"""Batched placement: runs of new episodes written into the ring with one copy per column.

:meth:`EpisodeStorage.add_columns <.storage.EpisodeStorage.add_columns>` stores a table of
episodes exactly as ``add`` on each would. Most of them, in a stream of new data, are *new* (ids
not held, distinct, in a column layout already accepted, shorter than the ring): ``add`` would
write each at the head in turn. A :class:`RunPlacement`, which the storage holds, finds such runs
and writes the longest stretch of one that fits before the end of the ring with one copy per
column:

* :meth:`RunPlacement.column_run` -- the :class:`Run` of new episodes from position ``i`` of a
  table (:class:`~offline_prelearner.episodes.episode_columns.EpisodeColumns`), given the keys
  the storage holds;
* :meth:`RunPlacement.place` -- given the ring's columns and head, writes the stretch of the run
  that fits and returns where it went (:class:`Placed`), or None when the first episode would
  wrap the ring (the ordinary ``add`` handles it).

It never touches the storage: the storage enters what was placed in its table and counters and
moves its head (:meth:`~.ring.EpisodeStorage.add_columns`). Where the columns of a run come
from is an :class:`EpisodeSource` (:class:`SharedColumns`).
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ...episodes.episode import Episode
from ...episodes.episode_columns import EpisodeColumns
from .memory import fault_in_ahead
from .obs_leaves import obs_items
from .table import normalize_id

__all__ = [
    "EpisodeSource",
    "Placed",
    "Run",
    "RunPlacement",
    "SharedColumns",
    "layout",
    "same_layout",
    "write_episode",
]

#: The dtypes and per-step shapes of an episode's columns (see :func:`layout`).
Layout = tuple[Any, ...]


def layout(ep: Episode) -> Layout:
    """The dtypes and per-step shapes of an episode's columns (extras by name, in order).

    Args:
        ep: The episode.

    Returns:
        A hashable tuple; two episodes fit one ring's columns when their layouts are equal.
    """
    a, r = ep.actions, ep.rewards
    return (
        *_obs_signature(ep.observations),
        a.dtype,
        a.shape[1:],
        r.dtype,
        *((k, v.dtype, v.shape[1:]) for k, v in ep.extras.items()),
    )


def _obs_signature(obs: Any) -> tuple[Any, Any]:
    """(dtype, step shape) of a plain observation; (leaf signatures, "leaves") of a composite."""
    if isinstance(obs, dict):
        return tuple((k, v.dtype, v.shape[1:]) for k, v in obs.items()), "leaves"
    return obs.dtype, obs.shape[1:]


def write_episode(
    columns: dict[str, np.ndarray], at: int, ep: Episode, *, skip_first_obs: bool = False
) -> None:
    """Writes ``ep`` into ring ``columns`` from slot ``at`` (observation ``k`` at ``at + k``;
    ``skip_first_obs``: the slot ``at`` already holds observation 0, as when appending).

    Args:
        columns: The ring's columns, by name (``obs`` or ``obs/<leaf>``, ``actions``,
            ``rewards``, ``extras/<name>``), each with room for slots ``at .. at + len(ep)``.
        at: The slot of the episode's first observation.
        ep: The episode (or fragment) to write.
        skip_first_obs: Leave slot ``at`` as it is (it holds observation 0 already, the
            continued episode's last one); default False writes every observation.
    """
    n = len(ep)
    for name, obs in obs_items(ep.observations):  # one ring column per leaf
        if skip_first_obs:
            columns[name][at + 1 : at + n + 1] = obs[1:]
        else:
            columns[name][at : at + n + 1] = obs
    columns["actions"][at : at + n] = ep.actions
    columns["rewards"][at : at + n] = ep.rewards
    for name, col in ep.extras.items():
        columns["extras/" + name][at : at + n] = col


# --------------------------------------------------------------------------------------- sources
class EpisodeSource(Protocol):
    """Where a run's columns come from: episode objects or shared columns."""

    def episode(self, i: int) -> Episode:
        """Episode ``i`` as an object.

        Args:
            i: Position of the episode in the source.

        Returns:
            The episode.
        """

    def write_observations(self, dest: np.ndarray, lo: int, hi: int) -> None:
        """Writes episodes ``lo:hi``'s observations (``T + 1`` each), concatenated, into
        ``dest`` (exactly as many rows), copying each frame once.

        Args:
            dest: Rows to fill: exactly the episodes' ``sum(T + 1)`` observations.
            lo: First episode (inclusive).
            hi: End episode (exclusive).
        """
        ...

    def steps(self, column: str, lo: int, hi: int) -> np.ndarray:
        """Episodes ``lo:hi``'s per-step ``column`` ("actions", "rewards", "extras/<name>").

        Args:
            column: ``"actions"``, ``"rewards"`` or ``"extras/<name>"``.
            lo: First episode (inclusive).
            hi: End episode (exclusive).

        Returns:
            The episodes' steps of that column, concatenated: ``[sum(T), ...]``.
        """
        ...


class SharedColumns:
    """Episodes held as shared columns (:class:`EpisodeColumns`) as a source.

    Args:
        cols: The reader's columns; the run indexes their episodes.
    """

    def __init__(self, cols: EpisodeColumns) -> None:
        self.cols = cols

    def episode(self, i: int) -> Episode:
        """Episode ``i`` as an object (views of the shared columns).

        Args:
            i: Position of the episode in the columns.

        Returns:
            An episode whose arrays are views of the shared columns.
        """
        return self.cols.episode(i)

    def write_observations(self, dest: np.ndarray, lo: int, hi: int) -> None:
        """Writes episodes ``lo:hi``'s observations into ``dest``, as the shared columns lay them
        out.

        Args:
            dest: Rows to fill: exactly the episodes' ``sum(T + 1)`` observations.
            lo: First episode (inclusive).
            hi: End episode (exclusive).
        """
        self.cols.write_observations(dest, lo, hi)

    def steps(self, column: str, lo: int, hi: int) -> np.ndarray:
        """Episodes ``lo:hi``'s steps of ``column`` (``actions``, ``rewards`` or ``extras/<name>``),
        one gather.

        Args:
            column: ``"actions"``, ``"rewards"`` or ``"extras/<name>"``.
            lo: First episode (inclusive).
            hi: End episode (exclusive).

        Returns:
            The episodes' steps of that column, concatenated: ``[sum(T), ...]``.
        """
        c = self.cols
        arr = {"actions": c.actions, "rewards": c.rewards}.get(column)
        if arr is None:
            arr = c.extras[column.removeprefix("extras/")]
        return arr[c.step_rows(lo, hi)]


# --------------------------------------------------------------------------------------- records
@dataclass(frozen=True)
class Run:
    """New episodes in a row, each one ``add`` would store fresh: their normalized keys and
    what the table records of them, one entry per episode."""

    keys: list[Any]
    lengths: list[int]
    t_started: list[int]
    terminated: list[bool]
    truncated: list[bool]

    def __len__(self) -> int:
        return len(self.keys)

    def drop(self, k: int) -> Run:
        """The run without its first ``k`` episodes.

        Args:
            k: How many episodes to drop from the front (those already placed).

        Returns:
            A new run of the rest.
        """
        return Run(
            self.keys[k:],
            self.lengths[k:],
            self.t_started[k:],
            self.terminated[k:],
            self.truncated[k:],
        )


@dataclass(frozen=True)
class Placed:
    """Where :meth:`RunPlacement.place` wrote the first ``len(self)`` episodes of a run: slots
    ``starts[j] .. starts[j] + lengths[j]``, contiguous, ending before ``stop`` (the new head)."""

    starts: np.ndarray
    lengths: np.ndarray
    stop: int

    def __len__(self) -> int:
        return len(self.starts)


# ------------------------------------------------------------------------------------- placement
class RunPlacement:
    """Finds runs of new episodes and writes them into a ring of ``capacity`` slots together.

    Held by an :class:`~.ring.EpisodeStorage`, which passes in what it holds (keys, accepted
    layouts, the ring's columns and head) and records what comes back; see the module docstring.

    Args:
        capacity: The ring's slots; an episode of ``capacity`` steps or more never joins a run.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity

    def column_run(self, cols: EpisodeColumns, i: int, held: Container[Any]) -> Run | None:
        """The longest run of episodes from ``i`` of shared columns that ``add`` would each store
        fresh (ids not held, distinct, shorter than the ring), or None if episode ``i`` is not
        one; shared columns have one layout, which the caller checks once.

        Args:
            cols: The reader's shared columns.
            i: Where the run starts among their episodes.
            held: The normalized keys the storage holds.

        Returns:
            The run from episode ``i``, or None.
        """
        too_long = np.flatnonzero(cols.length[i:] >= self.capacity)
        stop = len(cols) if len(too_long) == 0 else i + int(too_long[0])
        keys = self._fresh_keys(held, cols.ids[i:stop])
        if not keys:
            return None
        j = i + len(keys)
        return Run(
            keys,
            cols.length[i:j].tolist(),
            cols.t_started[i:j].tolist(),
            cols.terminated[i:j].tolist(),
            cols.truncated[i:j].tolist(),
        )

    def place(
        self,
        columns: dict[str, np.ndarray],
        extra_names: Sequence[str],
        head: int,
        src: EpisodeSource,
        i: int,
        run: Run,
    ) -> Placed | None:
        """Writes the longest prefix of ``run`` (episodes ``i, i + 1, ...`` of ``src``) that fits
        between ``head`` and the end of the ring into ``columns``, as ``add`` would one by one;
        returns where it went, or None when the first episode does not fit (it wraps).

        Args:
            columns: The ring's columns, by name, allocated for the run's layout.
            extra_names: The extras' names, each written to ``extras/<name>``.
            head: The slot writing starts at (the storage's head).
            src: Where the episodes' columns come from.
            i: Position in ``src`` of the run's first episode.
            run: The run, as :meth:`episode_run` or :meth:`column_run` found it.

        Returns:
            Where the placed episodes went (a prefix of the run), or None.
        """
        if len(run.keys) == 1:  # one episode (an add per episode): scalars, no arrays to search
            stop = head + run.lengths[0] + 1
            if stop > self.capacity:
                return None
            write_episode(columns, head, src.episode(i))
            return Placed(np.array([head], np.int64), np.array(run.lengths, np.int64), stop)
        n = np.array(run.lengths, np.int64)
        ends = head + np.cumsum(n + 1)
        k = int(np.searchsorted(ends, self.capacity, side="right"))
        if k == 0:
            return None
        n, ends = n[:k], ends[:k]
        stop = int(ends[-1])
        if k == 1:
            write_episode(columns, head, src.episode(i))
        elif "obs" not in columns:  # composite observations: episode by episode, leaf by leaf
            for j, at in enumerate((ends - n - 1).tolist()):
                write_episode(columns, at, src.episode(i + j))
        else:
            at = np.arange(int(n.sum())) + np.repeat(np.arange(head, head + k), n)
            src.write_observations(columns["obs"][head:stop], i, i + k)
            fault_in_ahead(columns["obs"], stop, 2 * stop - head)  # the next run's pages
            columns["actions"][at] = src.steps("actions", i, i + k)
            columns["rewards"][at] = src.steps("rewards", i, i + k)
            for name in extra_names:
                columns["extras/" + name][at] = src.steps("extras/" + name, i, i + k)
        return Placed(ends - n - 1, n, stop)

    @staticmethod
    def _fresh_keys(held: Container[Any], ids: Sequence[Any]) -> list[Any]:
        """The normalized keys of the longest prefix of ``ids`` that are distinct and not held (a
        dict lookup per episode: the keys are Python objects)."""
        seen: dict[Any, None] = {}
        for eid in ids:
            kind = type(eid)
            if kind is str or kind is int:
                key: Any = eid
            else:
                try:
                    key = normalize_id(eid)
                except Exception:  # add raises it, in its turn
                    break
            if key in held or key in seen:
                break
            seen[key] = None
        return list(seen)


def same_layout(run: Sequence[Episode]) -> int:
    """How many episodes from the start of ``run`` share the first one's column layout
    (:func:`layout`), one pass per column over the whole run.

    Args:
        run: Episodes, at least one.

    Returns:
        The length of that prefix (at least 1).
    """
    first = layout(run[0])
    if len(run) == 1:
        return 1
    extras = run[0].extras
    same = {_obs_signature(e.observations) for e in run} == {first[:2]}
    same = same and {(e.actions.dtype, e.actions.shape[1:]) for e in run} == {first[2:4]}
    same = same and {e.rewards.dtype for e in run} == {first[4]}
    names = list(extras)
    same = same and all(list(e.extras) == names for e in run)
    for k, v in extras.items():
        same = same and {(e.extras[k].dtype, e.extras[k].shape[1:]) for e in run} == {
            (v.dtype, v.shape[1:])
        }
    if same:
        return len(run)
    for m, e in enumerate(run):  # locate the change only where there is one
        if layout(e) != first:
            return m
    return len(run)
