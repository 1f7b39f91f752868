"""Sequence: each sampled step expands into a fixed-width window of steps, ``[B, W]`` arrays.

A sample that starts at step ``k`` of an episode of ``L`` steps covers, left-aligned:

* ``b = min(burn_in, k)`` burn-in steps ``k - b .. k - 1`` (context for a recurrent state; fewer
  than ``burn_in`` near the episode's start, never crossing into another episode);
* then up to ``length`` loss steps ``k .. min(k + length, L) - 1``;
* then zeros up to the width ``W = burn_in + length``.

``seq_lens`` is the number of real steps in each row (``b`` plus the loss steps), ``loss_mask``
is true exactly on the loss steps. ``terminateds``/``truncateds`` are per step, true only at a
finished episode's last step; ``t`` is per step (0 in padding); ``eps_id`` and ``weights`` are
per row. A finished episode offers every step as a start; an unfinished one only starts whose
``length`` loss steps are all stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ...config import MAX_SEQ_LEN, check_int
from ...episodes import columns as C
from ..batch import SampleBatch
from ..storage.obs_leaves import obs_names, output_names
from .base import stack_index

if TYPE_CHECKING:
    from ..storage.ring import EpisodeStorage

__all__ = ["LOSS_MASK", "SEQ_LENS", "Sequence"]

LOSS_MASK = "loss_mask"
SEQ_LENS = "seq_lens"


@dataclass(frozen=True)
class Sequence:
    """Windows of ``burn_in + length`` steps; see the module docstring for the exact layout.

    Attributes:
        length: Steps trained on per sequence, in ``[1, MAX_SEQ_LEN]``.
        burn_in: Steps before them that only warm up a recurrent state (fewer at an episode's
            start), in ``[0, MAX_SEQ_LEN]``.

    Raises:
        ConfigError: ``length`` or ``burn_in`` out of range.
    """

    length: int
    burn_in: int = 0

    def __post_init__(self) -> None:
        for name, lo in (("length", 1), ("burn_in", 0)):
            v = getattr(self, name)
            v = v.item() if isinstance(v, np.integer) else v
            object.__setattr__(self, name, check_int(name, v, lo, MAX_SEQ_LEN))

    @property
    def width(self) -> int:
        """Steps per sample: ``burn_in + length``."""
        return self.burn_in + self.length

    def valid_starts(self, lengths: np.ndarray, done: np.ndarray) -> np.ndarray:
        """Per episode, the steps whose whole sequence is stored (every step once the episode is
        done).

        Args:
            lengths: int stored steps of each episode (``[episodes]``).
            done: bool per episode, True when it terminated or was truncated (its last stored
                step is its last step).

        Returns:
            int64 ``[episodes]``: how many of each episode's first steps may start a sample.
        """
        lengths = np.asarray(lengths, dtype=np.int64)
        return np.where(done, lengths, np.maximum(lengths - self.length + 1, 0))

    def step_table(self) -> None:
        """No per-slot cache: a draw gathers what it needs."""
        return None

    def expand(
        self,
        slots: np.ndarray,
        rows: np.ndarray,
        storage: EpisodeStorage,
        rng: np.random.Generator,
        frames: int | None = None,
    ) -> SampleBatch:
        """The sequences from ``slots`` (with burn-in before them); ``seq_lens`` counts the real
        steps, the rest is padding.

        Args:
            slots: int64 ``[B]`` start slots, valid starts of ``storage`` as it is now.
            rows: int64 ``[B]`` table rows of those slots (their episodes).
            storage: The storage to gather from.
            rng: Unused: a sequence draws nothing.
            frames: None for plain observations, or ``k``: observation columns as
                ``[B, W, k, *obs_shape]`` stacks.

        Returns:
            ``[B, W]`` step columns (``W = burn_in + length``), per-row ``eps_id`` and
            ``seq_lens``, and ``loss_mask``.
        """
        start = storage.starts.take(rows)
        length = storage.lengths.take(rows)
        k = slots - start
        b = np.minimum(k, self.burn_in)
        seq_lens = b + np.minimum(self.length, length - k)
        pos = np.arange(self.width, dtype=np.int64)
        real = pos < seq_lens[:, None]  # [B, W]
        first = (slots - b)[:, None]
        pad = storage.pad_slot
        idx = np.where(real, first + pos, pad)
        step = idx - start[:, None]  # step within the episode (garbage where not real)
        last = real & (step == (length - 1)[:, None])

        cols = storage.columns
        out: dict[str, np.ndarray] = {}
        if frames is None:
            new_at = np.where(real, idx + 1, pad)
        else:
            both = stack_index(np.where(real, idx + 1, pad), start[:, None], frames + 1)
            both = np.where(real[..., None], both, pad)
        for ring in obs_names(cols):  # one gather per leaf (plain: the one "obs")
            obs_name, new_name = output_names(ring)
            if frames is None:
                out[obs_name] = cols[ring].take(idx, axis=0)
                out[new_name] = cols[ring].take(new_at, axis=0)
            else:
                stacked = cols[ring].take(both, axis=0)
                out[obs_name], out[new_name] = stacked[:, :, :-1], stacked[:, :, 1:]
        out[C.ACTIONS] = cols["actions"].take(idx, axis=0)
        out[C.REWARDS] = cols["rewards"].take(idx)
        for name in storage.extra_names:
            out[name] = cols["extras/" + name].take(idx, axis=0)
        out[C.TERMINATEDS] = last & storage.terminated.take(rows)[:, None]
        out[C.TRUNCATEDS] = last & storage.truncated.take(rows)[:, None]
        out[C.EPS_ID] = storage.ids.take(rows)
        out[C.T] = np.where(real, storage.t_started.take(rows)[:, None] + step, 0)
        out[SEQ_LENS] = seq_lens.astype(np.int32)
        out[LOSS_MASK] = real & (pos >= b[:, None])
        return SampleBatch._trusted(out)
