"""One Arrow (or numpy) column -> one numpy array ``[n_rows, *shape]``, vectorized.

:func:`to_numpy` handles what Ray Data and plain pyarrow hand a reader:

* scalar columns (zero-copy when there are no nulls), bool, strings and bytes (object arrays),
  the null type (an all-``None`` object array), dictionary-encoded columns;
* ``list`` / ``large_list`` / ``fixed_size_list``, nested for images: values are flattened once
  and reshaped with offsets arithmetic, never walked row by row;
* Ray's tensor extension types (``ray.data.arrow_tensor``, ``ray.data.arrow_tensor_v2``): as real
  ``pa.ExtensionType`` instances (when Ray is imported, it registers them), *and* as plain
  ``large_list`` columns whose field metadata names the extension (when plain pyarrow reads a file
  Ray wrote); pass the field to :func:`to_numpy` or use :func:`column_to_numpy`. Ray's
  variable-shaped tensors are read when every row happens to have the same shape;
* the fast tensor layout (:mod:`.fast_tensor`): a ``fixed_size_binary`` column whose field
  metadata names ``offline_prelearner.tensor`` with its dtype and shape, or the registered
  :class:`~.fast_tensor.FastTensorType`, viewed zero-copy (read-only) as ``[n, *shape]`` when it
  arrives in one chunk;
* Arrow's canonical tensor types: ``arrow.fixed_shape_tensor`` (storage flattened once and
  reshaped, zero-copy; a non-trivial ``permutation`` is applied as a transpose, then made
  contiguous), and ``arrow.variable_shape_tensor`` (pyarrow has no class for it: a struct of
  ``data`` and ``shape`` whose field metadata names it), read when every row has the same shape
  and refused in one line (``ragged``, naming the rows) when they differ;
* numpy input (Ray's ``"numpy"`` batch format): arrays pass through; object arrays of arrays are
  stacked.

Ray is never imported here; extension types are recognised by name.

Values that cannot form one array raise :class:`ColumnValueError` (a
:class:`~offline_prelearner.errors.SchemaError`) naming the column and the first offending row,
with ``rows`` holding *every* offending row so a caller can reject just those episodes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa

from ..config import DEFAULT_LIMITS, DecodeLimits
from ..errors import ColumnValueError, DecodeError, Where, _Bad
from .codec import legacy_unpack, unpack_array
from .fast_tensor import (
    FAST_TENSOR_NAME,
    FastTensorType,
    TensorSpec,
    fixed_binary_to_numpy,
    tensor_spec,
)

__all__ = [
    "TENSOR_EXTENSIONS",
    "ColumnValueError",
    "column_to_numpy",
    "decode_cells",
    "from_numpy",
    "is_tensor_field",
    "stack_cells",
    "to_numpy",
]

TENSOR_EXTENSIONS = ("ray.data.arrow_tensor", "ray.data.arrow_tensor_v2")
_VARIABLE_TENSOR = "ray.data.arrow_variable_shaped_tensor"
_ARROW_FIXED = "arrow.fixed_shape_tensor"
_ARROW_VARIABLE = "arrow.variable_shape_tensor"
FAST_NAME = FAST_TENSOR_NAME.decode()
_EXT_NAME = b"ARROW:extension:name"
_EXT_META = b"ARROW:extension:metadata"


def _fail(bad: _Bad, name: str, source: str | None) -> ColumnValueError:
    row = None if bad.rows is None or len(bad.rows) == 0 else int(bad.rows[0])
    msg = bad.message
    if bad.rows is not None and len(bad.rows) > 1:
        msg += f" ({len(bad.rows)} rows affected)"
    return ColumnValueError(
        f"column {name!r}: {msg}",
        Where(file=source, column=name, row=row),
        reason=bad.reason,
        rows=bad.rows,
    )


# ---------------------------------------------------------------------------------------------
# public entry points
# ---------------------------------------------------------------------------------------------
def column_to_numpy(table: pa.Table, name: str, source: str | None = None) -> np.ndarray:
    """Column ``name`` of ``table`` as numpy; see :func:`to_numpy` (the field carries metadata).

    Args:
        table: A table as a reader or Ray Data hands it; its schema's field for ``name`` is
            passed on, so tensor layouts named only in field metadata are read as tensors.
        name: The column to read (it must be in ``table``).
        source: The file the table came from, for error messages.

    Returns:
        The column as ``[n_rows, *shape]``.

    Raises:
        ColumnValueError: As :func:`to_numpy`.
    """
    return to_numpy(table.column(name), name, source, field=table.schema.field(name))


def to_numpy(
    column: Any, name: str, source: str | None = None, *, field: pa.Field | None = None
) -> np.ndarray:
    """One column as a numpy array ``[n_rows, *shape]``.

    Args:
        column: A ``pa.ChunkedArray``, ``pa.Array`` or ``np.ndarray``.
        name: The column's name, for messages.
        source: The file it came from, for messages.
        field: The Arrow field, whose metadata may name a Ray tensor extension (plain pyarrow
            reading a file Ray wrote keeps the extension only there) or the fast layout.

    Raises:
        ColumnValueError: ragged lists, nulls in a numeric or tensor column, a tensor whose
            element count does not match its declared shape.
    """
    try:
        if isinstance(column, np.ndarray):
            return _from_ndarray(column)
        shape = _meta(field)
        if isinstance(column, pa.ChunkedArray):
            return _chunked(column, shape)
        if isinstance(column, pa.Array):
            return _convert(column, shape)
    except _Bad as bad:
        raise _fail(bad, name, source) from None
    raise ColumnValueError(
        f"column {name!r}: cannot read a {type(column).__name__} as a column",
        Where(file=source, column=name),
        reason="bad_type",
    )


def stack_cells(
    cells: Sequence[Any] | np.ndarray, name: str, source: str | None = None
) -> np.ndarray:
    """Stacks per-row values (arrays, scalars or lists) into ``[n, *shape]``.

    This walks the cells (they are separate Python objects, so there is no columnar shortcut);
    it is used for object columns and decoded compressed cells only. None cells and cells whose
    shape differs from the most common one are reported, all of them.

    Args:
        cells: One value per row: arrays, numbers or (nested) lists of one shape.
        name: The column's name, for messages.
        source: The file it came from, for messages.

    Returns:
        ``[n, *shape]``, the common shape of the cells.

    Raises:
        ColumnValueError: None cells (``null_value``) or cells of another shape (``ragged``), with
            every such row in ``rows``.
    """
    try:
        return _stack(cells)
    except _Bad as bad:
        raise _fail(bad, name, source) from None


def decode_cells(
    cells: Sequence[Any] | np.ndarray,
    codec: str,
    name: str,
    source: str | None = None,
    limits: DecodeLimits = DEFAULT_LIMITS,
) -> np.ndarray:
    """Decodes a compressed column cell by cell and stacks the results.

    Each cell is an independent compressed blob, so decoding is inherently per cell; stacking is
    one copy. Every undecodable cell is listed in the error's ``rows``.

    Args:
        cells: One compressed value per row.
        codec: ``"lz4_msgpack"`` (bytes cells, :func:`~.codec.unpack_array`) or
            ``"legacy_pickle"`` (base64 string cells, :func:`~.codec.legacy_unpack`).
        name: The column's name, for messages.
        source: The file it came from, for messages.
        limits: Size limits each cell's decoded bytes must keep to.

    Returns:
        The decoded cells stacked as ``[n, *shape]`` (:func:`stack_cells`).

    Raises:
        ColumnValueError: An unknown codec (``bad_codec``), cells that are not strings or bytes
            or do not decode (the first cell's reason), or decoded cells that do not stack.
    """
    if codec == "lz4_msgpack":
        fn: Callable[[Any, DecodeLimits], Any] = unpack_array
    elif codec == "legacy_pickle":
        fn = legacy_unpack
    else:
        raise ColumnValueError(
            f"column {name!r}: unknown codec {codec!r}",
            Where(file=source, column=name),
            reason="bad_codec",
        )
    out: list[Any] = [None] * len(cells)
    bad: list[int] = []
    first: DecodeError | None = None
    for i, cell in enumerate(cells):
        if not isinstance(cell, str | bytes | bytearray | memoryview):
            err = DecodeError(
                f"a {codec} cell must be a string or bytes, found {type(cell).__name__}",
                reason="bad_type",
            )
        else:
            try:
                out[i] = fn(cell, limits)
                continue
            except DecodeError as e:
                err = e
        bad.append(i)
        first = first or err
    if first is not None:
        rows = np.asarray(bad, dtype=np.int64)
        raise _fail(
            _Bad(f"cannot decode {codec} cell: {first.message}", first.reason, rows), name, source
        )
    return stack_cells(out, name, source)


def from_numpy(array: np.ndarray) -> pa.Array:
    """A numpy column as an Arrow array: ``[n, *shape]`` becomes nested ``fixed_size_list``.

    Used to give rejected rows of numpy batches back as an Arrow table (quarantine).

    Args:
        array: A column of a numpy batch, ``[n, *shape]``; an object column becomes a list
            array pyarrow infers, or the ``repr`` of each value where it cannot.

    Returns:
        An Arrow array of ``n`` rows.
    """
    if array.dtype.hasobject:
        try:
            return pa.array(list(array))
        except (pa.ArrowException, TypeError, ValueError):
            return pa.array([repr(x) for x in array], pa.string())
    arr = pa.array(np.ascontiguousarray(array).reshape(-1))
    for size in reversed(array.shape[1:]):
        arr = pa.FixedSizeListArray.from_arrays(arr, size)
    return arr


# ---------------------------------------------------------------------------------------------
# Arrow
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _VariableShape:
    """Field metadata naming ``arrow.variable_shape_tensor`` (its permutation, if any)."""

    permutation: tuple[int, ...] | None


_Meta = tuple[int, ...] | TensorSpec | _VariableShape | None


def _meta(field: pa.Field | None) -> _Meta:
    """The tensor shape from field metadata naming a Ray tensor extension, the dtype and shape of
    the fast layout, else None."""
    if field is None or not field.metadata:
        return None
    try:
        spec = tensor_spec(field)
    except ValueError as e:
        raise _Bad(str(e), "bad_type", None) from None
    if spec is not None:
        return spec
    ext = field.metadata.get(_EXT_NAME, b"").decode("utf-8", "replace")
    if ext == _ARROW_VARIABLE:
        return _VariableShape(_permutation(field.metadata.get(_EXT_META, b""), ext))
    if ext not in TENSOR_EXTENSIONS:
        return None
    return _parse_shape(field.metadata.get(_EXT_META, b""), ext)


def _permutation(raw: bytes, ext: str) -> tuple[int, ...] | None:
    try:
        meta = json.loads(raw) if raw else {}
        perm = meta.get("permutation") if isinstance(meta, dict) else None
        if perm is not None and sorted(perm) != list(range(len(perm))):
            raise ValueError(perm)
    except (ValueError, TypeError, UnicodeDecodeError):
        raise _Bad(f"{ext} metadata {raw[:60]!r} is not valid", "bad_type", None) from None
    return None if perm is None else tuple(int(p) for p in perm)


def is_tensor_field(field: pa.Field) -> bool:
    """Whether ``field`` holds per-row arrays in a layout this module reads as ``[n, *shape]``:
    Ray's tensor extensions (as types or in field metadata), the fast layout, Arrow's canonical
    fixed / variable shape tensors, and ``fixed_size_list`` columns (nested or not) of numbers.

    Args:
        field: A field of a schema, with its metadata.

    Returns:
        True for a tensor column; False for scalars, strings, variable-length lists and structs.
    """
    t = field.type
    if isinstance(t, pa.BaseExtensionType):
        return t.extension_name in (
            *TENSOR_EXTENSIONS,
            _VARIABLE_TENSOR,
            _ARROW_FIXED,
            _ARROW_VARIABLE,
            FAST_NAME,
        )
    name = (field.metadata or {}).get(_EXT_NAME, b"").decode("utf-8", "replace")
    if name in (*TENSOR_EXTENSIONS, _VARIABLE_TENSOR, _ARROW_VARIABLE, FAST_NAME):
        return True
    while pa.types.is_fixed_size_list(t):
        t = t.value_type
        if not pa.types.is_fixed_size_list(t):
            return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t))
    return False


def _parse_shape(raw: bytes, ext: str) -> tuple[int, ...]:
    try:
        shape = json.loads(raw)
        if not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise ValueError(shape)
    except (ValueError, UnicodeDecodeError):
        raise _Bad(
            f"{ext} metadata {raw[:60]!r} is not a JSON shape like [4] (written with "
            "Ray's cloudpickle serialization?)",
            "bad_type",
            None,
        ) from None
    return tuple(shape)


def _chunked(column: pa.ChunkedArray, shape: _Meta) -> np.ndarray:
    if column.num_chunks == 1:
        return _convert(column.chunk(0), shape)
    if column.num_chunks == 0:
        return _convert(pa.array([], column.type), shape)
    parts = []
    base = 0
    chunks = [c for c in column.chunks if len(c)]  # an empty list chunk has no inner shape
    if len(chunks) <= 1:
        return _convert(chunks[0] if chunks else column.chunk(0), shape)
    for chunk in chunks:
        try:
            parts.append(_convert(chunk, shape))
        except _Bad as bad:
            raise _shifted(bad, partial(np.add, base)) from None
        base += len(chunk)
    try:
        return np.concatenate(parts)
    except ValueError:
        raise _Bad("chunks hold values of different shapes", "ragged", None) from None


def _null_rows(arr: pa.Array) -> np.ndarray:
    return np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))


def _convert(arr: pa.Array, shape: _Meta = None) -> np.ndarray:
    """One Arrow array as numpy: by its fast-tensor spec, its extension type, the shape the
    column's metadata gave (``shape``), or else its plain Arrow type."""
    t = arr.type
    if isinstance(t, FastTensorType):
        shape = _fast_tensor_spec(t)
    if isinstance(shape, TensorSpec):
        return _fast_tensor(arr, shape)
    if isinstance(t, pa.BaseExtensionType):
        return _extension(arr, shape)
    if shape is not None:
        return _shaped_by_metadata(arr, shape)
    return _plain(arr)


def _fast_tensor_spec(t: FastTensorType) -> TensorSpec:
    """The shape and dtype a fast tensor type declares; a malformed one is a ``bad_type``."""
    try:
        return t.spec
    except ValueError as e:
        raise _Bad(str(e), "bad_type", None) from None


def _fast_tensor(arr: pa.Array, spec: TensorSpec) -> np.ndarray:
    """Fixed-size binary cells as ``[n, *spec.shape]``; the layout has no nulls."""
    if arr.null_count:
        rows = _null_rows(arr)
        raise _Bad(
            f"null cell at row {rows[0]} in a fast tensor column (the layout has no nulls)",
            "null_value",
            rows,
        )
    return fixed_binary_to_numpy(arr, spec)


def _extension(arr: pa.Array, shape: _Meta) -> np.ndarray:
    """An extension array: Ray's and Arrow's tensor types by their shape, any other extension by
    its storage."""
    t = arr.type
    ext = t.extension_name
    if ext in TENSOR_EXTENSIONS:
        ext_shape = getattr(t, "shape", None)
        if ext_shape is None:
            ext_shape = _parse_shape(t.__arrow_ext_serialize__(), ext)
        return _tensor(arr.storage, tuple(ext_shape))
    if ext == _VARIABLE_TENSOR:
        return _variable_tensor(arr.storage)
    if isinstance(t, pa.FixedShapeTensorType):
        return _fixed_shape_tensor(arr.storage, tuple(t.shape), t.permutation)
    if ext == _ARROW_VARIABLE:
        return _variable_tensor(arr.storage, _type_permutation(t))
    return _convert(arr.storage, shape)


def _shaped_by_metadata(arr: pa.Array, shape: tuple[int, ...] | _VariableShape) -> np.ndarray:
    """An extension's storage read as the shape the column's metadata gave: variable-shape
    tensors (a struct) or fixed ``[n, *shape]`` tensors."""
    if isinstance(shape, _VariableShape):
        if not pa.types.is_struct(arr.type):
            raise _Bad(
                f"{_ARROW_VARIABLE} storage must be a struct, found {arr.type}", "bad_type", None
            )
        return _variable_tensor(arr, shape.permutation)
    return _tensor(arr, shape)


def _plain(arr: pa.Array) -> np.ndarray:
    """An array of a plain Arrow type: lists as ``[n, L, ...]``, numbers and bools without
    nulls, anything else as Python objects (nulls as None)."""
    t = arr.type
    if pa.types.is_dictionary(t):
        return _convert(arr.dictionary_decode())
    if pa.types.is_null(t):
        return np.full(len(arr), None, dtype=object)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _list(arr)
    numeric = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
    if numeric and arr.null_count:
        rows = _null_rows(arr)
        raise _Bad(f"null value in a {t} column at row {rows[0]}", "null_value", rows)
    # Numbers and bools without nulls (zero-copy); strings, bytes, structs (infos),
    # timestamps...: Python objects where needed, nulls as None.
    out: np.ndarray = arr.to_numpy(zero_copy_only=False)
    return out


def _list(arr: pa.Array) -> np.ndarray:
    """A list column of equal-length lists -> ``[n, L, ...]`` via offsets arithmetic."""
    n = len(arr)
    if arr.null_count:
        rows = _null_rows(arr)
        raise _Bad(f"null list at row {rows[0]}", "null_value", rows)
    if pa.types.is_fixed_size_list(arr.type):
        size = arr.type.list_size
        values = arr.flatten()
    else:
        offsets = np.asarray(arr.offsets)
        lens = np.diff(offsets)
        size = int(lens[0]) if n else 0
        if n and (lens != size).any():
            vals, counts = np.unique(lens, return_counts=True)
            mode = int(vals[np.argmax(counts)])
            rows = np.flatnonzero(lens != mode)
            raise _Bad(
                f"ragged lists: row {rows[0]} has {lens[rows[0]]} elements where most rows "
                f"have {mode}",
                "ragged",
                rows,
            )
        start = int(offsets[0]) if n else 0
        values = arr.values.slice(start, n * size)
    try:
        inner = _convert(values)
    except _Bad as bad:
        raise _shifted(bad, lambda r: r // max(size, 1)) from None
    return inner.reshape((n, size, *inner.shape[1:]))


def _shifted(bad: _Bad, fn: Callable[[np.ndarray], np.ndarray]) -> _Bad:
    """``bad`` one level up (a chunk's rows to the column's, list values to their lists), its
    message naming the row it names there (``row 83`` of the inner values is ``row 41``)."""
    out = bad.shifted(fn)
    if bad.rows is not None and len(bad.rows) and out.rows is not None and len(out.rows):
        old, new = f"row {int(bad.rows[0])}", f"row {int(out.rows[0])}"
        out = _Bad(out.message.replace(old, new, 1), out.reason, out.rows)
    return out


def _tensor(storage: pa.Array, shape: tuple[int, ...]) -> np.ndarray:
    """A Ray fixed-shape tensor column: each row is a flat list of ``prod(shape)`` elements."""
    flat = _list(storage)
    n = len(storage)
    size = int(np.prod(shape, dtype=np.int64))
    if flat.ndim != 2 or (n and flat.shape[1] != size):
        raise _Bad(
            f"tensor rows hold {flat.shape[1:]} elements; shape {list(shape)} needs {size}",
            "ragged",
            np.arange(n, dtype=np.int64),
        )
    return flat.reshape((n, *shape))


def _permuted(flat: np.ndarray, shape: tuple[int, ...], perm: Sequence[int] | None) -> np.ndarray:
    """Rows of ``prod(shape)`` elements stored in physical order ``perm`` (Arrow's canonical
    tensors: physical dimension ``i`` is logical dimension ``perm[i]``) as ``[n, *shape]``."""
    n = len(flat)
    if perm is None or list(perm) == list(range(len(shape))):
        return flat.reshape((n, *shape))
    physical = tuple(shape[p] for p in perm)
    inverse = np.argsort(np.asarray(perm))
    return np.ascontiguousarray(flat.reshape((n, *physical)).transpose((0, *(1 + inverse))))


def _type_permutation(t: pa.DataType) -> tuple[int, ...] | None:
    """The permutation of a registered ``arrow.variable_shape_tensor`` type. pyarrow has no
    Python accessor for it (the type is a bare ``BaseExtensionType``); its text has it."""
    found = re.search(r"permutation=\[([0-9,\s]*)\]", str(t))
    if found is None:
        return None
    return tuple(int(p) for p in found.group(1).split(",") if p.strip())


def _fixed_shape_tensor(
    storage: pa.Array, shape: tuple[int, ...], perm: Sequence[int] | None
) -> np.ndarray:
    """``arrow.fixed_shape_tensor``: a ``fixed_size_list`` of ``prod(shape)`` per row, zero-copy
    unless ``perm`` reorders dimensions."""
    flat = _list(storage)
    if flat.ndim != 2:
        raise _Bad(f"{_ARROW_FIXED} storage holds {flat.shape[1:]} per row", "bad_type", None)
    return _permuted(flat, shape, perm)


def _variable_tensor(storage: pa.StructArray, perm: Sequence[int] | None = None) -> np.ndarray:
    """Ray's variable-shaped tensors and Arrow's ``arrow.variable_shape_tensor`` (the same
    ``data`` / ``shape`` struct), readable when all rows share one shape."""
    n = len(storage)
    if storage.null_count:
        rows = _null_rows(storage)
        raise _Bad(f"null tensor at row {rows[0]}", "null_value", rows)
    shapes = _list(storage.field("shape"))
    if n == 0:
        return np.empty((0,), dtype=object)
    diff = (shapes != shapes[0]).any(axis=1)
    if diff.any():
        rows = np.flatnonzero(diff)
        raise _Bad(
            f"variable-shaped tensors: row {rows[0]} has shape {shapes[rows[0]].tolist()}, "
            f"row 0 has {shapes[0].tolist()} (one shape per column is read; pad or split it)",
            "ragged",
            rows,
        )
    flat = _list(storage.field("data"))
    shape = tuple(int(s) for s in shapes[0])
    if perm is None:
        return flat.reshape((n, *shape))
    # Arrow's "shape" field holds the logical shape; the data are in physical order.
    return _permuted(flat, shape, perm)


# ---------------------------------------------------------------------------------------------
# numpy
# ---------------------------------------------------------------------------------------------
def _from_ndarray(array: np.ndarray) -> np.ndarray:
    if not array.dtype.hasobject or array.ndim != 1 or len(array) == 0:
        return array
    first = next((c for c in array if c is not None), None)
    if isinstance(first, np.ndarray | list | tuple):
        return _stack(array)
    return array  # strings, bytes, dicts, ids: an object column stays one


def _stack(cells: Sequence[Any] | np.ndarray) -> np.ndarray:
    n = len(cells)
    if n == 0:
        return np.empty((0,))
    none = [i for i, c in enumerate(cells) if c is None]
    if none:
        raise _Bad(f"null value at row {none[0]}", "null_value", np.asarray(none, np.int64))
    arrays = [np.asarray(c) for c in cells]
    shapes = [a.shape for a in arrays]
    ref = shapes[0]
    if any(s != ref for s in shapes):
        uniq: dict[tuple[int, ...], int] = {}
        for s in shapes:
            uniq[s] = uniq.get(s, 0) + 1
        mode = max(uniq, key=lambda s: uniq[s])
        rows = np.asarray([i for i, s in enumerate(shapes) if s != mode], np.int64)
        raise _Bad(
            f"ragged values: row {rows[0]} has shape {shapes[rows[0]]} where most rows have {mode}",
            "ragged",
            rows,
        )
    out = np.stack(arrays)
    if out.dtype.hasobject:
        raise _Bad("values of mixed types", "bad_type", None)
    return out
