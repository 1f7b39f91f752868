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

The episode table is kept in *placement order*: ``serial`` numbers placements; a table row is
``serial - first serial of the window``. Because writes are sequential, placement order is ring
order, so the table's ``starts`` are sorted except for one wrap, and slot -> row is a binary
search (no per-slot map: that keeps CartPole within ~1.1x its raw bytes). An episode moved to the
head gets a new serial; its old row stays, dead, until it ages out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..episode import Episode
from ..errors import ConfigError, EpisodeValidationError, Where

__all__ = ["Change", "EpisodeStorage", "normalize_id"]

_SLOT_BITS = 32
_SLOT_MASK = (1 << _SLOT_BITS) - 1
_TABLE_FIELDS = ("start", "length", "t_started", "terminated", "truncated", "alive", "ids")


def normalize_id(eid: Any) -> int | str:
    """Episode ids are kept as ``int`` (any integer) or ``str`` (anything else, via ``str``)."""
    if isinstance(eid, (int, np.integer)) and not isinstance(eid, (bool, np.bool_)):
        return int(eid)
    if eid is None:
        raise EpisodeValidationError(
            "an episode without an id cannot be stored", Where(), reason="no_id"
        )
    if isinstance(eid, bytes):
        return eid.decode("utf-8", "replace")
    return str(eid)


@dataclass
class Change:
    """What one :meth:`EpisodeStorage.add` did, for samplers' hooks and counters.

    ``removed_*`` describe episodes whose slots stopped being usable (evicted, or the old place of
    a moved episode), with their length and done flag at that moment. ``start``/``length``/
    ``done`` describe the written episode afterwards; ``prev_length``/``prev_done`` its state
    before when it was extended in place (``prev_length`` is -1 when it was written fresh).
    """

    kind: str  # "new" | "appended" | "moved" | "duplicate" | "flagged" | "noop"
    removed_start: list[int] = field(default_factory=list)
    removed_length: list[int] = field(default_factory=list)
    removed_done: list[bool] = field(default_factory=list)
    start: int = -1
    length: int = 0
    done: bool = False
    prev_length: int = -1
    prev_done: bool = False
    serial: int = -1  # placement of the written episode


