"""Old-stack records -> flat per-step columns (what :mod:`.reader` builds episodes from).

A *record* is one ``SampleBatch`` or ``MultiAgentBatch`` as RLlib's old ``JsonWriter`` wrote it:
one JSON object per line, columns as lists (one value per step), or a whole column compressed into
one base64 string. Records arrive in two shapes, with one result:

* an **Arrow table**, one record per row (``pyarrow.json`` / Ray Data ``read_json``, or Parquet
  with one SampleBatch per row): list columns are checked with vectorized lengths and flattened
  once (:func:`arrow_parts`);
* **parsed JSON objects**, one per line (:func:`object_parts`): the general path, used where Arrow
  cannot type the data (malformed lines, a column compressed in some records only, infos with
  varying keys) and the one that names the line of every problem.

The result is a list of :class:`Part` (one per policy id; ``None`` for SampleBatch records): flat
numpy columns, and for each flat row the record it came from; plus the records refused whole
(:class:`BadRecord`). Loops here run per record or per column, never per step.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ....config import DecodeLimits
from ....errors import DataError, DecodeError, SchemaError, Where
from ...arrow_numpy import ColumnValueError, to_numpy
from ...codec import legacy_unpack

__all__ = ["BadRecord", "Parsed", "Part", "arrow_parts", "object_parts", "parse_record"]

SAMPLE_BATCH, MULTI_AGENT_BATCH = "SampleBatch", "MultiAgentBatch"
_META = ("type", "count", "policy_batches")
#: Per-sequence columns of recurrent data (not one value per step); dropped.
_PER_SEQUENCE = ("seq_lens",)
_PER_SEQUENCE_PREFIX = "state_in_"


@dataclass
class Part:
    """The steps of one policy: flat columns, and the record (batch numbering) of each step."""

    policy: str | None
    columns: dict[str, Any]  # name -> ndarray [steps, ...] (infos: object array of dicts)
    rec: np.ndarray


@dataclass
class BadRecord:
    """A record refused whole, with the steps it held (0 when unknown) and its text."""

    index: int
    error: DataError
    rows: int
    text: str | None = None


@dataclass
class Parsed:
    """What parsing a file's records gave: the column parts of the good records, the records refused
    whole, and how many records were read."""

    parts: list[Part] = field(default_factory=list)
    bad: list[BadRecord] = field(default_factory=list)
    num_records: int = 0


_Column: TypeAlias = pa.Array | pa.ChunkedArray  # one column of the records, over all of them


def _skip_column(name: str) -> bool:
    return name in _PER_SEQUENCE or name.startswith(_PER_SEQUENCE_PREFIX)


class _Decoder:
    """Decodes compressed columns (legacy base64(lz4(pickle))), only when allowed."""

    def __init__(self, legacy_pickle: bool, limits: DecodeLimits) -> None:
        self.legacy_pickle, self.limits = legacy_pickle, limits

    def __call__(self, value: str | bytes, column: str, where: Where) -> np.ndarray:
        if not self.legacy_pickle:
            raise DecodeError(
                f"column {column!r} is compressed (one base64(lz4(pickle)) string per batch, "
                "as RLlib's old JsonWriter writes it); decoding pickles is off by default because "
                "data files are untrusted. If you trust the data, pass --legacy-pickle (or "
                "ReadConfig(legacy_pickle=True)); it is decoded with a restricted unpickler that "
                "admits only numpy arrays and plain builtins.",
                Where(file=where.file, column=column),
                reason="legacy_pickle_disabled",
            )
        try:
            out = np.asarray(legacy_unpack(value, self.limits))
        except DecodeError as e:
            raise DecodeError(
                e.message, where.merged(Where(column=column)), reason=e.reason
            ) from None
        if out.ndim == 0:
            raise DecodeError(
                f"compressed column {column!r} decodes to a scalar, not one value per step",
                where.merged(Where(column=column)),
                reason="bad_column",
            )
        return out


# ---------------------------------------------------------------------------------------------
# parsed JSON objects (the general path)
# ---------------------------------------------------------------------------------------------
def parse_record(obj: Any, where: Where) -> list[tuple[str | None, dict[str, Any]]]:
    """One record's policies and their raw columns; ``{"value": {...}}`` wrappers are unwrapped.

    Args:
        obj: One parsed JSON record: a SampleBatch or MultiAgentBatch object, or either
            wrapped as ``{"value": {...}}``.
        where: The file and record (line) named in errors.

    Returns:
        ``(policy id, {column: raw value})`` per policy, the policy id None for a SampleBatch;
        values are lists or compressed strings, not yet decoded.

    Raises:
        SchemaError: Not an object, no or an unknown ``type``, or a MultiAgentBatch without
            valid ``policy_batches`` (reasons ``bad_record``, ``missing_type``,
            ``unknown_type``).
    """
    if isinstance(obj, dict) and set(obj) == {"value"} and isinstance(obj["value"], dict):
        obj = obj["value"]
    if not isinstance(obj, dict):
        raise SchemaError(
            f"a record must be a JSON object, found {type(obj).__name__}",
            where,
            reason="bad_record",
        )
    kind = obj.get("type")
    if kind is None:
        raise SchemaError(
            f"record has no 'type' (expected {SAMPLE_BATCH!r} or {MULTI_AGENT_BATCH!r}); "
            f"keys: {sorted(obj)[:8]}",
            where,
            reason="missing_type",
        )
    if kind == SAMPLE_BATCH:
        return [(None, {k: v for k, v in obj.items() if k not in _META})]
    if kind == MULTI_AGENT_BATCH:
        pb = obj.get("policy_batches")
        if not isinstance(pb, dict) or not all(isinstance(v, dict) for v in pb.values()):
            raise SchemaError(
                "MultiAgentBatch record needs 'policy_batches': {policy id: {column: [...]}}",
                where.merged(Where(column="policy_batches")),
                reason="bad_record",
            )
        return [(str(pid), cols) for pid, cols in pb.items()]
    raise SchemaError(
        f"unknown record type {kind!r}; expected {SAMPLE_BATCH!r} or {MULTI_AGENT_BATCH!r}",
        where.merged(Where(column="type")),
        reason="unknown_type",
    )


def _record_arrays(
    cols: dict[str, Any], where: Where, decode: _Decoder
) -> tuple[dict[str, Any], int]:
    """One policy's columns of one record as arrays (infos: a list), checked for equal length."""
    out: dict[str, Any] = {}
    for name, value in cols.items():
        if _skip_column(name):
            continue
        if isinstance(value, str | bytes):
            out[name] = decode(value, name, where)
        elif name == "infos" and isinstance(value, list):
            out[name] = value
        elif isinstance(value, list):
            try:
                out[name] = np.asarray(value)
            except ValueError:
                raise SchemaError(
                    f"column {name!r} holds steps of different shapes",
                    where.merged(Where(column=name)),
                    reason="ragged",
                ) from None
        else:
            raise SchemaError(
                f"column {name!r} must be a list (one value per step) or a compressed string, "
                f"found {type(value).__name__}",
                where.merged(Where(column=name)),
                reason="bad_column",
            )
    if not out:
        raise SchemaError("record has no columns", where, reason="bad_record")
    ref = "obs" if "obs" in out else next(iter(out))
    n = len(out[ref])
    for name, arr in out.items():
        if len(arr) != n:
            raise SchemaError(
                f"column {name!r} has {len(arr)} values but {ref!r} has {n}; every column of a "
                "batch holds one value per step",
                where.merged(Where(column=name)),
                reason="unequal_lengths",
            )
    return out, n


