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

Importing this module (and so ``offline_prelearner``) registers the extension with pyarrow as
:class:`FastTensorType`: files read after that give ``FastTensorArray`` columns, whose
``to_numpy()`` is the ``[n, *shape]`` array. Without the registration (plain pyarrow, Ray
workers that never imported the package) the column is ``fixed_size_binary`` with the metadata
kept on the field; :mod:`~offline_prelearner.io.arrow_numpy` reads both forms. Other tools
(pandas, polars, Hugging Face ``datasets``, RLlib) see bytes: that is why the writers' default
layout, ``"auto"``, keeps this layout for large cells only (:data:`FAST_MIN_CELL_BYTES`) and
writes small arrays as plain nested ``fixed_size_list`` columns (``"lists"``), which every one of
those tools reads as numbers.

Nulls have no place in the layout: writing refuses object columns, and reading a null cell is a
:class:`~offline_prelearner.io.arrow_numpy.ColumnValueError` naming the column and row.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import sys
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..config import LAYOUTS, Layout, check_layout

__all__ = [
    "FAST_MIN_CELL_BYTES",
    "FAST_TENSOR_NAME",
    "LAYOUTS",
    "FastTensorArray",
    "FastTensorType",
    "Layout",
    "TensorSpec",
    "cell_layout",
    "check_layout",
    "fast_tensor_field",
    "fixed_binary_column",
    "fixed_binary_to_numpy",
    "parquet_dictionary_columns",
    "tensor_spec",
]

# How a writer lays out per-row arrays (``Layout``, ``LAYOUTS`` and ``check_layout`` are the
# config's, re-exported here): ``"auto"`` (``"fast"`` for cells of at least
# :data:`FAST_MIN_CELL_BYTES`, else ``"lists"``), ``"lists"`` (nested ``fixed_size_list``, plain
# Arrow that pandas, polars, Hugging Face ``datasets`` and torch read as numbers), ``"fast"``
# (this module) or ``"rllib"`` (Ray's tensor extension, ``large_list<element>``, which RLlib's
# offline readers and Ray Data's ``batch_format="numpy"`` read as tensors).

#: Per-row cell size (bytes) from which ``layout="auto"`` writes the fast layout. Measured with
#: ``benchmarks/bench_layouts.py`` (README, "Tensor layouts"): below it the plain list layout
#: costs little against the fast one, at and above it the fast layout reads several times faster.
FAST_MIN_CELL_BYTES = 1024

FAST_TENSOR_NAME = b"offline_prelearner.tensor"
_EXT_NAME = b"ARROW:extension:name"
_EXT_META = b"ARROW:extension:metadata"


@dataclass(frozen=True)
class TensorSpec:
    """The dtype and per-row shape a fast tensor column declares."""

    dtype: np.dtype
    shape: tuple[int, ...]


def cell_layout(layout: Layout, dtype: np.dtype, shape: tuple[int, ...]) -> Layout:
    """The concrete layout (``"lists"``, ``"fast"`` or ``"rllib"``) a column of per-row
    ``shape`` and ``dtype`` is written in: ``"auto"`` resolved by the cell's byte size.

    Args:
        layout: The writer's layout; any but ``"auto"`` is returned as it is.
        dtype: The column's per-element dtype.
        shape: One row's shape (``()`` for a scalar per row).

    Returns:
        ``"fast"`` for ``"auto"`` cells of at least :data:`FAST_MIN_CELL_BYTES`, ``"lists"`` for
        smaller ones, else ``layout``.
    """
    if layout != "auto":
        return layout
    nbytes = dtype.itemsize * math.prod(shape)  # (np.prod of a tuple costs ~10 us a column)
    return "fast" if nbytes >= FAST_MIN_CELL_BYTES else "lists"


def _parse_meta(raw: bytes) -> TensorSpec:
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
    return TensorSpec(dtype, shape)


def _check_width(spec: TensorSpec, storage: pa.DataType) -> None:
    width = spec.dtype.itemsize * int(np.prod(spec.shape, dtype=np.int64))
    if not pa.types.is_fixed_size_binary(storage) or storage.byte_width != width:
        raise ValueError(
            f"{FAST_TENSOR_NAME.decode()} {spec.dtype} {list(spec.shape)} needs "
            f"fixed_size_binary({width}) cells, found {storage}"
        )


