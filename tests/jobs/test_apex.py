"""Feeding replay shards: the feeder on its own (one Arrow batch, no Ray Data) and one real Ray
Data feed that runs while a learner samples, with every input row accounted for."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import episodes_to_columns, make_episode, to_table

from offline_prelearner.config import PreLearnerConfig
from offline_prelearner.errors import ConfigError, EmptyBufferError
from offline_prelearner.jobs.stream.apex import FeedStats, ShardFeeder, feed_shards, start_feed
from offline_prelearner.replay.shards import ShardedReplayBuffer

pytestmark = [pytest.mark.ray]


def rows_table(episodes: list[Any], modules: list[str] | None = None) -> pa.Table:
    cols = episodes_to_columns(episodes, with_t=True)
    if modules is not None:
        per_row = [m for ep, m in zip(episodes, modules, strict=True) for _ in range(len(ep))]
        cols["module_id"] = np.array(per_row, dtype=object)
    return to_table(cols)


def test_feeder_sends_episodes_of_its_modules_and_counts_the_rest(ray_local: Any) -> None:
    eps = [make_episode(4 + i % 3, id=f"e{i}", seed=i) for i in range(8)]
    modules = ["a" if i % 2 else "b" for i in range(8)]
    cfg = PreLearnerConfig().with_updates({"format": "rows", "seed": 0})
    sb = ShardedReplayBuffer(cfg, 2, module_id="a")
    try:
        bound = type("Bound", (ShardFeeder,), {"shards": {"a": sb}})
        feeder = bound(cfg)
        (row,) = list(feeder(rows_table(eps, modules)))
        a_steps = sum(len(e) for e, m in zip(eps, modules, strict=True) if m == "a")
        assert row["episodes_sent"].tolist() == [4] and row["timesteps_sent"].tolist() == [a_steps]
        assert row["episodes_unrouted"].tolist() == [4]
        assert row["timesteps_unrouted"].tolist() == [sum(map(len, eps)) - a_steps]
        ledger = json.loads(row["ledger"][0])
        assert ledger["rows_in"] == sum(map(len, eps)) and ledger["balanced"]
        assert sb.stats()["timesteps_held"] == a_steps  # the feeder waited for its adds
        assert len(list(feeder.sample().policy_batches)) == 0
        # One module ("a" for all): the reader's columns go to the shards as they are, episode
        # connectors' columns with them.
        more = [make_episode(3, id=f"m{i}", seed=50 + i) for i in range(5)]
        table = rows_table(more, ["a"] * 5)
        (row,) = list(feeder(table))
        assert row["episodes_sent"].tolist() == [5] and row["timesteps_sent"].tolist() == [15]
        assert sb.stats()["timesteps_held"] == a_steps + 15
        rtg = type(
            "Bound", (ShardFeeder,), {"shards": {"a": ShardedReplayBuffer(cfg, 1, module_id="a")}}
        )
        sb2 = rtg.shards["a"]
        try:
            (row,) = list(rtg(cfg, connectors=["returns_to_go"])(table))
            assert row["episodes_sent"].tolist() == [5]
            sb2.flush()
            assert "returns_to_go" in sb2.sample(4)
        finally:
            sb2.close()
    finally:
        sb.close()


@pytest.mark.slow
def test_feed_accounts_for_every_row_while_the_learner_samples(
    ray_local: Any, tmp_path: Path
) -> None:
    eps = [make_episode(5 + i % 7, id=f"e{i}", seed=i) for i in range(40)]
    bad = make_episode(6, id="nan", seed=99)
    bad.rewards[2] = np.nan  # rejected: non-finite reward
    files = [[*eps[:25], bad], eps[20:]]  # e20..e24 twice (the reader rejects both copies)
    for i, part in enumerate(files):
        pq.write_table(rows_table(part), tmp_path / f"part-{i}.parquet")
    rows_in = sum(len(e) for part in files for e in part)
    cfg = PreLearnerConfig().with_updates(
        {"on_invalid": "skip", "buffer.kind": "prioritized", "seed": 0, "learning_starts": 20}
    )
    sb = ShardedReplayBuffer(cfg, 2)
    try:
        feed = start_feed(tmp_path, cfg, sb)
        drawn = 0
        while not feed.done():  # the learner samples while the job runs
            try:
                batch = sb.sample(32)
                sb.update_priorities(batch["indices"], np.ones(32))
                drawn += 32
            except EmptyBufferError:
                time.sleep(0.05)
        stats = feed.result()
        assert isinstance(stats, FeedStats) and stats.balanced()
        led = stats.ledger
        assert led.rows_in == rows_in
        assert led.rows_rejected["nan_reward"] == 6 and led.rows_kept < rows_in - 6
        assert led.rows_kept == stats.timesteps_sent
        assert stats.episodes_sent == led.episodes_kept and stats.episodes_unrouted == 0
        sb.flush()
        shard_stats = sb.stats()  # the shards hold exactly what was kept
        assert shard_stats["timesteps_held"] == led.rows_kept
        assert shard_stats["episodes_held"] == led.episodes_kept
        assert shard_stats["samples_drawn"] >= drawn
        assert stats.to_dict()["balanced"] and len(sb.sample(64)) == 64
        with pytest.raises(ConfigError, match="sample_all"):
            feed_shards(tmp_path, cfg.with_updates({"sample_all": True}), sb)
    finally:
        sb.close()
