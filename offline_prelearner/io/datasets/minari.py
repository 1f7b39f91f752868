"""Minari 0.5.4 datasets on disk, read without Minari (h5py for hdf5, pyarrow for the rest).

Layouts (tests/fixtures/MINARI_NOTES.md has the evidence)::

    <root>/<dataset id>/data/metadata.json          spaces (JSON strings), data_format, ...
    <root>/<dataset id>/data/main_data.hdf5         hdf5: a group ``episode_<id>`` per episode
    <root>/<dataset id>/data/<id>/part-0.arrow      arrow / parquet: a folder per episode
                                                    (the folder name is the id), T + 1 rows

A dataset is named by its folder (``.../data`` or the folder above it) or by its id
(``cartpole/random-v0``), resolved as Minari does: ``$MINARI_DATASETS_PATH``, else
``~/.minari/datasets``, then ``<root>/<id>/data``.

**The step table.** :func:`read_minari_file` turns one data file into Minari's own arrow layout
plus an ``episode_id`` column: per episode ``T + 1`` rows; ``observations`` all real, the step
columns ``actions``, ``rewards``, ``terminations``, ``truncations`` with one padding row at the
end. Box leaves are ``fixed_size_list`` (flattened row-major), Discrete leaves integers, JPEG
leaves ``binary``. The schema metadata ``minari`` holds the dataset's metadata (id, format,
spaces) so the reader needs nothing else. The hdf5 backend is read into the same layout, so one
reader serves the three backends.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import DataError, SchemaError, UnsupportedFormatError, Where
from .optional import import_h5py

__all__ = [
    "METADATA_KEY",
    "STEP_COLUMNS",
    "MinariMetadata",
    "data_dir_of",
    "datasets_root",
    "find_data_dir",
    "is_minari_file",
    "minari_files",
    "read_metadata",
    "read_minari_file",
    "space_from_minari",
    "space_to_minari",
]

#: Schema-metadata key of a step table (the dataset's metadata as JSON).
METADATA_KEY = b"minari"
#: Columns with T values plus one padding row per episode.
STEP_COLUMNS = ("actions", "rewards", "terminations", "truncations")
_HDF5 = "main_data.hdf5"
_ID = re.compile(r"^(?:[\w:.-]{2,}/)*[\w:.-]+(?:-v\d+)?$")


def datasets_root() -> Path:
    """Minari's dataset root: ``$MINARI_DATASETS_PATH``, else ``~/.minari/datasets``."""
    env = os.environ.get("MINARI_DATASETS_PATH")
    return Path(env) if env else Path(os.path.expanduser("~/.minari/datasets"))


def _is_data_dir(p: Path) -> bool:
    return (p / "metadata.json").is_file() and (
        (p / _HDF5).is_file() or any(c.is_dir() and c.name.isdigit() for c in p.iterdir())
    )


def find_data_dir(path_or_id: str | os.PathLike[str]) -> Path | None:
    """The ``data`` folder of a Minari dataset given by folder or id; None if it is not one."""
    p = Path(path_or_id)
    if p.is_dir():
        for cand in (p, p / "data"):
            if _is_data_dir(cand):
                return cand
        return None
    text = os.fspath(path_or_id)
    if p.exists() or not _ID.match(text):
        return None
    cand = datasets_root() / text / "data"
    return cand if _is_data_dir(cand) else None


def data_dir_of(file: str | os.PathLike[str]) -> Path | None:
    """The ``data`` folder a Minari data file belongs to (None: not a Minari data file)."""
    d = _data_dir_of(os.fspath(file))
    return None if d is None else Path(d)


def _data_dir_of(path: str) -> str | None:
    head, name = os.path.split(path)
    if name == _HDF5:
        d = head
    elif name.startswith("part-") and name.endswith((".arrow", ".parquet")):
        d = os.path.dirname(head)
    else:
        return None
    return d if _has_metadata(d) else None