class EpisodeStorage:
    """Ring arrays of timesteps and a table of the episodes they hold. See the module docstring."""

    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)):
            raise ConfigError(
                f"capacity must be an integer number of timesteps, found {capacity!r}"
            )
        if capacity < 2:
            raise ConfigError(f"capacity must be at least 2 timesteps, found {capacity}")
        self.capacity = int(capacity)
        self.columns: dict[str, np.ndarray] = {}  # "obs", "actions", "rewards", "extras/<name>"
        self.extra_names: tuple[str, ...] = ()
        self.head = 0
        self.version = 0
        self._tab: dict[str, np.ndarray] = _empty_table(16)
        self._lo = 0  # live window of the table: rows [lo, hi)
        self._hi = 0
        self._base = 0  # serial of table index 0
        self._where: dict[int | str, int] = {}  # id -> serial of its placement
        self._wrap_cache: tuple[int, int] = (-1, 0)
        self._derived: tuple[int, np.ndarray, np.ndarray] = (-1, np.zeros(0), np.zeros(0))
        self.counters: dict[str, int] = dict.fromkeys(
            (
                "timesteps_added",
                "episodes_added",
                "timesteps_evicted",
                "episodes_evicted",
                "duplicates_dropped",
                "fragments_appended",
                "episodes_moved",
            ),
            0,
        )

    # ------------------------------------------------------------------ table views
    @property
    def pad_slot(self) -> int:
        """A slot whose every column is zero; units gather it for padding."""
        return self.capacity

    @property
    def starts(self) -> np.ndarray:
        return self._tab["start"][self._lo : self._hi]

    @property
    def lengths(self) -> np.ndarray:
        return self._tab["length"][self._lo : self._hi]

    @property
    def t_started(self) -> np.ndarray:
        return self._tab["t_started"][self._lo : self._hi]

    @property
    def terminated(self) -> np.ndarray:
        return self._tab["terminated"][self._lo : self._hi]

    @property
    def truncated(self) -> np.ndarray:
        return self._tab["truncated"][self._lo : self._hi]

    @property
    def alive(self) -> np.ndarray:
        return self._tab["alive"][self._lo : self._hi]

    @property
    def ids(self) -> np.ndarray:
        """Episode ids per row (object array of ``int``/``str``; dead rows keep theirs)."""
        return self._tab["ids"][self._lo : self._hi]

    @property
    def num_rows(self) -> int:
        return self._hi - self._lo

    @property
    def num_episodes(self) -> int:
        return len(self._where)

    @property
    def num_timesteps(self) -> int:
        """Steps held (actions), not counting final observations."""
        return int(self.lengths[self.alive].sum())

    def __len__(self) -> int:
        return self.num_timesteps

    def row_of_id(self, eid: Any) -> int | None:
        """The table row of a held episode, or None."""
        serial = self._where.get(normalize_id(eid))
        return None if serial is None else serial - self._base - self._lo

    def rows_of(self, slots: np.ndarray) -> np.ndarray:
        """Table rows of the episodes holding ``slots`` (which must be held; no check)."""
        starts = self.starts
        w = self._wrap_point()
        first = starts[0]
        a = np.searchsorted(starts[:w], slots, side="right") - 1
        if w == len(starts):
            return a
        b = np.searchsorted(starts[w:], slots, side="right") - 1 + w
        return np.where(slots >= first, a, b)

    def last_and_t_base(self) -> tuple[np.ndarray, np.ndarray]:
        """Per row: the slot of the episode's last step (``start + length - 1``) and
        ``t_started - start`` (so a slot's env step is ``t_base[row] + slot``). Cached per
        version; units use them to save a gather or two per column."""
        version, last, t_base = self._derived
        if version != self.version:
            starts = self.starts
            last = starts + self.lengths - 1
            t_base = self.t_started - starts
            self._derived = (self.version, last, t_base)
        return last, t_base

    def _wrap_point(self) -> int:
        """Index (window-relative) of the first row placed after the ring last wrapped."""
        version, w = self._wrap_cache
        if version != self.version:
            s = self.starts
            drops = np.flatnonzero(s[1:] < s[:-1])
            w = int(drops[0]) + 1 if len(drops) else len(s)
            self._wrap_cache = (self.version, w)
        return w

    def handles(self, slots: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Opaque int64 handles for sampled slots (placement serial and slot)."""
        serial = np.add(rows, self._base + self._lo, dtype=np.int64)
        serial <<= _SLOT_BITS
        serial |= slots
        return serial

    def is_current(self, serials: np.ndarray) -> np.ndarray:
        """True where a placement serial still holds its episode (not evicted, not moved)."""
        idx = np.asarray(serials, dtype=np.int64) - self._base
        inside = (idx >= self._lo) & (idx < self._hi)
        current = inside.copy()
        current[inside] = self._tab["alive"][idx[inside]]
        return current

    def resolve(self, handles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(slots, current)``: ``current`` is False where the episode that held the slot at
        sampling time has since been evicted or moved (the slot may now hold something else)."""
        handles = np.asarray(handles, dtype=np.int64)
        return handles & _SLOT_MASK, self.is_current(handles >> _SLOT_BITS)

    # ------------------------------------------------------------------ adding
    def add(self, episode: Episode) -> Change:
        """Stores one episode or fragment. Raises EpisodeValidationError for data that contradicts
        what is held (a gap in ``t``, an overlap, a discontinuous observation, other shapes)."""
        key = normalize_id(episode.id)
        serial = self._where.get(key)
        if not self.columns:
            self._allocate(episode)
        self._check_columns(episode)
        if serial is None:
            change = Change("new")
            self._place(episode, key, change)
            self.counters["episodes_added"] += 1
            self.counters["timesteps_added"] += len(episode)
            return change
        return self._continue(episode, key, serial - self._base)

    def _continue(self, ep: Episode, key: int | str, idx: int) -> Change:
        tab = self._tab
        t0, n = int(tab["t_started"][idx]), int(tab["length"][idx])
        done = bool(tab["terminated"][idx] or tab["truncated"][idx])
        end = t0 + n
        where = Where(episode_id=ep.id, timestep=ep.t_started)
        if ep.t_started < end:
            if ep.t_started >= t0 and ep.t_end <= end:
                if ep.is_done and not done and ep.t_end == end:
                    # The same steps again, now saying how the episode ended.
                    tab["terminated"][idx], tab["truncated"][idx] = ep.terminated, ep.truncated
                    self.version += 1
                    start = int(tab["start"][idx])
                    return Change(
                        "flagged",
                        start=start,
                        length=n,
                        done=True,
                        prev_length=n,
                        prev_done=False,
                        serial=idx + self._base,
                    )
                self.counters["duplicates_dropped"] += 1
                return Change("duplicate")
            raise EpisodeValidationError(
                f"fragment t={ep.t_started}..{ep.t_end} overlaps the stored steps t={t0}..{end} "
                "without repeating them",
                where,
                reason="overlap",
            )
        if done:
            raise EpisodeValidationError(
                f"fragment starting at t={ep.t_started} continues an episode that already ended "
                f"at t={end}",
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
        start = int(tab["start"][idx])
        last = self.columns["obs"][start + n]
        first = np.asarray(ep.observations[0])
        if not np.array_equal(last, first, equal_nan=last.dtype.kind in "fc"):
            raise EpisodeValidationError(
                "fragment's first observation differs from the stored last observation",
                Where(episode_id=ep.id, timestep=ep.t_started, column="obs"),
                reason="obs_gap",
            )
        k = len(ep)
        if k == 0:  # nothing new but perhaps the news that it ended
            if ep.is_done:
                tab["terminated"][idx], tab["truncated"][idx] = ep.terminated, ep.truncated
                self.version += 1
                return Change(
                    "flagged",
                    start=start,
                    length=n,
                    done=True,
                    prev_length=n,
                    serial=idx + self._base,
                )
            return Change("noop")
        self.counters["fragments_appended"] += 1
        self.counters["timesteps_added"] += k
        if idx == self._hi - 1 and self.head == start + n + 1 and self.head + k <= self.capacity:
            change = Change("appended", start=start, prev_length=n, serial=idx + self._base)
            self._evict_overlapping(self.head, k, change)
            self._write(start + n, ep, skip_first_obs=True)
            tab["length"][idx] = n + k
            tab["terminated"][idx], tab["truncated"][idx] = ep.terminated, ep.truncated
            self.head = start + n + k + 1
            self.version += 1
            change.length, change.done = n + k, ep.is_done
            return change
        # Move to the head: read the stored part out, free its place, write the joined episode.
        if n + k + 1 > self.capacity:
            raise self._too_long(ep.id, n + k)
        joined = Episode.concat_fragments([self._read(idx), ep])
        tab["alive"][idx] = False
        del self._where[key]
        change = Change("moved")
        change.removed_start.append(start)
        change.removed_length.append(n)
        change.removed_done.append(False)
        self._place(joined, key, change)
        self.counters["episodes_moved"] += 1
        return change

    def _place(self, ep: Episode, key: int | str, change: Change) -> None:
        n = len(ep)
        need = n + 1
        if need > self.capacity:
            raise self._too_long(ep.id, n)
        if self.head + need > self.capacity:
            self._evict_overlapping(self.head, self.capacity - self.head, change)
            self.head = 0
        self._evict_overlapping(self.head, need, change)
        start = self.head
        self._write(start, ep, skip_first_obs=False)
        self.head = start + need
        idx = self._append_row()
        tab = self._tab
        tab["start"][idx] = start
        tab["length"][idx] = n
        tab["t_started"][idx] = ep.t_started
        tab["terminated"][idx] = ep.terminated
        tab["truncated"][idx] = ep.truncated
        tab["alive"][idx] = True
        tab["ids"][idx] = key
        self._where[key] = idx + self._base
        self.version += 1
        change.start, change.length, change.done = start, n, ep.is_done
        change.serial = idx + self._base

    def _too_long(self, eid: Any, n: int) -> EpisodeValidationError:
        return EpisodeValidationError(
            f"episode of {n} steps needs {n + 1} slots but the buffer's capacity is "
            f"{self.capacity}",
            Where(episode_id=eid),
            reason="too_long",
        )

    def _evict_overlapping(self, lo: int, size: int, change: Change) -> None:
        """Drops the oldest rows while they start inside ``[lo, lo + size)``."""
        tab = self._tab
        hi = lo + size
        while self._lo < self._hi:
            i = self._lo
            s = int(tab["start"][i])
            if not (lo <= s < hi):
                break
            if tab["alive"][i]:
                n = int(tab["length"][i])
                change.removed_start.append(s)
                change.removed_length.append(n)
                change.removed_done.append(bool(tab["terminated"][i] or tab["truncated"][i]))
                tab["alive"][i] = False
                del self._where[tab["ids"][i]]
                self.counters["episodes_evicted"] += 1
                self.counters["timesteps_evicted"] += n
            tab["ids"][i] = None
            self._lo += 1
            self.version += 1

    def _append_row(self) -> int:
        cap = len(self._tab["start"])
        if self._hi == cap:
            live = self._hi - self._lo
            new_cap = cap if live <= cap // 2 else cap * 2
            new = _empty_table(new_cap)
            for f in _TABLE_FIELDS:
                new[f][:live] = self._tab[f][self._lo : self._hi]
            self._tab = new
            self._base += self._lo
            self._hi, self._lo = live, 0
        self._hi += 1
        return self._hi - 1

    # ------------------------------------------------------------------ columns
    def _allocate(self, ep: Episode) -> None:
        size = self.capacity + 1
        self.columns["obs"] = np.zeros((size, *ep.observations.shape[1:]), ep.observations.dtype)
        self.columns["actions"] = np.zeros((size, *ep.actions.shape[1:]), ep.actions.dtype)
        self.columns["rewards"] = np.zeros(size, ep.rewards.dtype)
        for name, col in ep.extras.items():
            self.columns["extras/" + name] = np.zeros((size, *col.shape[1:]), col.dtype)
        self.extra_names = tuple(ep.extras)

    def _check_columns(self, ep: Episode) -> None:
        if set(ep.extras) != set(self.extra_names):
            raise EpisodeValidationError(
                f"episode carries extra columns {sorted(ep.extras)}, the buffer holds "
                f"{sorted(self.extra_names)}",
                Where(episode_id=ep.id),
                reason="columns",
            )
        pairs = [("obs", ep.observations), ("actions", ep.actions), ("rewards", ep.rewards)]
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
        n = len(ep)
        c = self.columns
        if skip_first_obs:
            c["obs"][at + 1 : at + n + 1] = ep.observations[1:]
        else:
            c["obs"][at : at + n + 1] = ep.observations
        c["actions"][at : at + n] = ep.actions
        c["rewards"][at : at + n] = ep.rewards
        for name, col in ep.extras.items():
            c["extras/" + name][at : at + n] = col

    def _read(self, idx: int) -> Episode:
        """A held episode (table index, not window row) copied out of the ring."""
        tab = self._tab
        s, n = int(tab["start"][idx]), int(tab["length"][idx])
        c = self.columns
        return Episode(
            id=tab["ids"][idx],
            observations=c["obs"][s : s + n + 1].copy(),
            actions=c["actions"][s : s + n].copy(),
            rewards=c["rewards"][s : s + n].copy(),
            extras={k: c["extras/" + k][s : s + n].copy() for k in self.extra_names},
            terminated=bool(tab["terminated"][idx]),
            truncated=bool(tab["truncated"][idx]),
            t_started=int(tab["t_started"][idx]),
        )

    def episode(self, row: int) -> Episode:
        """The held episode at table ``row``, copied out (ids come back normalized)."""
        if not (0 <= row < self.num_rows) or not self.alive[row]:
            raise IndexError(f"row {row} does not hold an episode")
        return self._read(row + self._lo)

    def episodes(self) -> list[Episode]:
        """All held episodes, oldest placement first (copies; for tests and inspection)."""
        return [self.episode(int(r)) for r in np.flatnonzero(self.alive)]

    def nbytes(self) -> int:
        """Bytes of the ring arrays and the episode table (ids counted as 8-byte references)."""
        return sum(c.nbytes for c in self.columns.values()) + sum(
            a.nbytes for a in self._tab.values()
        )

    # ------------------------------------------------------------------ state
    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(meta, arrays)``: JSON-able scalars and numpy arrays (no objects), enough to rebuild
        an identical storage with :meth:`set_state`."""
        arrays = {"col/" + k: v for k, v in self.columns.items()}
        for f in _TABLE_FIELDS[:-1]:
            arrays["tab/" + f] = self._tab[f][self._lo : self._hi].copy()
        ids = self.ids
        is_int = np.array([isinstance(i, int) for i in ids], dtype=bool)
        arrays["tab/ids_is_int"] = is_int
        arrays["tab/ids_int"] = np.array([i if isinstance(i, int) else 0 for i in ids], np.int64)
        arrays["tab/ids_str"] = np.array(
            ["" if isinstance(i, int) or i is None else i for i in ids], dtype=np.str_
        )
        arrays["tab/ids_none"] = np.array([i is None for i in ids], dtype=bool)
        meta = {
            "capacity": self.capacity,
            "head": self.head,
            "first_serial": self._base + self._lo,
            "extra_names": list(self.extra_names),
            "counters": dict(self.counters),
        }
        return meta, arrays

    def set_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        if int(meta["capacity"]) != self.capacity:
            raise ConfigError(
                f"state is of a storage with capacity {meta['capacity']}, this one "
                f"has capacity {self.capacity}"
            )
        self.columns = {k[4:]: np.array(v) for k, v in arrays.items() if k.startswith("col/")}
        for k, v in self.columns.items():
            if v.shape[:1] != (self.capacity + 1,):
                raise ConfigError(
                    f"column {k!r} has {v.shape[:1]} rows, expected {self.capacity + 1}"
                )
        self.extra_names = tuple(meta["extra_names"])
        n = len(arrays["tab/start"])
        tab = _empty_table(max(16, 2 * n))
        for f in _TABLE_FIELDS[:-1]:
            tab[f][:n] = arrays["tab/" + f]
        ids: list[Any] = [
            None if none else int(i) if is_int else str(s)
            for none, is_int, i, s in zip(
                arrays["tab/ids_none"],
                arrays["tab/ids_is_int"],
                arrays["tab/ids_int"],
                arrays["tab/ids_str"],
                strict=True,
            )
        ]
        tab["ids"][:n] = ids  # an object array takes a list element-wise
        self._tab, self._lo, self._hi = tab, 0, n
        self._base = int(meta["first_serial"])
        self.head = int(meta["head"])
        self.counters = {k: int(v) for k, v in meta["counters"].items()}
        alive = np.flatnonzero(tab["alive"][:n])
        self._where = {tab["ids"][i]: int(i) + self._base for i in alive}
        self.version += 1


def _empty_table(n: int) -> dict[str, np.ndarray]:
    return {
        "start": np.zeros(n, np.int64),
        "length": np.zeros(n, np.int64),
        "t_started": np.zeros(n, np.int64),
        "terminated": np.zeros(n, bool),
        "truncated": np.zeros(n, bool),
        "alive": np.zeros(n, bool),
        "ids": np.empty(n, object),
    }
