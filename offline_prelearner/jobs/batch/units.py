"""Units of work of the batch job: self-contained, so a retry or a resume recomputes the same thing.

A prelearner keeps state between batches (fragments of episodes that a file boundary cut, the
de-duplication memory, the replay buffer). State that lives in a worker is lost or doubled when
Ray restarts that worker, so the batch job never carries state from one unit to the next: a
**unit** is everything one fresh prelearner needs to produce its share of the output.

For row data a unit is an input file plus the rows of *its* episodes in later files. An episode
(key: ``eps_id``, plus ``agent_id`` where set) belongs to the first file, in name order, that holds
a row of it. The plan reads only the key columns of every file (Parquet column projection), then:

* unit ``k`` reads file ``k`` without the rows of episodes owned by an earlier file, then, for each
  later file that continues one of its episodes, the rows of those episodes up to the last one;
* every row of the input is read by exactly one unit, and all rows of an episode (copies
  included) reach the same prelearner, so de-duplication, stitching and ``t`` order work as if
  the whole input went through one prelearner.

Msgpack episodes and old-stack batches carry their ids inside the records; their plan is one
unit over all files, in order (correct, not parallel). Data without an episode id column (split
at done flags) has one unit per file. Minari and D4RL files hold whole episodes and are read
whole (:data:`~offline_prelearner.io.sources.WHOLE_FILE_FORMATS`): a D4RL file is a unit, and
Minari's episode files (arrow / parquet: a folder per episode) are grouped into units like row
files (an hdf5 dataset is one file, so one unit).

:func:`run_unit` runs a fresh prelearner (seeded from the job's seed and the unit's index) over
a unit's rows in ``ray.batch_size`` chunks and writes ``samples/part-<unit>-<k>.parquet`` through
temporary names, then the unit's record (rows, checksums, ledger); the same function runs in
the in-process engine and inside Ray Data, so the two write the same bytes. Under
``on_invalid="quarantine"`` the rows it refused go to ``quarantine/quarantine-<unit>-<k>.parquet``
the same way. A record carries the job's id and the unit's key (:func:`unit_key`: its parts and
the identity of every file they read), which is what a resume compares before reusing it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterator
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
from ...io.parquet_guard import check_drift, open_parquet
from ...io.quarantine import quarantine_table
from ...io.schema import load_schema
from ...io.sources import WHOLE_FILE_FORMATS, read_table
from ...io.formats.rows.writer import columns_to_table
from ...prelearner import OfflinePreLearner
from ..commit import QUARANTINE, CommitError, file_sha256, write_json_atomic
from ..file_batches import concat_tables, parquet_chunks
from .file_tally import FileTally

__all__ = [
    "InputFile",
    "Part",
    "Plan",
    "Unit",
    "plan_units",
    "run_unit",
    "unit_key",
    "unit_seed",
]

_JSON_EXT = (".json", ".jsonl", ".ndjson")
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
        return cls.checked(path)[0]

    @classmethod
    def checked(
        cls, path: str, limits: DecodeLimits = DEFAULT_LIMITS
    ) -> tuple[InputFile, pa.Schema | None]:
        """The file and, for Parquet, its schema from the footer, which is checked against
        ``limits`` (:mod:`~offline_prelearner.io.parquet_guard`: a DataError refuses a bomb)."""
        st = os.stat(path)
        schema = None
        rows = None
        if path.endswith(".arrow"):  # Minari's arrow backend: one episode per file
            try:
                with pa.memory_map(path) as src:
                    rows = pa.ipc.open_file(src).count_rows()
            except (pa.ArrowInvalid, OSError):
                rows = None
        elif not path.endswith((*_JSON_EXT, ".hdf5", ".h5")):
            try:
                pf = open_parquet(path, limits, size=st.st_size)
                rows, schema = pf.metadata.num_rows, pf.schema_arrow
            except (pa.ArrowInvalid, OSError):
                rows = None  # the reader names the file when it fails on it
        return cls(path, st.st_size, st.st_mtime_ns, rows), schema

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Part:
    """The rows of one file that a unit reads.

    Attributes:
        file: Index into :attr:`Plan.files`.
        stop: Read rows ``[0, stop)`` only (a look-ahead ends at the last row it needs).
        keep: Only rows of these episode keys (a look-ahead into a later file).
        drop: Not the rows of these keys (they belong to an earlier file's unit).
    """

    file: int
    stop: int | None = None
    keep: tuple[str, ...] | None = None
    drop: tuple[str, ...] = ()


@dataclass(frozen=True)
class Unit:
    index: int
    parts: tuple[Part, ...]


@dataclass(frozen=True)
class Plan:
    """The input files and the units that cover every row of them exactly once."""

    files: tuple[InputFile, ...]
    units: tuple[Unit, ...]
    key_columns: tuple[str, ...] = ()  # eps_id [, agent_id] columns; () = no ownership
    whole_files: bool = False  # each file is read as one table (Minari, D4RL)

    def unit_inputs(self, unit: Unit) -> list[dict[str, Any]]:
        return [self.files[i].to_dict() for i in sorted({p.file for p in unit.parts})]


# ====================================================================== planning
def _key_columns(config: PreLearnerConfig, names: list[str]) -> tuple[str, ...]:
    schema = load_schema(config.read.schema)
    eps = schema.column("eps_id")
    if eps is None or eps not in names:
        return ()
    agent = schema.column("agent_id")
    return (eps, agent) if agent is not None and agent in names else (eps,)


def row_keys(table: pa.Table, key_columns: tuple[str, ...]) -> pa.Array:
    """One string per row: the episode id, joined with the agent id where one is set."""
    parts = []
    for name in key_columns:
        col = table.column(name)
        if pa.types.is_null(col.type):
            continue
        try:
            text = pc.cast(col, pa.string())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            text = pc.cast(pc.cast(col, pa.binary()), pa.string(), safe=False)
        parts.append(pc.fill_null(text, ""))
    if not parts:
        return pa.array([""] * table.num_rows, pa.string())
    if len(parts) == 1:
        return parts[0].combine_chunks() if isinstance(parts[0], pa.ChunkedArray) else parts[0]
    joined = pc.binary_join_element_wise(*parts, _SEP)
    return joined.combine_chunks() if isinstance(joined, pa.ChunkedArray) else joined


#: Consecutive input files are grouped into one unit until it holds this many rows (small files,
#: as RLlib's recorder writes them, would otherwise make units of a batch or less each).
UNIT_MIN_ROWS = 1 << 17


def _group_files(inputs: tuple[InputFile, ...], min_rows: int) -> list[int]:
    """The unit of each file: consecutive files until a unit holds ``min_rows`` rows."""
    unit_of, unit, rows = [], 0, 0
    for f in inputs:
        if rows >= min_rows:
            unit, rows = unit + 1, 0
        unit_of.append(unit)
        rows += f.rows if f.rows is not None else min_rows  # JSON lines: one file per unit
    return unit_of


def _check_inputs(
    files: list[str], config: PreLearnerConfig
) -> tuple[tuple[InputFile, ...], set[int]]:
    """Every input as the plan sees it, its Parquet footer checked on this process (the driver,
    on the Ray engine) before any unit opens it: against ``read.limits``
    (:mod:`~offline_prelearner.io.parquet_guard`) and, for row data, the schemas against each
    other (:func:`~offline_prelearner.io.parquet_guard.check_drift`). Under ``on_invalid="raise"``
    a refusal ends the job here; under skip or quarantine the file's rows are unknown and the
    unit that reads it refuses and counts it (returned: the indices of those files)."""
    limits = config.read.limits
    inputs: list[InputFile] = []
    schemas: list[pa.Schema | None] = []
    refused: set[int] = set()
    for i, f in enumerate(files):
        try:
            got, schema = InputFile.checked(f, limits)
        except DataError:
            if config.read.on_invalid == "raise":
                raise
            st = os.stat(f)
            got, schema = InputFile(f, st.st_size, st.st_mtime_ns, None), None
            refused.add(i)
        inputs.append(got)
        schemas.append(schema)
    if config.read.format == "rows":
        check_drift(files, schemas)
    return tuple(inputs), refused


#: Overrides :data:`UNIT_MIN_ROWS` (more, smaller units: parallelism, fault tests).
UNIT_MIN_ROWS_ENV = "OFFLINE_PRELEARNER_UNIT_MIN_ROWS"


def plan_units(files: list[str], config: PreLearnerConfig, min_rows: int | None = None) -> Plan:
    """The units of a job over ``files`` (name order); see the module docstring.

    ``min_rows`` defaults to ``$OFFLINE_PRELEARNER_UNIT_MIN_ROWS``, else :data:`UNIT_MIN_ROWS`.
    """
    if min_rows is None:
        min_rows = int(os.environ.get(UNIT_MIN_ROWS_ENV, UNIT_MIN_ROWS))
    inputs, refused = _check_inputs(files, config)
    fmt = config.read.format
    if fmt in WHOLE_FILE_FORMATS:
        unit_of = _group_files(inputs, min_rows) if fmt == "minari" else list(range(len(files)))
        units = [
            Unit(u, tuple(Part(i) for i in range(len(files)) if unit_of[i] == u))
            for u in range(unit_of[-1] + 1)
        ]
        return Plan(inputs, tuple(units), whole_files=True)
    if fmt != "rows":
        return Plan(inputs, (Unit(0, tuple(Part(i) for i in range(len(files)))),))
    # The columns of the first file that holds rows (an empty partition may hold none at all).
    first = next((f.path for f in inputs if f.rows != 0), files[0])
    try:
        names = pq.read_schema(first).names if not first.endswith(_JSON_EXT) else []
    except (pa.ArrowInvalid, OSError):
        names = []
    keys = _key_columns(config, names)
    if not keys:  # episodes are split at done flags within each file: a unit per file
        return Plan(inputs, tuple(Unit(i, (Part(i),)) for i in range(len(files))))
    unit_of = _group_files(inputs, min_rows)
    n_units = unit_of[-1] + 1
    owner: dict[str, int] = {}  # key -> unit of the first file holding it
    foreign: list[list[str]] = [[] for _ in files]  # per file: keys owned by an earlier unit
    ahead: list[dict[int, tuple[list[str], int]]] = [{} for _ in range(n_units)]
    for j, f in enumerate(files):
        if inputs[j].rows == 0 or j in refused:
            continue  # an empty partition: no episode starts or continues there
        try:
            table = read_table(f, columns=list(keys), limits=config.read.limits)
        except DataError:
            continue  # the unit that reads this file raises the error with its context
        k = row_keys(table, keys)
        if not len(k):
            continue
        last = (
            pa.table({"k": k, "i": pa.array(np.arange(len(k), dtype=np.int64))})
            .group_by("k", use_threads=False)
            .aggregate([("i", "max")])
        )
        here = unit_of[j]
        for key, stop in zip(
            last.column("k").to_pylist(), last.column("i_max").to_numpy(), strict=True
        ):
            o = owner.setdefault(key, here)
            if o != here:
                foreign[j].append(key)
                got, end = ahead[o].get(j, ([], 0))
                got.append(key)
                ahead[o][j] = (got, max(end, int(stop) + 1))
    units = []
    for u in range(n_units):
        parts = [
            Part(i, drop=tuple(sorted(foreign[i]))) for i in range(len(files)) if unit_of[i] == u
        ]
        for j in sorted(ahead[u]):
            got, end = ahead[u][j]
            parts.append(Part(j, stop=end, keep=tuple(sorted(got))))
        units.append(Unit(u, tuple(parts)))
    return Plan(inputs, tuple(units), keys)


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
    if path.endswith(_JSON_EXT):
        table = read_table(path, limits=limits)
        chunks: Iterator[pa.Table] = (
            table.slice(s, step) for s in range(0, max(table.num_rows, 1), step)
        )
    else:
        chunks = parquet_chunks(path, step, limits=limits)
    start = 0
    for chunk in chunks:
        n = chunk.num_rows
        rows = np.arange(start, start + n, dtype=np.int64)
        start += n
        if part.stop is not None and rows.size and rows[0] >= part.stop:
            break
        if part.stop is not None and start > part.stop:
            keep_n = part.stop - int(rows[0])
            chunk, rows = chunk.slice(0, keep_n), rows[:keep_n]
        if part.keep is not None or part.drop:
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


# ====================================================================== identity
def unit_key(plan: Plan, unit: Unit, fingerprints: tuple[str, ...]) -> str:
    """What a unit computes from, as one sha256: its parts (file, rows, episode keys kept or
    dropped) and each file's path, size, mtime, rows and content fingerprint
    (:func:`~offline_prelearner.jobs.commit.input_fingerprint`). A resume reuses a unit's record
    only under the same key: a file added, deleted, grown or rewritten anywhere the unit reads,
    or an earlier file that now owns other episodes, changes it."""
    h = hashlib.sha256()
    h.update(json.dumps([list(plan.key_columns), plan.whole_files]).encode())
    for part in unit.parts:
        f = plan.files[part.file]
        fp = fingerprints[part.file] if part.file < len(fingerprints) else None
        keep = None if part.keep is None else list(part.keep)
        h.update(b"\0")
        h.update(
            json.dumps(
                [f.path, f.size, f.mtime_ns, f.rows, fp, part.stop, keep, list(part.drop)]
            ).encode()
        )
    return h.hexdigest()


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


def run_unit(
    job: UnitJob, index: int, on_chunk: Callable[[int, int], None] | None = None
) -> dict[str, Any]:
    """Runs one unit from scratch; writes its sample files and its record; returns the record.

    ``on_chunk(rows, samples)`` is called after each input chunk (progress in one process).
    """
    unit = job.plan.units[index]
    config = dataclasses.replace(job.config, seed=unit_seed(job.seed, index))
    pre = job.prelearner(config)
    root = Path(job.units_dir).parent  # the staging folder
    writer = _UnitWriter(Path(job.samples_dir), index, job.layout)
    refused = None
    if config.read.on_invalid == "quarantine":
        refused = _UnitWriter(root / QUARANTINE, index, prefix=QUARANTINE)
    paths = [f.path for f in job.plan.files]
    tally = FileTally(paths)
    skip = config.read.on_invalid != "raise"
    try:
        chunks = read_unit(
            job.plan,
            unit,
            config.ray.batch_size,
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
        _check_owner(job, root)
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
    }
    write_json_atomic(Path(job.units_dir) / f"unit-{index:05d}.json", record)
    return record


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
    if file is not None and file.endswith(_JSON_EXT) and row is not None:
        # JSON lines (one record per line): name the line, as ``convert`` does.
        message = message.replace(f"(record {where.row} of the batch", f"(line {row + 1}")
        row += 1  # Where.row of a JSON-lines record is its line, as in ``convert``
    where = dataclasses.replace(where, file=file, row=row)
    return type(e)(message, where, reason=e.reason)


class _UnitWriter:
    """A unit's output: ``<prefix>-<unit>-<k>.parquet`` (``part``: samples; ``quarantine``: the
    rows it refused), a new file whenever the schema changes, written under a temporary name and
    renamed when the unit ends."""

    def __init__(
        self, folder: Path, unit: int, layout: Layout = "auto", prefix: str = "part"
    ) -> None:
        self.folder = folder
        self.layout = layout
        self.unit = unit
        self.prefix = prefix
        self.writer: pq.ParquetWriter | None = None
        self.schema: pa.Schema | None = None
        self.done: list[tuple[Path, Path, int]] = []  # (tmp, final, rows)
        self.rows = 0
        self.total = 0  # rows written by this unit so far

    def _tmp(self, k: int) -> tuple[Path, Path]:
        name = f"{self.prefix}-{self.unit:05d}-{k:03d}.parquet"
        return self.folder / f".{name}.tmp-{os.getpid()}", self.folder / name

    def write(self, columns: Any) -> None:
        table = (
            columns
            if isinstance(columns, pa.Table)
            else columns_to_table(columns, layout=self.layout)
        )
        if not table.num_rows:
            return
        if self.writer is None or not table.schema.equals(self.schema, check_metadata=True):
            self._finish()
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp, _ = self._tmp(len(self.done))
            self.writer = pq.ParquetWriter(
                tmp, table.schema, use_dictionary=parquet_dictionary_columns(table.schema)
            )
            self.schema = table.schema
        self.writer.write_table(table)
        self.rows += table.num_rows
        self.total += table.num_rows

    def _finish(self) -> None:
        if self.writer is None:
            return
        self.writer.close()
        tmp, final = self._tmp(len(self.done))
        self.done.append((tmp, final, self.rows))
        self.writer, self.rows = None, 0

    def close(self) -> list[dict[str, Any]]:
        self._finish()
        files = []
        for tmp, final, rows in self.done:
            os.replace(tmp, final)
            files.append(
                {
                    "name": final.name,
                    "rows": rows,
                    "bytes": final.stat().st_size,
                    "sha256": file_sha256(final),
                }
            )
        return files

    def abort(self) -> None:
        if self.writer is not None:
            with contextlib.suppress(Exception):  # the error that stopped the unit matters
                self.writer.close()
            self.writer = None
        for p in self.folder.glob(f".{self.prefix}-{self.unit:05d}-*.tmp-{os.getpid()}"):
            p.unlink(missing_ok=True)
