"""MultiAgentEpisodeReplayBuffer: routing, labels, independent and lockstep sampling against
plain-loop references, uniformity over env steps, per-module stats, checkpoints and errors."""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import numpy as np
import pytest
from buffer_helpers import make_episode
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.errors import ConfigError, DataError, EmptyBufferError
from offline_prelearner.replay import (
    DEFAULT_MODULE_ID,
    INDICES,
    EpisodeReplayBuffer,
    MixInReplayBuffer,
    MultiAgentEpisodeReplayBuffer,
    PrioritizedEpisodeReplayBuffer,
    Reservoir,
    SampleToInsertRatio,
)
from offline_prelearner.replay.agent_index import merge as _merge
from offline_prelearner.replay.batch import MultiAgentBatch
from offline_prelearner.replay.samplers import Prioritized, Uniform
from offline_prelearner.replay.units import NStep, Transition


def shared_or_solo(agent, episode):
    return "solo" if agent == "b" else "shared"


def check_rows_against_episodes(mab: MultiAgentBatch, originals: dict) -> None:
    """Every row's obs / actions are its (episode, agent)'s at ``t`` (plain loop per row)."""
    for mid, b in mab.policy_batches.items():
        for i in range(len(b)):
            ep = originals[(b["eps_id"][i], b["agent_id"][i])]
            k = int(b["t"][i]) - ep.t_started
            np.testing.assert_array_equal(b["obs"][i], ep.observations[k])
            assert b["actions"][i] == ep.actions[k]
            assert mid == (ep.module_id or shared_or_solo(ep.agent_id, ep))


# ---------------------------------------------------------------------- interval union
@settings(max_examples=100, deadline=None)
@given(
    parts=st.lists(
        st.lists(st.tuples(st.integers(0, 4), st.integers(0, 30), st.integers(0, 8)), max_size=12),
        max_size=4,
    )
)
def test_merge_is_the_union_of_intervals(parts):
    arrays = []
    want: set[tuple[int, int]] = set()
    for part in parts:
        code = np.array([c for c, _, _ in part], np.int64)
        lo = np.array([a for _, a, _ in part], np.int64)
        hi = lo + np.array([n for _, _, n in part], np.int64)
        arrays.append((code, lo, hi))
        for c, a, n in part:
            want |= {(c, t) for t in range(a, a + n)}
    code, lo, size = _merge(arrays)
    got = [
        (int(c), int(t)) for c, a, n in zip(code, lo, size, strict=True) for t in range(a, a + n)
    ]
    assert len(got) == len(set(got)) and set(got) == want  # disjoint, and the union
    assert (size > 0).all()
    assert list(zip(code.tolist(), lo.tolist(), strict=True)) == sorted(
        zip(code.tolist(), lo.tolist(), strict=True)
    )


# ---------------------------------------------------------------------- routing and labels
def test_routing_keys_and_labels():
    buf = MultiAgentEpisodeReplayBuffer(1000, mapping_fn=shared_or_solo, seed=0)
    eps = [
        make_episode("e1", 5, agent="a0", seed=1),
        make_episode("e1", 7, agent="a1", seed=2),  # same env episode, same module: no clash
        make_episode("e1", 4, agent="b", seed=3),
        make_episode("e2", 3, agent="a0", module="special", seed=4),  # module_id wins
        make_episode(7, 2, agent=0, seed=5),  # int ids stay ints
    ]
    buf.add(eps)
    assert list(buf.buffers) == ["shared", "solo", "special"]
    stats = buf.stats()
    assert stats["shared"]["episodes_held"] == 3 and stats["shared"]["timesteps_held"] == 14
    assert stats["solo"]["timesteps_held"] == 4 and stats["special"]["timesteps_held"] == 3
    assert len(buf) == 21
    originals = {(e.id, e.agent_id): e for e in eps}
    mab = buf.sample(200)
    assert isinstance(mab, MultiAgentBatch) and mab.env_steps == 200
    assert {len(b) for b in mab.policy_batches.values()} == {200}
    check_rows_against_episodes(mab, originals)
    assert set(mab["shared"]["agent_id"].tolist()) == {"a0", "a1", 0}
    assert 7 in set(mab["shared"]["eps_id"].tolist())
    default = MultiAgentEpisodeReplayBuffer(100)
    default.add(make_episode("x", 3, agent="z"))
    assert list(default.buffers) == [DEFAULT_MODULE_ID]


