"""What a conversion carries besides the episodes: the env spec and the spaces.

A Minari dataset holds them in ``data/metadata.json`` (``env_spec``, ``eval_env_spec``: gymnasium
``EnvSpec.to_json()``; ``observation_space``, ``action_space``: Minari's serialization). Rows and
msgpack episodes Parquet have no place of their own for an env spec, so ``convert`` writes the
same four values into the Parquet schema metadata of every file it writes, under
:data:`META_KEY` (a JSON object); any tool ignores it, and a later ``convert --to minari`` of
those files takes it back. Msgpack episode records also carry the spaces in each record
(RLlib's ``_observation_space`` / ``_action_space``).

``--env-id ID`` gives the spec from gymnasium's registry (:func:`info_from_env_id`). Where the
source has no spaces, a Minari dataset takes the env's (:func:`env_spaces`) when every episode's
data fits them, else spaces inferred from the data.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow.parquet as pq

from ..errors import ConfigError
from ..io.formats.minari.dataset import space_from_minari, space_to_minari
from ..io.stores import input_file

__all__ = [
    "META_KEY",
    "DatasetInfo",
    "env_spaces",
    "info_from_env_id",
    "info_of_files",
    "space_fits",
    "with_env_spaces",
]

#: Parquet schema-metadata key of the :class:`DatasetInfo` that ``convert`` writes.
META_KEY = b"offline_prelearner.dataset"


@dataclass(frozen=True)
class DatasetInfo:
    """The env spec (gymnasium JSON) and the spaces of a dataset; any of them may be unknown."""

    env_spec: str | None = None
    eval_env_spec: str | None = None
    observation_space: gym.Space[Any] | None = None
    action_space: gym.Space[Any] | None = None

    @property
    def env_id(self) -> str | None:
        """The env id of ``env_spec`` (None without one, or where the spec has no ``id``)."""
        env_id = None if self.env_spec is None else json.loads(self.env_spec).get("id")
        return None if env_id is None else str(env_id)

    def or_else(self, other: DatasetInfo) -> DatasetInfo:
        """This info, each unknown value taken from ``other``.

        Args:
            other: The fallback (a dataset's source, or the env's); its values are used only
                where this info's are None.

        Returns:
            A new info; the two are not checked against each other.
        """
        return DatasetInfo(
            self.env_spec if self.env_spec is not None else other.env_spec,
            self.eval_env_spec if self.eval_env_spec is not None else other.eval_env_spec,
            self.observation_space if self.observation_space is not None
            else other.observation_space,
            self.action_space if self.action_space is not None else other.action_space,
        )  # fmt: skip

    def to_metadata(self) -> dict[bytes, bytes]:
        """The Parquet schema metadata entry (empty when nothing is known)."""
        d: dict[str, Any] = {}
        for key in ("env_spec", "eval_env_spec"):
            if getattr(self, key) is not None:
                d[key] = getattr(self, key)
        for key in ("observation_space", "action_space"):
            space = getattr(self, key)
            if space is not None:
                with contextlib.suppress(Exception):  # a space Minari cannot write: not carried
                    d[key] = space_to_minari(space)
        return {META_KEY: json.dumps(d).encode()} if d else {}

    @classmethod
    def from_metadata(cls, meta: dict[bytes, bytes] | None) -> DatasetInfo:
        """The info stored in Parquet metadata under ``META_KEY``, or an empty info when there is
        none.

        Args:
            meta: A Parquet schema's metadata (``pyarrow.Schema.metadata``); None or a dict
                without ``META_KEY`` gives an empty info. Spaces are read as Minari writes them.

        Raises:
            ValueError: The entry is not JSON.
        """
        raw = (meta or {}).get(META_KEY)
        if raw is None:
            return cls()
        d = json.loads(raw)
        spaces = {
            k: space_from_minari(d[k]) for k in ("observation_space", "action_space") if k in d
        }
        return cls(d.get("env_spec"), d.get("eval_env_spec"), **spaces)


def info_of_files(files: list[str]) -> DatasetInfo:
    """The :class:`DatasetInfo` a previous ``convert`` wrote into the first Parquet file.

    Args:
        files: The input's data files (local paths or store URIs); the first whose name ends
            in ``.parquet`` is read for its schema. None of them Parquet, or a file that cannot
            be read (the reader reports it later), gives an empty info.
    """
    first = next((f for f in files if f.endswith(".parquet")), None)
    if first is None:
        return DatasetInfo()
    try:
        return DatasetInfo.from_metadata(pq.read_schema(input_file(first)).metadata)
    except (OSError, ValueError):
        return DatasetInfo()  # the reader reports an unreadable file


def info_from_env_id(env_id: str) -> DatasetInfo:
    """The spec of ``env_id`` from gymnasium's registry (spaces: :func:`env_spaces`).

    Args:
        env_id: A registered gymnasium id (``"CartPole-v1"``); the env is not made.

    Returns:
        An info holding only ``env_spec``.

    Raises:
        ConfigError: In one line, for an id gymnasium does not know or a spec that cannot be
            written as JSON.
    """
    try:
        spec = gym.spec(env_id)
    except gym.error.Error as e:
        raise ConfigError(f"--env-id {env_id!r}: {e}") from None
    try:
        text = spec.to_json()
    except ValueError as e:
        raise ConfigError(f"--env-id {env_id!r}: its spec cannot be written as JSON: {e}") from None
    return DatasetInfo(env_spec=text)


def env_spaces(env_spec: str | None) -> DatasetInfo:
    """The spaces of the env that ``env_spec`` (gymnasium JSON) makes; none where it cannot be made
    here (its simulator not installed, a spec of another gymnasium version): the spaces then come
    from the data.

    Args:
        env_spec: The env's spec as gymnasium JSON (``EnvSpec.to_json``); None gives an empty
            info. The env is made and closed once.

    Returns:
        An info holding only the two spaces, or an empty one.
    """
    if env_spec is None:
        return DatasetInfo()
    try:
        env = gym.make(gym.envs.registration.EnvSpec.from_json(env_spec))
    except Exception:  # any failure to build the env: the spec still holds, spaces unknown
        return DatasetInfo()
    try:
        return DatasetInfo(observation_space=env.observation_space, action_space=env.action_space)
    finally:
        env.close()


def space_fits(space: gym.Space[Any], column: Any) -> bool:
    """Whether every row of ``column`` (``[N, ...]``; a composite observation's flat leaf map)
    lies in ``space``: one vector pass for Box / Discrete / MultiBinary / MultiDiscrete leaves.

    Args:
        space: The env's space for the column (any other kind of space never fits).
        column: The column's values, one row per step (anything ``np.asarray`` takes); a dict
            (a composite observation) never fits.

    Returns:
        True where shapes and dtypes match (Box: numeric or bool; Discrete and MultiDiscrete:
        integers) and every value lies in the bounds; False otherwise.
    """
    if isinstance(column, dict):
        return False  # composite data keeps the spaces inferred from it or from the source
    x = np.asarray(column)
    if isinstance(space, gym.spaces.Box):
        if x.shape[1:] != space.shape or x.dtype.kind not in "iufb":
            return False
        return bool(np.all(x >= space.low) and np.all(x <= space.high))
    if isinstance(space, gym.spaces.Discrete):
        if x.ndim != 1 or x.dtype.kind not in "iu":
            return False
        return bool(np.all(x >= space.start) and np.all(x < space.start + space.n))
    if isinstance(space, gym.spaces.MultiBinary):
        return x.shape[1:] == tuple(np.atleast_1d(space.n)) and bool(np.isin(x, (0, 1)).all())
    if isinstance(space, gym.spaces.MultiDiscrete):
        if x.shape[1:] != space.shape or x.dtype.kind not in "iu":
            return False
        return bool(np.all(x >= space.start) and np.all(x < space.start + space.nvec))
    return False


def with_env_spaces(info: DatasetInfo, env: DatasetInfo, episodes: list[Any]) -> DatasetInfo:
    """``info`` with the env's spaces where ``info`` has none and every episode's data fits them
    (checked over the episodes' arrays joined into pieces of up to 64 MiB: a few vector passes,
    not one per episode).

    Args:
        info: The dataset's info so far (a space it holds is kept as it is).
        env: The env's info (:func:`env_spaces`); its spaces are the candidates.
        episodes: The dataset's episodes, each with ``observations`` and ``actions`` arrays
            (``[T, ...]``); none keeps ``info`` unchanged.

    Returns:
        ``info``, with each missing space taken from ``env`` where all the data fits it.
    """
    out = info
    if not episodes:
        return out
    obs_space, act_space = env.observation_space, env.action_space
    if (
        out.observation_space is None
        and obs_space is not None
        and _all_fit(obs_space, [e.observations for e in episodes])
    ):
        out = replace(out, observation_space=obs_space)
    if (
        out.action_space is None
        and act_space is not None
        and _all_fit(act_space, [e.actions for e in episodes])
    ):
        out = replace(out, action_space=act_space)
    return out


_PIECE_BYTES = 64 << 20


def _all_fit(space: gym.Space[Any], arrays: list[Any]) -> bool:
    if any(isinstance(a, dict) for a in arrays):
        return False  # composite data keeps the spaces inferred from it or from the source
    piece: list[np.ndarray] = []
    size = 0
    for a in [*arrays, None]:
        if piece and (a is None or size + a.nbytes > _PIECE_BYTES):
            if not space_fits(space, np.concatenate(piece)):
                return False
            piece, size = [], 0
        if a is not None:
            piece.append(a)
            size += a.nbytes
    return True
