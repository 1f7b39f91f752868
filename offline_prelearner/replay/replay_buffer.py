"""EpisodeReplayBuffer: ring storage + a sampler (which steps) + a unit (what each becomes).

::

    buf = EpisodeReplayBuffer(1_000_000, unit=NStep(3, 0.99), seed=0)
    buf.add(episodes)                      # EpisodeColumns, or Episode objects (whole or fragments)
    batch = buf.sample(256)                # SampleBatch: obs, actions, rewards, new_obs, ...
    buf.save("ckpt/")                      # atomic, no pickle; buf.load("ckpt/") resumes exactly

Every sample carries ``weights`` (the sampler's importance weights; ones for uniform) and
``indices`` (opaque handles, see :mod:`offline_prelearner.replay.samplers.base`) for priority
updates.
All randomness comes from one ``numpy`` generator seeded by ``seed``, so two buffers with the same
seed fed the same episodes draw the same samples, and a checkpoint resumes the same stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..config import MAX_STEPS, MAX_TRAIN_BATCH, check_int
from ..episodes import columns as C
from ..episodes import observations as O
from ..episodes.episode import Episode
from ..episodes.episode_columns import EpisodeColumns
from ..errors import ConfigError, DataError, EmptyBufferError, Where
from . import checkpoint
from .agent_index import agent_key, decode, encode
from .batch import SampleBatch
from .rate_limit import SampleToInsertRatio
from .reservoir import Reservoir
from .samplers.base import Sampler, ValidStarts, ranges
from .samplers.in_order import InOrder
from .samplers.prioritized import Prioritized
from .samplers.uniform import Uniform
from .storage.placement import same_layout
from .storage.ring import Change, EpisodeStorage, Placements
from .storage.table import handles_of, normalize_id
from .units.base import AllSteps, ExpandsAll, SampleUnit, StepTable, ones
from .units.transition import Transition

__all__ = [
    "INDICES",
    "EpisodeReplayBuffer",
    "agent_keys",
    "as_columns",
    "real_ids",
    "sample_all_columns",
]

#: Observation bytes per table when :func:`as_columns` joins episode objects.
_TABLE_BYTES = 8 << 20

#: The column of a sample holding handles for ``update_priorities``.
INDICES = "indices"


class EpisodeReplayBuffer:
    """A replay buffer over whole episodes, sampling steps; see the module docstring.

    Args:
        capacity: Slots of ring storage: timesteps plus one final observation per episode.
        sampler: Which steps are drawn (default
            :class:`~offline_prelearner.replay.samplers.Uniform`).
        unit: What each step expands into (default
            :class:`~offline_prelearner.replay.samplers.Transition`).
        seed: Seed of the buffer's random generator (``None``: fresh entropy).
        learning_starts: ``sample`` raises :class:`EmptyBufferError` until this many timesteps
            have been added.
        eviction: ``None`` for FIFO (the oldest episodes leave first) or a
            :class:`~offline_prelearner.replay.reservoir.Reservoir` (a uniform sample of
            everything ever added stays).
        rate_limit: A :class:`~offline_prelearner.replay.rate_limit.SampleToInsertRatio`:
            ``sample`` raises ``RateLimitExceeded`` (an :class:`EmptyBufferError`) rather than
            draw more rows per inserted timestep than it allows.
    """

    def __init__(
        self,
        capacity: int,
        sampler: Sampler | None = None,
        unit: SampleUnit | None = None,
        *,
        seed: int | None = None,
        learning_starts: int = 0,
        eviction: Reservoir | None = None,
        rate_limit: SampleToInsertRatio | None = None,
    ) -> None:
        check_int("learning_starts", learning_starts, 0, MAX_STEPS)  # buffer.learning_starts
        if eviction is not None and not isinstance(eviction, Reservoir):
            raise ConfigError(
                f"eviction must be None (FIFO) or a Reservoir, found {type(eviction).__name__}"
            )
        if rate_limit is not None and not isinstance(rate_limit, SampleToInsertRatio):
            raise ConfigError(
                f"rate_limit must be None or a SampleToInsertRatio, found "
                f"{type(rate_limit).__name__}"
            )
        self.eviction = eviction
        self.rate_limit = rate_limit
        self.rate_limited = 0  # sample calls the rate limit refused
        self.storage: EpisodeStorage = (
            EpisodeStorage(capacity) if eviction is None else eviction.make_storage(capacity)
        )
        self.sampler: Sampler = sampler if sampler is not None else Uniform()
        self.unit: SampleUnit = unit if unit is not None else Transition()
        for name, obj, proto in (
            ("sampler", self.sampler, Sampler),
            ("unit", self.unit, SampleUnit),
        ):
            if not isinstance(obj, proto):
                raise ConfigError(
                    f"{name} must implement the {proto.__name__} protocol, found "
                    f"{type(obj).__name__}"
                )
        self.learning_starts = learning_starts
        # The unit's per-slot cache (NStep with a fixed n: its returns), fed in _notify.
        self._step_table: StepTable | None = self.unit.step_table()
        self.rng = np.random.default_rng(seed)
        self.samples_drawn = 0
        self._valid: ValidStarts | None = None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(capacity={self.capacity}, sampler={self.sampler!r}, "
            f"unit={self.unit!r}, episodes={self.storage.num_episodes}, "
            f"timesteps={self.storage.num_timesteps})"
        )

    @property
    def capacity(self) -> int:
        """Slots of storage: timesteps plus one final observation per episode."""
        return self.storage.capacity

    def __len__(self) -> int:
        """Timesteps held."""
        return self.storage.num_timesteps

    # ------------------------------------------------------------------ adding
    def add(self, episodes: EpisodeColumns | Episode | Iterable[Episode]) -> None:
        """Stores episodes (or fragments of episodes already held), evicting the oldest.

        Episodes travel as :class:`~offline_prelearner.episodes.episode_columns.EpisodeColumns`
        (what a reader gives and the prelearner passes); Episode objects (built by hand) are
        joined into columns here, once, a table per run of one column layout, and take the
        same path. Episodes are added in order; one that contradicts what is held (see
        :meth:`EpisodeStorage.add_episode`) raises after the ones before it were added.

        Args:
            episodes: The episodes, in order.

        Raises:
            TypeError: an item is not an Episode (after the ones before it were added).
            EpisodeValidationError: an episode contradicts what is held.
        """
        items: list[Episode] = []
        stop: BaseException | None = None
        if isinstance(episodes, EpisodeColumns):
            parts: Iterable[EpisodeColumns] = [episodes]
        else:
            try:
                for ep in [episodes] if isinstance(episodes, Episode) else episodes:
                    if not isinstance(ep, Episode):
                        raise TypeError(
                            f"add() takes EpisodeColumns or Episode objects, found "
                            f"{type(ep).__name__}"
                        )
                    items.append(ep)
            except BaseException as e:  # add the ones before it, then raise
                stop = e
            parts = as_columns(items)
        changes: list[Change | Placements] = []
        try:
            for part in parts:
                self.storage.add_columns(part, changes)
        finally:
            self._notify(changes)
        if stop is not None:
            raise stop

    def _notify(self, changes: list[Change | Placements]) -> None:
        """Tells the sampler which valid starts went away and which arrived (net of this add).

        Every removed record is evicted first, then every placement still current is added
        beyond what the sampler already knew of it. A ``"relocated"`` record without a removal
        (a compaction renumbered the placement but left its slots) knows what the first change
        of that placement in this batch knew: nothing, if it was placed in this batch.
        ``changes`` may also hold :class:`Placements` (runs of new episodes, from ``add``); an
        override that wants :class:`Change` records only passes them through :func:`expand_changes`.
        """
        if len(changes) == 1 and isinstance(changes[0], Placements):
            self._notify_placed(changes[0])
            return
        rs: list[int] = []
        rl: list[int] = []
        rd: list[bool] = []
        serial: list[int] = []
        start: list[int] = []
        length: list[int] = []
        done: list[bool] = []
        plen: list[int] = []
        pdone: list[bool] = []
        chain: dict[Any, tuple[int, bool]] = {}  # key -> what the sampler knew of its placement
        for ch in changes:
            if isinstance(ch, Placements):
                rs += ch.removed_start.tolist()
                rl += ch.removed_length.tolist()
                rd += ch.removed_done.tolist()
                serial += ch.serial.tolist()
                start += ch.start.tolist()
                length += ch.length.tolist()
                done += ch.done.tolist()
                plen += [-1] * len(ch.keys)
                pdone += [False] * len(ch.keys)
                chain.update(dict.fromkeys(ch.keys, (-1, False)))
                continue
            rs += ch.removed_start
            rl += ch.removed_length
            rd += ch.removed_done
            if ch.serial < 0:
                continue
            if ch.kind in ("appended", "flagged"):
                chain.setdefault(ch.key, (ch.prev_length, ch.prev_done))
                known = (ch.prev_length, ch.prev_done)
            elif ch.kind == "relocated" and not ch.removed_start:
                known = chain.setdefault(ch.key, (ch.length, ch.done))
            else:  # a fresh placement: new, moved, relocated elsewhere
                known = chain[ch.key] = (-1, False)
            serial.append(ch.serial)
            start.append(ch.start)
            length.append(ch.length)
            done.append(ch.done)
            plen.append(known[0])
            pdone.append(known[1])
        unit = self.unit
        if rs:
            count = unit.valid_starts(np.array(rl, np.int64), np.array(rd, bool))
            self.sampler.on_evict(self.storage, ranges(np.array(rs, np.int64), count))
        if serial:
            keep = self.storage.is_current(np.array(serial, np.int64))
            prev = np.array(plen, np.int64)
            new = unit.valid_starts(np.array(length, np.int64), np.array(done, bool))
            old = np.where(
                prev < 0,
                0,
                unit.valid_starts(np.maximum(prev, 0), np.array(pdone, bool)),
            )
            start_at = np.array(start, np.int64)
            first = start_at + old
            slots = ranges(first[keep], (new - old)[keep])
            if len(slots):
                self.sampler.on_add(self.storage, slots)
            table = self._step_table
            if table is not None:  # the new starts and the tail before them (see the table)
                redo = np.maximum(table.refresh_from(first), start_at)[keep]
                table.on_add(self.storage, ranges(redo, (start_at + new)[keep] - redo))

    def _notify_placed(self, ch: Placements) -> None:
        """:meth:`_notify` for one run of new episodes (the usual add): what it overwrote is
        evicted, and all of it is new and current (nothing later in the batch moved it)."""
        unit, st = self.unit, self.storage
        if len(ch.removed_start):
            count = unit.valid_starts(ch.removed_length, ch.removed_done)
            self.sampler.on_evict(st, ranges(ch.removed_start, count))
        slots = ranges(ch.start, unit.valid_starts(ch.length, ch.done))
        if len(slots):
            self.sampler.on_add(st, slots)
            if self._step_table is not None:
                self._step_table.on_add(st, slots)

    # ------------------------------------------------------------------ sampling
    def valid_starts(self) -> ValidStarts:
        """The valid start slots at the storage's current version (cached)."""
        st = self.storage
        valid = self._valid
        if valid is None or valid.version != st.version:
            count = self.unit.valid_starts(st.lengths, st.terminated | st.truncated)
            count = np.where(st.alive, np.asarray(count, np.int64), 0)
            valid = ValidStarts(first=st.starts.copy(), count=count, version=st.version)
            self._valid = valid
        return valid

    def sample(self, batch_size: int) -> SampleBatch:
        """``batch_size`` samples (with replacement) from the sampler, expanded by the unit.

        Raises :class:`EmptyBufferError` before ``learning_starts`` timesteps were added or while
        nothing is sampleable (e.g. only unfinished episodes shorter than an n-step window).

        Args:
            batch_size: Rows to draw, an integer (numpy's too) from 1 to 4,194,304.

        Returns:
            The unit's columns for ``batch_size`` rows, plus ``weights`` (float32 importance
            weights; all ones for a sampler without them) and ``indices`` (int64 handles for
            :meth:`~.prioritized.PrioritizedEpisodeReplayBuffer.update_priorities`).

        Raises:
            EmptyBufferError: Before ``learning_starts``, with nothing sampleable, or when the
                rate limit refuses the rows (:class:`RateLimitExceeded`).
            ConfigError: ``batch_size`` is not an integer in range.
        """
        batch_size = _batch_size(batch_size)
        self._check_learning_starts()
        valid = self.valid_starts()
        if valid.total == 0:
            raise self._nothing_to_sample()
        self._check_rate(batch_size)
        slots, info = self.sampler.sample(self.storage, batch_size, self.rng, valid)
        rows = info.get("rows")
        if rows is None:
            rows = self.storage.rows_of(slots)
        return self._emit(slots, rows, info.get("weights"))

    def _check_learning_starts(self) -> None:
        added = self.storage.counters["timesteps_added"]
        if added < self.learning_starts:
            raise EmptyBufferError(
                f"{added} timesteps added, sampling starts after "
                f"learning_starts={self.learning_starts}"
            )

    def _nothing_to_sample(self) -> EmptyBufferError:
        return EmptyBufferError(
            f"nothing to sample: {self.storage.num_episodes} episodes held, none with a "
            f"complete window for {self.unit!r}"
        )

    def _check_rate(self, rows: int) -> None:
        """Raises ``RateLimitExceeded`` if drawing ``rows`` more rows breaks the rate limit."""
        if self.rate_limit is None:
            return
        try:
            self.rate_limit.check(
                rows,
                self.samples_drawn,
                self.storage.counters["timesteps_added"],
                self.learning_starts,
            )
        except EmptyBufferError:
            self.rate_limited += 1
            raise

    def samples_allowed(self) -> int | None:
        """Rows the rate limit still allows (``None`` without a rate limit)."""
        if self.rate_limit is None:
            return None
        return self.rate_limit.allowed(
            self.samples_drawn, self.storage.counters["timesteps_added"], self.learning_starts
        )

    def _emit(self, slots: np.ndarray, rows: np.ndarray, weights: np.ndarray | None) -> SampleBatch:
        """Expands drawn start slots (and their table rows) into a batch with ``weights`` and
        ``indices``, and counts them as drawn."""
        if self._step_table is None:
            batch = self.unit.expand(slots, rows, self.storage, self.rng)
        else:
            batch = self._step_table.expand(slots, rows, self.storage)
        batch.set_trusted(
            C.WEIGHTS,
            ones(len(slots), np.float32) if weights is None else np.asarray(weights, np.float32),
        )
        batch.set_trusted(INDICES, self.storage.handles(slots, rows))
        self.samples_drawn += len(slots)
        return batch

    # ------------------------------------------------------------------ stats and state
    def stats(self) -> dict[str, int]:
        """Counters: timesteps/episodes added, evicted and held, samples drawn, duplicates."""
        st = self.storage
        out = dict(st.counters)
        out["timesteps_held"] = st.num_timesteps
        out["episodes_held"] = st.num_episodes
        out["samples_drawn"] = self.samples_drawn
        out["sampleable"] = self.valid_starts().total
        if self.rate_limit is not None:
            out["rate_limited"] = self.rate_limited
        return out

    def get_state(self) -> dict[str, Any]:
        """Everything needed to resume: ``{"meta": JSON-able dict, "arrays": {name: ndarray}}``.

        Arrays are plain numpy (no object dtype), so :meth:`save` writes them without pickle.
        """
        meta, arrays = self.storage.get_state()
        for k, v in self.sampler.state().items():
            arrays["sampler/" + k] = np.asarray(v)
        return {
            "meta": {
                "buffer": type(self).__name__,
                "storage": meta,
                "unit": repr(self.unit),
                "sampler": repr(self.sampler),
                "samples_drawn": self.samples_drawn,
                "learning_starts": self.learning_starts,
                "rng": self.rng.bit_generator.state,
                "eviction": None if self.eviction is None else repr(self.eviction),
                "rate_limited": self.rate_limited,
            },
            "arrays": arrays,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores :meth:`get_state` output into this buffer, which must have the same unit and
        sampler configuration and capacity (a :class:`ConfigError` says which differs).

        Args:
            state: ``{"meta": JSON-able dict, "arrays": {name: ndarray}}`` as :meth:`get_state`
                returns it (storage arrays, and the sampler's under ``sampler/``).

        Raises:
            ConfigError: The state was saved with another unit, sampler, eviction, generator
                type or capacity.
            DataError: A counter, the generator state or the storage state is malformed or
                breaks the ring's invariants.
        """
        meta, arrays = state["meta"], state["arrays"]
        for name in ("unit", "sampler"):
            if meta[name] != repr(getattr(self, name)):
                raise ConfigError(
                    f"state was saved with {name} {meta[name]}, this buffer has "
                    f"{getattr(self, name)!r}"
                )
        mine = None if self.eviction is None else repr(self.eviction)
        if meta.get("eviction") != mine:
            raise ConfigError(
                f"state was saved with eviction {meta.get('eviction') or 'FIFO'}, this buffer "
                f"has {mine or 'FIFO'}"
            )
        rng_state = meta["rng"]
        if not isinstance(rng_state, dict):
            raise DataError(
                f"rng must be a generator state, found {rng_state!r}", Where(column="rng")
            )
        if rng_state.get("bit_generator") != type(self.rng.bit_generator).__name__:
            raise ConfigError(
                f"state has a {rng_state.get('bit_generator')} generator, this "
                f"buffer uses {type(self.rng.bit_generator).__name__}"
            )
        counts = {n: meta.get(n, 0) for n in ("samples_drawn", "learning_starts", "rate_limited")}
        for name, v in counts.items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise DataError(f"{name} must be an integer >= 0, found {v!r}", Where(column=name))
        if not isinstance(meta.get("storage"), dict):
            raise DataError("storage section is missing", Where(column="storage"))
        self.storage.set_state(
            meta["storage"], {k: v for k, v in arrays.items() if not k.startswith("sampler/")}
        )
        self.sampler.set_state({k[8:]: v for k, v in arrays.items() if k.startswith("sampler/")})
        try:
            self.rng.bit_generator.state = rng_state
        except (TypeError, ValueError, KeyError) as e:
            raise DataError(f"rng state is malformed ({e})", Where(column="rng")) from None
        self.samples_drawn = counts["samples_drawn"]
        self.learning_starts = counts["learning_starts"]
        self.rate_limited = counts["rate_limited"]
        self._valid = None
        if isinstance(self.sampler, Prioritized):
            self.sampler.check_restored(self.storage.capacity, self.valid_starts().slots())
        if self._step_table is not None:
            self._step_table.rebuild(self.storage, self.valid_starts().slots())

    def save(self, path: str | Path) -> Path | str:
        """Writes a checkpoint directory atomically (see :mod:`.checkpoint`); returns its path.

        Args:
            path: A local directory (created if missing) or an object-store URI; an existing
                directory must be a checkpoint, which this save replaces.

        Returns:
            The checkpoint's path (a :class:`~pathlib.Path` locally, the URI on a store).

        Raises:
            ConfigError: ``path`` exists and is not a checkpoint directory.
        """
        state = self.get_state()
        return checkpoint.write(path, state["meta"], state["arrays"])

    def load(self, path: str | Path) -> None:
        """Restores a checkpoint written by :meth:`save`, verifying every file's checksum and
        every invariant of the ring (a :class:`DataError` names the manifest and the field);
        a failed load leaves the buffer as it was.

        Args:
            path: A checkpoint directory or URI written by :meth:`save`.

        Raises:
            DataError: A file fails its checksum or the state breaks an invariant.
            ConfigError: The checkpoint is of another buffer configuration.
            DecodeError: The checkpoint cannot be read.
        """
        checkpoint.restore(path, self.get_state, self.set_state)


def as_columns(episodes: Sequence[Episode]) -> Iterator[EpisodeColumns]:
    """Episode objects as the buffer takes them: each run of consecutive episodes of one column
    layout joined into :class:`EpisodeColumns`, in order, a table per ~8 MiB of observations
    (a copy the size of a cache, reused, where one table of a whole pixel run would fault in
    fresh pages). Composite observations become the table's record column, as readers build
    them; infos, which no storage keeps, are left behind.

    Args:
        episodes: The episodes, in order.

    Yields:
        Tables, in the order of ``episodes``.
    """
    i, n = 0, len(episodes)
    while i < n:
        ep = episodes[i]
        run = episodes[i : i + same_layout(episodes[i:])]
        row = sum(leaf[:1].nbytes for leaf in O.leaves(ep.observations).values())
        limit = max(1, _TABLE_BYTES // max(1, row))  # observation rows per table
        ends = np.cumsum(np.fromiter((len(e.actions) + 1 for e in run), np.int64, len(run)))
        lo = 0
        while lo < len(run):
            base = int(ends[lo - 1]) if lo else 0
            hi = max(lo + 1, int(np.searchsorted(ends, base + limit, side="right")))
            part = run[lo:hi]
            if any(e.infos is not None for e in part):
                part = [_without_infos(e) for e in part]
            yield EpisodeColumns.from_episodes(list(part))
            lo = hi
        i += len(run)


def _without_infos(ep: Episode) -> Episode:
    return Episode._trusted(
        ep.id,
        ep.observations,
        ep.actions,
        ep.rewards,
        ep.terminated,
        ep.truncated,
        ep.agent_id,
        ep.module_id,
        ep.t_started,
        ep.extras,
    )


def sample_all_columns(
    columns: EpisodeColumns, unit: SampleUnit, *, seed: int | None = None
) -> SampleBatch | None:
    """Every valid transition (or sequence) of ``columns``' episodes, all of them done, once, in
    table order: exactly what a fresh buffer holding just them gives for
    ``sample(valid_starts().total)`` under :class:`~.samplers.in_order.InOrder` (the
    ``sample_all`` rule), ``weights`` and ``indices`` included.

    A unit that expands whole episodes from their columns (:class:`~.units.base.ExpandsAll`:
    :class:`~.units.transition.Transition`, :class:`~.units.n_step.NStep` with an int ``n``)
    does so, without the ring's copy of every column; any other unit, episodes whose ids
    repeat, or composite observations (a ring column per leaf) go through such a buffer (which
    raises what it would raise).

    Args:
        columns: The episodes, every one done.
        unit: What each step becomes.
        seed: The buffer's seed (for a unit that draws per sample).

    Returns:
        The batch, or None when nothing is sampleable (no steps).
    """
    ids = columns.ids
    if not _normal_ids(ids):
        ids = [normalize_id(i) for i in ids]
    keys = agent_keys(ids, columns.agents)
    plain = isinstance(columns.obs, np.ndarray) and columns.obs.dtype.names is None
    if plain and isinstance(unit, ExpandsAll) and len(set(keys)) == len(keys):
        steps = AllSteps(columns, ids)
        if not len(steps):
            return None
        _batch_size(len(steps))
        batch = unit.expand_all(steps)
        if batch is not None:
            batch.set_trusted(C.WEIGHTS, ones(len(steps), np.float32))
            batch.set_trusted(INDICES, handles_of(steps.episode.copy(), steps.slots))
            return batch
    steps_held = int(columns.length.sum()) + len(columns)
    buf = EpisodeReplayBuffer(steps_held + 1, InOrder(), unit, seed=seed)
    buf.add(columns if keys is ids else replace(columns, ids=keys))
    return _sample_all_held(buf, keyed=keys is not ids)


def _sample_all_held(buf: EpisodeReplayBuffer, *, keyed: bool) -> SampleBatch | None:
    """Everything an :class:`~.samplers.in_order.InOrder` buffer holds, once (None: nothing
    sampleable), with the episodes' own ids back where :func:`agent_keys` keyed them apart."""
    total = buf.valid_starts().total
    batch = buf.sample(total) if total else None
    return real_ids(batch) if batch is not None and keyed else batch


def agent_keys(ids: list[Any], agents: list[Any], *, always: bool = False) -> list[Any]:
    """The keys episodes ``ids`` of ``agents`` take in a buffer: ``ids`` itself (the same list)
    when no episode has an agent id, else :func:`~.agent_index.encode` of each ``(episode id,
    agent id)``, so that two agents of one episode id sharing a module are two episodes (keyed
    by the id alone, the second agent's steps would be taken as a repeat or a continuation of
    the first's: dropped as a duplicate, or refused as an overlap).

    Args:
        ids: Episode ids.
        agents: Their agent ids (None where there is none), as long as ``ids``.
        always: Encode even when no episode has an agent id (a buffer keyed by agent).

    Returns:
        ``ids``, or a new list of string keys.
    """
    if not always and agents.count(None) == len(agents):
        return ids
    return [encode(normalize_id(i), agent_key(a)) for i, a in zip(ids, agents, strict=True)]


def real_ids(batch: SampleBatch) -> SampleBatch:
    """``batch`` with the episode ids its agent keys (:func:`agent_keys`) stand for in its
    ``eps_id`` column: decoded once per distinct key, not per row.

    Args:
        batch: A sample of a buffer whose episodes are keyed by :func:`agent_keys`.

    Returns:
        ``batch``, changed in place.
    """
    if C.EPS_ID not in batch:
        return batch
    keys = np.asarray(batch[C.EPS_ID])
    uniq, inv = np.unique(keys, return_inverse=True)
    real = np.empty(len(uniq), object)
    real[:] = [decode(k)[0] for k in uniq.tolist()]
    batch.set_trusted(C.EPS_ID, real.take(inv.reshape(-1)))
    return batch


def _normal_ids(ids: list[Any]) -> bool:
    """Whether every id is already as the storage keeps it: all ``str`` or all ``int`` (exact
    types, so no bool), as the rows reader gives them; one pass in C, no call per id."""
    kinds = set(map(type, ids))
    return kinds <= {str} or kinds <= {int}


def _batch_size(batch_size: object) -> int:
    """``sample.train_batch_size``'s validator (numpy's ints too): at most 4,194,304 samples."""
    if isinstance(batch_size, np.integer):
        batch_size = int(batch_size)
    checked: int = check_int("batch_size", batch_size, 1, MAX_TRAIN_BATCH)
    return checked


def expand_changes(changes: list[Change | Placements]) -> list[Change]:
    """``changes`` with every :class:`Placements` replaced by its :class:`Change` records.

    Args:
        changes: What the storage's adds reported, in order (as ``_notify`` receives them).

    Returns:
        A new list of :class:`Change` records in the same order, one per placed episode of each
        :class:`Placements`.
    """
    out: list[Change] = []
    for ch in changes:
        out += ch.to_changes() if isinstance(ch, Placements) else [ch]
    return out
