"""Validation, a stage over an :class:`~.ledger.EpisodeBatch`.

:class:`Validator` checks each episode against the contracts of
:class:`~offline_prelearner.config.ValidateConfig` and, in the
Gymnasium env checker's spirit, *raises* on a broken contract (or skips / quarantines it, as the
policy says) and *warns once* on data that is odd but legal. The stage after it,
:class:`~.dedupe.Deduplicator`, drops episodes whose steps were already seen. Both remove episodes
with ``EpisodeBatch.keep_only`` and record what they removed, so the batch's ledger always
balances::

    rows_in == rows_kept + sum(rows_rejected.values()) + rows_duplicate

Each check is a few numpy reductions over the batch's columns; an episode is looked at alone
(:meth:`Validator.check`, on a read-only view) only when they do not clear it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, cast

import gymnasium as gym
import numpy as np

from ..config import OnInvalid, ValidateConfig, check_on_invalid
from ..errors import EpisodeValidationError, OddDataWarning, Where
from ..spaces import leaf_spaces
from . import observations as O
from .episode import Episode
from .episode_columns import EpisodeColumns
from .ledger import EpisodeBatch

__all__ = ["Miss", "OddDataWarning", "SpaceCheck", "Validator", "all_finite"]


# ---------------------------------------------------------------------------- space checks
@dataclass(frozen=True)
class Miss:
    """Why values are not in a space: ``kind`` shape | dtype | value; ``index`` the first step;
    ``leaf`` the leaf's path in a composite space (``""`` for a plain one)."""

    kind: str
    detail: str
    index: int | None = None
    leaf: str = ""


def _first_bad(ok: np.ndarray) -> int | None:
    """The first step (axis 0) where ``ok`` is not all True, or None."""
    if ok.all():
        return None
    return int(np.argmin(ok.all(axis=tuple(range(1, ok.ndim)))))