@lru_cache(maxsize=256)
def _has_metadata(data_dir: str) -> bool:
    """Whether a folder holds metadata.json (cached: asked once per episode file)."""
    return os.path.isfile(os.path.join(data_dir, "metadata.json"))


def is_minari_file(path: str) -> bool:
    """A Minari data file (main_data.hdf5 or <id>/part-*.arrow|parquet beside metadata.json)."""
    return _data_dir_of(path) is not None


def minari_files(data_dir: Path) -> list[str]:
    """The data files of a dataset: ``main_data.hdf5``, or the episode files in id order."""
    if (data_dir / _HDF5).is_file():
        return [str(data_dir / _HDF5)]
    eps = sorted((c for c in data_dir.iterdir() if c.is_dir() and c.name.isdigit()),
                 key=lambda c: int(c.name))  # fmt: skip
    files = [
        str(f)
        for ep in eps
        for f in sorted(ep.glob("part-*"))
        if f.suffix in (".arrow", ".parquet")
    ]
    if not files:
        raise FileNotFoundError(f"Minari dataset {str(data_dir)!r} holds no episode files")
    return files


# ---------------------------------------------------------------------------------- metadata
@dataclass(frozen=True)
class MinariMetadata:
    """What a reader needs from ``data/metadata.json``."""

    data_dir: str
    dataset_id: str
    data_format: str
    observation_space: dict[str, Any]
    action_space: dict[str, Any]
    jpeg_encoding: bool
    total_episodes: int | None
    total_steps: int | None

    def to_json(self) -> str:
        return json.dumps(self.__dict__)

    @classmethod
    def from_json(cls, text: str | bytes) -> MinariMetadata:
        """From :meth:`to_json` (cached: every step table of a dataset carries the same)."""
        return _from_json(bytes(text, "utf-8") if isinstance(text, str) else bytes(text))

    def check_supported(self) -> None:
        """Refuses, in one line, spaces the episode model cannot hold yet (Dict, Tuple, Text)."""
        for role, space in (("observation", self.observation_space), ("action", self.action_space)):
            kind = space.get("type")
            if kind in ("Dict", "Tuple", "Text"):
                inner = space.get("subspaces")
                keys = list(inner) if isinstance(inner, dict) else len(inner or [])
                raise UnsupportedFormatError(
                    f"Minari dataset {self.dataset_id!r} has a {kind} {role} space "
                    f"({'keys ' + ', '.join(keys) if isinstance(keys, list) else f'{keys} items'}"
                    "); composite spaces are not supported by the episode model yet"
                )


def read_metadata(data_dir: str | os.PathLike[str]) -> MinariMetadata:
    """The dataset's metadata (cached per folder and modification time)."""
    return _metadata_and_json(os.fspath(data_dir))[0]


def _metadata_and_json(data_dir: str) -> tuple[MinariMetadata, bytes]:
    path = os.path.join(data_dir, "metadata.json")
    return _read_metadata(path, os.stat(path).st_mtime_ns)


@lru_cache(maxsize=64)
def _read_metadata(path: str, mtime_ns: int) -> tuple[MinariMetadata, bytes]:
    meta = _parse_metadata(path)
    return meta, meta.to_json().encode()


def _parse_metadata(path: str) -> MinariMetadata:
    try:
        with open(path) as fh:
            meta = json.load(fh)  # Python's json reads Minari's Infinity / -Infinity tokens
    except ValueError as e:
        raise SchemaError(f"Minari metadata is not JSON: {e}", Where(file=path)) from None
    missing = [k for k in ("data_format", "observation_space", "action_space") if k not in meta]
    if missing:
        raise SchemaError(
            f"Minari metadata lacks {missing} (datasets before Minari 0.4 store spaces only in "
            "the env spec; open it once with Minari 0.5 to upgrade it)",
            Where(file=path),
        )

    def space(v: Any) -> dict[str, Any]:
        return json.loads(v) if isinstance(v, str) else dict(v)

    return MinariMetadata(
        data_dir=str(Path(path).parent),
        dataset_id=str(meta.get("dataset_id", Path(path).parent.parent.name)),
        data_format=str(meta["data_format"]),
        observation_space=space(meta["observation_space"]),
        action_space=space(meta["action_space"]),
        jpeg_encoding=bool(meta.get("jpeg_encoding", True)),
        total_episodes=meta.get("total_episodes"),
        total_steps=meta.get("total_steps"),
    )


