"""Samples as numpy arrays or torch tensors: the public way to read what ``process`` wrote.

Every tensor layout this library writes or reads (``lists``, ``fast``, ``rllib``, Arrow's
``fixed_shape_tensor``...; see :mod:`.fast_tensor`) comes back as one array ``[n, *shape]`` per
column, so a learner loop needs no knowledge of how the file was laid out::

    import offline_prelearner as op

    cols = op.read_samples("out/")                       # {column: np.ndarray}, every file
    cols = op.read_samples("s3://bucket/out")            # a store's URI, as the CLI takes it
    cols = op.read_samples("out/", columns=["obs", "actions", "rewards"])
    batch = op.to_torch(cols)                            # {column: torch.Tensor}
    cols = op.to_numpy(table)                            # a pyarrow Table / RecordBatch

Strings and ids (``eps_id``, ``module_id``) come back as object arrays; :func:`to_torch` leaves
them out unless they are asked for by name (then it refuses them: torch has no string tensors).
Arrays of the fast layout are read-only views of the file's buffers where they arrive in one
piece; :func:`to_torch` copies those (torch tensors are writable), and shares memory otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from ..errors import UnsupportedFormatError
from .arrow_numpy import column_to_numpy
from .manifest import MANIFEST_FILE, Manifest
from .parquet_guard import open_parquet
from .stores import locate

if TYPE_CHECKING:
    import torch

__all__ = ["read_samples", "to_numpy", "to_torch"]

_PARQUET = (".parquet", ".pq")


def to_numpy(
    data: pa.Table | pa.RecordBatch, columns: Sequence[str] | None = None
) -> dict[str, np.ndarray]:
    """The columns of an Arrow table (or record batch) as numpy arrays ``[n_rows, *shape]``.

    Args:
        data: What ``pq.read_table``, Ray Data's ``batch_format="pyarrow"`` or the prelearner
            gives.
        columns: The columns to convert, in this order (default: all, in the table's order).

    Returns:
        ``{column: array}``: numbers and bools as numeric arrays whatever their tensor layout,
        strings and ids as object arrays.

    Raises:
        KeyError: A named column is not in ``data``.
        ColumnValueError: A column cannot form one array (ragged lists, nulls in a numeric
            column); the message names the column and the first row.
    """
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if not isinstance(data, pa.Table):
        raise TypeError(f"to_numpy takes a pyarrow Table or RecordBatch, found {type(data)}")
    names = list(data.column_names) if columns is None else list(columns)
    missing = [n for n in names if n not in data.column_names]
    if missing:
        raise KeyError(f"no column {missing[0]!r}; the columns are {data.column_names}")
    return {n: column_to_numpy(data, n) for n in names}


def read_samples(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    columns: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """Every row of Parquet samples (or rows) as numpy arrays, one per column.

    Args:
        path: A Parquet file, a folder, or a list of them: local paths or store URIs
            (``s3://bucket/out``, ``gs://``, ``az://``...), as the CLI takes them. A folder that
            holds ``_manifest.json`` (a ``process``, ``convert`` or ``record`` output) gives the
            files its manifest lists, checked present and of their recorded size; any other
            folder gives its ``*.parquet`` files (recursively, in name order, ``_`` and ``.``
            names skipped).
        columns: The columns to read, in this order (default: all). Only these are read from
            the files.

    Returns:
        ``{column: array}`` over all files in order, as :func:`to_numpy` gives them.

    Raises:
        FileNotFoundError: Nothing at ``path``, or a file the manifest lists is missing.
        UnsupportedFormatError: A file that is not Parquet.
        DataError: A manifest that cannot be read, a listed file whose size changed.
    """
    files = _files(path)
    # Each footer passes the same checks as every input's (a samples file is a file too).
    want = list(columns) if columns is not None else None
    parts = [to_numpy(open_parquet(str(f)).read(columns=want), columns) for f in files]
    if not parts:
        return {}
    if len(parts) == 1:
        return parts[0]
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def to_torch(
    data: Mapping[str, np.ndarray] | pa.Table | pa.RecordBatch,
    columns: Sequence[str] | None = None,
) -> dict[str, torch.Tensor]:
    """Columns as torch tensors (CPU), from numpy columns or an Arrow table.

    Args:
        data: ``{column: array}`` (:func:`read_samples`, :func:`to_numpy`, a prelearner's output)
            or an Arrow table / record batch.
        columns: The columns to convert (default: every numeric or bool column; strings and ids
            are left out).

    Returns:
        ``{column: tensor}`` sharing memory with writable arrays; read-only arrays (the fast
        layout's zero-copy views) are copied.

    Raises:
        ImportError: torch is not installed (with the command that installs it).
        TypeError: A column named in ``columns`` holds strings or other objects.
    """
    try:
        import torch
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError(
            "to_torch needs PyTorch: pip install torch (see https://pytorch.org for the build "
            "that fits your machine)"
        ) from None
    arrays = to_numpy(data) if isinstance(data, pa.Table | pa.RecordBatch) else dict(data)
    if columns is None:
        names = [n for n, a in arrays.items() if np.asarray(a).dtype.kind in "biuf"]
    else:
        names = list(columns)
    out = {}
    for name in names:
        a = np.asarray(arrays[name])
        if a.dtype.kind not in "biuf":
            raise TypeError(
                f"column {name!r} holds {a.dtype} values, which have no torch tensor type "
                "(numbers and bools only)"
            )
        if not a.flags.writeable:
            a = a.copy()
        out[name] = torch.from_numpy(a)
    return out


def _files(path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """The Parquet files of ``path`` (a local path or a store URI: the same rules on both)."""
    if not isinstance(path, str | os.PathLike):
        return [f for p in path for f in _files(p)]
    text = os.fspath(path)
    loc = locate(text)  # a URI stays a URI ("s3://b/out"; a pathlib.Path would make "s3:/b/out")
    kind = loc.info().type
    if kind == pafs.FileType.Directory:
        if loc.join(MANIFEST_FILE).is_file():
            return Manifest.read(text).checked_paths()
        base = loc.path.rstrip("/\\") + ("/" if not loc.local else os.sep)
        files = [
            f.uri
            for f in loc.walk()
            if f.path.endswith(_PARQUET)
            and not any(
                part.startswith(("_", "."))
                for part in f.path[len(base) :].replace("\\", "/").split("/")
            )
        ]
        if not files:
            raise FileNotFoundError(f"no Parquet files in {loc.uri!r}")
        return files
    if kind == pafs.FileType.NotFound:
        raise FileNotFoundError(f"no file or folder at {loc.uri!r}")
    if not loc.path.endswith(_PARQUET):
        raise UnsupportedFormatError(
            f"read_samples reads Parquet files (.parquet, .pq), not {loc.uri!r}"
        )
    return [loc.uri]
