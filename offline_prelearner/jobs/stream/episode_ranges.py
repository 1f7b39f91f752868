"""Whole episodes when several learner-stream actors read rows that have no ``t``.

Without a ``t`` column the order of the rows in the files is the order of the steps (RLlib's
recorder writes no ``t``), and one reader must see all of an episode's rows, in that order, to
build it: a piece of it read by another actor would start again at ``t=0``, and the piece before
it would wait for a continuation that never comes (with ``sample_all`` it never reaches the
learner). With ``ray.concurrency > 1`` the learner stream therefore plans its ranges first:

1. The file groups (:func:`~offline_prelearner.jobs.file_batches.read_groups`) are contiguous
   *ranges* of the input, in file order, one Ray Data task each.
2. The key columns alone (episode id, agent id, done flags) of every file are read, and each row
   is given its episode *instance*: its key, and how many of that key's episodes ended before it
   in file order -- exactly the episodes one reader going through the files in order builds.
3. The range that holds an episode's first row *owns* it (:func:`episode_owners`). Its rows that
   lie in later ranges (an episode cut at a range's edge, one that spans three or more ranges, a
   range that is all one episode's middle) are handed to the owner: the owner's task reads them
   after its own rows, in file order, and the range they lie in skips them
   (:func:`range_pieces`). An episode open at the end of the data stays open, as with one actor.

Each task then holds whole episodes, so it does not matter which actor runs it: the learner gets
the episodes one actor in file order would build, each exactly once, its rows in file order.
The hand-over is a plan of row runs, and the owner reads those rows from the file itself (usually
the head of the next file, one row group): a pixel row never passes through the object store,
and a task stays self-contained, as a task that Ray retries must be. The planning reads a few
small columns of every file on the driver; only key columns of rows whose key shows up in more
than one range are sorted (:func:`episode_owners` is vectorized, no loop over rows).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...config import PreLearnerConfig
from ...episodes import columns as C
from ...errors import DataError
from ...io.formats.rows.frame import factorize
from ...io.schema import ColumnSchema, load_schema
from ...io.sources import read_table
from ..file_batches import FilePiece

__all__ = ["episode_owners", "plan_ranges", "range_pieces"]

#: A range's reading plan: whole files by name, parts of files as :class:`FilePiece`.
Plan = list[list[str | FilePiece]]


def episode_owners(codes: np.ndarray, done: np.ndarray, range_of: np.ndarray) -> np.ndarray:
    """The range that owns each row: the range of its episode instance's first row.

    Rows are in file order; an episode instance is a run of one key's rows (not necessarily
    adjacent: other keys' rows may come between) that ends at the key's next done row, or at the
    end of the data. A key's row after a done row starts its next instance (an id reused).

    Args:
        codes: An integer key per row (episode id and agent id, factorized), in file order.
        done: Per row, whether it ends its episode (terminated or truncated).
        range_of: Per row, the range it lies in (non-decreasing).

    Returns:
        Per row, the owning range (an int64 array; ``<= range_of``, equal for most rows).
    """
    owner: np.ndarray = np.asarray(range_of, dtype=np.int64).copy()
    codes = np.asarray(codes, dtype=np.int64)
    if len(codes) == 0:
        return owner
    first = np.full(int(codes.max()) + 1, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, codes, owner)
    late = first[codes] != owner  # rows of a key seen in an earlier range
    if not late.any():
        return owner
    spans = np.zeros(len(first), dtype=bool)
    spans[codes[late]] = True
    cand = np.flatnonzero(spans[codes])  # every row of a key seen in more than one range
    order = np.argsort(codes[cand], kind="stable")  # by key, file order within a key
    rows = cand[order]
    key = codes[rows]
    ends = np.asarray(done, dtype=bool)[rows]
    starts = np.ones(len(rows), dtype=bool)
    starts[1:] = (key[1:] != key[:-1]) | ends[:-1]  # a new key, or the row after a done row
    instance = np.cumsum(starts) - 1
    owner[rows] = owner[rows[starts]][instance]
    return owner


def _runs(idx: np.ndarray) -> tuple[tuple[int, int], ...]:
    """Sorted row numbers as runs ``(start, stop)`` of consecutive rows."""
    if not len(idx):
        return ()
    cut = np.flatnonzero(np.diff(idx) != 1) + 1
    starts = idx[np.concatenate([[0], cut])]
    stops = idx[np.concatenate([cut - 1, [len(idx) - 1]])] + 1
    return tuple(zip(starts.tolist(), stops.tolist(), strict=True))


def _complement(idx: np.ndarray, n: int) -> tuple[tuple[int, int], ...]:
    """The runs of ``[0, n)`` without the sorted row numbers ``idx``."""
    keep = np.ones(n, dtype=bool)
    keep[idx] = False
    return _runs(np.flatnonzero(keep))


def range_pieces(groups: Sequence[Sequence[str]], rows: Sequence[int], owner: np.ndarray) -> Plan:
    """What each range reads, in order: its own files without the rows it hands over, then the
    rows handed to it from later ranges (in file order).

    Args:
        groups: The ranges: consecutive files, in order (together, the input's files).
        rows: Rows of each file, in the same order.
        owner: Per row of the input (file order), the range that owns it
            (:func:`episode_owners`).

    Returns:
        Per range, its files: a file it reads whole by name, part of a file as a
        :class:`FilePiece`. A range left with no row has an empty list.
    """
    files = [f for g in groups for f in g]
    offsets = np.concatenate([[0], np.cumsum(np.asarray(rows, dtype=np.int64))])
    group_of = np.repeat(np.arange(len(groups)), [len(g) for g in groups])
    range_of = np.repeat(group_of, np.asarray(rows, dtype=np.int64))
    moved = np.flatnonzero(owner != range_of)  # rows read by an earlier range
    file_of = np.searchsorted(offsets, moved, side="right") - 1
    plan: Plan = []
    for g, group in enumerate(groups):
        own: list[str | FilePiece] = []
        first = int(np.searchsorted(group_of, g))
        for i, path in enumerate(group, start=first):
            out = moved[file_of == i] - offsets[i]
            if not len(out):
                own.append(path)
            elif len(out) < rows[i]:
                own.append(FilePiece(path, _complement(out, int(rows[i]))))
        plan.append(own)
    by_owner = np.argsort(owner[moved], kind="stable")  # file order within an owner
    for o in np.unique(owner[moved]).tolist():
        mine = by_owner[owner[moved][by_owner] == o]
        for i in np.unique(file_of[mine]).tolist():
            local = moved[mine][file_of[mine] == i] - offsets[i]
            plan[o].append(FilePiece(files[i], _runs(local)))
    return plan


def plan_ranges(groups: list[list[str]], config: PreLearnerConfig) -> Plan | None:
    """The ranges' reading plan for rows without ``t`` read by several actors (see the module
    docstring), or None where there is nothing to plan: another format than ``rows``, rows with
    a ``t`` column (episodes are joined by ``t`` instead), rows without an episode id, or no
    episode that crosses a range's edge.

    Args:
        groups: The file groups (:func:`~offline_prelearner.jobs.file_batches.read_groups`).
        config: The job's config (its format and column schema).

    Returns:
        Per range, the files and parts of files its task reads, or None.

    Raises:
        DataError: A file cannot be read (naming it) under ``read.on_invalid="raise"``.
    """
    if config.read.format != "rows" or len(groups) < 2:
        return None
    schema = load_schema(config.read.schema)
    files = [f for g in groups for f in g]
    keys = _key_columns(schema, files, config)
    if keys is None:
        return None
    with ThreadPoolExecutor(max(1, min(8, os.cpu_count() or 1))) as pool:  # pyarrow frees the GIL
        tables = list(pool.map(lambda f: _keys_or_none(f, keys, config), files))
    if any(t is None for t in tables):
        return None  # a file without those columns: the reader names it
    codes, done = _keys_and_flags([t for t in tables if t is not None], keys, schema)
    counts = [t.num_rows for t in tables if t is not None]
    sizes = [len(g) for g in groups]
    range_of = np.repeat(np.repeat(np.arange(len(groups)), sizes), counts)
    owner = episode_owners(codes, done, range_of)
    if (owner == range_of).all():
        return None
    return range_pieces(groups, counts, owner)


def _keys_or_none(path: str, keys: list[str], config: PreLearnerConfig) -> pa.Table | None:
    """:func:`_read_keys`; a file that cannot be read is, unless ``read.on_invalid="raise"``
    (then its error, naming it, stops the job here), planned as a file of no rows: its range
    reads it whole, and the reader rejects it and counts it as it would with one actor."""
    try:
        return _read_keys(path, keys, config)
    except DataError:
        if config.read.on_invalid == "raise":
            raise
        return pa.table({k: pa.array([], pa.null()) for k in keys})


def _read_keys(path: str, keys: list[str], config: PreLearnerConfig) -> pa.Table | None:
    """The key columns of one file (None if it lacks one of them); Parquet's string ids are read
    as dictionaries (no string is built per row)."""
    if path.endswith((".parquet", ".pq")):
        import pyarrow.parquet as pq

        from ...io.parquet_guard import open_parquet
        from ...io.stores import input_file

        try:
            schema = open_parquet(path, config.read.limits).schema_arrow  # the footer's guard
            if not set(keys) <= set(schema.names):
                return None
            ids = [k for k in keys[:2] if pa.types.is_string(schema.field(k).type)]
            return pq.read_table(input_file(path), columns=keys, read_dictionary=ids)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError):
            return read_table(path, keys, config.read.limits)  # a DataError naming the file
    table = read_table(path, limits=config.read.limits)
    return table.select(keys) if set(keys) <= set(table.column_names) else None


def _key_columns(
    schema: ColumnSchema, files: list[str], config: PreLearnerConfig
) -> list[str] | None:
    """The columns that say where episodes are (id, agent, flags), or None without an episode
    id or with a ``t`` column (read from the first readable file's schema)."""
    names = next((n for n in (_column_names(f, config) for f in files) if n is not None), None)
    if names is None or schema.present(C.T, names) or not schema.present(C.EPS_ID, names):
        return None
    term = schema.present(C.TERMINATEDS, names)
    if term is None and schema.dones in names:
        term = schema.dones
    cols = [
        schema.present(C.EPS_ID, names),
        schema.present(C.AGENT_ID, names),
        term,
        schema.present(C.TRUNCATEDS, names),
    ]
    return [c for c in dict.fromkeys(cols) if c is not None]


def _column_names(path: str, config: PreLearnerConfig) -> list[str] | None:
    """A file's columns; None for a file that is not rows or cannot be read (the reader says)."""
    try:
        if path.endswith((".parquet", ".pq")):
            from ...io.parquet_guard import open_parquet

            return list(open_parquet(path, config.read.limits).schema_arrow.names)
        if path.endswith((".json", ".jsonl", ".ndjson")):
            return list(read_table(path, limits=config.read.limits).column_names)
    except (DataError, pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError):
        return None
    return None


def _keys_and_flags(
    tables: list[pa.Table], keys: list[str], schema: ColumnSchema
) -> tuple[np.ndarray, np.ndarray]:
    """One integer key per row (episode id and agent id) and its done flag, over all files."""
    table = pa.concat_tables(tables, promote_options="permissive")
    names = table.column_names
    codes, _ = _codes(table.column(schema.present(C.EPS_ID, names) or keys[0]))
    agent = schema.present(C.AGENT_ID, names)
    if agent is not None:
        acodes, n_agents = _codes(table.column(agent))
        if n_agents > 1:
            codes = codes * n_agents + acodes
    done = np.zeros(table.num_rows, dtype=bool)
    term = schema.present(C.TERMINATEDS, names)
    if term is None and schema.dones in names:
        term = schema.dones
    for col in (term, schema.present(C.TRUNCATEDS, names)):
        if col is not None:
            done |= _flag(table.column(col))
    return codes, done


def _codes(values: pa.ChunkedArray) -> tuple[np.ndarray, int]:
    """Codes per row (equal values, equal codes; null a value of its own) and how many codes:
    a dictionary column's indices into its files' unified dictionary, else hashed."""
    if pa.types.is_dictionary(values.type):
        values = values.unify_dictionaries()
        n = len(values.chunk(0).dictionary) if values.num_chunks else 0
        parts = [pc.fill_null(c.indices, n).to_numpy() for c in values.chunks]
        return np.concatenate([np.zeros(0, np.int64), *parts]).astype(np.int64), n + 1
    codes, uniq = factorize(values)
    return codes, max(len(uniq), 1)


def _flag(values: Any) -> np.ndarray:
    """A done column as bools (null and anything not true/nonzero: not done; the reader judges
    bad values itself)."""
    try:
        arr = pc.fill_null(pc.cast(values, pa.bool_()), False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return np.zeros(len(values), dtype=bool)
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)
