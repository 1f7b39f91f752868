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

**Composite observations** (Dict / Tuple spaces, nested) are struct columns, as Minari's arrow
backend stores them: fields named by Dict key, Tuple items ``"0"``, ``"1"``...; the hdf5
backend's nested groups (``observations/<key>/...``, ``_index_<i>`` for Tuple items) are read
into the same struct. Composite *actions* and Text leaves are refused in one line
(:meth:`MinariMetadata.check_supported`).
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ....episodes.observations import nest
from ....errors import DataError, SchemaError, UnsupportedFormatError, Where
from ...optional import import_h5py
from ...stores import Location, file_stat, input_file, is_remote, join_path, locate, open_local

__all__ = [
    "EXTRAS_KEY",
    "METADATA_KEY",
    "ORIGIN_KEY",
    "STEP_COLUMNS",
    "MinariMetadata",
    "data_dir_of",
    "datasets_root",
    "find_data_dir",
    "is_composite",
    "is_minari_file",
    "leaf_items",
    "leaf_shape_dtype",
    "minari_files",
    "read_metadata",
    "read_minari_file",
    "space_from_minari",
    "space_to_minari",
    "struct_of",
]

#: Schema-metadata key of a step table (the dataset's metadata as JSON).
METADATA_KEY = b"minari"
#: Schema-metadata key of a step table's episode origins, where a dataset written by our convert
#: has them (attrs ``source_id`` / ``t_started``): ``{minari id: [source id or null, t_started]}``.
ORIGIN_KEY = b"offline_prelearner.origin"
#: Schema-metadata key of the per-step shapes of a step table's ``extras.<name>`` columns (the
#: ``extras/<name>`` datasets our convert writes in each episode group, which Minari ignores).
EXTRAS_KEY = b"offline_prelearner.extras"
#: Columns with T values plus one padding row per episode.
STEP_COLUMNS = ("actions", "rewards", "terminations", "truncations")
_HDF5 = "main_data.hdf5"
_ID = re.compile(r"^(?:[\w:.-]{2,}/)*[\w:.-]+(?:-v\d+)?$")


def datasets_root() -> Path:
    """Minari's dataset root: ``$MINARI_DATASETS_PATH``, else ``~/.minari/datasets``."""
    env = os.environ.get("MINARI_DATASETS_PATH")
    return Path(env) if env else Path(os.path.expanduser("~/.minari/datasets"))


def _is_data_dir(p: Path | Location) -> bool:
    if isinstance(p, Location):  # a store: a prefix is a folder only where something lies under it
        return p.join("metadata.json").is_file() and (
            p.join(_HDF5).is_file() or any(d and c.name.isdigit() for c, d in p.children())
        )
    return (p / "metadata.json").is_file() and (
        (p / _HDF5).is_file() or any(c.is_dir() and c.name.isdigit() for c in p.iterdir())
    )


def find_data_dir(path_or_id: str | os.PathLike[str]) -> Path | Location | None:
    """The ``data`` folder of a Minari dataset given by folder (on the local disk or a store: a
    :class:`~...stores.Location` there) or id; None if it is not one.

    Args:
        path_or_id: The dataset's folder or its ``data`` folder (local, or a store URI), or a
            Minari dataset id (``"D4RL/door/human-v2"``) looked up under the local Minari root
            when no such path exists.

    Returns:
        The folder that holds ``metadata.json`` and the data files (a
        :class:`~...stores.Location` for a store), or None.
    """
    if is_remote(path_or_id):
        loc = locate(path_or_id)
        return next((c for c in (loc, loc.join("data")) if _is_data_dir(c)), None)
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


def data_dir_of(file: str | os.PathLike[str]) -> Location | None:
    """The ``data`` folder a Minari data file belongs to (None: not a Minari data file).

    Args:
        file: A local path or store URI of ``main_data.hdf5`` or of
            ``<episode id>/part-*.arrow|parquet``; the folder must hold ``metadata.json``.

    Returns:
        The ``data`` folder (a store URI stays one: ``str()`` gives it back), or None.
    """
    d = _data_dir_of(os.fspath(file))
    return None if d is None else locate(d)


@lru_cache(maxsize=1 << 16)
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
    if is_remote(data_dir):
        return locate(data_dir).join("metadata.json").is_file()
    return os.path.isfile(os.path.join(data_dir, "metadata.json"))


