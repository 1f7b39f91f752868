"""Reservoir eviction: the held set against a plain sort-and-cumsum reference on random streams
(fragments, duplicates, re-sent evicted episodes), inclusion probabilities against plain
algorithm R, compaction, sampler hooks, priorities, checkpoints and errors."""

from __future__ import annotations

import hashlib
import math
import random

import numpy as np
import pytest
from buffer_helpers import RecordingSampler, make_episode, ref
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.episodes.episode import Episode
from offline_prelearner.errors import ConfigError, EpisodeValidationError
from offline_prelearner.replay import (
    INDICES,
    EpisodeReplayBuffer,
    Reservoir,
)
from offline_prelearner.replay.samplers import Prioritized
from offline_prelearner.replay.units import NStep, Sequence, Transition


# ---------------------------------------------------------------------- plain references
def ref_key(seed: int, eid) -> float:
    """The documented key: 53 bits of BLAKE2b(seed as 8 LE bytes, 'i'/'s' tag, str(id))."""
    tag = "i" if isinstance(eid, int) else "s"
    data = seed.to_bytes(8, "little") + tag.encode() + str(eid).encode()
    value = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
    return (value >> 11) / 2**53


def ref_held(seed: int, budget: int, steps: dict) -> set:
    """Longest prefix, in key order, of all episodes ever offered that fits ``budget`` slots
    (an episode of n steps takes n + 1)."""
    held, used = set(), 0
    for eid in sorted(steps, key=lambda e: ref_key(seed, e)):
        used += steps[eid] + 1
        if used > budget:
            break
        held.add(eid)
    return held


def algorithm_r(n_items: int, m: int, rng: random.Random) -> list[int]:
    """Vitter's algorithm R: a uniform m-subset of items 0..n-1 seen one at a time."""
    res: list[int] = []
    for k in range(n_items):
        if k < m:
            res.append(k)
        else:
            j = rng.randrange(k + 1)
            if j < m:
                res[j] = k
    return res


# ---------------------------------------------------------------------- the held set
@settings(max_examples=80, deadline=None)
@given(
    capacity=st.integers(10, 90),
    headroom=st.sampled_from([0.0, 0.1, 0.3]),
    seed=st.integers(0, 2**32),
    unit=st.sampled_from([Transition(), NStep(3, 0.9), Sequence(2, 1)]),
    plan=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 6), st.booleans(), st.booleans()),
        min_size=1,
        max_size=40,
    ),
    cuts=st.lists(st.booleans(), min_size=40, max_size=40),
)
def test_held_set_is_the_fitting_key_prefix_of_everything_offered(
    capacity, headroom, seed, unit, plan, cuts
):
    """Streams of new episodes, fragments (of held, evicted and refused episodes) and
    duplicates, added in batches of random size; after each batch the held set, the data, the
    budget, the sampler's view and the counters are checked."""
    res = Reservoir(seed=seed, headroom=headroom)
    sampler = RecordingSampler()
    buf = EpisodeReplayBuffer(capacity, sampler, unit, eviction=res, seed=0)
    st_ = buf.storage
    budget = res.budget(capacity)
    lanes: dict[int, list[Episode]] = {}  # lane -> fragments of its current episode
    offered: dict = {}  # id -> its fragments, in order (without repeats)
    steps: dict = {}  # id -> steps offered
    batch: list[Episode] = []
    count = 0
    for (lane, n, finish, resend), cut in zip(plan, cuts, strict=False):
        frags = lanes.get(lane)
        if resend and frags:  # the same fragment again: a duplicate, or (evicted) refused
            batch.append(frags[-1])
        else:
            if frags and not frags[-1].is_done:
                last = frags[-1]
                eid, t0, obs0 = last.id, last.t_end, last.observations[-1]
                n = min(n, budget - 1 - t0)  # never too long for the reservoir
                finish = finish or n == 0
            else:
                count += 1
                eid, t0, obs0 = (count if count % 2 else f"e{count}"), 0, None
                frags = lanes[lane] = []
                n = min(n, budget - 1)
            ep = make_episode(eid, n, "truncated" if finish else "open", count * 31 + t0, t0, obs0)
            batch.append(ep)
            frags.append(ep)
            offered.setdefault(eid, []).append(ep)
            steps[eid] = ep.t_end
        if not cut:
            continue
        buf.add(batch)
        batch = []
        held = {e.id: e for e in st_.episodes()}
        assert set(held) == ref_held(seed, budget, steps)
        for eid, ep in held.items():  # held episodes are complete, from their first fragment
            want = Episode.concat_fragments(offered[eid])
            assert len(ep) == len(want) and ep.t_started == 0
            np.testing.assert_array_equal(ep.observations, want.observations)
            np.testing.assert_array_equal(ep.rewards, want.rewards)
            assert ep.is_done == want.is_done
        assert sum(len(e) + 1 for e in held.values()) == st_.held_slots <= budget
        assert sampler.held == set(buf.valid_starts().slots().tolist())
        s = buf.stats()
        assert s["timesteps_added"] - s["timesteps_evicted"] == s["timesteps_held"]
    if buf.valid_starts().total and not isinstance(unit, Sequence):
        b = buf.sample(16)
        slots, current = st_.resolve(b[INDICES])
        assert current.all()
        np.testing.assert_array_equal(st_.columns["obs"][slots], b["obs"])


