"""Columnar ring storage of timesteps plus the episode table.

Layout. Every column (``obs``, ``actions``, ``rewards``, one per extra) is one preallocated numpy
array of ``capacity + 1`` rows, allocated from the first episode's shapes and dtypes. An episode of
``L`` steps occupies ``L + 1`` *contiguous* slots ``start .. start + L``: slot ``start + k`` holds
observation ``k`` and, for ``k < L``, action/reward/extras ``k`` (the last slot's are padding). So
the observation after slot ``i`` is slot ``i + 1`` and every window is index arithmetic, with no
modulo. Row ``capacity`` of every column is all zeros and never written: units point padded
positions at it (:attr:`EpisodeStorage.pad_slot`).

Capacity counts slots, i.e. timesteps plus one final observation per episode. Writes go to the
head of the ring; an episode that does not fit before the end wraps to slot 0 and the tail is left
unused (at most one episode's worth). Eviction drops whole oldest episodes (FIFO) until the new one
fits; an episode needing more slots than the capacity is an error naming it.

Streaming. A fragment of an episode already held (same id, ``t_started`` equal to the stored end,
first observation equal to the stored last one) is appended: in place when the episode sits at
the head, otherwise the episode is moved to the head (its old place becomes free space that ages
out). A fragment entirely inside the stored range is a duplicate: dropped and counted, as is a
re-sent complete episode. Only held episodes are known: an evicted episode sent again is new data.

The episode table (:mod:`.table`) keeps one record per placement, in placement order, which is
ring order: slot -> row is a binary search, with no per-slot map (that keeps CartPole within
~1.15x its raw bytes). An episode moved to the head gets a new placement; the old one stays, dead,
until it ages out.

Batched adds (:meth:`EpisodeStorage.add_columns`, of a table of episodes) write runs of new
episodes together: the storage holds a :class:`~.placement.RunPlacement`, which finds the runs
and writes their columns, and records what it placed (table, head, counters) as one
:class:`~.changes.Placements`. What an add did comes back as :class:`~.changes.Change` records;
both record types, and :func:`~.table.normalize_id`, are importable from here.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ...config import MAX_STEPS, check_int
from ...episodes.episode import Episode
from ...episodes.episode_columns import EpisodeColumns
from ...errors import ConfigError, EpisodeValidationError, Where
from .changes import Change, Placements
from .memory import zeroed
from .obs_leaves import obs_items, obs_names, read_obs, same_obs
from .placement import (
    EpisodeSource,
    Placed,
    Run,
    RunPlacement,
    SharedColumns,
    layout,
    write_episode,
)
from .state import check_state, state_capacity
from .table import EpisodeTable, normalize_id

__all__ = ["Change", "EpisodeStorage", "Placements", "normalize_id"]

_COUNTERS = (
    "timesteps_added",
    "episodes_added",
    "timesteps_evicted",
    "episodes_evicted",
    "duplicates_dropped",
    "fragments_appended",
    "episodes_moved",
)


class EpisodeStorage:
    """Ring arrays of timesteps and a table of the episodes they hold. See the module docstring.

    Args:
        capacity: Slots per column (timesteps plus one final observation per held episode), an
            integer from 2 to ``MAX_STEPS``; the columns take ``capacity + 1`` rows, allocated
            at the first episode.

    Raises:
        ConfigError: ``capacity`` is not an integer in range.
    """

    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, np.integer):
            capacity = int(capacity)
        check_int("capacity (timesteps)", capacity, 2, MAX_STEPS)  # buffer.capacity's validator
        self.capacity = int(capacity)
        self.columns: dict[str, np.ndarray] = {}  # "obs", "actions", "rewards", "extras/<name>"
        self.extra_names: tuple[str, ...] = ()
        self.head = 0
        self.table = EpisodeTable()
        self.counters: dict[str, int] = dict.fromkeys(_COUNTERS, 0)
        self._accepted: set[tuple[Any, ...]] = set()  # column layouts already checked
        self._runs = RunPlacement(self.capacity)  # batched adds of new episodes

    # ------------------------------------------------------------------ the table, by row
    @property
    def version(self) -> int:
        """Changes whenever the table does; caches of rows or valid starts key on it."""
        return self.table.version

    @property
    def pad_slot(self) -> int:
        """A slot whose every column is zero; units gather it for padding."""
        return self.capacity

    starts = property(lambda self: self.table.view("start"), doc="First slot per row.")
    lengths = property(lambda self: self.table.view("length"), doc="Steps per row.")
    t_started = property(lambda self: self.table.view("t_started"), doc="Env step of obs 0.")
    terminated = property(lambda self: self.table.view("terminated"))
    truncated = property(lambda self: self.table.view("truncated"))
    alive = property(lambda self: self.table.view("alive"), doc="False for dead placements.")
    ids = property(lambda self: self.table.view("ids"), doc="Ids (int / str objects) per row.")

    @property
    def num_rows(self) -> int:
        """Rows of the episode table (placements, dead ones included, in ring order)."""
        return self.table.num_rows

    @property
    def num_episodes(self) -> int:
        """Episodes held (live placements)."""
        return len(self.table.where)

    @property
    def num_timesteps(self) -> int:
        """Steps held (actions), not counting final observations."""
        return int(self.lengths[self.alive].sum())

    def __len__(self) -> int:
        return self.num_timesteps

    def row_of_id(self, eid: Any) -> int | None:
        """The table row of a held episode, or None.

        Args:
            eid: The episode's id, in any form :func:`normalize_id` accepts.

        Returns:
            The row of its live placement, or None when the episode is not held.

        Raises:
            EpisodeValidationError: ``eid`` is None.
        """
        idx = self.table.index_of(normalize_id(eid))
        return None if idx is None else idx - self.table.lo

    def rows_of(self, slots: np.ndarray) -> np.ndarray:
        """Table rows of the episodes holding ``slots`` (which must be held; not checked).

        Args:
            slots: Integer ring slots inside stored episodes; any other slot gives a meaningless
                row.

        Returns:
            int64 row per slot.
        """
        return self.table.rows_of(slots)

    def last_and_t_base(self) -> tuple[np.ndarray, np.ndarray]:
        """Per row: the slot of the last step, and ``t_started - start`` (cached per version)."""
        return self.table.last_and_t_base()

    def handles(self, slots: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Opaque int64 handles for sampled slots (placement serial and slot).

        Args:
            slots: Sampled ring slots.
            rows: Table row of each slot's episode (as :meth:`rows_of` gives).

        Returns:
            int64 handle per slot, for a sample's ``indices`` column; :meth:`resolve` reads it.
        """
        return self.table.handles(slots, rows)

    def is_current(self, serials: np.ndarray) -> np.ndarray:
        """True where a placement serial still holds its episode (not evicted, not moved).

        Args:
            serials: Placement serials (the high bits of handles).

        Returns:
            bool per serial.
        """
        return self.table.is_current(serials)

    def resolve(self, handles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(slots, current)``: ``current`` is False where the episode that held the slot at
        sampling time has since been evicted or moved (the slot may now hold something else).

        Args:
            handles: int64 handles from :meth:`handles` (a sample's ``indices`` column).

        Returns:
            int64 slot per handle and bool ``current`` per handle.
        """
        return self.table.resolve(handles)

    # ------------------------------------------------------------------ adding
    def add_episode(self, episode: Episode) -> Change:
        """Stores one episode or fragment. Raises EpisodeValidationError for data that contradicts
        what is held (a gap in ``t``, an overlap, a discontinuous observation, other shapes).

        Args:
            episode: A whole episode, or a fragment of one already held (same id, starting at the
                stored end, its first observation equal to the stored last one).

        Returns:
            What the add did: ``new``, ``appended``, ``moved``, ``flagged`` (only the end flags
            changed), ``duplicate`` or ``noop``, with the slots placed and evicted.

        Raises:
            EpisodeValidationError: The episode has no id, needs more slots than the capacity,
                has other columns, shapes or dtypes than the buffer holds, or as a fragment
                overlaps, leaves a gap, follows an ended episode or breaks the observations.
            ConfigError: The first episode's columns at this capacity would not fit in memory.
        """
        key = normalize_id(episode.id)
        idx = self.table.index_of(key)
        if not self.columns:
            self._allocate(episode)
        self._check_columns(episode)
        if idx is None:
            change = Change("new")
            self._place(episode, key, change)
            self.counters["episodes_added"] += 1
            self.counters["timesteps_added"] += len(episode)
        else:
            change = self._continue(episode, idx)
        change.key = key
        return change

    def add_columns(self, columns: EpisodeColumns, out: list[Change | Placements]) -> None:
        """Stores episodes held as shared columns (a reader's
        :class:`~offline_prelearner.episodes.episode_columns.EpisodeColumns`) in order, exactly
        as :meth:`add_episode` on each would, appending each one's records (side records first, then
        the change) to ``out`` as it goes: after an error, ``out`` describes what the episodes
        before the failing one did.

        Runs of new episodes (ids not held, distinct, in a column layout already accepted) are
        written together -- one copy per column and one table append for every stretch of the
        run that fits before the end of the ring -- and reported as one :class:`Placements`,
        without an object per episode. Everything else (continuations, duplicates, an episode
        that wraps the ring, the first of a new layout, subclasses that place episodes their own
        way) is built as an object and goes through :meth:`add_episode`.

        Args:
            columns: The episodes, in order.
            out: Where the records go.
        """
        n = len(columns)
        if not self.places_runs():  # every episode through add_episode, its objects built at once
            for ep in columns.iter_episodes():
                self._add_one(ep, out)
            return
        src, i, bulk = SharedColumns(columns), 0, False
        while i < n:
            # One layout for every episode (shared arrays): once accepted, accepted for all.
            bulk = bulk or (bool(self.columns) and layout(columns.episode(i)) in self._accepted)
            run = self._runs.column_run(columns, i, self.table.where) if bulk else None
            if run is None:
                self._add_one(columns.episode(i), out)
                i += 1
                continue
            i = self._add_run(src, i, run, out)

    def places_runs(self) -> bool:
        """Whether :meth:`add_columns` may place a run of new episodes in one step, bypassing
        :meth:`add_episode` and ``_place``: True here. A storage that admits or places episodes
        its own way (:class:`~offline_prelearner.replay.reservoir.ReservoirStorage`)
        returns False, and every episode takes its ``add_episode``."""
        return True

    def _add_one(self, ep: Episode, out: list[Change | Placements]) -> None:
        """The ordinary path for one episode: ``add_episode``, its records appended to ``out``."""
        change = self.add_episode(ep)
        out += change.side
        out.append(change)

    def _add_run(self, src: EpisodeSource, i: int, run: Run, out: list[Change | Placements]) -> int:
        """Places the run of new episodes from ``i``, in stretches that fit before the end of
        the ring; returns the index after it."""
        end = i + len(run)
        while len(run):
            placed = self._runs.place(self.columns, self.extra_names, self.head, src, i, run)
            if placed is None:  # the next one wraps the ring: the ordinary path
                self._add_one(src.episode(i), out)
                k = 1
            else:
                k = len(placed)
                out.append(self._enter(placed, run))
            i += k
            run = run.drop(k)
        return end

    def _enter(self, placed: Placed, run: Run) -> Placements:
        """Records the first ``len(placed)`` episodes of ``run``, just written into the ring:
        evicts what they overwrote, appends them to the table, counts, moves the head to
        ``placed.stop``. Returns the record of it."""
        starts, n, stop = placed.starts, placed.lengths, placed.stop
        k, tab, cnt = len(placed), self.table, self.counters
        r_start, r_length, r_done = tab.drop_front_inside(self.head, stop)
        cnt["episodes_evicted"] += len(r_start)
        cnt["timesteps_evicted"] += int(r_length.sum())
        done = np.array(run.terminated[:k], bool)
        trunc = np.array(run.truncated[:k], bool)
        t0 = np.array(run.t_started[:k], np.int64)
        idx = tab.append_many(run.keys[:k], starts, n, t0, done, trunc)
        done |= trunc
        self.head = stop
        cnt["episodes_added"] += k
        cnt["timesteps_added"] += int(n.sum())
        serial = np.arange(idx + tab.base, idx + tab.base + k, dtype=np.int64)
        return Placements(r_start, r_length, r_done, starts, n, done, serial, run.keys[:k])

    def _continue(self, ep: Episode, idx: int) -> Change:
        tab = self.table
        start, n, t0, term, trunc = tab.get(idx)
        done, end, serial = term or trunc, t0 + n, idx + tab.base
        where = Where(episode_id=ep.id, timestep=ep.t_started)
        # A step-less fragment at the end of a finished episode (e.g. a zero-length episode
        # sent twice) repeats nothing new: a duplicate, not a continuation after the end.
        if ep.t_started < end or (done and len(ep) == 0 and ep.t_started == end):
            if not (ep.t_started >= t0 and ep.t_end <= end):
                raise EpisodeValidationError(
                    f"fragment t={ep.t_started}..{ep.t_end} overlaps the stored steps "
                    f"t={t0}..{end} without repeating them",
                    where,
                    reason="overlap",
                )
            if ep.is_done and not done and ep.t_end == end:
                # The same steps again, now saying how the episode ended.
                tab.update(idx, length=n, terminated=ep.terminated, truncated=ep.truncated)
                return Change(
                    "flagged", start=start, length=n, done=True, prev_length=n, serial=serial
                )
            self.counters["duplicates_dropped"] += 1
            return Change("duplicate")
        if done:
            raise EpisodeValidationError(
                f"fragment starting at t={ep.t_started} continues an episode that already "
                f"ended at t={end}",
                where,
                reason="after_done",
            )
        if ep.t_started > end:
            raise EpisodeValidationError(
                f"fragment starts at t={ep.t_started} but the stored part ends at t={end}: "
                "steps are missing",
                where,
                reason="gap",
            )
        if not same_obs(self.columns, start + n, ep.observations, 0):
            raise EpisodeValidationError(
                "fragment's first observation differs from the stored last observation",
                Where(episode_id=ep.id, timestep=ep.t_started, column="obs"),
                reason="obs_gap",
            )
        k = len(ep)
        if k == 0:  # nothing new but perhaps the news that it ended
            if not ep.is_done:
                return Change("noop")
            tab.update(idx, length=n, terminated=ep.terminated, truncated=ep.truncated)
            return Change("flagged", start=start, length=n, done=True, prev_length=n, serial=serial)
        self.counters["fragments_appended"] += 1
        self.counters["timesteps_added"] += k
        if idx == tab.hi - 1 and self.head == start + n + 1 and self.head + k <= self.capacity:
            change = Change("appended", start=start, prev_length=n, serial=serial)
            self._evict_overlapping(self.head, k, change)
            self._write(start + n, ep, skip_first_obs=True)
            tab.update(idx, length=n + k, terminated=ep.terminated, truncated=ep.truncated)
            self.head = start + n + k + 1
            change.length, change.done = n + k, ep.is_done
            return change
        # Move to the head: read the stored part out, free its place, write the joined episode.
        if n + k + 1 > self.capacity:
            raise self._too_long(ep.id, n + k)
        joined = Episode.concat_fragments([self._read(idx), ep])
        tab.kill(idx)
        change = Change("moved", removed_start=[start], removed_length=[n], removed_done=[False])
        self._place(joined, normalize_id(ep.id), change)
        self.counters["episodes_moved"] += 1
        return change

    def _place(self, ep: Episode, key: int | str, change: Change) -> None:
        n = len(ep)
        if n + 1 > self.capacity:
            raise self._too_long(ep.id, n)
        if self.head + n + 1 > self.capacity:  # wrap; the tail stays unused
            self._evict_overlapping(self.head, self.capacity - self.head, change)
            self.head = 0
        self._evict_overlapping(self.head, n + 1, change)
        start = self.head
        self._write(start, ep, skip_first_obs=False)
        self.head = start + n + 1
        idx = self.table.append(key, start, n, ep.t_started, ep.terminated, ep.truncated)
        change.start, change.length, change.done = start, n, ep.is_done
        change.serial = idx + self.table.base

    def _too_long(self, eid: Any, n: int) -> EpisodeValidationError:
        return EpisodeValidationError(
            f"episode of {n} steps needs {n + 1} slots but the buffer's capacity is "
            f"{self.capacity}",
            Where(episode_id=eid),
            reason="too_long",
        )

    def _evict_overlapping(self, lo: int, size: int, change: Change) -> None:
        """Drops the oldest records while they start inside ``[lo, lo + size)``.

        Records start in ring order from the oldest, so these are exactly the ones the write
        overlaps."""
        tab = self.table
        while tab.lo < tab.hi:
            i = tab.lo
            start, n, _, term, trunc = tab.get(i)
            if not (lo <= start < lo + size):
                break
            if tab.cols["alive"][i]:
                change.removed_start.append(start)
                change.removed_length.append(n)
                change.removed_done.append(term or trunc)
                tab.kill(i)
                self.counters["episodes_evicted"] += 1
                self.counters["timesteps_evicted"] += n
            tab.pop_front()

    # ------------------------------------------------------------------ columns
    def _allocate(self, ep: Episode) -> None:
        """The ring columns, sized by the first episode's layout: ``capacity + 1`` slots each.

        Raises:
            ConfigError: the columns would not fit in this machine's memory (a pixel dataset
                with a capacity meant for vectors, say): naming the capacity, bytes per slot
                and the total, before anything is allocated.
        """
        size = self.capacity + 1
        layout = {name: obs[:1] for name, obs in obs_items(ep.observations)}  # a column per leaf
        layout.update({"actions": ep.actions[:1], "rewards": ep.rewards[:1]})
        layout.update({"extras/" + k: v[:1] for k, v in ep.extras.items()})
        per_slot = sum(
            int(np.prod(v.shape[1:], dtype=np.int64)) * v.dtype.itemsize for v in layout.values()
        )
        total, memory = per_slot * size, _physical_memory()
        if memory is not None and total > memory:
            raise _too_big(
                self.capacity, per_slot, total, memory, f"this machine has {_gib(memory)}"
            )
        try:
            for name, v in layout.items():
                self.columns[name] = zeroed((size, *v.shape[1:]), v.dtype)
        except MemoryError:
            self.columns = {}
            raise _too_big(
                self.capacity, per_slot, total, memory, "the allocation failed"
            ) from None
        self.extra_names = tuple(ep.extras)

    def _check_columns(self, ep: Episode) -> None:
        sig = layout(ep)
        if sig in self._accepted:  # the common case: the same layout as before
            return
        self._check_columns_slowly(ep)
        if len(self._accepted) < 64:
            self._accepted.add(sig)

    def _check_columns_slowly(self, ep: Episode) -> None:
        if set(ep.extras) != set(self.extra_names):
            raise EpisodeValidationError(
                f"episode carries extra columns {sorted(ep.extras)}, the buffer holds "
                f"{sorted(self.extra_names)}",
                Where(episode_id=ep.id),
                reason="columns",
            )
        pairs = obs_items(ep.observations)
        if [k for k, _ in pairs] != obs_names(self.columns):
            raise EpisodeValidationError(
                f"episode's observation leaves {[k for k, _ in pairs]} differ from the buffer's "
                f"{obs_names(self.columns)}",
                Where(episode_id=ep.id, column="obs"),
                reason="columns",
            )
        pairs += [("actions", ep.actions), ("rewards", ep.rewards)]
        pairs += [("extras/" + k, v) for k, v in ep.extras.items()]
        for name, arr in pairs:
            col = self.columns[name]
            if arr.shape[1:] != col.shape[1:] or not np.can_cast(arr.dtype, col.dtype, "same_kind"):
                raise EpisodeValidationError(
                    f"{name} steps are {arr.dtype}{list(arr.shape[1:])}, the buffer stores "
                    f"{col.dtype}{list(col.shape[1:])}",
                    Where(episode_id=ep.id, column=name.removeprefix("extras/")),
                    reason="columns",
                )

    def _write(self, at: int, ep: Episode, *, skip_first_obs: bool) -> None:
        write_episode(self.columns, at, ep, skip_first_obs=skip_first_obs)

    def _read(self, idx: int) -> Episode:
        """A held episode (table index, not window row) copied out of the ring."""
        s, n, t0, term, trunc = self.table.get(idx)
        c = self.columns
        return Episode(
            id=self.table.cols["ids"][idx],
            observations=read_obs(c, s, s + n + 1),
            actions=c["actions"][s : s + n].copy(),
            rewards=c["rewards"][s : s + n].copy(),
            extras={k: c["extras/" + k][s : s + n].copy() for k in self.extra_names},
            terminated=term,
            truncated=trunc,
            t_started=t0,
        )

    def episode(self, row: int) -> Episode:
        """The held episode at table ``row``, copied out (ids come back normalized).

        Args:
            row: A table row, ``0 <= row < num_rows``, of a live placement.

        Returns:
            A new :class:`Episode` with copies of its steps.

        Raises:
            IndexError: ``row`` is out of range or its placement is dead.
        """
        if not (0 <= row < self.num_rows) or not self.alive[row]:
            raise IndexError(f"row {row} does not hold an episode")
        return self._read(row + self.table.lo)

    def episodes(self) -> list[Episode]:
        """All held episodes, oldest placement first (copies; for tests and inspection)."""
        return [self.episode(int(r)) for r in np.flatnonzero(self.alive)]

    def nbytes(self) -> int:
        """Bytes of the ring arrays and the episode table (ids counted as 8-byte references)."""
        return sum(c.nbytes for c in self.columns.values()) + sum(
            a.nbytes for a in self.table.cols.values()
        )

    # ------------------------------------------------------------------ state
    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(meta, arrays)``: JSON-able scalars and numpy arrays (no objects), enough to rebuild
        an identical storage with :meth:`set_state`."""
        first_serial, table = self.table.get_state()
        arrays = {"col/" + k: v for k, v in self.columns.items()}
        arrays.update({"tab/" + k: v for k, v in table.items()})
        meta = {
            "capacity": self.capacity,
            "head": self.head,
            "first_serial": first_serial,
            "extra_names": list(self.extra_names),
            "counters": dict(self.counters),
        }
        return meta, arrays

    def set_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """Restores :meth:`get_state` output after :func:`check_state` (a state of another
        capacity is a :class:`ConfigError`; one that breaks the ring's invariants a
        :class:`DataError` naming the field).

        Args:
            meta: JSON-able scalars of :meth:`get_state`: ``capacity``, ``head``,
                ``first_serial``, ``extra_names`` and ``counters``.
            arrays: Its arrays: ring columns under ``col/``, table columns under ``tab/``.

        Raises:
            ConfigError: The state is of a storage with another capacity.
            DataError: The state breaks the ring's invariants.
        """
        if state_capacity(meta) != self.capacity:
            raise ConfigError(
                f"state is of a storage with capacity {meta['capacity']}, this one "
                f"has capacity {self.capacity}"
            )
        check_state(self.capacity, meta, arrays)
        columns = {k[4:]: np.array(v) for k, v in arrays.items() if k.startswith("col/")}
        self.table.set_state(
            int(meta["first_serial"]), {k[4:]: v for k, v in arrays.items() if k.startswith("tab/")}
        )
        self.columns = columns
        self._accepted.clear()
        self.extra_names = tuple(meta["extra_names"])
        self.head = int(meta["head"])
        self.counters = {k: int(v) for k, v in meta["counters"].items()}


def _physical_memory() -> int | None:
    """Bytes of physical memory (None where the platform does not say)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def _too_big(capacity: int, per_slot: int, total: int, memory: int | None, why: str) -> ConfigError:
    hint = ""
    if memory is not None:  # what would take half of this machine's memory
        hint = f", e.g. --set buffer.capacity={max(1, memory // 2 // max(per_slot, 1)):_}"
    return ConfigError(
        f"buffer.capacity={capacity:,} slots x {per_slot:,} bytes per slot (observation, action, "
        f"reward, extras) = {_gib(total)}; {why}. Lower buffer.capacity (it counts timesteps "
        f"plus one per episode){hint}"
    )