def is_minari_file(path: str) -> bool:
    """A Minari data file (main_data.hdf5 or <id>/part-*.arrow|parquet beside metadata.json).

    Args:
        path: A local path or store URI; its ``data`` folder's ``metadata.json`` is looked for
            (cached per folder).

    Returns:
        True where ``path`` is a data file of a Minari dataset.
    """
    return _data_dir_of(path) is not None


def minari_files(data_dir: Path | Location) -> list[str]:
    """The data files of a dataset: ``main_data.hdf5``, or the episode files in id order (a
    store's as URIs).

    Args:
        data_dir: The dataset's ``data`` folder (from :func:`find_data_dir`): a local path or a
            store :class:`~...stores.Location`.

    Returns:
        ``[main_data.hdf5]``, or every ``<id>/part-*.arrow|parquet`` with episode folders in
        numeric id order.

    Raises:
        FileNotFoundError: The folder holds neither.
    """
    if isinstance(data_dir, Location):
        if data_dir.join(_HDF5).is_file():
            return [data_dir.join(_HDF5).uri]
        eps = sorted((c for c, d in data_dir.children() if d and c.name.isdigit()),
                     key=lambda c: int(c.name))  # fmt: skip
        files = [
            f.uri
            for ep in eps
            for f in ep.walk()
            if f.name.startswith("part-") and f.name.endswith((".arrow", ".parquet"))
        ]
    elif (data_dir / _HDF5).is_file():
        return [str(data_dir / _HDF5)]
    else:
        local = sorted((c for c in data_dir.iterdir() if c.is_dir() and c.name.isdigit()),
                       key=lambda c: int(c.name))  # fmt: skip
        files = [
            str(f)
            for ep in local
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
    env_spec: str | None = None  # gymnasium EnvSpec JSON, as Minari stores it
    eval_env_spec: str | None = None

    def to_json(self) -> str:
        """The metadata as JSON, for the Arrow schema metadata of each step table."""
        return json.dumps(self.__dict__)

    @classmethod
    def from_json(cls, text: str | bytes) -> MinariMetadata:
        """From :meth:`to_json` (cached: every step table of a dataset carries the same).

        Args:
            text: What :meth:`to_json` wrote (str, or its UTF-8 bytes from schema metadata).

        Returns:
            The metadata (the same object for the same text, while cached).
        """
        return _from_json(bytes(text, "utf-8") if isinstance(text, str) else bytes(text))

    def check_supported(self) -> None:
        """Refuses, in one line, spaces the episode model cannot hold: composite (Dict / Tuple)
        actions, and Text leaves anywhere. Composite observations are read leaf by leaf."""
        for role, space in (("observation", self.observation_space), ("action", self.action_space)):
            kind = space.get("type")
            if role == "action" and kind in ("Dict", "Tuple"):
                inner = space.get("subspaces")
                keys = list(inner) if isinstance(inner, dict) else len(inner or [])
                raise UnsupportedFormatError(
                    f"Minari dataset {self.dataset_id!r} has a {kind} action space "
                    f"({'keys ' + ', '.join(keys) if isinstance(keys, list) else f'{keys} items'}"
                    "); composite action spaces are not supported by the episode model"
                )
            for path, leaf in leaf_items(space):
                keys = _dict_keys(space)
                dotted = [k for k in keys if "." in k]
                if dotted:
                    raise UnsupportedFormatError(
                        f"Minari dataset {self.dataset_id!r} has {role} keys with '.', the leaf "
                        f"path separator: {dotted}"
                    )
                if leaf.get("type") not in _LEAF_TYPES:
                    at = f" (leaf {path!r})" if path else ""
                    raise UnsupportedFormatError(
                        f"Minari dataset {self.dataset_id!r} has a {leaf.get('type')} "
                        f"{role} space{at}; only {', '.join(_LEAF_TYPES)} leaves are supported"
                    )


def read_metadata(data_dir: str | os.PathLike[str] | Location) -> MinariMetadata:
    """The dataset's metadata (cached per folder and modification time).

    Args:
        data_dir: The dataset's ``data`` folder (local path or store URI) holding
            ``metadata.json``; the file is stat'ed again at most once a second.

    Returns:
        The parsed metadata, already checked for spaces the episode model can hold.

    Raises:
        SchemaError: ``metadata.json`` is not JSON or lacks ``data_format`` /
            ``observation_space`` / ``action_space``.
        UnsupportedFormatError: A composite action space, a key with ``"."`` or an unsupported
            leaf space (:meth:`MinariMetadata.check_supported`).
    """
    return _metadata_and_json(
        str(data_dir) if isinstance(data_dir, Location) else os.fspath(data_dir)
    )[0]


_RECHECK_S = 1.0  # metadata.json is stat'ed again after this long (episode files: thousands/s)
_checked: dict[str, tuple[float, tuple[MinariMetadata, bytes]]] = {}


def _metadata_and_json(data_dir: str) -> tuple[MinariMetadata, bytes]:
    now = time.monotonic()
    hit = _checked.get(data_dir)
    if hit is not None and now - hit[0] < _RECHECK_S:
        return hit[1]
    path = join_path(data_dir, "metadata.json")
    got = _read_metadata(path, file_stat(path).st_mtime_ns)
    if len(_checked) > 256:
        _checked.clear()
    _checked[data_dir] = (now, got)
    return got


@lru_cache(maxsize=64)
def _read_metadata(path: str, mtime_ns: int) -> tuple[MinariMetadata, bytes]:
    meta = _parse_metadata(path)
    meta.check_supported()  # here, not per episode file (a refusal is not cached)
    return meta, meta.to_json().encode()


def _parse_metadata(path: str) -> MinariMetadata:
    try:
        if is_remote(path):
            meta = json.loads(locate(path).read_bytes())
        else:
            with open_local(path) as fh:
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

    folder = posixpath.dirname(path) if is_remote(path) else str(Path(path).parent)
    return MinariMetadata(
        data_dir=folder,
        dataset_id=str(meta.get("dataset_id", posixpath.basename(posixpath.dirname(folder)))),
        data_format=str(meta["data_format"]),
        observation_space=space(meta["observation_space"]),
        action_space=space(meta["action_space"]),
        jpeg_encoding=bool(meta.get("jpeg_encoding", True)),
        total_episodes=meta.get("total_episodes"),
        total_steps=meta.get("total_steps"),
        env_spec=meta.get("env_spec") if isinstance(meta.get("env_spec"), str) else None,
        eval_env_spec=(
            meta.get("eval_env_spec") if isinstance(meta.get("eval_env_spec"), str) else None
        ),
    )


@lru_cache(maxsize=64)
def _from_json(text: bytes) -> MinariMetadata:
    return MinariMetadata(**json.loads(text))


# ---------------------------------------------------------------------------------- spaces
def space_from_minari(d: dict[str, Any]) -> gym.Space[Any]:
    """A gymnasium space from Minari's serialization (``minari.serialization``).

    Args:
        d: One serialized space (``{"type": "Box", "dtype": ..., "shape": ..., "low": ...,
            "high": ...}``, Discrete, MultiDiscrete, MultiBinary, or a Dict / Tuple of those
            under ``"subspaces"``).

    Returns:
        The gymnasium space.

    Raises:
        UnsupportedFormatError: Another space type (e.g. Text).
    """
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
    """Minari's serialization of a Box / Discrete / MultiDiscrete / MultiBinary space, or of a
    Dict / Tuple of those (nested).

    Args:
        space: The gymnasium space to serialize.

    Returns:
        A JSON-ready dict, as ``minari.serialization`` writes it.

    Raises:
        UnsupportedFormatError: Another space class.
    """
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
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "subspaces": {k: space_to_minari(v) for k, v in space.items()}}
    if isinstance(space, spaces.Tuple):
        return {"type": "Tuple", "subspaces": [space_to_minari(v) for v in space.spaces]}
    raise UnsupportedFormatError(f"cannot write a {type(space).__name__} space to Minari yet")


