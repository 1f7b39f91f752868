"""OfflinePreLearner: one Ray Data batch in, learner-ready rows out.

::

    batch ──map_to_episodes──▶ EpisodeBatch ──validate──▶ (checked, de-duplicated)
          ──postprocess_episodes──▶ (episode connectors) ──add_to_buffers──▶ one buffer per module
          ──sample──▶ MultiAgentBatch ──run_connectors──▶ ──to_output──▶ {column: ndarray}

From ``postprocess_episodes`` on, a batch's episodes travel as one
:class:`~offline_prelearner.episodes.episode_columns.EpisodeColumns` (shared arrays plus a table
of offsets), never as an object per episode: every hook a subclass overrides takes and returns
columns (:meth:`EpisodeColumns.map_episodes
<offline_prelearner.episodes.episode_columns.EpisodeColumns.map_episodes>` serves code that wants
one episode at a time).

It is a callable class for ``Dataset.map_batches``: Ray builds one per actor, and each keeps its
reader state (fragments spread over batches), its de-duplication memory and its buffers between
batches. Every step is a small method, so a subclass changes one step without copying
``__call__``. Nothing here imports Ray: the same object runs in a test, a notebook or a learner.

Output: for each trained module, a dict of numpy columns with one row per sampled transition (or
sequence) and a ``module_id`` column; :meth:`MultiAgentBatch.from_rows
<offline_prelearner.replay.batch.MultiAgentBatch.from_rows>` rebuilds ``{module_id: SampleBatch}``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any, cast

import numpy as np

from .config import PreLearnerConfig
from .connectors.base import ConnectorContext, ConnectorPipeline
from .connectors.registry import build_pipeline
from .episodes import columns as C
from .episodes.dedupe import Deduplicator
from .episodes.episode_columns import EpisodeColumns
from .episodes.fragment_bank import OpenFragments
from .episodes.ledger import EpisodeBatch, Ledger, Rejection
from .episodes.validate import Validator, all_finite
from .errors import ConfigError, DataError, EmptyBufferError, Where
from .io.readers import Batch, Reader, make_reader
from .plugins import import_object
from .replay.batch import MultiAgentBatch, SampleBatch
from .replay.build import build_buffer, build_unit
from .replay.replay_buffer import EpisodeReplayBuffer, agent_keys, real_ids, sample_all_columns
from .replay.samplers.prioritized import Prioritized
from .replay.units.base import SampleUnit

__all__ = ["OfflinePreLearner"]


class OfflinePreLearner:
    """The callable Ray Data runs in ``map_batches``; see the module docstring.

    Args:
        config: A :class:`PreLearnerConfig`, a dict, a JSON/YAML path, or None for defaults.
        **updates: Field updates applied to ``config`` (``n_step=3``, ``buffer.kind=...``).
    """

    def __init__(
        self,
        config: PreLearnerConfig | Mapping[str, Any] | str | None = None,
        **updates: Any,
    ) -> None:
        cfg = PreLearnerConfig.coerce(config)
        self.config = cfg.with_updates(updates) if updates else cfg
        self.key = f"prelearner-{id(self):x}-{time.time_ns()}"
        #: The file the batch being processed comes from, when the job knows it (the batch job
        #: sets it before each call); readers name it in their errors.
        self.source: str | None = None
        self.reader = self.build_reader()
        self.validator = Validator(self.config.validate, self.config.read.on_invalid)
        # sample_all joins fragments by t in any order, so one is a repeat only where it overlaps
        self.deduplicator = Deduplicator(any_order=bool(self.config.sample.sample_all))
        self.connectors = self.build_connectors()
        self.buffers: dict[str, EpisodeReplayBuffer] = {}
        self.ledger = Ledger()
        self._seen: set[tuple[Any, Any]] = set()  # (eps_id, agent_id) of episodes kept
        #: What the last call refused (the batch job counts it per input file).
        self.last_rejections: list[Rejection] = []
        self.counters = {
            "batches": 0,
            "samples": 0,
            "fragments_added": 0,
            "not_ready": 0,
            "samples_nonfinite": 0,
        }
        #: sample_all: the fragments of episodes still open, joined by ``t`` in any order.
        self._pending = OpenFragments()
        #: Modules whose buffer keys episodes by (episode id, agent id) (see ``_buffer_for``).
        self._agent_keyed: set[str] = set()
        self._agent_to_module = self._mapping_fn()

    # ================================================================== building blocks (hooks)
    def build_reader(self) -> Reader:
        """The reader for ``config.read.format`` (override to read a format of your own)."""
        read = self.config.read
        return make_reader(read)

    def build_unit(self) -> SampleUnit:
        """What each drawn step becomes: Transition, NStep, Sequence, optionally frame-stacked."""
        return build_unit(self.config.sample)

    def build_buffer(self, module_id: str) -> EpisodeReplayBuffer:
        """A fresh buffer for one module, as ``config.buffer`` describes.

        Args:
            module_id: The module the buffer holds episodes of (its name in stats and in a
                checkpoint); the prelearner calls this on a module's first episodes.

        Returns:
            An empty :class:`EpisodeReplayBuffer` with the configured sampler and sample unit.
        """
        return build_buffer(self.config, module_id, self.build_unit())

    def build_connectors(self) -> ConnectorPipeline:
        """The connector pipeline from ``config.connectors`` (override to add your own)."""
        return build_pipeline(list(self.config.connectors))

    def _mapping_fn(self) -> Callable[[Any], str] | None:
        a = self.config.modules.agent_to_module
        if a is None:
            return None
        if isinstance(a, dict):
            return lambda agent: a.get(agent, self.config.modules.default_module)
        fn = import_object(a, f"modules.agent_to_module {a!r}")
        if not callable(fn):
            raise ConfigError(f"modules.agent_to_module {a!r} is not callable")
        return cast("Callable[[Any], str]", fn)

    # ================================================================== the steps
    def map_to_episodes(self, batch: Batch) -> EpisodeBatch:
        """Input batch -> episodes, every row accounted for (the registered reader).

        Args:
            batch: One Ray Data batch: a ``pyarrow.Table`` or a dict of numpy columns, in the
                layout of ``config.read.format`` (its column names mapped by ``read.schema``).

        Returns:
            The batch's episodes as one :class:`EpisodeColumns` inside an
            :class:`EpisodeBatch`, with the ledger of every input row and the rejections
            (``read.on_invalid``).
        """
        return self.reader.read(batch, self.source)

    def validate(self, episodes: EpisodeBatch) -> EpisodeBatch:
        """Contract checks, then de-duplication within the batch and against earlier batches.

        Args:
            episodes: What :meth:`map_to_episodes` returned.

        Returns:
            The same batch with the episodes that failed a check (under ``read.on_invalid``
            skip or quarantine) and the repeats removed, each counted in its ledger.

        Raises:
            EpisodeValidationError: An episode broke a check under ``read.on_invalid="raise"``.
        """
        return self.deduplicator.dedupe(self.validator.validate(episodes))

    def postprocess_episodes(self, columns: EpisodeColumns) -> EpisodeColumns:
        """The episode connectors (returns-to-go, advantages ...), before buffering.

        Takes and returns the batch's episodes as one :class:`EpisodeColumns` (before issue 31:
        a list of :class:`Episode`). A subclass changes episodes here, on the columns as a whole
        (``examples/custom_prelearner.py`` adds a column with ``dataclasses.replace``), or one
        episode at a time with :meth:`EpisodeColumns.map_episodes`::

            def postprocess_episodes(self, columns):
                columns = super().postprocess_episodes(columns)  # the configured connectors
                return columns.map_episodes(my_change)  # my_change(Episode) -> Episode

        Args:
            columns: The batch's validated, de-duplicated episodes; never change their arrays
                in place (return a new object: ``dataclasses.replace`` shares the arrays).

        Returns:
            The episodes to buffer (or to sample whole, under ``sample.sample_all``).
        """
        if not self.connectors.touches_episodes:
            return columns
        return self.connectors.on_episodes(
            columns, ConnectorContext(gamma=self.config.sample.gamma)
        )

    def module_of(self, columns: EpisodeColumns) -> list[str]:
        """The module each episode trains: its module id, else the agent mapping, else the
        default module.

        Takes the batch's episodes as columns (before issue 31: one :class:`Episode`).

        Args:
            columns: The batch's episodes (what :meth:`postprocess_episodes` returned).

        Returns:
            One module id per episode, in table order.
        """
        default = self.config.modules.default_module
        fn = self._agent_to_module
        n = len(columns)
        if columns.modules.count(None) == n and (fn is None or columns.agents.count(None) == n):
            return [default] * n  # the common case, without a walk over the episodes
        return [
            str(m) if m is not None else str(fn(a)) if fn and a is not None else default
            for m, a in zip(columns.modules, columns.agents, strict=True)
        ]

    def add_to_buffers(self, columns: EpisodeColumns) -> None:
        """Routes episodes to their module's buffer (created on first use), by :meth:`module_of`.

        Takes the batch's episodes as columns (before issue 31: a list of :class:`Episode`).

        Args:
            columns: The batch's episodes (what :meth:`postprocess_episodes` returned).
        """
        for module_id, part in self._by_module(columns):
            buf = self._buffer_for(module_id, part.agents)
            if module_id in self._agent_keyed:
                part = replace(part, ids=agent_keys(part.ids, part.agents, always=True))
            buf.add(part)
            self.counters["fragments_added"] += len(part)

    def _buffer_for(self, module_id: str, agents: list[Any]) -> EpisodeReplayBuffer:
        """Module ``module_id``'s buffer, built on its first episodes. A buffer first given
        episodes with agent ids keys every episode by (episode id, agent id), so two agents of
        one episode id never meet as one episode (one would be dropped as a repeat or refused
        as an overlap of the other); its samples carry the real ids (``real_ids``)."""
        buf = self.buffers.get(module_id)
        with_agents = agents.count(None) != len(agents)
        if buf is None:
            buf = self.buffers[module_id] = self.build_buffer(module_id)
            if with_agents:
                self._agent_keyed.add(module_id)
        elif with_agents and module_id not in self._agent_keyed:
            raise DataError(
                f"module {module_id!r}: episodes with agent ids (first {agents[0]!r}) after "
                "episodes without one; its buffer keys episodes by id alone, so two agents of "
                "one episode id would collide (give every episode an agent id, or none)",
                reason="agent_keys",
            )
        return buf

    def sample(self) -> MultiAgentBatch:
        """``train_batch_size`` samples from each trained module's buffer (none if not ready)."""
        n = self.config.sample.train_batch_size
        out: dict[str, SampleBatch] = {}
        for module_id, buf in self.buffers.items():
            if not self._trains(module_id):
                continue
            try:
                batch = buf.sample(n)
            except EmptyBufferError:
                self.counters["not_ready"] += 1
                continue
            out[module_id] = real_ids(batch) if module_id in self._agent_keyed else batch
        return MultiAgentBatch(out, env_steps=sum(len(b) for b in out.values()))

    def sample_all(self, columns: EpisodeColumns) -> MultiAgentBatch:
        """Every valid transition (or sequence) of the complete episodes, once, in order.

        Takes the batch's episodes as columns (before issue 31: a list of :class:`Episode`).
        Fragments of open episodes wait (per episode and agent id, as columns) until they cover
        ``t`` from 0 to a done step, in whatever order they arrive (see ``_complete``), so no
        window is cut by a batch boundary; the fragment that completes an episode stands where
        it ended, joined with the rest. ``stats()["pending_fragments"]`` says how many wait.

        Args:
            columns: The batch's episodes (what :meth:`postprocess_episodes` returned).

        Returns:
            Every sample of the episodes complete after this batch, per trained module (routed
            by :meth:`module_of`).
        """
        out: dict[str, SampleBatch] = {}
        for module_id, part in self._by_module(self._complete(columns)):
            if not self._trains(module_id):
                continue
            batch = sample_all_columns(part, self.build_unit(), seed=self.config.seed)
            if batch is not None:
                out[module_id] = batch
        return MultiAgentBatch(out, env_steps=sum(len(b) for b in out.values()))

    def run_connectors(self, batch: MultiAgentBatch) -> MultiAgentBatch:
        """Batch-level connectors, module by module (a pipeline without one returns ``batch``).

        Args:
            batch: The sampled train batch, one :class:`SampleBatch` per module.

        Returns:
            The batch each module's connectors made, with ``batch``'s env step count.
        """
        if not self.connectors.touches_batches:
            return batch
        out = {}
        for module_id, sb in batch.policy_batches.items():
            ctx = ConnectorContext(
                module_id=module_id,
                observation_space=self.config.validate.observation_space,
                action_space=self.config.validate.action_space,
                gamma=self.config.sample.gamma,
            )
            out[module_id] = self.connectors(sb, ctx)
        return MultiAgentBatch(out, env_steps=batch.env_steps)

    def check_output(self, batch: MultiAgentBatch) -> MultiAgentBatch:
        """What the job writes, checked finite: finite inputs can still sum to inf (rewards near
        the float maximum over an n-step window) or a connector can divide by zero.

        Every float column of every module's batch is checked in one vector pass each, except
        observations and actions where the user turned their input check off
        (``validate.check_finite_obs`` / ``check_finite_actions``: NaN there is data they
        admit). Under ``read.on_invalid="raise"`` the first non-finite value is a DataError
        naming the column, episode and ``t``; under skip or quarantine the samples holding one
        are dropped and counted (``stats()["samples_nonfinite"]``, ``stats.json``).

        Args:
            batch: The train batch after :meth:`run_connectors`.

        Returns:
            ``batch``, or a copy without the non-finite samples (skip, quarantine).

        Raises:
            DataError: A non-finite value under ``raise`` (``reason="nonfinite_sample"``).
        """
        out = {}
        dropped = 0
        for module_id, sb in batch.policy_batches.items():
            bad = self._nonfinite_samples(sb)
            if bad is None:
                out[module_id] = sb
                continue
            if self.config.read.on_invalid == "raise":
                raise _nonfinite_error(sb, bad)
            keep = ~bad.mask
            dropped += int(bad.mask.sum())
            out[module_id] = SampleBatch._trusted({k: v[keep] for k, v in sb.items()})
        if not dropped:
            return batch
        self.counters["samples_nonfinite"] += dropped
        return MultiAgentBatch(out, env_steps=batch.env_steps)

    def _nonfinite_samples(self, sb: SampleBatch) -> _Nonfinite | None:
        """The samples of ``sb`` holding a non-finite value in a checked column, or None."""
        cfg = self.config.validate
        mask: np.ndarray | None = None
        first: str | None = None
        for name, col in sb.items():
            if not isinstance(col, np.ndarray) or col.dtype.kind not in "fc" or not col.size:
                continue
            if not cfg.check_finite_obs and name.startswith((C.OBS, C.NEW_OBS)):
                continue
            if not cfg.check_finite_actions and name == C.ACTIONS:
                continue
            if all_finite(col):
                continue
            ok = np.isfinite(col).reshape(len(col), -1).all(axis=1)
            first = first or name
            mask = ~ok if mask is None else mask | ~ok
        return None if mask is None or first is None else _Nonfinite(mask, first)

    def to_output(self, batch: MultiAgentBatch) -> Iterator[dict[str, np.ndarray]]:
        """One dict of numpy columns per module, with a ``module_id`` column (Arrow-friendly).

        Args:
            batch: The train batch after :meth:`run_connectors`.

        Yields:
            ``{column: ndarray}`` per module that has rows, one row per sample.
        """
        for module_id, sb in batch.policy_batches.items():
            if len(sb):
                yield sb.to_rows(module_id)

    # ================================================================== the call
    def __call__(self, batch: Batch) -> Iterator[dict[str, np.ndarray]]:
        """One input batch -> zero or more output batches (one per trained module)."""
        episodes = self.validate(self.map_to_episodes(batch))
        self._count_episodes(episodes)
        columns = self.postprocess_episodes(episodes.columns)
        if self.config.sample.sample_all:
            result = self.sample_all(columns)
        else:
            self.add_to_buffers(columns)
            result = self.sample()
        result = self.check_output(self.run_connectors(result))
        self.counters["batches"] += 1
        self.counters["samples"] += sum(len(b) for b in result.policy_batches.values())
        yield from self.to_output(result)

    # ================================================================== feedback and stats
    def update_priorities(
        self, indices: np.ndarray, priorities: np.ndarray, module_id: str | None = None
    ) -> int:
        """Sends TD errors back to a prioritized buffer (same process only).

        Args:
            indices: The sample's ``indices`` column (int64 buffer handles), as it was emitted.
            priorities: One TD error per handle (its sign dropped; the buffer keeps
                ``|x| + eps``, raised to ``buffer.prioritized.alpha`` when drawn), as long as
                ``indices``.
            module_id: The module whose buffer sampled them; None means ``default_module``.

        Returns:
            How many of the handles were still current (stale ones, evicted since sampling, are
            ignored).

        Raises:
            ConfigError: No buffer of that module, or its sampler is not prioritized.
        """
        module_id = module_id or self.config.modules.default_module
        buf = self.buffers.get(module_id)
        if buf is None:
            raise ConfigError(f"no buffer for module {module_id!r}; have {sorted(self.buffers)}")
        if not isinstance(buf.sampler, Prioritized):
            raise ConfigError(
                f"module {module_id!r} has a {type(buf.sampler).__name__} sampler; "
                "update_priorities needs buffer.kind='prioritized'"
            )
        return int(buf.sampler.update_priorities(buf.storage, indices, priorities))

    def stats(self) -> dict[str, Any]:
        """Cumulative counters: rows and episodes (the ledger), samples, buffers per module."""
        return {
            **self.counters,
            "ledger": self.ledger.to_dict(),
            "pending_fragments": len(self._pending),
            "buffers": {m: b.stats() for m, b in self.buffers.items()},
        }

    # ================================================================== helpers
    def _count_episodes(self, episodes: EpisodeBatch) -> None:
        """Adds a batch's ledger; ``episodes_kept`` counts an episode cut across batches once
        (at its first kept piece), ``fragments`` counts the pieces."""
        self.ledger += episodes.ledger
        fresh = set(episodes.episode_keys()) - self._seen
        self._seen |= fresh
        self.last_rejections = episodes.rejections
        self.ledger.episodes_kept += len(fresh) - episodes.ledger.episodes_kept

    def _by_module(self, columns: EpisodeColumns) -> Iterator[tuple[str, EpisodeColumns]]:
        """``(module id, its episodes)`` per module of :meth:`module_of`, in order of first
        appearance (the whole table when one module holds them all)."""
        if not len(columns):
            return
        modules = self.module_of(columns)
        if modules.count(modules[0]) == len(modules):
            yield modules[0], columns
            return
        names = np.array(modules, dtype=object)
        for module_id in dict.fromkeys(modules):
            yield module_id, columns.select(names == module_id)

    def _trains(self, module_id: str) -> bool:
        wanted = self.config.modules.modules_to_train
        return wanted is None or module_id in wanted

    def _complete(self, columns: EpisodeColumns) -> EpisodeColumns:
        """The episodes complete after this batch, in table order; the fragments of open ones
        wait in ``_pending`` (:class:`~offline_prelearner.episodes.fragment_bank.OpenFragments`).

        An episode is complete when its fragments cover ``t`` contiguously from 0 to a done
        step, whatever order they arrived in (the rows' ``t``; without a ``t`` column a reader
        numbers fragments in arrival order, so arrival order is then assumed). One that ends
        here stands where it ended, joined with its earlier fragments. An episode read whole
        (done, ``t_started == 0``, nothing held for it) passes as it is: only the fragments cut
        at the batch's edges, a fragment starting later than ``t = 0``, and those of a held
        episode are handled one by one (few)."""
        done = columns.done
        pending = self._pending
        whole = done & (columns.t_started == 0)
        special = set(np.flatnonzero(~whole).tolist())
        ids, agents = columns.ids, columns.agents
        for key in pending:  # few; the episodes that continue one, found by C-level list scans
            hits = ids.count(key[0])
            if hits == 1:
                i = ids.index(key[0])
                if agents[i] == key[1]:
                    special.add(i)
            elif hits:  # the id more than once (agents, or fragments in one batch): each one
                special.update([i for i, k in enumerate(zip(ids, agents, strict=True)) if k == key])
        if not special:
            return columns
        joined: dict[int, EpisodeColumns] = {}
        for i in sorted(special):
            ep = pending.add((ids[i], agents[i]), columns.select(np.array([i])))
            if ep is not None:
                joined[i] = ep
        plain = np.flatnonzero(whole)
        if special.intersection(plain.tolist()):
            plain = np.setdiff1d(plain, np.fromiter(special, np.int64, len(special)))
        if not joined:
            return columns.select(plain)
        at = np.fromiter(joined, np.int64, len(joined))
        split = columns.last_obs is not None
        tails = [  # in the batch's observation layout (a reader may change it between batches)
            t if (t.last_obs is not None) == split else t.from_episodes([t.episode(0)], split=split)
            for t in joined.values()
        ]
        if not len(plain) or int(at[0]) < int(plain[0]):  # the first complete one sets dtypes
            columns = _cast_like(columns, tails[0])
        tails = [_cast_like(t, columns) for t in tails]
        both = EpisodeColumns.concat([columns, *tails])
        where = np.concatenate([plain, at])
        index = np.concatenate([plain, len(columns) + np.arange(len(at))])
        return both.select(index[np.argsort(where, kind="stable")])


