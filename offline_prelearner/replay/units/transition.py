"""Transition: each sampled step expands into one ``(obs, action, reward, new_obs)`` transition.

Every unit accepts ``frames``: with ``frames = k`` observations come back stacked,
``[B, k, *obs_shape]``, the last ``k`` observations up to and including the step, repeating the
episode's first stored frame where the episode is younger than ``k`` (see
:class:`~offline_prelearner.replay.units.stack.FrameStack`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ...episodes import columns as C
from ..batch import SampleBatch
from ..storage.obs_leaves import obs_names, output_names
from .base import AllSteps, episode_columns, ones, stack_index

if TYPE_CHECKING:
    from ..storage.ring import EpisodeStorage

__all__ = ["Transition"]


@dataclass(frozen=True)
class Transition:
    """One step: ``obs`` at t, ``actions``/``rewards``/extras at t, ``new_obs`` at t + 1.

    ``terminateds``/``truncateds`` are true only at an episode's last step (and only if it ended
    that way); ``n_step`` is 1. Every stored step of every episode is a valid start: ``new_obs`` of
    an unfinished episode's last stored step is stored too.
    """

    def valid_starts(self, lengths: np.ndarray, done: np.ndarray) -> np.ndarray:
        """Every stored step may start a transition.

        Args:
            lengths: int stored steps of each episode (``[episodes]``).
            done: bool per episode, True when it terminated or was truncated (its last stored
                step is its last step).

        Returns:
            int64 ``[episodes]``: how many of each episode's first steps may start a sample.
        """
        return np.asarray(lengths, dtype=np.int64)

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
        """One-step transitions from ``slots`` (``frames``: observations as stacks).

        Args:
            slots: int64 ``[B]`` start slots, valid starts of ``storage`` as it is now.
            rows: int64 ``[B]`` table rows of those slots (their episodes).
            storage: The storage to gather from.
            rng: Unused: a transition draws nothing.
            frames: None for plain observations, or ``k``: ``obs`` and ``new_obs`` as
                ``[B, k, *obs_shape]`` stacks.

        Returns:
            A batch of ``B`` transitions, ``n_step`` all 1.
        """
        last = slots == storage.last_and_t_base()[0].take(rows)
        out = episode_columns(storage, slots, rows)
        if frames is not None:  # obs and new_obs share k - 1 frames: gather k + 1 once
            both_at = stack_index(slots + 1, storage.starts.take(rows), frames + 1)
        for ring in obs_names(storage.columns):  # one gather per leaf (plain: the one "obs")
            obs_col = storage.columns[ring]
            obs_name, new_name = output_names(ring)
            if frames is None:
                out[obs_name] = obs_col.take(slots, axis=0)
                out[new_name] = obs_col.take(slots + 1, axis=0)
            else:
                both = obs_col.take(both_at, axis=0)
                out[obs_name], out[new_name] = both[:, :-1], both[:, 1:]
        out[C.TERMINATEDS] = storage.terminated.take(rows) & last
        out[C.TRUNCATEDS] = storage.truncated.take(rows) & last
        out[C.N_STEP] = ones(len(slots), np.int32)
        return SampleBatch._trusted(out)

    def expand_all(self, steps: AllSteps) -> SampleBatch:
        """Every step of whole episodes as a transition, straight from their columns: what
        :meth:`expand` gives for the same steps drawn in order from a buffer holding just them
        (:class:`~.base.ExpandsAll`).

        Args:
            steps: The rows of whole, done episodes (:class:`~.base.AllSteps`), in table order.

        Returns:
            One transition per row of ``steps``.
        """
        c, ep = steps.columns, steps.episode
        out = steps.common()
        out[C.OBS] = steps.observations()
        out[C.NEW_OBS] = steps.observations(1)
        last = steps.remaining == 1
        out[C.TERMINATEDS] = c.terminated.take(ep) & last
        out[C.TRUNCATEDS] = c.truncated.take(ep) & last
        out[C.N_STEP] = ones(len(steps), np.int32)
        return SampleBatch._trusted(out)
