"""MixInReplayBuffer: every new step exactly once on the next sample, the replay ratio exactly,
old-only replay, any unit and sampler, edge cases, checkpoints -- against plain-loop models."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from buffer_helpers import make_episode, ref
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.episodes.episode import Episode
from offline_prelearner.errors import ConfigError, EmptyBufferError, EpisodeValidationError
from offline_prelearner.replay import (
    INDICES,
    MixInReplayBuffer,
    Reservoir,
    SampleToInsertRatio,
)
from offline_prelearner.replay.samplers import Prioritized, Uniform
from offline_prelearner.replay.units import FrameStack, NStep, Sequence, Transition


def window(unit) -> int:
    """How many forward steps a start needs stored (plain restatement of each unit's rule)."""
    if isinstance(unit, FrameStack):
        return window(unit.unit)
    if isinstance(unit, NStep):
        return unit.bounds[1]
    if isinstance(unit, Sequence):
        return unit.length
    return 1


def valid_keys(buf, unit) -> set[tuple[object, int]]:
    """(eps_id, t) of every valid start, by a plain loop over the held episodes."""
    out = set()
    for ep in buf.storage.episodes():
        for k in range(ref.valid_count(len(ep), ep.is_done, window(unit))):
            out.add((ep.id, ep.t_started + k))
    return out


def row_keys(batch) -> list[tuple[object, int]]:
    t = batch["t"]
    if t.ndim == 2:  # sequences: t of the first loss step
        first = np.argmax(batch["loss_mask"], axis=1)
        t = t[np.arange(len(t)), first]
    return [(e, int(x)) for e, x in zip(batch["eps_id"].tolist(), t.tolist(), strict=True)]


class Model:
    """The mix-in rule in plain Python: new = valid now minus valid at the last sample."""

    def __init__(self, ratio: float):
        self.ratio = ratio
        self.last: set = set()
        self.debt = 0.0

    def expect(self, now: set) -> tuple[set, set, int]:
        new = now - self.last
        old = now & self.last
        k = 0
        if 0 < self.ratio < 1 and old:
            self.debt += len(new) * self.ratio / (1 - self.ratio)
            k = math.floor(self.debt + 0.5)
            self.debt -= k
        self.last = now
        return new, old, k


UNITS = [Transition(), NStep(3, 0.9), NStep((1, 4), 0.5), Sequence(3, 1), FrameStack(2, NStep(2))]


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(12, 80),
    ratio=st.sampled_from([0.0, 0.2, 0.5, 0.75, 0.9]),
    unit=st.sampled_from(UNITS),
    prioritized=st.booleans(),
    reservoir=st.booleans(),
    plan=st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 7), st.booleans(), st.booleans()),
        min_size=1,
        max_size=30,
    ),
)
def test_every_new_step_once_and_replay_only_old(
    capacity, ratio, unit, prioritized, reservoir, plan
):
    sampler = Prioritized(0.6, 0.4) if prioritized else Uniform()
    eviction = Reservoir(seed=3, headroom=0.2) if reservoir else None
    buf = MixInReplayBuffer(capacity, sampler, unit, replay_ratio=ratio, seed=1, eviction=eviction)
    model = Model(ratio)
    lanes: dict[int, Episode] = {}
    count = 0
    for lane, n, finish, sample in plan:
        prev = lanes.get(lane)
        if prev is not None and not prev.is_done and buf.storage.row_of_id(prev.id) is not None:
            eid, t0, obs0 = prev.id, prev.t_end, prev.observations[-1]
        else:
            count += 1
            eid, t0, obs0 = f"ep{count}", 0, None
        ep = make_episode(eid, n, "truncated" if finish else "open", count * 97 + t0, t0, obs0)
        lanes[lane] = ep
        try:
            buf.add(ep)
        except EpisodeValidationError as e:
            assert e.reason == "too_long"
            lanes.pop(lane)
        if not sample:
            continue
        now = valid_keys(buf, unit)
        pending = now - model.last
        assert buf.stats()["new_pending"] == len(pending)
        if not pending:
            with pytest.raises(EmptyBufferError, match="no new data"):
                buf.sample()
            continue
        new, old, k = model.expect(now)
        batch = buf.sample()
        assert batch.info == {"new": len(new), "replayed": k}
        keys = row_keys(batch)
        assert len(keys) == len(new) + k
        assert Counter(keys[: len(new)]) == Counter(new)  # every new step, exactly once
        assert set(keys[len(new) :]) <= old  # replay draws old steps only
        w = batch["weights"]
        assert (w[: len(new)] == 1).all() and (w > 0).all() and (w <= 1).all()
    if prioritized:  # the trees ended in sync with the valid starts
        tree = buf.sampler.sum_tree
        if tree is not None:
            live = set(buf.valid_starts().slots().tolist())
            assert set(np.flatnonzero(tree.values()).tolist()) == live


