"""msgpack at the byte level: headers, scalars, and per-step element layouts (templates).

The pieces the episode scanner (:mod:`.scanner`) and the batch decoder
(:mod:`.decoder`) share. A :class:`Template` describes every element of a per-step list
(RLlib writes observations, actions, rewards, infos as one msgpack value per step): the bytes each
element repeats (``prefix``) and the payload that changes. Templates never decide alone: the batch
decoder checks every element of every list against its template before using a value.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ....errors import Fallback

__all__ = [
    "BOOL",
    "EMPTY_MAP",
    "FIXINT",
    "NUMBERS",
    "ArrayHint",
    "Fallback",
    "Template",
    "array_hint",
    "array_len",
    "be_uint",
    "gather",
    "ints_at",
    "is_container",
    "map_len",
    "scalar",
    "scalar_lengths",
]


# --------------------------------------------------------------------------------------------
# element templates
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Template:
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

        Args:
            mat: uint8 ``[rows, size]``: one candidate element per row, ``size`` bytes each.

        Returns:
            The indices (int64, ascending) of the rows whose prefix differs or that ``check``
            refuses, or None when every row fits.
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
        """The payloads of a ``[rows, size]`` byte matrix as ``[rows, *shape]`` values.

        Args:
            mat: uint8 ``[rows, size]`` of elements already checked with :meth:`bad_rows`.

        Returns:
            ``[rows, *shape]`` of ``dtype`` (zeros for a zero-size payload), passed through
            ``convert`` where the template has one.
        """
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
    return np.asarray((b == 0xC2) | (b == 0xC3))


FIXINT = Template(
    b"",
    1,
    np.dtype(np.int8),
    check=_fixint_ok,
    convert=_as_int64,
    first=frozenset([*range(0x80), *range(0xE0, 0x100)]),
)
BOOL = Template(
    b"",
    1,
    np.dtype(np.uint8),
    check=_bool_ok,
    convert=lambda a: a.reshape(len(a)) == 0xC3,
    first=frozenset([0xC2, 0xC3]),
)
EMPTY_MAP = Template(b"", 1, np.dtype(np.uint8), check=lambda b: b == 0x80, first=frozenset([0x80]))

# A list of plain msgpack numbers, all written with the same marker byte.
NUMBERS: dict[int, Template] = {
    marker: Template(bytes([marker]), 1 + np.dtype(dt).itemsize, np.dtype(dt), convert=conv)
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


@dataclass(frozen=True, eq=False)
class ArrayHint:
    """How a finalized buffer (one msgpack-numpy array record) is laid out.

    The record is ``head``, the first dimension (a msgpack integer: the element count), ``mid``,
    a bin header and the payload: ``count`` elements of ``template`` (no prefix, the array's
    dtype and inner shape). Only the count and the payload vary between records of one layout.
    """

    head: bytes
    mid: bytes
    template: Template


def array_hint(buf: bytes, start: int, end: int, array: np.ndarray) -> ArrayHint | None:
    """The layout of the msgpack-numpy array record ``buf[start:end]`` that decoded to ``array``.

    Args:
        buf: The msgpack bytes.
        start: Offset of the record's map header in ``buf``.
        end: Offset one past the record's last byte.
        array: What the record decoded to (with the safe hook).

    Returns:
        The record's :class:`ArrayHint`, or None when it is not laid out as ``head``, first
        dimension, ``mid``, bin payload (keys repeated, ``data`` not last, a 0-d array...).
    """
    try:
        n, pos = map_len(buf, start)
        keys: set[Any] = set()
        dim_at = dim_end = bin_at = -1
        for _ in range(n):
            key, pos = scalar(buf, pos)
            if key in keys or bin_at >= 0:
                return None  # a repeated key, or a field after the payload
            keys.add(key)
            if key in (b"shape", "shape"):
                ndim, dim_at = array_len(buf, pos)
                if ndim != array.ndim or ndim == 0:
                    return None
                dim_end = scalar(buf, dim_at)[1]
                pos = dim_end
                for _ in range(ndim - 1):
                    pos = scalar(buf, pos)[1]
            elif key in (b"data", "data"):
                if buf[pos] not in (0xC4, 0xC5, 0xC6):
                    return None
                bin_at = pos
                pos = scalar(buf, pos)[1]
            else:
                pos = scalar(buf, pos)[1]
    except (Fallback, IndexError, UnicodeDecodeError, struct.error):
        return None
    if pos != end or dim_at < 0 or bin_at < dim_end or scalar(buf, dim_at)[0] != len(array):
        return None
    payload = end - bin_at - 1 - (1 << (buf[bin_at] - 0xC4))
    inner = array.shape[1:]
    size = array.dtype.itemsize * int(np.prod(inner, dtype=np.int64))
    if payload != array.nbytes or size == 0:
        return None
    tmpl = Template(b"", size, array.dtype, inner)
    return ArrayHint(buf[start:dim_at], buf[dim_end:bin_at], tmpl)


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
def map_len(buf: bytes, pos: int) -> tuple[int, int]:
    """``(entries, position after the header)`` of the msgpack map header at ``buf[pos]``.

    Args:
        buf: The msgpack bytes.
        pos: Offset of the header's first byte in ``buf``.

    Returns:
        The map's number of key/value pairs and the offset just after its header.

    Raises:
        Fallback: No map header (fixmap, map16, map32) starts at ``buf[pos]``.
    """
    c = buf[pos]
    if 0x80 <= c <= 0x8F:
        return c & 0x0F, pos + 1
    if c == 0xDE:
        return int.from_bytes(buf[pos + 1 : pos + 3], "big"), pos + 3
    if c == 0xDF:
        return int.from_bytes(buf[pos + 1 : pos + 5], "big"), pos + 5
    raise Fallback


def array_len(buf: bytes, pos: int) -> tuple[int, int]:
    """``(items, position after the header)`` of the msgpack array header at ``buf[pos]``.

    Args:
        buf: The msgpack bytes.
        pos: Offset of the header's first byte in ``buf``.

    Returns:
        The array's number of items and the offset just after its header.

    Raises:
        Fallback: No array header (fixarray, array16, array32) starts at ``buf[pos]``.
    """
    c = buf[pos]
    if 0x90 <= c <= 0x9F:
        return c & 0x0F, pos + 1
    if c == 0xDC:
        return int.from_bytes(buf[pos + 1 : pos + 3], "big"), pos + 3
    if c == 0xDD:
        return int.from_bytes(buf[pos + 1 : pos + 5], "big"), pos + 5
    raise Fallback


def scalar(buf: bytes, pos: int) -> tuple[Any, int]:
    """Decodes one scalar (nil, bool, int, float, str, bin); containers raise :class:`Fallback`.

    Args:
        buf: The msgpack bytes.
        pos: Offset of the scalar's type byte in ``buf``.

    Returns:
        The Python value (None, bool, int, float, str or bytes) and the offset just after it.

    Raises:
        Fallback: A container, an extension type, or a str8/16/32 or bin value cut short by
            the end of ``buf``.
    """
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


def is_container(c: int) -> bool:
    """Whether msgpack type byte ``c`` starts a map or an array.

    Args:
        c: One msgpack type byte, 0..255.

    Returns:
        True for fixmap, fixarray, array16/32 and map16/32 type bytes.
    """
    return 0x80 <= c <= 0x9F or 0xDC <= c <= 0xDF


# --------------------------------------------------------------------------------------------
# the same, for many positions at once
# --------------------------------------------------------------------------------------------
def gather(data: np.ndarray, pos: np.ndarray, length: int) -> np.ndarray:
    """``[len(pos), length]`` bytes starting at each of ``pos`` (positions clamped in range).

    Args:
        data: uint8 ``[n]``, the whole buffer.
        pos: Integer offsets into ``data``; one past ``n - length`` (or below 0) reads the
            window clamped to the buffer's end (or start), so callers check lengths first.
        length: Bytes per window.

    Returns:
        uint8 ``[len(pos), length]``, one window per offset (all zeros where ``length`` exceeds
        the buffer).
    """
    if length > len(data):
        return np.zeros((len(pos), length), dtype=np.uint8)
    return np.asarray(sliding_window_view(data, length)[np.clip(pos, 0, len(data) - length)])


def be_uint(data: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Big-endian unsigned integers of ``width`` bytes (1, 2 or 4) at each of ``pos``.

    Args:
        data: uint8 ``[n]``, the whole buffer.
        pos: Integer offsets of each integer's first byte; bytes past the end read as the
            buffer's last byte.
        width: Bytes per integer; 8 is used too (for int64/uint64, wrapping to two's
            complement).

    Returns:
        int64 ``[len(pos)]``.
    """
    out = np.zeros(len(pos), dtype=np.int64)
    for k in range(width):  # a loop over bytes of one integer, not over rows
        out = (out << 8) | data[np.minimum(pos + k, len(data) - 1)]
    return out


