"""What the plan learns about each input file, from one open of it, many files at once.

A :class:`FileScan` is everything :mod:`.plan` needs of one file: its size, mtime and rows
(:class:`~.plan.InputFile`), its content fingerprint
(:func:`~offline_prelearner.jobs.commit.input_fingerprint`), its schema (an id into
:attr:`Scans.schemas`), the bytes its rows decode to, and, for keyed row data, its distinct
episode keys in first-seen order with the last row of each. A Parquet file is opened once: its
tail is read in one request (the footer, which is checked against ``read.limits`` by
:func:`~offline_prelearner.io.parquet_guard.parse_footer` and hashed for the fingerprint), then
its key columns in one more (column projection); other files (JSON lines, Arrow IPC, HDF5) take
the plan's general path.

A :class:`Scanner` scans a list of files in parallel and hands back one scan per file, in the
list's order: :class:`ThreadScanner` on the driver (I/O: pyarrow releases the GIL while it
reads) and :class:`RayScanner` as Ray tasks over batches of files, a bounded number in flight,
spread over the cluster's nodes. A file's failure (a refused footer under
``on_invalid="raise"``, a missing file, a store that refuses) travels in its scan and is raised
by the plan in file order, so any scanner raises what the serial plan raised.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...config import DEFAULT_LIMITS, DecodeLimits, PreLearnerConfig
from ...errors import DataError, UnsupportedFormatError
from ...io.formats.registry import FileProbe
from ...io.parquet_guard import check_footer, decoded_bytes, open_parquet, parse_footer
from ...io.schema import load_schema
from ...io.sources import format_of, read_table
from ...io.stores import FileStat, file_stat, is_remote, open_random_access, take_listed
from ..commit import input_fingerprint

__all__ = [
    "PLAN_WORKERS_ENV",
    "FileScan",
    "RayScanner",
    "ScanSpec",
    "Scanner",
    "Scans",
    "ThreadScanner",
    "scan_file",
    "schema_id",
]

#: Threads a :class:`ThreadScanner` runs by default (env overrides; 1: one file after another).
PLAN_WORKERS_ENV = "OFFLINE_PRELEARNER_PLAN_WORKERS"
#: Bytes of a Parquet file's tail read in the first request (the footer, mostly; a larger
#: footer costs a second request).
TAIL_BYTES = 64 << 10


#: The names of JSON-lines inputs (read whole, with pyarrow's JSON reader; no Parquet footer).
JSON_EXT = (".json", ".jsonl", ".ndjson")
_SEP = "\x1f"  # between eps_id and agent_id in a key


@dataclass(frozen=True)
class InputFile:
    """An input file as the plan saw it; a resume reuses work only if size and mtime still match."""

    path: str
    size: int
    mtime_ns: int
    rows: int | None  # from the Parquet footer; None for JSON lines

    @classmethod
    def stat(cls, path: str) -> InputFile:
        """The file's size and modification time (no schema read).

        Args:
            path: The file's local path or store URI.

        Returns:
            The file as :meth:`checked` sees it with the default limits (a Parquet file's
            footer is still read, for its row count).
        """
        return cls.checked(path)[0]

    @classmethod
    def checked(
        cls, path: str, limits: DecodeLimits = DEFAULT_LIMITS
    ) -> tuple[InputFile, pa.Schema | None, int | None]:
        """The file and, for Parquet, its schema and the bytes its rows decode to (the row
        groups' uncompressed sizes) from the footer, which is checked against ``limits``
        (:mod:`~offline_prelearner.io.parquet_guard`: a DataError refuses a bomb).

        Args:
            path: The file's local path or store URI. ``.arrow`` files are counted from their
                IPC footer; JSON lines and HDF5 are not opened (rows None).
            limits: The decode bounds the Parquet footer is checked against.

        Returns:
            The file (rows None where no footer could be read: the reader names the file
            later), the Parquet schema (else None) and the decoded bytes of its row groups
            (else None).

        Raises:
            DataError: The footer claims more than ``limits`` allow.
            FileNotFoundError: No such file.
        """
        st = file_stat(path)
        schema = None
        rows = None
        decoded = None
        if path.endswith(".arrow"):  # Minari's arrow backend: one episode per file
            try:
                with _arrow_source(path) as src:
                    rows = pa.ipc.open_file(src).count_rows()
            except (pa.ArrowInvalid, OSError):
                rows = None
        elif not path.endswith((*JSON_EXT, ".hdf5", ".h5")):
            try:
                pf = open_parquet(path, limits, size=st.st_size)
                meta = pf.metadata
                rows, schema = meta.num_rows, pf.schema_arrow
                decoded = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
            except (pa.ArrowInvalid, OSError):
                rows = None  # the reader names the file when it fails on it
        return cls(path, st.st_size, st.st_mtime_ns, rows), schema, decoded

    def to_dict(self) -> dict[str, Any]:
        """The file as a JSON-able dict (a unit record's inputs)."""
        return {"path": self.path, "size": self.size, "mtime_ns": self.mtime_ns, "rows": self.rows}


def row_keys(table: pa.Table, key_columns: tuple[str, ...]) -> pa.Array:
    """One string per row: the episode id, joined with the agent id where one is set.

    Args:
        table: The rows; must hold every column of ``key_columns``.
        key_columns: The episode id column and, optionally, the agent id column
            (:attr:`Plan.key_columns`). A column of Arrow's null type is left out; a null cell
            is ``""``; a value that does not cast to a string is read as its bytes.

    Returns:
        A string array, one key per row (all ``""`` when no column has a type).
    """
    parts = []
    for name in key_columns:
        col = table.column(name)
        if pa.types.is_null(col.type):
            continue
        if col.type == pa.string():
            text = col  # already what the cast gives
        else:
            try:
                text = pc.cast(col, pa.string())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                text = pc.cast(pc.cast(col, pa.binary()), pa.string(), safe=False)
        parts.append(pc.fill_null(text, "") if text.null_count else text)
    if not parts:
        return pa.array([""] * table.num_rows, pa.string())
    if len(parts) == 1:
        return parts[0].combine_chunks() if isinstance(parts[0], pa.ChunkedArray) else parts[0]
    joined = pc.binary_join_element_wise(*parts, _SEP)
    return joined.combine_chunks() if isinstance(joined, pa.ChunkedArray) else joined


def _arrow_source(path: str) -> Any:
    """An Arrow IPC file to read: memory-mapped on the local disk, opened on a store."""
    return open_random_access(path)


def schema_id(schema: pa.Schema) -> str:
    """A schema's identity: the sha256 of its IPC serialisation (metadata included), 32 hex.

    Args:
        schema: An Arrow schema.

    Returns:
        32 hex digits; equal schemas give equal ids.
    """
    return hashlib.sha256(schema.serialize().to_pybytes()).hexdigest()[:32]


@dataclass(frozen=True)
class ScanSpec:
    """What a scan reads, from the job's config (picklable: it travels to Ray tasks).

    Attributes:
        limits: ``read.limits``: the Parquet footer's bounds.
        on_invalid: ``read.on_invalid``: ``"raise"`` makes a refused footer the file's error;
            otherwise the file is marked refused and its rows are unknown.
        eps: The episode id column (``read.schema``), None where it maps none or keys are not
            read (formats other than ``rows``).
        agent: The agent id column, or None.
        bounds: Also record each Parquet file's decoded-size bounds (what an index keeps).
    """

    limits: DecodeLimits
    on_invalid: str = "raise"
    eps: str | None = None
    agent: str | None = None
    bounds: bool = False

    @classmethod
    def of(cls, config: PreLearnerConfig, *, bounds: bool = False) -> ScanSpec:
        """The spec of a job's config.

        Args:
            config: The job's config (``read.format``, ``read.schema``, ``read.limits``,
                ``read.on_invalid``).
            bounds: Record the decoded-size bounds (for an index).

        Returns:
            The spec; keys are read only for ``read.format="rows"``.
        """
        eps = agent = None
        if config.read.format == "rows":
            schema = load_schema(config.read.schema)
            eps, agent = schema.column("eps_id"), schema.column("agent_id")
        return cls(config.read.limits, config.read.on_invalid, eps, agent, bounds)

    def key_columns(self, names: list[str] | tuple[str, ...]) -> tuple[str, ...]:
        """The key columns of a file with columns ``names``: the episode id column if it has
        it, with the agent id column where it has that too (the plan's rule).

        Args:
            names: The file's column names.

        Returns:
            ``()`` (no keys), ``(eps,)`` or ``(eps, agent)``.
        """
        if self.eps is None or self.eps not in names:
            return ()
        return (
            (self.eps, self.agent)
            if self.agent is not None and self.agent in names
            else (self.eps,)
        )


@dataclass(frozen=True)
class FileScan:
    """One input file as one open of it shows it.

    Attributes:
        file: Path, size, mtime and rows (None: unknown, as the plan has it).
        fingerprint: :func:`~offline_prelearner.jobs.commit.input_fingerprint` of the file.
        schema: The id of its Arrow schema in :attr:`Scans.schemas` (None: no Parquet footer
            could be read); set for a refused footer too (its columns still name the keys).
        decoded: Bytes its row groups decode to (the footer's uncompressed sizes), or None.
        refused: The footer is over ``read.limits`` and ``on_invalid`` is not ``"raise"``.
        key_columns: The columns its keys were read from (None: not read).
        keys: Its distinct episode keys, first-seen order (:func:`~.plan.row_keys`), or None.
        last: The last row of each key, int64, or None.
        bound: ``(largest row group, whole file)``: the decoded bytes the footer allows
            (:func:`~offline_prelearner.io.parquet_guard.decoded_bytes`), where asked and the
            footer is consistent; else None.
        error: What opening the file raised, raised by the plan in file order; else None.
        format: Its format as detection tells it from the footer read
            (:func:`~offline_prelearner.io.sources.format_of`, ``empty=None``); None: an empty
            partition, or a format that cannot be told.
    """

    file: InputFile
    fingerprint: str | None
    schema: str | None = None
    decoded: int | None = None
    refused: bool = False
    key_columns: tuple[str, ...] | None = None
    keys: pa.Array | None = field(default=None, compare=False)
    last: np.ndarray | None = field(default=None, compare=False)
    bound: tuple[int, int] | None = None
    error: BaseException | None = field(default=None, compare=False)
    format: str | None = None


@dataclass(frozen=True)
class Scans:
    """The scans of a list of files, in its order, with the schemas they name (by id), and,
    for scans run as Ray tasks, how many files each node scanned (by Ray node id)."""

    files: tuple[FileScan, ...]
    schemas: dict[str, pa.Schema]
    nodes: dict[str, int] = field(default_factory=dict)

    def raise_first_error(self) -> None:
        """Raises the first file's error, in file order (what a serial plan met first)."""
        for s in self.files:
            if s.error is not None:
                raise s.error

    def names(self, scan: FileScan) -> list[str]:
        """The columns of a scanned file.

        Args:
            scan: One of :attr:`files`.

        Returns:
            Its schema's names (``[]`` where no footer was read).
        """
        schema = self.schemas.get(scan.schema) if scan.schema is not None else None
        return list(schema.names) if schema is not None else []


def scan_file(
    path: str, spec: ScanSpec, listed: FileStat | None = None
) -> tuple[FileScan, pa.Schema | None]:
    """One file, opened once (see the module docstring); its failure is in the scan.

    Args:
        path: The file's local path or store URI.
        spec: What to read.
        listed: The file's size and mtime as the listing that named it gave them
            (:func:`~offline_prelearner.io.stores.take_listed`); None: asked of the file.

    Returns:
        The scan and the file's schema (None without a footer).
    """
    try:
        if path.endswith((*JSON_EXT, ".hdf5", ".h5", ".arrow")):
            return _scan_other(path, spec), None
        return _scan_parquet(path, spec, listed)
    except (DataError, OSError) as e:
        return FileScan(InputFile(path, 0, 0, None), None, error=e), None


def _scan_other(path: str, spec: ScanSpec) -> FileScan:
    """A file with no Parquet footer to read: as the plan read it before (keys left to it)."""
    try:
        got, _, decoded = InputFile.checked(path, spec.limits)
    except DataError as e:
        if spec.on_invalid == "raise":
            return FileScan(InputFile(path, 0, 0, None), None, error=e)
        st = file_stat(path)
        got = InputFile(path, st.st_size, st.st_mtime_ns, None)
        return FileScan(got, input_fingerprint(path), refused=True, format=_format(path))
    return FileScan(got, input_fingerprint(path), decoded=decoded, format=_format(path))


def _format(
    path: str, footer: pq.FileMetaData | None = None, schema: pa.Schema | None = None
) -> str | None:
    """The file's format as the mixed-format check tells it (None: cannot be told, or an
    empty partition), from the footer (and its Arrow schema) already read where there is one."""
    probe = FileProbe(path, footer, schema) if footer is not None else None
    try:
        return format_of(path, empty=None, probe=probe)
    except (UnsupportedFormatError, OSError):
        return None


def _read_tail(fh: Any, size: int) -> tuple[bytes, bytes] | None:
    """What one read of a Parquet file's tail gives: the bytes read (the whole file where it
    is at most :data:`TAIL_BYTES`) and its footer with the last 8 bytes; None where the tail
    is not Parquet's (as :func:`~offline_prelearner.jobs.commit.input_fingerprint` decides)."""
    if size < 12:
        return None
    start = max(0, size - TAIL_BYTES)
    fh.seek(start)
    tail = bytes(fh.read(size - start))
    n = int.from_bytes(tail[-8:-4], "little")
    if tail[-4:] != b"PAR1" or n > size - 12:
        return None
    if n + 8 > len(tail):
        fh.seek(size - 8 - n)
        tail = bytes(fh.read(n + 8 - len(tail))) + tail
    return tail, tail[len(tail) - 8 - n :]


def _scan_parquet(
    path: str, spec: ScanSpec, listed: FileStat | None
) -> tuple[FileScan, pa.Schema | None]:
    st = listed if listed is not None else file_stat(path)
    size, mtime = st.st_size, st.st_mtime_ns
    with open_random_access(path) as fh:
        got = _read_tail(fh, size)
        if got is None:  # not a Parquet tail: the general path names what it is
            return _scan_other(path, spec), None
        data, footer = got
        fingerprint = "footer:" + hashlib.sha256(b"parquet-footer\0" + footer).hexdigest()
        whole = len(data) == size  # a small file: its columns came with the footer
        try:
            pf = parse_footer(path, data if whole else footer, size)
            meta = pf.metadata
            schema = pf.schema_arrow
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError):
            scan = FileScan(InputFile(path, size, mtime, None), fingerprint, format=_format(path))
            return scan, None
        sid = schema_id(schema)
        fmt = _format(path, meta, schema)
        try:
            check_footer(path, pf, size, mtime, spec.limits)
        except DataError as e:
            if spec.on_invalid == "raise":
                return FileScan(InputFile(path, size, mtime, None), None, error=e), None
            unknown = InputFile(path, size, mtime, None)
            return FileScan(unknown, fingerprint, sid, refused=True, format=fmt), schema
        rows = meta.num_rows
        decoded = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        bound = _bound(path, meta, size) if spec.bounds else None
        key_columns: tuple[str, ...] | None = spec.key_columns(schema.names)
        keys = last = None
        if key_columns and rows:
            if not whole:
                pf = pq.ParquetFile(fh, metadata=meta, pre_buffer=is_remote(path))
            keys_got = _read_keys(pf, key_columns)
            if keys_got is None:
                key_columns = None  # unreadable: the unit that reads the file names it
            else:
                keys, last = keys_got
    return (
        FileScan(
            InputFile(path, size, mtime, rows),
            fingerprint,
            sid,
            decoded,
            False,
            key_columns,
            keys,
            last,
            bound,
            format=fmt,
        ),
        schema,
    )


def _bound(path: str, meta: pq.FileMetaData, size: int) -> tuple[int, int] | None:
    """The decoded bytes the footer allows: (largest row group, whole file); None where the
    footer contradicts itself (the plan then checks the file whatever the limits)."""
    groups = [int(meta.row_group(i).num_rows) for i in range(meta.num_row_groups)]
    if sum(groups) != meta.num_rows:
        return None
    for i, rows in enumerate(groups):
        rg = meta.row_group(i)
        for j in range(meta.num_columns):
            leaf = meta.schema.column(j)
            if leaf.max_repetition_level == 0 and int(rg.column(j).num_values) != rows:
                return None
    per = [sum(c.bytes for c in rg) for rg in decoded_bytes(meta)]
    return max(per, default=0), sum(per)


def _read_keys(pf: pq.ParquetFile, columns: tuple[str, ...]) -> tuple[pa.Array, np.ndarray] | None:
    """The file's distinct keys (first-seen order) and each one's last row, from the key
    columns alone; None where they cannot be read (the serial plan passed over such a file
    too)."""
    try:
        table = pf.read(columns=list(columns), use_threads=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError):
        return None
    return last_rows(row_keys(table, columns))


def last_rows(k: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """The distinct keys of one file (first-seen order) and the last row of each.

    Args:
        k: One key per row (:func:`~.plan.row_keys`).

    Returns:
        The distinct keys (a string array) and, int64, the last row of each.
    """
    enc = pc.dictionary_encode(k)
    codes = enc.indices.to_numpy(zero_copy_only=False)
    last = np.full(len(enc.dictionary), -1, dtype=np.int64)
    np.maximum.at(last, codes, np.arange(len(codes), dtype=np.int64))
    return enc.dictionary, last


def file_keys(
    path: str, columns: tuple[str, ...], spec: ScanSpec
) -> tuple[pa.Array, np.ndarray] | None:
    """One file's keys read as the serial plan read them (any format ``read_table`` reads):
    for a scan whose key columns are not the plan's (a JSON-lines file, a file with an agent id
    column that the first file lacks).

    Args:
        path: The file.
        columns: The plan's key columns.
        spec: Its ``limits`` bound the read.

    Returns:
        The distinct keys and last rows, or None where the file cannot be read.
    """
    try:
        table = read_table(path, columns=list(columns), limits=spec.limits)
    except DataError:
        return None
    return last_rows(row_keys(table, columns))


# ====================================================================== scanners
class Scanner(Protocol):
    """Scans files, many at once; the scans come back in the files' order."""

    def scan(self, files: list[str], spec: ScanSpec) -> Scans:
        """Scans ``files``.

        Args:
            files: The input's data files, in name order.
            spec: What each scan reads.

        Returns:
            One scan per file, in order, and the schemas they name.
        """
        ...


def _collect(results: Iterator[tuple[FileScan, pa.Schema | None]]) -> Scans:
    scans: list[FileScan] = []
    schemas: dict[str, pa.Schema] = {}
    for scan, schema in results:
        scans.append(scan)
        if schema is not None and scan.schema is not None:
            schemas.setdefault(scan.schema, schema)
    return Scans(tuple(scans), schemas)


def default_workers(files: list[str]) -> int:
    """Threads for a :class:`ThreadScanner`: ``$OFFLINE_PRELEARNER_PLAN_WORKERS``, else 32 for
    a store's files (each scan mostly waits for its requests) and one per CPU (at most 8) for
    the local disk's (a cached file's scan is mostly Python: more threads than cores only
    queue for the GIL; benchmarks/README.md, "Planning").

    Args:
        files: The files to scan (the first says whether they are on a store).

    Returns:
        At least 1.
    """
    env = os.environ.get(PLAN_WORKERS_ENV)
    if env:
        return max(1, int(env))
    if files and is_remote(files[0]):
        return 32
    return max(1, min(8, os.cpu_count() or 1))


@dataclass(frozen=True)
class ThreadScanner:
    """Scans in a pool of threads on this process.

    Attributes:
        workers: Threads (None: :func:`default_workers`); 1 scans one file after another.
    """

    workers: int | None = None

    def scan(
        self, files: list[str], spec: ScanSpec, listed: list[FileStat | None] | None = None
    ) -> Scans:
        """Scans ``files`` (see :class:`Scanner`).

        Args:
            files: The files, in name order.
            spec: What each scan reads.
            listed: Each file's size and mtime from its listing, where known (None: those this
                process's listings gave, :func:`~offline_prelearner.io.stores.take_listed`).

        Returns:
            One scan per file, in order.
        """
        workers = self.workers if self.workers is not None else default_workers(files)
        known = listed if listed is not None else [take_listed(f) for f in files]

        def one(i: int) -> tuple[FileScan, pa.Schema | None]:
            return scan_file(files[i], spec, known[i])

        if workers <= 1 or len(files) <= 1:
            return _collect(map(one, range(len(files))))
        with ThreadPoolExecutor(workers, thread_name_prefix="plan-scan") as pool:
            return _collect(pool.map(one, range(len(files)), chunksize=16))


#: Files per Ray task of a :class:`RayScanner` (env ``OFFLINE_PRELEARNER_PLAN_BATCH``).
RAY_BATCH_FILES = 512


@dataclass(frozen=True)
class RayScanner:
    """Scans as Ray tasks on the cluster this process is connected to: a task scans a batch
    of consecutive files with a few threads (:class:`ThreadScanner`), at most ``in_flight``
    tasks run at once, spread over the nodes (``SPREAD``); Ray carries the scans back.

    Attributes:
        batch: Files per task (None: ``$OFFLINE_PRELEARNER_PLAN_BATCH``, else
            :data:`RAY_BATCH_FILES`, fewer where the cluster's CPUs would otherwise idle).
        in_flight: Tasks at once (None: the cluster's CPUs).
        threads: Threads in each task (None: :func:`default_workers` there).
    """

    batch: int | None = None
    in_flight: int | None = None
    threads: int | None = None

    def scan(self, files: list[str], spec: ScanSpec) -> Scans:
        """Scans ``files`` (see :class:`Scanner`) on Ray.

        Args:
            files: The files, in name order.
            spec: What each scan reads.

        Returns:
            One scan per file, in order.
        """
        from ..session.ray_session import import_ray

        ray = import_ray()
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        window = self.in_flight or cpus
        batch = self.batch or int(os.environ.get("OFFLINE_PRELEARNER_PLAN_BATCH", 0) or 0)
        if not batch:
            batch = max(1, min(RAY_BATCH_FILES, -(-len(files) // (2 * cpus))))
        task = ray.remote(_scan_task()).options(
            name="_scan_files", num_cpus=1, max_retries=3, scheduling_strategy="SPREAD"
        )
        spec_ref = ray.put(spec)
        known = [take_listed(f) for f in files]
        batches = [
            (files[i : i + batch], known[i : i + batch]) for i in range(0, len(files), batch)
        ]
        results: list[Scans | None] = [None] * len(batches)
        running: dict[Any, int] = {}
        nxt = 0
        while nxt < len(batches) or running:
            while nxt < len(batches) and len(running) < window:
                running[task.remote(*batches[nxt], spec_ref, self.threads)] = nxt
                nxt += 1
            ready, _ = ray.wait(list(running), num_returns=1)
            for ref in ready:
                results[running.pop(ref)] = ray.get(ref)
        scans: list[FileScan] = []
        schemas: dict[str, pa.Schema] = {}
        nodes: dict[str, int] = {}
        for got in results:
            assert got is not None
            scans.extend(got.files)
            for k, v in got.schemas.items():
                schemas.setdefault(k, v)
            for node, n in got.nodes.items():
                nodes[node] = nodes.get(node, 0) + n
        return Scans(tuple(scans), schemas, nodes)


def _scan_task() -> Callable[[list[str], list[FileStat | None], ScanSpec, int | None], Scans]:
    """The Ray task of :class:`RayScanner`, made here so that Ray ships it by value (a worker
    imports this package inside the task, as the batch job's unit task does)."""

    def _scan_files(
        files: list[str], listed: list[FileStat | None], spec: ScanSpec, threads: int | None
    ) -> Scans:
        import ray

        from offline_prelearner.jobs.batch.scan import Scans, ThreadScanner

        got = ThreadScanner(threads).scan(files, spec, listed)
        node = ray.get_runtime_context().get_node_id()
        return Scans(got.files, got.schemas, {node: len(files)})

    return _scan_files