_PolicyRecords: TypeAlias = dict[str | None, list[tuple[int, dict[str, Any], int]]]
"""Per policy id: ``(record index, column arrays, steps)`` of each record that parsed."""


def object_parts(
    records: list[tuple[int, Any]],
    decode: _Decoder,
    where_of: Callable[[int], Where],
    text_of: Callable[[int], str | None],
) -> Parsed:
    """Parsed objects ``(record index, obj | DataError)`` -> parts (per record / column loops).

    Args:
        records: ``(record index, parsed JSON object)`` per record, or the
            :class:`~offline_prelearner.errors.DataError` that parsing its line raised.
        decode: Decodes compressed columns (legacy base64(lz4(pickle))), refusing them unless
            ``legacy_pickle`` is on.
        where_of: The :class:`~offline_prelearner.errors.Where` of a record index, for errors.
        text_of: The raw text of a record index, kept with a refused record (None: not kept).

    Returns:
        The parts per policy of the records that parsed, and the records refused whole (sorted
        by index), with ``num_records = len(records)``.
    """
    res = Parsed(num_records=len(records))
    per_policy = _parse_records(records, decode, where_of, text_of, res.bad)
    bad_idx = _refuse_odd_records(per_policy, where_of, text_of, res.bad)
    res.parts.extend(_policy_parts(per_policy, bad_idx))
    res.bad.sort(key=lambda b: b.index)
    return res


