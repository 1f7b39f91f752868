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

import contextlib
import dataclasses
import functools
import socket
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...config import DEFAULT_LIMITS, DecodeLimits, PreLearnerConfig
from ...errors import DataError, Where
from ...io.fast_tensor import Layout, parquet_dictionary_columns
from ...io.formats.registry import input_format
from ...io.formats.rows.writer import columns_to_table
from ...io.quarantine import quarantine_table
from ...io.sources import read_table
from ...prelearner import OfflinePreLearner
from ...replay.replay_buffer import INDICES
from ..commit import QUARANTINE
from ..file_batches import concat_tables, parquet_chunks
from ..records import FileRecord, UnitRecord
from ..staged_file import StagedFile
from ..staging import UnitOutput
from .file_tally import FileTally
from .plan import Part, Plan, Unit, unit_key
from .scan import JSON_EXT, row_keys


# ====================================================================== reading
def read_part(
    plan: Plan, part: Part, batch_size: int | None, limits: DecodeLimits = DEFAULT_LIMITS
) -> Iterator[tuple[pa.Table, np.ndarray]]:
    """Chunks of one part, each with the row numbers (in its file) of its rows.

    Args:
        plan: The job's plan (the part's file, key columns, and the look-aheads that bound
            which chunks a ``drop`` filters).
        part: The rows to read: its file, cut at ``stop``, filtered to ``keep`` or without
            ``drop`` (by :func:`~.plan.row_keys`).
        batch_size: Rows per chunk read; None reads the file in one chunk. Filtering may leave
            a chunk smaller; an empty one is not yielded. A whole-file plan (Minari, D4RL)
            reads the file as one chunk regardless; a piece of one (LeRobot: a part with
            ``keep``) reads those episodes of the file as one chunk.
        limits: The decode bounds for the file.

    Yields:
        ``(chunk, rows)``: the chunk's table and each of its rows' number in the file (int64).

    Raises:
        DataError: The file cannot be read (``reason="unreadable_file"``) or is over ``limits``.
    """
    path = plan.files[part.file].path
    step = batch_size or 1 << 62
    if plan.whole_files:
        spec = input_format(plan.piece_format) if plan.piece_format else None
        if part.keep is not None and spec is not None and spec.read_episodes is not None:
            yield spec.read_episodes(path, limits, part.keep)  # a piece: those episodes
            return
        table = read_table(path, limits=limits)
        yield table, np.arange(table.num_rows, dtype=np.int64)
        return
    if path.endswith(JSON_EXT):
        table = read_table(path, limits=limits)
        chunks: Iterator[pa.Table] = (
            table.slice(s, step) for s in range(0, max(table.num_rows, 1), step)
        )
    else:
        chunks = _read_so_far(parquet_chunks(path, step, limits=limits))
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


def _read_so_far(chunks: Iterator[pa.Table]) -> Iterator[pa.Table]:
    """``chunks``; a file that turns unreadable after its first chunks (a corrupt later row
    group) is an error naming the row it failed at: the rows before it were passed on and are
    counted read (the file's ``rows_read``), the rest of the file is not read."""
    n = 0
    try:
        for chunk in chunks:
            yield chunk
            n += chunk.num_rows
    except DataError as e:
        if e.reason != "unreadable_file" or not n:
            raise
        raise DataError(
            f"{e.message} (its first {n} rows were read)",
            e.where.merged(Where(row=n)),
            reason=e.reason,
        ) from None


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

    Args:
        plan: The job's plan.
        unit: The unit to read, part after part.
        batch_size: Rows per chunk; None: no limit (a chunk per file without episode keys,
            else the unit in one chunk). Whole episodes (Minari with ``episode_id``) are never
            cut, so their chunks may hold more.
        unreadable: Called with the file's index and the error for a file the reader cannot
            take, which is then passed over; None re-raises it.
        limits: The decode bounds for each file.

    Yields:
        ``(chunk, files, rows)``: the chunk's table, and per row its file's index into
        ``plan.files`` and its row number in that file (int64 arrays).

    Raises:
        DataError: A file over ``limits``, or an unreadable one without ``unreadable``.
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
    """The seed of one unit's prelearner: independent streams per unit, the same every run.

    Args:
        seed: The job's seed (non-negative).
        unit: The unit's index.

    Returns:
        A 32-bit seed from ``numpy``'s ``SeedSequence([seed, unit])``.
    """
    return int(np.random.SeedSequence([seed, unit]).generate_state(1)[0])


@dataclass
class UnitJob:
    """Everything a worker needs to run any unit of a job (pickled once into each task)."""

    plan: Plan
    config: PreLearnerConfig
    prelearner: type[OfflinePreLearner]
    seed: int
    #: Where the units write their files and records (:meth:`~..staging.Staging.unit_output`).
    output: UnitOutput
    extra: dict[str, Any] = field(default_factory=dict)
    layout: Layout = "auto"  # of array columns in the sample files (io/fast_tensor.py)
    #: Each input file's content fingerprint, in plan order (the units' keys: :func:`unit_key`).
    fingerprints: tuple[str, ...] = ()

    @property
    def job_id(self) -> str:
        """The job's id (``job.json``): a unit writes nothing into a staging of another job."""
        return self.output.job_id