class SpaceCheck:
    """Membership of a whole column (``[T, *shape]``, one entry per step) in one space.

    Built once per space, so checking an episode is a few numpy calls: per-step shape, dtype
    kind, then inclusive bounds (Box, Discrete, MultiDiscrete) or 0/1 (MultiBinary) over the
    whole column at once; the first bad step is located only when there is one. A Dict / Tuple
    space (nested) is one check per leaf over the flat ``{leaf path: [T, ...]}`` map composite
    observations are (:mod:`.observations`); a miss names its leaf.

    Args:
        space: The gymnasium space a column's steps must lie in. Box, Discrete, MultiDiscrete
            and MultiBinary are tested as vectors; Dict / Tuple become one check per leaf; any
            other space (Text, Graph, Sequence...) is asked step by step (``space.contains``).
    """

    def __init__(self, space: gym.Space[Any]) -> None:
        self.space = space
        self.shape: tuple[int, ...] | None = None  # None: no vectorized test for this space
        self.kinds = "biuf"
        self.binary = False
        self.nan_ok = False
        self.unbounded = False  # a float Box with infinite bounds: nothing but NaN to find
        self.cast_to: np.dtype[Any] | None = None  # Box dtype: storing wider values is odd
        self.lo: Any = None
        self.hi: Any = None
        #: A composite space's leaf checks by path (None for a leaf space).
        self.leaves: dict[str, SpaceCheck] | None = None
        if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
            self.leaves = {k: SpaceCheck(v) for k, v in leaf_spaces(space).items()}
        elif isinstance(space, gym.spaces.Box):
            self.shape, self.lo, self.hi = space.shape, space.low, space.high
            self.kinds = "biu" if space.dtype.kind in "biu" else "biuf"
            self.nan_ok = True  # NaN is governed by check_finite_obs, not by the bounds
            self.cast_to = space.dtype
            infinite = np.isneginf(self.lo).all() and np.isposinf(self.hi).all()
            self.unbounded = bool(space.dtype.kind == "f" and infinite)
        elif isinstance(space, gym.spaces.Discrete):
            self.shape, self.kinds = (), "iu"
            self.lo, self.hi = np.int64(space.start), np.int64(space.start + space.n - 1)
        elif isinstance(space, gym.spaces.MultiDiscrete):
            # start + (nvec - 1) fits the space's dtype; x - start could overflow small ints.
            self.shape, self.kinds = space.shape, "iu"
            self.lo, self.hi = space.start, space.start + (space.nvec - 1)
        elif isinstance(space, gym.spaces.MultiBinary):
            self.shape, self.binary = space.shape, True

    def __call__(self, x: Any) -> Miss | None:
        """The first way ``x`` (an array, or a composite's ``{leaf path: array}``) is not in the
        space, or None."""
        if self.leaves is not None:
            return self._leaves(x)
        rows = self.rows_ok(x)
        if isinstance(rows, Miss) or rows is None:
            return rows
        ok = self._ok(x)
        step = _first_bad(ok)
        if step is None:  # pragma: no cover - rows_ok found a bad row
            return None
        at = tuple(int(k) for k in np.argwhere(~ok[step])[0])
        where = f" at index {at}" if at else ""
        if self.binary:
            return Miss("value", f"value {x[step][at]}{where} is not 0 or 1", step)
        shape = x.shape[1:]
        lo, hi = np.broadcast_to(self.lo, shape)[at], np.broadcast_to(self.hi, shape)[at]
        return Miss("value", f"value {x[step][at]}{where} is outside [{lo}, {hi}]", step)

    def _leaves(self, x: Any) -> Miss | None:
        leaves = cast(dict[str, SpaceCheck], self.leaves)
        if not O.is_composite(x):
            return Miss("shape", f"a plain array of step shape {np.shape(x)[1:]}, {self.space} "
                        "needs leaves " + ", ".join(leaves))  # fmt: skip
        missing = [k for k in leaves if k not in x]
        extra = [k for k in x if k not in leaves]
        if missing or extra:
            detail = f"leaves {sorted(x)}; the space has {list(leaves)}"
            return Miss("shape", detail, leaf=(missing or extra)[0])
        for path, check in leaves.items():
            miss = check(x[path])
            if miss is not None:
                return Miss(miss.kind, miss.detail, miss.index, path)
        return None

    def rows_ok(self, x: np.ndarray) -> np.ndarray | Miss | None:
        """Per step of a leaf column, whether it lies in the space (None: every step does); a
        :class:`Miss` when the whole column is of the wrong shape or dtype. One vector pass.

        Args:
            x: One leaf column, ``[T, *step_shape]``, one entry per step. NaN in a float column
                of a Box space counts as in the space (``check_finite_obs`` governs it).

        Returns:
            None when every step is in the space; else a bool ``[T]`` mask, True where the step
            is; or a :class:`Miss` (``kind`` ``"shape"`` or ``"dtype"``) for the whole column,
            or (``kind`` ``"value"``, the first bad step) for a space without a vector test.
        """
        if self.shape is None:
            # Exotic spaces (Text, Graph, Sequence, OneOf, ...) have no vectorized membership
            # test; ask the space itself, one step at a time.
            bad = [i for i in range(len(x)) if not self.space.contains(x[i])]
            if not bad:
                return None
            return Miss("value", f"{x[bad[0]]} is not in {self.space}", bad[0])
        if x.shape[1:] != self.shape:
            return Miss("shape", f"per-step shape {x.shape[1:]}, the space has {self.shape}")
        if x.dtype.kind not in self.kinds:
            need = "an integer type" if self.kinds == "iu" else f"one of kinds {self.kinds!r}"
            return Miss("dtype", f"dtype {x.dtype} is not {need}, as {self.space} needs")
        if self.unbounded and x.dtype.kind == "f":
            return None
        ok = self._ok(x)
        if ok.all():
            return None
        return np.asarray(ok.reshape(len(x), -1).all(axis=1))

    def _ok(self, x: np.ndarray) -> np.ndarray:
        ok = (x == 0) | (x == 1) if self.binary else (x >= self.lo) & (x <= self.hi)
        if self.nan_ok and x.dtype.kind == "f" and not ok.all():
            ok |= np.isnan(x)
        return np.asarray(ok)

    def lossy(self, dtype: np.dtype[Any]) -> bool:
        """True when values in the space are stored in a type it would not cast to safely.

        Args:
            dtype: The dtype the column is stored in.

        Returns:
            True when this is a Box space and ``dtype`` is neither its dtype nor safely castable
            to it (float64 data for a float32 Box: odd, warned once); False for other spaces.
        """
        return (
            self.cast_to is not None
            and dtype != self.cast_to
            and not np.can_cast(dtype, self.cast_to)
        )


