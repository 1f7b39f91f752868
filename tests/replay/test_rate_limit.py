"""Sample-to-insert rate limiting and learning_starts, against plain exact arithmetic."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from buffer_helpers import make_episode
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.errors import ConfigError, EmptyBufferError
from offline_prelearner.replay import (
    EpisodeReplayBuffer,
    MixInReplayBuffer,
    RateLimitExceeded,
    SampleToInsertRatio,
)
from offline_prelearner.replay.units import Sequence


def allowed_ref(ratio: str, burst: int, added: int, drawn: int, starts: int) -> int:
    """floor(ratio * max(0, added - learning_starts) + burst) - drawn, in exact arithmetic."""
    credit = Fraction(ratio) * max(0, added - starts) + burst
    return max(0, math.floor(credit) - drawn)


@settings(max_examples=80, deadline=None)
@given(
    ratio=st.sampled_from(["0.1", "0.25", "0.3", "1", "2.5", "8"]),
    burst=st.integers(0, 20),
    starts=st.integers(0, 30),
    ops=st.lists(st.tuples(st.booleans(), st.integers(0, 12)), min_size=1, max_size=40),
)
def test_sampling_is_refused_exactly_when_the_ratio_would_be_exceeded(ratio, burst, starts, ops):
    limit = SampleToInsertRatio(float(ratio), burst)
    buf = EpisodeReplayBuffer(10_000, rate_limit=limit, learning_starts=starts, seed=0)
    added = drawn = refused = 0
    for i, (is_add, n) in enumerate(ops):
        if is_add:
            buf.add(make_episode(i, n, seed=i))
            added += n
            continue
        size = n + 1
        if added < starts:
            with pytest.raises(EmptyBufferError, match="learning_starts") as exc:
                buf.sample(size)
            assert type(exc.value) is EmptyBufferError  # not a rate-limit refusal
            continue
        if added == 0:
            continue
        allowed = allowed_ref(ratio, burst, added, drawn, starts)
        assert buf.samples_allowed() == allowed
        if size <= allowed:
            assert len(buf.sample(size)) == size
            drawn += size
            continue
        with pytest.raises(RateLimitExceeded) as exc:
            buf.sample(size)
        refused += 1
        assert exc.value.allowed == allowed
        # `missing` is the least number of further timesteps after which it is allowed.
        m = exc.value.missing
        assert m >= 1 and allowed_ref(ratio, burst, added + m, drawn, starts) >= size
        assert m == 1 or allowed_ref(ratio, burst, added + m - 1, drawn, starts) < size
    s = buf.stats()
    assert (s["samples_drawn"], s["rate_limited"], s["timesteps_added"]) == (
        drawn,
        refused,
        added,
    )


def test_refusal_draws_nothing_and_adding_the_missing_steps_unblocks():
    buf = EpisodeReplayBuffer(1000, rate_limit=SampleToInsertRatio(0.5, burst=2), seed=3)
    buf.add(make_episode("a", 10))
    twin = EpisodeReplayBuffer(1000, rate_limit=SampleToInsertRatio(0.5, burst=2), seed=3)
    twin.add(make_episode("a", 10))
    assert len(buf.sample(7)) == 7  # 0.5 * 10 + 2 = 7 allowed
    twin.sample(7)
    with pytest.raises(RateLimitExceeded, match="add about 8 timesteps") as exc:
        buf.sample(4)
    assert isinstance(exc.value, EmptyBufferError) and exc.value.missing == 8
    buf.add(make_episode("b", 7, seed=1))  # one short
    twin.add(make_episode("b", 7, seed=1))
    with pytest.raises(RateLimitExceeded):
        buf.sample(4)
    buf.add(make_episode("c", 1, seed=2))
    twin.add(make_episode("c", 1, seed=2))
    assert buf.sample(4) == twin.sample(4)  # the refusals consumed no randomness
    assert buf.stats()["rate_limited"] == 2 and "rate_limited" not in EpisodeReplayBuffer(5).stats()


def test_rows_not_timesteps_count_and_duplicates_earn_nothing():
    buf = EpisodeReplayBuffer(1000, unit=Sequence(10), rate_limit=SampleToInsertRatio(0.2), seed=0)
    ep = make_episode("a", 50)
    buf.add(ep)
    assert buf.sample(10)["obs"].shape[:2] == (10, 10)  # 10 sequences of 10 steps: 10 rows
    buf.add(ep)  # a duplicate: no credit
    with pytest.raises(RateLimitExceeded):
        buf.sample(1)


def test_learning_starts_gates_before_the_rate_limit():
    buf = EpisodeReplayBuffer(100, learning_starts=10, rate_limit=SampleToInsertRatio(1.0))
    buf.add(make_episode("a", 9))
    with pytest.raises(EmptyBufferError, match="9 timesteps added, sampling starts after"):
        buf.sample(1)
    buf.add(make_episode("b", 3, seed=1))  # 12 added, credit from 10 on: 2 rows
    assert len(buf.sample(2)) == 2
    with pytest.raises(RateLimitExceeded):
        buf.sample(1)


def test_checkpoint_keeps_the_budget(tmp_path):
    def build():
        return MixInReplayBuffer(500, replay_ratio=0.5, rate_limit=SampleToInsertRatio(1.5), seed=2)

    a = build()
    a.add(make_episode("a", 20))
    a.sample()  # 20 rows of 30 allowed
    a.add(make_episode("b", 24, seed=1))
    with pytest.raises(RateLimitExceeded):
        a.sample()  # 44 added: 66 allowed, 20 drawn; 24 new + 24 replayed = 48 > 46
    a.save(tmp_path / "c")
    b = build()
    b.load(tmp_path / "c")
    assert a.stats() == b.stats() and a.samples_allowed() == b.samples_allowed()


def test_bad_arguments():
    for bad in (0, -1.0, float("inf"), float("nan"), True, "1"):
        with pytest.raises(ConfigError, match="max_samples_per_insert"):
            SampleToInsertRatio(bad)  # type: ignore[arg-type]
    for bad in (-1, 1.5, False):
        with pytest.raises(ConfigError, match="burst"):
            SampleToInsertRatio(1.0, bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="rate_limit"):
        EpisodeReplayBuffer(10, rate_limit=2.0)  # type: ignore[arg-type]
    assert EpisodeReplayBuffer(10).samples_allowed() is None