def _parse_records(
    records: list[tuple[int, Any]],
    decode: _Decoder,
    where_of: Callable[[int], Where],
    text_of: Callable[[int], str | None],
    bad: list[BadRecord],
) -> _PolicyRecords:
    """Each record's column arrays, grouped by policy; a record that fails to parse or decode is
    appended to ``bad`` (a disabled legacy pickle is raised: it refuses the whole input)."""
    per_policy: _PolicyRecords = {}
    for idx, obj in records:
        where = where_of(idx)
        try:
            if isinstance(obj, DataError):
                raise obj
            pols = [(pid, *_record_arrays(c, where, decode)) for pid, c in parse_record(obj, where)]
        except DecodeError as e:
            if e.reason == "legacy_pickle_disabled":
                raise
            bad.append(BadRecord(idx, e, _guess_rows(obj), text_of(idx)))
            continue
        except DataError as e:
            bad.append(BadRecord(idx, e, _guess_rows(obj), text_of(idx)))
            continue
        for pid, arrays, n in pols:
            per_policy.setdefault(pid, []).append((idx, arrays, n))
    return per_policy


def _refuse_odd_records(
    per_policy: _PolicyRecords,
    where_of: Callable[[int], Where],
    text_of: Callable[[int], str | None],
    bad: list[BadRecord],
) -> set[int]:
    """Refuses each record whose columns or step shapes differ from the most common ones of its
    policy: appends it to ``bad`` with the steps it held over all policies, and returns the
    indices refused."""
    bad_idx: set[int] = set()
    refused: list[BadRecord] = []
    for pid, recs in per_policy.items():
        sig = Counter(_signature(a) for _, a, _ in recs).most_common(1)[0][0]
        for idx, arrays, _ in recs:
            if _signature(arrays) != sig and idx not in bad_idx:
                bad_idx.add(idx)
                refused.append(
                    BadRecord(idx, _differ(arrays, sig, pid, where_of(idx)), 0, text_of(idx))
                )
    rows_of = Counter[int]()
    for recs in per_policy.values():
        for idx, _, n in recs:
            rows_of[idx] += n
    for b in refused:
        b.rows = rows_of[b.index]
    bad.extend(refused)
    return bad_idx


def _policy_parts(per_policy: _PolicyRecords, bad_idx: set[int]) -> list[Part]:
    """One part per policy: the columns of its records not refused, concatenated, with the
    record index of each step."""
    parts = []
    for pid, recs in per_policy.items():
        good = [(i, a, n) for i, a, n in recs if i not in bad_idx]
        if not good:
            continue
        cols: dict[str, Any] = {}
        for name in good[0][1]:
            if name == "infos":
                cols[name] = _objects([x for _, a, _ in good for x in a[name]])
            else:
                cols[name] = np.concatenate([a[name] for _, a, _ in good])
        rec = np.repeat(
            np.array([i for i, _, _ in good], np.int64), np.array([n for _, _, n in good])
        )
        parts.append(Part(pid, cols, rec))
    return parts


def _signature(arrays: dict[str, Any]) -> tuple[Any, ...]:
    """Column names with their per-step shapes: records of one batch must agree on it."""
    return tuple(
        sorted(
            (k, None if k == "infos" or not isinstance(v, np.ndarray) else v.shape[1:])
            for k, v in arrays.items()
        )
    )


