"""Batched adds: :meth:`EpisodeStorage.add_many <.storage.EpisodeStorage.add_many>` and the
:class:`Placements` records it reports.

Split out of :mod:`.storage` to keep it small; the functions here take the storage as ``st`` and
work on its internals (ring columns, table, head, counters) exactly as its methods would. Storage
imports this module, so names from :mod:`.storage` are imported only for type checking or inside
functions (at call time, when storage is fully loaded): there is no import-time cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..episodes.episode import Episode
from ..episodes.episode_columns import EpisodeColumns

if TYPE_CHECKING:
    from .storage import Change, EpisodeStorage

__all__ = ["Placements", "add_columns", "add_many"]


@dataclass
class Placements:
    """New episodes that one step of :meth:`EpisodeStorage.add_many` placed together: exactly
    what their ``add`` calls would have returned (a ``"new"`` :class:`Change` each), as arrays.

    ``removed_*`` hold the records their writes evicted, oldest first (the concatenation of the
    changes' lists); the other arrays hold one entry per episode, in the order they were added.
    """

    removed_start: np.ndarray
    removed_length: np.ndarray
    removed_done: np.ndarray
    start: np.ndarray
    length: np.ndarray
    done: np.ndarray
    serial: np.ndarray
    keys: list[int | str]

    def to_changes(self) -> list[Change]:
        """The per-episode :class:`Change` records (each eviction goes to the episode whose
        slots the evicted record started in)."""
        from .storage import Change  # deferred: storage imports this module

        ends = self.start + self.length + 1
        owner = np.searchsorted(ends, self.removed_start, side="right").tolist()
        out = [
            Change("new", start=s, length=n, done=d, serial=x, key=k)
            for s, n, d, x, k in zip(
                self.start.tolist(),
                self.length.tolist(),
                self.done.tolist(),
                self.serial.tolist(),
                self.keys,
                strict=True,
            )
        ]
        removed = zip(
            self.removed_start.tolist(),
            self.removed_length.tolist(),
            self.removed_done.tolist(),
            strict=True,
        )
        for i, (s, n, d) in zip(owner, removed, strict=True):
            out[i].removed_start.append(s)
            out[i].removed_length.append(n)
            out[i].removed_done.append(d)
        return out


def add_many(
    st: EpisodeStorage, episodes: Sequence[Episode], out: list[Change | Placements]
) -> None:
    """The body of :meth:`EpisodeStorage.add_many <.storage.EpisodeStorage.add_many>` (see
    there for the semantics)."""
    from .storage import EpisodeStorage  # deferred: storage imports this module

    bulk = type(st).add is EpisodeStorage.add and type(st)._place is EpisodeStorage._place
    i, n = 0, len(episodes)
    while i < n:
        run = _new_run(st, episodes, i) if bulk else None
        if run is None:
            _add_one(st, episodes[i], out)
            i += 1
            continue
        keys, lengths, t_started, term, trunc = run
        i = _add_run(st, _Listed(episodes), i, keys, lengths, t_started, term, trunc, out)


def add_columns(st: EpisodeStorage, cols: EpisodeColumns, out: list[Change | Placements]) -> None:
    """The body of :meth:`EpisodeStorage.add_columns <.storage.EpisodeStorage.add_columns>`:
    ``add_many`` over episodes held as shared columns, building an object only for an episode
    that takes the ordinary path (a continuation, a duplicate key, one that wraps the ring)."""
    from .storage import EpisodeStorage, _layout  # deferred: storage imports this module

    n = len(cols)
    if n == 0:
        return
    plain = type(st).add is EpisodeStorage.add and type(st)._place is EpisodeStorage._place
    src, i, bulk = _Columns(cols), 0, False
    while i < n:
        # One layout for every episode (shared arrays): once accepted, accepted for all.
        bulk = bulk or (plain and bool(st.columns) and _layout(cols.episode(i)) in st._accepted)
        run = _new_column_run(st, cols, i) if bulk else None
        if run is None:
            _add_one(st, cols.episode(i), out)
            i += 1
            continue
        j = i + len(run)
        i = _add_run(
            st,
            src,
            i,
            run,
            cols.length[i:j].tolist(),
            cols.t_started[i:j].tolist(),
            cols.terminated[i:j].tolist(),
            cols.truncated[i:j].tolist(),
            out,
        )


def _add_one(st: EpisodeStorage, ep: Episode, out: list[Change | Placements]) -> None:
    """The ordinary path for one episode: ``add``, its records appended to ``out``."""
    change = st.add(ep)
    out += change.side
    out.append(change)


def _add_run(
    st: EpisodeStorage,
    src: _Source,
    i: int,
    keys: list[Any],
    lengths: list[int],
    t_started: list[int],
    term: list[bool],
    trunc: list[bool],
    out: list[Change | Placements],
) -> int:
    """Places the run of new episodes from ``i`` (described by the lists), in stretches that
    fit before the end of the ring; returns the index after it."""
    j = i + len(keys)
    while i < j:
        k = _place_run(st, src, i, keys, lengths, t_started, term, trunc, out)
        if k == 0:  # the next one wraps the ring: the ordinary path
            _add_one(st, src.episode(i), out)
            k = 1
        i += k
        del keys[:k], lengths[:k], t_started[:k], term[:k], trunc[:k]
    return j


def _new_column_run(st: EpisodeStorage, cols: EpisodeColumns, i: int) -> list[Any] | None:
    """The keys of the longest run of episodes from ``i`` that ``add`` would each store fresh
    (ids not held, distinct, shorter than the ring), or None if episode ``i`` is not one."""
    too_long = np.flatnonzero(cols.length[i:] >= st.capacity)
    stop = len(cols) if len(too_long) == 0 else i + int(too_long[0])
    return _fresh_keys(st, cols.ids[i:stop]) or None


def _fresh_keys(st: EpisodeStorage, ids: Sequence[Any]) -> list[Any]:
    """The normalized keys of the longest prefix of ``ids`` that are distinct and not held (a
    dict lookup per episode: the keys are Python objects)."""
    from .storage import normalize_id  # deferred: storage imports this module

    held = st.table.where
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


class _Source(Protocol):
    """Where a run's columns come from: episode objects or shared columns."""

    def episode(self, i: int) -> Episode: ...

    def observations(self, lo: int, hi: int) -> np.ndarray:
        """Episodes ``lo:hi``'s observations (``T + 1`` each), concatenated."""
        ...

    def steps(self, column: str, lo: int, hi: int) -> np.ndarray:
        """Episodes ``lo:hi``'s per-step ``column`` ("actions", "rewards", "extras/<name>")."""
        ...


class _Listed:
    def __init__(self, eps: Sequence[Episode]) -> None:
        self.eps = eps

    def episode(self, i: int) -> Episode:
        return self.eps[i]

    def observations(self, lo: int, hi: int) -> np.ndarray:
        return np.concatenate([e.observations for e in self.eps[lo:hi]])

    def steps(self, column: str, lo: int, hi: int) -> np.ndarray:
        part = self.eps[lo:hi]
        if column == "actions":
            return np.concatenate([e.actions for e in part])
        if column == "rewards":
            return np.concatenate([e.rewards for e in part])
        name = column.removeprefix("extras/")
        return np.concatenate([e.extras[name] for e in part])


class _Columns:
    def __init__(self, cols: EpisodeColumns) -> None:
        self.cols = cols

    def episode(self, i: int) -> Episode:
        return self.cols.episode(i)

    def observations(self, lo: int, hi: int) -> np.ndarray:
        return self.cols.obs[self.cols.obs_rows(lo, hi)]

    def steps(self, column: str, lo: int, hi: int) -> np.ndarray:
        c = self.cols
        arr = {"actions": c.actions, "rewards": c.rewards}.get(column)
        if arr is None:
            arr = c.extras[column.removeprefix("extras/")]
        return arr[c.step_rows(lo, hi)]


def _new_run(st: EpisodeStorage, eps: Sequence[Episode], i: int) -> tuple[list[Any], ...] | None:
    """``(keys, lengths, t_started, terminated, truncated)`` of the longest run of episodes
    from ``i`` that ``add`` would each store fresh without an error or a new column layout
    (all in one layout), or None if ``eps[i]`` is not such an episode."""
    if not st.columns:
        return None
    cap, stop = st.capacity, i
    while stop < len(eps) and len(eps[stop].actions) < cap:
        stop += 1
    keys = _fresh_keys(st, [ep.id for ep in eps[i:stop]])  # the run's keys, in order
    run = eps[i : i + len(keys)]
    m = _same_layout(st, run)
    if m == 0:
        return None
    run = run[:m]
    keys = keys[:m]
    return (
        keys,
        [len(e.actions) for e in run],
        [e.t_started for e in run],
        [e.terminated for e in run],
        [e.truncated for e in run],
    )


def _same_layout(st: EpisodeStorage, run: Sequence[Episode]) -> int:
    """How many episodes from the start of ``run`` share one column layout already
    accepted (0 if the first one's is not)."""
    from .storage import _layout  # deferred: storage imports this module

    if not run:
        return 0
    extras = run[0].extras
    layout = _layout(run[0])
    if layout not in st._accepted:
        return 0
    # One pass per column over the whole run (cheap), then locate a change only if any.
    same = {(e.observations.dtype, e.observations.shape[1:]) for e in run} == {layout[:2]}
    same = same and {(e.actions.dtype, e.actions.shape[1:]) for e in run} == {layout[2:4]}
    same = same and {e.rewards.dtype for e in run} == {layout[4]}
    names = list(extras)
    same = same and all(list(e.extras) == names for e in run)
    for k, v in extras.items():
        same = same and {(e.extras[k].dtype, e.extras[k].shape[1:]) for e in run} == {
            (v.dtype, v.shape[1:])
        }
    if same:
        return len(run)
    for m, e in enumerate(run):
        if _layout(e) != layout:
            return m
    return len(run)


def _place_run(
    st: EpisodeStorage,
    src: _Source,
    i: int,
    keys: list[Any],
    lengths: list[int],
    t_started: list[int],
    term: list[bool],
    trunc: list[bool],
    out: list[Change | Placements],
) -> int:
    """Writes the longest prefix of the run ``eps[i:]`` (described by the lists) that fits
    before the end of the ring, as ``_place`` would one by one; returns its length."""
    n = np.array(lengths, np.int64)
    ends = st.head + np.cumsum(n + 1)
    k = int(np.searchsorted(ends, st.capacity, side="right"))
    if k == 0:
        return 0
    n, ends = n[:k], ends[:k]
    head, stop = st.head, int(ends[-1])
    starts = ends - n - 1
    tab, c = st.table, st.columns
    r_start, r_length, r_done = tab.drop_front_inside(head, stop)
    cnt = st.counters
    cnt["episodes_evicted"] += len(r_start)
    cnt["timesteps_evicted"] += int(r_length.sum())
    steps = int(n.sum())
    if k == 1:
        st._write(head, src.episode(i), skip_first_obs=False)
    else:
        at = np.arange(steps) + np.repeat(np.arange(head, head + k), n)
        c["obs"][head:stop] = src.observations(i, i + k)
        c["actions"][at] = src.steps("actions", i, i + k)
        c["rewards"][at] = src.steps("rewards", i, i + k)
        for name in st.extra_names:
            c["extras/" + name][at] = src.steps("extras/" + name, i, i + k)
    done = np.array(term[:k], bool)
    trunc_k = np.array(trunc[:k], bool)
    idx = tab.append_many(keys[:k], starts, n, np.array(t_started[:k], np.int64), done, trunc_k)
    done |= trunc_k
    st.head = stop
    cnt["episodes_added"] += k
    cnt["timesteps_added"] += steps
    serial = np.arange(idx + tab.base, idx + tab.base + k, dtype=np.int64)
    out.append(Placements(r_start, r_length, r_done, starts, n, done, serial, keys[:k]))
    return k