@lru_cache(maxsize=64)
def _from_json(text: bytes) -> MinariMetadata:
    return MinariMetadata(**json.loads(text))


# ---------------------------------------------------------------------------------- spaces
def space_from_minari(d: dict[str, Any]) -> gym.Space[Any]:
    """A gymnasium space from Minari's serialization (``minari.serialization``)."""
    kind = d["type"]
    spaces = gym.spaces
    if kind == "Box":
        dtype = np.dtype(d["dtype"])
        low, high = np.asarray(d["low"], dtype), np.asarray(d["high"], dtype)
        return spaces.Box(low, high, shape=tuple(d["shape"]), dtype=dtype)
    if kind == "Discrete":
        return spaces.Discrete(int(d["n"]), start=int(d.get("start", 0)))
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(np.asarray(d["nvec"]), start=np.asarray(d.get("start", 0)))
    if kind == "MultiBinary":
        return spaces.MultiBinary(d["n"])
    if kind == "Dict":
        return spaces.Dict({k: space_from_minari(v) for k, v in d["subspaces"].items()})
    if kind == "Tuple":
        return spaces.Tuple([space_from_minari(v) for v in d["subspaces"]])
    raise UnsupportedFormatError(f"Minari space type {kind!r} is not supported")


def space_to_minari(space: gym.Space[Any]) -> dict[str, Any]:
    """Minari's serialization of a Box / Discrete / MultiDiscrete / MultiBinary space."""
    spaces = gym.spaces
    if isinstance(space, spaces.Box):
        return {"type": "Box", "dtype": str(space.dtype), "shape": list(space.shape),
                "low": space.low.tolist(), "high": space.high.tolist()}  # fmt: skip
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "dtype": "int64", "start": int(space.start), "n": int(space.n)}
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "dtype": "int64", "nvec": space.nvec.tolist(),
                "start": space.start.tolist()}  # fmt: skip
    if isinstance(space, spaces.MultiBinary):
        n = space.n
        return {"type": "MultiBinary", "n": n.tolist() if isinstance(n, np.ndarray) else n}
    raise UnsupportedFormatError(f"cannot write a {type(space).__name__} space to Minari yet")


def leaf_shape_dtype(space: dict[str, Any]) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """Step shape and dtype of a leaf space (Box, Discrete, MultiDiscrete, MultiBinary)."""
    kind = space["type"]
    if kind == "Box":
        return tuple(space["shape"]), np.dtype(space["dtype"])
    if kind == "Discrete":
        return (), np.dtype(space.get("dtype", "int64"))
    if kind == "MultiDiscrete":
        return (len(space["nvec"]),), np.dtype(space.get("dtype", "int64"))
    if kind == "MultiBinary":
        n = space["n"]
        return (tuple(n) if isinstance(n, list) else (int(n),)), np.dtype(np.int8)
    raise UnsupportedFormatError(f"Minari space type {kind!r} is not a leaf")