def _differ(
    arrays: dict[str, Any], sig: tuple[Any, ...], pid: str | None, where: Where
) -> DataError:
    mine, theirs = dict(_signature(arrays)), dict(sig)
    col = next(c for c in sorted(set(mine) | set(theirs)) if mine.get(c, -1) != theirs.get(c, -1))
    pol = "" if pid is None else f" of policy {pid!r}"
    if col not in mine:
        msg = f"record{pol} lacks column {col!r}, which the other records of this batch have"
    elif col not in theirs:
        msg = f"record{pol} has column {col!r}, which the other records of this batch lack"
    else:
        msg = f"column {col!r}{pol} has steps of shape {mine[col]}, other records {theirs[col]}"
    return SchemaError(msg, where.merged(Where(column=col)), reason="columns_differ")


def _guess_rows(obj: Any) -> int:
    """Steps a refused record held, when it can be told (its obs list, else its longest list
    column: a packed obs that failed to decode leaves the rewards), else 0."""
    if isinstance(obj, dict):
        obj = obj.get("value", obj) if set(obj) == {"value"} else obj
        pb = obj.get("policy_batches") if isinstance(obj, dict) else None
        if isinstance(pb, dict):
            return sum(_steps_of(c) for c in pb.values())
        return _steps_of(obj)
    return 0


def _steps_of(columns: Any) -> int:
    if not isinstance(columns, dict):
        return 0
    if isinstance(columns.get("obs"), list):
        return len(columns["obs"])
    return max((len(v) for v in columns.values() if isinstance(v, list)), default=0)


