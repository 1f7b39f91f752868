"""Episodes as shared columns: the one form episodes travel in, from a reader to the buffer.

Every reader builds a batch's episodes as a few arrays (all observations in one
``[rows + episodes, ...]`` array, actions, rewards and extras in episode order) plus a table of
offsets; validation, de-duplication, stitching and the buffer's add work on those arrays as
vectors. An :class:`~offline_prelearner.episodes.episode.Episode` is a read-only window onto one
episode of them (:meth:`EpisodeColumns.episode`, :meth:`EpisodeColumns.iter_episodes`), for user
code and tests; :meth:`EpisodeColumns.map_episodes` is the convenient, slow path for code that
wants to change one episode at a time, and :meth:`EpisodeColumns.from_episodes` takes episodes a
user built from their own arrays.

Episode ``e`` of the table::

    observations = obs[obs_at[e] : obs_at[e] + length[e] + 1]
    actions      = actions[step_at[e] : step_at[e] + length[e]]     (rewards, extras alike)

Dropping episodes (:meth:`EpisodeColumns.select`) filters the table; the arrays are shared.

**Composite observations** (gymnasium ``Dict`` / ``Tuple``) are one *record* array: one field
per leaf path (:func:`~offline_prelearner.episodes.observations.to_records`), so every offset,
gather and concatenation is the same operation as for a plain observation; an episode's view
holds ``{leaf path: view}`` (:func:`~offline_prelearner.episodes.observations.record_leaves`).

**Infos** (Python objects, RLlib's ``T + 1`` dicts per episode, the reset info first) are held
per episode in ``infos``, None for a batch without any.

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

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import observations as O
from .episode import Episode

__all__ = ["EpisodeColumns", "layout_of"]


def layout_of(ep: Episode) -> tuple[Any, ...]:
    """What must agree between episodes held in one :class:`EpisodeColumns`: the observation's
    step shape and dtype (per leaf for a composite), the actions' step shape and the extra
    columns' names and step shapes, in order. Actions, rewards and extras of other numeric types
    are held in their common type (RLlib writes a step as a Python number in one record and as a
    float32 array in another, for the same data); observations are not promoted (a frame of
    another dtype is another dataset).

    Args:
        ep: Any episode.

    Returns:
        A hashable signature; equal signatures can share columns.
    """
    obs: Any = ep.observations
    o = (
        (obs.shape[1:], obs.dtype)
        if isinstance(obs, np.ndarray)
        else tuple([(k, v.shape[1:], v.dtype) for k, v in obs.items()])
    )
    xs = tuple([(k, v.shape[1:]) for k, v in ep.extras.items()]) if ep.extras else ()
    return (o, ep.actions.shape[1:], xs)


def _fields(e: Episode) -> tuple[Any, ...]:
    return (
        e.id, e.agent_id, e.module_id, e.t_started, e.terminated, e.truncated, e.infos,
        e.observations, e.actions, e.rewards, e.extras,
    )  # fmt: skip


def _ro(a: np.ndarray) -> np.ndarray:
    """``a`` (a fresh view or array) made read-only: an episode view never writes its batch."""
    a.flags.writeable = False
    return a


@dataclass(frozen=True)
class EpisodeColumns:
    """Episodes as shared arrays plus a per-episode table (see the module docstring).

    Invariants the builder guarantees (readers check them as vectors, and pass one episode of
    the batch through the checking :class:`Episode` constructor): lengths match,
    ``terminated & truncated`` is never set, one dtype and step shape per column.

    Attributes:
        obs: All observations: ``[rows + episodes, ...]`` in episode order, or one per step
            with split observations (see the module docstring); a record array (one field per
            leaf path) for composite observations.
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
        infos: Per episode, its ``length + 1`` info dicts or None; None when no episode has any.
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
    infos: list[list[Any] | None] | None = None

    @classmethod
    def empty(cls) -> EpisodeColumns:
        """No episode (the columns of an empty batch; :meth:`concat` skips them). One shared
        object: its arrays are read-only."""
        return _EMPTY

    @classmethod
    def from_episodes(cls, eps: Sequence[Episode], *, split: bool = False) -> EpisodeColumns:
        """``eps`` (one layout, see :func:`layout_of`) copied into shared columns.

        The boundary where episodes a user built from their own arrays, or a reader decoded one
        record at a time, become columns: one copy per column for the whole batch.

        Args:
            eps: The episodes, in table order (none: :meth:`empty`).
            split: Hold split observations (one per step plus ``last_obs``, see the module
                docstring) instead of the assembled ``[rows + episodes, ...]`` array.

        Returns:
            The episodes as columns.

        Raises:
            ValueError: the episodes differ in layout.
        """
        if not eps:
            return cls.empty()
        cols = list(zip(*[_fields(e) for e in eps], strict=True))  # one pass over the objects
        ids, agents, modules, t0, term, trunc, infos, obs, acts, rews, extras = cols
        # What np.concatenate would not refuse by itself: another obs dtype (it would promote),
        # other extra columns, composite leaves (checked whole by their signature).
        if isinstance(obs[0], np.ndarray):
            same = len({o.dtype for o in obs}) == 1 and all(isinstance(o, np.ndarray) for o in obs)
        else:
            sig = layout_of(eps[0])[0]
            same = all(layout_of(e)[0] == sig for e in eps)
        names = list(extras[0])
        if not same or any(list(x) != names for x in extras):
            raise ValueError("episodes of different layouts cannot share columns")
        try:
            actions = np.concatenate(acts)
            extra = {k: np.concatenate([x[k] for x in extras]) for k in names}
            obs_col, last = _obs_of(list(obs), split)
        except ValueError:  # step shapes differ
            raise ValueError("episodes of different layouts cannot share columns") from None
        n = np.fromiter(map(len, acts), np.int64, len(eps))
        step_at = np.zeros(len(eps), np.int64)
        np.cumsum(n[:-1], out=step_at[1:])
        return cls(
            obs=obs_col,
            last_obs=last,
            actions=actions,
            rewards=np.concatenate(rews),
            extras=extra,
            obs_at=step_at + np.arange(len(eps)),
            step_at=step_at,
            length=n,
            t_started=np.array(t0, np.int64),
            terminated=np.array(term, bool),
            truncated=np.array(trunc, bool),
            ids=list(ids),
            agents=list(agents),
            modules=list(modules),
            infos=None if all(i is None for i in infos) else list(infos),
        )

    @classmethod
    def concat(cls, parts: Sequence[EpisodeColumns], *, promote: bool = False) -> EpisodeColumns:
        """The episodes of ``parts`` as one table, in order (each array joined: one copy).

        Parts without episodes are skipped. The others must hold the same layout (assembled or
        split observations), the same extra columns in the same order, the same step shapes and
        the same dtypes (numpy would promote them, which a buffer's ring does not): a
        ``ValueError`` otherwise.

        Args:
            parts: Columns to join.
            promote: Join actions, rewards and extras of other numeric types in their common
                type (see :func:`layout_of`) instead of refusing them: what a batch being read
                does; observations must agree either way.

        Returns:
            One table of every part's episodes (:meth:`empty` when none has any).

        Raises:
            ValueError: the parts differ in layout, extra columns or dtypes.
        """
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.empty()
        first = parts[0]
        if len(parts) == 1:
            return first
        split = first.last_obs is not None
        for p in parts[1:]:
            if (p.last_obs is not None) != split or list(p.extras) != list(first.extras):
                raise ValueError("cannot join columns of different layouts or extra columns")
            pairs = [(p.obs, first.obs), (p.actions, first.actions), (p.rewards, first.rewards)]
            pairs += [(x, first.extras[k]) for k, x in p.extras.items()]
            if any(a.shape[1:] != b.shape[1:] for a, b in pairs) or any(
                a.dtype != b.dtype for a, b in (pairs[:1] if promote else pairs)
            ):
                raise ValueError("cannot join columns of different dtypes or step shapes")
        steps = np.cumsum([0] + [len(p.actions) for p in parts[:-1]])
        places = np.cumsum([0] + [len(p.obs) + (len(p) if split else 0) for p in parts[:-1]])

        def cat(get: Callable[[EpisodeColumns], Any]) -> np.ndarray:
            return np.concatenate([get(p) for p in parts])

        with_infos = any(p.infos is not None for p in parts)
        return cls(
            obs=cat(lambda p: p.obs),
            actions=cat(lambda p: p.actions),
            rewards=cat(lambda p: p.rewards),
            extras={k: np.concatenate([p.extras[k] for p in parts]) for k in first.extras},
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
            infos=[i for p in parts for i in p.infos or [None] * len(p)] if with_infos else None,
        )

    @classmethod
    def join_fragments(cls, parts: Sequence[EpisodeColumns]) -> EpisodeColumns:
        """Fragments of *one* episode, one per part and in ``t`` order, joined into one episode.

        A fragment cut across input batches (the prelearner's ``sample_all`` keeps open ones)
        continues where the previous one ended: the same ``(id, agent)``, ``t_started`` equal to
        the previous ``t_end``, the previous one not done, its first observation the previous
        one's last (checked: an
        :class:`~offline_prelearner.errors.EpisodeValidationError` names the episode and ``t``).

        Args:
            parts: Columns of one episode each, the fragments in order, at least one.

        Returns:
            Columns of one episode (in the first part's observation layout).

        Raises:
            ValueError: a part holds other than one episode.
            EpisodeValidationError: the fragments do not continue one another.
        """
        if not parts or any(len(p) != 1 for p in parts):
            raise ValueError("join_fragments needs parts of exactly one episode each")
        if len(parts) == 1:
            return parts[0]
        joined = Episode.concat_fragments(p.episode(0) for p in parts)
        return cls.from_episodes([joined], split=parts[0].last_obs is not None)

    def __len__(self) -> int:
        return len(self.length)

    @property
    def t_end(self) -> np.ndarray:
        """Per episode, the env step after its last step (``t_started + length``)."""
        return np.asarray(self.t_started + self.length)

    @property
    def done(self) -> np.ndarray:
        """Per episode, whether it ended (terminated or truncated)."""
        return np.asarray(self.terminated | self.truncated)

    def returns(self) -> np.ndarray:
        """Per episode, the sum of its rewards (float64; 0 for an episode of no step)."""
        rew = np.asarray(self.rewards[self.step_rows()], np.float64)
        out = np.zeros(len(self), np.float64)
        has = self.length > 0
        if has.any():
            starts = np.zeros(len(self), np.int64)
            np.cumsum(self.length[:-1], out=starts[1:])
            out[has] = np.add.reduceat(rew, starts[has])
        return out

    @property
    def composite(self) -> bool:
        """Whether the observations are composite (``obs`` a record array of leaves)."""
        return self.obs.dtype.names is not None

    # ------------------------------------------------------------------ one episode at a time
    def episode(self, e: int) -> Episode:
        """Episode ``e`` as a read-only view of the shared arrays.

        With split observations its observations are copied into one (read-only) array; with
        composite ones they are ``{leaf path: view}``.

        Args:
            e: The episode's index in the table.

        Returns:
            An :class:`Episode` whose arrays are not writeable.
        """
        o, s, n = int(self.obs_at[e]), int(self.step_at[e]), int(self.length[e])
        return self._view(
            e,
            self.obs[o : o + n + 1] if self.last_obs is None else self._joined(e),
            s,
            n,
            bool(self.terminated[e]),
            bool(self.truncated[e]),
            int(self.t_started[e]),
        )

    def _view(
        self, e: int, obs: np.ndarray, s: int, n: int, term: bool, trunc: bool, t0: int
    ) -> Episode:
        observations: Any = (
            {k: _ro(v) for k, v in O.record_leaves(obs).items()} if self.composite else _ro(obs)
        )
        return Episode._trusted(
            self.ids[e],
            observations,
            _ro(self.actions[s : s + n]),
            _ro(self.rewards[s : s + n]),
            term,
            trunc,
            self.agents[e],
            self.modules[e],
            t0,
            {k: _ro(x[s : s + n]) for k, x in self.extras.items()},
            None if self.infos is None else self.infos[e],
        )

    def iter_episodes(self) -> Iterator[Episode]:
        """Every episode as a read-only :class:`Episode` view, in table order.

        The per-episode path, for user code and tests: a Python object per episode, so not for
        the pipeline's own hot paths (which work on the columns).

        Returns:
            An iterator of views (see :meth:`episode`).
        """
        if self.last_obs is not None:
            yield from (self.episode(e) for e in range(len(self)))
            return
        rows = zip(
            self.obs_at.tolist(),
            self.step_at.tolist(),
            self.length.tolist(),
            self.terminated.tolist(),
            self.truncated.tolist(),
            self.t_started.tolist(),
            strict=True,
        )
        obs = self.obs
        for e, (o, s, n, term, trunc, t0) in enumerate(rows):  # a view per episode, by design
            yield self._view(e, obs[o : o + n + 1], s, n, term, trunc, t0)

    def map_episodes(self, fn: Callable[[Episode], Episode]) -> EpisodeColumns:
        """``fn`` applied to each episode, the results gathered into new columns.

        The convenient, slow path for code that wants one episode at a time (a Python call and
        an object per episode, then one copy of every column): ``fn`` receives a read-only view
        and returns a new :class:`Episode` (``Episode(...)`` from new arrays, or the view itself
        to keep it). Work on the columns themselves where speed matters.

        Args:
            fn: Maps one episode to its replacement; every result must share one layout.

        Returns:
            New columns holding ``fn``'s episodes, in order, in this table's observation layout.
        """
        if not len(self):
            return self
        return EpisodeColumns.from_episodes(
            [fn(ep) for ep in self.iter_episodes()], split=self.last_obs is not None
        )

    # ------------------------------------------------------------------ observations
    def _joined(self, e: int) -> np.ndarray:
        if self.last_obs is None:  # pragma: no cover - callers check the layout
            raise ValueError("assembled observations need no joining")
        s, n = int(self.step_at[e]), int(self.length[e])
        return np.concatenate([self.obs[s : s + n], self.last_obs[e : e + 1]])

    def final_obs(self, e: int) -> np.ndarray:
        """The observation after episode ``e``'s last step (a view).

        Args:
            e: Index of the episode in this table (``0 <= e < len(self)``).

        Returns:
            One observation, of the step shape (a record for composite observations).
        """
        if self.last_obs is not None:
            return np.asarray(self.last_obs[e])
        return np.asarray(self.obs[int(self.obs_at[e] + self.length[e])])

    def observations(self, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """The observations of episodes ``lo:hi`` (each ``length + 1``), concatenated: a view
        when they lie contiguous in ``obs``, else a new array.

        Args:
            lo: Index of the first episode in this table.
            hi: One past the last episode; None: to the end of the table.

        Returns:
            ``[sum(length[lo:hi]) + (hi - lo), *obs_shape]`` observations in episode order.
        """
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
            return np.asarray(self.obs.take(self.obs_at.take(episode) + k, axis=0))
        at = self.step_at.take(episode) + k
        final = k == self.length.take(episode)
        if not final.any():
            return np.asarray(self.obs.take(at, axis=0))
        out = self.obs.take(np.where(final, 0, at), axis=0) if len(self.obs) else None
        if out is None:  # every episode is empty: final observations only
            return self.last_obs.take(episode, axis=0)
        out[final] = self.last_obs.take(episode[final], axis=0)
        return out

    def write_observations(self, dest: np.ndarray, lo: int = 0, hi: int | None = None) -> None:
        """Writes :meth:`observations` ``(lo, hi)`` into ``dest`` (as many rows) without an
        intermediate array: each frame is copied once, from the batch into ``dest``.

        Args:
            dest: The array to fill, ``[sum(length[lo:hi]) + (hi - lo), *obs_shape]`` of the
                observations' dtype (a slice of a buffer's ring, say); overwritten entirely.
            lo: Index of the first episode in this table.
            hi: One past the last episode; None: to the end of the table.
        """
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
        """The episodes where ``keep`` is true, or at the given indices (the arrays shared).

        Args:
            keep: A boolean mask over the episodes, or int indices.

        Returns:
            A table of the chosen episodes.
        """
        keep = np.asarray(keep)
        idx = np.flatnonzero(keep) if keep.dtype == bool else keep.astype(np.int64)
        pick = idx.tolist()
        return type(self)(  # all fields named: cheaper than dataclasses.replace, called per table
            obs=self.obs,
            actions=self.actions,
            rewards=self.rewards,
            extras=self.extras,
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
            infos=None if self.infos is None else [self.infos[i] for i in pick],
        )

    def take(self, idx: np.ndarray) -> EpisodeColumns:
        """The episodes at ``idx``, in that order, in arrays of their own (copied): unlike
        :meth:`select`, the result holds only these episodes' rows, so joining many such parts
        (:meth:`concat`) copies each row once.

        Args:
            idx: Int indices of episodes of this table.

        Returns:
            A compact table of the chosen episodes.
        """
        sel = self.select(np.asarray(idx, np.int64))
        n = sel.length.astype(np.int64)
        steps = sel.step_rows()
        obs = self.obs[steps] if self.last_obs is not None else self.obs[sel.obs_rows()]
        return dataclasses.replace(
            sel,
            obs=obs,
            actions=self.actions[steps],
            rewards=self.rewards[steps],
            extras={k: v[steps] for k, v in self.extras.items()},
            obs_at=np.cumsum(n + 1) - (n + 1),
            step_at=np.cumsum(n) - n,
        )

    def step_rows(self, lo: int = 0, hi: int | None = None) -> np.ndarray | slice:
        """Indices into the step arrays of episodes ``lo:hi``, concatenated in order (a slice
        when they are contiguous, so gathering is a view).

        Args:
            lo: Index of the first episode in this table.
            hi: One past the last episode; None: to the end of the table.

        Returns:
            A slice, or int64 indices, into ``actions``, ``rewards`` and ``extras`` (and into
            ``obs`` with split observations).
        """
        return _ranges(self.step_at[lo:hi], self.length[lo:hi])

    def obs_rows(self, lo: int = 0, hi: int | None = None) -> np.ndarray | slice:
        """Indices into ``obs`` of episodes ``lo:hi`` (each ``length + 1`` rows), concatenated
        (assembled observations only: with split observations use :meth:`observations`).

        Args:
            lo: Index of the first episode in this table.
            hi: One past the last episode; None: to the end of the table.

        Returns:
            A slice when the rows are contiguous, else int64 indices into ``obs``.

        Raises:
            ValueError: The table holds split observations.
        """
        if self.last_obs is not None:
            raise ValueError("split observations have no obs rows; use observations()")
        return _ranges(self.obs_at[lo:hi], self.length[lo:hi] + 1)


def _obs_of(obs: list[Any], split: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """Episodes' observations (arrays, or ``{leaf path: array}``) as one column: assembled, or
    split into one per step plus the last ones (records for composite observations)."""
    if O.is_composite(obs[0]):
        leaves = [{k: np.asarray(v) for k, v in o.items()} for o in obs]
        if split:
            steps = O.to_records(
                {k: np.concatenate([o[k][:-1] for o in leaves]) for k in leaves[0]}
            )
            return steps, O.to_records({k: np.stack([o[k][-1] for o in leaves]) for k in leaves[0]})
        return O.to_records({k: np.concatenate([o[k] for o in leaves]) for k in leaves[0]}), None
    if split:
        return np.concatenate([o[:-1] for o in obs]), np.stack([o[-1] for o in obs])
    return np.concatenate(obs), None


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


def _empty() -> EpisodeColumns:
    none = _ro(np.zeros(0, np.int64))
    return EpisodeColumns(
        obs=_ro(np.zeros(0, np.float32)),
        actions=_ro(np.zeros(0, np.int64)),
        rewards=_ro(np.zeros(0, np.float32)),
        extras={},
        obs_at=none,
        step_at=none,
        length=none,
        t_started=none,
        terminated=_ro(np.zeros(0, bool)),
        truncated=_ro(np.zeros(0, bool)),
        ids=[],
        agents=[],
        modules=[],
    )


_EMPTY = _empty()