# ---------------------------------------------------------------------------- validator
class Validator:
    """Checks episodes against a :class:`ValidateConfig`; stateful across batches.

    Checks, in order (the first failure is the episode's reason tag): ``too_short``, ``bad_t``
    (``t_started < 0``), ``not_done``, ``nan_reward``, ``obs_shape`` / ``obs_dtype`` (against the
    first episode this validator accepted, in this batch or an earlier one, and the observation
    space), ``nan_obs``, ``out_of_space`` (observations, then actions).

    Args:
        config: The checks to run; None: the defaults (every check).
        on_invalid: The policy for a failure (the config's ``read.on_invalid``).
    """

    def __init__(
        self, config: ValidateConfig | None = None, on_invalid: OnInvalid = "raise"
    ) -> None:
        self.config = config or ValidateConfig()
        self.on_invalid = check_on_invalid(on_invalid)
        #: (step shape, dtype, the episode that set them); (leaf signatures, ``_LEAVES``, the
        #: episode) for composite observations.
        self._expected_obs: tuple[Any, Any, Any] | None = None
        self._warned: set[str] = set()
        spaces = (("obs", self.config.observation_space), ("actions", self.config.action_space))
        self._spaces = {col: SpaceCheck(sp) for col, sp in spaces if sp is not None}
        self._configured = frozenset(self._spaces)  # columns whose space the config declares

    def _use_declared(self, declared: tuple[Any, Any]) -> None:
        """Takes the spaces a batch's data declares for the columns the config leaves open (a
        check is built once per space, and rebuilt only when the declared space changes)."""
        for col, space in zip(("obs", "actions"), declared, strict=True):
            if col in self._configured:
                continue
            if not isinstance(space, gym.Space):
                self._spaces.pop(col, None)
                continue
            held = self._spaces.get(col)
            if held is None or (held.space is not space and held.space != space):
                self._spaces[col] = SpaceCheck(space)

    @property
    def expected_obs(self) -> tuple[Any, Any] | None:
        """Per-step observation shape and dtype every episode must have (None before the first;
        leaf signatures and ``"leaves"`` for composite observations)."""
        return None if self._expected_obs is None else self._expected_obs[:2]

    def validate(self, batch: EpisodeBatch) -> EpisodeBatch:
        """Removes the episodes that fail a check and records them; returns ``batch``.

        Under ``on_invalid="raise"`` the first failure raises an
        :class:`~offline_prelearner.errors.EpisodeValidationError` naming the episode, the column,
        the timestep and what was expected; under ``"quarantine"`` each rejection keeps the
        refused episode (the quarantine writer turns it into rows). The checks run as vectors
        over the batch's columns; only the episodes they do not clear are looked at one by one.

        Args:
            batch: The batch, changed in place.

        Returns:
            ``batch``.
        """
        policy = self.on_invalid
        self._use_declared(batch.declared_spaces)
        held = _Held(batch.columns)
        failed: list[tuple[int, EpisodeValidationError]] = []
        i = 0
        while i < len(held) and self._expected_obs is None:  # until an episode fixes the spec
            error = self.check(held.episode(i))
            if error is not None:
                if policy == "raise":
                    raise error
                failed.append((i, error))
            i += 1
        # The rest: the checks as vectors over the whole batch; ``check`` itself (which builds
        # the error, and warns) runs only for the episodes those do not clear.
        for j in np.flatnonzero(~self._passes(held.tail(i))).tolist():
            error = self.check(held.episode(i + j))
            if error is not None:
                if policy == "raise":
                    raise error
                failed.append((i + j, error))
        if not failed:
            return batch
        keep = [True] * len(held)
        for i, error in failed:  # this stage's policy wins over the batch's
            keep[i] = False
            refused = held.episode(i) if policy == "quarantine" else None
            batch.reject(error, int(batch.source_rows[i]), episode=refused, policy=policy)
        batch.keep_only(keep)
        return batch

    def _passes(self, held: _Held) -> np.ndarray:
        """Per episode: True where ``check`` would surely return None without a side effect
        (once the obs spec is fixed). False means "ask ``check``", not necessarily "bad"."""
        cfg = self.config
        m = len(held)
        if m == 0 or self._expected_obs is None:
            return np.zeros(m, bool)
        shape, dtype, _ = self._expected_obs
        composite = dtype is _LEAVES
        n = held.lengths()
        # Empty episodes warn (or fail min_length): always the detailed path.
        ok = n >= max(cfg.min_length, 1)
        ok &= held.t_started() >= 0
        if cfg.require_done:
            ok &= held.done()
        ok &= held.leaves_are(shape) if composite else held.obs_layout_is(shape, dtype)
        bounds = np.zeros(m + 1, np.int64)
        np.cumsum(n, out=bounds[1:])
        if cfg.check_finite_rewards:
            rewards = held.rewards()
            if rewards.dtype.kind in "fc":
                ok &= _none_per_episode(~np.isfinite(rewards), bounds)
        if not ok.any():
            return ok
        good = np.flatnonzero(ok)
        if composite:
            if cfg.check_finite_obs or "obs" in self._spaces:
                ok[good] &= self._leaves_clear(held, good, n[good], shape)
        else:
            if cfg.check_finite_obs and np.dtype(dtype).kind in "fc":
                ok &= held.obs_finite()  # in place: no gather of the observations
            if "obs" in self._spaces and ok.any():
                good = np.flatnonzero(ok)
                if not self._space_clear("obs", held.observations(good)):
                    ok[good] = False
        finite_actions = cfg.check_finite_actions and held.actions_kind() in "fc"
        if (finite_actions or "actions" in self._spaces) and ok.any():
            good = np.flatnonzero(ok)
            actions = held.actions(good)
            if finite_actions:
                act_bounds = np.zeros(len(good) + 1, np.int64)
                np.cumsum(n[good], out=act_bounds[1:])
                bad = ~np.isfinite(actions).reshape(len(actions), -1).all(axis=1)
                ok[good] &= _none_per_episode(bad, act_bounds)
            if "actions" in self._spaces and not self._space_clear("actions", actions):
                ok[good] = False
        return ok

    def _leaves_clear(
        self, held: _Held, which: np.ndarray, n: np.ndarray, leaves: Any
    ) -> np.ndarray:
        """Per episode of ``which`` (composite observations of the expected ``leaves``): True
        where every leaf is finite (if asked) and in its leaf space, with no warning due. One
        vector pass per leaf over the concatenated episodes."""
        bounds = np.zeros(len(which) + 1, np.int64)
        np.cumsum(n + 1, out=bounds[1:])
        clear = np.ones(len(which), bool)
        check = self._spaces.get("obs")
        subs = None if check is None else check.leaves
        if check is not None and (subs is None or set(subs) != {k for k, _, _ in leaves}):
            return ~clear  # the space does not fit the layout: ``check`` says how
        obs = held.observations(which)
        for path, _, dtype in leaves:
            x = np.asarray(obs[path])
            bad = np.zeros(len(x), bool)
            if self.config.check_finite_obs and dtype.kind in "fc":
                bad |= ~np.isfinite(x).reshape(len(x), -1).all(axis=1)
            if subs is not None:
                sub = subs[path]
                rows = sub.rows_ok(x)
                if isinstance(rows, Miss):
                    return ~clear
                if rows is not None:
                    bad |= ~rows
                if f"obs.{path}:{x.dtype}" not in self._warned and sub.lossy(x.dtype):
                    return ~clear  # ``check`` warns once
            clear &= _none_per_episode(bad, bounds)
        return clear

    def _space_clear(self, column: str, x: np.ndarray) -> bool:
        """Whether all of ``x`` (steps of several episodes, one dtype) lies in the column's space
        and would raise no warning."""
        check = self._spaces[column]
        warned = f"{column}:{x.dtype}" in self._warned
        return check(x) is None and (warned or not check.lossy(x.dtype))

    def check(self, ep: Episode) -> EpisodeValidationError | None:
        """The first contract ``ep`` breaks, or None; an accepted episode may fix the obs spec.

        The checks run in the order of the class docstring. The first episode accepted sets the
        observations' expected step shape and dtype (or leaves) for every later one; odd but
        legal data (no steps, a lossy dtype) warns once with :class:`OddDataWarning`.

        Args:
            ep: The episode (a read-only view from the batch's columns, or one built by hand).

        Returns:
            The error naming the episode, the reason tag, the column and ``t`` where it applies;
            None when ``ep`` passes. It is returned, not raised: the policy decides.
        """
        cfg = self.config
        n = len(ep)
        if n < cfg.min_length:
            return _error(
                ep, "too_short", f"episode has {n} steps, fewer than min_length={cfg.min_length}"
            )
        if ep.t_started < 0:
            return _error(ep, "bad_t", f"t_started must be >= 0, found {ep.t_started}", "t")
        if cfg.require_done and not ep.is_done:
            return _error(
                ep,
                "not_done",
                f"episode ending at t={ep.t_end} is neither terminated "
                "nor truncated (require_done=False admits fragments)",
            )
        if cfg.check_finite_rewards and ep.rewards.dtype.kind in "fc":
            i = _first_bad(np.isfinite(ep.rewards))
            if i is not None:
                t = ep.t_started + i
                return _error(
                    ep,
                    "nan_reward",
                    f"reward at t={t} is {ep.rewards[i]}, not finite",
                    "rewards",
                    t,
                )
        error = self._check_obs(ep)
        if error is not None:
            return error
        actions = ep.actions
        if (
            cfg.check_finite_actions
            and isinstance(actions, np.ndarray)
            and actions.dtype.kind in "fc"
        ):
            i = _first_bad(np.isfinite(actions)) if n > 0 else None
            if i is not None:
                t = ep.t_started + i
                return _error(
                    ep, "nan_action", f"action at t={t} has a non-finite value", "actions", t
                )
        if "actions" in self._spaces and n > 0:  # an empty action array has no shape to check
            error = self._check_space(ep, "actions", ep.actions)
            if error is not None:
                return error
        if n == 0:
            self._warn_once("empty", f"episode {ep.id!r} has no steps (min_length=0 admits it)")
        if self._expected_obs is None:
            self._expected_obs = (*_obs_layout(ep.observations), ep.id)
        return None

    def _check_leaves(self, ep: Episode) -> EpisodeValidationError | None:
        """Composite observations: the leaves' layout, then each leaf finite."""
        obs: dict[str, np.ndarray] = cast(Any, ep.observations)
        if self._expected_obs is not None:
            leaves, kind, ref = self._expected_obs
            found = _obs_layout(obs)[0]
            if kind is not _LEAVES:
                return _error(
                    ep,
                    "obs_shape",
                    f"observation leaves {_show_leaves(found)} where plain observations of "
                    f"shape {leaves} and dtype {kind} are expected (set by episode {ref!r})",
                    "obs",
                )
            if found != leaves:
                return _error(
                    ep,
                    "obs_shape",
                    f"observation leaves {_show_leaves(found)} differ from the expected "
                    f"{_show_leaves(leaves)} (set by episode {ref!r})",
                    "obs",
                )
        if self.config.check_finite_obs:
            for path, leaf in obs.items():
                if leaf.dtype.kind in "fc":
                    i = _first_bad(np.isfinite(leaf))
                    if i is not None:
                        t = ep.t_started + i
                        msg = f"observation leaf {path!r} at t={t} has a non-finite value"
                        return _error(ep, "nan_obs", msg, f"obs.{path}", t)
        if "obs" in self._spaces:
            check = self._spaces["obs"]
            miss = check(obs)
            if miss is not None:
                column = f"obs.{miss.leaf}" if miss.leaf else "obs"
                step = None if miss.index is None else ep.t_started + miss.index
                at = "" if step is None else f" at t={step}"
                reason = "out_of_space" if miss.kind == "value" else f"obs_{miss.kind}"
                return _error(
                    ep, reason, f"{column}{at} not in {check.space}: {miss.detail}", column, step
                )
            for path, sub in (check.leaves or {}).items():
                if sub.lossy(obs[path].dtype):
                    self._warn_once(
                        f"obs.{path}:{obs[path].dtype}",
                        f"obs.{path} are {obs[path].dtype} but the space says {sub.cast_to} "
                        f"(first seen in episode {ep.id!r})",
                    )
        return None

    def _check_obs(self, ep: Episode) -> EpisodeValidationError | None:
        if O.is_composite(ep.observations):
            return self._check_leaves(ep)
        obs = ep.observations
        if self._expected_obs is not None:
            shape, dtype, ref = self._expected_obs
            if dtype is _LEAVES:
                return _error(
                    ep,
                    "obs_shape",
                    f"a plain observation of shape {obs.shape[1:]} where leaves "
                    f"{_show_leaves(shape)} are expected (set by episode {ref!r})",
                    "obs",
                )
            if obs.shape[1:] != shape:
                return _error(
                    ep,
                    "obs_shape",
                    f"observation shape {obs.shape[1:]} differs from "
                    f"the expected {shape} (set by episode {ref!r})",
                    "obs",
                )
            if obs.dtype != dtype:
                return _error(
                    ep,
                    "obs_dtype",
                    f"observation dtype {obs.dtype} differs from the "
                    f"expected {dtype} (set by episode {ref!r})",
                    "obs",
                )
        if self.config.check_finite_obs and obs.dtype.kind in "fc":
            i = _first_bad(np.isfinite(obs))
            if i is not None:
                t = ep.t_started + i
                last = " (the last step's new_obs)" if i == len(ep) else ""
                return _error(
                    ep, "nan_obs", f"observation at t={t}{last} has a non-finite value", "obs", t
                )
        return self._check_space(ep, "obs", obs) if "obs" in self._spaces else None

    def _check_space(
        self, ep: Episode, column: str, x: np.ndarray
    ) -> EpisodeValidationError | None:
        check = self._spaces[column]
        space = check.space
        miss = check(x)
        if miss is None:
            if check.lossy(x.dtype):
                self._warn_once(
                    f"{column}:{x.dtype}",
                    f"{column} are {x.dtype} but the space says "
                    f"{check.cast_to} (first seen in episode {ep.id!r})",
                )
            return None
        reason = f"{column}_{miss.kind}" if column == "obs" and miss.kind != "value" else None
        t = None if miss.index is None else ep.t_started + miss.index
        at = "" if t is None else f" at t={t}"
        return _error(
            ep, reason or "out_of_space", f"{column}{at} not in {space}: {miss.detail}", column, t
        )

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, OddDataWarning, stacklevel=2)