_FIXED_LEN = np.full(256, -1, dtype=np.int64)  # total length of fixed-size scalars; -1: other
_FIXED_LEN[0x00:0x80] = 1
_FIXED_LEN[0xE0:0x100] = 1
_FIXED_LEN[[0xC0, 0xC2, 0xC3]] = 1
_FIXED_LEN[0xA0:0xC0] = 1 + np.arange(32)
for _c, _st in _INT_STRUCTS.items():
    _FIXED_LEN[_c] = 1 + _st.size
_VAR_WIDTH = {0xD9: 1, 0xDA: 2, 0xDB: 4, 0xC4: 1, 0xC5: 2, 0xC6: 4}  # str/bin length prefixes


def scalar_lengths(data: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Byte length of the scalar at each of ``pos``; -1 where the value is not a scalar.

    Args:
        data: uint8 ``[n]``, the whole msgpack buffer.
        pos: Integer offsets of each value's type byte.

    Returns:
        int64 ``[len(pos)]``: type byte, length prefix and payload together; -1 for containers
        and extension types.
    """
    c = data[np.minimum(pos, len(data) - 1)]
    out: np.ndarray = _FIXED_LEN[c]
    for code, width in _VAR_WIDTH.items():
        at = np.flatnonzero(c == code)
        if len(at):
            out[at] = 1 + width + be_uint(data, pos[at] + 1, width)
    return out


_INT_WIDTHS = {
    0xCC: (1, False),
    0xCD: (2, False),
    0xCE: (4, False),
    0xD0: (1, True),
    0xD1: (2, True),
    0xD2: (4, True),
    0xD3: (8, True),
}


def ints_at(data: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The integers at each of ``pos`` and where there is one (uint64 counts as not one).

    Args:
        data: uint8 ``[n]``, the whole msgpack buffer.
        pos: Integer offsets of each value's type byte.

    Returns:
        ``(values, is_int)``: int64 ``[len(pos)]`` values (meaningless where not an integer) and
        a bool ``[len(pos)]`` mask of the positions holding a msgpack integer that fits int64.
    """
    c = data[np.minimum(pos, len(data) - 1)].astype(np.int64)
    is_int = (c <= 0x7F) | (c >= 0xE0)
    val = np.where(c <= 0x7F, c, c - 0x100)
    for code, (width, signed) in _INT_WIDTHS.items():
        at = np.flatnonzero(c == code)
        if len(at):
            v = be_uint(data, pos[at] + 1, width)  # width 8 wraps to int64's two's complement
            if signed and width < 8:
                v = np.where(v >= 1 << (8 * width - 1), v - (1 << (8 * width)), v)
            val[at] = v
            is_int[at] = True
    return val, is_int
