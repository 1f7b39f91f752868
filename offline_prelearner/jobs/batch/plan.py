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
files (an hdf5 dataset is one file, so one unit). A whole-file format that cuts its files into
pieces of whole episodes (:attr:`~offline_prelearner.io.formats.registry.InputFormat.split_file`:
a LeRobot data file, whose frames decode to far more than the file) has a unit per piece, which
reads those episodes only (its part's ``keep``).

Each unit's key (:func:`unit_key`: its parts and the identity of every file they read) is what
a resume compares before it reuses the unit's record; :mod:`.run` runs a unit.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...config import PreLearnerConfig
from ...errors import DataError
from ...io.formats.registry import InputFormat, input_format
from ...io.parquet_guard import check_drift
from ...io.schema import load_schema
from ...io.sources import whole_file_formats
from .scan import InputFile, Scans, ScanSpec, ThreadScanner, file_keys


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
    #: The whole-file format whose parts with ``keep`` are pieces of a file, read with its
    #: ``read_episodes`` (LeRobot); None: parts of whole files are the whole file.
    piece_format: str | None = None
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


#: Overrides :data:`UNIT_MIN_ROWS` (more, smaller units: parallelism, fault tests).
UNIT_MIN_ROWS_ENV = "OFFLINE_PRELEARNER_UNIT_MIN_ROWS"


def plan_units(files: list[str], config: PreLearnerConfig, min_rows: int | None = None) -> Plan:
    """The units of a job over ``files`` (name order); see the module docstring.

    Each file is opened once, many at once on this process (:class:`~.scan.ThreadScanner`);
    :func:`plan_scans` plans from scans made anywhere (Ray tasks, a dataset index).
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
    return plan_scans(ThreadScanner().scan(files, ScanSpec.of(config)), config, min_rows)


def plan_scans(scans: Scans, config: PreLearnerConfig, min_rows: int | None = None) -> Plan:
    """The units of a job from its files' scans (:mod:`.scan`): the same plan, byte for byte,
    whichever scanner made them, as :func:`plan_units` describes.

    Every footer was checked where it was scanned: against ``read.limits``
    (:mod:`~offline_prelearner.io.parquet_guard`); under ``on_invalid="raise"`` the first
    refusal in file order ends the job here; under skip or quarantine the file's rows are
    unknown and the unit that reads it refuses and counts it. For row data the schemas are
    checked against each other here (:func:`~offline_prelearner.io.parquet_guard.check_drift`,
    once per distinct schema: a file whose schema an earlier file had adds nothing).

    Args:
        scans: One scan per input file, in name order.
        config: The job's config (as :func:`plan_units` reads it).
        min_rows: As :func:`plan_units`.

    Returns:
        The plan.

    Raises:
        DataError: As :func:`plan_units`; OSError: a file the scan could not open.
    """
    if min_rows is None:
        min_rows = int(os.environ.get(UNIT_MIN_ROWS_ENV, UNIT_MIN_ROWS))
    scans.raise_first_error()
    got = scans.files
    files = [s.file.path for s in got]
    inputs = tuple(s.file for s in got)
    known = [(s.decoded, s.file.rows) for s in got if s.decoded is not None and s.file.rows]
    decoded_rows = sum(r or 0 for _, r in known)
    row_bytes = sum(d or 0 for d, _ in known) / decoded_rows if decoded_rows else None
    fmt = config.read.format
    if fmt == "rows":
        _check_drift(scans)
    spec = input_format(fmt)
    if spec is not None and spec.whole_file and spec.split_file is not None:
        pieces = [p for i, f in enumerate(files) for p in _pieces(spec, i, f, config)]
        units = [Unit(k, (p,)) for k, p in enumerate(pieces)]
        return Plan(inputs, tuple(units), whole_files=True, row_bytes=row_bytes, piece_format=fmt)
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
    first = next((s for s in got if s.file.rows != 0), got[0])
    keys = _key_columns(config, scans.names(first))
    if not keys:  # episodes are split at done flags within each file: a unit per file
        per_file = tuple(Unit(i, (Part(i),)) for i in range(len(files)))
        return Plan(inputs, per_file, row_bytes=row_bytes)
    unit_of = _group_files(inputs, min_rows)
    n_units = unit_of[-1] + 1
    by_unit: list[list[int]] = [[] for _ in range(n_units)]
    for i, u in enumerate(unit_of):
        by_unit[u].append(i)
    foreign: list[list[str]] = [[] for _ in files]  # per file: keys owned by an earlier unit
    ahead: list[dict[int, tuple[list[str], int]]] = [{} for _ in range(n_units)]
    table = _key_table(scans, keys, ScanSpec.of(config))
    for j, key, stop, o in _foreign_keys(*table, unit_of):
        foreign[j].append(key)
        keys_in, end = ahead[o].get(j, ([], 0))
        keys_in.append(key)
        ahead[o][j] = (keys_in, max(end, stop + 1))
    units = []
    for u in range(n_units):
        parts = [Part(i, drop=tuple(sorted(foreign[i]))) for i in by_unit[u]]
        for j in sorted(ahead[u]):
            keys_in, end = ahead[u][j]
            parts.append(Part(j, stop=end, keep=tuple(sorted(keys_in))))
        units.append(Unit(u, tuple(parts)))
    return Plan(inputs, tuple(units), keys, row_bytes=row_bytes)


def _pieces(spec: InputFormat, i: int, path: str, config: PreLearnerConfig) -> list[Part]:
    """File ``i``'s parts, a piece of whole episodes each (``spec.split_file``); the whole file
    as one part where it holds no rows, or, under ``on_invalid`` skip or quarantine, where it
    cannot be split (its unit then meets the error, and counts it)."""
    assert spec.split_file is not None
    try:
        pieces = spec.split_file(path, config.read.limits)
    except DataError:
        if config.read.on_invalid == "raise":
            raise
        pieces = []
    return [Part(i, keep=p) for p in pieces] if pieces else [Part(i)]


def _check_drift(scans: Scans) -> None:
    """:func:`~offline_prelearner.io.parquet_guard.check_drift` over the first file of each
    distinct schema (a refused footer's schema is not compared, as before): a later file of a
    schema already seen meets the same columns first seen at or before its twin, so it passes
    or fails as its twin did."""
    seen: set[str] = set()
    files: list[str] = []
    schemas: list[pa.Schema | None] = []
    for s in scans.files:
        if s.refused or s.schema is None or s.schema in seen:
            continue
        seen.add(s.schema)
        files.append(s.file.path)
        schemas.append(scans.schemas[s.schema])
    check_drift(files, schemas)


def _key_table(
    scans: Scans, keys: tuple[str, ...], spec: ScanSpec
) -> tuple[pa.Array | None, np.ndarray, np.ndarray]:
    """Every file's distinct keys, one after another in file order (None: none at all), the
    file of each and its last row there. A scan that read other columns than the plan's keys
    (a file with an agent id column the first file lacks, JSON lines) is read again as the
    serial plan read it (:func:`~.scan.file_keys`); an empty or refused file holds none."""
    seen: list[pa.Array] = []
    file_of: list[np.ndarray] = []
    stops: list[np.ndarray] = []
    for j, s in enumerate(scans.files):
        if s.file.rows == 0 or s.refused:
            continue  # an empty partition: no episode starts or continues there
        if s.key_columns == keys and s.keys is not None and s.last is not None:
            distinct, last = s.keys, s.last
        else:
            got = file_keys(s.file.path, keys, spec)
            if got is None:
                continue  # the unit that reads this file raises the error with its context
            distinct, last = got
        if not len(distinct):
            continue
        seen.append(distinct)
        stops.append(last)
        file_of.append(np.full(len(last), j, dtype=np.int64))
    if not seen:
        return None, np.zeros(0, np.int64), np.zeros(0, np.int64)
    every = pa.chunked_array(seen, pa.string()).combine_chunks()
    return every, np.concatenate(file_of), np.concatenate(stops)


def _foreign_keys(
    every: pa.Array | None, file_at: np.ndarray, stop_at: np.ndarray, unit_of: list[int]
) -> list[tuple[int, str, int, int]]:
    """Each (file, key, last row of the key in the file, owning unit) where the key's episode
    began in an earlier unit, in file order, keys in first-seen order within a file.

    Columnar: the owner of every key (the unit of its first file) from one dictionary
    encoding over every file's distinct keys (:func:`_key_table`); Python sees only the keys
    that cross a unit boundary."""
    if every is None:
        return []
    unit_at = np.asarray(unit_of, dtype=np.int64)[file_at]
    codes = pc.dictionary_encode(every).indices.to_numpy(zero_copy_only=False)
    first = np.full(int(codes.max()) + 1, len(codes), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(codes), dtype=np.int64))
    owner = unit_at[first[codes]]
    cross = np.flatnonzero(owner != unit_at)
    names = every.take(pa.array(cross)).to_pylist()
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
