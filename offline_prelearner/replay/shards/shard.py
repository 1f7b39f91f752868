"""One replay shard: :class:`ReplayShard`, the plain class each shard actor of
:class:`~.sharded_buffer.ShardedReplayBuffer` runs (usable without Ray, in a test or a notebook),
and the records it answers with (:class:`ShardInfo`, :class:`ShardSample`).

A shard owns one buffer built from the config as a prelearner's is
(:func:`~offline_prelearner.replay.build.build_buffer`), adds the episodes routed to it
(:mod:`.routing`), draws its part of each batch with local handles, applies priority updates meant
for it, and reports its sampling mass with every reply.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ...config import PreLearnerConfig
from ...episodes.episode import Episode
from ...episodes.episode_columns import EpisodeColumns
from ...errors import ConfigError, DataError, EmptyBufferError, Where
from .. import checkpoint
from ..build import build_buffer
from ..replay_buffer import INDICES, EpisodeReplayBuffer, agent_keys, as_columns, real_ids
from ..samplers.prioritized import Prioritized

__all__ = ["ReplayShard", "ShardInfo", "ShardSample"]


@dataclass(frozen=True)
class ShardInfo:
    """What a shard reports with every reply (the client keeps the newest by ``seq``)."""

    shard: int
    seq: int  # calls served so far: orders replies from one shard
    mass: float  # sampling mass: valid starts (uniform) or sum of p ** alpha (prioritized)
    min_mass: float  # mass of the least likely valid start (inf when none)
    timesteps_added: int
    samples_drawn: int


@dataclass
class ShardSample:
    """One shard's part of a batch: columns (local ``indices``), each row's mass, the info."""

    columns: dict[str, np.ndarray]
    row_mass: np.ndarray
    info: ShardInfo

    def __len__(self) -> int:
        return len(self.row_mass)


class ReplayShard:
    """One replay buffer behind an actor; plain Python, testable without Ray.

    Args:
        config: The buffer, sample and seed sections are used; the buffer is built exactly as
            :func:`~offline_prelearner.replay.build.build_buffer` builds it (as
            ``OfflinePreLearner.build_buffer`` does), with this shard's own seed.
        shard: This shard's number (seeds its generator; named in replies and checkpoints).
        module_id: The module whose buffer this is (default ``config.modules.default_module``).
    """

    def __init__(
        self,
        config: PreLearnerConfig | Mapping[str, Any] | None = None,
        shard: int = 0,
        module_id: str | None = None,
    ) -> None:
        cfg = PreLearnerConfig.coerce(config)
        if cfg.buffer.kind == "mixin":
            raise ConfigError(
                "buffer.kind='mixin' cannot be sharded (its batches hold all new data of one "
                "buffer); use 'uniform' or 'prioritized'"
            )
        if cfg.seed is not None:
            seed = int(np.random.SeedSequence([cfg.seed, shard]).generate_state(1)[0])
            cfg = cfg.with_updates({"seed": seed})
        self.shard = shard
        self.module_id = module_id or cfg.modules.default_module
        self.buffer: EpisodeReplayBuffer = build_buffer(cfg, self.module_id)
        self.seq = 0
        #: Whether the buffer keys episodes by (episode id, agent id): decided by the first
        #: episodes added (None until then), as ``OfflinePreLearner``'s buffers decide it.
        self.agent_keyed: bool | None = None

    def __repr__(self) -> str:
        return f"ReplayShard({self.shard}, {self.buffer!r})"

    @property
    def prioritized(self) -> bool:
        """Whether the shard's buffer samples by priority."""
        return isinstance(self.buffer.sampler, Prioritized)

    def info(self) -> ShardInfo:
        """Counts this call and reports the shard's mass and counters."""
        self.seq += 1
        buf, mass, low = self.buffer, 0.0, math.inf
        total = buf.valid_starts().total
        sampler = buf.sampler
        if isinstance(sampler, Prioritized):
            tree, mins = sampler.sum_tree, sampler.min_tree
            if total and tree is not None and mins is not None:
                mass, low = tree.total(), mins.min()
        elif total:
            mass, low = float(total), 1.0
        st = buf.storage.counters
        return ShardInfo(self.shard, self.seq, mass, low, st["timesteps_added"], buf.samples_drawn)

    def add(self, episodes: Iterable[Episode | EpisodeColumns]) -> ShardInfo:
        """Stores episodes -- :class:`EpisodeColumns` and/or Episode objects -- in order.

        Args:
            episodes: Tables or episodes; objects are joined into tables (see
                :func:`~..replay_buffer.as_columns`).

        Returns:
            The shard's info after the add.

        Raises:
            DataError: episodes with agent ids after episodes without (``agent_keys``), or any
                error of the buffer's add (a fragment that contradicts what it holds).
        """
        parts: list[EpisodeColumns] = []
        run: list[Episode] = []
        for item in episodes:
            if isinstance(item, EpisodeColumns):
                parts += as_columns(run)
                parts.append(item)
                run = []
            else:
                run.append(item)
        parts += as_columns(run)
        for part in parts:
            if self._keyed(part.agents):
                part = replace(part, ids=agent_keys(part.ids, part.agents, always=True))
            self.buffer.add(part)
        return self.info()

    def _keyed(self, agents: list[Any]) -> bool:
        """Whether episodes of ``agents`` go in under agent keys (two agents of one episode id
        are two episodes); the first episodes decide for the shard."""
        with_agents = agents.count(None) != len(agents)
        if self.agent_keyed is None and agents:
            self.agent_keyed = with_agents
        if with_agents and not self.agent_keyed:
            raise DataError(
                f"shard {self.shard}, module {self.module_id!r}: episodes with agent ids after "
                "episodes without one; its buffer keys episodes by id alone, so two agents of "
                "one episode id would collide (give every episode an agent id, or none)",
                reason="agent_keys",
            )
        return bool(self.agent_keyed)

    def sample(
        self,
        n: int,
        handles: npt.ArrayLike | None = None,
        priorities: npt.ArrayLike | None = None,
    ) -> ShardSample:
        """``n`` rows (none when ``n`` is 0 or nothing is sampleable), with each row's mass;
        with ``handles`` and ``priorities``, :meth:`update_priorities` first (one call for a
        learner's update and its next draw).

        Args:
            n: Rows to draw (0 draws nothing and just reports).
            handles: Local handles of an earlier sample to update first, or None.
            priorities: One TD error or priority per handle (with ``handles``).

        Returns:
            The rows (local ``indices``; episode ids without agent keys), each row's mass
            (``p ** alpha``, or 1 for a uniform buffer) and the shard's info.
        """
        if handles is not None:
            self.update_priorities(handles, np.asarray(priorities))
        rows: dict[str, np.ndarray] = {}
        row_mass = np.zeros(0)
        if n > 0 and self.buffer.valid_starts().total:
            try:
                batch = self.buffer.sample(n)
                rows = (real_ids(batch) if self.agent_keyed else batch).to_dict()
            except EmptyBufferError:  # e.g. a custom sampler with nothing to draw
                rows = {}
            if rows:
                row_mass = self._row_mass(rows[INDICES])
        return ShardSample(rows, row_mass, self.info())

    def _row_mass(self, handles: np.ndarray) -> np.ndarray:
        sampler = self.buffer.sampler
        if not isinstance(sampler, Prioritized) or sampler.sum_tree is None:
            return np.ones(len(handles))
        slots, _ = self.buffer.storage.resolve(handles)
        return sampler.sum_tree.get(slots)

    def update_priorities(self, handles: npt.ArrayLike, priorities: npt.ArrayLike) -> int:
        """Sets priorities of sampled rows (this shard's handles); returns how many were still
        current. Stale handles are ignored and counted (``stats()["priority_updates_stale"]``).

        Args:
            handles: This shard's local handles (decoded from the global ones).
            priorities: One TD error or priority per handle; the priority is ``|x| + eps``.

        Returns:
            How many handles were current and applied.

        Raises:
            ConfigError: the shard's buffer is not prioritized.
        """
        sampler = self.buffer.sampler
        if not isinstance(sampler, Prioritized):
            raise ConfigError(
                f"shard {self.shard} has a {type(sampler).__name__} sampler; "
                "update_priorities needs buffer.kind='prioritized'"
            )
        return sampler.update_priorities(self.buffer.storage, handles, priorities)

    def feedback(self, handles: npt.ArrayLike, priorities: npt.ArrayLike) -> ShardInfo:
        """:meth:`update_priorities`, answered with the shard's info (what the client sends).

        Args:
            handles: This shard's local handles.
            priorities: One TD error or priority per handle.

        Returns:
            The shard's info after the update.
        """
        self.update_priorities(handles, priorities)
        return self.info()

    def stats(self) -> dict[str, Any]:
        """The buffer's counters plus the shard number, mass and priority-update counters."""
        out: dict[str, Any] = dict(self.buffer.stats())
        info = self.info()
        out.update(shard=self.shard, mass=info.mass)
        sampler = self.buffer.sampler
        if isinstance(sampler, Prioritized):
            out["priority_updates"] = sampler.updates_applied
            out["priority_updates_stale"] = sampler.updates_stale
        return out

    def save(self, path: str | Path, save_id: str | None = None) -> Path | str:
        """Writes the buffer's checkpoint (see :mod:`offline_prelearner.replay.checkpoint`), tagged
        with shard/save id.

        Args:
            path: Directory (or object-store URI) of this shard's checkpoint.
            save_id: The client's id of this save, so that :meth:`load` can refuse a shard
                checkpoint left by another (interrupted) save; None when saved alone.

        Returns:
            The path written.
        """
        state = self.buffer.get_state()
        tag = {"shard": self.shard, "save_id": save_id, "agent_keyed": self.agent_keyed}
        meta = {**state["meta"], "shard": tag}
        return checkpoint.write(path, meta, state["arrays"])

    def load(self, path: str | Path, save_id: str | None = None) -> ShardInfo:
        """Restores :meth:`save` output; with ``save_id``, only the checkpoint of that save.

        Args:
            path: Directory (or object-store URI) :meth:`save` wrote.
            save_id: The save this checkpoint must belong to, or None to take any.

        Returns:
            The shard's info after the restore.

        Raises:
            DataError: the checkpoint belongs to another save (``foreign_shard_checkpoint``),
                or it is corrupt (the buffer keeps its state).
        """
        meta, arrays = checkpoint.read(path)
        tag = meta.get("shard") or {}
        if save_id is not None and tag.get("save_id") != save_id:
            raise DataError(
                f"shard checkpoint {str(path)!r} belongs to save {tag.get('save_id')!r}, not "
                f"{save_id!r} (an interrupted save?)",
                Where(file=str(path)),
                reason="foreign_shard_checkpoint",
            )
        buf = self.buffer
        checkpoint.restore(path, buf.get_state, buf.set_state, state=(meta, arrays))
        # A checkpoint from before agent keys holds episodes keyed by id alone (if any).
        self.agent_keyed = (
            tag["agent_keyed"] if "agent_keyed" in tag else (False if len(buf) else None)
        )
        return self.info()
