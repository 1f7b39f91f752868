"""What the report summarises of the kept episodes, gathered a chunk of episodes at a time.

:class:`Collector` takes the episodes ``inspect`` kept (validated, de-duplicated), in chunks of
bounded size (:func:`chunks`: a few MB of observations each), concatenates each chunk's columns
once and feeds them to the streaming accumulators of :mod:`.stats`: per observation leaf and
dimension, per action dimension (and the count of each discrete action), per-step rewards. Per
episode it keeps three numbers (length, return, discounted return) and a module code, as
``inspect`` itself does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from ..config import SampleConfig
from ..episodes import observations as O
from ..episodes.episode_columns import EpisodeColumns
from ..spaces import leaf_spaces
from .stats import Moments, OutOfBounds, Sample

__all__ = ["Collector", "LeafStats", "chunks", "is_image"]

#: Observation bytes per chunk (its float64 copy is 8x that for uint8 frames).
CHUNK_BYTES = 8 << 20
#: The most episodes per chunk.
CHUNK_EPISODES = 4096
#: Dimensions of a leaf sampled for histograms (the moments cover every dimension).
SAMPLED_DIMS = 16
#: Distinct integer actions counted one by one; more than that and actions are continuous.
MAX_DISCRETE = 256
#: Sample frames shown per image leaf.
FRAMES = 8
#: The discount of the discounted return (``report --gamma``): the n-step samples' default.
GAMMA: float = SampleConfig.gamma


def is_image(step_shape: tuple[int, ...]) -> bool:
    """Whether a leaf of this per-step shape is an image: ``H x W`` or ``H x W x C`` (C in 1, 3,
    4), both sides at least 8.

    Args:
        step_shape: The shape of one step's value (without the row axis); channels last.

    Returns:
        True for an image shape; the dtype is not looked at.
    """
    if len(step_shape) == 3 and step_shape[2] not in (1, 3, 4):
        return False
    return len(step_shape) in (2, 3) and min(step_shape[:2]) >= 8


def _bounds(space: gym.Space[Any] | None) -> tuple[np.ndarray, np.ndarray] | None:
    """``(low, high)`` of a Box or Discrete space, else None."""
    if isinstance(space, gym.spaces.Box):
        return np.asarray(space.low, np.float64), np.asarray(space.high, np.float64)
    if isinstance(space, gym.spaces.Discrete):
        return np.array([float(space.start)]), np.array([float(space.start + space.n - 1)])
    return None


@dataclass
class LeafStats:
    """One observation leaf (or the actions, or the rewards): its moments, sample and bounds.

    Attributes:
        name: ``obs``, ``obs.<leaf path>``, ``actions`` or ``rewards``.
        shape: The per-step shape.
        dtype: The dtype's name.
        image: Whether the leaf holds frames (then its moments are per channel).
        moments: Per dimension (per channel for frames).
        sample: Up to :data:`SAMPLED_DIMS` dimensions of a sample of rows (None for frames).
        space: The declared space, if any.
        out_of_space: Values outside the declared space's bounds, per dimension.
        frames: Sample frames (images only).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    image: bool = False
    moments: Moments = field(default_factory=Moments)
    sample: Sample | None = None
    space: gym.Space[Any] | None = None
    out_of_space: OutOfBounds | None = None
    frames: list[np.ndarray] = field(default_factory=list)

    @classmethod
    def start(cls, name: str, first: np.ndarray, space: gym.Space[Any] | None, seed: int) -> Any:
        """The stats of a leaf whose first chunk is ``first`` (``[n, ...]``).

        Only the shape and dtype are taken from ``first``; the caller adds it (and every later
        chunk) with :meth:`update`.

        Args:
            name: The leaf's name in the report: ``obs``, ``obs.<leaf path>``, ``actions`` or
                ``rewards``.
            first: The leaf's first chunk, ``[n, *step_shape]``; fixes the per-step shape and
                dtype, and whether the leaf is an image (:func:`is_image`).
            space: The declared space of the leaf, if any; a Box or Discrete space whose bounds
                fit the step shape (one bound, or one per dimension) makes the stats count
                values outside it; any other space (or None) counts nothing.
            seed: Seed of the row sample (images keep no sample), so the same data gives the
                same report.

        Returns:
            Empty stats for the leaf.
        """
        shape = tuple(first.shape[1:])
        image = is_image(shape)
        bounds = _bounds(space)
        if bounds is not None and bounds[0].size not in (1, int(np.prod(shape))):
            bounds = None  # a space of another shape than the data's: nothing to hold it to
        return cls(
            name=name,
            shape=shape,
            dtype=str(first.dtype),
            image=image,
            sample=None if image else Sample(seed=seed),
            space=space,
            out_of_space=None if bounds is None else OutOfBounds(*bounds),
        )

    def update(self, x: np.ndarray) -> None:
        """Adds a chunk ``[n, *shape]``.

        Args:
            x: Rows of the leaf, ``[n, *shape]`` in the leaf's dtype. Frames update the moments
                per channel (every pixel a row); other leaves per dimension, and the sample with
                their first :data:`SAMPLED_DIMS` dimensions.
        """
        if self.image:
            channels = self.shape[2] if len(self.shape) == 3 else 1
            self.moments.update(x.reshape(-1, channels))
        else:
            flat = x.reshape(len(x), -1)
            self.moments.update(flat)
            assert self.sample is not None
            self.sample.update(flat[:, :SAMPLED_DIMS])
        if self.out_of_space is not None:
            self.out_of_space.update(x)

    @property
    def out_of_space_total(self) -> int:
        """Values outside the declared space, all dimensions together."""
        oob = self.out_of_space
        return 0 if oob is None or oob.count is None else int(oob.count.sum())


