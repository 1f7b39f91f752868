"""How replay data spreads over shards: routing, global handles, the split of a batch over
shards, global importance weights, and episodes packed as columns for the trip to a shard.

Plain numpy, no Ray: :mod:`.sharded_buffer` (the client, which talks to Ray) and :mod:`.shard`
(what each shard actor runs) use these, and each is tested on its own, the math against plain
references. Episodes travel as :class:`~offline_prelearner.episodes.episode_columns.EpisodeColumns`
(what the rows reader builds).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ...episodes.episode_columns import EpisodeColumns
from ..storage.table import normalize_id

__all__ = [
    "compact",
    "decode_handles",
    "encode_handles",
    "global_weights",
    "handle_bits",
    "shard_of",
    "split_counts",
]

_U64 = (1 << 64) - 1


def shard_of(ids: Sequence[Any], num_shards: int) -> np.ndarray:
    """The shard (int64) of each episode id; the same in every process and Python version.

    Ids are normalised as the storage keys them (``normalize_id``: integers as ``int``, anything
    else as ``str``), so ``np.int64(7)`` and ``7`` route alike and ``"7"`` may not. Integers are
    mixed with splitmix64 (so sequential ids spread), strings hashed with CRC-32 of their UTF-8.

    Args:
        ids: Episode ids (ints, numpy integers, strings, or anything ``normalize_id`` keys as
            its ``str``).
        num_shards: How many shards there are (>= 1).

    Returns:
        int64 ``[len(ids)]``, each in ``0 .. num_shards - 1``.
    """
    keys = [normalize_id(i) for i in ids]
    is_int = np.fromiter((isinstance(k, int) for k in keys), bool, len(keys))
    h = np.empty(len(keys), np.uint64)
    h[is_int] = _splitmix64(np.array([k & _U64 for k in keys if isinstance(k, int)], np.uint64))
    h[~is_int] = np.array(
        [zlib.crc32(k.encode("utf-8", "surrogatepass")) for k in keys if isinstance(k, str)],
        np.uint64,
    )
    out: np.ndarray = (h % np.uint64(num_shards)).astype(np.int64)
    return out


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser on uint64 arrays (wrapping arithmetic)."""
    z = x + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    out: np.ndarray = z ^ (z >> np.uint64(31))
    return out


def handle_bits(num_shards: int) -> int:
    """Low bits of a global handle that name the shard.

    Args:
        num_shards: How many shards there are (>= 1).

    Returns:
        ``ceil(log2(num_shards))``: 0 for one shard, so its handles are the local ones.
    """
    return (num_shards - 1).bit_length()


def encode_handles(local: np.ndarray, shard: np.ndarray, num_shards: int) -> np.ndarray:
    """Global handles ``(local << b) | shard``, ``b = handle_bits(num_shards)``.

    A shard's handles are non-negative int64 whose top bits count its episode placements; with
    ``num_shards`` shards each holds about ``1 / num_shards`` of them, so the ``b`` bits cost
    nothing one buffer holding everything would have had. A handle too large to shift raises
    ``OverflowError`` instead of wrapping into another shard's.

    Args:
        local: int64 handles as the shard's storage issued them (non-negative).
        shard: int64 shard of each handle, same shape (or broadcastable).
        num_shards: How many shards there are; fixes the number of shard bits.

    Returns:
        int64 global handles, the shape of ``local``.

    Raises:
        OverflowError: a local handle is negative or needs more than ``63 - b`` bits.
    """
    local = np.asarray(local, np.int64)
    b = handle_bits(num_shards)
    if local.size and (int(local.max()) >> (63 - b) or int(local.min()) < 0):
        raise OverflowError(f"shard handles must be in [0, 2**{63 - b}), found {int(local.max())}")
    return (local << b) | np.asarray(shard, np.int64)


