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
whole (:func:`~offline_prelearner.io.sources.whole_file_formats`): a D4RL file is a unit, and
Minari's episode files (arrow / parquet: a folder per episode) are grouped into units like row
files (an hdf5 dataset is one file, so one unit).

Each unit's key (:func:`unit_key`: its parts and the identity of every file they read) is what
a resume compares before it reuses the unit's record; :mod:`.run` runs a unit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...config import DEFAULT_LIMITS, DecodeLimits, PreLearnerConfig
from ...errors import DataError
from ...io.parquet_guard import check_drift, open_parquet
from ...io.schema import load_schema
from ...io.sources import read_table, whole_file_formats
from ...io.stores import file_stat, input_file, open_random_access

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
    """One unit of work: its number and the parts of files whose rows it reads."""

    index: int
    parts: tuple[Part, ...]


@dataclass(frozen=True)
class Plan:
    """The input files and the units that cover every row of them exactly once."""

    files: tuple[InputFile, ...]
    units: tuple[Unit, ...]
    key_columns: tuple[str, ...] = ()  # eps_id [, agent_id] columns; () = no ownership
    whole_files: bool = False  # each file is read as one table (Minari, D4RL)
    #: Bytes an input row decodes to, on average over the Parquet inputs' footers (None: no
    #: footer said): what sizes a unit's chunks under ``ray.batch_size="auto"``
    #: (:meth:`~offline_prelearner.config.RayConfig.batch_rows`).
    row_bytes: float | None = None

    def batch_rows(self, config: PreLearnerConfig) -> int | None:
        """Rows per chunk of this plan's units
        (:meth:`~offline_prelearner.config.RayConfig.batch_rows`).

        Args:
            config: The job's config: ``ray.batch_size`` and ``sample.sample_all`` decide,
                with :attr:`row_bytes` sizing ``"auto"``.

        Returns:
            The rows per chunk, or None for no limit (a unit reads each file whole).
        """
        return config.ray.batch_rows(config.sample.sample_all, self.row_bytes)

    def unit_inputs(self, unit: Unit) -> list[dict[str, Any]]:
        """The input files a unit reads from, as dicts, in file order.

        Args:
            unit: One of this plan's units; a file it reads in several parts is listed once.

        Returns:
            Each file as :meth:`InputFile.to_dict` gives it (a unit record's ``inputs``).
        """
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
) -> tuple[tuple[InputFile, ...], set[int], float | None]:
    """Every input as the plan sees it, its Parquet footer checked on this process (the driver,
    on the Ray engine) before any unit opens it: against ``read.limits``
    (:mod:`~offline_prelearner.io.parquet_guard`) and, for row data, the schemas against each
    other (:func:`~offline_prelearner.io.parquet_guard.check_drift`). Under ``on_invalid="raise"``
    a refusal ends the job here; under skip or quarantine the file's rows are unknown and the
    unit that reads it refuses and counts it (returned: the indices of those files), and the
    bytes a row decodes to on average (:attr:`Plan.row_bytes`)."""
    limits = config.read.limits
    inputs: list[InputFile] = []
    schemas: list[pa.Schema | None] = []
    refused: set[int] = set()
    decoded_bytes = decoded_rows = 0
    for i, f in enumerate(files):
        try:
            got, schema, decoded = InputFile.checked(f, limits)
        except DataError:
            if config.read.on_invalid == "raise":
                raise
            st = file_stat(f)
            got, schema, decoded = InputFile(f, st.st_size, st.st_mtime_ns, None), None, None
            refused.add(i)
        inputs.append(got)
        schemas.append(schema)
        if decoded is not None and got.rows:
            decoded_bytes, decoded_rows = decoded_bytes + decoded, decoded_rows + got.rows
    if config.read.format == "rows":
        check_drift(files, schemas)
    return tuple(inputs), refused, (decoded_bytes / decoded_rows if decoded_rows else None)


#: Overrides :data:`UNIT_MIN_ROWS` (more, smaller units: parallelism, fault tests).
UNIT_MIN_ROWS_ENV = "OFFLINE_PRELEARNER_UNIT_MIN_ROWS"


