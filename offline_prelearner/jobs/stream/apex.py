"""Feeding replay shards from a Ray Data job: the data side of the Ape-X design.

::

    shards = ShardedReplayBuffer(config, num_shards=2)       # buffer.kind="prioritized"
    feed = start_feed("data/", config, shards)                # the job runs in the background
    while not feed.done():                                    # ... while the learner learns
        batch = shards.sample(256)                            # (EmptyBufferError until data)
        shards.update_priorities(batch["indices"], td_errors(batch))
    stats = feed.result()                                     # FeedStats; stats.balanced()

The job is the learner stream of :mod:`offline_prelearner.jobs.stream.learner_stream` (same reading,
format detection, ``ray.*`` settings, validation and de-duplication) with :class:`ShardFeeder` as
the prelearner: instead of buffering and sampling, it sends each batch's episodes to the shards
of their module and returns one row of counters per batch, which :func:`feed_shards` sums. Every
input row is accounted for: ``rows_in = rows_kept + rows_rejected + rows_duplicate`` (the
ledger), and every kept episode was either sent to a shard or counted as unrouted (its module
has no shards).

Each feeder actor waits for its shard calls before returning a batch, so a shard's error (a
fragment contradicting what it holds) fails the job at that batch, and nothing is in flight when
the job ends. Fragments of one episode must reach their shard in order: with ``ray.concurrency >
1`` the feeders reading their own files read whole episodes of rows without ``t`` (see
:mod:`.episode_ranges`); with ``ray.read="ray"`` set ``ray.group_by_episode``. De-duplication is
per feeder actor.
Batch-level connectors are not run (nothing is sampled here); episode-level ones are, before
the episodes are sent.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ...config import PreLearnerConfig
from ...episodes.episode_columns import EpisodeColumns
from ...episodes.ledger import Ledger
from ...errors import ConfigError
from ...io.readers import Batch
from ...prelearner import OfflinePreLearner
from ...replay.batch import MultiAgentBatch
from ...replay.shards.sharded_buffer import ShardedReplayBuffer
from .learner_stream import build_dataset

__all__ = ["FeedStats", "ShardFeeder", "feed_shards", "start_feed"]

Shards = ShardedReplayBuffer | Mapping[str, ShardedReplayBuffer]
_COUNTS = ("episodes_sent", "timesteps_sent", "episodes_unrouted", "timesteps_unrouted")


@dataclass
class FeedStats:
    """What a feed did, summed over its batches.

    Attributes:
        ledger: The summed ledger of the batches read.
        batches: Input batches read.
        episodes_sent: Episodes sent to shards.
        timesteps_sent: Timesteps sent to shards.
        episodes_unrouted: Kept episodes of a module that has no shards.
        timesteps_unrouted: Their timesteps.
        wall_seconds: Time the feed took.
    """

    ledger: Ledger = field(default_factory=Ledger)
    batches: int = 0
    episodes_sent: int = 0
    timesteps_sent: int = 0
    episodes_unrouted: int = 0  # kept episodes of a module without shards
    timesteps_unrouted: int = 0
    wall_seconds: float = 0.0

    def balanced(self) -> bool:
        """Rows in = kept + rejected + duplicate, and every kept fragment was sent or counted."""
        routed = self.episodes_sent + self.episodes_unrouted
        return self.ledger.balanced() and routed == self.ledger.fragments

    def to_dict(self) -> dict[str, Any]:
        """The counters as a JSON-able dict, with the wall time and whether the ledger balances."""
        out = {"ledger": self.ledger.to_dict(), "batches": self.batches}
        out.update({k: getattr(self, k) for k in _COUNTS})
        return {**out, "wall_seconds": self.wall_seconds, "balanced": self.balanced()}


class ShardFeeder(OfflinePreLearner):
    """A prelearner whose buffers are replay shards: ``add_to_buffers`` sends each module's
    episodes, as columns, to the :class:`ShardedReplayBuffer` of that module and waits for it;
    ``sample`` draws nothing.

    ``shards`` maps module ids to clients; :func:`feed_shards` binds it on a subclass made for
    the job (Ray pickles that class, clients included, into the map_batches actors).

    Args:
        config: As for :class:`~offline_prelearner.OfflinePreLearner`: a config, a dict, a
            JSON/YAML path, or None for defaults.
        **kw: Field updates applied to ``config``, as the base class takes them.
    """

    shards: ClassVar[Mapping[str, ShardedReplayBuffer]] = {}

    def __init__(self, config: Any = None, **kw: Any) -> None:
        super().__init__(config, **kw)
        self.counters.update(dict.fromkeys(_COUNTS, 0))

    def add_to_buffers(self, columns: EpisodeColumns) -> None:
        """Sends the episodes to the shards of their modules and waits for them to be held.

        Args:
            columns: The batch's episodes (what ``postprocess_episodes`` returned).
        """
        for module_id, part in self._by_module(columns):
            client = self.shards.get(module_id)
            kind = "unrouted" if client is None else "sent"
            self.counters[f"episodes_{kind}"] += len(part)
            self.counters[f"timesteps_{kind}"] += int(part.length.sum())
            if client is not None:
                client.add(part)
                self.counters["fragments_added"] += len(part)
        for client in self.shards.values():
            client.flush()

    def sample(self) -> MultiAgentBatch:
        """An empty batch: a feeder's samples are drawn from the shards by the learners."""
        return MultiAgentBatch({}, env_steps=0)

    def __call__(self, batch: Batch) -> Iterator[dict[str, np.ndarray]]:
        """One input batch -> one row: this batch's ledger (JSON) and routing counters."""
        before = {k: self.counters[k] for k in _COUNTS}
        episodes = self.validate(self.map_to_episodes(batch))
        self.ledger += episodes.ledger
        self.add_to_buffers(self.postprocess_episodes(episodes.columns))
        self.counters["batches"] += 1
        row = {k: np.array([self.counters[k] - before[k]], np.int64) for k in _COUNTS}
        yield {"ledger": np.array([json.dumps(episodes.ledger.to_dict())]), **row}