def test_same_held_set_whatever_the_order_and_batching():
    eps = [make_episode(i, 1 + i % 7, seed=i) for i in range(200)]
    a = EpisodeReplayBuffer(150, eviction=Reservoir(seed=5), seed=0)
    a.add(eps)
    b = EpisodeReplayBuffer(150, eviction=Reservoir(seed=5), seed=0)
    for i in np.random.default_rng(1).permutation(200):
        b.add(eps[i])
    held = sorted(e.id for e in a.storage.episodes())
    assert held == sorted(e.id for e in b.storage.episodes())
    assert set(held) == ref_held(5, 135, {e.id: len(e) for e in eps})


# ---------------------------------------------------------------------- inclusion probability
def chi_square_critical(df: int, z: float = 3.09) -> float:
    """Upper ~0.1% point of chi-square(df) (Wilson-Hilferty)."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


def test_inclusion_probability_matches_algorithm_r():
    """N equal episodes, m fit: each is held with probability m / N, as plain algorithm R gives
    (chi-square against m / N, and a homogeneity test against algorithm R's own counts)."""
    n_eps, length, m, trials = 40, 4, 8, 1500
    eps = [make_episode(i, length, seed=i) for i in range(n_eps)]
    ours = np.zeros(n_eps)
    theirs = np.zeros(n_eps)
    for s in range(trials):
        storage = Reservoir(seed=s, headroom=0.2).make_storage(50)  # budget 40 = 8 x 5 slots
        for ep in eps:
            storage.add_episode(ep)
        held = [int(i) for i in storage.ids[storage.alive]]
        assert len(held) == m
        ours[held] += 1
        theirs[algorithm_r(n_eps, m, random.Random(s))] += 1
    expected = trials * m / n_eps
    crit = chi_square_critical(n_eps - 1)
    for counts in (ours, theirs):
        assert float(((counts - expected) ** 2 / expected).sum()) < crit, counts
    table = np.stack([ours, theirs])
    exp2 = table.sum(0, keepdims=True) * table.sum(1, keepdims=True) / table.sum()
    assert float(((table - exp2) ** 2 / exp2).sum()) < crit
    # ... and the first episodes are no likelier than the last (no FIFO / recency bias)
    assert abs(ours[:10].mean() - ours[-10:].mean()) < 4 * math.sqrt(expected)


def test_timesteps_of_long_and_short_episodes_are_held_alike():
    """With mixed lengths the bias is of order (episode slots) / budget, never more."""
    lens = [2 if i % 2 else 20 for i in range(60)]
    eps = [make_episode(i, n, seed=i) for i, n in enumerate(lens)]
    total, budget, trials = sum(n + 1 for n in lens), 360, 800
    held = np.zeros(60)
    for s in range(trials):
        storage = Reservoir(seed=s, headroom=0.0).make_storage(budget)
        for ep in eps:
            storage.add_episode(ep)
        held[[int(i) for i in storage.ids[storage.alive]]] += 1
    p = held / trials
    short, long_ = p[1::2].mean(), p[::2].mean()
    assert abs(short - budget / total) < 0.05 and abs(long_ - budget / total) < 0.05
    assert 0 <= short - long_ < 21 / budget


# ---------------------------------------------------------------------- mechanics
def test_refused_and_evicted_episodes_stay_out():
    res = Reservoir(seed=0, headroom=0.0)
    buf = EpisodeReplayBuffer(60, eviction=res, seed=0)
    eps = [make_episode(i, 4, "open", seed=i) for i in range(40)]
    buf.add(eps)
    st_ = buf.storage
    held = {e.id for e in st_.episodes()}
    out = [e for e in eps if e.id not in held]
    assert all(res.key(e.id) >= st_.threshold for e in out)
    assert all(res.key(i) < st_.threshold for i in held)
    before = buf.stats()
    buf.add(out)  # re-sent: refused again, nothing changes
    cont = [make_episode(e.id, 3, seed=99, t_started=4, obs0=e.observations[-1]) for e in out]
    buf.add(cont)  # continuations of refused episodes: refused too
    after = buf.stats()
    assert {e.id for e in st_.episodes()} == held
    assert after["episodes_rejected"] == before["episodes_rejected"] + 2 * len(out)
    assert after["timesteps_rejected"] == before["timesteps_rejected"] + 7 * len(out)


def test_compaction_keeps_data_and_marks_old_handles_stale():
    res_buf = EpisodeReplayBuffer(
        400, Prioritized(0.6, 0.4), NStep(3, 0.9), seed=0, eviction=Reservoir(seed=1)
    )
    eps = {
        i: make_episode(i, 1 + i % 9, ["terminated", "truncated"][i % 2], seed=i)
        for i in range(300)
    }
    res_buf.add([eps[i] for i in range(40)])
    old = res_buf.sample(64)
    res_buf.add([eps[i] for i in range(40, 300)])
    s = res_buf.stats()
    assert s["compactions"] >= 3 and s["episodes_relocated"] > 0
    assert res_buf.storage.is_current(old[INDICES] >> 32).sum() < 64
    applied = res_buf.sampler.update_priorities(res_buf.storage, old[INDICES], np.ones(64))
    assert applied == int(res_buf.storage.is_current(old[INDICES] >> 32).sum())
    tree = res_buf.sampler.sum_tree
    assert set(np.flatnonzero(tree.values()).tolist()) == set(
        res_buf.valid_starts().slots().tolist()
    )
    b = res_buf.sample(500)
    for i in range(len(b)):
        ep = eps[int(b["eps_id"][i])]
        want = ref.nstep(ep, int(b["t"][i]), 3, 0.9)
        assert int(b["n_step"][i]) == want["n_step"]
        assert b["rewards"][i] == pytest.approx(want["rewards"])
        np.testing.assert_array_equal(b["new_obs"][i], want["new_obs"])
        assert bool(b["terminateds"][i]) == want["terminateds"]


def test_checkpoint_round_trip_and_mismatches(tmp_path):
    eps = [make_episode(i, 1 + i % 6, seed=i) for i in range(120)]
    a = EpisodeReplayBuffer(100, unit=NStep(2, 0.9), eviction=Reservoir(seed=3), seed=1)
    a.add(eps[:80])
    a.save(tmp_path / "r")
    b = EpisodeReplayBuffer(100, unit=NStep(2, 0.9), eviction=Reservoir(seed=3), seed=7)
    b.load(tmp_path / "r")
    assert a.stats() == b.stats() and b.storage.threshold == a.storage.threshold
    assert a.sample(32) == b.sample(32)
    a.add(eps[80:])
    b.add(eps[80:])
    assert [e.id for e in a.storage.episodes()] == [e.id for e in b.storage.episodes()]
    assert a.sample(32) == b.sample(32)
    fifo = EpisodeReplayBuffer(100, unit=NStep(2, 0.9))
    with pytest.raises(ConfigError, match="Reservoir"):
        fifo.load(tmp_path / "r")
    other = EpisodeReplayBuffer(100, unit=NStep(2, 0.9), eviction=Reservoir(seed=4))
    with pytest.raises(ConfigError, match="seed=3"):
        other.load(tmp_path / "r")
    fifo.add(eps[:3])
    fifo.save(tmp_path / "f")
    with pytest.raises(ConfigError, match="FIFO"):
        b.load(tmp_path / "f")


def test_bad_arguments_and_too_long():
    for bad in (-1, 2**63, 1.5, True):
        with pytest.raises(ConfigError, match="seed"):
            Reservoir(seed=bad)  # type: ignore[arg-type]
    for bad in (-0.1, 0.95, "x"):
        with pytest.raises(ConfigError, match="headroom"):
            Reservoir(headroom=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="eviction"):
        EpisodeReplayBuffer(10, eviction="reservoir")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="leaves"):
        Reservoir(headroom=0.9).make_storage(2)
    buf = EpisodeReplayBuffer(20, eviction=Reservoir(headroom=0.5), seed=0)  # budget 10
    with pytest.raises(EpisodeValidationError, match="at most 10") as exc:
        buf.add(make_episode("big", 10))
    assert exc.value.reason == "too_long" and exc.value.where.episode_id == "big"
    a = make_episode("grow", 6, "open")
    buf.add(a)
    with pytest.raises(EpisodeValidationError, match="needs 11 slots"):
        buf.add(make_episode("grow", 4, seed=1, t_started=6, obs0=a.observations[-1]))
    assert len(buf) == 6  # nothing changed