@pytest.mark.parametrize(
    ("ratio", "replayed"), [(0.0, 0), (0.25, 4), (0.5, 12), (0.75, 36), (0.9, 108)]
)
def test_exact_ratio_per_batch(ratio, replayed):
    buf = MixInReplayBuffer(10_000, replay_ratio=ratio, seed=0)
    buf.add([make_episode(f"old{i}", 10, seed=i) for i in range(20)])
    first = buf.sample()  # no old data yet: only the new steps
    assert first.info == {"new": 200, "replayed": 0}
    for j in range(5):
        buf.add([make_episode(f"new{j}", 12, seed=100 + j)])
        b = buf.sample()
        assert b.info == {"new": 12, "replayed": replayed}
        assert len(b) == 12 + replayed
        assert b.info["replayed"] / len(b) == pytest.approx(ratio)
        assert set(b["eps_id"][:12].tolist()) == {f"new{j}"}
        np.testing.assert_array_equal(np.sort(b["t"][:12]), np.arange(12))


def test_rounding_is_carried_so_totals_keep_the_ratio():
    buf = MixInReplayBuffer(10_000, replay_ratio=0.3, seed=0)
    buf.add(make_episode("seed", 50))
    buf.sample()
    new_total = replay_total = 0
    rng = np.random.default_rng(0)
    for j in range(200):
        buf.add(make_episode(j, int(rng.integers(1, 6)), seed=j))
        b = buf.sample()
        new_total += b.info["new"]
        replay_total += b.info["replayed"]
        # replayed / (replayed + new) = 0.3  <=>  replayed = new * 3 / 7; off by < 1 overall
        assert abs(replay_total - new_total * 0.3 / 0.7) <= 0.5 + 1e-9
    assert buf.stats()["new_drawn"] == new_total + 50
    assert buf.stats()["replayed_drawn"] == replay_total


def test_ratio_one_is_plain_replay_including_new_data():
    buf = MixInReplayBuffer(1000, replay_ratio=1.0, seed=4)
    buf.add(make_episode("a", 5))
    with pytest.raises(ConfigError, match="batch_size"):
        buf.sample()
    b = buf.sample(64)
    assert b.info == {"new": 0, "replayed": 64} and set(b["eps_id"].tolist()) == {"a"}
    buf.add(make_episode("b", 5, seed=1))
    assert "b" in set(buf.sample(256)["eps_id"].tolist())  # new data is replayable at once


def test_prioritized_replay_never_draws_pending_steps_and_takes_updates():
    buf = MixInReplayBuffer(5000, Prioritized(1.0, 0.5), replay_ratio=0.8, seed=2)
    buf.add([make_episode(f"o{i}", 20, seed=i) for i in range(10)])
    buf.sample()
    b = None
    for j in range(30):
        buf.add(make_episode(f"n{j}", 3, seed=50 + j))
        b = buf.sample()
        assert b.info == {"new": 3, "replayed": 12}
        assert not {f"n{j}"} & set(b["eps_id"][3:].tolist())
        assert buf.update_priorities(b[INDICES], np.full(len(b), 5.0)) == len(b)
    slots = buf.storage.resolve(b[INDICES][:3])[0]
    probs = buf.sampler.probabilities(slots)
    assert (probs > 0).all()  # the emitted new steps are now replayable


