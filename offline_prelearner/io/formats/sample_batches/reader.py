"""The ``sample_batches`` reader: RLlib old-stack SampleBatch / MultiAgentBatch records -> episodes.

Input: records as RLlib's old ``JsonWriter`` wrote them -- JSON lines of ``{"type": "SampleBatch",
<column>: [one value per step], ...}`` or ``{"type": "MultiAgentBatch", "count": n,
"policy_batches": {policy id: {<column>: [...]}}}``, optionally wrapped as ``{"value": {...}}`` --
given as an Arrow table with one record per row (Ray Data ``read_json``; Parquet with one
SampleBatch per row) to :meth:`SampleBatchesReader.read`, or as a file to
:meth:`SampleBatchesReader.read_file`.

Semantics at the edges:

* **Episodes out of batches.** A batch's steps are flattened (per column, with numpy) and grouped
  by the ``rows`` reader through the ``rllib_old_stack`` schema: one episode per ``eps_id``
  (MultiAgentBatch: per ``(policy id, eps_id, agent_index)``), ordered by ``t``, so a batch
  holding several episodes gives several episodes. Pieces of one episode in other batches or
  files come out as fragments (``t_started`` > 0) for :func:`~offline_prelearner.episodes.stitch.
  stitch_fragments` to join; without ``t`` the arrival order is the step order (the reader keeps
  state across batches, per policy).
* **Ids.** ``Episode.id`` is the ``eps_id`` as recorded. SampleBatch data is single-agent:
  ``agent_id`` and ``module_id`` are None and ``agent_index`` is kept as an extra column only if it
  is not all 0. MultiAgentBatch: ``agent_id = agent_index``, ``module_id = policy id``.
* **dones.** Legacy data with ``dones`` but no ``terminateds``: by default (``dones="auto"``) a
  done step is *truncated* where its info says ``"TimeLimit.truncated": true`` (gym's TimeLimit
  wrapper) and *terminated* otherwise; ``dones="terminated"`` / ``"truncated"`` force one reading.
* **Columns.** ``obs, new_obs, actions, rewards, terminateds, truncateds, eps_id, agent_index, t,
  infos`` are fields; every other per-step column (``unroll_id, action_prob, action_logp,
  action_dist_inputs, vf_preds, prev_actions, ...``) is kept as an extra. Per-sequence columns of
  recurrent data (``seq_lens``, ``state_in_*``) are dropped. Infos that are all ``{}`` are dropped
  (``infos=None``), as :meth:`Episode.from_state` does.
* **Compressed columns** (one ``base64(lz4(pickle))`` string per column per record) are decoded
  only with ``legacy_pickle=True``, through the restricted unpickler; otherwise a
  :class:`~offline_prelearner.errors.DecodeError` (raised under every policy) says to pass
  ``--legacy-pickle``.

**Bad input** -- malformed JSON, a missing or unknown ``type``, columns of unequal length, a record
lacking a column the others have, undecodable or refused compressed strings -- is a
:class:`~offline_prelearner.errors.DataError` naming the file, the line (or the record's index in
the batch) and the column; under ``on_invalid="skip"``/``"quarantine"`` the record is refused whole
and counted (its steps in ``rows_rejected``, the record in :attr:`records_rejected`). Step-level
problems (an ``eps_id`` null in some steps, ``t`` not consecutive, a done flag mid-episode) reject
the episode, naming the line and the step within its record.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from ....config import ReadConfig
from ....episodes import columns as C
from ....episodes.ledger import EpisodeBatch
from ....errors import ConfigError, DataError, DecodeError, Where
from ...schema import load_schema
from ...stores import is_remote, locate, open_local
from ..rows.reader import RowsReader
from .records import BadRecord, Parsed, Part, _Decoder, arrow_parts, object_parts

__all__ = ["DonesRule", "SampleBatchesReader"]

DonesRule = Literal["auto", "terminated", "truncated"]
_DONES_RULES = ("auto", "terminated", "truncated")
#: The column that carries the policy id into the rows reader (its ``module_id``).
_POLICY_COLUMN = "__policy_id"
_TIME_LIMIT_KEY = "TimeLimit.truncated"


class SampleBatchesReader:
    """Reads old-stack records into episodes; see the module docstring for the semantics.

    Args:
        config: ``schema`` None means the ``rllib_old_stack`` preset; ``on_invalid``,
            ``legacy_pickle``, ``check_continuity`` and ``limits`` apply as for the rows reader.
        dones: How a legacy ``dones`` flag (without ``terminateds``) is read: ``"auto"``,
            ``"terminated"`` or ``"truncated"`` (see the module docstring).
    """

    def __init__(self, config: ReadConfig | None = None, *, dones: DonesRule = "auto") -> None:
        self.config = config if config is not None else ReadConfig(format="sample_batches")
        if dones not in _DONES_RULES:
            raise ConfigError(f"dones must be one of {_DONES_RULES}, found {dones!r}")
        self.dones = dones
        base = load_schema(
            self.config.schema if self.config.schema is not None else "rllib_old_stack"
        )
        self.schema = dataclasses.replace(
            base, columns={**base.columns, C.MODULE_ID: _POLICY_COLUMN}
        )
        self._decode = _Decoder(self.config.legacy_pickle, self.config.limits)
        self._rows: dict[str | None, RowsReader] = {}
        #: Records seen, and records refused whole by reason (counted across calls).
        self.records_read = 0
        self.records_rejected: Counter[str] = Counter()

    # ------------------------------------------------------------------ entry points
    def read(
        self,
        batch: pa.Table | Mapping[str, Any],
        source: str | None = None,
        *,
        first_line: int | None = None,
    ) -> EpisodeBatch:
        """One batch of records (one per row) -> episodes; every step kept or rejected.

        ``first_line``: the file line of the batch's first record, when the batch is a whole
        file (messages then name lines; otherwise the record's index in the batch).

        Args:
            batch: One record per row: an Arrow table / record batch (as ``pyarrow.json`` or
                Ray Data's ``read_json`` give it), or a dict of columns, one value per record.
            source: The file named in errors; None when unknown.
            first_line: The 1-based file line of the first record when ``batch`` is a whole
                file; None names records by their index in the batch.

        Returns:
            The episodes of every policy; records refused whole and refused steps are in the
            ledger (also counted in :attr:`records_rejected`).

        Raises:
            DataError: A record or episode is refused and ``config.on_invalid`` is ``"raise"``.
        """
        if not isinstance(batch, pa.Table | pa.RecordBatch):
            batch = pa.table({k: pa.array(list(v)) for k, v in batch.items()})
        elif isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])

        try:
            parsed = arrow_parts(batch, self._decode, lambda i: Where(file=source))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            # A record Arrow typed unlike the others (``{"value": 42}`` among SampleBatches):
            # record by record, so the one at fault is named and refused, not a pyarrow error.
            records = [  # a column another record has is null here: leave it out
                (i, {k: v for k, v in rec.items() if v is not None})
                for i, rec in enumerate(batch.to_pylist())
            ]
            parsed = object_parts(records, self._decode, lambda i: Where(file=source), _no_text)
        return self._episodes(parsed, source, first_line)

    def read_file(self, path: str | os.PathLike[str]) -> EpisodeBatch:
        """A JSON-lines file (or Parquet, one record per row) -> episodes, naming lines in errors.

        JSON lines go through Arrow's parser when it can type the whole file without loss (no
        blank lines, infos all empty); otherwise each line is parsed on its own.

        Args:
            path: A local path or store URI; ``.parquet`` / ``.pq`` is read as a table with
                one record per row, anything else as JSON lines (a line that is not JSON is a
                refused record, not an error).

        Returns:
            The file's episodes, as :meth:`read` gives them, with errors naming file lines.

        Raises:
            OSError: The file cannot be read.
            DataError: A record or episode is refused and ``config.on_invalid`` is ``"raise"``.
        """
        path = os.fspath(path)
        if path.endswith((".parquet", ".pq")):
            from ...sources import read_table

            return self.read(read_table(path), source=path)
        if is_remote(path):
            data = locate(path).read_bytes()
        else:
            with open_local(path) as fh:
                data = fh.read()
        fast = _arrow_json(data)
        if fast is not None:
            return self.read(fast, source=path, first_line=1)
        lines = data.split(b"\n")
        if lines and lines[-1].strip() == b"":
            lines.pop()
        records: list[tuple[int, Any]] = []
        for i, raw in enumerate(lines):  # one JSON document per line: per record by nature
            try:
                records.append((i, json.loads(raw)))
            except ValueError as e:
                records.append(
                    (
                        i,
                        DecodeError(
                            f"line is not valid JSON: {e}", Where(file=path), reason="bad_json"
                        ),
                    )
                )

        def text_of(i: int) -> str:
            return lines[i].decode("utf-8", "replace")

        parsed = object_parts(records, self._decode, lambda i: Where(file=path), text_of)
        return self._episodes(parsed, path, 1)

    # ------------------------------------------------------------------ records -> episodes
    def _episodes(self, parsed: Parsed, source: str | None, first_line: int | None) -> EpisodeBatch:
        out = EpisodeBatch()
        self.records_read += parsed.num_records
        for bad in parsed.bad:
            bad.error = _at_record(bad.error, bad.index, first_line)
            self._refuse(out, bad)
        for part in parsed.parts:
            frame = self._frame(part)
            reader = self._rows.get(part.policy)
            if reader is None:
                cfg = dataclasses.replace(self.config, format="rows", schema=self.schema)
                reader = self._rows[part.policy] = RowsReader(cfg)
            try:
                got = reader.read(frame, source)
            except DataError as e:
                raise _relocate(e, part, first_line) from None
            for rej in got.rejections:
                rej.error = _relocate(rej.error, part, first_line)
            out.extend(got)
        return out

    def _refuse(self, out: EpisodeBatch, bad: BadRecord) -> None:
        out.ledger.rows_in += bad.rows
        payload = None
        if self.config.on_invalid == "quarantine":
            payload = pa.table({"_record": pa.array([bad.text], pa.string())})
        out.reject(bad.error, bad.rows, payload, episodes=0, policy=self.config.on_invalid)
        self.records_rejected[bad.error.reason] += 1

    def _frame(self, part: Part) -> dict[str, np.ndarray]:
        """A part's columns as the rows reader's input (flags, ids and infos settled)."""
        cols = dict(part.columns)
        if C.TERMINATEDS not in cols and C.DONES in cols:
            cols[C.TERMINATEDS], cols[C.TRUNCATEDS] = self._split_dones(
                np.asarray(cols.pop(C.DONES)).astype(bool), cols.get(C.INFOS)
            )
        infos = cols.get(C.INFOS)
        if C.INFOS in cols and (infos is None or not any(infos.tolist())):
            del cols[C.INFOS]  # all {}: nothing to keep, as Episode.from_state does
        n = len(part.rec)
        agent = cols.get("agent_index")
        if part.policy is None:
            if agent is not None and agent.dtype.kind in "biuf" and not np.any(agent):
                del cols["agent_index"]  # single agent: agent_id None, as RLlib's new stack
        else:
            cols[_POLICY_COLUMN] = np.full(n, part.policy, dtype=object)
        return cols

    def _split_dones(
        self, dones: np.ndarray, infos: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        trunc = np.zeros_like(dones)
        if self.dones == "truncated":
            return np.zeros_like(dones), dones
        if self.dones == "auto" and infos is not None:
            at = np.flatnonzero(dones)  # info lookups only on done steps (about one per episode)
            said = [
                isinstance(i, dict) and bool(i.get(_TIME_LIMIT_KEY)) for i in infos[at].tolist()
            ]
            trunc[at[np.asarray(said, bool)]] = True
        return dones & ~trunc, trunc


def _no_text(i: int) -> str | None:
    return None


def _at_record(err: DataError, rec: int, first_line: int | None, extra: str = "") -> DataError:
    """``err`` pointed at record ``rec``: its file line (``row``) when known, else its index."""
    if first_line is None:
        msg, row = f"{err.message} (record {rec} of the batch{extra})", rec
    else:
        msg, row = f"{err.message} (line {first_line + rec}{extra})", first_line + rec
    return type(err)(msg, dataclasses.replace(err.where, row=row), reason=err.reason)


def _relocate(err: DataError, part: Part, first_line: int | None) -> DataError:
    """A rows-reader error (``row`` = flat step) re-pointed at the record's line and step."""
    r = err.where.row
    if r is None or not 0 <= r < len(part.rec):
        return err
    rec = int(part.rec[r])
    step = r - int(np.searchsorted(part.rec, rec))  # steps of a record are contiguous in a part
    pol = "" if part.policy is None else f", policy {part.policy!r}"
    return _at_record(err, rec, first_line, f", step {step} of its batch{pol}")


def _arrow_json(data: bytes) -> pa.Table | None:
    """The file through ``pyarrow.json`` when that is lossless, else None (parse line by line)."""
    import pyarrow.json as pajson

    if not data.strip() or b"\n\n" in data or data.startswith(b"\n"):
        return None
    try:
        table = pajson.read_json(pa.BufferReader(data))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    from .records import unwrap_table

    table = unwrap_table(table)
    for f in table.schema:
        t = f.type
        if f.name == "infos" and not _empty_struct_list(t):
            return None  # infos with keys: Arrow would add None for keys a step lacks
        if pa.types.is_struct(t) and f.name == "policy_batches":
            for pol in t:
                if pa.types.is_struct(pol.type):
                    for col in pol.type:
                        if col.name == "infos" and not _empty_struct_list(col.type):
                            return None
    return table


def _empty_struct_list(t: pa.DataType) -> bool:
    return bool(
        (pa.types.is_list(t) or pa.types.is_large_list(t))
        and pa.types.is_struct(t.value_type)
        and t.value_type.num_fields == 0
    ) or (pa.types.is_list(t) and pa.types.is_null(t.value_type))
