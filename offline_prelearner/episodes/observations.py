"""Composite observations (gymnasium ``Dict`` / ``Tuple``, nested) as flat maps of leaf arrays.

A composite observation column is a ``dict`` from a leaf's *path* to that leaf's array, every
leaf with the same leading time axis::

    {"observation": f32[T + 1, 4], "desired_goal": f32[T + 1, 2], "achieved_goal": ...}
    {"0": i64[T + 1], "1": f32[T + 1, 3]}                       # Tuple: positions as keys
    {"a.b": f32[T + 1, 2], "a.c": u8[T + 1, 84, 84]}            # nested: keys joined with "."

Flat, not nested: every operation on observations (slice, gather, concatenate, compare) is the
same operation per leaf, a loop over one level of keys; the nesting is rebuilt only at the edges
(:func:`nest`, on the learner side). A plain observation stays one ``ndarray`` and takes none
of these paths. A key holding ``"."`` is read as a path (readers refuse such field names).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "Observations",
    "concat",
    "flatten",
    "is_composite",
    "leaves",
    "length",
    "map_leaves",
    "nest",
    "record_leaves",
    "same",
    "to_records",
]

#: One array (a plain space) or a flat map path -> leaf array (a Dict / Tuple space).
Observations = np.ndarray | dict[str, np.ndarray]

SEP = "."


def is_composite(obs: Any) -> bool:
    """Whether ``obs`` is a dict observation (nested parts) rather than one array.

    Args:
        obs: An observation column: an array, or a (flat or nested) mapping of leaves. A tuple
            or list counts as plain here; :func:`flatten` it first.

    Returns:
        True for any mapping, empty included.
    """
    return isinstance(obs, Mapping)


def flatten(obs: Any, prefix: str = "") -> dict[str, np.ndarray]:
    """A nested observation (dicts, tuples/lists of arrays) as a flat ``{path: array}`` map;
    tuple and list positions become keys ``"0"``, ``"1"``, ...

    Args:
        obs: The observation: mappings and tuples/lists nest, anything else is a leaf (passed
            through ``np.asarray``, so a list of numbers is a nesting of scalar leaves, not one
            array). A flat map flattens to itself.
        prefix: The path of ``obs`` itself, prepended with ``"."`` to every key; ``""`` at the
            top. A plain ``obs`` at the top gives ``{"": array}``.

    Returns:
        ``{path: array}`` in the order the leaves were met.
    """
    items: Iterable[tuple[Any, Any]]
    if isinstance(obs, Mapping):
        items = obs.items()
    elif isinstance(obs, tuple | list):
        items = enumerate(obs)
    else:
        return {prefix: np.asarray(obs)}
    out: dict[str, np.ndarray] = {}
    for k, v in items:
        key = str(k)  # a key with "." is taken as a path already (a flat map flattens to itself)
        out.update(flatten(v, f"{prefix}{SEP}{key}" if prefix else key))
    return out


def nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The nested dicts back from a flat map (Tuple positions stay string keys ``"0"``...).

    Args:
        flat: ``{path: value}`` with paths joined by ``"."``; values are not copied. A path that
            is also the parent of another path is overwritten by (or overwrites) that subtree.

    Returns:
        Nested dicts with the values at their leaves.
    """
    out: dict[str, Any] = {}
    for path, value in flat.items():
        node = out
        *parents, last = path.split(SEP)
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return out


def leaves(obs: Any) -> dict[str, np.ndarray]:
    """The leaves of ``obs``: a plain array is the one leaf ``""``.

    Args:
        obs: A plain array or a flat ``{leaf path: array}`` map.

    Returns:
        ``{leaf path: array}`` (a new dict; the arrays are not copied).
    """
    return dict(obs) if isinstance(obs, Mapping) else {"": obs}


def map_leaves(obs: Any, fn: Callable[[np.ndarray], np.ndarray]) -> Any:
    """``fn`` applied to each leaf (to the array itself for a plain observation).

    Args:
        obs: A plain array or a flat ``{leaf path: array}`` map.
        fn: What to do with one leaf (slice, take, copy...).

    Returns:
        ``fn(obs)`` for a plain observation, else ``{leaf path: fn(leaf)}``.
    """
    if isinstance(obs, Mapping):
        return {k: fn(v) for k, v in obs.items()}
    return fn(obs)


def length(obs: Any) -> int:
    """The time axis' length (the leaves agree: the Episode checks it).

    Args:
        obs: A plain array or a flat ``{leaf path: array}`` map.

    Returns:
        The length of axis 0 (of the first leaf; 0 for a map without leaves).
    """
    if isinstance(obs, Mapping):
        return len(next(iter(obs.values()))) if obs else 0
    return len(obs)


def concat(parts: Sequence[Any]) -> Any:
    """Concatenation along time, leaf by leaf.

    Args:
        parts: Observations of one layout, all plain arrays or all flat maps with the first
            one's leaves (further leaves of later parts are ignored); at least one for plain
            arrays.

    Returns:
        A new array, or ``{leaf path: array}``.
    """
    if parts and isinstance(parts[0], Mapping):
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    return np.concatenate(parts)


def same(a: Any, b: Any) -> bool:
    """Equal observations (NaN equals NaN), leaf by leaf.

    Args:
        a: A plain observation (array-like) or a (flat or nested) map of leaves.
        b: The other one, likewise.

    Returns:
        True when both are maps with the same keys and equal leaves, or both plain with equal
        shapes and values; dtypes are not compared.
    """
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        if not (isinstance(a, Mapping) and isinstance(b, Mapping)) or a.keys() != b.keys():
            return False
        return all(same(a[k], b[k]) for k in a)
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def to_records(leaves: Mapping[str, np.ndarray]) -> np.ndarray:
    """The leaves as one record array ``[rows]``, one field per leaf path (one copy).

    This is how :class:`~offline_prelearner.episodes.episode_columns.EpisodeColumns` holds
    composite observations: one array like a plain observation column, so offsets, gathers and
    concatenation are the same operations for both.

    Args:
        leaves: ``{leaf path: [rows, ...]}``, every leaf as long, at least one.

    Returns:
        A structured array of ``rows`` records.
    """
    n = len(next(iter(leaves.values())))
    dtype = np.dtype([(k, v.dtype, v.shape[1:]) for k, v in leaves.items()])
    out = np.empty(n, dtype)
    for k, v in leaves.items():
        out[k] = v
    return out


def record_leaves(rec: np.ndarray) -> dict[str, np.ndarray]:
    """A record array's fields as ``{leaf path: [rows, ...]}`` views (no copy).

    Args:
        rec: A structured array built by :func:`to_records` (or a slice of one).

    Returns:
        One strided view per leaf.
    """
    return {k: rec[k] for k in rec.dtype.names or ()}
