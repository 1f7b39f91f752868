"""Struct observation columns (gymnasium ``Dict`` / ``Tuple`` spaces) -> per-leaf arrays.

RLlib with a ``Dict`` observation space and Minari's struct arrays store ``obs`` / ``new_obs`` as
Arrow struct columns (nested for nested spaces; a ``Tuple`` as fields ``"0"``, ``"1"``...). Each
leaf converts like any tensor column (:func:`~offline_prelearner.io.arrow_numpy.to_numpy`), named
by its path (``"desired_goal"``, ``"a.b"``; see :mod:`offline_prelearner.episodes.observations`).

Readers then hold the leaves as one numpy *record* array (one field per leaf path,
:func:`~offline_prelearner.episodes.observations.to_records`): the rows reader's row machinery --
grouping, sorting, duplicate and continuity checks, the scatter into episodes -- runs unchanged on
one array per column, and the batch's
:class:`~offline_prelearner.episodes.episode_columns.EpisodeColumns` holds it as its ``obs``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ...errors import Where
from ..arrow_numpy import ColumnValueError, to_numpy

__all__ = ["is_struct", "struct_leaves"]


def is_struct(column: Any) -> bool:
    """Whether ``column`` (Arrow, or anything else) is an Arrow struct column.

    Args:
        column: Any batch column: an Arrow (chunked) array, a numpy array or anything else; only
            an Arrow array of struct type answers True.

    Returns:
        True for an Arrow struct column (a gymnasium ``Dict`` / ``Tuple`` observation).
    """
    return isinstance(column, pa.ChunkedArray | pa.Array) and pa.types.is_struct(column.type)


def struct_leaves(column: Any, name: str, source: str | None = None) -> dict[str, np.ndarray]:
    """A struct column as ``{leaf path: [rows, *leaf_shape]}`` (nested structs flattened).

    Args:
        column: An Arrow struct column (chunked or not; see :func:`is_struct`), one row per
            step; nested structs are walked down to their leaves.
        name: The column's name (``"obs"``, ``"new_obs"``), used in error messages and to name
            the leaves' columns (``"obs.a.b"``).
        source: The file the column came from, for error messages; None when unknown.

    Returns:
        One numeric numpy array per leaf, keyed by its dotted path (``"a.b"``; a ``Tuple``'s
        fields are ``"0"``, ``"1"``...), each with the column's row count as its first axis.

    Raises:
        ColumnValueError: The struct has no fields, a row is null, a field name contains
            ``"."``, or a leaf is not numeric (reason ``bad_type`` / ``null_value``).
    """
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    out: dict[str, np.ndarray] = {}
    _leaves(arr, name, "", source, out)
    if not out:
        raise ColumnValueError(
            f"column {name!r} is a struct with no fields",
            Where(file=source, column=name),
            reason="bad_type",
        )
    return out


def _leaves(
    arr: pa.StructArray, name: str, prefix: str, source: str | None, out: dict[str, np.ndarray]
) -> None:
    where = f"{name}.{prefix}" if prefix else name
    if arr.null_count:
        row = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
        raise ColumnValueError(
            f"column {where!r} has a null observation at row {row}",
            Where(file=source, column=name, row=row),
            reason="null_value",
        )
    for field, child in zip(arr.type, arr.flatten(), strict=True):
        if "." in field.name:
            raise ColumnValueError(
                f"column {name!r}: field {field.name!r} contains '.', the leaf path separator",
                Where(file=source, column=name),
                reason="bad_type",
            )
        path = f"{prefix}.{field.name}" if prefix else field.name
        if pa.types.is_struct(child.type):
            _leaves(child, name, path, source, out)
            continue
        leaf = to_numpy(child, f"{name}.{path}", source, field=field)
        if leaf.dtype.kind not in "biuf":
            raise ColumnValueError(
                f"column {name!r}: leaf {path!r} must be numeric, found dtype {leaf.dtype}",
                Where(file=source, column=f"{name}.{path}"),
                reason="bad_type",
            )
        out[path] = leaf
