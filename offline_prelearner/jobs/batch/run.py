"""One unit of the batch job run: read its rows, run a fresh prelearner, write its files.

:func:`run_unit` runs a fresh prelearner (seeded from the job's seed and the unit's index) over
a unit's rows in chunks of ``ray.batch_size`` rows (:meth:`~.plan.Plan.batch_rows`) and writes
``samples/part-<unit>-<k>.parquet`` through temporary names (its outputs held until they fill a
row group, :data:`ROW_GROUP_ROWS`), then the unit's record (rows, checksums, ledger); the same
function runs in the in-process engine and in a Ray task, so the two write the same bytes. Under
``on_invalid="quarantine"`` the rows it refused go to ``quarantine/quarantine-<unit>-<k>.parquet``
the same way. A record carries the job's id and the unit's key (:func:`~.plan.unit_key`: its
parts and the identity of every file they read), which is what a resume compares before reusing
it, and the node that ran the unit (:func:`unit_node`; :func:`units_by_node` sums them up for
``stats.json``).
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import functools
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...config import DEFAULT_LIMITS, DecodeLimits, PreLearnerConfig
from ...errors import DataError
from ...io.fast_tensor import Layout, parquet_dictionary_columns
from ...io.formats.rows.writer import columns_to_table
from ...io.quarantine import quarantine_table
from ...io.sources import read_table
from ...io.stores import Location, locate
from ...prelearner import OfflinePreLearner
from ...replay.replay_buffer import INDICES
from ..commit import QUARANTINE, STAGED_STAT, staged_stat, tmp_tag, write_json_atomic
from ..file_batches import concat_tables, parquet_chunks
from ..ownership import CommitError
from ..store_commit import sha256_sink, store_failure, write_json
from .file_tally import FileTally
from .plan import JSON_EXT, Part, Plan, Unit, row_keys, unit_key


# ====================================================================== reading
def read_part(
    plan: Plan, part: Part, batch_size: int | None, limits: DecodeLimits = DEFAULT_LIMITS
) -> Iterator[tuple[pa.Table, np.ndarray]]:
    """Chunks of one part, each with the row numbers (in its file) of its rows."""
    path = plan.files[part.file].path
    step = batch_size or 1 << 62
    if plan.whole_files:
        table = read_table(path, limits=limits)
        yield table, np.arange(table.num_rows, dtype=np.int64)
        return
    if path.endswith(JSON_EXT):
        table = read_table(path, limits=limits)
        chunks: Iterator[pa.Table] = (
            table.slice(s, step) for s in range(0, max(table.num_rows, 1), step)
        )
    else:
        chunks = parquet_chunks(path, step, limits=limits)
    start = 0
    drop_end = _drop_end(plan, part)
    for chunk in chunks:
        n = chunk.num_rows
        rows = np.arange(start, start + n, dtype=np.int64)
        start += n
        if part.stop is not None and rows.size and rows[0] >= part.stop:
            break
        if part.stop is not None and start > part.stop:
            keep_n = part.stop - int(rows[0])
            chunk, rows = chunk.slice(0, keep_n), rows[:keep_n]
        if part.keep is not None or (part.drop and (drop_end is None or rows[0] < drop_end)):
            keys = row_keys(chunk, plan.key_columns)
            if part.keep is not None:
                mask = pc.is_in(keys, value_set=pa.array(part.keep, pa.string()))
            else:
                mask = pc.invert(pc.is_in(keys, value_set=pa.array(part.drop, pa.string())))
            m = mask.to_numpy(zero_copy_only=False)
            if not m.all():
                chunk, rows = chunk.filter(mask), rows[m]
        if chunk.num_rows:
            yield chunk, rows


def _drop_end(plan: Plan, part: Part) -> int | None:
    """The row of ``part``'s file after the last row of the episodes it drops: the end of the
    look-aheads that read them (each dropped key is kept by one, :func:`~.plan.plan_units`), so
    only the chunks before it are filtered. None (filter every chunk) without a look-ahead."""
    if not part.drop:
        return None
    ends = [
        p.stop
        for u in plan.units
        for p in u.parts
        if p.file == part.file and p.keep is not None and p.stop is not None
    ]
    return max(ends) if ends else None


def read_unit(
    plan: Plan,
    unit: Unit,
    batch_size: int | None,
    unreadable: Callable[[int, DataError], None] | None = None,
    limits: DecodeLimits = DEFAULT_LIMITS,
) -> Iterator[tuple[pa.Table, np.ndarray, np.ndarray]]:
    """A unit's rows in ``batch_size`` chunks, each with the file index and file row of each row.

    With episode keys, a chunk may span files (so the number of chunks, and of replay draws,
    depends on the unit's rows, not on how they are spread over files); without, chunks stay
    within a file (episodes are split at done flags per file). A file the reader cannot take
    (``reason="unreadable_file"``: empty, truncated, not Parquet, no rows) raises, or, given
    ``unreadable(file_index, error)`` (``on_invalid`` skip / quarantine), is reported there and
    passed over.
    """
    step = batch_size or 1 << 62
    held: list[tuple[pa.Table, np.ndarray, np.ndarray]] = []
    n_held = 0

    def flush() -> tuple[pa.Table, np.ndarray, np.ndarray]:
        nonlocal held, n_held
        tables, files, rows = zip(*held, strict=True)
        held, n_held = [], 0
        table = tables[0] if len(tables) == 1 else concat_tables(list(tables))
        return table, np.concatenate(files), np.concatenate(rows)

    for part in unit.parts:
        parts = read_part(plan, part, step, limits)
        while True:
            try:
                chunk, rows = next(parts)
            except StopIteration:
                break
            except DataError as e:
                if unreadable is None or e.reason != "unreadable_file":
                    raise
                unreadable(part.file, e)
                break
            files = np.full(len(rows), part.file, dtype=np.int64)
            if plan.whole_files:  # whole episodes: never cut; Minari's small episode files
                if "episode_id" not in chunk.column_names:  # are batched up to ``step`` rows
                    yield chunk, files, rows
                    continue
                held.append((chunk, files, rows))
                n_held += chunk.num_rows
                if n_held >= step:
                    yield flush()
                continue
            while chunk.num_rows:
                take = min(step - n_held, chunk.num_rows)
                held.append((chunk.slice(0, take), files[:take], rows[:take]))
                n_held += take
                chunk, files, rows = chunk.slice(take), files[take:], rows[take:]
                if n_held == step:
                    yield flush()
        if held and not plan.key_columns and not plan.whole_files:
            yield flush()
    if held:
        yield flush()


# ====================================================================== running
def unit_seed(seed: int, unit: int) -> int:
    """The seed of one unit's prelearner: independent streams per unit, the same every run."""
    return int(np.random.SeedSequence([seed, unit]).generate_state(1)[0])


@dataclass
class UnitJob:
    """Everything a worker needs to run any unit of a job (pickled once into each task)."""

    plan: Plan
    config: PreLearnerConfig
    prelearner: type[OfflinePreLearner]
    seed: int
    samples_dir: str
    units_dir: str
    extra: dict[str, Any] = field(default_factory=dict)
    layout: Layout = "auto"  # of array columns in the sample files (io/fast_tensor.py)
    #: The job's id (``job.json``): a unit writes nothing into a staging folder of another job.
    job_id: str = ""
    #: Each input file's content fingerprint, in plan order (the units' keys: :func:`unit_key`).
    fingerprints: tuple[str, ...] = ()
    #: On an object store (``samples_dir`` a URI), the job's id in its files' names: units write
    #: their files under their final names (``part-<attempt>-<unit>-<k>.parquet``), no rename
    #: (:mod:`~..store_commit`).
    attempt: str = ""


def run_unit(
    job: UnitJob, index: int, on_chunk: Callable[[int, int], None] | None = None
) -> dict[str, Any]:
    """Runs one unit from scratch; writes its sample files and its record; returns the record.

    ``on_chunk(rows, samples)`` is called after each input chunk (progress in one process).
    """
    config = dataclasses.replace(job.config, seed=unit_seed(job.seed, index))
    pre = job.prelearner(config)
    if job.attempt:
        return _run_unit_on_store(job, index, config, pre, on_chunk)
    root = Path(job.units_dir).parent  # the staging folder
    writer = _UnitWriter(Path(job.samples_dir), index, job.layout)
    refused = None
    if config.read.on_invalid == "quarantine":
        refused = _UnitWriter(root / QUARANTINE, index, prefix=QUARANTINE)
    record = _run(
        job, index, config, pre, writer, refused, on_chunk, lambda: _check_owner(job, root)
    )
    write_json_atomic(Path(job.units_dir) / f"unit-{index:05d}.json", record)
    return record


def _run_unit_on_store(
    job: UnitJob,
    index: int,
    config: PreLearnerConfig,
    pre: OfflinePreLearner,
    on_chunk: Callable[[int, int], None] | None,
) -> dict[str, Any]:
    """:func:`run_unit` on an object store: files under their final names, then the record
    (a store's failure is an OSError: exit 3, nothing committed)."""
    samples = locate(job.samples_dir)
    units = locate(job.units_dir)
    with store_failure(samples.parent.uri):
        writer = _StoreUnitWriter(samples, index, job.attempt, job.layout)
        refused = None
        if config.read.on_invalid == "quarantine":
            refused = _StoreUnitWriter(
                samples.parent.join(QUARANTINE), index, job.attempt, prefix=QUARANTINE
            )
        record = _run(
            job, index, config, pre, writer, refused, on_chunk, lambda: _check_store_owner(job)
        )
        write_json(units.join(f"unit-{index:05d}.json"), record)
    return record


def _run(
    job: UnitJob,
    index: int,
    config: PreLearnerConfig,
    pre: OfflinePreLearner,
    writer: _UnitWriter | _StoreUnitWriter,
    refused: _UnitWriter | _StoreUnitWriter | None,
    on_chunk: Callable[[int, int], None] | None,
    check_owner: Callable[[], None],
) -> dict[str, Any]:
    """Reads a unit's rows through ``pre``, writes what it yields (and what it refused, under
    quarantine); returns the unit's record."""
    cpu = time.process_time()
    unit = job.plan.units[index]
    paths = [f.path for f in job.plan.files]
    tally = FileTally(paths)
    skip = config.read.on_invalid != "raise"
    try:
        chunks = read_unit(
            job.plan,
            unit,
            job.plan.batch_rows(config),
            tally.unreadable if skip else None,
            config.read.limits,
        )
        for chunk, file_idx, rows in chunks:
            one_file = file_idx[0] == file_idx[-1]
            pre.source = paths[file_idx[0]] if one_file else None
            written = writer.total
            duplicate = pre.ledger.rows_duplicate
            keys = None
            if job.plan.key_columns and not one_file:
                keys = functools.partial(_chunk_keys, chunk, job.plan.key_columns[:1])
            try:
                for out in pre(chunk):
                    writer.write(out)
            except DataError as e:
                raise _located(e, paths, file_idx, rows, keys() if keys else None) from None
            tally.add_chunk(
                file_idx, pre.last_rejections, pre.ledger.rows_duplicate - duplicate, keys
            )
            if refused is not None and pre.last_rejections:
                # Each refusal's message names its file and row, as the error would under raise.
                key_rows = keys() if keys else None
                located = [
                    dataclasses.replace(r, error=_located(r.error, paths, file_idx, rows, key_rows))
                    for r in pre.last_rejections
                ]
                table = quarantine_table(located, config.validate.observation_space)
                if table is not None:
                    refused.write(table)
            if on_chunk is not None:
                on_chunk(chunk.num_rows, writer.total - written)
        check_owner()
        files = writer.close()
        quarantined = refused.close() if refused is not None else []
    except BaseException:
        writer.abort()
        if refused is not None:
            refused.abort()
        raise
    stats = pre.stats()
    record = {
        "unit": index,
        "job_id": job.job_id,
        "plan": unit_key(job.plan, unit, job.fingerprints),
        "inputs": job.plan.unit_inputs(unit),
        "files": files,
        "samples": sum(f["rows"] for f in files),
        QUARANTINE: [{**f, "name": f"{QUARANTINE}/{f['name']}"} for f in quarantined],
        "stats": stats,
        "per_file": tally.to_record(),
        "node": unit_node(),
        # This process's CPU time on the unit (read, prelearner, write): one worker's own rate.
        "cpu_seconds": round(time.process_time() - cpu, 6),
    }
    return record


def unit_node() -> dict[str, str]:
    """Where this process runs, as a unit's record names it: the host's name, and in a Ray
    worker (or a driver with Ray started) the Ray node's id and IP address.

    Returns:
        ``{"host": ...}``, plus ``"ray_node_id"`` and ``"ip"`` under Ray.
    """
    node = {"host": socket.gethostname()}
    ray = sys.modules.get("ray")  # imported by the worker that runs the unit; never here
    if ray is not None and ray.is_initialized():
        node["ray_node_id"] = ray.get_runtime_context().get_node_id()
        node["ip"] = ray.util.get_node_ip_address()
    return node


def units_by_node(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Which node ran which units (``stats.json["nodes"]``): one entry per node named by the
    records (a record written before records named their node counts under a node of None).

    Args:
        records: Unit records (:func:`run_unit`), each counted once.

    Returns:
        ``[{"ray_node_id", "ip", "host", "units": [unit indices]}]``, in order of first unit,
        with ``"cpu_seconds"`` (the sum of the records' own, :func:`run_unit`) where the node's
        records carry it.
    """
    nodes: dict[tuple[Any, ...], dict[str, Any]] = {}
    for rec in sorted(records, key=lambda r: int(r["unit"])):
        node = rec.get("node")
        if not isinstance(node, dict):
            node = {}
        key = tuple(node.get(k) for k in _NODE_KEYS)
        entry = nodes.setdefault(key, {**dict(zip(_NODE_KEYS, key, strict=True)), "units": []})
        entry["units"].append(int(rec["unit"]))
        if isinstance(rec.get("cpu_seconds"), (int, float)):
            entry["cpu_seconds"] = round(entry.get("cpu_seconds", 0.0) + rec["cpu_seconds"], 6)
    return list(nodes.values())


_NODE_KEYS = ("ray_node_id", "ip", "host")


def _check_owner(job: UnitJob, root: Path) -> None:
    """Refuses to put a unit's files in place once the staging folder belongs to another job
    (a worker that outlived its job, a second job that did not take the lock)."""
    if not job.job_id:
        return
    try:
        staged = json.loads((root / "job.json").read_text()).get("job_id")
    except (OSError, ValueError, AttributeError):
        staged = None
    if staged != job.job_id:
        raise CommitError(
            f"the staging folder {str(root)!r} no longer belongs to this job ({job.job_id}); "
            "its unit wrote nothing"
        )


def _check_store_owner(job: UnitJob) -> None:
    """On a store: the job's staging is still there (not committed, not discarded)."""
    at = locate(job.units_dir).parent.join("job.json")
    try:
        staged = json.loads(at.read_bytes()).get("job_id")
    except (OSError, ValueError, AttributeError):
        staged = None
    if staged != job.job_id:
        raise CommitError(
            f"the staging {at.parent.uri!r} no longer belongs to this job ({job.job_id}); "
            "its unit wrote nothing"
        )


def _chunk_keys(chunk: pa.Table, key_columns: tuple[str, ...]) -> np.ndarray:
    """Each row's episode id as text (to find the file of an episode in a chunk)."""
    return np.asarray(row_keys(chunk, key_columns).to_numpy(False))


def _located(
    e: DataError,
    paths: list[str],
    file_idx: np.ndarray,
    rows: np.ndarray,
    key_rows: np.ndarray | None = None,
) -> DataError:
    """The error with a chunk's row index turned into the file and the row in that file."""
    where = e.where
    row, file = where.row, where.file
    if row is not None and 0 <= row < len(rows):
        row, file = int(rows[row]), paths[int(file_idx[row])]
    elif file is None and file_idx[0] == file_idx[-1]:
        file = paths[int(file_idx[0])]
    elif file is None and where.episode_id is not None and key_rows is not None:
        # An episode-level error in a chunk that spans files: the file of the episode's rows.
        hit = np.flatnonzero(key_rows == str(where.episode_id))
        if hit.size:
            file = paths[int(file_idx[hit[0]])]
    message = e.message
    if file is not None and file.endswith(JSON_EXT) and row is not None:
        # JSON lines (one record per line): name the line, as ``convert`` does.
        message = message.replace(f"(record {where.row} of the batch", f"(line {row + 1}")
        row += 1  # Where.row of a JSON-lines record is its line, as in ``convert``
    where = dataclasses.replace(where, file=file, row=row)
    return type(e)(message, where, reason=e.reason)


#: A unit's sample files hold row groups of up to this many rows: the prelearner's outputs (one
#: per input chunk: ``train_batch_size`` samples, or a chunk's transitions under ``sample_all``)
#: are held and written together, so a reader finds row groups of useful size (not one of 256
#: rows per 4096 input rows) and the writer pays its per-row-group cost (statistics, pages, one
#: call per column) once per group rather than once per chunk.
ROW_GROUP_ROWS = 1 << 16
#: ... or of this many bytes held in memory, whichever comes first (pixel rows).
ROW_GROUP_BYTES = 64 << 20


class _FileSplitter(abc.ABC):
    """What both unit writers share: batches in, one Parquet file per run of one schema (a new
    file whenever the schema changes), batches held until they fill a row group
    (:data:`ROW_GROUP_ROWS` / :data:`ROW_GROUP_BYTES`), rows counted; where a file goes is the
    subclass's."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.writer: pq.ParquetWriter | None = None
        self.schema: pa.Schema | None = None
        self.rows = 0  # rows in the file being written (held ones included)
        self.total = 0  # rows written by this unit so far (held ones included)
        self.held: list[pa.Table] = []  # the next row group's batches
        self.held_rows = 0
        self.held_bytes = 0

    def write(self, columns: Any) -> None:
        """Appends a batch (an Arrow table or columns), starting a new file on a new schema."""
        table = (
            columns
            if isinstance(columns, pa.Table)
            else columns_to_table(columns, layout=self.layout)
        )
        if not table.num_rows:
            return
        if self.writer is None or not table.schema.equals(self.schema, check_metadata=True):
            self._finish()
            self.writer = self._open(table.schema)
            self.schema = table.schema
        self.held.append(table)
        self.held_rows += table.num_rows
        self.held_bytes += table.nbytes
        self.rows += table.num_rows
        self.total += table.num_rows
        if self.held_rows >= ROW_GROUP_ROWS or self.held_bytes >= ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        """Writes the held batches as one row group."""
        if self.held and self.writer is not None:
            held = self.held
            self.writer.write_table(held[0] if len(held) == 1 else pa.concat_tables(held))
        self.held, self.held_rows, self.held_bytes = [], 0, 0

    @abc.abstractmethod
    def _open(self, schema: pa.Schema) -> pq.ParquetWriter:
        """A writer for the next file (each writer says where it goes)."""

    @abc.abstractmethod
    def _finish(self) -> None:
        """Ends the file being written, if any, its held batches written first (each writer
        says what ending takes)."""


def _parquet_writer(where: Any, schema: pa.Schema) -> pq.ParquetWriter:
    """A writer with the package's dictionary choice (:func:`parquet_dictionary_columns`), less
    the samples' ``indices``: a distinct buffer handle per row, so pyarrow's dictionary page is
    always thrown away (on CartPole samples it cost ~19% of the write's CPU and 5% more bytes)."""
    dictionary = parquet_dictionary_columns(schema)
    if INDICES in schema.names and dictionary is not False:
        names = schema.names if dictionary is True else dictionary
        dictionary = [n for n in names if n != INDICES]
    return pq.ParquetWriter(where, schema, use_dictionary=dictionary)


class _UnitWriter(_FileSplitter):
    """A unit's output: ``<prefix>-<unit>-<k>.parquet`` (``part``: samples; ``quarantine``: the
    rows it refused), a new file whenever the schema changes, written under a temporary name and
    renamed when the unit ends. Each file is hashed as it is written (never read back), flushed
    to disk before its rename, and its record carries its ``stat`` after the rename (size,
    inode, mtime): the job commit re-hashes only a file whose stat is no longer that."""

    def __init__(
        self, folder: Path, unit: int, layout: Layout = "auto", prefix: str = "part"
    ) -> None:
        super().__init__(layout)
        self.folder = folder
        self.unit = unit
        self.prefix = prefix
        self.sink: Any = None
        self.buffered: Any = None
        self.done: list[tuple[Path, Path, int, str]] = []  # (tmp, final, rows, sha256)

    def _tmp(self, k: int) -> tuple[Path, Path]:
        name = f"{self.prefix}-{self.unit:05d}-{k:03d}.parquet"
        return self.folder / f".{name}.tmp-{tmp_tag()}", self.folder / name

    def _open(self, schema: pa.Schema) -> pq.ParquetWriter:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp, _ = self._tmp(len(self.done))
        self.sink = sha256_sink(open(tmp, "wb"))  # noqa: SIM115 -- closed by _finish / abort
        # Arrow buffers the writer's many small writes: the hashing sink sees 1 MiB ones.
        self.buffered = pa.BufferedOutputStream(pa.PythonFile(self.sink, mode="w"), 1 << 20)
        return _parquet_writer(self.buffered, schema)

    def _finish(self) -> None:
        if self.writer is None:
            return
        self._flush()
        self.writer.close()
        self.buffered.flush()
        fh = self.sink.stream
        fh.flush()
        os.fsync(fh.fileno())
        self.buffered.close()
        self.sink.close()
        tmp, final = self._tmp(len(self.done))
        self.done.append((tmp, final, self.rows, self.sink.hash.hexdigest()))
        self.writer, self.sink, self.buffered, self.rows = None, None, None, 0

    def close(self) -> list[dict[str, Any]]:
        self._finish()
        files = []
        for tmp, final, rows, sha in self.done:
            os.replace(tmp, final)
            st = final.stat()
            files.append(
                {
                    "name": final.name,
                    "rows": rows,
                    "bytes": st.st_size,
                    "sha256": sha,
                    STAGED_STAT: staged_stat(st),
                }
            )
        return files

    def abort(self) -> None:
        self.held = []
        if self.writer is not None:
            with contextlib.suppress(Exception):  # the error that stopped the unit matters
                self.writer.close()
            self.writer = None
        if self.sink is not None:
            with contextlib.suppress(Exception):
                self.buffered.close()
            with contextlib.suppress(Exception):
                self.sink.close()
            self.sink = self.buffered = None
        for p in self.folder.glob(f".{self.prefix}-{self.unit:05d}-*.tmp-{tmp_tag()}"):
            p.unlink(missing_ok=True)


class _StoreUnitWriter(_FileSplitter):
    """A unit's output on an object store: ``<prefix>-<attempt>-<unit>-<k>.parquet`` written
    straight under its final name (an object appears whole when its upload completes; a worker
    killed mid-upload leaves none), hashed as it is written."""

    def __init__(
        self,
        folder: Location,
        unit: int,
        attempt: str,
        layout: Layout = "auto",
        prefix: str = "part",
    ) -> None:
        super().__init__(layout)
        self.folder = folder
        self.unit = unit
        self.attempt = attempt
        self.prefix = prefix
        self.sink: Any = None
        self.files: list[dict[str, Any]] = []
        self.opened: list[Location] = []

    def _name(self, k: int) -> str:
        return f"{self.prefix}-{self.attempt}-{self.unit:05d}-{k:03d}.parquet"

    def _open(self, schema: pa.Schema) -> pq.ParquetWriter:
        at = self.folder.join(self._name(len(self.files)))
        self.opened.append(at)
        self.sink = sha256_sink(at.open_output_stream())
        return _parquet_writer(self.sink, schema)

    def _finish(self) -> None:
        if self.writer is None:
            return
        self._flush()
        self.writer.close()
        self.sink.close()  # the upload completes: the object is there, whole
        self.files.append(
            {
                "name": self._name(len(self.files)),
                "rows": self.rows,
                "bytes": self.sink.bytes,
                "sha256": self.sink.hash.hexdigest(),
            }
        )
        self.writer, self.sink, self.rows = None, None, 0

    def close(self) -> list[dict[str, Any]]:
        self._finish()
        return self.files

    def abort(self) -> None:
        self.held = []
        with contextlib.suppress(Exception):  # the error that stopped the unit matters
            if self.writer is not None:
                self.writer.close()
            if self.sink is not None:
                self.sink.close()
        self.writer = self.sink = None
        for at in self.opened:  # never listed by a manifest; removed now rather than later
            with contextlib.suppress(Exception):
                at.delete()