def test_labels_stay_right_through_fifo_and_reservoir_churn():
    for make in (
        None,
        lambda m, s: EpisodeReplayBuffer(60, seed=s, eviction=Reservoir(seed=1)),
    ):
        kwargs = {"make_buffer": make} if make else {"capacity": 60}
        buf = MultiAgentEpisodeReplayBuffer(mapping_fn=shared_or_solo, seed=3, **kwargs)
        originals = {}
        rng = np.random.default_rng(0)
        for i in range(300):
            batch = []
            for agent in ("a0", "a1", "b"):
                ep = make_episode(f"e{i}", int(rng.integers(1, 9)), agent=agent, seed=i * 3)
                originals[(ep.id, agent)] = ep
                batch.append(ep)
            buf.add(batch)
            if i % 37 == 0:
                check_rows_against_episodes(buf.sample(64), originals)
        check_rows_against_episodes(buf.sample(256), originals)


# ---------------------------------------------------------------------- lockstep
def valid_count(length: int, done: bool, window: int) -> int:
    return length if done else max(0, length - window + 1)


def per_module_units(mid, seed):
    unit = NStep(2, 0.9) if mid == "shared" else Transition()
    return EpisodeReplayBuffer(10_000, Uniform(), unit, seed=seed)


@settings(max_examples=40, deadline=None)
@given(
    spec=st.lists(
        st.tuples(
            st.integers(0, 4),  # env episode
            st.sampled_from(["a0", "a1", "b"]),
            st.integers(0, 6),  # length
            st.integers(0, 3),  # t_started
            st.booleans(),  # done
        ),
        min_size=1,
        max_size=15,
        unique_by=lambda s: (s[0], s[1]),
    ),
    seed=st.integers(0, 1000),
)
def test_lockstep_rows_are_exactly_the_agents_that_have_each_drawn_step(spec, seed):
    buf = MultiAgentEpisodeReplayBuffer(
        make_buffer=per_module_units, sampling="lockstep", mapping_fn=shared_or_solo, seed=seed
    )
    eps = [
        make_episode(f"e{e}", n, agent=a, t_started=t0, done=d, seed=i)
        for i, (e, a, n, t0, d) in enumerate(spec)
    ]
    buf.add(eps)
    # Plain reference: which (module, agent) may start a sample at each env step.
    have: dict[tuple[str, int], set] = defaultdict(set)
    for ep in eps:
        mid = shared_or_solo(ep.agent_id, ep)
        window = 2 if mid == "shared" else 1
        for k in range(valid_count(len(ep), ep.is_done, window)):
            have[(ep.id, ep.t_started + k)].add((mid, ep.agent_id))
    if not have:
        with pytest.raises(EmptyBufferError):
            buf.sample(8)
        return
    batch = 64
    mab = buf.sample(batch)
    assert mab.env_steps == batch
    rows_by_draw: dict[int, set] = defaultdict(set)
    key_by_draw: dict[int, set] = defaultdict(set)
    for mid, b in mab.policy_batches.items():
        draws = b.info["draw"]
        assert (np.diff(draws) >= 0).all()  # draw order
        for i in range(len(b)):
            d = int(draws[i])
            rows_by_draw[d].add((mid, b["agent_id"][i]))
            key_by_draw[d].add((b["eps_id"][i], int(b["t"][i])))
    for d in range(batch):  # every draw has some row (a drawn step belongs to some module)
        assert len(key_by_draw[d]) == 1
        (key,) = key_by_draw[d]
        assert rows_by_draw[d] == have[key]
    check_rows_against_episodes(mab, {(e.id, e.agent_id): e for e in eps})


def test_lockstep_draws_env_steps_uniformly_from_the_union():
    buf = MultiAgentEpisodeReplayBuffer(
        1000, sampling="lockstep", mapping_fn=shared_or_solo, seed=7
    )
    buf.add(
        [
            make_episode("e0", 6, agent="a0", seed=1),
            make_episode("e0", 3, agent="b", t_started=4, seed=2),  # t 4..6: overlaps and extends
            make_episode("e1", 2, agent="b", seed=3),  # only in "solo"
            make_episode("e2", 5, agent="a1", t_started=2, seed=4),
        ]
    )
    cells = [("e0", t) for t in range(7)] + [("e1", 0), ("e1", 1)]
    cells += [("e2", t) for t in range(2, 7)]
    counts: Counter = Counter()
    draws = 0
    for _ in range(40):
        mab = buf.sample(500)
        draws += 500
        keys = {}  # draw -> its env step, from whichever module has it
        for b in mab.policy_batches.values():
            for d, e, t in zip(b.info["draw"], b["eps_id"], b["t"], strict=True):
                keys[int(d)] = (e, int(t))
        counts.update(keys.values())
    assert set(counts) == set(cells)
    expected = draws / len(cells)
    chi2 = sum((counts[c] - expected) ** 2 / expected for c in cells)
    df = len(cells) - 1
    a = 2.0 / (9.0 * df)
    assert chi2 < df * (1.0 - a + 3.09 * math.sqrt(a)) ** 3, counts