# pyarrow has no type hints: to mypy its classes are Any, which strict mode refuses to subclass.
class FastTensorType(pa.ExtensionType):  # type: ignore[misc]
    """The fast layout as a pyarrow extension type (registered when the package is imported).

    Storage ``fixed_size_binary(itemsize * prod(shape))``; serialized as the same
    ``{"dtype", "shape"}`` JSON the field metadata of an unregistered read carries, so files are
    identical whichever way they were written. A file whose metadata is malformed still opens:
    its column has an invalid type whose :attr:`spec` raises the ``ValueError`` that says why, so
    the column (not the file) is refused, in one line naming it.

    Args:
        dtype: The cells' numpy dtype (or its ``dtype.str``, ``"<f4"``).
        shape: One row's shape; the storage is ``fixed_size_binary(itemsize * prod(shape))``.
    """

    def __init__(
        self,
        dtype: np.dtype | str,
        shape: tuple[int, ...],
        *,
        _invalid: tuple[pa.DataType, bytes, str] | None = None,
    ) -> None:
        self._spec = TensorSpec(np.dtype(dtype), tuple(int(s) for s in shape))
        self._invalid = _invalid
        if _invalid is not None:
            super().__init__(_invalid[0], FAST_TENSOR_NAME.decode())
            return
        width = self._spec.dtype.itemsize * int(np.prod(self._spec.shape, dtype=np.int64))
        super().__init__(pa.binary(width), FAST_TENSOR_NAME.decode())

    @property
    def spec(self) -> TensorSpec:
        """The cells' numpy dtype and per-row shape.

        Raises:
            ValueError: the type was read from malformed metadata (it says what was wrong).
        """
        if self._invalid is not None:
            raise ValueError(self._invalid[2])
        return self._spec

    def __arrow_ext_serialize__(self) -> bytes:
        if self._invalid is not None:
            return self._invalid[1]
        meta = {"dtype": self._spec.dtype.str, "shape": list(self._spec.shape)}
        return json.dumps(meta).encode()

    @classmethod
    def __arrow_ext_deserialize__(
        cls, storage_type: pa.DataType, serialized: bytes
    ) -> FastTensorType:
        try:
            spec = _parse_meta(serialized)
            _check_width(spec, storage_type)
        except ValueError as e:
            return cls("|u1", (0,), _invalid=(storage_type, serialized, str(e)))
        return cls(spec.dtype, spec.shape)

    def __arrow_ext_class__(self) -> type[pa.ExtensionArray]:
        return FastTensorArray

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return self.__arrow_ext_deserialize__, (self.storage_type, self.__arrow_ext_serialize__())


class FastTensorArray(pa.ExtensionArray):  # type: ignore[misc]  # (pyarrow: see FastTensorType)
    """A chunk of a fast tensor column; :meth:`to_numpy` is its ``[n, *shape]`` array."""

    def to_numpy(self, zero_copy_only: bool = True, writable: bool = False) -> np.ndarray:
        """The rows as ``[n, *shape]``: a read-only view of the buffer, or a copy when
        ``writable``. Null cells are refused (``ValueError``): the layout has none.

        Args:
            zero_copy_only: pyarrow's parameter, accepted and ignored: the view never copies.
            writable: Whether to return a writable copy instead of the read-only view.

        Returns:
            A ``[n, *shape]`` array of the type's dtype.
        """
        if self.null_count:
            raise ValueError(f"{FAST_TENSOR_NAME.decode()} column holds {self.null_count} nulls")
        out = fixed_binary_to_numpy(self, self.type.spec)
        return out.copy() if writable else out

    def to_numpy_ndarray(self) -> np.ndarray:
        """The same as :meth:`to_numpy` (pyarrow's name for it on ``FixedShapeTensorArray``)."""
        return self.to_numpy()


def _register() -> None:
    with contextlib.suppress(pa.ArrowKeyError):  # already registered (the module was reloaded)
        pa.register_extension_type(FastTensorType("|u1", (1,)))
    atexit.register(_let_scans_settle)


#: How long the interpreter waits at exit, once Arrow's dataset scanner has been used, before it
#: starts finalizing (:func:`_let_scans_settle`).
SCAN_SETTLE_SECONDS = 0.02


def _let_scans_settle() -> None:
    """At exit: a moment for Arrow's dataset scanner (``pq.read_table``, ``pd.read_parquet``) to
    drop what it holds. Its last callback runs on an Arrow thread after the read has returned
    and frees the file's schema there, our Python-defined type included, which takes the GIL:
    if the interpreter is finalizing by then, Python ends that thread mid-destructor and the
    C++ runtime aborts ("terminate called without an active exception", exit 134, after a
    script that did all its work; apache/arrow#34314). Measured on this project's 2-core VM:
    6-9 aborts in 100 runs of a script that imports this package and reads a fast-layout file
    with ``pq.read_table``; with this wait, 0 in 200. A process that never used the scanner
    does not wait; the CLI leaves with ``os._exit`` after its flush and never gets here."""
    if "pyarrow._dataset" in sys.modules:
        time.sleep(SCAN_SETTLE_SECONDS)


_register()