def _clients(shards: Shards) -> dict[str, ShardedReplayBuffer]:
    if isinstance(shards, ShardedReplayBuffer):
        return {shards.module_id: shards}
    clients = dict(shards)
    bad = [m for m, c in clients.items() if not isinstance(c, ShardedReplayBuffer)]
    if bad or not clients:
        raise ConfigError(f"shards must be a ShardedReplayBuffer or a dict of them; bad: {bad}")
    return clients


def feed_shards(
    path: str | os.PathLike[str] | list[str],
    config: PreLearnerConfig | None,
    shards: Shards,
) -> FeedStats:
    """Reads ``path`` with Ray Data and streams validated, de-duplicated episodes into
    ``shards`` (one client, or ``{module_id: client}``); returns the summed counters.

    ``config`` is the job's (reading, validation, ``ray.*``); ``sample.num_samples`` is ignored
    (there are no samples to cap) and ``sample.sample_all`` is refused.

    Args:
        path: A data file, a folder of them (recursive, name order), a glob, or a list of
            these; the format is ``config.read.format`` (``"auto"``: detected from the files).
        config: The job's config (default ``PreLearnerConfig()``): reading, validation and
            ``ray.*``.
        shards: One :class:`ShardedReplayBuffer` client, or ``{module_id: client}``.

    Returns:
        The :class:`FeedStats` summed over the batches read.

    Raises:
        ConfigError: ``sample.sample_all`` is set, or the config or files are refused before Ray
            runs.
    """
    clients = _clients(shards)
    out = _run_feed(path, config, clients)
    for client in clients.values():
        client.refresh()  # the driver's view of the shards' masses, now current
    return out


def _run_feed(
    path: str | os.PathLike[str] | list[str],
    config: PreLearnerConfig | None,
    clients: dict[str, ShardedReplayBuffer],
) -> FeedStats:
    cfg = PreLearnerConfig.coerce(config)
    if cfg.sample.sample_all:
        raise ConfigError("sample.sample_all has no meaning when feeding shards")
    if cfg.sample.num_samples is not None:
        cfg = cfg.with_updates({"sample.num_samples": None})
    bound = type("BoundShardFeeder", (ShardFeeder,), {"shards": clients, "__module__": __name__})
    start = time.perf_counter()
    ds = build_dataset(path, cfg, prelearner=bound)
    out = FeedStats()
    for rows in ds.iter_batches(batch_format="numpy", batch_size=None):
        for text in rows["ledger"].tolist():
            out.ledger += Ledger.from_dict(json.loads(text))
        out.batches += len(rows["ledger"])
        for k in _COUNTS:
            setattr(out, k, getattr(out, k) + int(rows[k].sum()))
    out.wall_seconds = round(time.perf_counter() - start, 3)
    return out


def start_feed(
    path: str | os.PathLike[str] | list[str],
    config: PreLearnerConfig | None,
    shards: Shards,
) -> Future[FeedStats]:
    """:func:`feed_shards` in a background thread, so a learner can sample meanwhile.

    Returns a :class:`concurrent.futures.Future`: ``done()``, ``result()`` (which raises the
    job's error, if any). The feed's thread only iterates the job's counters; it never calls
    ``shards`` (copies of them live in the job's actors), so the learner keeps them to itself.

    Args:
        path: As for :func:`feed_shards`.
        config: As for :func:`feed_shards`.
        shards: As for :func:`feed_shards`.

    Returns:
        A future of the feed's :class:`FeedStats`.
    """
    clients = _clients(shards)
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="feed_shards")
    future = pool.submit(_run_feed, path, config, clients)
    pool.shutdown(wait=False)
    return future
