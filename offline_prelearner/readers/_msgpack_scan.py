"""Fast path for msgpack episode records: a batch of records decoded with a few numpy operations.

RLlib writes an episode's buffers *non-finalized*: ``observations`` is a list with one
msgpack-numpy record per step (``{b"nd", b"type", b"kind", b"shape", b"data"}``), ``actions`` a
list of scalar records, ``rewards`` a list of msgpack floats, ``infos`` a list of (mostly empty)
maps. Decoding that with ``msgpack.unpackb`` builds hundreds of small Python objects per episode.

Here each record is walked at the *header* level only (keys, scalars, list headers), once per
episode, and every per-step list is described by a :class:`_Template`: the bytes each element
repeats (``prefix``) and the size of the part that changes (the payload). The elements of a list
are then assumed to be ``size`` bytes apart. Nothing is trusted yet: :func:`assemble` gathers the
lists of a whole batch into one ``[rows, size]`` byte matrix per template and checks, in one numpy
comparison, that every element repeats the prefix byte for byte. An element that repeats the prefix
has the same structure (keys, dtype, shape, payload length), so the layout is proven, not guessed.
Episodes whose lists are not uniform (mixed int/float rewards, ragged observations, non-empty
infos that are not plain maps...) or that use anything else this walker does not know are handed
back as ``None``; the caller decodes them with the general, safe path
(:func:`~offline_prelearner.codec.unpackb` + :meth:`Episode.from_state`), which is also the
reference the tests compare this module with. The values produced are the same, dtype for dtype.

Nothing here unpickles or allocates more than the message it reads: object dtypes make the walker
give up (the general path then refuses them with a clear error), list extents are checked against
the record's end before use.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..codec import DecodeLimits, _numpy_hook
from ..episode import Episode

__all__ = ["EpisodeScanner", "Fallback", "Plan", "assemble"]


class Fallback(Exception):
    """The fast path does not handle this record; decode it with the general path.

    ``episode_id`` is the id read before giving up (None if not reached), for error messages.
    """

    def __init__(self, episode_id: Any = None) -> None:
        super().__init__()
        self.episode_id = episode_id


# --------------------------------------------------------------------------------------------
# element templates
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class _Template:
    """How each element of a per-step list is laid out.

    Every element is ``size`` bytes: ``prefix`` (identical in all elements), then a payload of
    ``size - len(prefix)`` bytes read as ``dtype`` with per-element ``shape``. ``check`` tests
    1-byte elements that have no prefix (fixints, bools, empty maps); ``convert`` turns the
    stored values into what ``np.asarray`` of the decoded Python values would give.
    """

    prefix: bytes
    size: int
    dtype: np.dtype[Any]
    shape: tuple[int, ...] = ()
    check: Callable[[np.ndarray], np.ndarray] | None = None
    convert: Callable[[np.ndarray], np.ndarray] | None = None
    first: frozenset[int] | None = None  # bytes a 1-byte element may be (``check`` in Python)
    prefix_u8: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prefix_u8", np.frombuffer(self.prefix, np.uint8))

    def bad_rows(self, mat: np.ndarray) -> np.ndarray | None:
        """Rows of a ``[rows, size]`` byte matrix that are not elements of this layout.

        None when every row is (checked with one comparison over the whole matrix first).
        """
        plen = len(self.prefix)
        ok = None
        if plen:
            head = mat[:, :plen]
            if not np.array_equal(head, np.broadcast_to(self.prefix_u8, head.shape)):
                ok = (head == self.prefix_u8).all(axis=1)
        if self.check is not None:
            c = self.check(mat[:, 0])
            ok = c if ok is None else ok & c
        if ok is None or ok.all():
            return None
        return np.flatnonzero(~ok)

    def values(self, mat: np.ndarray) -> np.ndarray:
        """The payloads of a ``[rows, size]`` byte matrix as ``[rows, *shape]`` values."""
        n = len(mat)
        if self.size == len(self.prefix):  # zero-size payloads
            out = np.zeros((n, *self.shape), dtype=self.dtype)
        else:
            payload = np.ascontiguousarray(mat[:, len(self.prefix) :])
            out = payload.view(self.dtype).reshape((n, *self.shape))
        return self.convert(out) if self.convert is not None else out


def _as_int64(a: np.ndarray) -> np.ndarray:
    return a.astype(np.int64).reshape(len(a))


def _as_float64(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64).reshape(len(a))


def _fixint_ok(b: np.ndarray) -> np.ndarray:
    return b.view(np.int8) >= -32  # 0x00-0x7f and 0xe0-0xff


def _bool_ok(b: np.ndarray) -> np.ndarray:
    return (b == 0xC2) | (b == 0xC3)


_FIXINT = _Template(
    b"",
    1,
    np.dtype(np.int8),
    check=_fixint_ok,
    convert=_as_int64,
    first=frozenset([*range(0x80), *range(0xE0, 0x100)]),
)
_BOOL = _Template(
    b"",
    1,
    np.dtype(np.uint8),
    check=_bool_ok,
    convert=lambda a: a.reshape(len(a)) == 0xC3,
    first=frozenset([0xC2, 0xC3]),
)
_EMPTY_MAP = _Template(
    b"", 1, np.dtype(np.uint8), check=lambda b: b == 0x80, first=frozenset([0x80])
)

# A list of plain msgpack numbers, all written with the same marker byte.
_NUMBERS: dict[int, _Template] = {
    marker: _Template(bytes([marker]), 1 + np.dtype(dt).itemsize, np.dtype(dt), convert=conv)
    for marker, dt, conv in [
        (0xCA, ">f4", _as_float64),
        (0xCB, ">f8", _as_float64),
        (0xCC, "u1", _as_int64),
        (0xCD, ">u2", _as_int64),
        (0xCE, ">u4", _as_int64),
        (0xD0, "i1", _as_int64),
        (0xD1, ">i2", _as_int64),
        (0xD2, ">i4", _as_int64),
        (0xD3, ">i8", _as_int64),
    ]
}

_INT_FORMATS = {
    0xCC: ">B",
    0xCD: ">H",
    0xCE: ">I",
    0xCF: ">Q",
    0xD0: ">b",
    0xD1: ">h",
    0xD2: ">i",
    0xD3: ">q",
    0xCA: ">f",
    0xCB: ">d",
}
_INT_STRUCTS = {c: struct.Struct(f) for c, f in _INT_FORMATS.items()}


# --------------------------------------------------------------------------------------------
# header-level walking
# --------------------------------------------------------------------------------------------
def _map_len(buf: bytes, pos: int) -> tuple[int, int]:
    c = buf[pos]
    if 0x80 <= c <= 0x8F:
        return c & 0x0F, pos + 1
    if c == 0xDE:
        return int.from_bytes(buf[pos + 1 : pos + 3], "big"), pos + 3
    if c == 0xDF:
        return int.from_bytes(buf[pos + 1 : pos + 5], "big"), pos + 5
    raise Fallback


def _array_len(buf: bytes, pos: int) -> tuple[int, int]:
    c = buf[pos]
    if 0x90 <= c <= 0x9F:
        return c & 0x0F, pos + 1
    if c == 0xDC:
        return int.from_bytes(buf[pos + 1 : pos + 3], "big"), pos + 3
    if c == 0xDD:
        return int.from_bytes(buf[pos + 1 : pos + 5], "big"), pos + 5
    raise Fallback


def _scalar(buf: bytes, pos: int) -> tuple[Any, int]:
    """Decodes one scalar (nil, bool, int, float, str, bin); containers raise :class:`Fallback`."""
    c = buf[pos]
    if c <= 0x7F:
        return c, pos + 1
    if 0xA0 <= c <= 0xBF:
        end = pos + 1 + (c & 0x1F)
        return buf[pos + 1 : end].decode("utf-8"), end
    if c >= 0xE0:
        return c - 0x100, pos + 1
    if c == 0xC0:
        return None, pos + 1
    if c == 0xC2 or c == 0xC3:
        return c == 0xC3, pos + 1
    st = _INT_STRUCTS.get(c)
    if st is not None:
        return st.unpack_from(buf, pos + 1)[0], pos + 1 + st.size
    if c in (0xD9, 0xDA, 0xDB, 0xC4, 0xC5, 0xC6):
        width = 1 << ((c - 0xD9) if c >= 0xD9 else (c - 0xC4))
        start = pos + 1 + width
        end = start + int.from_bytes(buf[pos + 1 : start], "big")
        raw = buf[start:end]
        if len(raw) != end - start:
            raise Fallback
        return (raw.decode("utf-8") if c >= 0xD9 else raw), end
    raise Fallback


def _is_container(c: int) -> bool:
    return 0x80 <= c <= 0x9F or 0xDC <= c <= 0xDF


# --------------------------------------------------------------------------------------------
# per-episode plan
# --------------------------------------------------------------------------------------------
@dataclass(slots=True)
class _Column:
    """One buffer of an episode: a per-step list (template, position, count) or a whole array."""

    lookback: int = 0
    template: _Template | None = None
    pos: int = 0
    count: int = 0
    array: np.ndarray | None = None
    items: list[Any] | None = None  # infos decoded as a whole
    values: np.ndarray | None = None  # filled by assemble()


@dataclass
class Plan:
    """Where one record's columns are, plus its scalar fields; see :func:`assemble`."""

    row: int
    fields: dict[str, Any] = field(default_factory=dict)
    columns: dict[str, _Column] = field(default_factory=dict)  # observations, actions, ...
    extras: dict[str, _Column] = field(default_factory=dict)
    spaces: dict[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class _Program:
    """A record layout learned from one walk: literal bytes between the parts that vary.

    ``steps`` are ``(literal, op, arg)``: the record must repeat ``literal`` byte for byte, then
    ``op`` reads one varying part exactly as the walker would. A record that matches every step
    parses like the record the program was learned from, except in those parts.
    """

    steps: tuple[tuple[bytes, int, Any, int, Any], ...]  # literal, op, name, lookback, hint
    tail: bytes
    spaces: dict[str, bytes]


_DATA, _EXTRA, _SCALAR, _FLAG, _FLAG_BYTE, _SKIP = range(6)
#: The last byte of a flag's encoding -> its value: msgpack bools, msgpack-numpy bool records.
_FLAG_BYTES = {1: {0xC2: False, 0xC3: True}, 0: {0x00: False, 0x01: True}}


_BUFFERS = ("observations", "actions", "rewards", "infos")
_SCALARS = ("id_", "agent_id", "module_id", "t_started", "t")
_FLAGS = ("is_terminated", "is_truncated")
_FLAG_ENCODINGS: dict[bytes, bool] = {b"\xc2": False, b"\xc3": True}
for _v in (False, True):
    _FLAG_ENCODINGS[
        msgpack.packb({b"nd": False, b"type": "|b1", b"data": bytes([_v])}, use_bin_type=True)
    ] = _v


class EpisodeScanner:
    """Reads the layout of msgpack episode records; keeps what it learns between records.

    A record is first matched against the layouts (:class:`_Program`) learned so far; if none
    fits, it is walked key by key, which teaches a new layout. Templates of per-step records and
    byte strings of space maps are cached too. One scanner per reader (per dataset).
    """

    _MAX_CACHED = 64
    _MAX_PROGRAMS = 8

    def __init__(self, limits: DecodeLimits) -> None:
        self.limits = limits
        self._records: list[_Template] = []
        self._skips: list[bytes] = []  # byte strings of space maps seen before
        self._programs: list[_Program] = []
        self._trace: list[tuple[int, int, int, Any]] = []

    # ---------------------------------------------------------------- generic pieces
    def _unpacker(self, buf: bytes, pos: int, end: int, hook: Any) -> msgpack.Unpacker:
        up = msgpack.Unpacker(
            raw=False,
            object_hook=hook,
            max_buffer_size=max(end - pos, 1),
            max_bin_len=self.limits.max_array_bytes,
            max_str_len=self.limits.max_message_bytes,
        )
        up.feed(memoryview(buf)[pos:end])
        return up

    def _decode(self, buf: bytes, pos: int, end: int, hook: Any = _numpy_hook) -> tuple[Any, int]:
        """Decodes one object at ``pos`` with msgpack's C decoder (safe hook)."""
        try:
            up = self._unpacker(buf, pos, end, hook)
            obj = up.unpack()
            return obj, pos + up.tell()
        except Exception:  # corrupt data, refused records: the general path reports them
            raise Fallback from None

    def _skip(self, buf: bytes, pos: int, end: int, remember: bool = False) -> int:
        c = buf[pos]
        if not _is_container(c):
            return _scalar(buf, pos)[1]
        if c == 0x80 or c == 0x90:
            return pos + 1
        for known in self._skips:
            if buf.startswith(known, pos):
                return pos + len(known)
        try:
            up = self._unpacker(buf, pos, end, None)
            up.skip()
            new = pos + up.tell()
        except Exception:
            raise Fallback from None
        if remember and len(self._skips) < self._MAX_CACHED and new - pos <= 4096:
            self._skips.append(buf[pos:new])
        return new

    # ---------------------------------------------------------------- one record
    def scan(self, buf: bytes, start: int, end: int, row: int) -> Plan:
        """The plan of the record ``buf[start:end]``; raises :class:`Fallback` when unsure."""
        if end - start > self.limits.max_message_bytes:
            raise Fallback
        for prog in self._programs:
            plan = Plan(row)
            try:
                if self._run(prog, buf, start, end, plan) == end:
                    return plan
            except (Fallback, IndexError, ValueError, UnicodeDecodeError, struct.error):
                pass
        plan = Plan(row)
        self._trace = []
        try:
            pos = self._scan_state(buf, start, end, plan)
        except Fallback as e:
            raise Fallback(plan.fields.get("id_")) from e
        except (IndexError, ValueError, UnicodeDecodeError, struct.error):
            raise Fallback(plan.fields.get("id_")) from None
        if pos != end:
            raise Fallback(plan.fields.get("id_"))
        if len(self._programs) < self._MAX_PROGRAMS:
            self._programs.append(self._learn(buf, start, end, plan))
        return plan

    def _learn(self, buf: bytes, start: int, end: int, plan: Plan) -> _Program:
        steps, prev = [], start
        for a, b, op, arg in self._trace:
            col = (plan.columns if op == _DATA else plan.extras).get(arg) if op <= _EXTRA else None
            lookback = col.lookback if col is not None else 0
            hint = col.template if col is not None else arg[1] if op == _FLAG_BYTE else None
            steps.append((buf[prev:a], op, arg, lookback, hint))
            prev = b
        return _Program(tuple(steps), buf[prev:end], dict(plan.spaces))

    def _run(self, prog: _Program, buf: bytes, pos: int, end: int, plan: Plan) -> int:
        """Matches a learned layout; the same result as walking, or :class:`Fallback`."""
        fields, columns, extras = plan.fields, plan.columns, plan.extras
        startswith = buf.startswith
        for literal, op, arg, lookback, hint in prog.steps:
            if not startswith(literal, pos):
                raise Fallback
            pos += len(literal)
            if op <= _EXTRA:
                c = buf[pos]
                if c == 0xDC:
                    count, first = (buf[pos + 1] << 8) | buf[pos + 2], pos + 3
                elif 0x91 <= c <= 0x9F:
                    count, first = c & 0x0F, pos + 1
                else:
                    count = first = 0
                if (
                    count
                    and hint is not None
                    and startswith(hint.prefix, first)
                    and (hint.first is None or buf[first] in hint.first)
                ):
                    col = _Column(lookback, hint, first, count)
                    pos = first + count * hint.size
                    if pos > end:
                        raise Fallback
                else:
                    col = _Column(lookback)
                    pos = self._scan_data(buf, pos, end, col, arg)
                (columns if op == _DATA else extras)[arg] = col
            elif op == _SCALAR:
                fields[arg], pos = _scalar(buf, pos)
            elif op == _FLAG_BYTE:
                value = hint.get(buf[pos])
                if value is None:
                    raise Fallback
                fields[arg[0]] = value
                pos += 1
            elif op == _FLAG:
                pos = self._scan_flag(buf, pos, end, plan, arg)
            elif _is_container(buf[pos]):  # _SKIP: any scalar
                raise Fallback
            else:
                pos = _scalar(buf, pos)[1]
        if not startswith(prog.tail, pos):
            raise Fallback
        plan.spaces = prog.spaces
        return pos + len(prog.tail)

    def _scan_state(self, buf: bytes, pos: int, end: int, plan: Plan) -> int:
        n, pos = _map_len(buf, pos)
        fields, trace = plan.fields, self._trace
        for _ in range(n):  # one iteration per state key (~18), not per step
            key, pos = _scalar(buf, pos)
            start = pos
            if key in _BUFFERS:
                pos = self._scan_buffer(buf, pos, end, plan, key)
            elif key in _SCALARS:
                fields[key], pos = _scalar(buf, pos)
                trace.append((start, pos, _SCALAR, key))
            elif key in _FLAGS:
                pos = self._scan_flag(buf, pos, end, plan, key)
                enc = buf[start:pos]
                if enc in _FLAG_ENCODINGS:  # known encoding: only its last byte varies
                    trace.append((pos - 1, pos, _FLAG_BYTE, (key, _FLAG_BYTES[len(enc) == 1])))
                else:
                    trace.append((start, pos, _FLAG, key))
            elif key == "extra_model_outputs":
                if buf[pos] == 0xC0:
                    pos += 1
                    continue
                m, pos = _map_len(buf, pos)
                for _ in range(m):
                    name, pos = _scalar(buf, pos)
                    if not isinstance(name, str) or buf[pos] in (0x80, 0xC0):
                        raise Fallback  # empty extras: the general path drops them
                    pos = self._scan_buffer(buf, pos, end, plan, name, extra=True)
            elif key in ("_observation_space", "_action_space"):
                pos = self._skip(buf, pos, end, remember=True)
                plan.spaces[key] = buf[start:pos]
            elif key == "agent_episodes" or not isinstance(key, str):
                raise Fallback  # a MultiAgentEpisode state, or not an episode: general path
            else:
                pos = self._skip(buf, pos, end)
                if not _is_container(buf[start]):
                    trace.append((start, pos, _SKIP, None))
            if pos > end:
                raise Fallback
        return pos

    def _scan_flag(self, buf: bytes, pos: int, end: int, plan: Plan, key: str) -> int:
        for enc, value in _FLAG_ENCODINGS.items():
            if buf.startswith(enc, pos):
                plan.fields[key] = value
                return pos + len(enc)
        value, pos = self._decode(buf, pos, end)
        plan.fields[key] = bool(value)
        return pos

    def _scan_buffer(
        self, buf: bytes, pos: int, end: int, plan: Plan, name: str, extra: bool = False
    ) -> int:
        n, pos = _map_len(buf, pos)
        col = _Column()
        seen_data = False
        for _ in range(n):
            key, pos = _scalar(buf, pos)
            if key == "data":
                seen_data = True
                start = pos
                pos = self._scan_data(buf, pos, end, col, name)
                self._trace.append((start, pos, _EXTRA if extra else _DATA, name))
            elif key == "lookback":
                col.lookback, pos = _scalar(buf, pos)
                if not isinstance(col.lookback, int) or col.lookback < 0:
                    raise Fallback
            else:  # finalized, space, ...
                pos = self._skip(buf, pos, end, remember=key == "space")
        if not seen_data:
            raise Fallback
        (plan.extras if extra else plan.columns)[name] = col
        return pos

    def _scan_data(self, buf: bytes, pos: int, end: int, col: _Column, name: str) -> int:
        c = buf[pos]
        if 0x90 <= c <= 0x9F:
            count, first = c & 0x0F, pos + 1
        elif c == 0xDC or c == 0xDD:
            count, first = _array_len(buf, pos)
        else:  # a finalized buffer: one array record
            if name == "infos":
                col.items, pos = self._decode(buf, pos, end)
                if not isinstance(col.items, list):
                    raise Fallback
                return pos
            col.array, pos = self._decode(buf, pos, end)
            if not isinstance(col.array, np.ndarray):
                raise Fallback
            return pos
        if count == 0:
            raise Fallback
        if name == "infos" and buf[first] != 0x80:
            col.items, pos = self._decode(buf, pos, end)
            return pos
        tmpl = self._template(buf, first, end)
        col.template, col.pos, col.count = tmpl, first, count
        stop = first + count * tmpl.size
        if stop > end:
            raise Fallback
        return stop

    def _template(self, buf: bytes, pos: int, end: int) -> _Template:
        c = buf[pos]
        if c <= 0x7F or c >= 0xE0:
            return _FIXINT
        if c in (0xC2, 0xC3):
            return _BOOL
        if c == 0x80:
            return _EMPTY_MAP
        if c in _NUMBERS:
            return _NUMBERS[c]
        if not (0x81 <= c <= 0x8F or c == 0xDE):
            raise Fallback
        for t in self._records:
            if buf.startswith(t.prefix, pos):
                return t
        tmpl = self._record_template(buf, pos, end)
        if len(self._records) < self._MAX_CACHED:
            self._records.append(tmpl)
        return tmpl

    def _record_template(self, buf: bytes, pos: int, end: int) -> _Template:
        """Learns a msgpack-numpy record layout from one element; ``b"data"`` must come last."""
        value, rec_end = self._decode(buf, pos, end)  # safe hook: refuses object dtypes
        if not isinstance(value, np.ndarray | np.generic):
            raise Fallback
        n, p = _map_len(buf, pos)
        payload_at = -1
        for _ in range(n):
            key, p = _scalar(buf, p)
            if key == b"data":
                c = buf[p]
                if c not in (0xC4, 0xC5, 0xC6):
                    raise Fallback
                payload_at = p + 1 + (1 << (c - 0xC4))
            p = self._skip(buf, p, end)
            if key == b"data" and p != rec_end:
                raise Fallback  # data is not the last field
        if payload_at < 0 or p != rec_end or rec_end - payload_at != value.nbytes:
            raise Fallback
        if value.nbytes > self.limits.max_array_bytes:
            raise Fallback
        return _Template(buf[pos:payload_at], rec_end - pos, value.dtype, value.shape)


# --------------------------------------------------------------------------------------------
# one batch: check every list in one go, then build episodes
# --------------------------------------------------------------------------------------------
def _split(data: np.ndarray, tmpl: _Template, members: list[tuple[int, _Column]]) -> list[int]:
    """Checks one layout's lists of a whole batch at once; gives each column its values.

    Returns the plan indices whose lists do not all have the layout.
    """
    m = len(members)
    pos = np.fromiter((c.pos for _, c in members), dtype=np.int64, count=m)
    counts = np.fromiter((c.count for _, c in members), dtype=np.int64, count=m)
    offsets = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    owner = np.repeat(np.arange(m), counts)
    starts = pos[owner] + (np.arange(offsets[-1]) - offsets[owner]) * tmpl.size
    mat = sliding_window_view(data, tmpl.size)[starts]  # [rows, size], one gather
    bad_rows = tmpl.bad_rows(mat)
    bad = [] if bad_rows is None else np.unique(owner[bad_rows]).tolist()
    if tmpl is not _EMPTY_MAP:
        vals = tmpl.values(mat)
        off = offsets.tolist()
        for j, (_, col) in enumerate(members):  # per episode: a view
            col.values = vals[off[j] : off[j + 1]]
    return [members[j][0] for j in bad]


def assemble(buf: bytes, plans: list[Plan | None]) -> list[Episode | Fallback | None]:
    """Checks the plans' lists in one numpy pass per layout and builds their episodes.

    Returns, per plan: the episode; ``Fallback`` when its lists are not uniform or the episode
    cannot be built (the caller decodes it with the general path, which raises the definitive
    error); ``None`` for a ``None`` plan.
    """
    data = np.frombuffer(buf, dtype=np.uint8)
    groups: dict[int, tuple[_Template, list[tuple[int, _Column]]]] = {}
    for i, plan in enumerate(plans):
        if plan is None:
            continue
        for cols in (plan.columns, plan.extras):
            for col in cols.values():
                t = col.template
                if t is not None:
                    groups.setdefault(id(t), (t, []))[1].append((i, col))
    bad: set[int] = set()
    for tmpl, members in groups.values():
        bad.update(_split(data, tmpl, members))
    out: list[Episode | Fallback | None] = [None] * len(plans)
    for i, plan in enumerate(plans):
        if plan is None:
            continue
        if i in bad:
            out[i] = Fallback(plan.fields.get("id_"))
            continue
        try:
            out[i] = _build(plan)
        except Exception:  # an invalid episode: the general path raises the definitive error
            out[i] = Fallback(plan.fields.get("id_"))
    return out


def _column_values(col: _Column) -> Any:
    arr: Any
    if col.array is not None:
        arr = col.array
    elif col.items is not None:
        arr = col.items
    elif col.template is _EMPTY_MAP:
        return None  # all infos empty: the episode keeps none
    else:
        arr = col.values
    return arr[col.lookback :] if col.lookback else arr


def _build(plan: Plan) -> Episode:
    f, cols = plan.fields, plan.columns
    for name in ("observations", "actions", "rewards"):
        if name not in cols:
            raise Fallback(f.get("id_"))
    infos_col = cols.get("infos")
    infos = None if infos_col is None else _column_values(infos_col)
    extras = {k: _column_values(c) for k, c in plan.extras.items()}
    return Episode._from_parts(
        id=f.get("id_"),
        observations=_column_values(cols["observations"]),
        actions=_column_values(cols["actions"]),
        rewards=_column_values(cols["rewards"]),
        terminated=bool(f.get("is_terminated", False)),
        truncated=bool(f.get("is_truncated", False)),
        agent_id=f.get("agent_id"),
        module_id=f.get("module_id"),
        t_started=f.get("t_started"),
        t=f.get("t"),
        infos=infos,
        extras=extras,
    )
