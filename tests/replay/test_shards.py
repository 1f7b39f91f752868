"""Replay shards: the pure pieces against plain-loop references (Hypothesis), ReplayShard without
Ray, and a few ShardedReplayBuffer tests on the session's local Ray (``ray_local``)."""

from __future__ import annotations

import math
import os
import pickle
import re
import subprocess
import sys
import zlib
from collections import Counter
from typing import Any

import numpy as np
import pytest
from conftest import make_episode, random_episodes
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.config import PreLearnerConfig
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.episodes.episode_columns import EpisodeColumns
from offline_prelearner.errors import ConfigError, DataError, EmptyBufferError
from offline_prelearner.prelearner import OfflinePreLearner
from offline_prelearner.replay.replay_buffer import as_columns
from offline_prelearner.replay.shards import ReplayShard, ShardedReplayBuffer
from offline_prelearner.replay.shards.routing import (
    compact,
    decode_handles,
    encode_handles,
    global_weights,
    handle_bits,
    shard_of,
    split_counts,
)

M64 = (1 << 64) - 1


def chi2_critical(df: int, z: float = 3.719) -> float:
    """Upper quantile of chi-square (Wilson-Hilferty); z = 3.719 is the 1e-4 normal quantile."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def config(**updates: Any) -> PreLearnerConfig:
    return PreLearnerConfig().with_updates({"seed": 0, **updates})


# ============================================================================ routing
def ref_shard(eid: Any, n: int) -> int:
    """One id, the plain way: ints through splitmix64 in Python integers, the rest CRC-32."""
    if isinstance(eid, (int, np.integer)) and not isinstance(eid, (bool, np.bool_)):
        z = (int(eid) + 0x9E3779B97F4A7C15) & M64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return (z ^ (z >> 31)) % n
    text = eid.decode("utf-8", "replace") if isinstance(eid, bytes) else str(eid)
    return zlib.crc32(text.encode("utf-8", "surrogatepass")) % n


ids = st.one_of(
    st.integers(-(2**70), 2**70),
    st.integers(0, 2**63 - 1).map(np.int64),
    st.text(max_size=12),
    st.binary(max_size=8),
    st.floats(allow_nan=False),
)


@given(st.lists(ids, max_size=40), st.integers(1, 9))
def test_shard_of_matches_a_plain_reference(eids: list[Any], n: int) -> None:
    got = shard_of(eids, n)
    assert got.dtype == np.int64
    assert got.tolist() == [ref_shard(e, n) for e in eids]


def test_shard_of_is_the_same_in_another_process() -> None:
    eids = [0, 1, 2**40, -5, "a", "eps-7f3c", "ünï"]
    code = (
        "from offline_prelearner.replay.shards.routing import shard_of;"
        f"print(shard_of({eids!r}, 7).tolist())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == str(shard_of(eids, 7).tolist()), out.stderr


def test_sequential_ids_spread_evenly() -> None:
    for eids in (list(range(20_000)), [f"ep-{i}" for i in range(20_000)]):
        counts = np.bincount(shard_of(eids, 4), minlength=4)
        assert counts.min() > 0.9 * 5000 and counts.max() < 1.1 * 5000, counts


# ============================================================================ handles
@given(st.integers(1, 300), st.data())
def test_handles_round_trip(num_shards: int, data: st.DataObject) -> None:
    top = 2 ** (63 - handle_bits(num_shards)) - 1
    local = np.array(data.draw(st.lists(st.integers(0, top), max_size=20)), np.int64)
    shard = np.array(
        data.draw(
            st.lists(st.integers(0, num_shards - 1), min_size=len(local), max_size=len(local))
        ),
        np.int64,
    )
    h = encode_handles(local, shard, num_shards)
    assert (h >= 0).all()
    back_local, back_shard = decode_handles(h, num_shards)
    assert back_local.tolist() == local.tolist() and back_shard.tolist() == shard.tolist()


def test_a_handle_too_large_for_the_shard_bits_raises() -> None:
    with pytest.raises(OverflowError):
        encode_handles(np.array([2**62]), np.array([0]), 2)
    assert encode_handles(np.array([2**62]), np.array([0]), 1).tolist() == [2**62]


# ============================================================================ split and weights
shard_masses = st.lists(st.lists(st.floats(1e-6, 1e3), max_size=6), min_size=1, max_size=5).filter(
    lambda ms: any(ms)
)


def ref_union(
    masses: list[list[float]], beta: float
) -> tuple[list[list[float]], list[list[float]]]:
    """One buffer over the union: P(i) = m_i / sum m, w_i = (P(i) / min P) ** -beta."""
    total = 0.0
    for shard in masses:
        for m in shard:
            total += m
    p = [[m / total for m in shard] for shard in masses]
    p_min = min(x for shard in p for x in shard)
    return p, [[(x / p_min) ** -beta for x in shard] for shard in p]


def draw_rows(data: st.DataObject, masses: list[list[float]]) -> list[tuple[int, int]]:
    items = [(s, i) for s, shard in enumerate(masses) for i in range(len(shard))]
    return data.draw(st.lists(st.sampled_from(items), min_size=1, max_size=30))


@given(shard_masses, st.floats(0.0, 2.0), st.data())
def test_weights_equal_one_buffer_over_the_union(masses, beta, data) -> None:
    rows = draw_rows(data, masses)
    _, ref_w = ref_union(masses, beta)
    mass = [sum(s) for s in masses]
    low = [min(s) if s else math.inf for s in masses]
    got = global_weights(
        [masses[s][i] for s, i in rows], [s for s, _ in rows], mass, mass, low, beta
    )
    want = [ref_w[s][i] for s, i in rows]
    np.testing.assert_allclose(got, want, rtol=1e-9)
    assert got.max() <= 1 + 1e-12


@given(shard_masses, st.floats(0.0, 2.0), st.data())
def test_weights_follow_the_split_actually_used(masses, beta, data) -> None:
    """A stale split (other shard shares) changes P(i) = share * in-shard probability; the
    weights follow it, with the minimum over every step a shard with a share could draw."""
    rows = draw_rows(data, masses)
    split = [data.draw(st.floats(1e-3, 10.0)) if s else 0.0 for s in masses]
    for s, _ in rows:  # a drawn row's shard had a share
        split[s] = split[s] or 1.0
    share_total = sum(split)
    probs = {}
    for s, shard in enumerate(masses):
        for i, m in enumerate(shard):
            if split[s] > 0:
                probs[s, i] = split[s] / share_total * m / sum(shard)
    p_min = min(probs.values())
    mass = [sum(s) for s in masses]
    low = [min(s) if s else math.inf for s in masses]
    got = global_weights(
        [masses[s][i] for s, i in rows], [s for s, _ in rows], split, mass, low, beta
    )
    np.testing.assert_allclose(got, [(probs[r] / p_min) ** -beta for r in rows], rtol=1e-9)


@given(st.lists(st.floats(0.0, 1e6), min_size=1, max_size=8).filter(any), st.integers(0, 5000))
def test_split_counts_sum_to_n_and_skip_empty_shards(masses, n) -> None:
    counts = split_counts(masses, n, np.random.default_rng(n))
    assert counts.sum() == n and counts.dtype == np.int64
    assert all(c == 0 for c, m in zip(counts, masses, strict=True) if m == 0)


def test_split_counts_refuses_bad_masses() -> None:
    for bad in ([0.0, 0.0], [1.0, -1.0], [1.0, math.nan], [math.inf]):
        with pytest.raises(ValueError, match="masses"):
            split_counts(bad, 4, np.random.default_rng(0))


def test_split_then_draw_in_shard_gives_the_union_probabilities() -> None:
    """Multinomial split, then each shard draws from its own distribution: per-item frequencies
    against P(i) = m_i / sum m over the union (chi-square at a fixed seed)."""
    masses = [[1.0, 5.0, 0.5], [], [2.0, 2.0], [10.0]]
    rng = np.random.default_rng(0)
    counts = Counter()
    for _ in range(4000):
        split = split_counts([sum(s) for s in masses], 16, rng)
        for s, c in enumerate(split.tolist()):
            if c:
                local = np.asarray(masses[s]) / sum(masses[s])
                counts.update((s, int(i)) for i in rng.choice(len(local), c, p=local))
    probs, _ = ref_union(masses, 0.0)
    n = 4000 * 16
    chi2 = sum(
        (counts[s, i] - n * p) ** 2 / (n * p)
        for s, ps in enumerate(probs)
        for i, p in enumerate(ps)
    )
    assert chi2 < chi2_critical(5)


# ============================================================================ columns
def same_episode(a: Episode, b: Episode) -> bool:
    return (
        a.id == b.id
        and a.agent_id == b.agent_id
        and a.module_id == b.module_id
        and (a.terminated, a.truncated, a.t_started) == (b.terminated, b.truncated, b.t_started)
        and a.infos == b.infos
        and all(
            x.dtype == y.dtype and np.array_equal(x, y)
            for x, y in zip(
                (a.observations, a.actions, a.rewards, *a.extras.values()),
                (b.observations, b.actions, b.rewards, *b.extras.values()),
                strict=True,
            )
        )
        and list(a.extras) == list(b.extras)
    )


def unpacked(items: list[Any]) -> list[Episode]:
    return [
        e for it in items for e in (it.iter_episodes() if isinstance(it, EpisodeColumns) else [it])
    ]


@settings(max_examples=40, deadline=None)
@given(
    random_episodes(any_start=True, extras=("logp",)),
    random_episodes(max_episodes=3),
    st.booleans(),
)
def test_as_columns_keeps_episodes_of_mixed_layouts_in_order(first, second, infos) -> None:
    """Episode objects travel as tables, one per run of a layout, in order; infos (which no
    buffer keeps) are left behind."""
    if infos:
        first = [e._replace(infos=[{"t": k} for k in range(len(e) + 1)]) for e in first]
    episodes = first + second
    items = list(as_columns(episodes))
    assert all(isinstance(it, EpisodeColumns) for it in items)
    back = unpacked(items)
    assert len(back) == len(episodes)
    for a, b in zip(episodes, back, strict=True):
        assert same_episode(a._replace(infos=None) if infos else a, b)


@settings(max_examples=40, deadline=None)
@given(random_episodes(max_episodes=8, extras=("logp",)), st.data())
def test_compact_keeps_the_selected_episodes_in_arrays_of_their_own(episodes, data) -> None:
    cols = EpisodeColumns.from_episodes(episodes)
    keep = np.array(data.draw(st.lists(st.booleans(), min_size=len(cols), max_size=len(cols))))
    if not keep.any():
        keep[0] = True
    small = compact(cols.select(keep))
    want = [e for e, k in zip(episodes, keep, strict=True) if k]
    assert all(same_episode(a, b) for a, b in zip(want, small.iter_episodes(), strict=True))
    assert len(small.obs) == sum(len(e) + 1 for e in want)
    assert len(small.actions) == len(small.rewards) == sum(len(e) for e in want)


# ============================================================================ ReplayShard
def transitions(episodes: list[Episode]) -> set[tuple[Any, ...]]:
    """Every (obs, action, reward, new_obs, terminated) of the episodes, the plain way."""
    out = set()
    for ep in episodes:
        for k in range(len(ep)):
            last = k == len(ep) - 1
            out.add(
                (
                    ep.observations[k].tobytes(),
                    int(ep.actions[k]),
                    float(ep.rewards[k]),
                    ep.observations[k + 1].tobytes(),
                    bool(ep.terminated and last),
                )
            )
    return out


def sampled_transitions(cols: dict[str, np.ndarray]) -> list[tuple[Any, ...]]:
    return [
        (o.tobytes(), int(a), float(r), n.tobytes(), bool(t))
        for o, a, r, n, t in zip(
            cols["obs"],
            cols["actions"],
            cols["rewards"],
            cols["new_obs"],
            cols["terminateds"],
            strict=True,
        )
    ]


def episodes_for(n: int, length: int = 6, start: int = 0) -> list[Episode]:
    return [make_episode(length + i % 3, id=f"e{start + i}", seed=start + i) for i in range(n)]


@pytest.mark.parametrize("kind", ["uniform", "prioritized", "reservoir"])
def test_shard_builds_the_buffer_the_prelearner_builds(kind: str) -> None:
    cfg = config(**{"buffer.kind": kind, "n_step": 3, "buffer.capacity": 500})
    shard = ReplayShard(cfg, 3, "m")
    mine = OfflinePreLearner(cfg).build_buffer("m")
    assert repr(shard.buffer) == repr(mine)
    # Same eviction, but seeded per shard (identical reservoirs would decide alike).
    assert re.sub(r"seed=\d+", "", repr(shard.buffer.eviction)) == re.sub(
        r"seed=\d+", "", repr(mine.eviction)
    )
    other = ReplayShard(cfg, 4, "m")
    assert shard.buffer.rng.random() != other.buffer.rng.random()  # seeded per shard


def test_shard_refuses_mixin() -> None:
    with pytest.raises(ConfigError, match="mixin"):
        ReplayShard(config(**{"buffer.kind": "mixin"}))


def test_shard_samples_real_transitions_with_their_masses() -> None:
    shard = ReplayShard(config(**{"buffer.kind": "prioritized"}))
    eps = episodes_for(8)
    shard.add([EpisodeColumns.from_episodes(eps[:4]), *eps[4:]])  # columns and Episode objects
    handles = shard.sample(50).columns["indices"]
    shard.update_priorities(handles, np.linspace(0.1, 3.0, 50))
    part = shard.sample(400)
    assert set(sampled_transitions(part.columns)) <= transitions(eps)
    sampler = shard.buffer.sampler
    slots, current = shard.buffer.storage.resolve(part.columns["indices"])
    assert current.all()
    total = sampler.sum_tree.total()
    np.testing.assert_allclose(part.row_mass, sampler.probabilities(slots) * total)
    assert part.info.mass == pytest.approx(total) and part.info.min_mass == sampler.min_tree.min()
    assert part.info.timesteps_added == sum(len(e) for e in eps)
    assert part.info.samples_drawn == 450
    assert len(shard.sample(0)) == 0
    # A learner's update rides with its next draw: applied first, then counted.
    before = shard.stats()["priority_updates"]
    assert len(shard.sample(0, part.columns["indices"][:5], np.full(5, 9.0))) == 0
    assert shard.stats()["priority_updates"] == before + 5


def test_uniform_shard_mass_is_its_valid_starts() -> None:
    shard = ReplayShard(config(n_step=1))
    assert shard.info().mass == 0 and shard.info().min_mass == math.inf
    open_ep = make_episode(4, id="x", terminated=False)
    shard.add([*episodes_for(3), open_ep])
    info = shard.info()
    assert info.mass == shard.buffer.valid_starts().total and info.min_mass == 1.0
    np.testing.assert_array_equal(shard.sample(20).row_mass, np.ones(20))


def test_shard_ignores_and_counts_stale_handles() -> None:
    shard = ReplayShard(config(**{"buffer.kind": "prioritized", "buffer.capacity": 40}))
    shard.add(episodes_for(4))
    handles = shard.sample(30).columns["indices"]
    shard.add(episodes_for(6, start=100))  # evicts the first episodes
    applied = shard.update_priorities(handles, np.ones(30))
    stats = shard.stats()
    assert applied < 30 and stats["priority_updates_stale"] == 30 - applied
    with pytest.raises(ConfigError, match="prioritized"):
        ReplayShard(config()).update_priorities(handles, np.ones(30))


def test_shard_save_load_resumes_the_same_draws(tmp_path) -> None:
    cfg = config(**{"buffer.kind": "prioritized"})
    shard = ReplayShard(cfg, 1)
    shard.add(episodes_for(5))
    part = shard.sample(20)
    shard.update_priorities(part.columns["indices"], np.arange(20.0))
    shard.save(tmp_path / "s", save_id="abc")
    other = ReplayShard(cfg, 1)
    info = other.load(tmp_path / "s", save_id="abc")
    assert info.mass == pytest.approx(shard.info().mass)
    a, b = shard.sample(64), other.sample(64)
    assert all(np.array_equal(a.columns[k], b.columns[k]) for k in a.columns)
    with pytest.raises(DataError, match="belongs to save"):
        other.load(tmp_path / "s", save_id="other")


# ============================================================================ on Ray
def close_all(*clients: ShardedReplayBuffer) -> None:
    for c in clients:
        c.close()


@pytest.mark.ray
def test_routing_keeps_fragments_together_and_samples_are_real(ray_local: Any) -> None:
    eps = [make_episode(5 + i % 4, id=i if i % 2 else f"s{i}", seed=i) for i in range(30)]
    heads = [e.slice(0, 2)._replace(terminated=False) for e in eps]
    tails = [e.slice(2) for e in eps]
    sb = ShardedReplayBuffer(config(), 3, max_in_flight=2)
    try:
        with pytest.raises(EmptyBufferError):
            sb.sample(8)
        sent = sb.add(heads[:15]) + sb.add(heads[15:])
        sb.add(tails)  # each tail continues its head, wherever that went
        sb.flush()
        want = Counter(shard_of([e.id for e in eps], 3).tolist())
        assert sent.tolist() == [want[s] for s in range(3)]
        stats = sb.stats()
        assert [s["episodes_held"] for s in stats["shards"]] == [want[s] for s in range(3)]
        assert stats["fragments_appended"] == 30 and stats["timesteps_held"] == sum(map(len, eps))
        batch = sb.sample(3000)
        assert len(batch) == 3000 and batch.info["shard_counts"].sum() == 3000
        assert set(sampled_transitions(batch.to_dict())) == transitions(eps)  # all, and only
        _, shard = decode_handles(batch["indices"], 3)
        assert np.bincount(shard, minlength=3).tolist() == batch.info["shard_counts"].tolist()
        np.testing.assert_array_equal(batch["weights"], np.ones(3000, np.float32))
        with pytest.raises(ConfigError, match="prioritized"):
            sb.update_priorities(batch["indices"], np.ones(3000))
    finally:
        close_all(sb)


@pytest.mark.ray
def test_priorities_arrive_weights_are_global_and_stale_ones_are_counted(ray_local: Any) -> None:
    alpha, beta, eps_ = 0.6, 0.7, 1e-6
    cfg = config(
        **{"buffer.kind": "prioritized", "buffer.capacity": 120, "alpha": alpha, "beta": beta}
    )
    sb = ShardedReplayBuffer(cfg, 2)
    try:
        sb.add(episodes_for(6))
        sb.flush()
        handles = np.unique(sb.sample(4000)["indices"])
        assert len(handles) == sb.stats()["sampleable"]  # every step drawn at least once
        td = np.ones(len(handles))
        td[0] = 0.01  # the least likely step, in one shard only
        td[1:4] = 50.0  # hot steps
        assert sb.update_priorities(handles, td) == len(handles)
        sb.flush()
        assert sb.stats()["priority_updates"] == len(handles)
        batch = sb.sample(20_000)
        pos = np.searchsorted(handles, batch["indices"])
        assert (handles[pos] == batch["indices"]).all()
        p = (np.abs(td) + eps_) ** alpha
        np.testing.assert_allclose(batch["weights"], (p[pos] / p.min()) ** -beta, rtol=1e-5)
        freq = np.bincount(pos, minlength=len(handles))
        expect = 20_000 * p / p.sum()
        assert ((freq - expect) ** 2 / expect).sum() < chi2_critical(len(handles) - 1)
        # A forged handle and handles evicted since sampling: ignored and counted, not applied.
        sb.update_priorities(
            np.array([encode_handles(np.array([2**40]), np.array([1]), 2)[0]]), [9.0]
        )
        sb.add(episodes_for(30, start=100))  # evicts every old episode in both shards
        sb.update_priorities(handles, np.full(len(handles), 7.0))
        sb.flush()
        stats = sb.stats()
        assert stats["priority_updates_stale"] == len(handles) + 1
        assert stats["priority_updates"] == len(handles)
        with pytest.raises(ValueError, match="finite"):
            sb.update_priorities(handles[:2], [1.0, math.nan])
        with pytest.raises(TypeError):
            sb.update_priorities(batch["weights"], batch["weights"])
    finally:
        close_all(sb)


@pytest.mark.ray
def test_save_load_round_trips_all_shards(ray_local: Any, tmp_path) -> None:
    cfg = config(**{"buffer.kind": "prioritized", "learning_starts": 10})
    sb, other = ShardedReplayBuffer(cfg, 2), ShardedReplayBuffer(cfg, 2)
    try:
        sb.add(episodes_for(10))
        batch = sb.sample(64)
        sb.update_priorities(batch["indices"], np.linspace(0, 4, 64))
        sb.beta = 0.9
        sb.save(tmp_path / "ck")
        other.load(tmp_path / "ck")
        assert other.beta == 0.9
        a, b = sb.sample(128), other.sample(128)
        assert set(a.keys()) == set(b.keys())
        assert all(np.array_equal(a[k], b[k]) for k in a)
        drop = ("shards", "client")
        assert {k: v for k, v in sb.stats().items() if k not in drop} == {
            k: v for k, v in other.stats().items() if k not in drop
        }
        # A copy (as Ray ships it to a feeder) adds to the same shards and cannot kill them.
        copy = pickle.loads(pickle.dumps(other))
        copy.add(episodes_for(2, start=50))
        copy.flush()
        copy.close()
        assert other.stats()["episodes_held"] == sb.stats()["episodes_held"] + 2
    finally:
        close_all(sb, other)
    one = ShardedReplayBuffer(cfg, 1, prefetch=1)
    try:
        with pytest.raises(EmptyBufferError, match="learning_starts"):
            one.sample(4)
        with pytest.raises(ConfigError, match="num_shards"):
            one.load(tmp_path / "ck")
        eps = episodes_for(4)
        one.add(eps)
        first = one.sample(16)  # waits for its round, then submits the next
        assert len(one._ahead) == 1 and one.counters["rounds"] == 1
        second = one.sample(16)  # the prefetched round
        assert one.counters["rounds"] == 2 and len(one._ahead) == 1
        other_size = one.sample(8)  # the round of 16 in flight is dropped
        assert len(other_size) == 8 and one._ahead[0].n == 8
        for b in (first, second, other_size):
            assert set(sampled_transitions(b.to_dict())) <= transitions(eps)
    finally:
        close_all(one)


@pytest.mark.ray
def test_a_shard_emptied_behind_the_clients_back_is_redrawn(ray_local: Any) -> None:
    """The client split by masses that another process's adds have since evicted: the round
    comes up short, the client redraws with the masses the replies brought, and says so."""
    names = [f"id{i}" for i in range(40)]
    where = shard_of(names, 2).tolist()
    a0, x0 = [n for n, w in zip(names, where, strict=True) if w == 0][:2]
    a1, x1 = [n for n, w in zip(names, where, strict=True) if w == 1][:2]
    sb = ShardedReplayBuffer(config(n_step=3, **{"buffer.capacity": 14}), 2)  # 7 slots each
    try:
        sb.add([make_episode(5, id=a0), make_episode(5, id=a1, seed=1)])
        sb.flush()  # the client now knows a mass of 5 in each shard
        other = pickle.loads(pickle.dumps(sb))  # another feeder's copy
        other.add([make_episode(2, id=x0, terminated=False)])  # evicts a0; no 3-step window
        other.flush()
        batch = sb.sample(64)  # shard 0's share comes back empty: redrawn from shard 1
        assert sb.counters["redraws"] == 1 and batch.info["shard_counts"].tolist() == [0, 64]
        assert set(decode_handles(batch["indices"], 2)[1].tolist()) == {1}
        other.add([make_episode(2, id=x1, terminated=False)])  # evicts a1 too
        other.flush()
        with pytest.raises(EmptyBufferError, match="nothing to sample"):
            sb.sample(4)
    finally:
        close_all(sb)
