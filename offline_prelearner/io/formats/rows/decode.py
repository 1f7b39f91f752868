"""The rows format's columns decoded: a batch's columns -> the numpy arrays of its rows.

:class:`RowDecoder` reads each column the schema maps as its field needs (numbers, flags,
observations plain or composite, compressed cells decoded) and gives one
:class:`~.row_arrays.RowColumns` per batch; what does not fit is a
:class:`~offline_prelearner.io.arrow_numpy.ColumnValueError` naming the column and its rows. It
also recognises RLlib's packed observation columns in the data (:meth:`RowDecoder.
detect_packed`). What the rows mean (episodes, order, continuity) is the reader's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from ....config import DecodeLimits
from ....episodes import columns as C
from ....episodes import observations as O
from ....errors import Where
from ...arrow_numpy import ColumnValueError, decode_cells
from ...schema import ColumnSchema
from ..composite import is_struct, struct_leaves
from .frame import ColumnBatch
from .row_arrays import RowColumns, ids_column, infos_column, type_error

__all__ = ["RowDecoder"]


class RowDecoder:
    """Decodes a batch's columns into the arrays of its rows, as ``schema`` maps them.

    Args:
        schema: the column mapping; its fields' columns are taken as mapped (the reader checks
            that the ones it needs are). :meth:`detect_packed` may extend its compression.
        limits: size limits for decoding untrusted compressed cells.
        next_row: ``next_obs_from: next_row``: there is no ``new_obs`` column, the rows' own
            ``obs`` stand in for it.
    """

    def __init__(self, schema: ColumnSchema, limits: DecodeLimits, next_row: bool) -> None:
        self.schema = schema
        self.limits = limits
        self.next_row = next_row
        #: Columns recognised as RLlib's packed layout (``output_compress_columns``) in the data.
        self.detected_packed: list[str] = []

    def detect_packed(self, batch: pa.Table | Mapping[str, np.ndarray]) -> None:
        """Declares the observation columns that hold RLlib's packed cells as ``legacy_pickle``.

        RLlib records with ``output_compress_columns=[obs, new_obs]`` by default: those cells are
        ``base64(lz4_frame(pickle))`` text. Recognised from the data, not guessed from a name: the
        column is text where an observation is expected, and its first cell starts with the
        base64 of the lz4 frame magic. Decoding still needs the user's ``legacy_pickle``.

        Args:
            batch: The first batch of a dataset (an Arrow table or a dict of numpy columns);
                only the first non-null cell of the mapped ``obs`` / ``new_obs`` columns is
                looked at. Columns with a declared compression are left as they are.
        """
        for field_name in (C.OBS, C.NEW_OBS):
            col = self.schema.column(field_name)
            if col is None or col in self.schema.compression or col not in _names(batch):
                continue
            if _is_packed(batch[col]):
                compression = {**self.schema.compression, col: "legacy_pickle"}
                self.schema = dataclasses.replace(self.schema, compression=compression)
                self.detected_packed.append(col)

    def _array(self, frame: ColumnBatch, col: str, source: str | None) -> np.ndarray:
        codec = self.schema.codec(col)
        if codec is None:
            return frame.to_numpy(col)
        # Compressed cells are separate blobs: decoding is per cell by nature.
        return decode_cells(frame.cells(col), codec, col, source, self.limits)

    def _numeric(
        self,
        frame: ColumnBatch,
        field: str,
        source: str | None,
        kinds: str = "biuf",
        scalar: bool = False,
    ) -> np.ndarray:
        col = self.schema.column(field) or field  # mapped: checked in __init__
        arr = self._array(frame, col, source)
        if arr.dtype.kind not in kinds:
            raise type_error(arr, col, field, kinds, self.schema.codec(col), source)
        if scalar and arr.ndim != 1:
            raise ColumnValueError(
                f"column {col!r} must hold one scalar per row, found rows of shape {arr.shape[1:]}",
                Where(file=source, column=col),
                reason="bad_shape",
            )
        return arr

    def _observations(self, frame: ColumnBatch, field: str, source: str | None) -> np.ndarray:
        """``obs`` / ``new_obs``: numeric, or a struct column (Dict / Tuple space) as a record
        array of its leaves (:mod:`..composite`)."""
        col = self.schema.column(field) or field
        raw = frame.raw(col)
        if self.schema.codec(col) is None and is_struct(raw):
            return O.to_records(struct_leaves(raw, col, source))
        return self._numeric(frame, field, source)

    def _flag(self, frame: ColumnBatch, col: str | None, source: str | None) -> np.ndarray:
        if col is None:
            return np.zeros(frame.num_rows, bool)
        arr = self._array(frame, col, source)
        if arr.dtype.kind not in "biuf" or arr.ndim != 1:
            raise type_error(arr, col, col, "b", None, source)
        if arr.dtype.kind == "b":
            return arr
        bad = np.flatnonzero((arr != 0) & (arr != 1))
        if len(bad):
            raise ColumnValueError(
                f"column {col!r} must hold true/false (or 0/1), found "
                f"{arr[bad[0]]!r} at row {bad[0]}",
                Where(file=source, column=col, row=int(bad[0])),
                reason="bad_flag",
                rows=bad,
            )
        return np.asarray(arr != 0)

    def flags(self, frame: ColumnBatch, source: str | None) -> tuple[np.ndarray, np.ndarray]:
        """The ``terminateds`` and ``truncateds`` of a batch as bools (False where not mapped).

        A legacy ``dones`` column is read as ``terminateds``, as RLlib did.

        Args:
            frame: The batch's rows.
            source: The file named in errors; None when unknown.

        Returns:
            ``(terminated, truncated)``, bool ``[rows]`` each.

        Raises:
            ColumnValueError: a flag column holds other values than true/false (or 0/1).
        """
        term_col = self.schema.present(C.TERMINATEDS, frame.names)
        if term_col is None and self.schema.dones in frame.names:
            term_col = self.schema.dones  # legacy `dones`: read as terminateds, as RLlib did
        trunc_col = self.schema.present(C.TRUNCATEDS, frame.names)
        return self._flag(frame, term_col, source), self._flag(frame, trunc_col, source)

    def columns(self, frame: ColumnBatch, source: str | None) -> RowColumns:
        """The batch's columns as the numpy arrays episodes are built from (rows in frame order).

        Args:
            frame: The batch's rows.
            source: The file named in errors; None when unknown.

        Returns:
            ``obs`` / ``new_obs`` (the same array under ``next_row``), actions, rewards, flags,
            and where mapped ``t``, module ids, infos and extra columns, one row per frame row.

        Raises:
            ColumnValueError: a column cannot be read as its field needs (type, shape, flag
                values, undecodable cells); its ``rows`` name the offending rows where known.
        """
        s = self.schema
        obs = self._observations(frame, C.OBS, source)
        # next_row: each row's own obs stands in (the same array, no copy); what is really the
        # next observation is settled by position when the reader builds episodes (the next
        # row's obs is the next).
        new_obs = obs if self.next_row else self._observations(frame, C.NEW_OBS, source)
        if obs.shape[1:] != new_obs.shape[1:] or obs.dtype.names != new_obs.dtype.names:
            raise ColumnValueError(
                f"column {s.column(C.NEW_OBS)!r} rows have shape {new_obs.shape[1:]} but "
                f"{s.column(C.OBS)!r} rows have {obs.shape[1:]}",
                Where(file=source, column=s.column(C.NEW_OBS)),
                reason="bad_shape",
            )
        term, trunc = self.flags(frame, source)
        t_col = s.present(C.T, frame.names)
        mod_col = s.present(C.MODULE_ID, frame.names)
        info_col = s.present(C.INFOS, frame.names)
        return RowColumns(
            obs=obs,
            new_obs=new_obs,
            actions=self._numeric(frame, C.ACTIONS, source),
            rewards=self._numeric(frame, C.REWARDS, source, kinds="biuf", scalar=True),
            term=term,
            trunc=trunc,
            t=self._numeric(frame, C.T, source, kinds="iu", scalar=True) if t_col else None,
            module=ids_column(frame.to_numpy(mod_col)) if mod_col else None,
            infos=infos_column(frame.pylist(info_col), info_col, source) if info_col else None,
            extras={c: self._array(frame, c, source) for c in s.extras(frame.names)},
        )


#: ``base64(lz4 frame)`` starts with these characters (the frame magic 04 22 4D 18).
_PACKED_PREFIX = "BCJNG"


def _names(batch: pa.Table | pa.RecordBatch | Mapping[str, Any]) -> list[str]:
    if isinstance(batch, pa.Table | pa.RecordBatch):
        return list(batch.column_names)
    return list(batch.keys())


def _is_packed(column: Any) -> bool:
    """Text cells whose first non-null value is base64 of an lz4 frame."""
    if isinstance(column, pa.ChunkedArray | pa.Array):
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            return False
        valid = column.drop_null()
        return len(valid) > 0 and str(valid[0].as_py()).startswith(_PACKED_PREFIX)
    arr = np.asarray(column)
    if arr.dtype.kind not in "OU" or not len(arr):
        return False
    first = next((v for v in arr if v is not None), None)
    return isinstance(first, str) and first.startswith(_PACKED_PREFIX)