def fast_tensor_field(name: str, dtype: np.dtype, shape: tuple[int, ...]) -> pa.Field:
    """The Arrow field of a fast tensor column of per-row ``shape`` and ``dtype``.

    Args:
        name: The column's name.
        dtype: The cells' numeric or bool dtype; its ``dtype.str`` goes into the metadata.
        shape: One row's shape.

    Returns:
        A non-nullable ``fixed_size_binary`` field whose metadata names the layout, readable
        with or without the extension type registered.
    """
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

    Args:
        name: The column's name.
        values: The rows, ``[rows, *shape]``; the per-row shape is ``values.shape[1:]``.

    Returns:
        The field (:func:`fast_tensor_field`) and an array of ``len(values)`` cells.
    """
    data = np.ascontiguousarray(values)
    fld = fast_tensor_field(name, data.dtype, tuple(data.shape[1:]))
    buf = pa.py_buffer(data.reshape(-1).view(np.uint8)) if data.size else pa.py_buffer(b"")
    arr = pa.Array.from_buffers(fld.type, len(data), [None, buf])
    return fld, arr


def tensor_spec(field: pa.Field | None) -> TensorSpec | None:
    """The ``(dtype, shape)`` a field of the fast layout declares; None for any other field.

    Both forms count: a :class:`FastTensorType` field (read with the type registered) and a
    ``fixed_size_binary`` field whose metadata names the layout (read without it).

    Args:
        field: A field of a file's schema, or None (a column that is not there).

    Returns:
        The declared dtype and per-row shape, or None for a field of another layout.

    Raises:
        ValueError: the field names the layout but its metadata is not ``{"dtype", "shape"}``
            matching the cell width.
    """
    if field is None:
        return None
    if isinstance(field.type, FastTensorType):
        return field.type.spec
    if not field.metadata or field.metadata.get(_EXT_NAME) != FAST_TENSOR_NAME:
        return None
    spec = _parse_meta(field.metadata.get(_EXT_META, b""))
    _check_width(spec, field.type)
    return spec


def fixed_binary_to_numpy(arr: pa.Array, spec: TensorSpec) -> np.ndarray:
    """One chunk of a fast tensor column as a read-only ``[n, *shape]`` view of its buffer.

    The caller checks nulls (``arr.null_count``) first; null cells would read as whatever bytes
    the buffer holds there.

    Args:
        arr: One chunk: a :class:`FastTensorArray` or its ``fixed_size_binary`` storage (a
            slice's offset is honoured).
        spec: The dtype and per-row shape the field declares (:func:`tensor_spec`).

    Returns:
        A read-only ``[len(arr), *shape]`` view (a fresh zero array when the chunk is empty).
    """
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
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
    """Parquet's ``use_dictionary`` for a table of ``schema``: every column but the fast layout's
    and those of per-row float arrays in any layout (``True`` when there are none).

    pyarrow tries one dictionary page of a column before it falls back to plain. Of float
    observations that page never pays: 100k CartPole rows (obs and new_obs) write in 63 ms and
    4.9 MB with it, 18 ms and 3.7 MB without (``lists`` layout; RLlib's 50 / 19 ms). Nor of the
    fast layout's cells: a file of 84x84x4 frames read 197k rows/s with that page against 225k
    without (zstd, one process). Integer arrays keep it: a uint8 frame has at most 256 values, and
    the dictionary halves a file of frames in the list layouts (278 MB plain, 148 MB with it).

    Args:
        schema: The schema of the table about to be written.

    Returns:
        The names of the columns to dictionary-encode, or True when that is every column.
    """
    names = [f.name for f in schema if not _plain_only(f)]
    return True if len(names) == len(schema) else names


_ARRAY_EXTENSIONS = {
    b"ray.data.arrow_tensor",
    b"ray.data.arrow_tensor_v2",
    b"ray.data.arrow_variable_shaped_tensor",
    b"arrow.fixed_shape_tensor",
    b"arrow.variable_shape_tensor",
}


def _plain_only(field: pa.Field) -> bool:
    """A fast-layout column, or one float array per row (by type or field metadata)."""
    t = field.type
    meta = field.metadata or {}
    if isinstance(t, FastTensorType) or meta.get(_EXT_NAME) == FAST_TENSOR_NAME:
        return True
    if isinstance(t, pa.BaseExtensionType):
        if t.extension_name.encode() not in _ARRAY_EXTENSIONS:
            return False
        t = t.storage_type
    elif meta.get(_EXT_NAME) not in _ARRAY_EXTENSIONS and not pa.types.is_fixed_size_list(t):
        return False
    while (
        pa.types.is_struct(t)
        or pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or (pa.types.is_fixed_size_list(t))
    ):
        t = t.field(0).type if pa.types.is_struct(t) else t.value_type  # struct: "data" first
    return bool(pa.types.is_floating(t))
