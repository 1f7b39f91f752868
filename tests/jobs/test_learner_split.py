"""The learner stream split for many learners (``split_learner_batches``, Ray Data's
``streaming_split``): together the shares see every output row once; a share pickles and
iterates inside a Ray task."""

from __future__ import annotations

import pickle
import threading
from typing import Any

import pytest
from conftest import REPO

from offline_prelearner.config import PreLearnerConfig
from offline_prelearner.errors import ConfigError
from offline_prelearner.jobs.stream.learner_stream import LearnerStream, split_learner_batches
from offline_prelearner.replay.batch import MultiAgentBatch

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROWS = REPO / "datasets/cartpole-v1/rows"
SAMPLE_ALL = {"sample_all": True, "batch_size": 500}


def _keys(stream: LearnerStream) -> list[tuple[str, int]]:
    keys = []
    for batch in stream:
        assert isinstance(batch, MultiAgentBatch)
        sb = batch["default_policy"]
        keys += zip(sb["eps_id"].tolist(), sb["t"].tolist(), strict=True)
    return keys


def _drain_in_threads(streams: list[LearnerStream]) -> list[list[tuple[str, int]]]:
    seen: list[list[tuple[str, int]]] = [[] for _ in streams]

    def run(i: int) -> None:
        seen[i] = _keys(streams[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(streams))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return seen


@pytest.mark.parametrize("num_learners", [1, 2, 3])
def test_the_shares_together_see_every_row_exactly_once(ray_local: Any, num_learners: int) -> None:
    cfg = PreLearnerConfig().with_updates(SAMPLE_ALL)
    streams = split_learner_batches(ROWS, cfg, num_learners, batch_rows=256)
    assert [s.index for s in streams] == list(range(num_learners))
    seen = _drain_in_threads(streams)
    everything = [k for share in seen for k in share]
    assert len(everything) == 5000 == len(set(everything))  # sample_all: each transition once
    assert all(seen)  # blocks of 256 rows: every share gets some


def test_equal_shares_have_the_same_length(ray_local: Any) -> None:
    cfg = PreLearnerConfig().with_updates(SAMPLE_ALL)
    seen = _drain_in_threads(split_learner_batches(ROWS, cfg, 3, equal=True, batch_rows=700))
    assert len({len(s) for s in seen}) == 1
    everything = [k for share in seen for k in share]
    assert 5000 - 2 <= len(everything) == len(set(everything))  # Ray drops < n rows to equalize


def _count_rows(stream: LearnerStream) -> int:
    return sum(len(b["default_policy"]) for b in stream)


def test_a_share_pickles_and_is_read_inside_ray_tasks(ray_local: Any) -> None:
    ray = ray_local
    cfg = PreLearnerConfig().with_updates(SAMPLE_ALL)
    streams = split_learner_batches(ROWS, cfg, 2, batch_rows=500)
    assert isinstance(pickle.loads(pickle.dumps(streams[0])), LearnerStream)
    count = ray.remote(num_cpus=0)(_count_rows)
    assert sum(ray.get([count.remote(s) for s in streams], timeout=300)) == 5000


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_num_learners_must_be_a_positive_integer(bad: Any) -> None:
    with pytest.raises(ConfigError, match="num_learners"):
        split_learner_batches(ROWS, PreLearnerConfig(), bad)


def test_bad_batch_rows_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="batch_rows"):
        split_learner_batches(ROWS, PreLearnerConfig(), 2, batch_rows=0)


def test_without_batch_rows_the_blocks_are_the_streams(ray_local: Any) -> None:
    """No re-cut: Ray's own output blocks are handed out (the shipped data is one block)."""
    cfg = PreLearnerConfig().with_updates(SAMPLE_ALL)
    seen = _drain_in_threads(split_learner_batches(ROWS, cfg, 2))
    everything = [k for share in seen for k in share]
    assert len(everything) == 5000 == len(set(everything))


def test_the_learner_stream_takes_no_stats_sink() -> None:
    """``stats_sink`` was threaded through the stream's signatures and set by no caller (the
    Ape-X feed keeps its own counters): it is gone, not silently accepted."""
    import inspect

    from offline_prelearner.jobs.stream import learner_stream

    assert "stats_sink" not in inspect.signature(learner_stream.build_dataset).parameters
    for actor in (learner_stream.OfflinePreLearnerActor, learner_stream.ReadingPreLearnerActor):
        assert "stats_sink" not in inspect.signature(actor.__init__).parameters
