"""A dataset index: what planning learned about each file of a folder, kept beside it.

``<folder>/_index.parquet`` holds one row per data file (:data:`INDEX_SCHEMA`): its path relative
to the folder, size, mtime, rows, content fingerprint, schema id, the bytes its rows decode to
and the bounds its footer allows, and its distinct episode keys (first-seen order) with the last
row of each: everything :func:`~.plan.plan_scans` needs, so a job over the folder plans from
this one file instead of opening every data file (:func:`scans_from_index`). The name starts
with ``_``, so listings pass over it as they pass over ``_manifest.json``.

**Why Parquet.** 100,000 entries are ~10 MB of columns that load in tens of milliseconds and
go to the plan's merge as arrays (the keys of every file are one list column: no per-row
Python), where JSON would take seconds to parse and check entry by entry; the schema is checked
whole (names, types, nullability), and nothing in it is executable (no pickle).

**Never trusted.** The index is untrusted input: at most :data:`MAX_INDEX_BYTES`, opened under
the decode limits (:func:`~offline_prelearner.io.parquet_guard.open_parquet`), its schema and
version exact, its columns consistent, else a one-line :class:`~offline_prelearner.errors.DataError`
naming it. Each entry is checked against the listing: a file whose size or mtime differs, a
file the index lacks, or one whose footer the index cannot vouch for under the job's
``read.limits`` is scanned afresh (only those files), and files gone since are dropped; one
:class:`~offline_prelearner.errors.StaleIndexWarning` line says how many. The identity is size
and mtime (nanoseconds on a local disk; an object store's modification time, whole seconds on
S3: pyarrow's filesystems expose no etag), plus the content fingerprint that a resume compares.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ...config import DEFAULT_LIMITS, DecodeLimits, PreLearnerConfig
from ...errors import CommittedWarning, DataError, OfflinePrelearnerError, StaleIndexWarning, Where
from ...io.parquet_guard import SMALL_FILE_BYTES, open_parquet
from ...io.sources import expand_paths
from ...io.stores import Location, file_stat, input_file, is_remote, locate
from .scan import FileScan, InputFile, Scanner, Scans, ScanSpec, ThreadScanner, schema_id

__all__ = [
    "INDEX_FILE",
    "INDEX_SCHEMA",
    "MAX_INDEX_BYTES",
    "IndexSummary",
    "index_output",
    "read_index",
    "scans_from_index",
    "write_index",
]

#: The index's name in the dataset's folder.
INDEX_FILE = "_index.parquet"
#: The largest index read (100,000 files of a few keys each take ~10 MB).
MAX_INDEX_BYTES = 256 << 20
#: The version this package writes and reads (the schema's metadata ``offline_prelearner.index``).
INDEX_VERSION = 1
_META_KEY = b"offline_prelearner.index"

#: One row per data file.
INDEX_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string(), nullable=False),  # relative to the folder, "/"-separated
        pa.field("size", pa.int64(), nullable=False),
        pa.field("mtime_ns", pa.int64(), nullable=False),
        pa.field("rows", pa.int64()),  # None: no footer said
        pa.field("fingerprint", pa.string()),  # jobs.commit.input_fingerprint
        pa.field("schema", pa.string()),  # scan.schema_id of its Arrow schema
        pa.field("decoded", pa.int64()),  # bytes its row groups decode to (footer)
        pa.field("bound_group", pa.int64()),  # decoded bytes the footer allows: largest group
        pa.field("bound_file", pa.int64()),  # and the whole file (None: check it afresh)
        pa.field("key_columns", pa.list_(pa.string())),  # None: keys not read
        pa.field("keys", pa.list_(pa.string())),  # distinct episode keys, first-seen order
        pa.field("last", pa.list_(pa.int64())),  # the last row of each
        pa.field("format", pa.string()),  # as detection tells it (None: cannot, or empty)
    ]
)


@dataclass(frozen=True)
class IndexSummary:
    """What :func:`write_index` wrote.

    Attributes:
        index: The index's path or URI.
        files: Data files indexed.
        rows: Their rows (files whose footer said).
        episodes: Distinct episode keys over all files.
        bytes: The index's size.
    """

    index: str
    files: int
    rows: int
    episodes: int
    bytes: int


def _relative(root: str, path: str) -> str | None:
    prefix = root.rstrip("/") + "/"
    return path[len(prefix) :] if path.startswith(prefix) else None


def _root(path: str | os.PathLike[str]) -> str:
    text = os.fspath(path)
    return locate(text).path if text.lower().startswith("file://") else text


def write_index(
    path: str | os.PathLike[str],
    config: PreLearnerConfig | None = None,
    *,
    files: Sequence[str] | None = None,
    scanner: Scanner | None = None,
) -> IndexSummary:
    """Writes ``<path>/_index.parquet`` for the data files of the folder ``path``.

    Args:
        path: A dataset's folder, local or on a store.
        config: Whose ``read.schema`` names the key columns (default: RLlib's); read as row
            data, with the default decode limits (a footer over them is indexed without
            bounds, so a job checks it afresh).
        files: The folder's data files (None: :func:`~offline_prelearner.io.sources.expand_paths`).
        scanner: What scans them (None: threads here).

    Returns:
        What was written.

    Raises:
        FileNotFoundError: Nothing to index at ``path``.
        StorageError: The store refused a read or the write.
    """
    root = _root(path)
    if files is None:
        files = expand_paths(root)
    base = (config or PreLearnerConfig()).with_updates({"format": "rows"})
    spec = ScanSpec.of(base, bounds=True)
    spec = ScanSpec(DEFAULT_LIMITS, "skip", spec.eps, spec.agent, True)
    listed = [f for f in files if _relative(root, f) is not None]
    scans = (scanner or ThreadScanner()).scan(listed, spec)
    scans.raise_first_error()
    table = _table(root, scans.files)
    sink = pa.BufferOutputStream()
    # Plain strings, no dictionaries: the footer then bounds what the index decodes to exactly,
    # so a reader's decode limits never refuse a large one (parquet_guard sizes a
    # dictionary-coded list column at its worst).
    pq.write_table(table, sink, compression="zstd", row_group_size=1 << 14, use_dictionary=False)
    data = sink.getvalue().to_pybytes()
    target = locate(root).join(INDEX_FILE)
    _write_whole(target, data)
    episodes = len(pc.unique(pc.list_flatten(table.column("keys")))) if table.num_rows else 0
    rows = int(pc.sum(table.column("rows")).as_py() or 0)
    return IndexSummary(target.uri, table.num_rows, rows, episodes, len(data))


def index_output(out: str, files: Sequence[str]) -> IndexSummary | None:
    """The index of a job's committed output, written after its commit point (as ``stats.json``
    is written again then): not part of the commit, so the manifest does not list it, and a
    reader checks it against the listing like any index. A failure is a warning: the output is
    committed.

    Args:
        out: The committed output's folder (path or URI).
        files: Its data files (the manifest's), under ``out``.

    Returns:
        What was written, or None (no files, or the write failed: warned).
    """
    if not files:
        return None
    try:
        return write_index(out, files=files)
    except (OfflinePrelearnerError, OSError) as e:
        warnings.warn(
            f"{out}: committed; writing its index ({INDEX_FILE}) failed ({e})",
            CommittedWarning,
            stacklevel=2,
        )
        return None


def _encode(table: pa.Table) -> bytes:
    """The index's bytes. Plain strings, no dictionaries: the footer then bounds what the index
    decodes to exactly, so a reader's decode limits never refuse a large one (parquet_guard
    sizes a dictionary-coded list column at its worst)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", row_group_size=1 << 14, use_dictionary=False)
    return bytes(sink.getvalue().to_pybytes())


