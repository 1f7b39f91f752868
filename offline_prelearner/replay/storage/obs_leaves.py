"""Where observations live in the ring: one column per leaf.

A plain observation is the ring column ``"obs"``; a composite one (gymnasium Dict / Tuple, see
:mod:`offline_prelearner.episodes.observations`) is one ring column ``"obs/<leaf path>"`` per leaf,
each ``[capacity + 1, *leaf_shape]`` with its own dtype. Every write, read and gather loops over
these columns; sampled batches name them ``obs`` / ``new_obs`` (plain) or ``obs.<path>`` /
``new_obs.<path>`` (one output column per leaf).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...episodes import columns as C
from ...episodes import observations as O

__all__ = ["obs_items", "obs_names", "output_names", "read_obs", "same_obs"]

PREFIX = "obs/"


def obs_items(obs: Any) -> list[tuple[str, np.ndarray]]:
    """``(ring column name, array)`` per leaf of an episode's observations.

    Args:
        obs: An episode's observations: one array ``[T + 1, *obs_shape]``, or a composite's
            flat ``{leaf path: array}`` map.

    Returns:
        ``[("obs", obs)]`` for a plain array, else ``("obs/<path>", leaf)`` per leaf, in order.
    """
    if O.is_composite(obs):
        return [(PREFIX + k, v) for k, v in obs.items()]
    return [("obs", obs)]


def obs_names(columns: Mapping[str, np.ndarray]) -> list[str]:
    """The ring columns holding observations.

    Args:
        columns: The ring's columns, by name.

    Returns:
        ``["obs"]``, or the ``obs/<path>`` leaf columns in the ring's order.
    """
    if "obs" in columns:
        return ["obs"]
    return [k for k in columns if k.startswith(PREFIX)]


def output_names(ring_name: str) -> tuple[str, str]:
    """The sample columns a ring column fills: ``(obs name, new_obs name)``.

    Args:
        ring_name: ``"obs"`` or an ``"obs/<path>"`` leaf column of the ring.

    Returns:
        ``("obs", "new_obs")``, or ``("obs.<path>", "new_obs.<path>")`` for a leaf.
    """
    if ring_name == "obs":
        return C.OBS, C.NEW_OBS
    path = ring_name[len(PREFIX) :]
    return f"{C.OBS}.{path}", f"{C.NEW_OBS}.{path}"


def read_obs(columns: Mapping[str, np.ndarray], lo: int, hi: int) -> Any:
    """Ring slots ``lo:hi`` of the observations, copied (an array, or the leaf map).

    Args:
        columns: The ring's columns, by name.
        lo: First slot (inclusive).
        hi: End slot (exclusive); ``lo:hi`` does not wrap.

    Returns:
        A new ``[hi - lo, *obs_shape]`` array, or ``{leaf path: array}`` for a composite.
    """
    names = obs_names(columns)
    if names == ["obs"]:
        return columns["obs"][lo:hi].copy()
    return {k[len(PREFIX) :]: columns[k][lo:hi].copy() for k in names}


def same_obs(columns: Mapping[str, np.ndarray], slot: int, obs: Any, t: int) -> bool:
    """Whether ring slot ``slot`` holds observation ``t`` of ``obs`` (NaN equals NaN).

    Args:
        columns: The ring's columns, by name.
        slot: The ring slot to compare.
        obs: An episode's observations, as :func:`obs_items` takes them.
        t: The index of the observation within ``obs``.

    Returns:
        True when the leaves are the ring's and every one is equal there; False otherwise
        (also when the episode's leaves differ from the ring's).
    """
    items = obs_items(obs)
    if [k for k, _ in items] != obs_names(columns):
        return False
    return all(O.same(columns[k][slot], v[t]) for k, v in items)