def plan_units(files: list[str], config: PreLearnerConfig, min_rows: int | None = None) -> Plan:
    """The units of a job over ``files`` (name order); see the module docstring.

    ``min_rows`` defaults to ``$OFFLINE_PRELEARNER_UNIT_MIN_ROWS``, else :data:`UNIT_MIN_ROWS`.

    Args:
        files: The input's data files, non-empty, in name order (:func:`expand_paths`).
        config: The job's config: ``read.format``, ``read.schema`` (the key columns),
            ``read.limits`` and ``read.on_invalid`` (whether a refused footer ends the job).
        min_rows: Consecutive files are grouped into one unit until it holds this many rows
            (by footer; a JSON-lines file counts as ``min_rows``, so it is a unit of its own);
            applies to keyed row data and Minari. None: the environment, else the default.

    Returns:
        The plan: one unit per D4RL file, Minari files grouped, one unit for episodes or
        sample batches, a unit per file for row data without an episode id column, else
        grouped units that each own whole episodes (a look-ahead part reads an episode's rows
        in later files).

    Raises:
        DataError: Under ``on_invalid="raise"``, a footer over ``read.limits``; for row data,
            schemas that drift between files.
    """
    if min_rows is None:
        min_rows = int(os.environ.get(UNIT_MIN_ROWS_ENV, UNIT_MIN_ROWS))
    inputs, refused, row_bytes = _check_inputs(files, config)
    fmt = config.read.format
    if fmt in whole_file_formats():
        unit_of = _group_files(inputs, min_rows) if fmt == "minari" else list(range(len(files)))
        units = [
            Unit(u, tuple(Part(i) for i in range(len(files)) if unit_of[i] == u))
            for u in range(unit_of[-1] + 1)
        ]
        return Plan(inputs, tuple(units), whole_files=True, row_bytes=row_bytes)
    if fmt != "rows":
        return Plan(inputs, (Unit(0, tuple(Part(i) for i in range(len(files)))),))
    # The columns of the first file that holds rows (an empty partition may hold none at all).
    first = next((f.path for f in inputs if f.rows != 0), files[0])
    try:
        names = pq.read_schema(input_file(first)).names if not first.endswith(JSON_EXT) else []
    except (pa.ArrowInvalid, OSError):
        names = []
    keys = _key_columns(config, names)
    if not keys:  # episodes are split at done flags within each file: a unit per file
        per_file = tuple(Unit(i, (Part(i),)) for i in range(len(files)))
        return Plan(inputs, per_file, row_bytes=row_bytes)
    unit_of = _group_files(inputs, min_rows)
    n_units = unit_of[-1] + 1
    foreign: list[list[str]] = [[] for _ in files]  # per file: keys owned by an earlier unit
    ahead: list[dict[int, tuple[list[str], int]]] = [{} for _ in range(n_units)]
    for j, key, stop, o in _foreign_keys(files, inputs, refused, keys, unit_of, config):
        foreign[j].append(key)
        got, end = ahead[o].get(j, ([], 0))
        got.append(key)
        ahead[o][j] = (got, max(end, stop + 1))
    units = []
    for u in range(n_units):
        parts = [
            Part(i, drop=tuple(sorted(foreign[i]))) for i in range(len(files)) if unit_of[i] == u
        ]
        for j in sorted(ahead[u]):
            got, end = ahead[u][j]
            parts.append(Part(j, stop=end, keep=tuple(sorted(got))))
        units.append(Unit(u, tuple(parts)))
    return Plan(inputs, tuple(units), keys, row_bytes=row_bytes)


def _last_rows(k: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """The distinct keys of one file (first-seen order) and the last row of each."""
    enc = pc.dictionary_encode(k)
    codes = enc.indices.to_numpy(zero_copy_only=False)
    last = np.full(len(enc.dictionary), -1, dtype=np.int64)
    np.maximum.at(last, codes, np.arange(len(codes), dtype=np.int64))
    return enc.dictionary, last


def _foreign_keys(
    files: list[str],
    inputs: tuple[InputFile, ...],
    refused: set[int],
    keys: tuple[str, ...],
    unit_of: list[int],
    config: PreLearnerConfig,
) -> list[tuple[int, str, int, int]]:
    """Each (file, key, last row of the key in the file, owning unit) where the key's episode
    began in an earlier unit, in file order, keys in first-seen order within a file.

    Columnar: each file's distinct keys with their last rows, then the owner of every key (the
    unit of its first file) from one dictionary encoding over all of them; Python sees only the
    keys that cross a unit boundary."""
    seen: list[pa.Array] = []
    file_of: list[np.ndarray] = []
    stops: list[np.ndarray] = []
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
        distinct, last = _last_rows(k)
        seen.append(distinct)
        stops.append(last)
        file_of.append(np.full(len(last), j, dtype=np.int64))
    if not seen:
        return []
    every = pa.chunked_array(seen, pa.string()).combine_chunks()
    file_at = np.concatenate(file_of)
    unit_at = np.asarray(unit_of, dtype=np.int64)[file_at]
    codes = pc.dictionary_encode(every).indices.to_numpy(zero_copy_only=False)
    first = np.full(int(codes.max()) + 1, len(codes), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(codes), dtype=np.int64))
    owner = unit_at[first[codes]]
    cross = np.flatnonzero(owner != unit_at)
    names = every.take(pa.array(cross)).to_pylist()
    stop_at = np.concatenate(stops)
    return [
        (int(file_at[i]), name, int(stop_at[i]), int(owner[i]))
        for i, name in zip(cross, names, strict=True)
    ]


# ====================================================================== identity
def unit_key(plan: Plan, unit: Unit, fingerprints: tuple[str, ...]) -> str:
    """What a unit computes from, as one sha256: its parts (file, rows, episode keys kept or
    dropped) and each file's path, size, mtime, rows and content fingerprint
    (:func:`~offline_prelearner.jobs.commit.input_fingerprint`). A resume reuses a unit's record
    only under the same key: a file added, deleted, grown or rewritten anywhere the unit reads,
    or an earlier file that now owns other episodes, changes it.

    Args:
        plan: The job's plan (its key columns and files).
        unit: One of the plan's units.
        fingerprints: The content fingerprint of each of ``plan.files``, by index; a file
            past the tuple's end is hashed with None.

    Returns:
        The key, 64 hex digits.
    """
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


def _arrow_source(path: str) -> Any:
    """An Arrow IPC file to read: memory-mapped on the local disk, opened on a store."""
    return open_random_access(path)
