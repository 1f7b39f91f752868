"""The episodes of one batch held as shared columns rather than as one object each.

The rows reader builds every episode of a batch as views of a few arrays (all observations in one
``[rows + episodes, ...]`` array, actions, rewards and extras in episode order). Short episodes
make a Python object per episode the dominant cost of the whole pipeline (CartPole: 22 steps on
average, ~180 episodes per 4096 rows), so the batch keeps those arrays plus a table of offsets,
and the stages that can work on columns (validation, de-duplication, the buffer's bulk add) do;
anything that wants :class:`~offline_prelearner.episodes.episode.Episode` objects gets them, built
on first use (:meth:`EpisodeColumns.episodes`), identical to what the reader would have built one
by one.

Episode ``e`` of the table::

    observations = obs[obs_at[e] : obs_at[e] + length[e] + 1]
    actions      = actions[step_at[e] : step_at[e] + length[e]]     (rewards, extras alike)

Dropping episodes (:meth:`EpisodeColumns.select`) filters the table; the arrays are shared.

**Split observations.** A reader whose rows are already in episode order can hand over the rows'
own observations instead of assembling that ``[rows + episodes, ...]`` array (for pixel rows, a
copy of every frame that the buffer then copies again): ``obs`` then holds one observation per
*step*, indexed like actions, and ``last_obs[e]`` the observation after episode ``e``'s last
step (the last row's ``new_obs``)::

    observations = concat(obs[step_at[e] : step_at[e] + length[e]], last_obs[e : e + 1])

Code that needs observations goes through :meth:`observations`, :meth:`write_observations`,
:meth:`final_obs` or :meth:`episode`, which hide the layout; ``obs_at`` is then only the place
episode ``e`` would have in the assembled array.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .episode import Episode

__all__ = ["EpisodeColumns"]


@dataclass(frozen=True)
class EpisodeColumns:
    """Episodes as shared arrays plus a per-episode table (see the module docstring).

    Invariants the builder guarantees (the rows reader checks them as vectors, and passes one
    episode of the batch through the checking :class:`Episode` constructor): lengths match,
    ``terminated & truncated`` is never set, ``t_started >= 0``, one dtype and step shape per
    column. ``infos`` are not held here (a batch with infos is built as objects).

    Attributes:
        obs: All observations: ``[rows + episodes, ...]`` in episode order, or one per step
            with split observations (see the module docstring).
        actions: ``[rows, ...]``, the steps of every episode in episode order.
        rewards: ``[rows]``, like ``actions``.
        extras: Further per-step columns, like ``actions``.
        obs_at: Per episode, the index of its first observation in the assembled ``obs``.
        step_at: Per episode, the index of its first step in ``actions``.
        length: Per episode, its number of steps.
        t_started: Per episode, the env step of its first observation.
        terminated: Per episode, whether it ended in a terminal state.
        truncated: Per episode, whether it was cut.
        ids: Per episode, its id.
        agents: Per episode, its agent id (None in single-agent data).
        modules: Per episode, its module id (None: the default module).
        last_obs: With split observations, per episode the observation after its last step;
            else None.
    """

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    extras: dict[str, np.ndarray]
    obs_at: np.ndarray  # int64 [n]
    step_at: np.ndarray  # int64 [n]
    length: np.ndarray  # int64 [n]
    t_started: np.ndarray  # int64 [n]
    terminated: np.ndarray  # bool [n]
    truncated: np.ndarray  # bool [n]
    ids: list[Any]
    agents: list[Any]
    modules: list[Any]
    last_obs: np.ndarray | None = None  # set: split observations (see the module docstring)

    @classmethod
    def from_episodes(cls, eps: list[Episode], *, split: bool = False) -> EpisodeColumns:
        """``eps`` (one column layout, no infos, at least one) copied into shared columns.

        Args:
            eps: The episodes, in table order.
            split: Hold split observations (one per step plus ``last_obs``, see the module
                docstring) instead of the assembled ``[rows + episodes, ...]`` array.

        Returns:
            The episodes as columns.

        Raises:
            ValueError: an episode carries infos.
        """
        if any(e.infos is not None for e in eps):
            raise ValueError("EpisodeColumns holds no infos; keep such episodes as objects")
        n = np.array([len(e.actions) for e in eps], np.int64)
        step_at = np.zeros(len(eps), np.int64)
        np.cumsum(n[:-1], out=step_at[1:])
        if split:
            obs = np.concatenate([e.observations[:-1] for e in eps])
            last: np.ndarray | None = np.stack([e.observations[-1] for e in eps])
        else:
            obs, last = np.concatenate([e.observations for e in eps]), None
        return cls(
            obs=obs,
            last_obs=last,
            actions=np.concatenate([e.actions for e in eps]),
            rewards=np.concatenate([e.rewards for e in eps]),
            extras={k: np.concatenate([e.extras[k] for e in eps]) for k in eps[0].extras},
            obs_at=step_at + np.arange(len(eps)),
            step_at=step_at,
            length=n,
            t_started=np.array([e.t_started for e in eps], np.int64),
            terminated=np.array([e.terminated for e in eps], bool),
            truncated=np.array([e.truncated for e in eps], bool),
            ids=[e.id for e in eps],
            agents=[e.agent_id for e in eps],
            modules=[e.module_id for e in eps],
        )

    @classmethod
    def concat(cls, parts: list[EpisodeColumns]) -> EpisodeColumns:
        """The episodes of ``parts`` as one table, in order (each array joined: one copy).

        Every part must hold the same layout (assembled or split observations), the same
        extra columns in the same order and the same dtypes (numpy would promote them, which a
        buffer's ring does not): a ``ValueError`` otherwise.

        Args:
            parts: Columns to join, at least one.

        Returns:
            One table of every part's episodes.

        Raises:
            ValueError: the parts differ in layout, extra columns or dtypes.
        """
        first = parts[0]
        if len(parts) == 1:
            return first
        split = first.last_obs is not None
        for p in parts[1:]:
            if (p.last_obs is not None) != split or list(p.extras) != list(first.extras):
                raise ValueError("cannot join columns of different layouts or extra columns")
            pairs = [(p.obs, first.obs), (p.actions, first.actions), (p.rewards, first.rewards)]
            pairs += [(x, first.extras[k]) for k, x in p.extras.items()]
            if any(a.dtype != b.dtype or a.shape[1:] != b.shape[1:] for a, b in pairs):
                raise ValueError("cannot join columns of different dtypes or step shapes")
        steps = np.cumsum([0] + [len(p.actions) for p in parts[:-1]])
        places = np.cumsum([0] + [len(p.obs) + (len(p) if split else 0) for p in parts[:-1]])

        def cat(get: Any) -> np.ndarray:
            return np.concatenate([get(p) for p in parts])

        return cls(
            obs=cat(lambda p: p.obs),
            actions=cat(lambda p: p.actions),
            rewards=cat(lambda p: p.rewards),
            extras={k: cat(lambda p, k=k: p.extras[k]) for k in first.extras},
            obs_at=np.concatenate([p.obs_at + o for p, o in zip(parts, places, strict=True)]),
            step_at=np.concatenate([p.step_at + o for p, o in zip(parts, steps, strict=True)]),
            length=cat(lambda p: p.length),
            t_started=cat(lambda p: p.t_started),
            terminated=cat(lambda p: p.terminated),
            truncated=cat(lambda p: p.truncated),
            ids=[i for p in parts for i in p.ids],
            agents=[a for p in parts for a in p.agents],
            modules=[m for p in parts for m in p.modules],
            last_obs=cat(lambda p: p.last_obs) if split else None,
        )

    def __len__(self) -> int:
        return len(self.length)

    @property
    def t_end(self) -> np.ndarray:
        """Per episode, the env step after its last step (``t_started + length``)."""
        return self.t_started + self.length

    @property
    def done(self) -> np.ndarray:
        """Per episode, whether it ended (terminated or truncated)."""
        return self.terminated | self.truncated

    # ------------------------------------------------------------------ objects
    def episode(self, e: int) -> Episode:
        """Episode ``e`` as an object (views of the shared arrays; with split observations, its
        observations are copied into one array)."""
        o, s, n = int(self.obs_at[e]), int(self.step_at[e]), int(self.length[e])
        return Episode._trusted(
            self.ids[e],
            self.obs[o : o + n + 1] if self.last_obs is None else self._joined(e),
            self.actions[s : s + n],
            self.rewards[s : s + n],
            bool(self.terminated[e]),
            bool(self.truncated[e]),
            self.agents[e],
            self.modules[e],
            int(self.t_started[e]),
            {k: x[s : s + n] for k, x in self.extras.items()},
        )

    def episodes(self, leaves: dict[str, np.ndarray] | None = None) -> list[Episode]:
        """Every episode as an object, in table order. ``leaves``: composite observations as
        ``{leaf path: [rows, ...]}`` indexed like ``obs`` (by ``obs_at``), which is then unused;
        each episode holds views of the leaf arrays."""
        if self.last_obs is not None and leaves is None:
            return [self.episode(e) for e in range(len(self))]
        obs, act, rew, xs = self.obs, self.actions, self.rewards, list(self.extras.items())
        items = list(leaves.items()) if leaves is not None else None
        out: list[Episode] = []
        rows = zip(
            self.ids,
            self.obs_at.tolist(),
            self.step_at.tolist(),
            self.length.tolist(),
            self.terminated.tolist(),
            self.truncated.tolist(),
            self.agents,
            self.modules,
            self.t_started.tolist(),
            strict=True,
        )
        for eid, o, s, n, term, trunc, agent, module, t0 in rows:  # building objects: per episode
            out.append(
                Episode._trusted(
                    eid,
                    obs[o : o + n + 1] if items is None else _leaf_views(items, o, o + n + 1),
                    act[s : s + n],
                    rew[s : s + n],
                    term,
                    trunc,
                    agent,
                    module,
                    t0,
                    {k: x[s : s + n] for k, x in xs},
                )
            )
        return out

    def iter_episodes(self) -> Iterator[Episode]:
        """Every episode as an object (views of the shared arrays), in table order: for code
        that wants one episode at a time."""
        return iter(self.episodes())

    def map_episodes(self, fn: Callable[[Episode], Episode]) -> EpisodeColumns:
        """``fn`` applied to every episode, one at a time, and the results held as columns again
        (one copy of every column): the per-episode helper for code that cannot work on the
        columns as a whole. Slower than a change made on the columns (an object per episode).

        Args:
            fn: Takes one episode (a read-only view: never change its arrays in place) and
                returns the episode to keep in its place (``copy.copy`` it to add extras).

        Returns:
            The episodes ``fn`` returned, in table order, in this table's observation layout.
        """
        if not len(self):
            return self
        return EpisodeColumns.from_episodes(
            [fn(ep) for ep in self.iter_episodes()], split=self.last_obs is not None
        )

    @classmethod
    def join_fragments(cls, parts: Sequence[EpisodeColumns]) -> EpisodeColumns:
        """The fragments of one episode, each part holding one, joined into one episode (the
        rule of :meth:`Episode.concat_fragments`: in ``t_started`` order, each starting where
        the previous ended and repeating its last observation).

        Args:
            parts: One-episode tables of the same episode, at least one.

        Returns:
            A one-episode table, in the first part's observation layout.
        """
        if len(parts) == 1:
            return parts[0]
        joined = Episode.concat_fragments([p.episode(0) for p in parts])
        return cls.from_episodes([joined], split=parts[0].last_obs is not None)

    # ------------------------------------------------------------------ observations
    def _joined(self, e: int) -> np.ndarray:
        assert self.last_obs is not None
        s, n = int(self.step_at[e]), int(self.length[e])
        return np.concatenate([self.obs[s : s + n], self.last_obs[e : e + 1]])

    def final_obs(self, e: int) -> np.ndarray:
        """The observation after episode ``e``'s last step (a view)."""
        if self.last_obs is not None:
            return self.last_obs[e]
        return self.obs[int(self.obs_at[e] + self.length[e])]

    def observations(self, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """The observations of episodes ``lo:hi`` (each ``length + 1``), concatenated: a view
        when they lie contiguous in ``obs``, else a new array."""
        if self.last_obs is None:
            return self.obs[self.obs_rows(lo, hi)]
        hi = len(self) if hi is None else hi
        out = np.empty(
            (int(self.length[lo:hi].sum()) + hi - lo, *self.obs.shape[1:]), self.obs.dtype
        )
        self.write_observations(out, lo, hi)
        return out

    def gather_observations(self, episode: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Observation ``k[i]`` of episode ``episode[i]`` for every ``i`` (``0 <= k <= length``:
        ``k = length`` is the final observation), gathered into a new array, whatever the layout.

        Args:
            episode: Table indices, int64.
            k: Observation positions within each episode, int64, as long as ``episode``.

        Returns:
            ``[len(k), *obs_shape]`` observations.
        """
        if self.last_obs is None:
            return self.obs.take(self.obs_at.take(episode) + k, axis=0)
        at = self.step_at.take(episode) + k
        final = k == self.length.take(episode)
        if not final.any():
            return self.obs.take(at, axis=0)
        out = self.obs.take(np.where(final, 0, at), axis=0) if len(self.obs) else None
        if out is None:  # every episode is empty: final observations only
            return self.last_obs.take(episode, axis=0)
        out[final] = self.last_obs.take(episode[final], axis=0)
        return out

    def write_observations(self, dest: np.ndarray, lo: int = 0, hi: int | None = None) -> None:
        """Writes :meth:`observations` ``(lo, hi)`` into ``dest`` (as many rows) without an
        intermediate array: each frame is copied once, from the batch into ``dest``."""
        if self.last_obs is None:
            rows = self.obs_rows(lo, hi)
            if isinstance(rows, slice):
                dest[...] = self.obs[rows]
            else:
                np.take(self.obs, rows, axis=0, out=dest)
            return
        hi = len(self) if hi is None else hi
        n = self.length[lo:hi]
        ends = np.cumsum(n + 1)  # one past each episode's last observation in ``dest``
        finals = ends - 1
        steps = self.step_rows(lo, hi)
        if hi - lo == 1:
            dest[:-1] = self.obs[steps]
        else:
            at = np.arange(int(n.sum()), dtype=np.int64) + np.repeat(np.arange(hi - lo), n)
            if isinstance(steps, slice):
                dest[at] = self.obs[steps]  # a view scattered: one copy per frame
            else:
                for k, (a, b) in enumerate(
                    zip((finals - n).tolist(), finals.tolist(), strict=True)
                ):
                    s = int(self.step_at[lo + k])  # episodes apart in ``obs``: a slice each
                    dest[a:b] = self.obs[s : s + b - a]
        dest[finals] = self.last_obs[lo:hi]

    # ------------------------------------------------------------------ subsets
    def select(self, keep: np.ndarray) -> EpisodeColumns:
        """The episodes where the boolean ``keep`` is true (or at the given indices)."""
        keep = np.asarray(keep)
        idx = np.flatnonzero(keep) if keep.dtype == bool else keep.astype(np.int64)
        pick = idx.tolist()
        return replace(
            self,
            obs_at=self.obs_at[idx],
            step_at=self.step_at[idx],
            length=self.length[idx],
            t_started=self.t_started[idx],
            terminated=self.terminated[idx],
            truncated=self.truncated[idx],
            last_obs=None if self.last_obs is None else self.last_obs[idx],
            ids=[self.ids[i] for i in pick],
            agents=[self.agents[i] for i in pick],
            modules=[self.modules[i] for i in pick],
        )

    def step_rows(self, lo: int = 0, hi: int | None = None) -> np.ndarray | slice:
        """Indices into the step arrays of episodes ``lo:hi``, concatenated in order (a slice
        when they are contiguous, so gathering is a view)."""
        return _ranges(self.step_at[lo:hi], self.length[lo:hi])

    def obs_rows(self, lo: int = 0, hi: int | None = None) -> np.ndarray | slice:
        """Indices into ``obs`` of episodes ``lo:hi`` (each ``length + 1`` rows), concatenated
        (assembled observations only: with split observations use :meth:`observations`)."""
        if self.last_obs is not None:
            raise ValueError("split observations have no obs rows; use observations()")
        return _ranges(self.obs_at[lo:hi], self.length[lo:hi] + 1)


def _leaf_views(items: list[tuple[str, np.ndarray]], lo: int, hi: int) -> Any:
    """A composite observation's leaves ``lo:hi`` (an episode holds them as a dict of views)."""
    return {k: v[lo:hi] for k, v in items}


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray | slice:
    """``concat(arange(s, s + n) for s, n in zip(starts, lengths))``, as a slice if contiguous."""
    if len(starts) == 0:
        return slice(0, 0)
    ends = starts + lengths
    if bool(np.all(starts[1:] == ends[:-1])):
        return slice(int(starts[0]), int(ends[-1]))
    total = int(lengths.sum())
    offsets = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    return np.arange(total, dtype=np.int64) + np.repeat(starts - offsets, lengths)
