"""Episode: one agent's trajectory as a handful of numpy columns.

An episode of ``T`` steps holds

* ``observations``  ``[T + 1, *obs_shape]``  -- the reset observation, then one per step; the last
  one is the observation the final action led to (what a truncated episode bootstraps from);
* ``actions``       ``[T, *act_shape]``;
* ``rewards``       ``[T]``;
* ``extras``        ``{name: [T, ...]}``     -- any per-step column (logp, vf_preds, weights...);
* ``infos``         optional list of ``T + 1`` dicts (RLlib's layout: the reset info first);
* ``terminated`` / ``truncated`` flags, ``id``, ``agent_id``, ``module_id`` and ``t_started`` (the
  env step of ``observations[0]``; a fragment of a longer episode starts later than 0).

**Composite observations** (gymnasium ``Dict`` / ``Tuple``, nested): ``observations`` is then a
flat ``dict`` from a leaf's path (``"desired_goal"``; ``"0"``, ``"1"`` for a Tuple; ``"a.b"``
nested) to that leaf's ``[T + 1, ...]`` array (:mod:`.observations`); in an episode view these
are views of the fields of the carrier's one record array (:mod:`.episode_columns`). Chosen over
a single array plus side columns because (1) every leaf is its own numpy column, so a buffer
keeps one ring column per leaf and gathers each with one fancy index -- no per-step dicts;
(2) the observation stays *one* field: code that does not handle
composite observations fails on a ``dict`` instead of silently dropping a side column; (3) a
plain observation is the same ``ndarray`` as before and takes none of the new paths. Flat
rather than nested: each operation is one loop over leaves; nesting is rebuilt only on the
learner side (``MultiAgentBatch.from_rows``).

Episodes travel through the pipeline as :class:`~.episode_columns.EpisodeColumns`; an
``Episode`` is a read-only view of one of them (``EpisodeColumns.episode`` /
``iter_episodes``: its arrays are not writeable), for user code and tests, or one a user builds
from their own arrays (``EpisodeColumns.from_episodes`` and the buffer take those). Slices are
views; nothing is copied until two fragments are concatenated. ``get_state`` and ``from_state``
speak RLlib's ``SingleAgentEpisode`` state layout, so RLlib's msgpack episodes decode and our
episodes can be read by RLlib.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import numpy as np

from ..errors import DataError, DecodeError, EpisodeValidationError, Where
from ..spaces import space_to_dict
from . import observations as O

__all__ = ["Episode"]


def _fail(msg: str, episode_id: Any, **where: Any) -> EpisodeValidationError:
    return EpisodeValidationError(msg, Where(episode_id=episode_id, **where), reason="inconsistent")


class Episode:
    """One agent's trajectory as numpy columns. See the module docstring for the layout.

    Args:
        id: The episode id (an int or a string); with ``agent_id`` it keys de-duplication.
        observations: ``[T + 1, ...]``: the observation before each step and the one after the
            last; a dict of such arrays for composite observations.
        actions: ``[T, ...]``, one per step.
        rewards: ``[T]``, one per step.
        terminated: The episode ended in a terminal state.
        truncated: The episode was cut (a time limit); never both with ``terminated``.
        agent_id: The agent, in multi-agent data; None otherwise.
        module_id: The module (policy) that learns from it; None: the default module.
        t_started: Env step of ``observations[0]`` (above 0 for a fragment of a longer episode).
        infos: ``T + 1`` info dicts (the reset info first), or None.
        extras: Further ``[T, ...]`` per-step columns by name (``action_logp``, values...).

    Raises:
        EpisodeValidationError: The lengths disagree, a column has the wrong dtype,
            ``t_started`` is negative, or both ``terminated`` and ``truncated`` are set.
    """

    __slots__ = (
        "actions",
        "agent_id",
        "extras",
        "id",
        "infos",
        "module_id",
        "observations",
        "rewards",
        "t_started",
        "terminated",
        "truncated",
    )

    def __init__(
        self,
        *,
        id: Any,
        observations: np.ndarray | Mapping[str, Any],
        actions: np.ndarray,
        rewards: np.ndarray,
        terminated: bool = False,
        truncated: bool = False,
        agent_id: Any = None,
        module_id: Any = None,
        t_started: int = 0,
        infos: Sequence[Any] | None = None,
        extras: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        self.id = id
        # Typed as the plain array its consumers take; a composite space holds the flat
        # {leaf path: array} map here (see the module docstring), which they do not take yet.
        self.observations: np.ndarray = (
            cast(Any, O.flatten(observations))
            if O.is_composite(observations)
            else np.asarray(observations)
        )
        self.actions = np.asarray(actions)
        self.rewards = np.asarray(rewards)
        self.terminated = bool(terminated)
        self.truncated = bool(truncated)
        self.agent_id = agent_id
        self.module_id = module_id
        self.t_started = int(t_started)
        self.infos = None if infos is None else list(infos)
        self.extras = {k: np.asarray(v) for k, v in (extras or {}).items()}
        self._check()

    @classmethod
    def _trusted(
        cls,
        id: Any,
        observations: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        terminated: bool,
        truncated: bool,
        agent_id: Any,
        module_id: Any,
        t_started: int,
        extras: dict[str, np.ndarray],
        infos: list[Any] | None = None,
    ) -> Episode:
        """An episode whose invariants the caller has already established, without checks.

        For the batch decoders only (msgpack episodes, rows): they check lengths, flags, dtypes
        and ``t`` as vectors over a whole batch and pass one episode of each layout through the
        real constructor first. Arguments are stored as given: numpy arrays, Python ``bool`` /
        ``int`` flags and ``t_started``, ``infos`` a list of ``T + 1`` dicts or None.
        """
        ep = object.__new__(cls)
        ep.id = id
        ep.observations = observations
        ep.actions = actions
        ep.rewards = rewards
        ep.terminated = terminated
        ep.truncated = truncated
        ep.agent_id = agent_id
        ep.module_id = module_id
        ep.t_started = t_started
        ep.infos = infos
        ep.extras = extras
        return ep

    # ------------------------------------------------------------------ invariants
    def _check(self) -> None:
        eid = self.id
        if self.actions.ndim < 1:
            raise _fail("actions must have a time axis, got a scalar", eid, column="actions")
        t = len(self.actions)
        composite = O.is_composite(self.observations)
        if composite and not self.observations:
            raise _fail("a composite observation needs at least one leaf", eid, column="obs")
        for path, leaf in O.leaves(self.observations).items():
            column = f"obs.{path}" if composite else "obs"
            if leaf.ndim < 1:
                raise _fail("observations must have a time axis, got a scalar", eid, column=column)
            if len(leaf) != t + 1:
                raise _fail(
                    f"an episode of {t} actions needs {t + 1} observations, found {len(leaf)}",
                    eid,
                    column=column,
                )
            if leaf.dtype.hasobject:
                raise _fail(
                    f"{column} has dtype object (ragged or mixed values)", eid, column=column
                )
        if self.rewards.shape != (t,):
            raise _fail(
                f"rewards must have shape ({t},), found {self.rewards.shape}", eid, column="rewards"
            )
        if self.rewards.dtype.kind not in "iufb":
            raise _fail(
                f"rewards must be numeric, found dtype {self.rewards.dtype}", eid, column="rewards"
            )
        if self.actions.dtype.hasobject:
            raise _fail("actions has dtype object (ragged or mixed values)", eid, column="actions")
        if self.terminated and self.truncated:
            raise _fail("an episode cannot be both terminated and truncated", eid)
        if self.t_started < 0:
            raise _fail(f"t_started must be >= 0, found {self.t_started}", eid, column="t")
        if self.infos is not None and len(self.infos) != t + 1:
            raise _fail(
                f"infos must have {t + 1} entries (reset info first), found {len(self.infos)}",
                eid,
                column="infos",
            )
        for name, col in self.extras.items():
            if col.ndim < 1 or len(col) != t:
                raise _fail(
                    f"extra column {name!r} must have {t} rows, found "
                    f"{len(col) if col.ndim else 'a scalar'}",
                    eid,
                    column=name,
                )

    # ------------------------------------------------------------------ basics
    def __len__(self) -> int:
        return len(self.actions)

    @property
    def t_end(self) -> int:
        """The env step of the last observation (``t_started + len(self)``)."""
        return self.t_started + len(self.actions)

    @property
    def is_done(self) -> bool:
        """True when the episode ended: terminated or truncated."""
        return self.terminated or self.truncated

    @property
    def total_reward(self) -> float:
        """Sum of the rewards (accumulated in float64)."""
        return float(self.rewards.sum(dtype=np.float64))

    def __repr__(self) -> str:
        def arr(a: np.ndarray) -> str:
            return f"{a.dtype}{list(a.shape)}"

        extras = "".join(f", {k}={arr(v)}" for k, v in self.extras.items())
        obs = self.observations
        shown = (
            "{" + ", ".join(f"{k}: {arr(v)}" for k, v in O.leaves(obs).items()) + "}"
            if O.is_composite(obs)
            else arr(obs)
        )
        flag = "terminated" if self.terminated else "truncated" if self.truncated else "ongoing"
        return (
            f"Episode(id={self.id!r}, len={len(self)}, t={self.t_started}..{self.t_end}, {flag}, "
            f"obs={shown}, actions={arr(self.actions)}, "
            f"rewards={arr(self.rewards)}{extras}"
            f"{', infos' if self.infos is not None else ''})"
        )

    def _replace(self, **changes: Any) -> Episode:
        fields = {name: getattr(self, name) for name in self.__slots__}
        fields.update(changes)
        return Episode(**fields)

    # ------------------------------------------------------------------ slicing / joining
    def slice(self, start: int, stop: int | None = None) -> Episode:
        """Steps ``[start, stop)`` as a new episode whose arrays are views of this one.

        The slice keeps ``terminated``/``truncated`` only if it reaches this episode's end.

        Args:
            start: First step of the slice; Python slice rules (negative counts from the end,
                out-of-range values are clipped).
            stop: One past the last step, same rules; None: to the end. A ``stop`` before
                ``start`` gives an empty episode (its one observation is step ``start``'s).

        Returns:
            An episode of ``stop - start`` steps with ``stop - start + 1`` observations (and
            infos) and ``t_started`` moved on by ``start``.
        """
        n = len(self)
        start, stop, _ = slice(start, stop).indices(n)
        stop = max(stop, start)
        at_end = stop == n
        return self._replace(
            observations=O.map_leaves(self.observations, lambda v: v[start : stop + 1]),
            actions=self.actions[start:stop],
            rewards=self.rewards[start:stop],
            extras={k: v[start:stop] for k, v in self.extras.items()},
            infos=None if self.infos is None else self.infos[start : stop + 1],
            t_started=self.t_started + start,
            terminated=self.terminated and at_end,
            truncated=self.truncated and at_end,
        )

    def concat(self, *others: Episode) -> Episode:
        """Joins later fragments of this episode; see :meth:`concat_fragments`.

        Args:
            *others: Further fragments of the same episode id, in any order (sorted by
                ``t_started``); none: this episode itself is returned.

        Returns:
            The joined episode.

        Raises:
            EpisodeValidationError: The fragments do not continue one another (see
                :meth:`concat_fragments`).
        """
        return Episode.concat_fragments([self, *others])

    @staticmethod
    def concat_fragments(fragments: Iterable[Episode]) -> Episode:
        """Joins fragments of one episode, in ``t_started`` order, into one episode (one copy).

        Each fragment must start where the previous ended (``t_started == previous.t_end``) and
        repeat its last observation as its first; only the last fragment may be done.

        Args:
            fragments: Fragments of one episode (equal ids, the same extra columns), in any
                order. The joined episode keeps infos only if every fragment has them.

        Returns:
            The joined episode, with the first fragment's ids and ``t_started`` and the last
            fragment's ``terminated``/``truncated``; a single fragment is returned as is.

        Raises:
            ValueError: ``fragments`` is empty.
            EpisodeValidationError: The ids differ, a fragment other than the last is done, a
                fragment does not start at the previous one's ``t_end`` or with its last
                observation, or the extra columns differ.
        """
        frags = sorted(fragments, key=lambda e: e.t_started)
        if not frags:
            raise ValueError("concat_fragments needs at least one fragment")
        first = frags[0]
        if len(frags) == 1:
            return first
        for prev, nxt in itertools.pairwise(frags):
            if nxt.id != first.id:
                raise _fail(f"cannot join fragments of different episodes ({nxt.id!r})", first.id)
            if prev.is_done:
                raise _fail(
                    f"fragment ending at t={prev.t_end} is already done; nothing may follow",
                    first.id,
                    timestep=nxt.t_started,
                )
            if nxt.t_started != prev.t_end:
                raise _fail(
                    f"fragments do not continue: one ends at t={prev.t_end}, the next starts at "
                    f"t={nxt.t_started}",
                    first.id,
                    timestep=nxt.t_started,
                )
            last_obs = O.map_leaves(prev.observations, lambda v: v[-1])
            if not O.same(last_obs, O.map_leaves(nxt.observations, lambda v: v[0])):
                raise _fail(
                    "fragment's first observation differs from the previous fragment's last one",
                    first.id,
                    timestep=nxt.t_started,
                    column="obs",
                )
            if set(prev.extras) != set(nxt.extras):
                raise _fail(
                    f"fragments carry different extra columns: {sorted(prev.extras)} vs "
                    f"{sorted(nxt.extras)}",
                    first.id,
                    timestep=nxt.t_started,
                )
        last = frags[-1]
        with_infos = all(f.infos is not None for f in frags)
        infos: list[Any] | None = None
        if with_infos:
            infos = list(first.infos or [])
            for f in frags[1:]:
                infos.extend((f.infos or [])[1:])
        return Episode(
            id=first.id,
            observations=O.concat(
                [first.observations]
                + [O.map_leaves(f.observations, lambda v: v[1:]) for f in frags[1:]]
            ),
            actions=np.concatenate([f.actions for f in frags]),
            rewards=np.concatenate([f.rewards for f in frags]),
            extras={k: np.concatenate([f.extras[k] for f in frags]) for k in first.extras},
            infos=infos,
            terminated=last.terminated,
            truncated=last.truncated,
            agent_id=first.agent_id,
            module_id=first.module_id,
            t_started=first.t_started,
        )

    # ------------------------------------------------------------------ RLlib state layout
    def get_state(self, observation_space: Any = None, action_space: Any = None) -> dict[str, Any]:
        """This episode in RLlib's ``SingleAgentEpisode.get_state()`` layout (finalized buffers).

        Args:
            observation_space: The gymnasium space of the observations, stored serialized (RLlib's
                dict layout) in the state; None: no space recorded.
            action_space: The gymnasium space of the actions, likewise.

        Returns:
            The state dict: the arrays themselves (not copies) as the buffers' data, ``lookback``
            0, infos as ``T + 1`` dicts (empty dicts when this episode has none), ``t`` the env
            step of the last observation.

        Raises:
            DecodeError: A space of a type RLlib's layout cannot hold (``reason="bad_space"``).
        """
        obs_space = space_to_dict(observation_space)
        act_space = space_to_dict(action_space)

        def buf(data: Any, space: Any = None) -> dict[str, Any]:
            return {"data": data, "lookback": 0, "finalized": True, "space": space}

        infos = self.infos if self.infos is not None else [{} for _ in range(len(self) + 1)]
        now = time.perf_counter()
        return {
            "id_": self.id,
            "agent_id": self.agent_id,
            "module_id": self.module_id,
            "multi_agent_episode_id": None,
            "observations": buf(self.observations, obs_space),
            "actions": buf(self.actions, act_space),
            "rewards": buf(self.rewards),
            "infos": {"data": list(infos), "lookback": 0, "finalized": False, "space": None},
            "extra_model_outputs": {k: buf(v) for k, v in self.extras.items()} or None,
            "is_terminated": self.terminated,
            "is_truncated": self.truncated,
            "t_started": self.t_started,
            "t": self.t_end,
            "_observation_space": obs_space,
            "_action_space": act_space,
            "_start_time": None,
            "_last_step_time": now,
            "custom_data": {},
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Episode:
        """Builds an episode from RLlib's ``SingleAgentEpisode`` state dict (lists or finalized).

        Each buffer's ``lookback`` steps are dropped: the episode starts at ``t_started``. Infos
        that are all empty (RLlib writes ``{}`` for every step) are dropped too (``infos=None``),
        as are infos whose count does not match the observations.

        Args:
            state: The state map (``id_``, ``observations``, ``actions``, ``rewards`` buffers,
                ``is_terminated``, ``t_started``, ``t``, ``extra_model_outputs``...), as RLlib's
                ``get_state`` or msgpack decoding gives it; buffers may be finalized arrays or
                lists.

        Returns:
            The episode.

        Raises:
            DecodeError: ``state`` is not a map, holds a ``MultiAgentEpisode``, lacks an entry
                or has one of the wrong type (``reason`` ``bad_episode_state`` or
                ``unsupported_multi_agent``).
            DataError: The decoded columns break an episode's contract (lengths, flags, ``t``).
        """
        if not isinstance(state, Mapping):
            raise DecodeError(
                f"episode state must be a map, found {type(state).__name__}",
                reason="bad_episode_state",
            )
        eid = state.get("id_")
        if "agent_episodes" in state:
            raise DecodeError(
                "record holds a MultiAgentEpisode state; only single-agent episodes are read",
                Where(episode_id=eid),
                reason="unsupported_multi_agent",
            )
        try:
            infos_state = state.get("infos")
            return cls._from_parts(
                id=eid,
                observations=_buffer_array(state["observations"], "obs", eid),
                actions=_buffer_array(state["actions"], "actions", eid),
                rewards=_buffer_array(state["rewards"], "rewards", eid),
                terminated=_flag(state, "is_terminated", eid),
                truncated=_flag(state, "is_truncated", eid),
                agent_id=state.get("agent_id"),
                module_id=state.get("module_id"),
                t_started=state.get("t_started"),
                t=state.get("t"),
                infos=_unlookback(infos_state) if isinstance(infos_state, Mapping) else None,
                extras={
                    k: _buffer_array(v, k, eid)
                    for k, v in (state.get("extra_model_outputs") or {}).items()
                    if v
                },
            )
        except DataError:
            raise
        except KeyError as e:
            raise DecodeError(
                f"episode state has no {e.args[0]!r} entry",
                Where(episode_id=eid),
                reason="bad_episode_state",
            ) from None
        except (TypeError, AttributeError, ValueError, IndexError) as e:
            # A state of the right keys but wrong types (a list where a map belongs, ...).
            raise DecodeError(
                f"episode state is malformed: {type(e).__name__}: {e}",
                Where(episode_id=eid),
                reason="bad_episode_state",
            ) from None

    @classmethod
    def _from_parts(
        cls,
        *,
        id: Any,
        observations: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        terminated: bool,
        truncated: bool,
        agent_id: Any,
        module_id: Any,
        t_started: Any,
        t: Any,
        infos: Sequence[Any] | None,
        extras: Mapping[str, np.ndarray],
    ) -> Episode:
        """The last step of :meth:`from_state`, shared with the readers' fast decoder.

        ``infos`` are RLlib's per-step infos after the lookback (None entries mean ``{}``).
        """
        try:
            t0 = int(t_started or 0)
            t_end = None if t is None else int(t)
        except (TypeError, ValueError):
            raise _fail(
                f"t_started={t_started!r} and t={t!r} must be integers", id, column="t"
            ) from None
        if t_end is not None and t_end != t0 + len(actions):
            raise _fail(
                f"state says t={t} but t_started={t0} plus {len(actions)} actions disagree",
                id,
                column="t",
            )
        if infos is not None:
            if len(infos) != len(observations) or not any(infos):
                infos = None  # all empty, or inconsistent (RLlib writes them so in places)
            else:
                infos = [i if i is not None else {} for i in infos]
        return cls(
            id=id,
            observations=observations,
            actions=actions,
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            agent_id=agent_id,
            module_id=module_id,
            t_started=t0,
            infos=infos,
            extras=extras,
        )


def _same_obs(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def _unlookback(buffer_state: Mapping[str, Any]) -> Any:
    data = buffer_state["data"]
    lookback = int(buffer_state.get("lookback") or 0)
    if lookback < 0:
        raise DecodeError(f"lookback must be >= 0, found {lookback}", reason="bad_episode_state")
    return data[lookback:] if lookback else data


def _flag(state: Mapping[str, Any], key: str, eid: Any) -> bool:
    """A done flag of an episode state: a bool (or numpy's), absent or None as False; any other
    value (``"yes"``, 1, a list) is refused rather than read through ``bool()`` as True."""
    value = state.get(key)
    if value is None:
        return False
    if isinstance(value, np.ndarray) and value.shape == () and value.dtype == np.bool_:
        value = value[()]
    if isinstance(value, bool | np.bool_):
        return bool(value)
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    raise DecodeError(
        f"{key} must be a bool, found {type(value).__name__} {shown}",
        Where(column=key, episode_id=eid),
        reason="bad_episode_state",
    )


def _buffer_array(buffer_state: Any, column: str, eid: Any) -> np.ndarray:
    """One InfiniteLookbackBuffer state -> a numpy array along time (lookback dropped)."""
    if not isinstance(buffer_state, Mapping) or "data" not in buffer_state:
        raise DecodeError(
            f"{column} is not an InfiniteLookbackBuffer state",
            Where(column=column, episode_id=eid),
            reason="bad_episode_state",
        )
    data = _unlookback(buffer_state)
    if isinstance(data, np.ndarray):
        return data
    if isinstance(data, Mapping):
        raise DecodeError(
            f"{column} holds a composite (dict) space; flatten it with a connector before storing",
            Where(column=column, episode_id=eid),
            reason="unsupported_composite",
        )
    try:
        if data and isinstance(data[0], np.ndarray):
            return np.stack(data)
        out = np.asarray(data)
    except ValueError as e:
        raise _fail(f"{column} steps have inconsistent shapes: {e}", eid, column=column) from None
    if out.dtype.hasobject:
        raise _fail(f"{column} steps are ragged or of mixed types", eid, column=column)
    return out
