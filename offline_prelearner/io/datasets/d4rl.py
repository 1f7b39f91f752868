"""D4RL's HDF5 files (``d4rl.get_dataset`` layout) as a step table, read with h5py.

A D4RL file holds flat datasets at its root, one row per transition, in recording order:
``observations (N, ...)``, ``actions (N, ...)``, ``rewards (N,)``, ``terminals (N,)``, and in
v1/v2 files ``timeouts (N,)``; optionally ``next_observations (N, ...)``. Groups such as
``infos/*`` and ``metadata/*`` are not transitions and are not read. ``rewards``, ``terminals``
and ``timeouts`` stored as ``(N, 1)`` are squeezed (as ``d4rl.get_dataset`` does).

:func:`read_d4rl_file` returns those columns as an Arrow table (``fixed_size_list`` for
multi-dimensional ones, flattened row-major) whose schema metadata ``d4rl`` records each column's
step shape; :class:`~offline_prelearner.io.readers.d4rl.D4RLReader` splits it into episodes.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from ...errors import DataError, SchemaError, Where
from .optional import import_h5py

__all__ = ["D4RL_COLUMNS", "D4RL_REQUIRED", "METADATA_KEY", "is_d4rl_file", "read_d4rl_file"]

METADATA_KEY = b"d4rl"
D4RL_REQUIRED = ("observations", "actions", "rewards", "terminals")
D4RL_COLUMNS = (*D4RL_REQUIRED, "timeouts", "next_observations")
_SQUEEZE = ("rewards", "terminals", "timeouts")
HDF5_SUFFIXES = (".hdf5", ".h5")


def is_d4rl_file(path: str) -> bool:
    """An ``.hdf5``/``.h5`` file (the reader checks its keys)."""
    return path.endswith(HDF5_SUFFIXES)


def read_d4rl_file(path: str) -> pa.Table:
    """One D4RL file as a table of its transition columns (see the module docstring)."""
    h5py = import_h5py(f"reading the D4RL file {path!r}")
    where = Where(file=path)
    try:
        with h5py.File(path, "r") as f:
            present = [k for k in D4RL_COLUMNS if k in f and isinstance(f[k], h5py.Dataset)]
            missing = [k for k in D4RL_REQUIRED if k not in present]
            if missing:
                raise SchemaError(
                    f"a D4RL file needs datasets {list(D4RL_REQUIRED)}; missing {missing} "
                    f"(found {sorted(f.keys())})",
                    where,
                )
            arrays = {k: f[k][()] for k in present}
    except OSError as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DataError(f"cannot read the file: {msg}", where, reason="unreadable_file") from None
    n = len(arrays["observations"])
    shapes: dict[str, list[int]] = {}
    cols: dict[str, pa.Array] = {}
    for k, a in arrays.items():
        if k in _SQUEEZE and a.ndim == 2 and a.shape[1] == 1:
            a = a[:, 0]
        if len(a) != n:
            raise SchemaError(
                f"dataset {k!r} has {len(a)} rows, observations have {n}",
                Where(file=path, column=k),
            )
        shapes[k] = list(a.shape[1:])
        cols[k] = _column(a)
    meta: dict[str, Any] = {"file": path, "shapes": shapes}
    return pa.table(cols).replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()})


def _column(a: np.ndarray) -> pa.Array:
    if a.ndim == 1:
        return pa.array(a)
    flat = np.ascontiguousarray(a).reshape(-1)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat), int(np.prod(a.shape[1:])))