def decode_handles(handles: np.ndarray, num_shards: int) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`encode_handles`: ``(local handles, shards)``.

    Args:
        handles: int64 global handles (the ``indices`` column of a sharded sample).
        num_shards: How many shards there are, as when the handles were encoded.

    Returns:
        int64 local handles and int64 shards, each the shape of ``handles``. A shard number
        ``>= num_shards`` (a handle from elsewhere) comes back as decoded; callers drop it.
    """
    h = np.asarray(handles, np.int64)
    b = handle_bits(num_shards)
    return h >> b, h & ((1 << b) - 1)


def split_counts(masses: npt.ArrayLike, n: int, rng: np.random.Generator) -> np.ndarray:
    """How many of ``n`` rows each shard draws: multinomial with ``p_s = masses_s / sum``.

    A shard of mass 0 gets none.

    Args:
        masses: Sampling mass of each shard (valid starts, or sum of ``p ** alpha``).
        n: Rows in the batch (>= 0).
        rng: The client's generator (one multinomial draw).

    Returns:
        int64 ``[num_shards]`` counts summing to ``n``.

    Raises:
        ValueError: a mass is negative or not finite, or all are 0.
    """
    m = np.asarray(masses, np.float64)
    if not (np.isfinite(m).all() and (m >= 0).all() and m.sum() > 0):
        raise ValueError(f"shard masses must be finite, >= 0 and not all 0, found {m}")
    return rng.multinomial(n, m / m.sum()).astype(np.int64)


def global_weights(
    row_mass: npt.ArrayLike,
    row_shard: npt.ArrayLike,
    split_mass: npt.ArrayLike,
    mass: npt.ArrayLike,
    min_mass: npt.ArrayLike,
    beta: float,
) -> np.ndarray:
    """Importance weights (float64) of rows drawn by a split over shards.

    Row ``i`` came from shard ``s = row_shard[i]``, which was chosen with share ``q_s =
    split_mass[s] / sum(split_mass)`` and then drew the row with ``row_mass[i] / mass[s]``, so
    ``P(i) = q_s * row_mass[i] / mass[s]``. The least likely step any shard could have drawn has
    ``P_min = min_s q_s * min_mass[s] / mass[s]`` (over shards with ``q_s > 0`` and ``mass[s] >
    0``), and ``w_i = (P(i) / P_min) ** -beta`` (at most 1). With ``split_mass == mass`` this is
    ``P(i) = row_mass[i] / sum(mass)``: one buffer's weights over the union of the shards.

    Args:
        row_mass: Each drawn row's leaf mass in its shard (``p ** alpha``), ``[rows]``.
        row_shard: int shard of each row, ``[rows]``.
        split_mass: Per shard, the mass the split of the batch used (``[num_shards]``, may be
            older than ``mass``).
        mass: Per shard, its total mass when it drew (``[num_shards]``).
        min_mass: Per shard, the mass of its least likely valid start (``inf`` when none).
        beta: Importance-weight exponent (0 gives all ones).

    Returns:
        float64 ``[rows]`` weights in ``(0, 1]``.
    """
    q = np.asarray(split_mass, np.float64)
    q = q / q.sum()
    mass = np.asarray(mass, np.float64)
    shard = np.asarray(row_shard, np.int64)
    live = (q > 0) & (mass > 0)
    share = np.divide(q, mass, out=np.zeros_like(q), where=live)
    p_min = float(np.min(share[live] * np.asarray(min_mass, np.float64)[live]))
    p = share[shard] * np.asarray(row_mass, np.float64)
    weights: np.ndarray = np.power(p / p_min, -float(beta))
    return weights


def compact(columns: EpisodeColumns) -> EpisodeColumns:
    """The same episodes with arrays holding only their own rows (a :meth:`EpisodeColumns.select`
    shares the whole batch's arrays, which would all travel to every shard).

    Args:
        columns: Episodes whose arrays may be views of a larger batch's.

    Returns:
        New columns with their own contiguous arrays (observations of each episode followed by
        its final one, ``last_obs`` None).
    """
    step_rows = columns.step_rows()
    step_at = np.zeros(len(columns), np.int64)
    np.cumsum(columns.length[:-1], out=step_at[1:])
    return replace(
        columns,
        obs=columns.observations(),
        last_obs=None,
        actions=columns.actions[step_rows],
        rewards=columns.rewards[step_rows],
        extras={k: v[step_rows] for k, v in columns.extras.items()},
        obs_at=step_at + np.arange(len(columns)),
        step_at=step_at,
    )
