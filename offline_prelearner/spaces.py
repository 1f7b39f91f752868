"""gymnasium spaces <-> JSON-able dicts, in RLlib's ``gym_space_to_dict`` layout.

RLlib stores arrays inside space dicts as ``base64(zlib(np.save(array)))`` and loads them with
``allow_pickle=True``. Here they are loaded with ``allow_pickle=False`` and a decompression limit,
so a space dict from an untrusted file cannot run code or exhaust memory.
"""

from __future__ import annotations

import base64
import binascii
import io
import zlib
from typing import Any

import gymnasium as gym
import numpy as np

from .errors import DecodeError

__all__ = ["leaf_spaces", "space_from_dict", "space_to_dict"]

_MAX_SPACE_ARRAY_BYTES = 64 << 20


def _encode_ndarray(array: np.ndarray) -> str:
    buf = io.BytesIO()
    np.save(buf, np.asarray(array), allow_pickle=False)
    return base64.b64encode(zlib.compress(buf.getvalue())).decode("ascii")


def _decode_ndarray(text: str) -> np.ndarray:
    try:
        packed = base64.b64decode(text, validate=True)
        dec = zlib.decompressobj()
        raw = dec.decompress(packed, _MAX_SPACE_ARRAY_BYTES + 1)
        if len(raw) > _MAX_SPACE_ARRAY_BYTES or not dec.eof:
            raise DecodeError(
                "space array is truncated or above the size limit", reason="size_limit"
            )
        array = np.load(io.BytesIO(raw), allow_pickle=False)
    except DecodeError:
        raise
    except (binascii.Error, zlib.error, ValueError, OSError) as e:
        raise DecodeError(f"corrupt space array: {e}", reason="bad_space") from None
    if not isinstance(array, np.ndarray):  # an .npz archive: np.load hands back its file object
        raise DecodeError("space array is an .npz archive, not one .npy array", reason="bad_space")
    return array


def space_to_dict(space: gym.Space[Any] | None) -> dict[str, Any] | None:
    """Serializes a gymnasium space to RLlib's dict layout (``None`` stays ``None``).

    Args:
        space: A Box, Discrete, MultiBinary, MultiDiscrete, or a Tuple / Dict of them (nested);
            a Box's bounds and a MultiDiscrete's ``nvec`` are stored as zlib'd ``.npy`` in base64.

    Returns:
        A JSON-able dict (``{"space": "box", "low": ..., ...}``), or None for None.

    Raises:
        DecodeError: A space of another type (``Text``, ``Graph`` ...), ``reason="bad_space"``.
    """
    if space is None:
        return None
    if isinstance(space, gym.spaces.Box):
        return {
            "space": "box",
            "low": _encode_ndarray(space.low),
            "high": _encode_ndarray(space.high),
            "shape": list(space.shape),
            "dtype": space.dtype.str,
        }
    if isinstance(space, gym.spaces.Discrete):
        return {"space": "discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiBinary):
        n = space.n
        return {"space": "multi-binary", "n": n if isinstance(n, int) else list(n)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {
            "space": "multi-discrete",
            "nvec": _encode_ndarray(space.nvec),
            "dtype": space.dtype.str,
        }
    if isinstance(space, gym.spaces.Tuple):
        return {"space": "tuple", "spaces": [space_to_dict(s) for s in space.spaces]}
    if isinstance(space, gym.spaces.Dict):
        return {"space": "dict", "spaces": {k: space_to_dict(s) for k, s in space.spaces.items()}}
    raise DecodeError(f"cannot serialize space of type {type(space).__name__}", reason="bad_space")


def space_from_dict(d: dict[str, Any] | None) -> gym.Space[Any] | None:
    """Inverse of :func:`space_to_dict`; also reads the dicts RLlib 2.60 writes.

    Args:
        d: A space dict as read from a file's metadata (untrusted: arrays load without pickle,
            at most 64 MiB decompressed), or None.

    Returns:
        The gymnasium space, or None for None.

    Raises:
        DecodeError: Not a space dict, an unknown kind, a missing or malformed field
            (``reason="bad_space"``), or an array above the size limit (``"size_limit"``).
    """
    if d is None:
        return None
    if not isinstance(d, dict) or "space" not in d:
        raise DecodeError(f"not a space dict: {str(d)[:80]!r}", reason="bad_space")
    kind = d["space"]
    try:
        if kind == "box":
            return gym.spaces.Box(
                low=_decode_ndarray(d["low"]),
                high=_decode_ndarray(d["high"]),
                shape=tuple(d["shape"]),
                dtype=np.dtype(d["dtype"]),
            )
        if kind == "discrete":
            return gym.spaces.Discrete(int(d["n"]), start=int(d.get("start", 0)))
        if kind == "multi-binary":
            return gym.spaces.MultiBinary(d["n"])
        if kind == "multi-discrete":
            return gym.spaces.MultiDiscrete(_decode_ndarray(d["nvec"]), dtype=np.dtype(d["dtype"]))
        if kind == "tuple":
            return gym.spaces.Tuple([_member(s) for s in d["spaces"]])
        if kind == "dict":
            return gym.spaces.Dict({k: _member(s) for k, s in d["spaces"].items()})
    except DecodeError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise DecodeError(
            f"bad {kind!r} space dict: {type(e).__name__}: {e}", reason="bad_space"
        ) from None
    raise DecodeError(f"unsupported space kind {kind!r}", reason="bad_space")


def _member(d: Any) -> gym.Space[Any]:
    """A member of a Tuple/Dict space dict: must be a space, not ``None``."""
    space = space_from_dict(d)
    if space is None:
        raise DecodeError("a composite space has a null member", reason="bad_space")
    return space


def leaf_spaces(space: gym.Space[Any], prefix: str = "") -> dict[str, gym.Space[Any]]:
    """``{leaf path: space}`` of a Dict / Tuple space (nested), the paths composite observations
    use (:mod:`.observations`: ``"desired_goal"``, ``"0"``, ``"a.b"``); a leaf space is ``{"": it}``
    (``{prefix: it}`` under a prefix).

    Args:
        space: Any gymnasium space; only Dict and Tuple are walked into.
        prefix: The path of ``space`` itself inside an outer space (``""`` at the top); a Dict's
            keys and a Tuple's indices are appended with dots.

    Returns:
        Every leaf space by its dotted path, in the space's own order.
    """
    if isinstance(space, gym.spaces.Dict):
        items: Any = space.spaces.items()
    elif isinstance(space, gym.spaces.Tuple):
        items = enumerate(space.spaces)
    else:
        return {prefix: space}
    out: dict[str, gym.Space[Any]] = {}
    for k, sub in items:
        out.update(leaf_spaces(sub, f"{prefix}.{k}" if prefix else str(k)))
    return out
