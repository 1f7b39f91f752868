"""Checks a saved storage state before the ring restores it.

:meth:`~.ring.EpisodeStorage.get_state` gives ``(meta, arrays)``: JSON-able scalars and numpy
arrays. A state read back from a checkpoint is untrusted input: :func:`check_state` checks every
invariant the ring relies on (the head, the columns, the episode table's placements and ids)
before anything is restored, so a corrupt checkpoint is a :class:`~offline_prelearner.errors.
DataError` naming its field (reason ``corrupt_checkpoint``), never a ring that breaks later.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import DataError, Where

__all__ = ["check_state", "state_capacity"]

_TABLE_KINDS = {
    "start": "iu",
    "length": "iu",
    "t_started": "iu",
    "terminated": "b",
    "truncated": "b",
    "alive": "b",
    "ids_kind": "iu",
    "ids_int": "iu",
    "ids_str": "U",
}
_SERIAL_LIMIT = 1 << 31  # handles are serial << 32 | slot, in an int64


def state_capacity(meta: dict[str, Any]) -> int:
    """The capacity a saved state was taken from.

    Args:
        meta: the state's scalars, as :meth:`~.ring.EpisodeStorage.get_state` gives them.

    Returns:
        ``meta["capacity"]``.

    Raises:
        DataError: the field is missing or not an integer (``storage.capacity``).
    """
    return _int(meta, "capacity")


def check_state(capacity: int, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Every invariant the ring relies on, checked on a state before anything is restored.

    ``head`` within ``0..capacity``; columns all of ``capacity + 1`` numeric rows with the
    padding row zero, the extras the meta names, observations and actions and rewards; table
    columns 1-D, equal in length and of their dtypes; every placement within the ring (``0 <=
    start``, ``start + length + 1 <= capacity``), placements in ring order (starts ascending
    with at most one wrap) and disjoint, the head right after the newest one; live ids present
    and unique; counters non-negative integers. Vectorized: no loop over rows.

    Args:
        capacity: the capacity of the storage the state is restored into.
        meta: the state's scalars.
        arrays: the state's columns (``col/...``) and table columns (``tab/...``).

    Raises:
        DataError: the first invariant broken, naming the field (``storage.head``,
            ``tab/start``, ``col/actions``, ...).
    """
    head = _int(meta, "head", 0, capacity)
    first = _int(meta, "first_serial", 0, _SERIAL_LIMIT - 1)
    extras = _extra_names(meta)
    _check_counters(meta)
    cols = {k: v for k, v in arrays.items() if k.startswith("col/")}
    if cols:
        _check_columns(capacity, cols, extras)
    tab = _table(arrays)
    n = len(tab["start"])
    if n and not cols:
        raise _fail("storage columns", f"are missing but the table holds {n} placements")
    if first + n > _SERIAL_LIMIT:
        raise _fail("storage.first_serial", f"{first} + {n} placements overflows the handles")
    if n == 0:
        return
    _check_placements(capacity, head, tab["start"].astype(np.int64), tab["length"].astype(np.int64))
    _check_ids(tab)


def _fail(field: str, message: str) -> DataError:
    return DataError(f"{field} {message}", Where(column=field), reason="corrupt_checkpoint")


def _int(meta: dict[str, Any], name: str, lo: int | None = None, hi: int | None = None) -> int:
    """``meta[name]`` as an int in ``[lo, hi]`` (a bool, a float or a string is not one)."""
    field = f"storage.{name}"
    if name not in meta:
        raise _fail(field, "is missing")
    v = meta[name]
    if isinstance(v, bool) or not isinstance(v, int):
        raise _fail(field, f"must be an integer, found {v!r}")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise _fail(field, f"is {v}, expected {lo if lo is not None else ''}..{hi or ''}")
    return v


def _extra_names(meta: dict[str, Any]) -> list[str]:
    """``meta["extra_names"]``: a list of distinct names."""
    extras = meta.get("extra_names")
    if not isinstance(extras, list) or not all(isinstance(e, str) for e in extras):
        raise _fail("storage.extra_names", f"must be a list of names, found {extras!r}")
    if len(set(extras)) != len(extras):
        raise _fail("storage.extra_names", f"repeats a name: {extras!r}")
    return extras


