"""Reading the layout of msgpack episode records, one record at a time.

RLlib writes an episode's buffers *non-finalized*: ``observations`` is a list with one
msgpack-numpy record per step, ``actions`` a list of scalar records, ``rewards`` a list of msgpack
floats, ``infos`` a list of (mostly empty) maps. Decoding that with ``msgpack.unpackb`` builds
hundreds of small Python objects per episode.

:class:`EpisodeScanner` walks a record at the *header* level (keys, scalars, list headers) and
describes each per-step list by a :class:`~.layout.Template` and its position, without
decoding the elements. Each walk also yields a :class:`Program`: the record's bytes with the parts
that vary (list contents, the id, ``t``, the flags) cut out. Records of one dataset share their
programs, so the batch decoder (:mod:`.decoder`) matches a program against a whole batch
with numpy and only walks the records that do not match.

The scanner never trusts what it infers: list positions are bounded by the record, every element
is checked against its template by the batch decoder, and anything unfamiliar raises
:class:`~.layout.Fallback`, sending the record to the general path
(:func:`~offline_prelearner.io.codec.unpackb` + :meth:`Episode.from_state`), which is also the
reference the tests compare with. Object dtypes make it give up (the general path refuses them).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

from ....config import DecodeLimits
from ...codec import _numpy_hook
from .layout import (
    BOOL,
    EMPTY_MAP,
    FIXINT,
    NUMBERS,
    Fallback,
    Template,
    array_hint,
    array_len,
    is_container,
    map_len,
    scalar,
)

__all__ = [
    "DATA",
    "EXTRA",
    "FLAG",
    "FLAG_BYTE",
    "SCALAR",
    "SKIP",
    "Column",
    "EpisodeScanner",
    "Plan",
    "Program",
]


# --------------------------------------------------------------------------------------------
# per-episode plan
# --------------------------------------------------------------------------------------------
@dataclass(slots=True)
class Column:
    """One buffer of an episode: a per-step list (template, position, count) or a whole array."""

    lookback: int = 0
    template: Template | None = None
    pos: int = 0
    count: int = 0
    array: np.ndarray | None = None
    items: list[Any] | None = None  # infos decoded as a whole
    values: np.ndarray | None = None  # filled by the batch decoder once checked


@dataclass
class Plan:
    """Where one record's columns are, plus its scalar fields (see :mod:`.decoder`)."""

    row: int
    fields: dict[str, Any] = field(default_factory=dict)
    columns: dict[str, Column] = field(default_factory=dict)  # observations, actions, ...
    extras: dict[str, Column] = field(default_factory=dict)
    spaces: dict[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class Program:
    """A record layout learned from one walk: literal bytes between the parts that vary.

    ``steps`` are ``(literal, op, name, lookback, hint)``: the record must repeat ``literal`` byte
    for byte, then ``op`` reads one varying part as the walker would (``DATA``/``EXTRA``: a list,
    expected to have the template ``hint``; ``SCALAR``: a field; ``FLAG_BYTE``: a flag's last byte,
    ``hint`` mapping it to a value; ``FLAG``: a flag decoded in full; ``SKIP``: any scalar).
    ``lookback`` is a list's lookback, which is part of the literal bytes. A finalized buffer (one
    msgpack-numpy array record) has an :class:`~.layout.ArrayHint` as its ``hint``. A record that
    matches every step parses like the record the program was learned from, except in those parts.
    """

    steps: tuple[tuple[bytes, int, Any, int, Any], ...]  # literal, op, name, lookback, hint
    tail: bytes
    spaces: dict[str, bytes]


DATA, EXTRA, SCALAR, FLAG, FLAG_BYTE, SKIP = range(6)
#: The last byte of a flag's encoding -> its value: msgpack bools, msgpack-numpy bool records.
FLAG_BYTES = {1: {0xC2: False, 0xC3: True}, 0: {0x00: False, 0x01: True}}


_BUFFERS = ("observations", "actions", "rewards", "infos")
_SCALAR_KEYS = ("id_", "agent_id", "module_id", "t_started", "t")
_FLAG_KEYS = ("is_terminated", "is_truncated")
_FLAG_ENCODINGS: dict[bytes, bool] = {b"\xc2": False, b"\xc3": True}
for _v in (False, True):
    _FLAG_ENCODINGS[
        msgpack.packb({b"nd": False, b"type": "|b1", b"data": bytes([_v])}, use_bin_type=True)
    ] = _v


class EpisodeScanner:
    """Reads the layout of msgpack episode records; keeps what it learns between records.

    A record is first matched against the layouts (:class:`Program`) learned so far; if none
    fits, it is walked key by key, which teaches a new layout. Templates of per-step records and
    byte strings of space maps are cached too. One scanner per reader (per dataset).

    Args:
        limits: Size bounds for untrusted bytes: a record above ``max_message_bytes`` is never
            scanned, and ``max_array_bytes`` / ``max_message_bytes`` bound the bin and str
            values the C decoder accepts.
    """

    _MAX_CACHED = 64
    MAX_PROGRAMS = 8

    def __init__(self, limits: DecodeLimits) -> None:
        self.limits = limits
        self._records: list[Template] = []
        self._skips: list[bytes] = []  # byte strings of space maps seen before
        self._programs: list[Program] = []
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
        if not is_container(c):
            return scalar(buf, pos)[1]
        if c == 0x80 or c == 0x90:
            return pos + 1
        for known in self._skips:
            if buf.startswith(known, pos):
                return pos + len(known)
        try:
            up = self._unpacker(buf, pos, end, None)
            up.skip()
            new: int = pos + up.tell()
        except Exception:
            raise Fallback from None
        if remember and len(self._skips) < self._MAX_CACHED and new - pos <= 4096:
            self._skips.append(buf[pos:new])
        return new

    # ---------------------------------------------------------------- one record
    @property
    def programs(self) -> list[Program]:
        """The record layouts learned so far (at most ``MAX_PROGRAMS``)."""
        return self._programs

    def scan(self, buf: bytes, start: int, end: int, row: int, try_programs: bool = True) -> Plan:
        """The plan of the record ``buf[start:end]``; raises :class:`Fallback` when unsure.

        Learned programs are tried first (unless ``try_programs`` is false); otherwise the record
        is walked, which teaches a new program.

        Args:
            buf: The bytes holding the record (a whole column's buffer, or the record alone).
            start: Offset of the record's first byte in ``buf``.
            end: Offset one past its last byte; the record must end exactly there.
            row: The record's row in the batch, kept in the plan for error messages.
            try_programs: Whether to match the learned programs first; False walks the record
                (and may learn from it) even when a program would fit.

        Returns:
            Where the record's buffers, scalar fields and space maps are.

        Raises:
            Fallback: The record is above ``limits.max_message_bytes``, malformed, or laid out
                in a way the scanner does not handle; its ``args[0]`` is the episode id when
                one was read. The caller then decodes the record with the general path.
        """
        if end - start > self.limits.max_message_bytes:
            raise Fallback
        for prog in self._programs if try_programs else ():
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
        if len(self._programs) < self.MAX_PROGRAMS:
            self._programs.append(self._learn(buf, start, end, plan))
        return plan

    def _learn(self, buf: bytes, start: int, end: int, plan: Plan) -> Program:
        steps, prev = [], start
        for a, b, op, arg in self._trace:
            col = (plan.columns if op == DATA else plan.extras).get(arg) if op <= EXTRA else None
            lookback = col.lookback if col is not None else 0
            hint = col.template if col is not None else arg[1] if op == FLAG_BYTE else None
            if col is not None and col.array is not None:  # a finalized buffer
                hint = array_hint(buf, a, b, col.array)
            steps.append((buf[prev:a], op, arg, lookback, hint))
            prev = b
        return Program(tuple(steps), buf[prev:end], dict(plan.spaces))

    def _run(self, prog: Program, buf: bytes, pos: int, end: int, plan: Plan) -> int:
        """Matches a learned layout; the same result as walking, or :class:`Fallback`."""
        fields, columns, extras = plan.fields, plan.columns, plan.extras
        startswith = buf.startswith
        for literal, op, arg, lookback, hint in prog.steps:
            if not startswith(literal, pos):
                raise Fallback
            pos += len(literal)
            if op <= EXTRA:
                c = buf[pos]
                if c == 0xDC:
                    count, first = (buf[pos + 1] << 8) | buf[pos + 2], pos + 3
                elif 0x91 <= c <= 0x9F:
                    count, first = c & 0x0F, pos + 1
                else:
                    count = first = 0
                if (
                    count
                    and isinstance(hint, Template)
                    and startswith(hint.prefix, first)
                    and (hint.first is None or buf[first] in hint.first)
                ):
                    col = Column(lookback, hint, first, count)
                    pos = first + count * hint.size
                    if pos > end:
                        raise Fallback
                else:
                    col = Column(lookback)
                    pos = self._scan_data(buf, pos, end, col, arg)
                (columns if op == DATA else extras)[arg] = col
            elif op == SCALAR:
                fields[arg], pos = scalar(buf, pos)
            elif op == FLAG_BYTE:
                value = hint.get(buf[pos])
                if value is None:
                    raise Fallback
                fields[arg[0]] = value
                pos += 1
            elif op == FLAG:
                pos = self._scan_flag(buf, pos, end, plan, arg)
            elif is_container(buf[pos]):  # SKIP: any scalar
                raise Fallback
            else:
                pos = scalar(buf, pos)[1]
        if not startswith(prog.tail, pos):
            raise Fallback
        plan.spaces = prog.spaces
        return pos + len(prog.tail)

    def _scan_state(self, buf: bytes, pos: int, end: int, plan: Plan) -> int:
        n, pos = map_len(buf, pos)
        fields, trace = plan.fields, self._trace
        for _ in range(n):  # one iteration per state key (~18), not per step
            key, pos = scalar(buf, pos)
            start = pos
            if key in _BUFFERS:
                pos = self._scan_buffer(buf, pos, end, plan, key)
            elif key in _SCALAR_KEYS:
                fields[key], pos = scalar(buf, pos)
                trace.append((start, pos, SCALAR, key))
            elif key in _FLAG_KEYS:
                pos = self._scan_flag(buf, pos, end, plan, key)
                enc = buf[start:pos]
                if enc in _FLAG_ENCODINGS:  # known encoding: only its last byte varies
                    trace.append((pos - 1, pos, FLAG_BYTE, (key, FLAG_BYTES[len(enc) == 1])))
                else:
                    trace.append((start, pos, FLAG, key))
            elif key == "extra_model_outputs":
                if buf[pos] == 0xC0:
                    pos += 1
                    continue
                m, pos = map_len(buf, pos)
                for _ in range(m):
                    name, pos = scalar(buf, pos)
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
                if not is_container(buf[start]):
                    trace.append((start, pos, SKIP, None))
            if pos > end:
                raise Fallback
        return pos

    def _scan_flag(self, buf: bytes, pos: int, end: int, plan: Plan, key: str) -> int:
        for enc, value in _FLAG_ENCODINGS.items():
            if buf.startswith(enc, pos):
                plan.fields[key] = value
                return pos + len(enc)
        value, pos = self._decode(buf, pos, end)
        if not isinstance(value, bool | np.bool_):
            raise Fallback  # "yes", 1...: the general path refuses it, naming the value
        plan.fields[key] = bool(value)
        return pos

    def _scan_buffer(
        self, buf: bytes, pos: int, end: int, plan: Plan, name: str, extra: bool = False
    ) -> int:
        n, pos = map_len(buf, pos)
        col = Column()
        seen_data = False
        for _ in range(n):
            key, pos = scalar(buf, pos)
            if key == "data":
                seen_data = True
                start = pos
                pos = self._scan_data(buf, pos, end, col, name)
                self._trace.append((start, pos, EXTRA if extra else DATA, name))
            elif key == "lookback":
                col.lookback, pos = scalar(buf, pos)
                if not isinstance(col.lookback, int) or col.lookback < 0:
                    raise Fallback
            else:  # finalized, space, ...
                pos = self._skip(buf, pos, end, remember=key == "space")
        if not seen_data:
            raise Fallback
        (plan.extras if extra else plan.columns)[name] = col
        return pos

    def _scan_data(self, buf: bytes, pos: int, end: int, col: Column, name: str) -> int:
        c = buf[pos]
        if 0x90 <= c <= 0x9F:
            count, first = c & 0x0F, pos + 1
        elif c == 0xDC or c == 0xDD:
            count, first = array_len(buf, pos)
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

    def _template(self, buf: bytes, pos: int, end: int) -> Template:
        c = buf[pos]
        if c <= 0x7F or c >= 0xE0:
            return FIXINT
        if c in (0xC2, 0xC3):
            return BOOL
        if c == 0x80:
            return EMPTY_MAP
        if c in NUMBERS:
            return NUMBERS[c]
        if not (0x81 <= c <= 0x8F or c == 0xDE):
            raise Fallback
        for t in self._records:
            if buf.startswith(t.prefix, pos):
                return t
        tmpl = self._record_template(buf, pos, end)
        if len(self._records) < self._MAX_CACHED:
            self._records.append(tmpl)
        return tmpl

    def _record_template(self, buf: bytes, pos: int, end: int) -> Template:
        """Learns a msgpack-numpy record layout from one element; ``b"data"`` must come last."""
        value, rec_end = self._decode(buf, pos, end)  # safe hook: refuses object dtypes
        if not isinstance(value, np.ndarray | np.generic):
            raise Fallback
        n, p = map_len(buf, pos)
        payload_at = -1
        for _ in range(n):
            key, p = scalar(buf, p)
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
        return Template(buf[pos:payload_at], rec_end - pos, value.dtype, value.shape)
