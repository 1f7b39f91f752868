"""OfflinePreLearner: one Ray Data batch in, learner-ready rows out.

::

    batch ──map_to_episodes──▶ EpisodeBatch ──validate──▶ (checked, de-duplicated)
          ──postprocess_episodes──▶ (episode connectors) ──add_to_buffers──▶ one buffer per module
          (a batch read as columns: ──postprocess_columns──▶ the buffers, no object per episode)
          ──sample──▶ MultiAgentBatch ──run_connectors──▶ ──to_output──▶ {column: ndarray}

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
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any, cast

import numpy as np

from .config import PreLearnerConfig
from .connectors.base import ConnectorContext, ConnectorPipeline
from .connectors.registry import build_pipeline
from .episodes.dedupe import Deduplicator
from .episodes.episode import Episode
from .episodes.episode_columns import EpisodeColumns
from .episodes.ledger import EpisodeBatch, Ledger, Rejection
from .episodes.validate import Validator
from .errors import ConfigError, DataError, EmptyBufferError
from .io.readers import Batch, Reader, make_reader
from .plugins import import_object
from .replay.batch import MultiAgentBatch, SampleBatch
from .replay.build import build_buffer, build_unit
from .replay.replay_buffer import (
    EpisodeReplayBuffer,
    agent_keys,
    real_ids,
    sample_all_columns,
    sample_all_episodes,
    with_ids,
)
from .replay.samplers.prioritized import Prioritized
from .replay.units.base import SampleUnit

__all__ = ["OfflinePreLearner"]

#: The hooks that change episodes on the episode path; :meth:`OfflinePreLearner.postprocess_columns`
#: is their columnar twin (see :meth:`OfflinePreLearner.__init_subclass__`).
EPISODE_HOOKS = ("postprocess_episodes", "module_of", "add_to_buffers", "sample_all")


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
        self.deduplicator = Deduplicator()
        self.connectors = self.build_connectors()
        self.buffers: dict[str, EpisodeReplayBuffer] = {}
        self.ledger = Ledger()
        self._seen: set[tuple[Any, Any]] = set()  # (eps_id, agent_id) of episodes kept
        #: What the last call refused (the batch job counts it per input file).
        self.last_rejections: list[Rejection] = []
        self.counters = {"batches": 0, "samples": 0, "fragments_added": 0, "not_ready": 0}
        self._pending: dict[tuple[Any, Any], list[Episode]] = {}  # sample_all: open fragments
        #: Modules whose buffer keys episodes by (episode id, agent id) (see ``_buffer_for``).
        self._agent_keyed: set[str] = set()
        self._agent_to_module = self._mapping_fn()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that changes episodes and says nothing of columns keeps its change.

        Rows input reaches the buffers as columns through :meth:`postprocess_columns`. A class
        that overrides an episode hook (``postprocess_episodes``, ``module_of``,
        ``add_to_buffers``) but not ``postprocess_columns`` beside it (one written before that
        hook existed, or a subclass of a class that defines both) would have its change skipped
        there; it takes the episode path instead (correct, slower), and a ``FutureWarning`` at
        its definition says how to keep the fast path.
        """
        super().__init_subclass__(**kwargs)
        own = [h for h in EPISODE_HOOKS if h in cls.__dict__]
        if own and "postprocess_columns" not in cls.__dict__:
            warnings.warn(
                f"{cls.__qualname__} overrides {', '.join(own)} but not postprocess_columns: "
                "it takes the slower episode path for every batch; define postprocess_columns "
                "(the same change on columns, or return None to keep the episode path)",
                FutureWarning,
                stacklevel=2,
            )
            cls.postprocess_columns = _episode_path  # type: ignore[method-assign]

    # ================================================================== building blocks (hooks)
    def build_reader(self) -> Reader:
        """The reader for ``config.read.format`` (override to read a format of your own)."""
        read = self.config.read
        return make_reader(read)

    def build_unit(self) -> SampleUnit:
        """What each drawn step becomes: Transition, NStep, Sequence, optionally frame-stacked."""
        return build_unit(self.config.sample)

    def build_buffer(self, module_id: str) -> EpisodeReplayBuffer:
        """A fresh buffer for one module, as ``config.buffer`` describes."""
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
        """Input batch -> episodes, every row accounted for (the registered reader)."""
        return self.reader.read(batch, self.source)

    def validate(self, episodes: EpisodeBatch) -> EpisodeBatch:
        """Contract checks, then de-duplication within the batch and against earlier batches."""
        return self.deduplicator.dedupe(self.validator.validate(episodes))

    def postprocess_episodes(self, episodes: list[Episode]) -> list[Episode]:
        """Episode-level connectors (returns-to-go, advantages ...), before buffering."""
        if not len(self.connectors):
            return episodes
        return self.connectors.on_episodes(
            episodes, ConnectorContext(gamma=self.config.sample.gamma)
        )

    def postprocess_columns(self, columns: EpisodeColumns) -> EpisodeColumns | None:
        """The columnar twin of :meth:`postprocess_episodes`, for a batch the reader gave as
        :class:`~offline_prelearner.episodes.episode_columns.EpisodeColumns` (the rows reader
        does): the columns it returns go to the buffers as columns, routed by their module ids
        as :meth:`module_of` routes episodes, without an object per episode (several times
        faster on short episodes). None takes the episode path for this batch:
        ``postprocess_episodes``, ``module_of``, ``add_to_buffers``.

        The default returns the columns unchanged, or None when a connector works on episodes.
        A subclass that changes episodes (overrides ``postprocess_episodes``, ``module_of`` or
        ``add_to_buffers``) overrides this too: the same change made on the columns keeps the
        fast path (``examples/custom_prelearner.py`` adds a column), ``return None`` takes the
        slower episode path. :func:`offline_prelearner.testing.check_prelearner_columnar` (in
        ``check_prelearner`` and ``PreLearnerContract``) compares the two paths on yours.

        Args:
            columns: The batch's validated, de-duplicated episodes; never change them in place
                (return a new object, ``dataclasses.replace`` shares the arrays).

        Returns:
            The columns to buffer, or None for the episode path.
        """
        return None if len(self.connectors) else columns

    def module_of(self, episode: Episode) -> str:
        """The module an episode trains: its module_id, else the agent mapping, else default."""
        if episode.module_id is not None:
            return str(episode.module_id)
        if self._agent_to_module is not None and episode.agent_id is not None:
            return str(self._agent_to_module(episode.agent_id))
        return self.config.modules.default_module

    def add_to_buffers(self, episodes: list[Episode]) -> None:
        """Routes episodes to their module's buffer (created on first use)."""
        by_module: dict[str, list[Episode]] = {}
        for ep in episodes:
            by_module.setdefault(self.module_of(ep), []).append(ep)
        for module_id, eps in by_module.items():
            agents = [e.agent_id for e in eps]
            buf = self._buffer_for(module_id, agents)
            if module_id in self._agent_keyed:
                eps = with_ids(eps, agent_keys([e.id for e in eps], agents, always=True))
            buf.add(eps)
            self.counters["fragments_added"] += len(eps)

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

    def sample_all(self, episodes: list[Episode]) -> MultiAgentBatch:
        """Every valid transition (or sequence) of the complete episodes, once, in order.

        Not-done fragments wait (per episode id) until their episode ends, so no window is cut by
        a batch boundary; ``stats()["pending_fragments"]`` says how many are still open.
        """
        return self._sample_complete(self._complete_episodes(episodes))

    def sample_all_columns(self, columns: EpisodeColumns) -> MultiAgentBatch:
        """:meth:`sample_all` for a batch held as columns (what :meth:`postprocess_columns`
        returned): the same samples in the same order, without an object per episode (only the
        fragments of an episode cut across batches are kept as objects until it ends).

        A subclass that overrides ``sample_all`` but not ``postprocess_columns`` keeps its
        ``sample_all`` (see :meth:`__init_subclass__`).

        Args:
            columns: The batch's validated, de-duplicated episodes.

        Returns:
            Every valid transition (or sequence) of the episodes complete after this batch,
            per trained module.
        """
        complete = self._complete_columns(columns)
        if isinstance(complete, list):  # fragments that do not join as columns: objects
            return self._sample_complete(complete)
        out: dict[str, SampleBatch] = {}
        if len(complete):
            modules = self._modules_of(complete)
            for module_id in dict.fromkeys(modules):
                if not self._trains(module_id):
                    continue
                part = complete
                if module_id != modules[0] or modules.count(module_id) != len(modules):
                    part = complete.select(np.array([m == module_id for m in modules]))
                batch = sample_all_columns(part, self.build_unit(), seed=self.config.seed)
                if batch is not None:
                    out[module_id] = batch
        return MultiAgentBatch(out, env_steps=sum(len(b) for b in out.values()))

    def _sample_complete(self, complete: list[Episode]) -> MultiAgentBatch:
        """Every valid transition (or sequence) of complete episodes, per trained module."""
        by_module: dict[str, list[Episode]] = {}
        for ep in complete:
            by_module.setdefault(self.module_of(ep), []).append(ep)
        out: dict[str, SampleBatch] = {}
        for module_id, eps in by_module.items():
            if not self._trains(module_id):
                continue
            batch = sample_all_episodes(eps, self.build_unit(), seed=self.config.seed)
            if batch is not None:
                out[module_id] = batch
        return MultiAgentBatch(out, env_steps=sum(len(b) for b in out.values()))

    def run_connectors(self, batch: MultiAgentBatch) -> MultiAgentBatch:
        """Batch-level connectors, module by module."""
        if not len(self.connectors):
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

    def to_output(self, batch: MultiAgentBatch) -> Iterator[dict[str, np.ndarray]]:
        """One dict of numpy columns per module, with a ``module_id`` column (Arrow-friendly)."""
        for module_id, sb in batch.policy_batches.items():
            if len(sb):
                yield sb.to_rows(module_id)

    # ================================================================== the call
    def __call__(self, batch: Batch) -> Iterator[dict[str, np.ndarray]]:
        """One input batch -> zero or more output batches (one per trained module)."""
        episodes = self.validate(self.map_to_episodes(batch))
        self._count_episodes(episodes)
        cols = episodes.columns
        cols = None if cols is None else self.postprocess_columns(cols)
        if self.config.sample.sample_all:
            if cols is not None:
                result = self.sample_all_columns(cols)
            else:
                result = self.sample_all(self.postprocess_episodes(episodes.episodes))
        else:
            if cols is not None:
                self._add_columns(cols)
            else:
                self.add_to_buffers(self.postprocess_episodes(episodes.episodes))
            result = self.sample()
        result = self.run_connectors(result)
        self.counters["batches"] += 1
        self.counters["samples"] += sum(len(b) for b in result.policy_batches.values())
        yield from self.to_output(result)

    # ================================================================== feedback and stats
    def update_priorities(
        self, indices: np.ndarray, priorities: np.ndarray, module_id: str | None = None
    ) -> int:
        """Sends TD errors back to a prioritized buffer (same process only). Returns how many of
        the handles were still current (stale ones, evicted since sampling, are ignored)."""
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
            "pending_fragments": sum(len(v) for v in self._pending.values()),
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

    def _modules_of(self, cols: EpisodeColumns) -> list[str]:
        """Each episode's module, by the base ``module_of``'s rule: module id, else the agent
        mapping, else the default module."""
        default = self.config.modules.default_module
        fn = self._agent_to_module
        n = len(cols)
        if cols.modules.count(None) == n and (fn is None or cols.agents.count(None) == n):
            return [default] * n  # the common case, without a walk over the episodes
        return [
            str(m) if m is not None else str(fn(a)) if fn and a is not None else default
            for m, a in zip(cols.modules, cols.agents, strict=True)
        ]

    def _add_columns(self, cols: EpisodeColumns) -> None:
        """``add_to_buffers`` for episodes held as columns (the routing of the base
        ``module_of``: module id, else the agent mapping, else the default module)."""
        modules = self._modules_of(cols)
        for module_id in dict.fromkeys(modules):
            part = cols
            if module_id != modules[0] or modules.count(module_id) != len(modules):
                part = cols.select(np.array([m == module_id for m in modules]))
            buf = self._buffer_for(module_id, part.agents)
            if module_id in self._agent_keyed:
                part = replace(part, ids=agent_keys(part.ids, part.agents, always=True))
            buf.add_columns(part)
            self.counters["fragments_added"] += len(part)

    def _trains(self, module_id: str) -> bool:
        wanted = self.config.modules.modules_to_train
        return wanted is None or module_id in wanted

    def _complete_columns(self, cols: EpisodeColumns) -> EpisodeColumns | list[Episode]:
        """:meth:`_complete_episodes` on columns: the episodes complete after this batch, in the
        same order (a fragment that ends an open episode stands where it ended, joined with
        the rest), as columns; as objects where the joined fragments cannot share the batch's
        columns (other dtypes, infos). Only the fragments that open or end a pending episode
        become objects."""
        done = cols.done
        pending = self._pending
        special = set(np.flatnonzero(~done).tolist())
        if pending:
            keys = zip(cols.ids, cols.agents, strict=True)
            special.update(i for i, key in enumerate(keys) if key in pending)
        if not special:
            return cols
        joined: dict[int, Episode] = {}
        for i in sorted(special):  # few: an episode cut at each edge of the batch
            ep = cols.episode(i)
            key = (ep.id, ep.agent_id)
            pending.setdefault(key, []).append(ep)
            if ep.is_done:
                joined[i] = Episode.concat_fragments(pending.pop(key))
        order = np.flatnonzero(done)
        if not joined:
            return cols.select(order)
        at = np.fromiter(joined, np.int64, len(joined))
        try:
            tail = EpisodeColumns.from_episodes(
                list(joined.values()), split=cols.last_obs is not None
            )
            both = EpisodeColumns.concat([cols, tail])
        except (ValueError, KeyError, TypeError):
            return [joined[i] if i in joined else cols.episode(i) for i in order.tolist()]
        order[np.searchsorted(order, at)] = len(cols) + np.arange(len(at))
        return both.select(order)

    def _complete_episodes(self, episodes: list[Episode]) -> list[Episode]:
        done: list[Episode] = []
        for ep in episodes:
            key = (ep.id, ep.agent_id)
            if key in self._pending or not ep.is_done:
                frags = self._pending.setdefault(key, [])
                frags.append(ep)
                if ep.is_done:
                    done.append(Episode.concat_fragments(self._pending.pop(key)))
            else:
                done.append(ep)
        return done


def _episode_path(self: OfflinePreLearner, columns: EpisodeColumns) -> None:
    """The columnar hook of a subclass that changes episodes only: take the episode path."""
    return None