def _cast_like(columns: EpisodeColumns, like: EpisodeColumns) -> EpisodeColumns:
    """``columns`` with ``like``'s dtypes (fragments of one episode read from batches whose
    columns differ in dtype, joined with another batch's episodes, take the dtypes a buffer
    would: those of the first episode it holds). The same object where they already agree."""
    pairs = [("obs", columns.obs, like.obs), ("actions", columns.actions, like.actions)]
    pairs.append(("rewards", columns.rewards, like.rewards))
    if all(a.dtype == b.dtype for _, a, b in pairs) and all(
        k in like.extras and v.dtype == like.extras[k].dtype for k, v in columns.extras.items()
    ):
        return columns
    obs, actions, rewards = (a.astype(b.dtype, copy=False) for _, a, b in pairs)
    extras = {
        k: v.astype(like.extras[k].dtype, copy=False) if k in like.extras else v
        for k, v in columns.extras.items()
    }
    last = columns.last_obs
    if last is not None:
        last = last.astype(like.obs.dtype, copy=False)
    return replace(columns, obs=obs, actions=actions, rewards=rewards, extras=extras, last_obs=last)


class _Nonfinite:
    """Which samples of a batch hold a non-finite value (``mask``), and the first column met."""

    def __init__(self, mask: np.ndarray, column: str) -> None:
        self.mask, self.column = mask, column


def _nonfinite_error(sb: SampleBatch, bad: _Nonfinite) -> DataError:
    """The refusal of the first sample with a non-finite value in ``bad.column``."""
    col = np.asarray(sb[bad.column])
    rows = np.flatnonzero(~np.isfinite(col).reshape(len(col), -1).all(axis=1))
    i = int(rows[0])
    ids, ts = sb.get(C.EPS_ID), sb.get(C.T)
    episode = None if ids is None else ids[i]
    t = None if ts is None else int(ts[i])
    value = col[i] if col.ndim == 1 else "a value"
    return DataError(
        f"a sample to write is not finite: {bad.column} is {value} ({len(rows)} samples); the "
        "input is finite, so the job's own arithmetic overflowed (an n-step return summing "
        "rewards near the float maximum, or a connector's normalisation): rescale the rewards",
        Where(column=bad.column, episode_id=episode, timestep=t),
        reason="nonfinite_sample",
    )
