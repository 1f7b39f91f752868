"""EpisodeReplayBuffer: uniform frequencies, the sampler hooks' contract, errors, stats, seeds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from buffer_helpers import RecordingSampler, make_episode, ref
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.episodes.episode import Episode
from offline_prelearner.errors import ConfigError, EmptyBufferError, EpisodeValidationError
from offline_prelearner.replay import INDICES, EpisodeReplayBuffer
from offline_prelearner.replay.samplers import Sampler, Uniform, ValidStarts
from offline_prelearner.replay.units import FrameStack, NStep, Sequence, Transition


def chi_square_critical(df: int, z: float = 3.09) -> float:
    """Upper ~0.1% point of chi-square(df) (Wilson-Hilferty)."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


@pytest.mark.parametrize("unit", [Transition(), NStep(3, 0.9), NStep((2, 4), 0.9)])
def test_uniform_frequencies_are_uniform_over_valid_starts(unit):
    lengths = [1, 2, 5, 9, 13, 4]
    ends = ["terminated", "truncated", "ongoing", "terminated", "ongoing", "truncated"]
    buf = EpisodeReplayBuffer(200, unit=unit, seed=1234)
    buf.add(
        [
            make_episode(f"e{i}", n, end, seed=i)
            for i, (n, end) in enumerate(zip(lengths, ends, strict=True))
        ]
    )
    valid = buf.valid_starts()
    cells = {int(s): i for i, s in enumerate(valid.slots())}
    draws = 60_000
    slots = buf.storage.resolve(buf.sample(draws)[INDICES])[0]
    assert set(slots.tolist()) <= set(cells)
    counts = np.bincount([cells[int(s)] for s in slots], minlength=len(cells))
    expected = draws / len(cells)
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < chi_square_critical(len(cells) - 1), (chi2, counts)


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(6, 60),
    plan=st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, 8), st.booleans()), min_size=1, max_size=25
    ),
    unit=st.sampled_from(
        [
            Transition(),
            NStep(3, 0.9),
            NStep((1, 4), 0.5),
            Sequence(3, 1),
            FrameStack(2, NStep(2, 0.9)),
        ]
    ),
)
def test_sampler_hooks_track_exactly_the_valid_starts(capacity, plan, unit):
    """The contract prioritized samplers rely on: on_add/on_evict keep them in sync."""
    sampler = RecordingSampler()
    buf = EpisodeReplayBuffer(capacity, sampler=sampler, unit=unit, seed=0)
    lanes: dict[int, Episode] = {}  # lane -> the last fragment streamed in it
    count = 0
    for lane, n, finish in plan:
        prev = lanes.get(lane)
        if prev is not None and not prev.is_done:
            eid, t0, obs0 = prev.id, prev.t_end, prev.observations[-1:]
        else:
            count += 1
            eid, t0 = count, 0
            obs0 = np.random.default_rng(count).standard_normal((1, 2)).astype(np.float32)
        rest = make_episode(eid, n, seed=count * 100 + t0)
        ep = Episode(
            id=eid,
            observations=np.concatenate([obs0, rest.observations[1:]]),
            actions=rest.actions,
            rewards=rest.rewards,
            truncated=finish,
            t_started=t0,
        )
        lanes[lane] = ep
        try:
            buf.add(ep)
        except EpisodeValidationError as e:
            assert e.reason == "too_long"
            lanes.pop(lane)
        assert sampler.held == set(buf.valid_starts().slots().tolist())


def test_batched_add_reports_the_net_change():
    sampler = RecordingSampler()
    buf = EpisodeReplayBuffer(30, sampler=sampler, seed=0)
    buf.add([make_episode(i, 6, seed=i) for i in range(20)])  # most evicted within the call
    assert sampler.held == set(buf.valid_starts().slots().tolist())


def test_learning_starts_and_empty_buffer():
    buf = EpisodeReplayBuffer(100, seed=0, learning_starts=10)
    with pytest.raises(EmptyBufferError, match="learning_starts"):
        buf.sample(4)
    buf.add(make_episode("a", 6))
    with pytest.raises(EmptyBufferError, match="6 timesteps added"):
        buf.sample(4)
    buf.add(make_episode("b", 6))
    assert len(buf.sample(4)) == 4
    nb = EpisodeReplayBuffer(100, unit=NStep(5, 0.9), seed=0)
    with pytest.raises(EmptyBufferError):
        nb.sample(1)
    nb.add(make_episode("a", 3, "ongoing"))  # no complete 5-step window yet
    with pytest.raises(EmptyBufferError, match="nothing to sample"):
        nb.sample(1)