def _check_counters(meta: dict[str, Any]) -> None:
    """``meta["counters"]`` maps names to integers >= 0."""
    counters = meta.get("counters")
    if not isinstance(counters, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counters.values()
    ):
        raise _fail("storage.counters", f"must map names to integers >= 0, found {counters!r}")


def _check_columns(capacity: int, cols: dict[str, np.ndarray], extras: list[str]) -> None:
    """The ring's columns: the ones the meta names, each ``capacity + 1`` numeric rows, padded."""
    names = set(cols)
    need = {"col/actions", "col/rewards"} | {"col/extras/" + e for e in extras}
    obs = {k for k in names if k == "col/obs" or k.startswith("col/obs/")}
    if not need <= names or not obs or ("col/obs" in obs and len(obs) > 1):
        raise _fail("storage columns", f"are {sorted(names)}, expected {sorted(need)} + obs")
    extra = names - need - obs
    if extra:
        raise _fail(sorted(extra)[0], "is not a column of this storage")
    for k, v in cols.items():
        if v.ndim < 1 or v.shape[0] != capacity + 1:
            raise _fail(k, f"has shape {list(v.shape)}, expected {capacity + 1} rows")
        if v.dtype.kind not in "biuf":
            raise _fail(k, f"has dtype {v.dtype}, expected numbers")
        if v[capacity].any():
            raise _fail(k, f"padding row {capacity} is not zero")


def _table(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The episode table's columns: all present, 1-D, of their dtypes and of one length."""
    tab: dict[str, np.ndarray] = {}
    for f, kinds in _TABLE_KINDS.items():
        a = arrays.get("tab/" + f)
        if a is None:
            raise _fail("tab/" + f, "is missing")
        if a.ndim != 1 or a.dtype.kind not in kinds:
            raise _fail("tab/" + f, f"is {a.dtype}{list(a.shape)}, expected a 1-D {kinds} column")
        tab[f] = a
    n = len(tab["start"])
    for f, a in tab.items():
        if len(a) != n:
            raise _fail("tab/" + f, f"has {len(a)} rows, tab/start has {n}")
    return tab


def _check_placements(capacity: int, head: int, start: np.ndarray, length: np.ndarray) -> None:
    """Placements within the ring, in ring order (one wrap at most), disjoint, head after them."""
    if start.min() < 0 or start.max() >= capacity:
        bad = int(np.flatnonzero((start < 0) | (start >= capacity))[0])
        raise _fail("tab/start", f"row {bad} is {start[bad]}, outside the ring 0..{capacity - 1}")
    end = start + length + 1  # one past the last slot
    if length.min() < 0 or end.max() > capacity:
        bad = int(np.flatnonzero((length < 0) | (end > capacity))[0])
        raise _fail(
            "tab/length",
            f"row {bad} is {length[bad]} at start {start[bad]}: the episode leaves the ring "
            f"of {capacity} slots",
        )
    wraps = np.flatnonzero(start[1:] < start[:-1])
    if len(wraps) > 1:
        raise _fail("tab/start", f"wraps the ring {len(wraps)} times (placements out of order)")
    gap = start[1:] - end[:-1]  # >= 0 between neighbours, except across the wrap
    if len(wraps):
        gap[wraps[0]] = 0
    if (gap < 0).any():
        bad = int(np.flatnonzero(gap < 0)[0])
        raise _fail("tab/start", f"row {bad + 1} overlaps the episode of row {bad}")
    if len(wraps) and end[-1] > start[0]:
        raise _fail("tab/start", "the newest placement overlaps the oldest one")
    if head != end[-1]:
        raise _fail(
            "storage.head", f"is {head}, expected {int(end[-1])} (after the newest episode)"
        )


def _check_ids(tab: dict[str, np.ndarray]) -> None:
    """Live episodes have an int or str id, and no two share one."""
    kind, alive = tab["ids_kind"], tab["alive"]
    if ((kind < 0) | (kind > 2)).any() or (kind[alive] == 2).any():
        raise _fail("tab/ids_kind", "holds a kind other than 0 (int) or 1 (str) for a live episode")
    live = np.flatnonzero(alive)
    live_kind = kind[live]
    ints = tab["ids_int"][live[live_kind == 0]]
    strs = tab["ids_str"][live[live_kind == 1]]
    if len(np.unique(ints)) != len(ints) or len(np.unique(strs)) != len(strs):
        raise _fail("tab/ids", "repeats the id of a live episode")