# ---------------------------------------------------------------------- independent
def test_independent_sampling_prioritized_modules_and_readiness():
    def make(mid, seed):
        if mid == "shared":
            return PrioritizedEpisodeReplayBuffer(500, Prioritized(0.6, 0.4), seed=seed)
        return EpisodeReplayBuffer(500, seed=seed, learning_starts=20)

    buf = MultiAgentEpisodeReplayBuffer(make_buffer=make, mapping_fn=shared_or_solo, seed=1)
    with pytest.raises(EmptyBufferError, match="no data"):
        buf.sample(4)
    buf.add([make_episode("e0", 8, agent="a0"), make_episode("e0", 8, agent="b", seed=1)])
    mab = buf.sample(16)  # "solo" has not reached learning_starts: left out
    assert list(mab) == ["shared"]
    assert buf.update_priorities("shared", mab["shared"][INDICES], np.ones(16)) == 16
    with pytest.raises(TypeError, match="prioritized"):
        buf.update_priorities("solo", [0], [1.0])
    buf.add(make_episode("e1", 15, agent="b", seed=2))
    assert set(buf.sample(16)) == {"shared", "solo"}


def test_mixin_modules_size_their_own_batches():
    def make(mid, seed):
        return MixInReplayBuffer(500, replay_ratio=0.5, seed=seed)

    buf = MultiAgentEpisodeReplayBuffer(make_buffer=make, mapping_fn=shared_or_solo, seed=1)
    buf.add([make_episode("e0", 6, agent="a0"), make_episode("e0", 4, agent="b", seed=1)])
    mab = buf.sample(None)
    assert {m: len(b) for m, b in mab.policy_batches.items()} == {"shared": 6, "solo": 4}
    assert mab.env_steps == 6
    buf.add(make_episode("e1", 2, agent="a1", seed=2))
    mab = buf.sample(None)
    assert list(mab) == ["shared"] and mab["shared"].info == {"new": 2, "replayed": 2}


def test_rate_limited_modules_are_left_out():
    def make(mid, seed):
        limit = SampleToInsertRatio(0.01) if mid == "solo" else None
        return EpisodeReplayBuffer(500, seed=seed, rate_limit=limit)

    for sampling in ("independent", "lockstep"):
        buf = MultiAgentEpisodeReplayBuffer(
            make_buffer=make, mapping_fn=shared_or_solo, sampling=sampling, seed=1
        )
        buf.add([make_episode("e0", 50, agent="a0"), make_episode("e0", 25, agent="b", seed=1)])
        assert list(buf.sample(40)) == ["shared"]
        assert buf.stats()["solo"]["rate_limited"] == 1


# ---------------------------------------------------------------------- state
@pytest.mark.parametrize("sampling", ["independent", "lockstep"])
def test_checkpoint_round_trip(tmp_path, sampling):
    def make(mid, seed):
        ev = Reservoir(seed=2) if mid == "solo" else None
        return EpisodeReplayBuffer(80, Uniform(), NStep(2, 0.9), seed=seed, eviction=ev)

    def build():
        return MultiAgentEpisodeReplayBuffer(
            make_buffer=make, mapping_fn=shared_or_solo, sampling=sampling, seed=5
        )

    eps = [
        make_episode(f"e{i}", 1 + (i * 7 + j) % 9, agent=a, seed=i * 3 + j, done=bool(i % 3))
        for i in range(40)
        for j, a in enumerate(("a0", "a1", "b"))
    ]
    a = build()
    a.add(eps[:90])
    a.sample(10)
    a.save(tmp_path / "ma")
    b = build()
    b.load(tmp_path / "ma")
    assert a.stats() == b.stats()
    for _ in range(2):
        x, y = a.sample(32), b.sample(32)
        assert list(x) == list(y) and x.env_steps == y.env_steps
        for m in x:
            assert x[m] == y[m]
    a.add(eps[90:])
    b.add(eps[90:])
    x, y = a.sample(32), b.sample(32)
    for m in x:
        assert x[m] == y[m]
    check_rows_against_episodes(y, {(e.id, e.agent_id): e for e in eps})
    other = MultiAgentEpisodeReplayBuffer(
        make_buffer=make,
        mapping_fn=shared_or_solo,
        sampling="lockstep" if sampling == "independent" else "independent",
    )
    with pytest.raises(ConfigError, match="sampling"):
        other.load(tmp_path / "ma")