_LEAVES = "leaves"


def _obs_layout(obs: Any) -> tuple[Any, Any]:
    """(step shape, dtype) of a plain observation; (leaf signatures, ``_LEAVES``) of a composite."""
    if O.is_composite(obs):
        return tuple((k, v.shape[1:], v.dtype) for k, v in obs.items()), _LEAVES
    return obs.shape[1:], obs.dtype


def _show_leaves(leaves: Any) -> str:
    return "{" + ", ".join(f"{k}: {d}{list(s)}" for k, s, d in leaves) + "}"


class _Held:
    """The episodes of a batch from episode ``start`` on, as the vector checks see them (views of
    the batch's columns; no episode object unless one is asked for)."""

    def __init__(self, cols: EpisodeColumns, start: int = 0) -> None:
        self.cols, self.start = cols, start

    def __len__(self) -> int:
        return len(self.cols) - self.start

    def tail(self, i: int) -> _Held:
        return _Held(self.cols, self.start + i)

    def episode(self, i: int) -> Episode:
        return self.cols.episode(self.start + i)

    def lengths(self) -> np.ndarray:
        return self.cols.length[self.start :]

    def t_started(self) -> np.ndarray:
        return self.cols.t_started[self.start :]

    def done(self) -> np.ndarray:
        return self.cols.done[self.start :]

    def obs_layout_is(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
        obs = self.cols.obs  # one array: one layout
        plain = not self.cols.composite
        return np.full(len(self), plain and obs.shape[1:] == shape and obs.dtype == dtype)

    def leaves_are(self, leaves: Any) -> np.ndarray:
        """Per held episode: composite observations with exactly these leaf signatures (path,
        step shape, dtype)."""
        cols = self.cols
        same = cols.composite and _obs_layout(O.record_leaves(cols.obs[:0]))[0] == leaves
        return np.full(len(self), same)

    def rewards(self) -> np.ndarray:
        """Every held episode's rewards, concatenated in order."""
        return np.asarray(self.cols.rewards[self.cols.step_rows(self.start)])

    def observations(self, which: np.ndarray) -> np.ndarray:
        """The observations of episodes ``which`` (ascending), concatenated."""
        return self.cols.select(which + self.start).observations()

    def obs_finite(self) -> np.ndarray:
        """Per held episode: every observation finite. One pass over the observation arrays
        where they lie (each row once), counted per episode by its rows' range."""
        cols, lo = self.cols, self.start
        obs = cols.obs
        if all_finite(obs) and (cols.last_obs is None or all_finite(cols.last_obs)):
            return np.ones(len(self), bool)
        bad = np.zeros(len(obs) + 1, np.int64)
        np.cumsum(~np.isfinite(obs).reshape(len(obs), -1).all(axis=1), out=bad[1:])
        n = cols.length[lo:]
        if cols.last_obs is None:  # assembled: length + 1 rows from obs_at
            at = cols.obs_at[lo:]
            return np.asarray(bad[at + n + 1] == bad[at])
        at = cols.step_at[lo:]  # split: length rows from step_at, then last_obs[e]
        last = cols.last_obs[lo : len(cols)]
        last_ok = np.isfinite(last).reshape(len(last), -1).all(axis=1)
        return np.asarray((bad[at + n] == bad[at]) & last_ok)

    def actions_kind(self) -> str:
        """The actions' dtype kind (``"f"`` for float actions; ``"O"`` for anything else)."""
        actions = self.cols.actions
        return actions.dtype.kind if isinstance(actions, np.ndarray) else "O"

    def actions(self, which: np.ndarray) -> np.ndarray:
        """The actions of episodes ``which`` concatenated."""
        sel = self.cols.select(which + self.start)
        return np.asarray(sel.actions[sel.step_rows()])


def all_finite(x: np.ndarray) -> bool:
    """Whether every value of the float array ``x`` is finite, in one pass and no temporary
    array: the sum is finite then (a NaN or an infinity makes it NaN or infinite); a sum that
    overflows from finite values alone is looked at value by value.

    Args:
        x: A float (or complex) array.

    Returns:
        True when no value is NaN or infinite.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(x.sum()):
            return True
    return bool(np.isfinite(x).all())


def _none_per_episode(bad: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Per segment ``bounds[k]:bounds[k + 1]`` of ``bad`` (bools): True where none is set."""
    counts = np.zeros(len(bad) + 1, np.int64)
    np.cumsum(bad, out=counts[1:])
    return np.asarray(counts[bounds[1:]] == counts[bounds[:-1]])


def _error(
    ep: Episode, reason: str, message: str, column: str | None = None, timestep: int | None = None
) -> EpisodeValidationError:
    return EpisodeValidationError(
        message, Where(episode_id=ep.id, column=column, timestep=timestep), reason=reason
    )
