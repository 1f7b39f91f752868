"""D4RL's HDF5 files (``d4rl.get_dataset`` layout) as a step table, read with h5py.

A D4RL file holds flat datasets at its root, one row per transition, in recording order:
``observations (N, ...)``, ``actions (N, ...)``, ``rewards (N,)``, ``terminals (N,)``, and in
v1/v2 files ``timeouts (N,)``; optionally ``next_observations (N, ...)``. Groups such as
``infos/*`` and ``metadata/*`` are not transitions and are not read. ``rewards``, ``terminals``
and ``timeouts`` stored as ``(N, 1)`` are squeezed (as ``d4rl.get_dataset`` does).

Composite observations (goal-conditioned sets): ``observations`` (and ``next_observations``) may
be a group of datasets, nested groups for nested dicts (``observations/observation``,
``observations/desired_goal``); each leaf has ``N`` rows. They become one struct column (fields
by key, nested), with each leaf's step shape under ``shapes["observations.<leaf path>"]``.

:func:`read_d4rl_file` returns those columns as an Arrow table (``fixed_size_list`` for
multi-dimensional ones, flattened row-major; boolean ones as ``uint8`` 0/1, zero-copy both ways)
whose schema metadata ``d4rl`` records each column's step shape;
:class:`~offline_prelearner.io.formats.d4rl.reader.D4RLReader` splits it into episodes.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from ....errors import DataError, SchemaError, Where
from ...optional import import_h5py
from ...stores import input_file
from ..minari.dataset import struct_of

__all__ = ["D4RL_COLUMNS", "D4RL_REQUIRED", "METADATA_KEY", "is_d4rl_file", "read_d4rl_file"]

METADATA_KEY = b"d4rl"
D4RL_REQUIRED = ("observations", "actions", "rewards", "terminals")
D4RL_COLUMNS = (*D4RL_REQUIRED, "timeouts", "next_observations")
_SQUEEZE = ("rewards", "terminals", "timeouts")
HDF5_SUFFIXES = (".hdf5", ".h5")


def is_d4rl_file(path: str) -> bool:
    """An ``.hdf5``/``.h5`` file (the reader checks its keys).

    Args:
        path: A local path or store URI; only its suffix is looked at (the file is not opened).

    Returns:
        True where ``path`` ends in ``.hdf5`` or ``.h5``.
    """
    return path.endswith(HDF5_SUFFIXES)


def read_d4rl_file(path: str) -> pa.Table:
    """One D4RL file as a table of its transition columns (see the module docstring).

    Args:
        path: A local path or store URI of a D4RL HDF5 file; it needs the datasets
            ``observations`` (a dataset, or a group of them for composite observations),
            ``actions``, ``rewards`` and ``terminals``, and may hold ``timeouts`` and
            ``next_observations``. Other keys are ignored.

    Returns:
        One row per transition, one column per dataset present (``[N, 1]`` flags and rewards
        squeezed to ``[N]``, booleans as uint8, a group as a struct column), with the file's
        path and per-column step shapes in the schema metadata under :data:`METADATA_KEY`.

    Raises:
        UnsupportedFormatError: h5py is not installed.
        SchemaError: A required dataset is missing, an observation group is empty or has a key
            with ``"."``, or a dataset's row count differs from the observations'.
        DataError: The file cannot be opened or read (reason ``unreadable_file``).
    """
    h5py = import_h5py(f"reading the D4RL file {path!r}")
    where = Where(file=path)
    try:
        with h5py.File(input_file(path), "r") as f:  # a store's file: random access
            present = [k for k in D4RL_COLUMNS if k in f and _readable(h5py, f, k)]
            missing = [k for k in D4RL_REQUIRED if k not in present]
            if missing:
                raise SchemaError(
                    f"a D4RL file needs datasets {list(D4RL_REQUIRED)}; missing {missing} "
                    f"(found {sorted(f.keys())})",
                    where,
                )
            arrays = {k: _read(h5py, f[k], path) for k in present}
    except OSError as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DataError(f"cannot read the file: {msg}", where, reason="unreadable_file") from None
    obs = arrays["observations"]
    n = len(next(iter(obs.values()))) if isinstance(obs, dict) else len(obs)
    shapes: dict[str, list[int]] = {}
    cols: dict[str, pa.Array] = {}
    for k, value in arrays.items():
        leaves = value if isinstance(value, dict) else {"": value}
        if k in ("observations", "next_observations") and not leaves:
            raise SchemaError(f"group {k!r} holds no datasets", Where(file=path, column=k))
        out: dict[str, pa.Array] = {}
        for leaf, a in leaves.items():
            name = f"{k}.{leaf}" if leaf else k
            if k in _SQUEEZE and a.ndim == 2 and a.shape[1] == 1:
                a = a[:, 0]
            if a.ndim == 0 or len(a) != n:
                raise SchemaError(
                    f"dataset {name!r} has {len(a) if a.ndim else 0} rows, observations have {n}",
                    Where(file=path, column=name),
                )
            shapes[name] = list(a.shape[1:])
            out[leaf] = _column(a)
        cols[k] = struct_of(out) if isinstance(value, dict) else out[""]
    meta: dict[str, Any] = {"file": path, "shapes": shapes}
    return pa.table(cols).replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()})


def _readable(h5py: Any, f: Any, key: str) -> bool:
    """A dataset, or (observations only) a group of them."""
    obj = f[key]
    return isinstance(obj, h5py.Dataset) or (
        key in ("observations", "next_observations") and isinstance(obj, h5py.Group)
    )


def _read(h5py: Any, obj: Any, path: str) -> np.ndarray | dict[str, np.ndarray]:
    """A dataset's array; a group's datasets as ``{leaf path: array}`` (nested groups joined
    with "."), in name order."""
    if isinstance(obj, h5py.Dataset):
        return np.asarray(obj[()])
    leaves: dict[str, np.ndarray] = {}

    def visit(name: str, child: Any) -> None:
        if "." in name.rsplit("/", 1)[-1]:
            raise SchemaError(
                f"{obj.name}/{name}: a key with '.', the leaf path separator",
                Where(file=path, column=f"{obj.name[1:]}.{name.replace('/', '.')}"),
            )
        if isinstance(child, h5py.Dataset):
            leaves[name.replace("/", ".")] = child[()]

    obj.visititems(visit)
    return leaves


def _column(a: np.ndarray) -> pa.Array:
    if a.dtype == np.bool_:  # as uint8: Arrow's bit-packed bools cost a pack and an unpack
        a = a.view(np.uint8)
    if a.ndim == 1:
        return pa.array(a)
    flat = np.ascontiguousarray(a).reshape(-1)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat), int(np.prod(a.shape[1:])))