def chunks(columns: EpisodeColumns) -> Iterator[EpisodeColumns]:
    """The episodes in order, a chunk of at most :data:`CHUNK_EPISODES` episodes or about
    :data:`CHUNK_BYTES` of observations at a time.

    Args:
        columns: The kept episodes.

    Returns:
        An iterator of tables sharing the arrays of ``columns``.
    """
    if not len(columns):
        return
    per_step = max(columns.obs.dtype.itemsize * int(np.prod(columns.obs.shape[1:])), 1)
    room = max(CHUNK_BYTES // per_step, 1)  # observations per chunk
    ends = np.cumsum(columns.length + 1)
    lo = 0
    while lo < len(columns):
        base = ends[lo - 1] if lo else 0
        hi = int(np.searchsorted(ends, base + room, side="right"))
        hi = min(max(hi, lo + 1), lo + CHUNK_EPISODES)
        yield columns.select(np.arange(lo, hi))
        lo = hi


class Collector:
    """Feeds chunks of kept episodes to the accumulators.

    Args:
        episodes: How many episodes will come (for the choice of sample frames).
        observation_space: The declared observation space, if any.
        action_space: The declared action space, if any.
        seed: The samples' seed.
        gamma: The discount of each episode's discounted return, ``sum_t gamma**t * r_t`` (t
            from 0 at the episode's first step), in ``[0, 1]``.
    """

    def __init__(
        self,
        episodes: int,
        observation_space: gym.Space[Any] | None = None,
        action_space: gym.Space[Any] | None = None,
        seed: int = 0,
        gamma: float = GAMMA,
    ) -> None:
        self.total = episodes
        self.gamma = gamma
        self.obs_spaces = {} if observation_space is None else leaf_spaces(observation_space)
        self.action_space = action_space
        self.seed = seed
        self.leaves: dict[str, LeafStats] = {}
        self.actions: LeafStats | None = None
        self.rewards: LeafStats | None = None
        self.action_counts: dict[float, int] | None = {}
        self.lengths: list[np.ndarray] = []
        self.returns: list[np.ndarray] = []
        self.discounted: list[np.ndarray] = []
        self.group_codes: list[np.ndarray] = []
        self.groups: dict[str, int] = {}
        self.seen = 0
        self._frame_at = set(
            np.linspace(0, max(episodes - 1, 0), min(FRAMES, episodes)).astype(int).tolist()
        )

    def add(self, chunk: EpisodeColumns) -> None:
        """Adds a chunk of episodes (in episode order).

        Args:
            chunk: The episodes.
        """
        if not len(chunk):
            return
        steps = chunk.step_rows()
        actions, rewards = chunk.actions[steps], chunk.rewards[steps]
        self._per_episode(chunk, rewards)
        self._observations(chunk)
        if self.actions is None:
            self.actions = LeafStats.start("actions", actions, self.action_space, self.seed + 1)
            self.rewards = LeafStats.start("rewards", rewards, None, self.seed + 2)
        self.actions.update(actions)
        assert self.rewards is not None
        self.rewards.update(rewards)
        self._count_actions(actions)
        self.seen += len(chunk)

    def _per_episode(self, chunk: EpisodeColumns, rewards: np.ndarray) -> None:
        n = len(chunk)
        lengths = chunk.length
        starts = np.cumsum(lengths) - lengths
        returns = np.zeros(n)
        discounted = np.zeros(n)
        has = lengths > 0
        if rewards.size:  # each episode's sum, one vector op over the chunk's rewards
            r = rewards.astype(np.float64)
            returns[has] = np.add.reduceat(r, starts[has])
            t = np.arange(len(r)) - np.repeat(starts, lengths)  # step within its episode
            with np.errstate(under="ignore"):
                discounted[has] = np.add.reduceat(
                    r * self.gamma ** t.astype(np.float64), starts[has]
                )
        self.lengths.append(lengths)
        self.returns.append(returns)
        self.discounted.append(discounted)
        codes = np.zeros(n, np.int64)
        keys = [m if m is not None else a for m, a in zip(chunk.modules, chunk.agents, strict=True)]
        if any(k is not None for k in keys) or self.groups:
            if not self.groups and len(self.lengths) > 1:  # the chunks before: all "default"
                self.groups["default"] = 0
            for i, key in enumerate(keys):  # per episode (not per row): its module's code
                label = "default" if key is None else str(key)
                codes[i] = self.groups.setdefault(label, len(self.groups))
        self.group_codes.append(codes)

    def _observations(self, chunk: EpisodeColumns) -> None:
        obs = chunk.observations()
        leaves = O.record_leaves(obs) if chunk.composite else {"": obs}
        n = chunk.length + 1
        middle = (np.cumsum(n) - n + n // 2).tolist()  # each episode's middle observation
        for path, x in leaves.items():
            name = "obs" if path == "" else f"obs{O.SEP}{path}"
            leaf = self.leaves.get(name)
            if leaf is None:
                leaf = LeafStats.start(name, x, self.obs_spaces.get(path), self.seed)
                self.leaves[name] = leaf
            leaf.update(x)
            if leaf.image:
                for k, at in enumerate(middle):
                    if self.seen + k in self._frame_at and len(leaf.frames) < FRAMES:
                        leaf.frames.append(np.array(x[at]))

    def _count_actions(self, actions: np.ndarray) -> None:
        if self.action_counts is None:
            return
        if actions.ndim != 1 or actions.dtype.kind not in "iub":
            self.action_counts = None
            return
        values, counts = np.unique(actions, return_counts=True)
        for v, c in zip(values.tolist(), counts.tolist(), strict=True):  # distinct values only
            self.action_counts[v] = self.action_counts.get(v, 0) + c
        if len(self.action_counts) > MAX_DISCRETE:
            self.action_counts = None

    # ------------------------------------------------------------------ results
    @property
    def episode_lengths(self) -> np.ndarray:
        """Every kept episode's length, in order."""
        return np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int64)

    @property
    def episode_returns(self) -> np.ndarray:
        """Every kept episode's return, in order."""
        return np.concatenate(self.returns) if self.returns else np.zeros(0)

    @property
    def episode_discounted_returns(self) -> np.ndarray:
        """Every kept episode's discounted return (:attr:`gamma`), in order."""
        return np.concatenate(self.discounted) if self.discounted else np.zeros(0)

    @property
    def episode_groups(self) -> np.ndarray:
        """Every kept episode's module (or agent) code, an index into :attr:`group_names`."""
        return np.concatenate(self.group_codes) if self.group_codes else np.zeros(0, np.int64)

    @property
    def group_names(self) -> list[str]:
        """The modules (or agents) by code; ``["default"]`` for single-agent data."""
        return list(self.groups) or ["default"]

    @property
    def discrete_actions(self) -> dict[int, int] | None:
        """``{action: steps}`` for discrete actions (every action of a declared ``Discrete``
        space listed, unused ones at 0), None for continuous ones."""
        counts = self.action_counts
        if counts is None or self.actions is None:
            return None
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):
            full = {int(space.start) + i: 0 for i in range(int(space.n))}
            return {**full, **{int(k): v for k, v in counts.items()}}
        if space is not None and not isinstance(space, gym.spaces.Discrete):
            return None
        if self.actions.dtype == "bool" or len(counts) <= 32:
            return {int(k): v for k, v in sorted(counts.items())}
        return None
