"""Quarantine: what was refused under ``on_invalid="quarantine"``, with the reasons, as Parquet.

A :class:`~offline_prelearner.episodes.ledger.Rejection` keeps either the input rows a reader
refused (written as they came) or the episode validation refused after it was built (written as rows
in the recorder layout, :func:`~.formats.rows.writer.episodes_to_rows`). Every row gets two more
columns: ``_reject_reason`` (the error's reason, e.g. ``nan_reward``) and ``_reject_message`` (the
whole message, naming file, column, episode and step). Tables of different columns are concatenated
with permissive promotion (missing columns are null).

A refused episode with composite observations (gymnasium Dict / Tuple) is written with one
column per leaf, ``obs.<path>`` / ``new_obs.<path>``, as the prelearner's output writes them;
given the ``observation_space``, each leaf column carries its leaf space in its field metadata
(:func:`~.leaf_spaces.with_leaf_spaces`), so the file reads back as the output does.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import gymnasium as gym
import pyarrow as pa
import pyarrow.parquet as pq

from ..episodes.ledger import Rejection
from .formats.rows.writer import episodes_to_rows
from .leaf_spaces import with_leaf_spaces

__all__ = ["quarantine_rows", "quarantine_table", "write_quarantine"]


def quarantine_rows(rejection: Rejection) -> pa.Table | None:
    """The rows a rejection kept (its input rows, or its episode as rows), or None.

    Args:
        rejection: One refused item from a batch's ledger: the input rows a reader refused, or
            an episode validation refused after it was built.

    Returns:
        The input rows as they came, or the episode as rows in the recorder layout
        (:func:`~.formats.rows.writer.episodes_to_rows`); None when the rejection kept neither.
    """
    if rejection.rows is not None:
        return rejection.rows
    if rejection.episode is not None:
        return episodes_to_rows([rejection.episode])
    return None


def write_quarantine(
    rejections: list[Rejection],
    out_dir: str | os.PathLike[str],
    observation_space: gym.Space[Any] | None = None,
) -> str | None:
    """Writes quarantined rows, with ``_reject_reason`` and ``_reject_message``, to Parquet.

    ``observation_space`` (a composite one) puts each leaf column's space in its field metadata;
    without it the leaf columns are written all the same, without spaces. ``out_dir`` may be a
    store's prefix (``s3://bucket/prefix``). Returns the path written, or None when nothing was
    quarantined.

    Args:
        rejections: What was refused (a ledger's rejections); those without rows or with zero
            rows are skipped.
        out_dir: The folder (created if missing) or store prefix to write one new
            ``quarantine-<12 hex>.parquet`` file into.
        observation_space: The dataset's observation space; a composite one (Dict / Tuple)
            puts each leaf space in its ``obs.<path>`` column's field metadata. None writes the
            columns without spaces.

    Returns:
        The path or URI of the file written, or None when there were no rows (nothing is
        written then).
    """
    table = quarantine_table(rejections, observation_space)
    if table is None:
        return None
    from .formats.rows.writer import write_parquet
    from .stores import is_remote, locate

    name = f"quarantine-{uuid.uuid4().hex[:12]}.parquet"
    if is_remote(out_dir):  # a store's prefix: one object, written whole
        return write_parquet(table, locate(out_dir).join(name).uri)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(os.fspath(out_dir), name)
    pq.write_table(table, path)
    return path


def quarantine_table(
    rejections: list[Rejection], observation_space: gym.Space[Any] | None = None
) -> pa.Table | None:
    """The rows of ``rejections`` with ``_reject_reason`` and ``_reject_message`` as one table
    (what :func:`write_quarantine` writes; the batch job writes it per unit), or None.

    Args:
        rejections: What was refused, in order; each contributes its rows
            (:func:`quarantine_rows`), every row tagged with the rejection's reason and message.
        observation_space: The dataset's observation space, to put leaf spaces in the field
            metadata of composite observation columns; None leaves the metadata out.

    Returns:
        The concatenated rows (columns missing from some tables are null), or None when no
        rejection kept any row.
    """
    tables = []
    for rej in rejections:
        rows = quarantine_rows(rej)
        if rows is None or rows.num_rows == 0:
            continue
        n = rows.num_rows
        t = rows.append_column("_reject_reason", pa.array([rej.reason] * n, pa.string()))
        tables.append(
            t.append_column("_reject_message", pa.array([str(rej.error)] * n, pa.string()))
        )
    if not tables:
        return None
    table = pa.concat_tables(tables, promote_options="permissive")
    return with_leaf_spaces(table, observation_space)