def test_sample_columns_weights_and_indices():
    buf = EpisodeReplayBuffer(100, unit=NStep(2, 0.9), seed=3)
    buf.add([make_episode("a", 5), make_episode("b", 7, "truncated", seed=1)])
    b = buf.sample(16)
    for col in (
        "obs",
        "actions",
        "rewards",
        "new_obs",
        "terminateds",
        "truncateds",
        "n_step",
        "weights",
        "eps_id",
        "t",
        INDICES,
    ):
        assert col in b and len(b[col]) == 16
    assert (b["weights"] == 1).all() and b["weights"].dtype == np.float32
    slots, ok = buf.storage.resolve(b[INDICES])
    assert ok.all()
    np.testing.assert_array_equal(buf.storage.columns["obs"][slots], b["obs"])


def test_stats_count_everything():
    buf = EpisodeReplayBuffer(25, seed=0)
    ep = make_episode("a", 5)
    # Slots: a 0..5, b 6..12, c 13..22; d needs 3 and wraps to 0, evicting a.
    buf.add([ep, ep, make_episode("b", 6), make_episode("c", 9), make_episode("d", 2)])
    buf.sample(7)
    s = buf.stats()
    assert s["duplicates_dropped"] == 1 and s["samples_drawn"] == 7
    assert s["episodes_added"] == 4 and s["timesteps_added"] == 22
    assert s["episodes_evicted"] == 1 and s["timesteps_evicted"] == 5
    assert s["episodes_held"] == 3 and s["timesteps_held"] == 17 == len(buf)
    assert s["sampleable"] == 17


def test_same_seed_same_samples_and_sampler_protocol():
    eps = [make_episode(i, 3 + i, seed=i) for i in range(10)]
    a = EpisodeReplayBuffer(500, unit=NStep((1, 3), 0.9), seed=7)
    b = EpisodeReplayBuffer(500, unit=NStep((1, 3), 0.9), seed=7)
    a.add(eps)
    b.add(eps)
    for _ in range(3):
        assert a.sample(32) == b.sample(32)
    assert isinstance(Uniform(), Sampler)
    assert isinstance(a.valid_starts(), ValidStarts)


def test_bad_arguments():
    with pytest.raises(ConfigError, match="learning_starts"):
        EpisodeReplayBuffer(10, learning_starts=-1)
    with pytest.raises(ConfigError, match="sampler"):
        EpisodeReplayBuffer(10, sampler=object())  # type: ignore[arg-type]
    buf = EpisodeReplayBuffer(10)
    buf.add(make_episode("a", 3))
    with pytest.raises(ConfigError, match="batch_size"):
        buf.sample(0)
    with pytest.raises(TypeError, match="Episode"):
        buf.add([{"obs": 1}])  # type: ignore[list-item]


@pytest.mark.rllib_data
def test_real_rllib_episodes_and_rows_give_the_same_n_step_samples(shared_data):
    """CartPole episodes RLlib 2.60 recorded, read both as msgpack episodes and as rows: each
    buffer's n-step samples match the plain-loop reference on the episode they came from."""
    import pyarrow.parquet as pq

    from offline_prelearner.config import ReadConfig
    from offline_prelearner.io.readers import make_reader

    sources = {
        "episodes": shared_data / "cartpole-v1_episodes_msgpack.parquet",
        "rows": shared_data / "cartpole-v1_rows_uncompressed.parquet",
    }
    for fmt, path in sources.items():
        eps = make_reader(ReadConfig(format=fmt)).read(pq.read_table(path), str(path)).episodes
        assert eps, fmt
        by_id = {str(e.id): e for e in eps}
        buf = EpisodeReplayBuffer(sum(len(e) + 1 for e in eps), unit=NStep(3, 0.99), seed=0)
        buf.add(eps)
        assert buf.stats()["timesteps_held"] == sum(len(e) for e in eps)
        b = buf.sample(500)
        for i in range(len(b)):
            ep = by_id[str(b["eps_id"][i])]
            k = int(b["t"][i]) - ep.t_started
            want = ref.nstep(ep, k, 3, 0.99)
            assert int(b["n_step"][i]) == want["n_step"]
            assert b["rewards"][i] == pytest.approx(want["rewards"])
            assert bool(b["terminateds"][i]) == want["terminateds"]
            np.testing.assert_array_equal(b["new_obs"][i], want["new_obs"])


def test_a_buffer_too_big_for_this_machine_is_a_clear_error_before_allocating() -> None:
    import os

    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    frame = np.zeros((84, 84, 4), np.uint8)
    capacity = memory // frame.nbytes + 1  # the observations alone exceed physical memory
    ep = Episode(
        id="px",
        observations=np.stack([frame] * 3),
        actions=np.zeros(2, np.int64),
        rewards=np.zeros(2),
        terminated=True,
    )
    buf = EpisodeReplayBuffer(capacity, Uniform())
    with pytest.raises(ConfigError, match=r"buffer\.capacity=.* slots x 28,240 bytes per slot"):
        buf.add(ep)
    assert len(buf) == 0 and not buf.storage.columns
    small = EpisodeReplayBuffer(100, Uniform())
    small.add(ep)
    assert len(small) == 2