# ---------------------------------------------------------------------------------- reading
def read_minari_file(path: str) -> pa.Table:
    """One Minari data file as a step table (see the module docstring)."""
    data_dir = _data_dir_of(path)
    if data_dir is None:
        raise DataError(
            "not a Minari data file (main_data.hdf5 or <id>/part-0.arrow|parquet next to "
            "metadata.json)",
            Where(file=path),
            reason="unreadable_file",
        )
    meta, meta_json = _metadata_and_json(data_dir)
    meta.check_supported()
    try:
        table = _read_hdf5(path, meta) if path.endswith(".hdf5") else _read_part(path)
    except (OSError, pa.ArrowInvalid, KeyError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DataError(
            f"cannot read the file: {msg}", Where(file=path), reason="unreadable_file"
        ) from None
    return table.replace_schema_metadata({METADATA_KEY: meta_json})


def _read_part(path: str) -> pa.Table:
    if path.endswith(".arrow"):
        with pa.memory_map(path) as source:
            table = pa.ipc.open_file(source).read_all()
    else:
        table = pq.read_table(path)
    if table.num_columns != 5:
        table = table.select(
            [c for c in ("observations", *STEP_COLUMNS) if c in table.column_names]
        )
    eid = int(os.path.basename(os.path.dirname(path)))
    ids = pa.array(np.full(table.num_rows, eid, np.int64))
    return table.add_column(0, "episode_id", ids)


def _read_hdf5(path: str, meta: MinariMetadata) -> pa.Table:
    h5py = import_h5py(f"reading Minari's hdf5 backend ({path!r})")
    obs_shape, _ = leaf_shape_dtype(meta.observation_space)
    act_shape, _ = leaf_shape_dtype(meta.action_space)
    with h5py.File(path, "r") as f:
        names = sorted((k for k in f if k.startswith("episode_")), key=lambda k: int(k[8:]))
        groups = [f[k] for k in names]
        rows = np.array([g["observations"].shape[0] for g in groups], np.int64)
        starts = np.zeros(len(groups) + 1, np.int64)
        np.cumsum(rows, out=starts[1:])
        ids = np.repeat(np.array([int(k[8:]) for k in names], np.int64), rows)
        cols: dict[str, pa.Array] = {"episode_id": pa.array(ids)}
        cols["observations"] = _hdf5_leaf(h5py, groups, "observations", obs_shape, starts, False)
        cols["actions"] = _hdf5_leaf(h5py, groups, "actions", act_shape, starts, True)
        for name in STEP_COLUMNS[1:]:
            cols[name] = _hdf5_leaf(h5py, groups, name, (), starts, True)
    return pa.table(cols)


def _hdf5_leaf(
    h5py: Any, groups: list[Any], name: str, shape: tuple[int, ...], starts: np.ndarray, pad: bool
) -> pa.Array:
    """One leaf of every episode group, as one Arrow column of ``starts[-1]`` rows (``pad``: each
    episode's T values then a zero row, as Minari's arrow backend stores step columns)."""
    first = groups[0][name] if groups else None
    if first is not None and _is_jpeg(h5py, first, shape):
        blobs: list[bytes] = []
        for g in groups:
            blobs.extend(np.asarray(b, np.uint8).tobytes() for b in g[name][()])
        return pa.array(blobs, pa.binary())
    dtype = first.dtype if first is not None else np.dtype(np.float32)
    out = np.zeros((int(starts[-1]), *shape), dtype)
    for g, s, e in zip(groups, starts[:-1], starts[1:], strict=True):
        ds = g[name]
        n = ds.shape[0]
        if n != (e - s - 1 if pad else e - s):
            raise DataError(
                f"{name} has {n} rows, expected {e - s - 1 if pad else e - s} "
                f"(observations have {e - s})",
                Where(column=name, episode_id=g.name.rsplit("_", 1)[-1]),
                reason="inconsistent",
            )
        if n:
            ds.read_direct(out, dest_sel=np.s_[s : s + n])
    return _fixed(out)


def _is_jpeg(h5py: Any, ds: Any, shape: tuple[int, ...]) -> bool:
    """Minari's JPEG leaves: vlen uint8, or uint8 of another rank than the space (T+1, nbytes)."""
    if h5py.check_vlen_dtype(ds.dtype) is not None:
        return True
    return ds.dtype == np.uint8 and len(shape) >= 2 and ds.ndim == 2


def _fixed(a: np.ndarray) -> pa.Array:
    """``[n, *shape]`` as a flat ``fixed_size_list`` (a plain column for ``[n]``)."""
    if a.ndim == 1:
        return pa.array(a)
    flat = np.ascontiguousarray(a).reshape(-1)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat), int(np.prod(a.shape[1:])))
