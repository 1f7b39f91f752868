"""Example data for the contract checks: small, real, deterministic episodes, rows and batches.

Every ``make_*`` default of the contract mixins draws from here; pass your own data to the checks
where your object needs other shapes.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..episodes.episode import Episode
from ..io.formats.rows.writer import episodes_to_rows
from ..replay.batch import SampleBatch
from ..replay.replay_buffer import EpisodeReplayBuffer

__all__ = ["example_episodes", "example_rows", "example_sample_batch"]


def example_episodes(
    n: int = 8, *, seed: int = 0, obs_shape: tuple[int, ...] = (4,), fragment: bool = True
) -> list[Episode]:
    """``n`` episodes of lengths 1..~20 (terminated, one truncated, and with ``fragment`` one
    not-done last episode), float32 observations, int64 actions, float32 rewards.

    Args:
        n: How many episodes (the first always has one step).
        seed: Seeds the lengths and values; also names the ids (``ep<seed>-<i>``), so batches
            of different seeds never share an episode.
        obs_shape: Shape of one observation.
        fragment: Leave the last episode neither terminated nor truncated (default True).

    Returns:
        The episodes, episode ``i`` at position ``i``.
    """
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 21, size=n)
    lengths[0] = 1  # the edge: a one-step episode
    out = []
    for i, length in enumerate(lengths.tolist()):
        obs = rng.normal(size=(length + 1, *obs_shape)).astype(np.float32)
        done = i < n - 1 or not fragment
        out.append(
            Episode(
                id=f"ep{seed}-{i}",
                observations=obs,
                actions=rng.integers(0, 2, size=length),
                rewards=rng.normal(size=length).astype(np.float32),
                terminated=done and i != 1,
                truncated=done and i == 1,
            )
        )
    return out


def example_rows(episodes: list[Episode] | None = None) -> pa.Table:
    """Episodes (default :func:`example_episodes`) as an Arrow table of rows, RLlib's layout.

    Args:
        episodes: The episodes to write; None for :func:`example_episodes`.

    Returns:
        One row per timestep.
    """
    return episodes_to_rows(example_episodes() if episodes is None else episodes)


def example_sample_batch(
    batch_size: int = 32, *, episodes: list[Episode] | None = None, seed: int = 0
) -> SampleBatch:
    """A real sampled batch (uniform, 1-step transitions) from ``episodes``.

    Args:
        batch_size: Rows to draw (with replacement).
        episodes: The episodes to buffer; None for ``example_episodes(seed=seed)``.
        seed: Seeds the buffer's draws (and the default episodes).

    Returns:
        The batch, as :class:`EpisodeReplayBuffer` samples it (with ``weights`` and
        ``indices``).
    """
    eps = example_episodes(seed=seed) if episodes is None else episodes
    buf = EpisodeReplayBuffer(sum(len(e) + 1 for e in eps) + 1, seed=seed)
    buf.add(eps)
    return buf.sample(batch_size)
