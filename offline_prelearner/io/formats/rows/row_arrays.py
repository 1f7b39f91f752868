"""A frame's columns as the rows reader uses them: :class:`RowColumns` (every canonical column
converted to numpy, in frame row order), the conversions of single columns (ids, infos, id codes)
and the helpers that say what is wrong with a column (file, column, episode, batch row).
See :mod:`.reader`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import compress
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ....episodes import columns as C
from ....errors import DataError, SchemaError, Where
from ...arrow_numpy import ColumnValueError
from .frame import ColumnBatch, factorize

__all__ = ["RowColumns", "factorize_column", "ids_column", "infos_column", "locate", "type_error"]


@dataclass
class RowColumns:
    """The converted columns of one frame (what episodes are built from), in frame row order."""

    obs: np.ndarray
    new_obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    term: np.ndarray
    trunc: np.ndarray
    t: np.ndarray | None
    module: np.ndarray | None
    infos: list[Any] | None
    extras: dict[str, np.ndarray]

    def select(self, keep: np.ndarray) -> RowColumns:
        """The rows where ``keep`` (bool per row) is true.

        Args:
            keep: bool ``[rows]``, one flag per frame row.

        Returns:
            New columns holding the kept rows in order (copies; ``t`` / ``module`` / ``infos``
            stay None where they were).
        """
        idx = np.flatnonzero(keep)

        def take(a: np.ndarray) -> np.ndarray:
            return a.take(idx, axis=0)

        return RowColumns(
            obs=take(self.obs),
            new_obs=take(self.new_obs),
            actions=take(self.actions),
            rewards=take(self.rewards),
            term=take(self.term),
            trunc=take(self.trunc),
            t=None if self.t is None else take(self.t),
            module=None if self.module is None else take(self.module),
            infos=None if self.infos is None else list(compress(self.infos, keep.tolist())),
            extras={k: take(v) for k, v in self.extras.items()},
        )

    def content(self) -> list[np.ndarray]:
        """The columns an episode is built from (what makes two rows copies; not t, not infos)."""
        mod = [] if self.module is None else [self.module]
        return [
            self.obs,
            self.new_obs,
            self.actions,
            self.rewards,
            self.term,
            self.trunc,
            *self.extras.values(),
            *mod,
        ]


# ---------------------------------------------------------------------------------------------
def infos_column(values: list[Any], col: str, source: str | None) -> list[Any]:
    """Per-row infos; JSON text cells (how this project's writer stores them) are decoded.

    Args:
        values: One Python value per row (dicts, None, or JSON text as str / bytes).
        col: The infos column's name, for errors.
        source: The file named in errors; None when unknown.

    Returns:
        The values, with every text cell replaced by its decoded JSON.

    Raises:
        ColumnValueError: A text cell is not JSON (reason ``bad_infos``; ``rows`` lists every
            such row).
    """
    out: list[Any] = []
    bad: list[int] = []
    for i, v in enumerate(values):  # Python objects: per row by nature
        if isinstance(v, str | bytes):
            try:
                v = json.loads(v)
            except ValueError:
                bad.append(i)
        out.append(v)
    if bad:
        raise ColumnValueError(
            f"column {col!r} holds text that is not JSON (row {bad[0]})",
            Where(file=source, column=col, row=bad[0]),
            reason="bad_infos",
            rows=np.asarray(bad, np.int64),
        )
    return out


def ids_column(values: np.ndarray) -> np.ndarray:
    """An id column as objects, NaN as None (Ray's numpy format turns null columns into NaN).

    Args:
        values: ``[rows]`` ids (e.g. module ids) as Ray hands them over.

    Returns:
        ``values`` itself unless it is floating point; then an object copy with NaN as None.
    """
    if values.dtype.kind != "f":
        return values
    out = values.astype(object)
    out[np.isnan(values)] = None
    return out


def factorize_column(
    frame: ColumnBatch, col: str, source: str | None
) -> tuple[np.ndarray, list[Any]]:
    """``(codes, values)`` of column ``col``: an int code per row and the distinct values; a column
    that cannot be factorized raises :class:`SchemaError` naming the file and column.

    Args:
        frame: The batch's rows.
        col: An id column of the batch (episode or agent ids).
        source: The file named in errors; None when unknown.

    Returns:
        int64 ``[rows]`` codes and the distinct values in order of first appearance
        (:func:`~.frame.factorize`; null is a value, None).

    Raises:
        SchemaError: The column holds non-scalars or a type Arrow cannot hash.
    """
    raw = frame.raw(col)
    if isinstance(raw, pa.ChunkedArray) and (
        pa.types.is_binary(raw.type) or pa.types.is_large_binary(raw.type)
    ):
        _refuse_non_utf8(raw, col, source)
    try:
        return factorize(raw)
    except SchemaError as e:
        raise e.at(file=source, column=col) from None


def _refuse_non_utf8(ids: pa.ChunkedArray, col: str, source: str | None) -> None:
    """Refuses an id column of bytes that are not all UTF-8: ids are written as text, and bytes
    decoded with replacement would merge two ids (``ff 31`` and ``fe 31`` are both U+FFFD '1').
    One vector validation; the first bad row is looked for only when there is one."""
    try:
        pc.cast(ids, pa.string())  # a safe cast validates UTF-8
        return
    except pa.ArrowInvalid:
        pass
    row, value = next(
        (i, v) for i, v in enumerate(ids.to_pylist()) if v is not None and not _utf8(v)
    )
    shown = repr(value) if len(value) <= 32 else repr(value[:32])[:-1] + "...'"
    raise SchemaError(
        f"episode or agent ids are bytes that are not UTF-8 text ({shown} at row {row}); ids "
        "are kept as text, and bytes decoded with replacement would merge distinct ids: "
        "rewrite the column as text (e.g. hex)",
        Where(file=source, column=col, row=row),
        reason="bad_id",
    )


def _utf8(value: bytes) -> bool:
    try:
        value.decode()
    except UnicodeDecodeError:
        return False
    return True


def locate(
    err: DataError,
    source: str | None,
    rows: np.ndarray,
    episode_id: Any = None,
    row: int | None = None,
) -> DataError:
    """``err`` with file, episode and *batch* row (``row`` / ``err.where.row`` are frame rows;
    a row carried from the previous batch, negative in ``rows``, is named by no row).

    Args:
        err: An error whose row, if any, is a frame row.
        source: The file named when ``err`` names none; None when unknown.
        rows: int ``[m]`` batch row of each frame row (negative: carried from the previous
            batch).
        episode_id: The episode to name; None keeps ``err``'s.
        row: The frame row to name; None keeps ``err``'s.

    Returns:
        A new error of ``err``'s type with the same message and reason, naming the batch row.
    """
    w = err.where
    r = row if row is not None else w.row
    if r is not None and rows[r] < 0:
        r = None
    return type(err)(
        err.message,
        Where(
            file=w.file if w.file is not None else source,
            column=w.column,
            episode_id=episode_id if episode_id is not None else w.episode_id,
            row=None if r is None else int(rows[r]),
            timestep=w.timestep,
        ),
        reason=err.reason,
    )


def type_error(
    arr: np.ndarray, col: str, field: str, kinds: str, codec: str | None, source: str | None
) -> ColumnValueError:
    """The error for column ``col`` (field ``field``) holding values not of ``kinds``, with an
    example value and, for encoded cells read without a codec, a hint.

    Args:
        arr: The column as read; its first non-null value among the first 1,000 is shown.
        col: The column's name in the data.
        field: The field it is mapped to (``obs``, ``actions``...).
        kinds: The numpy dtype kinds accepted: ``"biuf"``, ``"iu"`` or ``"b"``.
        codec: The compression declared for the column; None adds the hint to declare one
            when ``obs`` / ``new_obs`` / ``actions`` hold text.
        source: The file named in the error; None when unknown.

    Returns:
        The error (reason ``bad_type``), for the caller to raise.
    """
    want = {"biuf": "numbers or bools", "iu": "integers", "b": "true/false flags"}.get(kinds, kinds)
    sample = next((v for v in arr[:1000].tolist() if v is not None), None) if len(arr) else None
    found = "strings" if isinstance(sample, str) else f"dtype {arr.dtype}"
    msg = f"column {col!r} (field {field!r}) must hold {want}, found {found} (e.g. {sample!r:.60})"
    if isinstance(sample, str | bytes) and codec is None and field in (C.OBS, C.NEW_OBS, C.ACTIONS):
        msg += (
            ". If these are compressed cells, declare them in the schema: RLlib's "
            "output_compress_columns -> schema 'rllib_compressed' with legacy_pickle=True "
            f"(--legacy-pickle); this project's codec -> compression {{{col!r}: "
            "'lz4_msgpack'}"
        )
    return ColumnValueError(msg, Where(file=source, column=col), reason="bad_type")