def test_bad_arguments():
    with pytest.raises(ConfigError, match="either"):
        MultiAgentEpisodeReplayBuffer()
    with pytest.raises(ConfigError, match="either"):
        MultiAgentEpisodeReplayBuffer(10, make_buffer=per_module_units)
    with pytest.raises(ConfigError, match="default buffers"):
        MultiAgentEpisodeReplayBuffer(make_buffer=per_module_units, unit=Transition())
    with pytest.raises(ConfigError, match="sampling"):
        MultiAgentEpisodeReplayBuffer(10, sampling="together")
    with pytest.raises(ConfigError, match="capacity"):
        MultiAgentEpisodeReplayBuffer(1)
    buf = MultiAgentEpisodeReplayBuffer(100, mapping_fn=lambda a, e: None)
    with pytest.raises(ConfigError, match="None"):
        buf.add(make_episode("x", 2, agent="q"))
    bad = MultiAgentEpisodeReplayBuffer(make_buffer=lambda m, s: object())  # type: ignore[arg-type,return-value]
    with pytest.raises(ConfigError, match="EpisodeReplayBuffer"):
        bad.add(make_episode("x", 2))
    lock = MultiAgentEpisodeReplayBuffer(100, sampling="lockstep")
    with pytest.raises(ConfigError, match="batch_size"):
        lock.sample(None)
    with pytest.raises(TypeError, match="Episode"):
        lock.add([{"obs": 1}])  # type: ignore[list-item]


def test_lockstep_refuses_huge_t_naming_the_episode():
    from offline_prelearner.errors import DataError

    buf = MultiAgentEpisodeReplayBuffer(100, sampling="lockstep")
    buf.add(make_episode("far", 3, agent="a0", t_started=2**31 - 2))
    with pytest.raises(DataError, match="0 <= t < 2") as exc:
        buf.sample(4)
    assert exc.value.where.episode_id == "far" and exc.value.where.timestep == 2**31 - 2


def test_update_priorities_of_an_unknown_module_names_the_modules_held():
    def make(mid, seed):
        return PrioritizedEpisodeReplayBuffer(500, Prioritized(0.6, 0.4), seed=seed)

    buf = MultiAgentEpisodeReplayBuffer(make_buffer=make, mapping_fn=shared_or_solo, seed=1)
    buf.add([make_episode("e0", 8, agent="a0"), make_episode("e0", 8, agent="b", seed=1)])
    with pytest.raises(
        ConfigError, match=r"no buffer for module 'nope'; have \['shared', 'solo'\]"
    ):
        buf.update_priorities("nope", [0], [1.0])


@pytest.mark.parametrize(
    ("where", "bad", "error", "said"),
    [
        ("rng", "not a state", DataError, "rng must be a generator state"),
        ("rng", {"bit_generator": "PCG64", "state": "x"}, DataError, "rng state is malformed"),
        ("rng", {"bit_generator": "MT19937"}, ConfigError, "MT19937 generator"),
        ("modules", [["i"]], DataError, "modules must be a list"),
        ("per_module", [], DataError, "per_module must be a list of one state per module"),
    ],
)
def test_a_malformed_state_is_refused_and_leaves_the_buffer_as_it_was(where, bad, error, said):
    def build():
        return MultiAgentEpisodeReplayBuffer(500, mapping_fn=shared_or_solo, seed=5)

    a = build()
    a.add([make_episode(f"e{i}", 6, agent=g, seed=i) for i in range(6) for g in ("a0", "b")])
    state = a.get_state()
    b = build()
    b.add([make_episode("x", 9, agent="a0")])
    before = b.stats()
    state["meta"][where] = bad
    with pytest.raises(error, match=said):
        b.set_state(state)
    assert b.stats() == before
    assert sorted(b.sample(4)) == ["shared"]  # still the one module it held, and samples


def test_a_module_failing_to_load_leaves_the_buffer_as_it_was():
    a = MultiAgentEpisodeReplayBuffer(500, mapping_fn=shared_or_solo, seed=5)
    a.add([make_episode(f"e{i}", 6, agent=g, seed=i) for i in range(6) for g in ("a0", "b")])
    state = a.get_state()
    state["meta"]["per_module"][1]["samples_drawn"] = -1  # the second module's state is bad
    b = MultiAgentEpisodeReplayBuffer(500, mapping_fn=shared_or_solo, seed=5)
    b.add([make_episode("x", 9, agent="a0")])
    before = b.stats()
    with pytest.raises(DataError, match="samples_drawn"):
        b.set_state(state)
    assert b.stats() == before
