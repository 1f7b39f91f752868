"""The episode table of :class:`~offline_prelearner.replay.storage.ring.EpisodeStorage`.

One record per *placement* of an episode in the ring (start slot, length, ``t_started``, flags,
alive, id -- normalized by :func:`normalize_id`), kept in placement order in growable numpy
columns. ``serial`` numbers placements; a record's *index* is ``serial - base`` and its *row*
(what samplers and units see) is ``index - lo``, where ``[lo, hi)`` is the live window. Records
leave only from the front (the oldest placement), so the window slides; when the columns fill up
they are compacted or doubled, which changes rows but never serials. A placement whose episode
was evicted or moved is *dead*: it stays in the window, with its slots, until it ages out at the
front.

Writes to the ring are sequential, so placement order is ring order: ``starts`` ascend except for
one wrap, and slot -> row is two binary searches (no per-slot map).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import EpisodeValidationError, Where

__all__ = ["EpisodeTable", "handles_of", "normalize_id"]

_SLOT_BITS = 32
_SLOT_MASK = (1 << _SLOT_BITS) - 1
_NUMERIC = ("start", "length", "t_started", "terminated", "truncated", "alive")


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


#: What ``drop_front_inside`` returns when it drops nothing (shared, read-only).
_NOTHING = (
    _frozen(np.zeros(0, np.int64)),
    _frozen(np.zeros(0, np.int64)),
    _frozen(np.zeros(0, bool)),
)


def normalize_id(eid: Any) -> int | str:
    """Episode ids are kept as ``int`` (any integer) or ``str`` (anything else, via ``str``).

    Args:
        eid: An episode id as a source gave it: a Python or numpy integer (not a bool), ``bytes``
            (decoded as UTF-8, bad bytes replaced) or anything with a ``str`` form.

    Returns:
        The id as an ``int`` for an integer, else as a ``str``.

    Raises:
        EpisodeValidationError: ``eid`` is None (reason ``no_id``).
    """
    if isinstance(eid, (int, np.integer)) and not isinstance(eid, (bool, np.bool_)):
        return int(eid)
    if eid is None:
        raise EpisodeValidationError(
            "an episode without an id cannot be stored", Where(), reason="no_id"
        )
    if isinstance(eid, bytes):
        return eid.decode("utf-8", "replace")
    return str(eid)


def handles_of(serials: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """Opaque int64 handles: each placement serial and slot in one int64 (``serials`` is
    consumed: shifted in place when it is already int64).

    Args:
        serials: Placement serials, one per handle (integers; an int64 array is overwritten).
        slots: Ring slots, one per serial (broadcastable to ``serials``), each below ``2**32``.

    Returns:
        int64 handles, the serial in the high bits and the slot in the low 32 bits.
    """
    serial = np.asarray(serials, dtype=np.int64)
    serial <<= _SLOT_BITS
    serial |= slots
    return serial


def _empty(n: int) -> dict[str, np.ndarray]:
    cols = {
        f: np.zeros(n, bool if f in ("terminated", "truncated", "alive") else np.int64)
        for f in _NUMERIC
    }
    cols["ids"] = np.empty(n, object)
    return cols


class EpisodeTable:
    """Placement-ordered episode records; see the module docstring."""

    def __init__(self) -> None:
        self.cols = _empty(16)
        self.lo = 0
        self.hi = 0
        self.base = 0  # serial of index 0
        self.where: dict[int | str, int] = {}  # id -> serial of its live placement
        self.version = 0  # bumped on every change
        self._wrap = (-1, 0)
        self._derived: tuple[int, np.ndarray, np.ndarray] = (-1, np.zeros(0), np.zeros(0))

    # ------------------------------------------------------------------ window views
    def view(self, field: str) -> np.ndarray:
        """The live window of column ``field`` (a view).

        Args:
            field: A column name: ``start``, ``length``, ``t_started``, ``terminated``,
                ``truncated``, ``alive`` or ``ids``.

        Returns:
            The column's rows ``[lo, hi)``, a view that sees later in-place writes.
        """
        return self.cols[field][self.lo : self.hi]

    @property
    def num_rows(self) -> int:
        """Records in the window, dead ones included."""
        return self.hi - self.lo

    def index_of(self, key: int | str) -> int | None:
        """Index of the record of episode ``key``, or None if it has none.

        Args:
            key: An episode id as :func:`normalize_id` returns it.

        Returns:
            The index (``serial - base``, not the row) of the episode's live placement, or None
            when no live record holds it.
        """
        serial = self.where.get(key)
        return None if serial is None else serial - self.base

    def get(self, idx: int) -> tuple[int, int, int, bool, bool]:
        """``(start, length, t_started, terminated, truncated)`` of record ``idx``.

        Args:
            idx: A record index (``serial - base``, as :meth:`index_of` returns), not a row.

        Returns:
            The record's first slot, its number of steps, the env step of its first slot and its
            two end flags, as Python scalars.
        """
        c = self.cols
        return (
            int(c["start"][idx]),
            int(c["length"][idx]),
            int(c["t_started"][idx]),
            bool(c["terminated"][idx]),
            bool(c["truncated"][idx]),
        )

    # ------------------------------------------------------------------ changes
    def append(
        self,
        key: int | str,
        start: int,
        length: int,
        t_started: int,
        terminated: bool,
        truncated: bool,
    ) -> int:
        """Adds a live record at the back; returns its index.

        Args:
            key: The episode's id (normalized; not held by another live record).
            start: Ring slot of the episode's first stored step.
            length: Steps stored from ``start`` on.
            t_started: Env step of the slot ``start`` (the episode's ``t`` there).
            terminated: Whether the episode ended in a terminal state.
            truncated: Whether the episode was cut off (time limit, end of data).

        Returns:
            The new record's index (``serial - base``).
        """
        if self.hi == len(self.cols["start"]):
            self._grow()
        i = self.hi
        self.hi += 1
        c = self.cols
        c["start"][i], c["length"][i], c["t_started"][i] = start, length, t_started
        c["terminated"][i], c["truncated"][i], c["alive"][i] = terminated, truncated, True
        c["ids"][i] = key
        self.where[key] = i + self.base
        self.version += 1
        return i

    def append_many(
        self,
        keys: list[int | str],
        start: np.ndarray,
        length: np.ndarray,
        t_started: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
    ) -> int:
        """Adds live records at the back, in order, as ``append`` one by one would (``keys``
        must be distinct and not held); returns the index of the first.

        Args:
            keys: The episodes' ids, one per record, normalized.
            start: int64 first ring slot per record, in placement order.
            length: Steps stored per record.
            t_started: Env step of each record's first slot.
            terminated: bool per record: ended in a terminal state.
            truncated: bool per record: cut off (time limit, end of data).

        Returns:
            The index of the first new record; the others follow it.
        """
        m = len(keys)
        cap = len(self.cols["start"])
        if self.hi + m > cap:
            live = self.hi - self.lo
            self._grow(cap if live + m <= cap // 2 else 2 * max(cap, live + m))
        i, c = self.hi, self.cols
        part = slice(i, i + m)
        c["start"][part], c["length"][part], c["t_started"][part] = start, length, t_started
        c["terminated"][part], c["truncated"][part], c["alive"][part] = terminated, truncated, True
        c["ids"][part] = keys
        serial = i + self.base
        self.where.update(zip(keys, range(serial, serial + m), strict=True))
        self.hi += m
        self.version += m
        return i

    def drop_front_inside(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Drops the front records while they start inside slots ``[lo, hi)`` -- what a run of
        ``kill`` (live ones) and ``pop_front`` calls would do. Returns ``(start, length, done)``
        of the live records dropped, oldest first.

        Args:
            lo: First ring slot of the range about to be overwritten.
            hi: One past its last slot (``lo <= hi``; no wrap inside the range).

        Returns:
            int64 ``start``, int64 ``length`` and bool ``done`` (terminated or truncated) of the
            live records dropped; three shared read-only empty arrays when nothing is dropped.
        """
        c, first = self.cols, self.lo
        if first == self.hi or not lo <= c["start"][first] < hi:  # nothing to drop: common
            return _NOTHING
        end = first
        step = max(hi - lo, 1)
        while end < self.hi:  # records start at distinct slots: usually one step suffices
            s = c["start"][end : min(self.hi, end + step)]
            inside = (s >= lo) & (s < hi)
            if not inside.all():
                end += int(np.argmin(inside))
                break
            end += len(s)
        part = slice(first, end)
        alive = c["alive"][part]
        live = np.flatnonzero(alive) + first
        for key in c["ids"][live]:
            del self.where[key]
        out = (
            c["start"][live],
            c["length"][live],
            c["terminated"][live] | c["truncated"][live],
        )
        c["alive"][part] = False
        c["ids"][part] = None
        self.lo = end
        self.version += (end - first) + len(live)
        return out

    def update(self, idx: int, *, length: int, terminated: bool, truncated: bool) -> None:
        """Sets record ``idx``'s length and end flags (the episode grew or ended).

        Args:
            idx: A record index (``serial - base``).
            length: The record's new number of stored steps.
            terminated: Whether the episode now ends in a terminal state.
            truncated: Whether the episode is now cut off.
        """
        c = self.cols
        c["length"][idx], c["terminated"][idx], c["truncated"][idx] = length, terminated, truncated
        self.version += 1

    def kill(self, idx: int) -> None:
        """Marks record ``idx`` dead (evicted or moved); it keeps its place in the window.

        Args:
            idx: Index (``serial - base``) of a live record; its id is no longer held.
        """
        self.cols["alive"][idx] = False
        del self.where[self.cols["ids"][idx]]
        self.version += 1

    def pop_front(self) -> None:
        """Drops the front record (it must be dead already)."""
        self.cols["ids"][self.lo] = None
        self.lo += 1
        self.version += 1

    def _grow(self, size: int | None = None) -> None:
        """Compacts the window to index 0 in columns of ``size`` records (default: the same
        size when at most half full, else double)."""
        cap = len(self.cols["start"])
        live = self.hi - self.lo
        if size is None:
            size = cap if live <= cap // 2 else cap * 2
        new = _empty(size)
        for f, col in self.cols.items():
            new[f][:live] = col[self.lo : self.hi]
        self.cols, self.base, self.lo, self.hi = new, self.base + self.lo, 0, live

    # ------------------------------------------------------------------ lookups
    def rows_of(self, slots: np.ndarray) -> np.ndarray:
        """Rows of the records whose slots contain ``slots`` (held slots; not checked).

        Args:
            slots: Integer ring slots, each inside some record's ``[start, start + length)``; a
                slot no record holds gives a meaningless row.

        Returns:
            int64 row (index into the window) per slot.
        """
        starts = self.view("start")
        w = self._wrap_point()
        a = np.searchsorted(starts[:w], slots, side="right") - 1
        if w == len(starts):
            return a
        b = np.searchsorted(starts[w:], slots, side="right") - 1 + w
        return np.where(slots >= starts[0], a, b)

    def _wrap_point(self) -> int:
        """Row of the first record placed after the ring last wrapped (``num_rows`` if none)."""
        version, w = self._wrap
        if version != self.version:
            s = self.view("start")
            drops = np.flatnonzero(s[1:] < s[:-1])
            w = int(drops[0]) + 1 if len(drops) else len(s)
            self._wrap = (self.version, w)
        return w

    def last_and_t_base(self) -> tuple[np.ndarray, np.ndarray]:
        """Per row: the slot of the last step (``start + length - 1``) and ``t_started - start``
        (a slot's env step is ``t_base[row] + slot``). Cached per version."""
        version, last, t_base = self._derived
        if version != self.version:
            starts = self.view("start")
            last = starts + self.view("length") - 1
            t_base = self.view("t_started") - starts
            self._derived = (self.version, last, t_base)
        return last, t_base

    def handles(self, slots: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Handles of ``slots`` in table ``rows``: the row's serial and the slot in one int64.

        Args:
            slots: Ring slots, one per handle.
            rows: Window rows of the records holding them (as :meth:`rows_of` gives).

        Returns:
            int64 handles, as :func:`handles_of` packs them.
        """
        return handles_of(np.add(rows, self.base + self.lo, dtype=np.int64), slots)

    def is_current(self, serials: np.ndarray) -> np.ndarray:
        """Per serial: whether its record is in the window and alive.

        Args:
            serials: Placement serials (any integers; those outside the window are not current).

        Returns:
            bool per serial.
        """
        idx = np.asarray(serials, dtype=np.int64) - self.base
        inside = (idx >= self.lo) & (idx < self.hi)
        if inside.all():  # the usual case: a gather, no masking
            return self.cols["alive"].take(idx)
        current = inside.copy()
        current[inside] = self.cols["alive"][idx[inside]]
        out: np.ndarray = current
        return out

    def resolve(self, handles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(slots, current)`` of ``handles``: the slot each names and whether its record still
        stands.

        Args:
            handles: int64 handles from :meth:`handles` (e.g. a sample's ``indices`` column).

        Returns:
            int64 slot per handle, and bool per handle: its placement is in the window and alive
            (False once the episode was evicted or moved).
        """
        handles = np.asarray(handles, dtype=np.int64)
        return handles & _SLOT_MASK, self.is_current(handles >> _SLOT_BITS)

    # ------------------------------------------------------------------ state
    def get_state(self) -> tuple[int, dict[str, np.ndarray]]:
        """``(first serial, arrays)``; ids become ``ids_int``/``ids_str``/``ids_kind`` arrays
        (kind 0: int, 1: str, 2: none), so no object array is ever written."""
        arrays = {f: self.view(f).copy() for f in _NUMERIC}
        ids = self.view("ids")
        kind = np.array(
            [0 if isinstance(i, int) else 2 if i is None else 1 for i in ids], dtype=np.int8
        )
        arrays["ids_kind"] = kind
        arrays["ids_int"] = np.array(
            [i if k == 0 else 0 for i, k in zip(ids, kind, strict=True)], dtype=np.int64
        )
        arrays["ids_str"] = np.array(
            [i if k == 1 else "" for i, k in zip(ids, kind, strict=True)], dtype=np.str_
        )
        return self.base + self.lo, arrays

    def set_state(self, first_serial: int, arrays: dict[str, Any]) -> None:
        """Restores :meth:`get_state`'s arrays with ``first_serial``; raises :class:`ValueError` if
        the columns' lengths differ.

        Args:
            first_serial: Serial of the first record, as :meth:`get_state` returned it; handles
                taken before the save stay valid after the load.
            arrays: The numeric columns plus ``ids_kind``, ``ids_int`` and ``ids_str``.

        Raises:
            ValueError: A column's length differs from ``start``'s.
        """
        n = len(arrays["start"])
        for f in (*_NUMERIC, "ids_kind", "ids_int", "ids_str"):
            if len(arrays[f]) != n:
                raise ValueError(f"table column {f!r} has {len(arrays[f])} rows, 'start' {n}")
        cols = _empty(max(16, 2 * n))
        for f in _NUMERIC:
            cols[f][:n] = arrays[f]
        cols["ids"][:n] = [
            int(i) if k == 0 else str(s) if k == 1 else None
            for k, i, s in zip(
                arrays["ids_kind"], arrays["ids_int"], arrays["ids_str"], strict=True
            )
        ]
        self.cols, self.lo, self.hi, self.base = cols, 0, n, int(first_serial)
        self.where = {cols["ids"][i]: int(i) + self.base for i in np.flatnonzero(cols["alive"][:n])}
        self.version += 1