_LEAF_TYPES = ("Box", "Discrete", "MultiDiscrete", "MultiBinary")


def leaf_items(space: dict[str, Any], prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
    """``[(leaf path, leaf space)]`` of a serialized space, in its order: ``"desired_goal"``,
    ``"0"`` for a Tuple's first item, ``"a.b"`` nested; a leaf space is the one path ``""``.
    The paths are those of composite episodes (:mod:`offline_prelearner.episodes.observations`).

    Args:
        space: A serialized space (:func:`space_to_minari`'s form).
        prefix: The path of ``space`` itself inside an enclosing space (used when recursing);
            ``""`` at the top.

    Returns:
        One ``(path, serialized leaf space)`` per leaf, depth first in the space's order.
    """
    kind = space.get("type")
    if kind == "Dict":
        items: Any = space["subspaces"].items()
    elif kind == "Tuple":
        items = enumerate(space["subspaces"])
    else:
        return [(prefix, space)]
    out: list[tuple[str, dict[str, Any]]] = []
    for k, sub in items:
        out.extend(leaf_items(sub, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _dict_keys(space: dict[str, Any]) -> list[str]:
    """Every Dict key of a serialized space, nested ones included."""
    kind = space.get("type")
    if kind == "Dict":
        subs = space["subspaces"]
        return [*map(str, subs), *(k for v in subs.values() for k in _dict_keys(v))]
    if kind == "Tuple":
        return [k for v in space["subspaces"] for k in _dict_keys(v)]
    return []


def is_composite(space: dict[str, Any]) -> bool:
    """Whether a Minari space dict is a Dict or Tuple space (with nested parts).

    Args:
        space: A serialized space (:func:`space_to_minari`'s form).

    Returns:
        True for a Dict or Tuple space.
    """
    return space.get("type") in ("Dict", "Tuple")


def leaf_shape_dtype(space: dict[str, Any]) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """Step shape and dtype of a leaf space (Box, Discrete, MultiDiscrete, MultiBinary).

    Args:
        space: A serialized leaf space.

    Returns:
        The shape of one step's value (``()`` for Discrete) and its dtype (int64 unless the
        space says otherwise; int8 for MultiBinary).

    Raises:
        UnsupportedFormatError: ``space`` is not a leaf type listed above.
    """
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
    """One Minari data file as a step table (see the module docstring).

    Args:
        path: A local path or store URI of ``main_data.hdf5`` or of one episode's
            ``part-*.arrow|parquet``, inside a dataset's ``data`` folder with ``metadata.json``.

    Returns:
        The file's steps with an ``episode_id`` column, and the dataset's metadata JSON under
        :data:`METADATA_KEY` in the schema metadata.

    Raises:
        DataError: Not a Minari data file, or it cannot be read (reason ``unreadable_file``).
        SchemaError: The dataset's ``metadata.json`` is malformed (see :func:`read_metadata`).
        UnsupportedFormatError: The dataset's spaces are not supported.
    """
    data_dir = _data_dir_of(path)
    if data_dir is None:
        raise DataError(
            "not a Minari data file (main_data.hdf5 or <id>/part-0.arrow|parquet next to "
            "metadata.json)",
            Where(file=path),
            reason="unreadable_file",
        )
    meta, meta_json = _metadata_and_json(data_dir)  # checked when parsed
    try:
        table = _read_hdf5(path, meta) if path.endswith(".hdf5") else _read_part(path)
    except (OSError, pa.ArrowInvalid, KeyError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DataError(
            f"cannot read the file: {msg}", Where(file=path), reason="unreadable_file"
        ) from None
    return table.replace_schema_metadata({**(table.schema.metadata or {}), METADATA_KEY: meta_json})


def _read_part(path: str) -> pa.Table:
    # One file, one thread: ParquetFile.read is ~5x cheaper than pq.read_table on Minari's small
    # episode files (no dataset discovery, no thread pool per file); OSFile beats a memory map.
    with input_file(path) if is_remote(path) else pa.OSFile(path) as source:
        if path.endswith(".arrow"):
            table = pa.ipc.open_file(source).read_all()
        else:  # an open file: no filesystem resolution per file; one row group: no pre-buffer
            table = pq.ParquetFile(source, pre_buffer=False).read(use_threads=False)
    if table.num_columns != 5:
        table = table.select(
            [c for c in ("observations", *STEP_COLUMNS) if c in table.column_names]
        )
    eid = int(os.path.basename(os.path.dirname(path)))
    ids = pa.array(np.full(table.num_rows, eid, np.int64))
    return table.add_column(0, "episode_id", ids)


def _h5_items(space: dict[str, Any], prefix: str = "") -> list[tuple[str, str, dict[str, Any]]]:
    """``[(leaf path, hdf5 path below the column, leaf space)]``: Minari's hdf5 backend nests a
    Dict as groups named by key and a Tuple as groups ``_index_<i>``."""
    kind = space.get("type")
    if kind == "Dict":
        items: Any = [(str(k), str(k), v) for k, v in space["subspaces"].items()]
    elif kind == "Tuple":
        items = [(str(i), f"_index_{i}", v) for i, v in enumerate(space["subspaces"])]
    else:
        return [("", prefix, space)]
    out: list[tuple[str, str, dict[str, Any]]] = []
    for key, h5key, sub in items:
        for path, h5path, leaf in _h5_items(sub, f"{prefix}/{h5key}"):
            out.append((f"{key}.{path}" if path else key, h5path, leaf))
    return out


def _read_hdf5(path: str, meta: MinariMetadata) -> pa.Table:
    """``main_data.hdf5`` as a step table, through h5py's low-level API, episode by episode: each
    dataset is opened relative to its episode group and read straight into a new array (h5py's
    high-level objects cost ~3x more per dataset, and episodes are many small datasets; visiting
    an episode's datasets together keeps HDF5's metadata cache warm: ~40% faster than column by
    column)."""
    h5py = import_h5py(f"reading Minari's hdf5 backend ({path!r})")
    obs_items = _h5_items(meta.observation_space, "observations")
    columns = [_H5Leaf(f"obs.{leaf}" if leaf else "obs", h5, space, pad=False)
               for leaf, h5, space in obs_items]  # fmt: skip
    columns.append(_H5Leaf("actions", "actions", meta.action_space, pad=True))
    columns += [_H5Leaf(name, name, None, pad=True) for name in STEP_COLUMNS[1:]]
    rows: list[int] = []
    origin: dict[str, list[Any]] = {}  # minari id -> [source id or None, t_started]
    with h5py.File(input_file(path), "r") as f:  # a store's file: random access
        names = sorted((k for k in f if k.startswith("episode_")), key=lambda k: int(k[8:]))
        extras = sorted(f[names[0]]["extras"]) if names and "extras" in f[names[0]] else []
        columns += [
            _H5Leaf(f"extras.{n}", f"extras/{n}", None, pad=True, free=True) for n in extras
        ]
        h5g, h5d = h5py.h5g, h5py.h5d
        for name in names:
            g = h5g.open(f.id, name.encode())
            eid = int(name[8:])
            n = -1
            for col in columns:
                try:
                    d = h5d.open(g, col.key)
                except (KeyError, ValueError):
                    raise DataError(
                        f"{name} has no dataset {col.h5path!r}",
                        Where(file=path, column=col.name, episode_id=eid),
                        reason="inconsistent",
                    ) from None
                got = col.add(h5py, d, n, path, eid)
                n = got if n < 0 else n
            rows.append(n)
            sid, t0 = _h5_attr(h5py, g, b"source_id"), _h5_attr(h5py, g, b"t_started")
            if sid is not None or t0 is not None:  # written by our convert (minari_write)
                sid = sid.decode() if isinstance(sid, bytes) else sid
                origin[str(eid)] = [None if sid is None else str(sid), int(t0 or 0)]
    ids = np.repeat(np.array([int(k[8:]) for k in names], np.int64), rows)
    leaves = {leaf: col.finish() for (leaf, _, _), col in zip(obs_items, columns, strict=False)}
    cols: dict[str, pa.Array] = {"episode_id": pa.array(ids)}
    cols["observations"] = _nest(meta.observation_space, leaves)
    for col in columns[len(obs_items) :]:
        cols[col.name] = col.finish()
    table = pa.table(cols)
    meta_out: dict[bytes, str] = {}
    if origin:
        meta_out[ORIGIN_KEY] = json.dumps(origin)
    if extras:
        shapes = {c.name[7:]: list(c.shape) for c in columns if c.name.startswith("extras.")}
        meta_out[EXTRAS_KEY] = json.dumps(shapes)
    return table.replace_schema_metadata(meta_out) if meta_out else table


def _h5_attr(h5py: Any, group: Any, name: bytes) -> Any:
    """A scalar attribute of a low-level group (None if absent), without h5py's wrappers."""
    if not h5py.h5a.exists(group, name):
        return None
    a = h5py.h5a.open(group, name)
    out = np.empty((), a.dtype)
    a.read(out)
    return out.item()


class _H5Leaf:
    """One column (or observation leaf) of every episode group, gathered into one Arrow column.

    The first observation leaf fixes each episode's row count (``T + 1``); every later leaf must
    agree, step columns with ``T`` rows (``pad``: followed by one zero row, as Minari's arrow
    backend stores them). A leaf whose space is an image may be stored as JPEG bytes."""

    def __init__(
        self, name: str, h5path: str, space: dict[str, Any] | None, pad: bool, free: bool = False
    ) -> None:
        self.name, self.h5path, self.key, self.pad = name, h5path, h5path.encode(), pad
        self.free = free  # no space: the per-step shape is the first episode's
        shape, dtype = leaf_shape_dtype(space) if space is not None else ((), None)
        self.shape: tuple[int, ...] = shape
        self.image = dtype == np.uint8 and len(shape) >= 2
        self.dtype: np.dtype[Any] | None = None  # the first episode's stored dtype
        self.parts: list[np.ndarray] = []
        self.blobs: list[bytes] | None = None  # JPEG-encoded frames
        self.zero: np.ndarray | None = None  # the padding row
        self.episodes = 0

    def add(self, h5py: Any, d: Any, obs_rows: int, path: str, eid: int) -> int:
        """Reads episode ``eid``'s dataset ``d``; returns its row count (checked against
        ``obs_rows``, the first leaf's, unless this is the first leaf: ``obs_rows < 0``)."""
        shape = d.shape
        n = shape[0] if shape else 0
        want = obs_rows - 1 if self.pad else obs_rows
        if obs_rows >= 0 and n != want:
            raise DataError(
                f"{self.name} has {n} rows, expected {want} (observations have {obs_rows})",
                Where(file=path, column=self.name, episode_id=eid),
                reason="inconsistent",
            )
        jpeg = self.image and self._is_jpeg(h5py, d)
        if self.episodes and jpeg != (self.blobs is not None):
            raise DataError(
                f"{self.name} is JPEG-encoded in some episodes and raw in others",
                Where(file=path, column=self.name, episode_id=eid),
                reason="inconsistent",
            )
        self.episodes += 1
        if jpeg:
            if self.pad:
                raise UnsupportedFormatError(f"JPEG-encoded {self.name} are not supported")
            blobs = self.blobs = self.blobs if self.blobs is not None else []
            blobs.extend(np.asarray(b, np.uint8).tobytes() for b in h5py.Dataset(d)[()])
            return n
        if self.free and self.dtype is None:
            self.shape = tuple(shape[1:])
        if shape[1:] != self.shape:  # checked: a low-level read trusts the buffer's size
            raise DataError(
                f"{self.name} has per-step shape {shape[1:]}, the space says {self.shape}",
                Where(file=path, column=self.name, episode_id=eid),
                reason="inconsistent",
            )
        if self.dtype is None:
            self.dtype = d.dtype
        a = np.empty(shape, self.dtype)
        if n:
            d.read(h5py.h5s.ALL, h5py.h5s.ALL, a)
        self.parts.append(a)
        if self.pad:
            if self.zero is None:
                self.zero = np.zeros((1, *self.shape), self.dtype)
            self.parts.append(self.zero)  # the same row each time: concatenate copies it
        return n

    @staticmethod
    def _is_jpeg(h5py: Any, d: Any) -> bool:
        """Minari's JPEG leaves: vlen uint8, or uint8 ``(T + 1, nbytes)`` for a rank-2+ space."""
        dtype = d.dtype
        if h5py.check_vlen_dtype(dtype) is not None:
            return True
        return bool(dtype == np.uint8 and len(d.shape) == 2)

    def finish(self) -> pa.Array:
        if self.blobs is not None:
            return pa.array(self.blobs, pa.binary())
        if not self.parts:
            return _fixed(np.zeros((0, *self.shape), self.dtype or np.float32))
        return _fixed(np.concatenate(self.parts))


def _nest(space: dict[str, Any], leaves: dict[str, pa.Array]) -> pa.Array:
    """The leaves of a composite space as one struct column (fields named like Minari's arrow
    backend: Dict keys, Tuple positions ``"0"``, ``"1"``...); a leaf space is its one leaf."""
    return struct_of(leaves) if is_composite(space) else leaves[""]


def struct_of(leaves: dict[str, pa.Array]) -> pa.Array:
    """Flat ``{leaf path: column}`` (paths ``"a.b"``) as one nested struct column.

    Args:
        leaves: One Arrow array per leaf, all of the same length, keyed by dotted path.

    Returns:
        A struct array whose fields follow the paths (``"a.b"`` becomes field ``b`` of field
        ``a``), in the order of ``leaves``.
    """
    tree = nest(leaves)

    def build(node: dict[str, Any]) -> pa.Array:
        arrays = [build(v) if isinstance(v, dict) else v for v in node.values()]
        return pa.StructArray.from_arrays(arrays, names=list(node))

    return build(tree)


def _fixed(a: np.ndarray) -> pa.Array:
    """``[n, *shape]`` as a flat ``fixed_size_list`` (a plain column for ``[n]``)."""
    if a.ndim == 1:
        return pa.array(a)
    flat = np.ascontiguousarray(a).reshape(-1)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat), int(np.prod(a.shape[1:])))
