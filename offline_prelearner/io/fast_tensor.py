"""The fast tensor layout: one ``fixed_size_binary`` cell per row, dtype and shape in the field.

A column of per-row arrays of one fixed shape and numeric (or bool) dtype -- image frames, CartPole
observations, action logits -- is stored as ``fixed_size_binary(itemsize * prod(shape))``: each
cell holds one row's C-order bytes. The field metadata says how to read them back::

    ARROW:extension:name      b"offline_prelearner.tensor"
    ARROW:extension:metadata  b'{"dtype": "|u1", "shape": [84, 84, 4]}'   (numpy dtype.str)

Why this and not RLlib's ``large_list<element>`` (Ray's tensor extension) or Arrow's canonical
``arrow.fixed_shape_tensor``: Parquet stores both of those as lists and decodes them element by
element (one 5,016-row file of 84x84x4 frames: ~2-3k rows/s, either), while a fixed-size binary
column is decoded as one block of bytes (~24-91k rows/s with zstd / lz4, 10-30x faster; see the
README). Reading it back is zero-copy: :func:`fixed_binary_to_numpy` views the Arrow buffer as
``[n, *shape]`` (read-only; nothing is copied unless the column arrives in several chunks).

The extension name is not registered with pyarrow: plain pyarrow (and Ray) read the column as
``fixed_size_binary`` with the metadata kept on the field, which is what
:mod:`~offline_prelearner.io.arrow_columns` looks at. RLlib cannot read this layout; write RLlib's
(``layout="rllib"``) where RLlib must read the files.

Nulls have no place in the layout: writing refuses object columns, and reading a null cell is a
:class:`~offline_prelearner.io.arrow_columns.ColumnValueError` naming the column and row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa

__all__ = [
    "FAST_TENSOR_NAME",
    "LAYOUTS",
    "Layout",
    "TensorSpec",
    "check_layout",
    "fast_tensor_field",
    "fixed_binary_column",
    "fixed_binary_to_numpy",
    "parquet_dictionary_columns",
    "tensor_spec",
]

#: How a writer lays out per-row arrays: ``"fast"`` (this module) or ``"rllib"`` (Ray's tensor
#: extension, ``large_list<element>``, which RLlib's offline readers read).
Layout = Literal["fast", "rllib"]
LAYOUTS: tuple[Layout, ...] = ("fast", "rllib")

FAST_TENSOR_NAME = b"offline_prelearner.tensor"
_EXT_NAME = b"ARROW:extension:name"
_EXT_META = b"ARROW:extension:metadata"


@dataclass(frozen=True)
class TensorSpec:
    """The dtype and per-row shape a fast tensor column declares."""

    dtype: np.dtype
    shape: tuple[int, ...]


def check_layout(layout: object, name: str = "layout") -> Layout:
    """``layout`` if it is one of :data:`LAYOUTS`, else a ``ValueError`` naming the choices."""
    if layout not in LAYOUTS:
        raise ValueError(f"{name} must be 'fast' or 'rllib', found {layout!r}")
    return layout


def fast_tensor_field(name: str, dtype: np.dtype, shape: tuple[int, ...]) -> pa.Field:
    """The Arrow field of a fast tensor column of per-row ``shape`` and ``dtype``."""
    width = int(dtype.itemsize * np.prod(shape, dtype=np.int64))
    meta = json.dumps({"dtype": dtype.str, "shape": [int(s) for s in shape]})
    return pa.field(
        name,
        pa.binary(width),
        nullable=False,
        metadata={_EXT_NAME: FAST_TENSOR_NAME, _EXT_META: meta.encode()},
    )


def fixed_binary_column(name: str, values: np.ndarray) -> tuple[pa.Field, pa.Array]:
    """``values`` (``[rows, *shape]``, numeric or bool) as a fast tensor field and array.

    One copy at most (none when ``values`` is C-contiguous): the array's bytes become the
    column's data buffer.
    """
    data = np.ascontiguousarray(values)
    fld = fast_tensor_field(name, data.dtype, tuple(data.shape[1:]))
    buf = pa.py_buffer(data.reshape(-1).view(np.uint8)) if data.size else pa.py_buffer(b"")
    arr = pa.Array.from_buffers(fld.type, len(data), [None, buf])
    return fld, arr


def tensor_spec(field: pa.Field | None) -> TensorSpec | None:
    """The ``(dtype, shape)`` a field of the fast layout declares; None for any other field.

    Raises:
        ValueError: the field names the layout but its metadata is not ``{"dtype", "shape"}``
            matching the cell width.
    """
    if field is None or not field.metadata or field.metadata.get(_EXT_NAME) != FAST_TENSOR_NAME:
        return None
    raw = field.metadata.get(_EXT_META, b"")
    try:
        meta = json.loads(raw)
        dtype = np.dtype(meta["dtype"])
        shape = tuple(meta["shape"])
        if dtype.hasobject or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise ValueError(meta)
    except (ValueError, TypeError, KeyError, UnicodeDecodeError):
        raise ValueError(
            f"{FAST_TENSOR_NAME.decode()} metadata {raw[:60]!r} is not "
            '{"dtype": "<numpy dtype>", "shape": [...]}'
        ) from None
    width = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
    if not pa.types.is_fixed_size_binary(field.type) or field.type.byte_width != width:
        raise ValueError(
            f"{FAST_TENSOR_NAME.decode()} {dtype} {list(shape)} needs fixed_size_binary({width}) "
            f"cells, found {field.type}"
        )
    return TensorSpec(dtype, shape)


def fixed_binary_to_numpy(arr: pa.Array, spec: TensorSpec) -> np.ndarray:
    """One chunk of a fast tensor column as a read-only ``[n, *shape]`` view of its buffer.

    The caller checks nulls (``arr.null_count``) first; null cells would read as whatever bytes
    the buffer holds there.
    """
    dtype, shape = spec.dtype, spec.shape
    n = len(arr)
    width = arr.type.byte_width
    buf = arr.buffers()[1]
    if n == 0 or buf is None or width == 0:
        return np.zeros((n, *shape), dtype=dtype)
    items = width // dtype.itemsize
    flat = np.frombuffer(buf, dtype=dtype, count=n * items, offset=arr.offset * width)
    return flat.reshape((n, *shape))


def parquet_dictionary_columns(schema: pa.Schema) -> list[str] | bool:
    """Parquet's ``use_dictionary`` for a table of ``schema``: every column but those of the fast
    layout (``True`` when there are none). A dictionary of frames never pays: pyarrow tries one
    page of them anyway before falling back to plain, and a file read 197k rows/s with that page
    against 225k without (84x84x4 frames, zstd, one process)."""
    names = [
        f.name
        for f in schema
        if f.metadata is None or f.metadata.get(_EXT_NAME) != FAST_TENSOR_NAME
    ]
    return True if len(names) == len(schema) else names
