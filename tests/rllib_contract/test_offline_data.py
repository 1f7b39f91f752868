"""RLlibOfflineData: a Learner gets the batches RLlib's path would give it, from memory.

Run by RLlib's interpreter (see conftest.py). BC on the shipped heuristic CartPole rows, one local
Learner, ``map_batches_kwargs={"concurrency": 1}`` (the session's Ray has 2 CPUs: RLlib's default
of 2 actors would hold both and starve the reads).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.bc import BCConfig
from ray.rllib.utils.minibatch_utils import MiniBatchRayDataIterator

from offline_prelearner.rllib import RLlibOfflineData, RLlibPreLearner, _HeldBatches

ROWS = Path(__file__).resolve().parents[2] / "datasets" / "cartpole-v1-heuristic" / "rows"
BATCH = 256
ENV = gym.make("CartPole-v1")
PRELEARNERS = {"rllib": None, "ours": RLlibPreLearner.configure()}


def _algo(prelearner: Any, data_class: type = RLlibOfflineData) -> Any:
    offline: dict[str, Any] = {
        "input_": [str(ROWS)],
        "dataset_num_iters_per_learner": 5,
        "map_batches_kwargs": {"concurrency": 1},
        "offline_data_class": data_class,
    }
    if prelearner is not None:
        offline["prelearner_class"] = prelearner
    config = (
        BCConfig()
        .environment(observation_space=ENV.observation_space, action_space=ENV.action_space)
        .training(train_batch_size_per_learner=BATCH, lr=1e-2)
        .learners(num_learners=0)
        .offline_data(**offline)
        .debugging(seed=0)
    )
    return config.build_algo()


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def _same_batches(got: list[dict[str, Any]], ref: list[dict[str, Any]]) -> None:
    """The same batches, each whole, in any order: Ray Data's own iterator may hand a pass's
    blocks in another order than the dataset's (its prefetch threads finish out of order)."""

    def key(batch: dict[str, Any]) -> bytes:
        return bytes(np.ascontiguousarray(batch["default_policy/obs"].numpy()).data)

    assert len(got) == len(ref)
    by_key = {key(b): b for b in ref}
    assert len(by_key) == len(ref)  # no two batches alike: the comparison below is one to one
    for batch in got:
        _same(batch, by_key.pop(key(batch)))


@pytest.fixture(scope="module")
def trained(ray_session: Any) -> Any:
    """BC with our prelearner and RLlibOfflineData after three iterations (the first maps)."""
    algo = _algo(PRELEARNERS["ours"])
    results = [algo.train() for _ in range(2)]
    yield algo, results
    algo.stop()


def test_the_learner_trains_from_held_batches(trained: Any) -> None:
    algo, results = trained
    held = algo.learner_group._learner.iterator._iterator
    assert isinstance(held, _HeldBatches)
    assert held.dataset is algo.offline_data.data
    for result in results:
        learners = result["learners"]
        assert learners["__all_modules__"]["num_env_steps_trained"] == 5 * BATCH
        assert np.isfinite(learners["default_policy"]["policy_loss"])


def test_held_batches_are_ray_datas_batches(trained: Any) -> None:
    algo, _ = trained
    data = algo.offline_data.data
    held = _HeldBatches(data)
    for size, drop_last in [(BATCH, False), (1000, False), (1000, True)]:
        ref = list(data.iter_torch_batches(batch_size=size, drop_last=drop_last))
        got = held.iter_torch_batches(batch_size=size, drop_last=drop_last)
        assert len(got) > 1
        _same_batches(got, ref)
        lengths = [len(b["default_policy/obs"]) for b in got]
        # a pass's last batch is shorter where the rows are not a multiple of the size, or dropped
        assert lengths[:-1] == [size] * (len(got) - 1)
        assert (lengths[-1] == size) if drop_last else (sum(lengths) == data.count())
    assert data.count() % 1000 != 0
    assert held.iter_torch_batches(batch_size=1000) is held.iter_torch_batches(batch_size=1000)


def test_rllibs_iterator_over_held_batches_restarts_each_pass(trained: Any) -> None:
    # RLlib's MiniBatchRayDataIterator restarts its epoch iterator at the end of a pass: over
    # the held list a pass holds Ray Data's batches, and the next pass starts again from the
    # first batch (3 updates of 5 batches here: 12 batches a pass, then 3 of the next).
    algo, _ = trained
    data = algo.offline_data.data
    seqs = []
    for source in (data.iterator(), _HeldBatches(data)):
        it = MiniBatchRayDataIterator(
            iterator=source, device="cpu", minibatch_size=BATCH, num_iters=5
        )
        batches = [b.policy_batches["default_policy"] for _ in range(3) for b in it]
        seqs.append([{f"default_policy/{k}": v[k] for k in v} for v in batches])
    ray_side, held_side = seqs
    per_pass = len(_HeldBatches(data).iter_torch_batches(batch_size=BATCH))
    assert len(ray_side) == len(held_side) == 15 and per_pass == 12
    _same_batches(held_side[:per_pass], ray_side[:per_pass])
    for a, b in zip(held_side[per_pass:], held_side[:3], strict=True):
        _same(a, b)


def test_over_max_bytes_the_learner_reads_through_ray_data(
    trained: Any, caplog: pytest.LogCaptureFixture
) -> None:
    algo, _ = trained
    od = algo.offline_data
    held, od._held, od._hold_checked, od.max_bytes = od._held, None, False, 1
    try:
        with caplog.at_level(logging.INFO, logger="offline_prelearner.rllib"):
            got = od.sample(BATCH, return_iterator=True)
        assert len(got) == 1 and not isinstance(got[0], _HeldBatches)
        assert got[0] is od.batch_iterators  # RLlib's own iterator over the mapped data
        assert od._held is None
        assert any("over RLlibOfflineData.max_bytes (1)" in r.getMessage() for r in caplog.records)
    finally:
        od._held, od.max_bytes = held, RLlibOfflineData.max_bytes


def test_shards_and_held_batches_pickle_as_the_dataset(trained: Any) -> None:
    import pickle

    algo, _ = trained
    od = algo.offline_data
    # more than one Learner: RLlib's streaming split, as RLlib's class returns it
    od.batch_iterators = None
    split = od.sample(BATCH, return_iterator=True, num_shards=2)
    assert len(split) == 2 and not any(isinstance(s, _HeldBatches) for s in split)
    od.batch_iterators = None
    held = algo.learner_group._learner.iterator._iterator
    again = pickle.loads(pickle.dumps(held))  # what a remote Learner receives
    assert again._lists == {} and held._lists
    _same_batches(
        again.iter_torch_batches(batch_size=BATCH),
        held.iter_torch_batches(batch_size=BATCH, device="cpu"),
    )