def run_unit(
    job: UnitJob, index: int, on_chunk: Callable[[int, int], None] | None = None
) -> UnitRecord:
    """Runs one unit from scratch; writes its sample files and its record; returns the record.

    Args:
        job: What every unit of the job shares (its staging's :class:`~..staging.UnitOutput`).
        index: The unit's index in the plan.
        on_chunk: ``on_chunk(rows, samples)`` after each input chunk (progress in one process).

    Returns:
        The unit's record, as written.
    """
    config = dataclasses.replace(job.config, seed=unit_seed(job.seed, index))
    pre = job.prelearner(config)
    output = job.output
    with output.failures():
        writer = _UnitWriter(output, "part", index, job.layout)
        refused = None
        if config.read.on_invalid == "quarantine":
            refused = _UnitWriter(output, "quarantine", index)
        record = _run(job, index, config, pre, writer, refused, on_chunk, output.check_owner)
        output.write_record(record)
    return record


def _run(
    job: UnitJob,
    index: int,
    config: PreLearnerConfig,
    pre: OfflinePreLearner,
    writer: _UnitWriter,
    refused: _UnitWriter | None,
    on_chunk: Callable[[int, int], None] | None,
    check_owner: Callable[[], None],
) -> UnitRecord:
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
    return UnitRecord(
        unit=index,
        job_id=job.job_id,
        plan=unit_key(job.plan, unit, job.fingerprints),
        inputs=tuple(job.plan.unit_inputs(unit)),
        files=tuple(files),
        samples=sum(f.rows for f in files),
        quarantine=tuple(
            dataclasses.replace(f, name=f"{QUARANTINE}/{f.name}") for f in quarantined
        ),
        stats=pre.stats(),
        per_file=tally.to_record(),
        node=unit_node(),
        # This process's CPU time on the unit (read, prelearner, write): one worker's own rate.
        cpu_seconds=round(time.process_time() - cpu, 6),
    )


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


def units_by_node(records: Iterable[UnitRecord]) -> list[dict[str, Any]]:
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
    for rec in sorted(records, key=lambda r: r.unit):
        node = rec.node or {}
        key = tuple(node.get(k) for k in _NODE_KEYS)
        entry = nodes.setdefault(key, {**dict(zip(_NODE_KEYS, key, strict=True)), "units": []})
        entry["units"].append(rec.unit)
        if rec.cpu_seconds is not None:
            entry["cpu_seconds"] = round(entry.get("cpu_seconds", 0.0) + rec.cpu_seconds, 6)
    return list(nodes.values())


_NODE_KEYS = ("ray_node_id", "ip", "host")


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


def _parquet_writer(where: Any, schema: pa.Schema) -> pq.ParquetWriter:
    """A writer with the package's dictionary choice (:func:`parquet_dictionary_columns`), less
    the samples' ``indices``: a distinct buffer handle per row, so pyarrow's dictionary page is
    always thrown away (on CartPole samples it cost ~19% of the write's CPU and 5% more bytes)."""
    dictionary = parquet_dictionary_columns(schema)
    if INDICES in schema.names and dictionary is not False:
        names = schema.names if dictionary is True else dictionary
        dictionary = [n for n in names if n != INDICES]
    return pq.ParquetWriter(where, schema, use_dictionary=dictionary)


class _UnitWriter:
    """A unit's output files: ``<kind>-...-<unit>-<k>.parquet`` (``part``: samples;
    ``quarantine``: the rows it refused), a new file whenever the schema changes, batches held
    until they fill a row group (:data:`ROW_GROUP_ROWS` / :data:`ROW_GROUP_BYTES`), rows counted.
    Where a file goes, how it is hashed and how it is put in place is the staging's
    (:meth:`~..staging.UnitOutput.open_file`): this writer only writes and finishes files, and
    places them all when the unit ends (:meth:`close`)."""

    def __init__(
        self,
        output: UnitOutput,
        kind: Literal["part", "quarantine"],
        unit: int,
        layout: Layout = "auto",
    ) -> None:
        self.output = output
        self.kind: Literal["part", "quarantine"] = kind
        self.unit = unit
        self.layout = layout
        self.writer: pq.ParquetWriter | None = None
        self.schema: pa.Schema | None = None
        self.file: StagedFile | None = None
        self.rows = 0  # rows in the file being written (held ones included)
        self.total = 0  # rows written by this unit so far (held ones included)
        self.held: list[pa.Table] = []  # the next row group's batches
        self.held_rows = 0
        self.held_bytes = 0
        self.done: list[tuple[StagedFile, int]] = []  # finished files, with their rows

    def write(self, columns: Any) -> None:
        """Appends a batch (an Arrow table or columns), starting a new file on a new schema.

        Args:
            columns: What the prelearner yielded.
        """
        table = (
            columns
            if isinstance(columns, pa.Table)
            else columns_to_table(columns, layout=self.layout)
        )
        if not table.num_rows:
            return
        if self.writer is None or not table.schema.equals(self.schema, check_metadata=True):
            self._finish()
            self.file = self.output.open_file(self.kind, self.unit, len(self.done))
            self.writer = _parquet_writer(self.file.stream, table.schema)
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

    def _finish(self) -> None:
        """Ends the file being written, if any, its held batches written first."""
        if self.writer is None or self.file is None:
            return
        self._flush()
        self.writer.close()
        self.file.finish()
        self.done.append((self.file, self.rows))
        self.writer, self.file, self.rows = None, None, 0

    def close(self) -> list[FileRecord]:
        """Ends the last file and puts every file in place.

        Returns:
            The files' records for the unit's record, in order.
        """
        self._finish()
        return [f.place(rows) for f, rows in self.done]

    def abort(self) -> None:
        """Closes what is open and removes what the unit wrote (the error that stopped it is
        what matters: nothing here raises)."""
        self.held = []
        if self.writer is not None:
            with contextlib.suppress(Exception):
                self.writer.close()
            self.writer = None
        files = [f for f, _ in self.done] + ([self.file] if self.file is not None else [])
        for f in files:
            f.abort()
        self.file = None
