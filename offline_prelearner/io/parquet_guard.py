"""Untrusted Parquet: what a file may cost to decode, checked from its footer before any read.

A Parquet file says in its footer what it holds: row groups, their row counts, and per column
chunk the values, encodings and sizes compressed and uncompressed. A file of a few KB can claim
(or hold) gigabytes: a zstd page of zeros decompresses 30,000 to 1, one dictionary entry of 10 KB
indexed by 200,000 rows decodes to 2 GB, a forged row count makes the reader allocate for rows
that are not there. :func:`check_parquet` bounds what Arrow would allocate from the footer alone:

* **rows**: the file's row count is the sum of its row groups', and each flat column of a row
  group holds that many values (a forged count disagrees with the rest of the footer);
* **decoded bytes**, per column chunk the larger of its uncompressed size and ``values x width``
  (fixed-width values: exact), summed per row group (at most ``max_parquet_row_group_bytes``)
  and per file (at most ``max_parquet_expansion`` times the file's size, once above
  :data:`SMALL_FILE_BYTES`). Strings and binaries stored as dictionary indices (or with
  ``DELTA_BYTE_ARRAY``'s shared prefixes) can decode to far more than their pages: where the
  bound from the footer (every value as long as the whole chunk) is above the limits, the
  dictionary itself is read (indices and entries, what the footer already bounds) and the exact
  decoded size is summed from it.

Files are opened through :func:`open_parquet` (Thrift limits scaled to the file, row groups read
one at a time by callers), which runs the check, so every reader of the package refuses a bomb
the same way: a :class:`~offline_prelearner.errors.DataError` (``reason="unreadable_file"``: the
policy ``--on-invalid skip`` counts the file and goes on) in one line naming the file, the row
group, the column and what it claims.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..config import DEFAULT_LIMITS, DecodeLimits
from ..errors import DataError, Where
from .stores import input_file, is_remote, locate

__all__ = [
    "SMALL_FILE_BYTES",
    "check_drift",
    "check_files",
    "check_footer",
    "check_parquet",
    "decoded_bytes",
    "open_parquet",
    "parse_footer",
]

#: Files whose footer claims at most this many decoded bytes are never refused for their ratio
#: (a small file of constant columns may compress far better than any limit, and costs nothing).
SMALL_FILE_BYTES = 64 << 20

#: Decoded bytes of one value per Parquet physical type (Arrow's in-memory width; INT96 is read
#: as a 64-bit timestamp, BOOLEAN as one bit, rounded up to a byte per 8).
_WIDTH = {"INT32": 4, "INT64": 8, "INT96": 8, "FLOAT": 4, "DOUBLE": 8}
_NARROW = {"INT_8": 1, "UINT_8": 1, "INT_16": 2, "UINT_16": 2}

#: Thrift limits of a footer: no string or list in it can be longer than the file itself.
_THRIFT_STRING_MAX = 100_000_000  # pyarrow's default
_THRIFT_CONTAINER_MAX = 1_000_000  # pyarrow's default


@dataclass(frozen=True)
class _Chunk:
    """What one column chunk of one row group decodes to (an upper bound) and whether the bound
    is ``loose``: a dictionary- or prefix-coded byte array, any of whose values may be as long as
    the whole chunk)."""

    name: str
    bytes: int
    loose: bool


def _refuse(path: str, message: str, column: str | None = None, *, limit: bool = True) -> DataError:
    why = (
        "raise it in read.limits if the file is trusted" if limit else "a forged or corrupt footer"
    )
    return DataError(
        f"refused Parquet file: {message} ({why})",
        Where(file=path, column=column),
        reason="unreadable_file",
    )


def _chunk_bytes(meta: pq.FileMetaData, rg: int, j: int, rows: int) -> _Chunk:
    """What Arrow holds once column chunk ``j`` of row group ``rg`` is decoded: its values (at
    their logical width: uint8 pixels stored as INT32 are one byte each), validity bitmaps and
    list offsets. A list column's outer lists are the rows; inner lists, at most a value each.
    Pages are decompressed one at a time, so their size counts only where it bounds a value."""
    col = meta.row_group(rg).column(j)
    leaf = meta.schema.column(j)
    n = int(col.num_values)
    physical = col.physical_type
    rep = int(leaf.max_repetition_level)
    levels = -(-n // 8) + int(leaf.max_definition_level) * -(-rows // 8)
    for k in range(rep):
        lists = rows if k == 0 else n
        levels += 8 * (lists + 1) + -(-lists // 8)
    if physical == "BOOLEAN":
        values = -(-n // 8)
    elif physical == "FIXED_LEN_BYTE_ARRAY":
        values = n * max(int(leaf.length or 0), 1)
    elif physical == "BYTE_ARRAY":
        uncompressed = int(col.total_uncompressed_size)
        coded = col.has_dictionary_page or bool(
            set(col.encodings) & {"PLAIN_DICTIONARY", "RLE_DICTIONARY", "DELTA_BYTE_ARRAY"}
        )
        if coded:  # any value may be as long as the whole chunk
            return _Chunk(col.path_in_schema, 8 * n + n * uncompressed + levels, True)
        values = 8 * n + uncompressed  # offsets (large_binary: 8 bytes) and the bytes
    else:
        values = n * _NARROW.get(str(leaf.converted_type), _WIDTH.get(physical, 8))
    return _Chunk(col.path_in_schema, values + levels, False)


def decoded_bytes(meta: pq.FileMetaData) -> list[list[_Chunk]]:
    """Per row group, per column chunk: the decoded bytes the footer allows (an upper bound).

    Args:
        meta: A Parquet file's footer; only its statistics are read, no page is.

    Returns:
        ``[row group][column chunk]``: each chunk's column path, its bound in bytes, and whether
        the bound is loose (dictionary- or prefix-coded byte arrays).
    """
    return [
        [_chunk_bytes(meta, i, j, meta.row_group(i).num_rows) for j in range(meta.num_columns)]
        for i in range(meta.num_row_groups)
    ]


def check_parquet(
    path: str,
    pf: pq.ParquetFile,
    size: int,
    limits: DecodeLimits = DEFAULT_LIMITS,
) -> None:
    """Refuses a Parquet file whose footer claims more than ``limits`` allow (see the module
    docstring); reads nothing but the footer, and the dictionaries of byte-array columns whose
    bound from the footer is above the limits.

    Args:
        path: The file, as the error names it.
        pf: The file, opened (its footer read).
        size: The file's size in bytes.
        limits: ``max_parquet_expansion`` and ``max_parquet_row_group_bytes``.

    Raises:
        DataError: ``reason="unreadable_file"``, naming the file, the row group and the column;
            also for a column name the schema holds twice (Arrow cannot select it by name).
    """
    meta = pf.metadata
    names = meta.schema.to_arrow_schema().names
    if len(set(names)) != len(names):  # Arrow's table.column(name) raises a KeyError on it
        twice = next(n for n in names if names.count(n) > 1)
        raise DataError(
            f"refused Parquet file: column {twice!r} appears {names.count(twice)} times in its "
            "schema; a column is named once (rename or drop the copies)",
            Where(file=path, column=twice),
            reason="unreadable_file",
        )
    claimed = int(meta.num_rows)
    groups = [int(meta.row_group(i).num_rows) for i in range(meta.num_row_groups)]
    if claimed != sum(groups) or claimed < 0:
        raise _refuse(
            path,
            f"the footer claims {claimed} rows, its {len(groups)} row group(s) hold {sum(groups)}",
            limit=False,
        )
    ratio_cap = max(SMALL_FILE_BYTES, int(limits.max_parquet_expansion * size))
    rg_cap = limits.max_parquet_row_group_bytes
    total = 0
    for i, rows in enumerate(groups):
        rg = meta.row_group(i)
        chunks = []
        for j in range(meta.num_columns):
            leaf = meta.schema.column(j)
            n = int(rg.column(j).num_values)
            if leaf.max_repetition_level == 0 and n != rows:
                raise _refuse(
                    path,
                    f"row group {i} claims {rows} rows, column {leaf.path!r} holds {n} values",
                    leaf.path,
                    limit=False,
                )
            chunks.append(_chunk_bytes(meta, i, j, rows))
        rg_bytes = sum(c.bytes for c in chunks)
        if rg_bytes > rg_cap or total + rg_bytes > ratio_cap:
            # A loose bound (dictionary-coded strings) is made exact, by reading the dictionary
            # and its indices, where what those cost is itself within the limits.
            floor = sum(c.bytes for c in chunks if not c.loose) + sum(
                8 * int(rg.column(j).num_values) for j, c in enumerate(chunks) if c.loose
            )
            if floor <= rg_cap and total + floor <= ratio_cap:
                for k, c in enumerate(chunks):
                    exact = _dictionary_bytes_at(path, i, c.name) if c.loose else None
                    if exact is not None:
                        chunks[k] = _Chunk(c.name, exact, False)
                rg_bytes = sum(c.bytes for c in chunks)
        if rg_bytes > rg_cap or total + rg_bytes > ratio_cap:
            raise _too_large(path, i, len(groups), rows, chunks, rg, total, size, limits)
        total += rg_bytes


def _too_large(
    path: str,
    i: int,
    n_groups: int,
    rows: int,
    chunks: list[_Chunk],
    rg: pq.RowGroupMetaData,
    before: int,
    size: int,
    limits: DecodeLimits,
) -> DataError:
    """The refusal of row group ``i``: what it decodes to at least (fixed-width values, the
    indices of coded strings) or, where only coded strings carry it over, at most."""
    floor = [
        c.bytes if not c.loose else 8 * int(rg.column(j).num_values) for j, c in enumerate(chunks)
    ]
    rg_cap = limits.max_parquet_row_group_bytes
    ratio_cap = max(SMALL_FILE_BYTES, int(limits.max_parquet_expansion * size))
    low = sum(floor)
    if low > rg_cap or before + low > ratio_cap:
        k = max(range(len(chunks)), key=lambda j: floor[j])
        what = f"decodes to at least {low:,} bytes ({floor[k]:,} in column"
        total = before + low
    else:
        k = max(range(len(chunks)), key=lambda j: chunks[j].bytes)
        what = (
            f"may decode to {sum(c.bytes for c in chunks):,} bytes (column {chunks[k].name!r} "
            "holds dictionary- or prefix-coded values that cannot be sized before decoding; "
            f"up to {chunks[k].bytes:,} in column"
        )
        total = before + sum(c.bytes for c in chunks)
    what = f"row group {i} of {n_groups} ({rows:,} rows) {what} {chunks[k].name!r})"
    if total - before > rg_cap:
        limit = f"above max_parquet_row_group_bytes={rg_cap}"
    else:
        limit = (
            f"bringing the file to {total:,} bytes, above max_parquet_expansion="
            f"{limits.max_parquet_expansion:g} x its {size:,} bytes"
        )
    return _refuse(path, f"{what}, {limit}", chunks[k].name)


def _dictionary_bytes_at(path: str, rg: int, name: str) -> int | None:
    """The exact decoded bytes of a top-level dictionary-coded byte-array column of one row
    group, summed from its dictionary and indices (what the footer already bounds); None where
    it cannot be read that way (prefix-coded, nested)."""
    try:
        reader = pq.ParquetFile(input_file(path), read_dictionary=[name], pre_buffer=False)
        col = reader.read_row_group(rg, columns=[name], use_threads=False).column(0)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, KeyError):
        return None
    total = 0
    for chunk in col.chunks:
        if not pa.types.is_dictionary(chunk.type):
            return None
        # Each entry's length times how often it is used (no per-row take of lengths).
        lengths = pc.binary_length(chunk.dictionary).to_numpy(zero_copy_only=False)
        used = np.bincount(chunk.indices.fill_null(0).to_numpy(), minlength=len(lengths))[
            : len(lengths)
        ]
        total += int(used @ lengths.astype(np.int64)) + 8 * len(chunk)
    return total


def open_parquet(
    path: str,
    limits: DecodeLimits = DEFAULT_LIMITS,
    *,
    size: int | None = None,
    pre_buffer: bool = True,
) -> pq.ParquetFile:
    """``path`` opened as a :class:`pyarrow.parquet.ParquetFile` whose footer passed
    :func:`check_parquet`; the footer's Thrift strings and lists are capped by the file's size
    (none can be longer than the file that holds it). A file that passed is checked once per
    process (until its size or mtime changes).

    Args:
        path: A local path or a store's URI.
        limits: The decoded-size bounds the footer must keep to.
        size: The file's size in bytes when the caller knows it (a listing), saving a stat.
        pre_buffer: pyarrow's ``pre_buffer`` (coalesced reads of column chunks: good on object
            stores, pointless for a reader that reads one column).

    Returns:
        The open file, its footer read and checked.

    Raises:
        DataError: A footer beyond ``limits`` (see :func:`check_parquet`).
        OSError, pyarrow.ArrowInvalid: The file cannot be opened or is not Parquet.
    """
    if is_remote(path):
        loc = locate(path)
        info = loc.info()
        if info.type != pafs.FileType.File:
            raise FileNotFoundError(f"{path}: not found")
        size = int(info.size or 0) if size is None else size
        source: Any = loc.path
        fs: pafs.FileSystem | None = loc.fs
        key = (path, size, int(info.mtime_ns or 0), limits)
    else:
        st = os.stat(path)
        size = st.st_size if size is None else size
        source, fs = path, None
        key = (os.path.abspath(path), size, st.st_mtime_ns, limits)
    pf = pq.ParquetFile(
        source,
        filesystem=fs,
        pre_buffer=pre_buffer,
        thrift_string_size_limit=max(1 << 10, min(_THRIFT_STRING_MAX, size)),
        thrift_container_size_limit=max(1 << 10, min(_THRIFT_CONTAINER_MAX, size)),
    )
    if key not in _PASSED:
        check_parquet(path, pf, size, limits)
        if len(_PASSED) >= _PASSED_MAX:
            _PASSED.clear()
        _PASSED.add(key)
    return pf


def parse_footer(path: str, data: bytes, size: int) -> pq.ParquetFile:
    """A Parquet file from bytes the caller read, under the same Thrift caps as
    :func:`open_parquet`: the whole file, or its footer and last 8 bytes (length and ``PAR1``)
    alone (then only the footer can be used): the one-open planning scan reads a file's tail
    once and parses it here.

    Args:
        path: The file, as an error names it (a local path or a store's URI).
        data: The whole file, or the footer's bytes followed by the file's last 8 bytes.
        size: The file's size in bytes (caps the Thrift strings and lists).

    Returns:
        The file over ``data`` (its footer read, not yet checked: :func:`check_footer`).

    Raises:
        pyarrow.ArrowInvalid, OSError: The bytes are not a Parquet footer.
    """
    source = data if len(data) == size else b"PAR1" + data
    return pq.ParquetFile(
        pa.BufferReader(source),
        thrift_string_size_limit=max(1 << 10, min(_THRIFT_STRING_MAX, size)),
        thrift_container_size_limit=max(1 << 10, min(_THRIFT_CONTAINER_MAX, size)),
    )


def check_footer(
    path: str, pf: pq.ParquetFile, size: int, mtime_ns: int, limits: DecodeLimits
) -> None:
    """:func:`check_parquet`, remembered as passed as :func:`open_parquet` remembers it (a unit
    of this process that opens the file later does not check it again).

    Args:
        path: The file, as the error names it.
        pf: The file (:func:`parse_footer`).
        size: The file's size in bytes.
        mtime_ns: Its modification time (what a passed check is remembered under).
        limits: The decode bounds.

    Raises:
        DataError: A footer beyond ``limits``.
    """
    key = (path if is_remote(path) else os.path.abspath(path), size, mtime_ns, limits)
    if key not in _PASSED:
        check_parquet(path, pf, size, limits)
        if len(_PASSED) >= _PASSED_MAX:
            _PASSED.clear()
        _PASSED.add(key)


#: Files this process checked and passed, by (path, size, mtime, limits): planning, the plan's
#: read of the episode ids and the unit's read check a file once (a rewritten file again).
_PASSED: set[tuple[str, int, int, DecodeLimits]] = set()
_PASSED_MAX = 1 << 16


# ============================================================================================
# schema drift between the files of one input
# ============================================================================================
_EXT_NAME = b"ARROW:extension:name"
_EXT_META = b"ARROW:extension:metadata"


def _signature(field: pa.Field) -> tuple[str, str | None]:
    """A column's type and, for tensor cells, the extension that gives their shape (Ray's
    tensor, ours, Arrow's), whether it is registered in this process or only in metadata."""
    t = field.type
    if isinstance(t, pa.ExtensionType):
        return str(t.storage_type), f"{t.extension_name} {t.__arrow_ext_serialize__()!r}"
    meta = field.metadata or {}
    if _EXT_NAME in meta:
        return str(t), f"{meta[_EXT_NAME].decode(errors='replace')} {meta.get(_EXT_META)!r}"
    return str(t), None


def _shape(field: pa.Field) -> str:
    """The cell shape a tensor extension declares, for the message: ``(4,)`` whether Ray's type
    is registered in this process or only named in the field's metadata."""
    t = field.type
    if isinstance(t, pa.ExtensionType):
        raw = t.__arrow_ext_serialize__()
    else:
        raw = (field.metadata or {}).get(_EXT_META, b"")
    try:
        spec = json.loads(raw)
    except ValueError:
        return repr(raw[:80])
    shape = spec.get("shape") if isinstance(spec, dict) else spec
    if isinstance(shape, list) and all(isinstance(d, int) for d in shape):
        return str(tuple(shape))
    return repr(raw[:80])


def check_drift(files: list[str], schemas: list[pa.Schema | None]) -> None:
    """Refuses files of one input whose columns disagree, in one line naming the column and
    both files; both engines plan through here, so they accept and refuse the same inputs.

    The rule: a column holds one cell shape in every file (observations of shape (4,) beside
    (5,) are refused: no episode or batch can hold both), and types that join into one column:
    **widenings are accepted** (int32 and int64, float32 and float64, int64 and float64 rewards,
    string and large_string: pyarrow's permissive promotion, which both engines already applied
    when a unit's rows span two files, and which the prelearner's casts to its own dtypes
    follow; refusing them would refuse inputs that both engines read alike today). Types that
    do not join (integer and string actions, a list beside a scalar) are refused. A column
    missing from a file, or of Arrow's null type there (RLlib's unset ``agent_id``), agrees with
    any, unless the file holds a column of a close name instead (``reward`` where the files
    before it hold ``rewards``): that is a renamed column, refused naming both names.

    Args:
        files: The input's files, in planning order (the first file of a column is the one the
            others are compared with).
        schemas: Each file's Arrow schema, or None for one that could not be read (skipped).

    Raises:
        DataError: ``reason="schema_drift"``, naming the column and both files.
    """
    first: dict[str, tuple[pa.Field, str]] = {}
    for path, schema in zip(files, schemas, strict=True):
        if schema is None:
            continue
        if first:
            _check_renamed(path, schema, first)
        for field in schema:
            if pa.types.is_null(field.type):
                continue
            seen = first.get(field.name)
            if seen is None:
                first[field.name] = (field, path)
                continue
            ref, ref_path = seen
            a, b = _signature(ref), _signature(field)
            if a == b:
                continue
            if a[1] != b[1]:
                what = (
                    f"holds cells of shape {_shape(ref)} in {ref_path!r} and {_shape(field)} "
                    f"in {path!r}"
                    if a[1] and b[1]
                    else f"is {ref.type} in {ref_path!r} and {field.type} in {path!r}"
                )
                raise _drift(path, field.name, what)
            if _joins(a[0], ref.type, b[0], field.type):
                continue
            raise _drift(
                path,
                field.name,
                f"is {a[0]} in {ref_path!r} and {b[0]} in {path!r}, which pyarrow cannot join "
                "into one column",
            )


def _check_renamed(path: str, schema: pa.Schema, first: dict[str, tuple[pa.Field, str]]) -> None:
    """Refuses a file that lacks a column the files before it hold and holds one of a close
    name instead (``reward`` for ``rewards``): read by name, its rows would be nulls there."""
    names = set(schema.names)
    new = [n for n in schema.names if n not in first]
    if not new:
        return
    for name, (_, ref_path) in first.items():
        if name in names:
            continue
        close = difflib.get_close_matches(name, new, n=1, cutoff=0.8)
        if close:
            raise DataError(
                f"the input's files disagree: column {name!r} of {ref_path!r} is missing here, "
                f"which has {close[0]!r} instead (renamed?); one input names its columns alike "
                "(rename it in the odd files, or give each kind as its own input)",
                Where(file=path, column=name),
                reason="schema_drift",
            )


@functools.lru_cache(maxsize=256)
def _joins_by_name(a: str, b: str, ta: pa.DataType, tb: pa.DataType) -> bool:
    try:
        pa.unify_schemas(
            [pa.schema([pa.field("c", ta)]), pa.schema([pa.field("c", tb)])],
            promote_options="permissive",
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return False
    return True


def _joins(a: str, ta: pa.DataType, b: str, tb: pa.DataType) -> bool:
    """Whether the rows of two files, one column of each type, join into one column as both
    engines join them (pyarrow's permissive promotion: int32 and int64 to int64, int64 and
    float64 to float64, string and large_string...)."""
    ta = ta.storage_type if isinstance(ta, pa.ExtensionType) else ta
    tb = tb.storage_type if isinstance(tb, pa.ExtensionType) else tb
    return _joins_by_name(a, b, ta, tb)


def _drift(path: str, column: str, what: str) -> DataError:
    return DataError(
        f"the input's files disagree: column {column!r} {what}; one input holds one type and "
        "shape per column (rewrite the odd files, or give each kind as its own input)",
        Where(file=path, column=column),
        reason="schema_drift",
    )


def check_files(files: list[str], limits: DecodeLimits = DEFAULT_LIMITS) -> None:
    """Every Parquet file of ``files`` against ``limits`` and their schemas against each other
    (:func:`check_parquet`, :func:`check_drift`), from the footers: what the Ray engine runs on
    the driver before Ray Data's reader opens any of them. Files that are not Parquet, or that
    cannot be opened, are left to the reader.

    Args:
        files: The input's files (local paths or URIs); ``.parquet`` / ``.pq`` ones are checked.
        limits: The decoded-size bounds each footer must keep to.

    Raises:
        DataError: The first file refused, in one line.
    """
    schemas: list[pa.Schema | None] = []
    for f in files:
        schema = None
        if f.endswith((".parquet", ".pq")):
            try:
                schema = open_parquet(f, limits).schema_arrow
            except (pa.ArrowInvalid, OSError):
                schema = None
        schemas.append(schema)
    check_drift(files, schemas)
