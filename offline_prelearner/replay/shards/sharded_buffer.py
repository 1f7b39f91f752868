"""Replay shards as Ray actors (the Ape-X design): prioritized replay across processes.

A streaming ``map_batches`` stage cannot take TD errors back from a learner, so for prioritized
replay across processes episodes stream into replay *shards* -- Ray actors, each owning one
:class:`EpisodeReplayBuffer` -- and the learner samples from them and sends priorities back::

    shards = ShardedReplayBuffer(config, num_shards=2)      # config.buffer.kind="prioritized"
    shards.add(episodes)                     # routed by episode id; asynchronous
    batch = shards.sample(256)               # one round of concurrent calls, all shards
    shards.update_priorities(batch["indices"], td_errors)   # rides with the next round
    shards.flush()                           # sends what waits, waits for what is in flight
    shards.save("ckpt/"); shards.close()

:mod:`offline_prelearner.jobs.stream.apex` feeds shards from a Ray Data job. :class:`ReplayShard` is
the plain class each actor runs (usable without Ray, in a test or a notebook).

Semantics at the edges:

* **Routing.** An episode goes to shard :func:`shard_of` of its id (a hash that is the same in
  every process), so every fragment of an episode lands on the shard holding the rest. Fragments
  must still arrive in order: one feeding process (or ``ray.group_by_episode``), as for the
  plain pipeline.
* **Capacity** ``config.buffer.capacity`` is the total: each shard holds ``ceil(capacity /
  num_shards)`` slots and evicts on its own (FIFO or reservoir). ``learning_starts`` and
  ``max_samples_per_insert`` are checked by the client over all shards' counters, as one buffer
  would check them; the shards themselves have neither.
* **Sampling mass** of a shard: the number of valid starts (uniform) or the sum of ``p ** alpha``
  over them (prioritized). A batch of ``n`` is split over the shards by a multinomial draw
  proportional to the masses the client last heard of (every reply carries the shard's mass), and
  each shard draws its part from its own distribution. When those masses are current, a row is
  drawn with exactly the probability one buffer holding all the data would give it, ``P(i) = m_i
  / sum_k m_k``. They lag by whatever changed since the last reply: the priorities that ride with
  this very round, episodes other processes added. So the importance weights are computed from
  the probability the row was *actually* drawn with (split share times in-shard probability at
  draw time, see :func:`global_weights`): ``w_i = (P(i) / min_j P(j)) ** -beta``, the minimum
  over every step any shard could have drawn. That is one buffer's weights whenever the masses
  were current (e.g. after :meth:`~ShardedReplayBuffer.flush`), and the right correction for
  the draw in any case. Uniform rows weigh 1.
* **Feedback.** ``update_priorities`` queues each shard's part; it is applied by that shard
  just before the next round draws (one remote call per shard per learner step, not two), or
  sent on its own by ``flush``/``stats``/``save`` or a second update before the next sample.
* **Handles.** ``indices`` hold ``(local_handle << b) | shard`` with ``b = (num_shards -
  1).bit_length()`` low bits (:func:`encode_handles`); one buffer's handles lose nothing by it
  (see there). A handle naming no shard, or stale in its shard, is ignored and counted.
* **Mixin** buffers are refused: "all the new data in every batch" has no meaning across shards.

Not thread-safe: one client per thread. A client pickles (e.g. into Ray Data actors) as its
actor handles and configuration, with nothing in flight; only the creating client kills the
actors (:meth:`ShardedReplayBuffer.close`).
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ...config import MAX_CONCURRENCY, PreLearnerConfig, PrioritizedConfig, check_float, check_int
from ...episodes import columns as C
from ...episodes.episode import Episode
from ...episodes.episode_columns import EpisodeColumns
from ...errors import ConfigError, EmptyBufferError
from .. import checkpoint
from ..batch import SampleBatch
from ..replay_buffer import INDICES, _batch_size, as_columns
from .routing import (
    compact,
    decode_handles,
    encode_handles,
    global_weights,
    shard_of,
    split_counts,
)
from .shard import ReplayShard, ShardInfo, ShardSample

__all__ = [
    "ReplayShard",
    "ShardInfo",
    "ShardSample",
    "ShardedReplayBuffer",
    "compact",
    "decode_handles",
    "encode_handles",
    "global_weights",
    "shard_of",
    "split_counts",
]

_CLIENT_MANIFEST = "sharded"
_PICKLED = (  # what a copy of a client takes along (nothing in flight, no cached infos)
    "config",
    "num_shards",
    "module_id",
    "max_in_flight",
    "prefetch",
    "learning_starts",
    "rate_limit",
    "shard_config",
    "prioritized",
    "_beta",
    "actors",
)


# ============================================================================ the client
def _ray() -> Any:
    import ray

    return ray


@dataclass
class _Round:
    """One round of sample calls in flight: its size, the masses it was split by, the split."""

    n: int
    split: np.ndarray
    counts: np.ndarray
    refs: list[Any]


class ShardedReplayBuffer:
    """The learner's (and feeders') handle on ``num_shards`` :class:`ReplayShard` actors.

    Args:
        config: A :class:`PreLearnerConfig` (or dict / path); ``buffer.kind`` uniform,
            prioritized or reservoir. ``buffer.capacity`` is the total over all shards.
        num_shards: How many actors (>= 1).
        module_id: The module these shards serve (default ``config.modules.default_module``).
        num_cpus: CPUs each actor reserves (0: Ray's default for a running actor; give 1 on a
            cluster where shards should not share cores).
        actor_options: More ``ray.remote`` options for the actors (``memory``, ``resources``...).
        max_in_flight: Asynchronous ``add`` / ``update_priorities`` calls allowed in flight.
        prefetch: Sample rounds kept in flight (0: none). With 1, :meth:`sample` returns the
            round submitted at the previous call and submits the next, so the shards draw while
            the learner computes (as Ape-X's learner prefetches); such a round is drawn before
            the priorities of the batch just returned arrive. Its weights still match the
            probabilities it was drawn with.
    """

    def __init__(
        self,
        config: PreLearnerConfig | Mapping[str, Any] | str | None,
        num_shards: int,
        *,
        module_id: str | None = None,
        num_cpus: float = 0.0,
        actor_options: Mapping[str, Any] | None = None,
        max_in_flight: int = 8,
        prefetch: int = 0,
    ) -> None:
        cfg = PreLearnerConfig.coerce(config)
        check_int("num_shards", num_shards, 1, MAX_CONCURRENCY)
        check_int("max_in_flight", max_in_flight, 1, MAX_CONCURRENCY)
        check_int("prefetch", prefetch, 0, MAX_CONCURRENCY)
        b = cfg.buffer
        self.config = cfg
        self.num_shards = num_shards
        self.module_id = module_id or cfg.modules.default_module
        self.max_in_flight = max_in_flight
        self.prefetch = prefetch
        self.learning_starts = b.learning_starts
        self.rate_limit = ReplayShard(cfg, 0, self.module_id).buffer.rate_limit  # checks cfg
        self.shard_config = cfg.with_updates(
            {
                "buffer.capacity": -(-b.capacity // num_shards),
                "buffer.learning_starts": 0,
                "buffer.max_samples_per_insert": None,
            }
        )
        self.prioritized = b.kind == "prioritized"
        self.beta = (b.prioritized or PrioritizedConfig()).beta  # used by prioritized shards
        ray = _ray()
        remote = ray.remote(ReplayShard).options(num_cpus=num_cpus, **(actor_options or {}))
        self.actors = [
            remote.remote(self.shard_config, s, self.module_id) for s in range(num_shards)
        ]
        self._owner = True
        self._reset_local()
        for info in ray.get([a.info.remote() for a in self.actors]):  # surfaces start-up errors
            self._note(info)

    def _reset_local(self) -> None:
        seed = self.config.seed
        self.rng = np.random.default_rng(None if seed is None else [seed, 0x5A4D])
        self._infos: list[ShardInfo | None] = [None] * self.num_shards
        self._pending: list[Any] = []
        self._ahead: deque[_Round] = deque()
        self._queued: list[tuple[np.ndarray, np.ndarray] | None] = [None] * self.num_shards
        self.counters = {"samples": 0, "rounds": 0, "redraws": 0, "updates_sent": 0}
        self.counters.update(updates_foreign=0, episodes_sent=0, timesteps_sent=0)

    def __getstate__(self) -> dict[str, Any]:
        return {k: self.__dict__[k] for k in _PICKLED}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._owner = False
        self._reset_local()

    def __repr__(self) -> str:
        return (
            f"ShardedReplayBuffer(num_shards={self.num_shards}, module_id={self.module_id!r}, "
            f"kind={self.config.buffer.kind!r}, capacity={self.config.buffer.capacity})"
        )

    def __enter__(self) -> ShardedReplayBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def beta(self) -> float:
        """Importance-weight exponent of :meth:`sample` (may be annealed between samples)."""
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        self._beta = float(check_float("beta", value, 0.0, 10.0))  # the rule of buffer.beta

    # ------------------------------------------------------------------ adding
    def add(self, episodes: Episode | Iterable[Episode] | EpisodeColumns) -> np.ndarray:
        """Sends episodes to their shards (asynchronously); returns episodes sent per shard.

        Episodes travel as :class:`EpisodeColumns`, split by shard and compacted (objects are
        joined into columns first, by :func:`~..replay_buffer.as_columns`). An error in a shard
        (e.g. a fragment that contradicts what it holds) is raised by a later call that waits
        for it: :meth:`flush`, or an ``add`` / ``update_priorities`` past ``max_in_flight``.

        Args:
            episodes: A table of episodes, or Episode objects.

        Returns:
            int64 ``[num_shards]``: episodes sent to each shard by this call.
        """
        if isinstance(episodes, EpisodeColumns):
            parts: list[EpisodeColumns] = [episodes]
        else:
            eps = [episodes] if isinstance(episodes, Episode) else list(episodes)
            for ep in eps:
                if not isinstance(ep, Episode):
                    raise TypeError(f"add() takes Episode objects, found {type(ep).__name__}")
            parts = list(as_columns(eps))
        sent = np.zeros(self.num_shards, np.int64)
        steps = 0
        for part in parts:
            shard = shard_of(part.ids, self.num_shards)
            for s in np.unique(shard).tolist():
                self._submit(self.actors[s].add.remote([compact(part.select(shard == s))]))
            sent += np.bincount(shard, minlength=self.num_shards)
            steps += int(part.length.sum())
        self.counters["episodes_sent"] += int(sent.sum())
        self.counters["timesteps_sent"] += steps
        return sent

    # ------------------------------------------------------------------ sampling
    def sample(self, batch_size: int) -> SampleBatch:
        """``batch_size`` rows from all shards in one round of concurrent calls.

        Rows come grouped by shard; ``weights`` are global importance weights and ``indices``
        global handles (see the module docstring); ``batch.info["shard_counts"]`` says how many
        rows each shard drew. With ``prefetch`` rounds already in flight, the oldest one of this
        size is taken instead of waiting for a new one. Raises :class:`EmptyBufferError` before
        ``learning_starts`` timesteps were added over all shards, while nothing is sampleable,
        or when the rate limit refuses (``RateLimitExceeded``).

        Args:
            batch_size: Rows in the batch (> 0), split over shards by their masses.

        Returns:
            The batch, with global ``indices`` and (prioritized) global ``weights``.

        Raises:
            EmptyBufferError: before ``learning_starts``, while nothing is sampleable, when
                the rate limit refuses, or when shards keep coming up short of their share.
        """
        n = _batch_size(batch_size)
        self._reap(timeout=0.0)
        if self._ahead and self._ahead[0].n != n:
            self._ahead.clear()  # drawn for another batch size: dropped
        if not self._ahead:
            self._check_ready(n)
        rnd = self._ahead.popleft() if self._ahead else self._round(n)
        for attempt in range(3):
            parts = _ray().get(rnd.refs)
            for p in parts:
                self._note(p.info)
            self.counters["rounds"] += 1
            if all(len(p) == c for p, c in zip(parts, rnd.counts.tolist(), strict=True)):
                break
            self.counters["redraws"] += 1  # a shard emptied since its mass was reported
            if attempt == 2:
                raise EmptyBufferError("shards kept coming up short of their share")
            rnd = self._round(n)
        batch = self._assemble(parts, rnd.split, rnd.counts)
        while len(self._ahead) < self.prefetch:
            try:
                self._check_ready(n, ahead=sum(r.n for r in self._ahead))
                self._ahead.append(self._round(n))
            except EmptyBufferError:
                break
        return batch

    def _round(self, n: int) -> _Round:
        """Submits one round: the split of ``n`` rows by the known masses, a call per shard."""
        split = self._masses()
        if not split.sum() > 0:
            self.refresh()
            split = self._masses()
            if not split.sum() > 0:
                raise EmptyBufferError(
                    f"nothing to sample: none of the {self.num_shards} shards holds a "
                    "complete window"
                )
        counts = split_counts(split, n, self.rng)
        calls = zip(self.actors, counts.tolist(), self._queued, strict=True)
        refs = [a.sample.remote(c, *(q or ())) for a, c, q in calls]  # waiting priorities first
        self._queued = [None] * self.num_shards
        return _Round(n, split, counts, refs)

    def _assemble(
        self, parts: list[ShardSample], split: np.ndarray, counts: np.ndarray
    ) -> SampleBatch:
        full = [p for p in parts if len(p)]
        cols = {k: np.concatenate([p.columns[k] for p in full]) for k in full[0].columns}
        row_shard = np.repeat(np.arange(self.num_shards), [len(p) for p in parts])
        cols[INDICES] = encode_handles(cols[INDICES], row_shard, self.num_shards)
        if self.prioritized:
            w = global_weights(
                np.concatenate([p.row_mass for p in full]),
                row_shard,
                split,
                [p.info.mass for p in parts],
                [p.info.min_mass for p in parts],
                self.beta,
            )
            cols[C.WEIGHTS] = w.astype(np.float32)
        batch = SampleBatch(cols)
        batch.info["shard_counts"] = counts
        self.counters["samples"] += len(row_shard)
        return batch

    def _check_ready(self, n: int, ahead: int = 0) -> None:
        """learning_starts and the rate limit over all shards (refreshed once if they refuse);
        ``ahead`` rows are drawn in rounds still in flight."""
        for attempt in range(2):
            added = sum(i.timesteps_added for i in self._infos if i is not None)
            drawn = ahead + sum(i.samples_drawn for i in self._infos if i is not None)
            try:
                if added < self.learning_starts:
                    raise EmptyBufferError(
                        f"{added} timesteps added over {self.num_shards} shards, sampling "
                        f"starts after learning_starts={self.learning_starts}"
                    )
                if self.rate_limit is not None:
                    self.rate_limit.check(n, drawn, added, self.learning_starts)
                return
            except EmptyBufferError:
                if attempt:
                    raise
                self.refresh()

    def _masses(self) -> np.ndarray:
        return np.array([0.0 if i is None else i.mass for i in self._infos])

    def refresh(self) -> list[ShardInfo]:
        """Asks every shard for its info now (one round, after any waiting priorities)."""
        self._send_queued()
        infos: list[ShardInfo] = _ray().get([a.info.remote() for a in self.actors])
        for info in infos:
            self._note(info)
        return infos

    # ------------------------------------------------------------------ priorities
    def update_priorities(self, indices: npt.ArrayLike, td_errors: npt.ArrayLike) -> int:
        """New priorities (``|td| + eps``) for sampled rows, for their shards; returns how many
        handles were accepted. Handles naming no shard are dropped and counted
        (``updates_foreign``); stale ones are counted by their shard.

        Nothing waits: each shard's part rides along with the next :meth:`sample` round (one
        call per shard per learner step, applied before that round draws), or goes at once as
        its own call when the shard already has a part waiting; :meth:`flush`, :meth:`stats`,
        :meth:`refresh` and :meth:`save` send what waits.

        Args:
            indices: int64 global handles, the ``indices`` column of a :meth:`sample`.
            td_errors: One TD error (or priority) per handle; the sign is dropped.

        Returns:
            How many handles named a shard and were queued for it.

        Raises:
            TypeError: non-integer indices (before anything is sent).
            ValueError: unequal lengths or a non-finite value (before anything is sent).
            ConfigError: the shards are not prioritized.
        """
        if not self.prioritized:
            raise ConfigError(
                f"update_priorities needs buffer.kind='prioritized', these shards are "
                f"{self.config.buffer.kind!r}"
            )
        h = np.asarray(indices)
        if h.dtype.kind not in "iu" and h.size:
            raise TypeError(
                f"update_priorities: indices must be the int64 handles of a sample's "
                f"'indices' column, found dtype {h.dtype}"
            )
        h = h.astype(np.int64, copy=False).ravel()
        td = np.asarray(td_errors, np.float64).ravel()
        if td.shape != h.shape:
            raise ValueError(f"update_priorities: {h.size} indices but {td.size} priorities")
        if not np.isfinite(td).all():
            bad = int(np.flatnonzero(~np.isfinite(td))[0])
            raise ValueError(f"update_priorities: priority {td[bad]!r} at {bad} is not finite")
        local, shard = decode_handles(h, self.num_shards)
        key = np.minimum(shard, self.num_shards)  # num_shards: names no shard
        order = np.argsort(key, kind="stable")
        bounds = np.searchsorted(key[order], np.arange(self.num_shards + 1)).tolist()
        for s in range(self.num_shards):
            rows = order[bounds[s] : bounds[s + 1]]
            if len(rows):
                waiting = self._queued[s]
                if waiting is not None:
                    self._submit(self.actors[s].feedback.remote(*waiting))
                self._queued[s] = (local[rows], td[rows])
        sent = int(bounds[-1])
        self.counters["updates_sent"] += sent
        self.counters["updates_foreign"] += len(h) - sent
        return sent

    # ------------------------------------------------------------------ in flight
    def _send_queued(self) -> None:
        for s, part in enumerate(self._queued):
            if part is not None:
                self._submit(self.actors[s].feedback.remote(*part))
        self._queued = [None] * self.num_shards

    def _submit(self, ref: Any) -> None:
        self._pending.append(ref)
        if len(self._pending) > self.max_in_flight:
            self._reap(num_returns=len(self._pending) - self.max_in_flight // 2)

    def _reap(self, num_returns: int | None = None, timeout: float | None = None) -> None:
        """Collects finished calls (at least ``num_returns``; all finished ones with
        ``timeout=0``), noting their infos and raising the first error among them."""
        if not self._pending:
            return
        ray = _ray()
        want = len(self._pending) if num_returns is None else num_returns
        done, self._pending = ray.wait(self._pending, num_returns=want, timeout=timeout)
        for info in ray.get(done):
            self._note(info)

    def _note(self, info: ShardInfo) -> None:
        cur = self._infos[info.shard]
        if cur is None or info.seq > cur.seq:
            self._infos[info.shard] = info

    def flush(self) -> None:
        """Sends waiting priorities, then waits for every ``add`` / ``update_priorities`` in
        flight; raises a shard's error."""
        self._send_queued()
        self._reap()

    # ------------------------------------------------------------------ stats and state
    def stats(self) -> dict[str, Any]:
        """Counters summed over shards (``timesteps_held``, ``priority_updates_stale`` ...),
        ``shards`` (each one's stats) and ``client`` (this client's counters)."""
        self._send_queued()
        per = _ray().get([a.stats.remote() for a in self.actors])
        total = {
            k: sum(p[k] for p in per)
            for k, v in per[0].items()
            if isinstance(v, (int, float)) and k != "shard"
        }
        client = {**self.counters, "in_flight": len(self._pending)}
        return {"num_shards": self.num_shards, **total, "shards": per, "client": client}

    def save(self, path: str | Path) -> Path:
        """Flushes, then writes ``path/shard-XXX`` (one checkpoint per shard; the shards write
        them, so ``path`` must be on a file system they share) and ``path/sharded`` last.
        Prefetched rounds were drawn before the save: this client still returns them, a client
        that loads the checkpoint draws afresh.

        Args:
            path: Directory for the checkpoint, on a file system every shard's node shares.

        Returns:
            ``path`` as a :class:`~pathlib.Path`.
        """
        self.flush()
        root, save_id = Path(path), uuid.uuid4().hex
        _ray().get(
            [a.save.remote(str(root / _shard_dir(i)), save_id) for i, a in enumerate(self.actors)]
        )
        meta = {
            "num_shards": self.num_shards,
            "module_id": self.module_id,
            "save_id": save_id,
            "beta": self.beta,
            "rng": self.rng.bit_generator.state,
            "config": self.config.to_dict(),
        }
        checkpoint.write(root / _CLIENT_MANIFEST, meta, {})
        return root

    def load(self, path: str | Path) -> None:
        """Restores :meth:`save` output into these shards (same number and module).

        Args:
            path: Directory :meth:`save` wrote.

        Raises:
            ConfigError: the checkpoint was saved with another ``num_shards`` or module id.
            DataError: a shard's checkpoint belongs to another save, or is corrupt.
        """
        root = Path(path)
        meta, _ = checkpoint.read(root / _CLIENT_MANIFEST)
        for name, mine in (("num_shards", self.num_shards), ("module_id", self.module_id)):
            if meta.get(name) != mine:
                raise ConfigError(
                    f"checkpoint {str(root)!r} was saved with {name}={meta.get(name)!r}, these "
                    f"shards have {mine!r} (episodes are routed by num_shards)"
                )
        self.flush()
        infos = _ray().get(
            [
                a.load.remote(str(root / _shard_dir(i)), meta["save_id"])
                for i, a in enumerate(self.actors)
            ]
        )
        self._infos = list(infos)
        self._ahead.clear()  # drawn from the state before the load
        self.beta = meta["beta"]
        self.rng.bit_generator.state = meta["rng"]

    def close(self) -> None:
        """Kills the shard actors (their data is gone; :meth:`save` first to keep it). Only the
        client that created them does this; copies just forget their calls in flight."""
        self._pending, self._ahead, self._queued = [], deque(), [None] * self.num_shards
        if self._owner and self.actors:
            ray = _ray()
            for a in self.actors:
                ray.kill(a)
        self.actors = []


def _shard_dir(i: int) -> str:
    return f"shard-{i:03d}"