def _write_whole(target: Location, data: bytes) -> None:
    """The file replaced whole: a local one through a temporary file and a rename (a reader
    never meets half an index), an object put on a store."""
    if not target.local:
        target.write_bytes(data)
        return
    folder = os.path.dirname(target.path)
    fd, tmp = tempfile.mkstemp(prefix=".index-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target.path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _table(root: str, scans: Sequence[FileScan]) -> pa.Table:
    def col(values: list[object], field: pa.Field) -> pa.Array:
        return pa.array(values, field.type)

    f = INDEX_SCHEMA
    cols = [
        col([_relative(root, s.file.path) for s in scans], f.field("path")),
        col([s.file.size for s in scans], f.field("size")),
        col([s.file.mtime_ns for s in scans], f.field("mtime_ns")),
        col([s.file.rows for s in scans], f.field("rows")),
        col([s.fingerprint for s in scans], f.field("fingerprint")),
        col([s.schema for s in scans], f.field("schema")),
        col([s.decoded for s in scans], f.field("decoded")),
        col([s.bound[0] if s.bound else None for s in scans], f.field("bound_group")),
        col([s.bound[1] if s.bound else None for s in scans], f.field("bound_file")),
        col(
            [list(s.key_columns) if s.key_columns is not None else None for s in scans],
            f.field("key_columns"),
        ),
        _lists([s.keys for s in scans], pa.string()),
        _lists([s.last for s in scans], pa.int64()),
        col([s.format for s in scans], f.field("format")),
    ]
    meta = {_META_KEY: json.dumps({"version": INDEX_VERSION}).encode()}
    return pa.Table.from_arrays(cols, schema=INDEX_SCHEMA.with_metadata(meta))


def _lists(parts: list[pa.Array | np.ndarray | None], kind: pa.DataType) -> pa.Array:
    """One list per file from per-file arrays, built from offsets (no per-key Python)."""
    lengths = np.array([0 if p is None else len(p) for p in parts], dtype=np.int32)
    offsets = np.zeros(len(parts) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    present = [p for p in parts if p is not None and len(p)]
    if present:
        values = pa.concat_arrays([pa.array(p, kind) for p in present])
    else:
        values = pa.array([], kind)
    mask = pa.array([p is None for p in parts])
    return pa.ListArray.from_arrays(pa.array(offsets), values, mask=mask)


# ====================================================================== reading
def _bad(where: str, what: str) -> DataError:
    return DataError(
        f"not a dataset index this version reads: {what} (delete it, or write it again with "
        "'offline-prelearner index' on its folder)",
        Where(file=where),
        reason="unreadable_file",
    )


def read_index(where: str | os.PathLike[str]) -> pa.Table:
    """An index file, checked (see the module docstring).

    Args:
        where: The index's path or URI.

    Returns:
        Its table, of :data:`INDEX_SCHEMA`'s columns.

    Raises:
        DataError: Over :data:`MAX_INDEX_BYTES`, not Parquet, another schema or version,
            columns that contradict each other; one line naming the file.
        FileNotFoundError: No such file.
    """
    text = os.fspath(where)
    size = file_stat(text).st_size
    if size > MAX_INDEX_BYTES:
        raise _bad(text, f"{size:,} bytes, above the {MAX_INDEX_BYTES:,} an index may hold")
    try:
        pf = open_parquet(text, DEFAULT_LIMITS)
        schema = pf.schema_arrow
        meta = schema.metadata or {}
        version = json.loads(meta.get(_META_KEY, b"null"))
        if not isinstance(version, dict) or version.get("version") != INDEX_VERSION:
            raise _bad(text, f"its {_META_KEY.decode()} metadata is {version!r}")
        if not schema.remove_metadata().equals(INDEX_SCHEMA):
            raise _bad(text, "its columns are not an index's")
        table = pf.read()
    except DataError as e:
        if "not a dataset index" in str(e):
            raise
        raise _bad(text, e.message.split(" (raise it")[0]) from None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, ValueError) as e:
        raise _bad(text, str(e).splitlines()[0] if str(e) else type(e).__name__) from None
    _check_columns(text, table)
    return table


def _check_columns(where: str, table: pa.Table) -> None:
    """Vectorised checks: every path distinct and relative, sizes and rows not negative, one
    last row per key and each within the file's rows."""
    paths = table.column("path")
    if pc.count_distinct(paths).as_py() != table.num_rows:
        raise _bad(where, "a path is listed twice")
    text = pc.cast(paths, pa.string())
    odd = pc.or_(
        pc.or_(pc.starts_with(text, "/"), pc.match_substring(text, "..")),
        pc.equal(pc.utf8_length(text), 0),
    )
    if pc.any(odd).as_py():
        raise _bad(where, "a path is not one relative to the index's folder")
    for name in ("size", "mtime_ns", "rows", "decoded", "bound_group", "bound_file"):
        low = pc.min(table.column(name)).as_py()
        if low is not None and low < 0:
            raise _bad(where, f"a negative {name}")
    keys, last = table.column("keys"), table.column("last")
    if pc.all(pc.equal(pc.list_value_length(keys), pc.list_value_length(last))).as_py() not in (
        True,
        None,
    ):
        raise _bad(where, "keys and their last rows differ in number")
    if pc.any(pc.not_equal(pc.is_null(keys), pc.is_null(last))).as_py():
        raise _bad(where, "keys and their last rows differ in number")
    rows = pc.list_parent_indices(last)
    flat = pc.list_flatten(last).to_numpy(zero_copy_only=False)
    limit = table.column("rows").to_numpy(zero_copy_only=False)
    if len(flat):
        owner_rows = np.asarray(limit, dtype=float)[np.asarray(rows)]
        if (flat < 0).any() or (flat >= np.nan_to_num(owner_rows, nan=-1)).any():
            raise _bad(where, "a last row outside its file")


def _passes(
    bound_group: int | None, bound_file: int | None, size: int, limits: DecodeLimits
) -> bool:
    """Whether a footer's bounds keep to ``limits`` (then the exact check would pass too)."""
    if bound_group is None or bound_file is None:
        return False
    ratio_cap = max(SMALL_FILE_BYTES, int(limits.max_parquet_expansion * size))
    return bound_group <= limits.max_parquet_row_group_bytes and bound_file <= ratio_cap


def _stats(root: str, files: list[str]) -> list[tuple[int, int] | None]:
    """Each file's (size, mtime) as the listing gives it now (None: gone): ``os.stat`` on the
    local disk, one recursive listing of the folder on a store (no request per file)."""
    if not is_remote(root):
        out: list[tuple[int, int] | None] = []
        for f in files:
            try:
                st = os.stat(f)
            except OSError:
                out.append(None)
                continue
            out.append((st.st_size, st.st_mtime_ns))
        return out
    loc = locate(root)
    infos = loc.fs.get_file_info(pafs.FileSelector(loc.path, recursive=True))
    got = {
        i.path: (int(i.size or 0), int(i.mtime_ns or 0))
        for i in infos
        if i.type == pafs.FileType.File
    }
    return [got.get(locate(f).path) for f in files]


def scans_from_index(
    path: str | os.PathLike[str] | list[str],
    files: list[str],
    spec: ScanSpec,
    scanner: Scanner,
) -> Scans | None:
    """The scans of ``files`` from the index of the folder ``path``, where it has one: each
    entry checked against the listing, the files it cannot vouch for scanned by ``scanner``.

    Args:
        path: The job's input as given; only a folder (not a list, file or glob) has an index.
        files: Its data files, in name order.
        spec: What a scan reads (its key columns, the job's limits).
        scanner: What scans the files the index does not cover.

    Returns:
        One scan per file, in order; None where there is no index (or no keys to plan by).

    Raises:
        DataError: The index is not one (:func:`read_index`).
    """
    if isinstance(path, list) or spec.eps is None:
        return None
    root = _root(path)
    target = locate(root).join(INDEX_FILE)
    try:
        if target.local:
            if not os.path.isfile(target.path):
                return None
        elif not target.is_file():
            return None
    except OSError:
        return None
    table = read_index(target.uri)
    entries = {p: j for j, p in enumerate(table.column("path").to_pylist())}
    now = _stats(root, files)
    stamps = list(
        zip(table.column("size").to_pylist(), table.column("mtime_ns").to_pylist(), strict=True)
    )
    bg = table.column("bound_group").to_pylist()
    bf = table.column("bound_file").to_pylist()
    sid = table.column("schema").to_pylist()
    fps = table.column("fingerprint").to_pylist()
    use: list[int | None] = []
    changed = added = unchecked = 0
    seen: set[int] = set()
    for f, st in zip(files, now, strict=True):
        rel = _relative(root, f)
        j = entries.get(rel) if rel is not None else None
        if j is None or st is None:
            added += 1
            use.append(None)
            continue
        seen.add(j)
        if st != stamps[j]:
            changed += 1
            use.append(None)
        elif sid[j] is None or fps[j] is None or not _passes(bg[j], bf[j], st[0], spec.limits):
            unchecked += 1
            use.append(None)
        else:
            use.append(j)
    gone = table.num_rows - len(seen)
    if changed or added or gone:
        warnings.warn(
            f"{target.uri}: {changed} file(s) changed, {added} added and {gone} gone since the "
            f"index was written; scanning {changed + added} of {len(files)} afresh (write it "
            "again: offline-prelearner index)",
            StaleIndexWarning,
            stacklevel=3,
        )
    todo = [f for f, j in zip(files, use, strict=True) if j is None]
    fresh = scanner.scan(todo, spec) if todo else Scans((), {})
    merged = _merge(table, files, use, fresh)
    if merged is None:  # a schema that is not the one indexed: trust none of it
        warnings.warn(
            f"{target.uri}: a file's schema is not the one the index holds; scanning all "
            f"{len(files)} files afresh (write it again: offline-prelearner index)",
            StaleIndexWarning,
            stacklevel=3,
        )
        return scanner.scan(files, spec)
    return merged


_SCALARS = (
    "size",
    "mtime_ns",
    "rows",
    "fingerprint",
    "schema",
    "decoded",
    "bound_group",
    "bound_file",
    "format",
)


def _merge(table: pa.Table, files: list[str], use: list[int | None], fresh: Scans) -> Scans | None:
    """Scans from the index's entries (``use[i]``: the entry of file ``i``, None: scanned
    afresh, in ``fresh``), and each schema read from the first file that has it (None where that
    file's schema is not the one indexed)."""
    col = {name: table.column(name).to_pylist() for name in _SCALARS}
    size, mtime, rows, fps, sid = (
        col[n] for n in ("size", "mtime_ns", "rows", "fingerprint", "schema")
    )
    decoded, bg, bf, formats = (col[n] for n in ("decoded", "bound_group", "bound_file", "format"))
    key_cols = [None if c is None else tuple(c) for c in table.column("key_columns").to_pylist()]
    keys = table.column("keys").combine_chunks()
    last = table.column("last").combine_chunks()
    has_keys = keys.is_valid().to_pylist()
    k_off = keys.offsets.to_pylist()
    k_val = keys.values
    l_off = last.offsets.to_pylist()
    l_val = last.values.to_numpy(zero_copy_only=False)
    out: list[FileScan] = []
    again = iter(fresh.files)
    first_of: dict[str, str] = {}
    for f, j in zip(files, use, strict=True):
        if j is None:
            out.append(next(again))
            continue
        cols = key_cols[j]
        got = cols is not None and has_keys[j]
        out.append(
            FileScan(
                InputFile(f, size[j], mtime[j], rows[j]),
                fps[j],
                sid[j],
                decoded[j],
                False,
                cols,
                k_val.slice(k_off[j], k_off[j + 1] - k_off[j]) if got else None,
                l_val[l_off[j] : l_off[j + 1]] if got else None,
                (bg[j], bf[j]),
                format=formats[j],
            )
        )
        first_of.setdefault(sid[j], f)
    schemas = dict(fresh.schemas)
    for want, f in first_of.items():
        if want in schemas:
            continue
        source = input_file(f)
        try:
            schema = pq.read_schema(source)
        except (pa.ArrowInvalid, OSError):
            return None
        finally:
            if not isinstance(source, str):
                source.close()
        if schema_id(schema) != want:
            return None
        schemas[want] = schema
    return Scans(tuple(out), schemas)