def test_edges_and_bad_arguments():
    with pytest.raises(ConfigError, match="replay_ratio"):
        MixInReplayBuffer(100, replay_ratio=1.5)
    with pytest.raises(ConfigError, match="replay_ratio"):
        MixInReplayBuffer(100, replay_ratio=True)  # type: ignore[arg-type]
    buf = MixInReplayBuffer(100, replay_ratio=0.5, seed=0, learning_starts=8)
    buf.add(make_episode("a", 5))
    with pytest.raises(EmptyBufferError, match="learning_starts"):
        buf.sample()
    buf.add(make_episode("b", 5, seed=1))
    with pytest.raises(ConfigError, match="without batch_size"):
        buf.sample(32)
    assert buf.sample().info == {"new": 10, "replayed": 0}  # all data since the start
    with pytest.raises(EmptyBufferError, match="no new data"):
        buf.sample()
    buf.add(make_episode("a", 5))  # a duplicate is not new data
    with pytest.raises(EmptyBufferError, match="no new data"):
        buf.sample()
    u = MixInReplayBuffer(100, replay_ratio=0.5)
    with pytest.raises(TypeError, match="priorities"):
        u.update_priorities([0], [1.0])


def test_streaming_episode_steps_are_new_when_their_window_completes():
    buf = MixInReplayBuffer(200, unit=NStep(3, 0.9), replay_ratio=0.0, seed=0)
    a = make_episode("s", 4, "open", seed=1)
    buf.add(a)  # 4 steps stored, starts 0 and 1 have their 3-step window
    assert sorted(buf.sample()["t"].tolist()) == [0, 1]
    b = make_episode("s", 2, "terminated", seed=2, t_started=4, obs0=a.observations[-1])
    buf.add(b)  # ended: starts 2..5 are new
    assert sorted(buf.sample()["t"].tolist()) == [2, 3, 4, 5]


def test_rate_limit_applies_to_the_whole_mixed_batch():
    buf = MixInReplayBuffer(1000, replay_ratio=0.5, seed=0, rate_limit=SampleToInsertRatio(1.5))
    # (steps added, rows the batch needs): credit floor(1.5 * added) must cover drawn + rows
    buf.add(make_episode("a", 10))
    assert len(buf.sample()) == 10  # 10 added: 15 allowed; no old data, 10 new rows
    buf.add(make_episode("b", 2, seed=1))
    assert len(buf.sample()) == 4  # 12 added: 18 allowed >= 10 + 4
    buf.add(make_episode("c", 1, seed=2))
    assert len(buf.sample()) == 2  # 13: 19 >= 14 + 1 new + 1 carried
    buf.add(make_episode("d", 3, seed=3))
    assert len(buf.sample()) == 6  # 16: 24 >= 16 + 6
    buf.add(make_episode("e", 6, seed=4))
    with pytest.raises(EmptyBufferError, match="max_samples_per_insert"):
        buf.sample()  # 22: 33 < 22 + 12
    assert buf.stats()["new_pending"] == 6  # nothing was consumed
    assert buf.stats()["rate_limited"] == 1


SAMPLERS = {"uniform": Uniform, "prioritized": lambda: Prioritized(0.7, 0.5)}


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
@pytest.mark.parametrize("unit", [NStep((1, 3), 0.9), FrameStack(2)], ids=repr)
def test_checkpoint_keeps_pending_steps_and_carried_rounding(tmp_path, sampler, unit):
    def build(ratio=0.3):
        return MixInReplayBuffer(300, SAMPLERS[sampler](), unit, replay_ratio=ratio, seed=9)

    a = build()
    for j in range(12):
        a.add(make_episode(j, 3 + j % 4, seed=j))
        a.sample()
    a.add([make_episode("p", 4, "open", seed=77), make_episode("q", 2, seed=78)])
    a.save(tmp_path / "ck")
    b = build()
    b.load(tmp_path / "ck")
    assert a.stats() == b.stats() and a.stats()["new_pending"] > 0
    assert a.sample() == b.sample()
    for j in range(3):
        ep = make_episode(f"z{j}", 5, seed=200 + j)
        a.add(ep)
        b.add(ep)
        assert a.sample() == b.sample()
    with pytest.raises(ConfigError, match="replay_ratio"):
        build(0.5).load(tmp_path / "ck")