def _objects(values: list[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


# ---------------------------------------------------------------------------------------------
# Arrow tables, one record per row (the vectorized path)
# ---------------------------------------------------------------------------------------------
def unwrap_table(table: pa.Table) -> pa.Table:
    """``{"value": {...}}`` wrapped records, read by Arrow as one struct column, unwrapped.

    Args:
        table: A table of records, one per row.

    Returns:
        The struct's fields as the table's columns where ``table`` is exactly one struct
        column named ``value``; otherwise ``table`` itself.
    """
    if table.column_names == ["value"] and pa.types.is_struct(table.schema.field("value").type):
        col = table.column("value").combine_chunks()
        return pa.Table.from_arrays(col.flatten(), names=[f.name for f in col.type])
    return table


def _policy_columns(
    table: pa.Table, kinds: np.ndarray
) -> list[tuple[str | None, dict[str, _Column], np.ndarray]]:
    """Per policy: its columns over all records (null where absent) and where it is present."""
    out: list[tuple[str | None, dict[str, _Column], np.ndarray]] = []
    sb = kinds == SAMPLE_BATCH
    if sb.any():
        # Kept chunked (pyarrow.json reads a file in many blocks): combining them would copy
        # every list column once more; the flattened values are joined once, as numpy.
        cols = {
            n: table.column(n) for n in table.column_names if n not in _META and not _skip_column(n)
        }
        out.append((None, cols, sb))
    ma = kinds == MULTI_AGENT_BATCH
    if ma.any() and "policy_batches" in table.column_names:
        pb = table.column("policy_batches").combine_chunks()
        if pa.types.is_struct(pb.type):
            for i, f in enumerate(pb.type):
                sub = pb.field(i)
                if not pa.types.is_struct(sub.type):
                    continue
                valid = ma & ~_null_mask(sub) & ~_null_mask(pb)
                cols = {
                    g.name: sub.field(j) for j, g in enumerate(sub.type) if not _skip_column(g.name)
                }
                out.append((f.name, cols, valid))
    return out


def _null_mask(arr: _Column) -> np.ndarray:
    if arr.null_count == 0:
        return np.zeros(len(arr), bool)
    return np.asarray(arr.is_null().to_numpy(zero_copy_only=False))


def arrow_parts(
    table: pa.Table,
    decode: _Decoder,
    where_of: Callable[[int], Where],
) -> Parsed:
    """A table of records (one per row) -> parts; list lengths checked as vectors.

    Args:
        table: One record per row (``{"value": ...}`` wrappers are unwrapped first).
        decode: Decodes compressed columns (legacy base64(lz4(pickle))), refusing them unless
            ``legacy_pickle`` is on.
        where_of: The :class:`~offline_prelearner.errors.Where` of a record index, for errors.

    Returns:
        The parts per policy of the good records and the records refused whole.

    Raises:
        pyarrow.ArrowInvalid: Arrow typed the records in a way this path cannot take apart
            (also ``ArrowNotImplementedError`` / ``ArrowTypeError``); the caller then parses
            the records one by one with :func:`object_parts`.
    """
    table = unwrap_table(table)
    n_rec = table.num_rows
    res = Parsed(num_records=n_rec)
    if n_rec == 0:
        return res
    bad: dict[int, DataError] = {}
    kinds, known = _record_kinds(table, where_of, bad)
    policies = _policy_columns(table, kinds)
    if known.any() and not policies:
        for i in np.flatnonzero(known).tolist():
            bad[i] = SchemaError(
                "MultiAgentBatch record without readable 'policy_batches'",
                where_of(i).merged(Where(column="policy_batches")),
                reason="bad_record",
            )
    steps = np.zeros(n_rec, np.int64)
    prepared = []
    for pid, cols, present in policies:
        lengths, decoded = _lengths(cols, present, decode, where_of, bad)
        ref = "obs" if "obs" in lengths else next(iter(lengths), None)
        if ref is None:
            continue
        n = lengths[ref]
        # A record whose obs could not be decoded (a corrupt lz4 frame) still held the steps
        # its other columns hold: counted as rejected rows, not lost from the ledger.
        held = np.max(np.stack(list(lengths.values())), axis=0)
        steps[present] += np.maximum(np.where(n >= 0, n, held)[present], 0)
        _refuse_unequal_lengths(pid, lengths, ref, present, where_of, bad)
        prepared.append((pid, cols, present, n, decoded))
    while True:  # each pass refuses the records a failing column names; few passes
        parts = _flatten(prepared, bad, n_rec, where_of)
        if parts is not None:
            break
    res.parts = parts
    for i, e in sorted(bad.items()):
        res.bad.append(BadRecord(i, e, int(steps[i]), _row_text(table, i)))
    return res


def _record_kinds(
    table: pa.Table, where_of: Callable[[int], Where], bad: dict[int, DataError]
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's record ``type`` and whether it is one this reader knows; a row with no type
    or an unknown one is refused into ``bad``."""
    n_rec = table.num_rows
    if "type" in table.column_names:
        kinds = np.asarray(table.column("type").to_numpy(zero_copy_only=False), dtype=object)
    else:
        kinds = np.full(n_rec, None, dtype=object)
    known = (kinds == SAMPLE_BATCH) | (kinds == MULTI_AGENT_BATCH)
    for i in np.flatnonzero(~known).tolist():
        w = where_of(i)
        if kinds[i] is None:
            err = SchemaError(
                "record has no 'type' (expected SampleBatch or MultiAgentBatch)",
                w,
                reason="missing_type",
            )
        else:
            err = SchemaError(
                f"unknown record type {kinds[i]!r}",
                w.merged(Where(column="type")),
                reason="unknown_type",
            )
        bad[i] = err
    return kinds, known


def _refuse_unequal_lengths(
    pid: str | None,
    lengths: dict[str, np.ndarray],
    ref: str,
    present: np.ndarray,
    where_of: Callable[[int], Where],
    bad: dict[int, DataError],
) -> None:
    """Refuses into ``bad`` each record of policy ``pid`` whose columns do not all hold as many
    values as column ``ref`` (a length below 0: the column is missing). Records already refused
    keep their first error."""
    n = lengths[ref]
    for name, ln in lengths.items():
        for i in np.flatnonzero(present & (ln != n)).tolist():
            if i in bad:
                continue
            w = where_of(i).merged(Where(column=name))
            if ln[i] < 0 or n[i] < 0:
                missing = name if ln[i] < 0 else ref
                pol = "" if pid is None else f" of policy {pid!r}"
                bad[i] = SchemaError(
                    f"record{pol} lacks column {missing!r}, which the other records have",
                    w.merged(Where(column=missing)),
                    reason="columns_differ",
                )
            else:
                bad[i] = SchemaError(
                    f"column {name!r} has {ln[i]} values but {ref!r} has {n[i]}; every "
                    "column of a batch holds one value per step",
                    w,
                    reason="unequal_lengths",
                )


def _flatten(
    prepared: list[Any], bad: dict[int, DataError], n_rec: int, where_of: Callable[[int], Where]
) -> list[Part] | None:
    """Flattens every policy's good records; None after refusing records a column failed on."""
    ok = np.ones(n_rec, bool)
    ok[list(bad)] = False
    parts = []
    for pid, cols, present, n, decoded in prepared:
        good = present & ok
        if not good.any():
            continue
        idx = np.flatnonzero(good)
        rec = np.repeat(idx, n[idx])
        every = len(idx) == n_rec  # the usual case: no filter (a copy of every list column)
        mask = None if every else pa.array(good)
        flat: dict[str, Any] = {}
        for name, arr in cols.items():
            if name in decoded:
                flat[name] = np.concatenate([decoded[name][i] for i in idx.tolist()])
                continue
            values = pc.list_flatten(arr if mask is None else arr.filter(mask))
            if name == "infos":
                flat[name] = _infos_column(values)
                continue
            try:
                flat[name] = to_numpy(values, name, where_of(int(idx[0])).file)
            except ColumnValueError as e:
                rows = e.rows if e.rows is not None and len(e.rows) else np.arange(len(rec))
                first = np.searchsorted(rec, rec)  # first flat row of each row's record
                for r in np.unique(rows).tolist():
                    i = int(rec[r])
                    step = r - int(first[r])
                    msg = f"{e.message.split(' at row ')[0]} at step {step} of the batch"
                    bad.setdefault(
                        i, SchemaError(msg, where_of(i).merged(Where(column=name)), reason=e.reason)
                    )
                return None
        parts.append(Part(pid, flat, rec))
    return parts


def _lengths(
    cols: dict[str, _Column],
    present: np.ndarray,
    decode: _Decoder,
    where_of: Callable[[int], Where],
    bad: dict[int, DataError],
) -> tuple[dict[str, np.ndarray], dict[str, dict[int, np.ndarray]]]:
    """Per column, its length in each record (-1 where absent), and decoded compressed cells."""
    lengths: dict[str, np.ndarray] = {}
    decoded: dict[str, dict[int, np.ndarray]] = {}
    for name, arr in cols.items():
        t = arr.type
        if pa.types.is_null(t):
            continue  # absent from every record of this table
        if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            ln = pc.list_value_length(arr).fill_null(-1).to_numpy(zero_copy_only=False)
            lengths[name] = ln.astype(np.int64)
        elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t):
            cells = arr.to_pylist()
            ln = np.full(len(arr), -1, np.int64)
            out: dict[int, np.ndarray] = {}
            for i in np.flatnonzero(present).tolist():  # one blob per record: per record
                if cells[i] is None or i in bad:
                    continue
                try:
                    out[i] = decode(cells[i], name, where_of(i))
                except DecodeError as e:
                    if e.reason == "legacy_pickle_disabled":
                        raise
                    bad[i] = e
                    continue
                ln[i] = len(out[i])
            lengths[name], decoded[name] = ln, out
        else:
            for i in np.flatnonzero(present & ~_null_mask(arr)).tolist():
                bad.setdefault(
                    i,
                    SchemaError(
                        f"column {name!r} must be a list (one value per step) or a compressed "
                        f"string, found Arrow type {t}",
                        where_of(i).merged(Where(column=name)),
                        reason="bad_column",
                    ),
                )
    return lengths, decoded


def _infos_column(values: _Column) -> np.ndarray | None:
    """Per-step infos as dicts (per step by nature); None when all are empty ``{}``."""
    if pa.types.is_struct(values.type) and values.type.num_fields == 0:
        return None
    return _objects(values.to_pylist())


def _row_text(table: pa.Table, i: int) -> str:
    return json.dumps(table.slice(i, 1).to_pylist()[0], default=str)
