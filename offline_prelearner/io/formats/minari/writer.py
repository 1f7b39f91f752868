"""Episodes -> a Minari 0.5.4 dataset (hdf5 backend), written with h5py, no Minari needed.

:func:`write_minari_dataset` writes ``<folder>/data/metadata.json`` and
``<folder>/data/main_data.hdf5`` in the layout Minari's own hdf5 storage writes (group
``episode_<k>`` per episode: ``observations (T+1, ...)``, ``actions``, ``rewards``,
``terminations``, ``truncations`` of ``T`` rows, an empty ``infos`` group; attrs ``id``,
``total_steps``). ``minari.MinariDataset("<folder>/data")`` opens it, and so does
``minari.load_dataset(id)`` when ``<folder>`` is ``$MINARI_DATASETS_PATH/<id>``.

Composite observations (Dict / Tuple spaces, nested; episodes hold them as flat
``{leaf path: array}`` maps) are written as Minari nests them: a group per Dict key, ``_index_<i>``
per Tuple item, one dataset per leaf; the space is serialized the way Minari does.

Why hdf5 and h5py: Minari's own arrow/parquet writer rewrites metadata.json (walking every file
written so far) after each episode -- quadratic -- and needs jax only to record from an env; one
h5py pass is linear and needs nothing Minari does not already read.

Episodes become ids ``0..n-1`` in order (Minari requires sequential ids); the source id, where it
is not ``str(k)``, is kept in the episode group's attr ``source_id``, and a fragment's first env
step, where it is not 0, in ``t_started`` (Minari ignores both; our reader restores them, so ids
and ``t_started`` round-trip). ``env_spec`` / ``eval_env_spec`` (gymnasium ``EnvSpec.to_json()``)
go into the metadata, where ``MinariDataset.recover_environment()`` finds them; without one the
metadata has none (Minari then cannot recover the env).

Flags: as recorded: a terminated episode has ``terminations[-1]``, a truncated one
``truncations[-1]``, and a not-done fragment (``convert``'s ``fragments="keep"``) neither, so it
comes back not done (Minari's DataCollector sets ``truncations[-1]`` on an episode it had to cut;
a reader that bootstraps unless terminated treats both alike). Extras (RLlib's
``action_logp``...) go into datasets ``extras/<name>`` of the episode group, which Minari does
not read and our reader does (so they round-trip through ``convert``); agent / module ids and
infos are not written. Images are written raw (``jpeg_encoding: false``): lossless.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from ....episodes.episode import Episode
from ....errors import ConfigError, UnsupportedFormatError, shown
from ...optional import import_h5py
from .dataset import space_to_minari

__all__ = [
    "MINARI_WRITE_VERSION",
    "infer_obs_space",
    "infer_space",
    "is_minari_id",
    "write_minari_dataset",
]

#: The Minari version whose layout is written (``minari_version`` in the metadata).
MINARI_WRITE_VERSION = "0.5.4"


def infer_space(column: np.ndarray, role: str) -> gym.Space[Any]:
    """A space for data with none: integer scalars -> Discrete(max + 1), else an unbounded Box
    (uint8 images -> Box(0, 255)).

    Args:
        column: ``[steps, *step_shape]`` values of one column; only this data is looked at, so
            a Discrete's ``n`` is what this column reaches.
        role: What the column is (``"actions"``, ``"observations leaf 'a'"``), named in errors.

    Returns:
        Discrete for non-negative integer scalars, MultiBinary of the step shape for bools
        (``MultiBinary([])``, shape ``()``, for scalar bools), Box(0, 255) for
        uint8, otherwise a Box over the dtype's whole range (``-inf..inf`` for floats).

    Raises:
        UnsupportedFormatError: A dtype that is neither bool nor numeric.
    """
    step = column.shape[1:]
    if column.dtype.kind in "iu" and step == () and column.size and column.min() >= 0:
        return gym.spaces.Discrete(int(column.max()) + 1)
    if column.dtype.kind == "b":
        return gym.spaces.MultiBinary(list(step))  # [] for a scalar: shape (), as the data's
    if column.dtype == np.uint8:
        return gym.spaces.Box(0, 255, shape=step, dtype=np.uint8)
    if column.dtype.kind not in "iuf":
        raise UnsupportedFormatError(f"cannot write {role} of dtype {column.dtype} to Minari")
    if column.dtype.kind == "f":
        lo, hi = -np.inf, np.inf
    else:
        lo, hi = np.iinfo(column.dtype).min, np.iinfo(column.dtype).max
    return gym.spaces.Box(lo, hi, shape=step, dtype=column.dtype)


def infer_obs_space(observations: Any) -> gym.Space[Any]:
    """:func:`infer_space` of a plain observation; a composite one (a flat ``{leaf path: array}``
    map) as a Dict of its leaves' spaces, nested along the paths (a Tuple cannot be told from a
    Dict with keys "0", "1"...: pass the space to keep it a Tuple).

    Args:
        observations: One episode's observations: an array ``[T + 1, *shape]``, or a flat
            ``{leaf path: array}`` map for a composite observation.

    Returns:
        The inferred space.

    Raises:
        UnsupportedFormatError: A leaf of a dtype :func:`infer_space` cannot describe.
    """
    if not isinstance(observations, dict):
        return infer_space(observations, "observations")
    tree: dict[str, Any] = {}
    for path, leaf in observations.items():
        node = tree
        *parents, last = path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = infer_space(leaf, f"observations leaf {path!r}")

    def build(node: dict[str, Any]) -> gym.Space[Any]:
        return gym.spaces.Dict({k: build(v) if isinstance(v, dict) else v for k, v in node.items()})

    return build(tree)


def _h5_paths(space: gym.Space[Any], path: str = "", h5: str = "observations") -> dict[str, str]:
    """``{leaf path: hdf5 path}``: Minari nests a Dict as groups by key, a Tuple as ``_index_<i>``;
    a plain space is the one leaf ``""`` at ``observations``."""
    if isinstance(space, gym.spaces.Dict):
        items: Any = [(str(k), str(k), v) for k, v in space.spaces.items()]
    elif isinstance(space, gym.spaces.Tuple):
        items = [(str(i), f"_index_{i}", v) for i, v in enumerate(space.spaces)]
    else:
        return {path: h5}
    out: dict[str, str] = {}
    for key, h5key, sub in items:
        out.update(_h5_paths(sub, f"{path}.{key}" if path else key, f"{h5}/{h5key}"))
    return out


class _H5:
    """h5py's low-level API for the many small objects of an episode group, cheaper than
    ``Group.create_dataset`` / ``attrs[...] =`` (which guess dtypes, build property lists and wrap
    every object): 8,880 CartPole episodes (200k steps) 7.8-8.1 s -> 4.1-5.0 s, same process,
    alternating; what remains is HDF5's own cost per object. The same HDF5 objects (types as
    h5py maps them, bools as its enum, contiguous layout), without creation times so that the
    same episodes give the same bytes."""

    def __init__(self, h5py: Any) -> None:
        self.h5 = h5py
        self.lcpl = h5py.h5p.create(h5py.h5p.LINK_CREATE)
        self.lcpl.set_create_intermediate_group(True)  # observations/<key>/<leaf>
        self.dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        self.dcpl.set_obj_track_times(False)
        self.gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
        self.gcpl.set_obj_track_times(False)
        self.scalar = h5py.h5s.create(h5py.h5s.SCALAR)
        self._types: dict[np.dtype[Any], Any] = {}

    def _type(self, dtype: np.dtype[Any]) -> Any:
        t = self._types.get(dtype)
        if t is None:
            t = self._types[dtype] = self.h5.h5t.py_create(dtype, logical=True)
        return t

    def group(self, parent: Any, name: str) -> Any:
        return self.h5.h5g.create(parent, name.encode(), lcpl=self.lcpl, gcpl=self.gcpl)

    def dataset(self, parent: Any, name: str, data: np.ndarray) -> None:
        a = np.ascontiguousarray(data)
        space = self.h5.h5s.create_simple(a.shape)
        d = self.h5.h5d.create(
            parent, name.encode(), self._type(a.dtype), space, lcpl=self.lcpl, dcpl=self.dcpl
        )
        if a.size:
            d.write(self.h5.h5s.ALL, self.h5.h5s.ALL, a)

    def attr(self, parent: Any, name: str, value: int | str) -> None:
        """An int64 or string scalar attribute (a string as h5py writes one: variable-length
        UTF-8, so ``group.attrs[name]`` is a ``str``)."""
        dtype = self.h5.string_dtype() if isinstance(value, str) else np.dtype(np.int64)
        a = np.array(value, dtype=dtype)
        self.h5.h5a.create(parent, name.encode(), self._type(a.dtype), self.scalar).write(a)


def _source_id(ep: Episode) -> str:
    """The episode id as the ``source_id`` attr holds it: HDF5 strings end at a NUL byte and
    are UTF-8, so an id with a NUL (or undecodable bytes) is refused rather than cut."""
    sid = str(ep.id)
    try:
        sid.encode("utf-8")
        ok = "\0" not in sid
    except UnicodeEncodeError:
        ok = False
    if not ok:
        raise UnsupportedFormatError(
            f"episode {shown(ep.id)}: its id holds a NUL byte or bytes that are not UTF-8, "
            "which Minari's HDF5 string attributes cannot store; convert --to rows or "
            "--to episodes keeps any id"
        )
    return sid


def _write_observations(h5: _H5, group: Any, ep: Episode, paths: dict[str, str]) -> None:
    obs: Any = ep.observations
    leaves = obs if isinstance(obs, dict) else {"": obs}
    if leaves.keys() != paths.keys():
        raise UnsupportedFormatError(
            f"episode {shown(ep.id)} has observation leaves {sorted(leaves)}, the observation "
            f"space has {sorted(paths)}"
        )
    for path, h5path in paths.items():
        h5.dataset(group, h5path, leaves[path])


#: Minari 0.5.4's dataset id (its ``DATASET_ID_RE``), restated: an optional namespace of two or
#: more of letters, digits, ``_`` and ``-`` (``/`` inside), then ``/``; a name of those; an
#: optional ``-vN``. No ``.``, ``:`` or ``..``: Minari's loader refuses them ("Malformed dataset
#: ID"), whatever the writer would do.
_MINARI_ID = re.compile(r"(?:[-\w][-\w/]*[-\w]/)?[-\w]+(?:-v\d+)?")


def is_minari_id(dataset_id: str) -> bool:
    """Whether Minari 0.5.4 accepts ``dataset_id`` (what the writer admits, nothing more).

    Args:
        dataset_id: The id, e.g. ``ns/cartpole-v0``.

    Returns:
        True where Minari's own id pattern matches the whole id.
    """
    return _MINARI_ID.fullmatch(dataset_id) is not None


def write_minari_dataset(
    folder: str | os.PathLike[str],
    episodes: Iterable[Episode],
    dataset_id: str,
    *,
    observation_space: gym.Space[Any] | None = None,
    action_space: gym.Space[Any] | None = None,
    description: str | None = None,
    env_spec: str | None = None,
    eval_env_spec: str | None = None,
) -> dict[str, Any]:
    """Writes ``episodes`` as a Minari dataset under ``folder`` (see the module docstring).

    Spaces default to :func:`infer_space` from the first episode. Returns the metadata written.
    Raises ConfigError for a malformed ``dataset_id`` or a ``folder/data`` that already exists.

    Args:
        folder: The dataset folder (local); ``folder/data`` is created and must not exist. On
            any failure ``folder/data`` is removed again (and ``folder`` if this call made it
            and it is empty), so a retry is not refused with "exists".
        episodes: The episodes to write, in order; each becomes ``episode_<k>`` (k from 0),
            its own id kept as the ``source_id`` attribute where it differs.
        dataset_id: A Minari id, ``(namespace/)name(-vN)``, a namespace of at least 2
            characters.
        observation_space: The observation space written to the metadata; None infers it from
            the first episode (:func:`infer_obs_space`).
        action_space: The action space; None infers it from the first episode's actions.
        description: The metadata's description; None writes "converted by offline_prelearner".
        env_spec: A gymnasium EnvSpec as JSON, stored as is; None leaves it out.
        eval_env_spec: The same for the evaluation environment.

    Returns:
        The metadata written to ``data/metadata.json``.

    Raises:
        ConfigError: A malformed ``dataset_id``, an existing ``folder/data``, or no episodes.
        UnsupportedFormatError: h5py is missing, a space or dtype cannot be written, or the
            episodes' extra columns differ or contain ``"/"``.
    """
    if not is_minari_id(dataset_id):
        raise ConfigError(
            f"dataset_id {dataset_id!r} is not a Minari id: (namespace/)name(-vN) of letters, "
            "digits, '_' and '-' ('/' inside the namespace), a namespace of at least 2 "
            "characters (--dataset-id)"
        )
    h5py = import_h5py("writing a Minari dataset")
    data = Path(folder) / "data"
    if data.exists():
        raise ConfigError(f"{str(data)!r} exists; a Minari dataset is written into a new folder")
    made = [p for p in (data.parent, data) if not p.exists()]
    data.mkdir(parents=True)
    try:
        return _write(
            h5py,
            data,
            episodes,
            dataset_id,
            observation_space,
            action_space,
            description,
            env_spec,
            eval_env_spec,
        )
    except BaseException:  # nothing left behind to block a retry with "exists"
        shutil.rmtree(data, ignore_errors=True)
        if data.parent in made:
            with contextlib.suppress(OSError):
                data.parent.rmdir()  # only if empty
        raise


def _write(
    h5py: Any,
    data: Path,
    episodes: Iterable[Episode],
    dataset_id: str,
    observation_space: gym.Space[Any] | None,
    action_space: gym.Space[Any] | None,
    description: str | None,
    env_spec: str | None,
    eval_env_spec: str | None,
) -> dict[str, Any]:
    """:func:`write_minari_dataset` into the new folder ``data``."""
    n_eps = n_steps = 0
    obs_paths: dict[str, str] | None = None
    extras: list[str] | None = None
    with h5py.File(data / "main_data.hdf5", "w") as f:
        h5 = _H5(h5py)
        for ep in episodes:
            if observation_space is None:
                observation_space = infer_obs_space(ep.observations)
            if obs_paths is None:
                obs_paths = _h5_paths(observation_space)
            if action_space is None:
                action_space = infer_space(ep.actions, "actions")
            t = len(ep)
            g = h5.group(f.id, f"episode_{n_eps}")
            h5.attr(g, "id", n_eps)
            h5.attr(g, "total_steps", t)
            if str(ep.id) != str(n_eps):
                h5.attr(g, "source_id", _source_id(ep))
            if ep.t_started:
                h5.attr(g, "t_started", ep.t_started)
            _write_observations(h5, g, ep, obs_paths)
            h5.dataset(g, "actions", ep.actions)
            h5.dataset(g, "rewards", ep.rewards)
            term = np.zeros(t, bool)
            trunc = np.zeros(t, bool)
            if t:  # as recorded: a fragment (convert's fragments="keep") ends with neither
                term[-1] = ep.terminated
                trunc[-1] = ep.truncated
            h5.dataset(g, "terminations", term)
            h5.dataset(g, "truncations", trunc)
            h5.group(g, "infos")
            if extras is None:
                extras = sorted(ep.extras)
                bad = [n for n in extras if "/" in n]
                if bad:
                    raise UnsupportedFormatError(f"extra columns {bad}: '/' is HDF5's separator")
            elif sorted(ep.extras) != extras:
                raise UnsupportedFormatError(
                    f"episode {shown(ep.id)} has extra columns {sorted(ep.extras)}, the first "
                    f"episode {extras}; a Minari dataset holds one set"
                )
            for name in extras:
                h5.dataset(g, f"extras/{name}", ep.extras[name])
            n_eps += 1
            n_steps += t
    if observation_space is None or action_space is None:
        raise ConfigError("no episodes to write: a Minari dataset needs at least one")
    size_mb = sum(p.stat().st_size for p in data.iterdir()) / 2**20
    meta = {
        "dataset_id": dataset_id,
        "minari_version": MINARI_WRITE_VERSION,
        "data_format": "hdf5",
        "jpeg_encoding": False,
        "total_episodes": n_eps,
        "total_steps": n_steps,
        "observation_space": json.dumps(space_to_minari(observation_space)),
        "action_space": json.dumps(space_to_minari(action_space)),
        **({"env_spec": env_spec} if env_spec is not None else {}),
        **({"eval_env_spec": eval_env_spec} if eval_env_spec is not None else {}),
        "dataset_size": round(size_mb, 1),
        "algorithm_name": "offline_prelearner convert",
        "description": description or "converted by offline_prelearner",
    }
    with open(data / "metadata.json", "w") as fh:
        json.dump(meta, fh)
    return meta
