"""The plan as the batch job computed it before the parallel scan (jobs/batch/scan.py): every
footer checked, then every file's key columns read, one file after another, by paths. Kept here
as the slow reference that the scanned plan must equal exactly (test_plan_scan.py)."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from offline_prelearner.config import PreLearnerConfig
from offline_prelearner.errors import DataError
from offline_prelearner.io.parquet_guard import check_drift
from offline_prelearner.io.sources import read_table, whole_file_formats
from offline_prelearner.io.stores import file_stat, input_file
from offline_prelearner.jobs.batch.plan import (
    UNIT_MIN_ROWS,
    UNIT_MIN_ROWS_ENV,
    Part,
    Plan,
    Unit,
    _group_files,
    _key_columns,
)
from offline_prelearner.jobs.batch.scan import JSON_EXT, InputFile, row_keys


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


def serial_plan(files: list[str], config: PreLearnerConfig, min_rows: int | None = None) -> Plan:
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
