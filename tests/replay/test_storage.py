"""EpisodeStorage: layout, FIFO eviction against a slot-level simulation, streaming fragments,
duplicates, errors, slot -> row lookup, handles and memory."""

from __future__ import annotations

import itertools
from functools import partial

import numpy as np
import pytest
from buffer_helpers import make_episode as _make_episode
from buffer_helpers import ref
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.episodes.episode import Episode
from offline_prelearner.errors import ConfigError, EpisodeValidationError
from offline_prelearner.replay import EpisodeStorage

SETTINGS = settings(max_examples=60, deadline=None)


make_episode = partial(
    _make_episode, seed=None, obs_shape=(3,), n_actions=5, reward_dtype=np.float32, logp=np.float64
)


def assert_same_episode(got: Episode, want: Episode) -> None:
    assert got.id == want.id and len(got) == len(want)
    assert (got.terminated, got.truncated, got.t_started) == (
        want.terminated,
        want.truncated,
        want.t_started,
    )
    np.testing.assert_array_equal(got.observations, want.observations)
    np.testing.assert_array_equal(got.actions, want.actions)
    np.testing.assert_array_equal(got.rewards, want.rewards)
    for k, v in want.extras.items():
        np.testing.assert_array_equal(got.extras[k], v)


# ---------------------------------------------------------------------- eviction
@SETTINGS
@given(capacity=st.integers(2, 60), lengths=st.lists(st.integers(0, 15), min_size=1, max_size=30))
def test_fifo_eviction_matches_slot_simulation(capacity, lengths):
    lengths = [n for n in lengths if n + 1 <= capacity]
    eps = [make_episode(i, n, seed=i) for i, n in enumerate(lengths)]
    store = EpisodeStorage(capacity)
    for ep in eps:
        store.add_episode(ep)
    held = ref.fifo_held(capacity, lengths)
    got = store.episodes()
    assert [e.id for e in got] == held  # oldest first, exactly the simulated survivors
    assert held == list(range(len(lengths) - len(held), len(lengths)))  # a suffix: FIFO
    for e in got:
        assert_same_episode(e, eps[e.id])
    c = store.counters
    assert c["episodes_added"] - c["episodes_evicted"] == len(held) == store.num_episodes
    assert c["timesteps_added"] - c["timesteps_evicted"] == store.num_timesteps
    assert store.num_timesteps == sum(lengths[i] for i in held)


@SETTINGS
@given(capacity=st.integers(4, 80), lengths=st.lists(st.integers(1, 12), min_size=1, max_size=40))
def test_rows_of_finds_every_held_slot(capacity, lengths):
    store = EpisodeStorage(capacity)
    for i, n in enumerate(lengths):
        if n + 1 <= capacity:
            store.add_episode(make_episode(i, n, seed=i))
    for row in np.flatnonzero(store.alive):
        s, n = int(store.starts[row]), int(store.lengths[row])
        slots = np.arange(s, s + n + 1)
        np.testing.assert_array_equal(store.rows_of(slots), np.full(n + 1, row))


def test_episode_longer_than_capacity_is_an_error_naming_it():
    store = EpisodeStorage(10)
    with pytest.raises(EpisodeValidationError, match="capacity is 10") as e:
        store.add_episode(make_episode("long-one", 10))
    assert e.value.where.episode_id == "long-one"
    store.add_episode(make_episode("fits", 9))  # 10 slots exactly
    assert store.num_timesteps == 9


@pytest.mark.parametrize("capacity", [2, 7, 1000, 1023, 1024])
def test_capacity_not_a_power_of_two_and_tiny(capacity):
    store = EpisodeStorage(capacity)
    for i in range(50):
        store.add_episode(make_episode(i, 1 + i % 3 if capacity > 3 else 1))
    assert store.num_episodes > 0
    assert store.head <= capacity


@pytest.mark.parametrize("bad", [0, 1, 2.5, True, "9"])
def test_bad_capacity(bad):
    with pytest.raises(ConfigError, match="capacity"):
        EpisodeStorage(bad)


# ---------------------------------------------------------------------- fragments
def split(ep: Episode, cuts: list[int]) -> list[Episode]:
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(ep))), len(ep)]
    return [ep.slice(a, b) for a, b in itertools.pairwise(bounds)]


@SETTINGS
@given(
    lengths=st.lists(st.integers(1, 10), min_size=1, max_size=5),
    cuts=st.lists(st.integers(1, 9), max_size=4),
    seed=st.integers(0, 1000),
)
def test_streamed_fragments_join_into_the_episode(lengths, cuts, seed):
    eps = [make_episode(f"s{i}", n, "truncated") for i, n in enumerate(lengths)]
    pieces = [split(ep, cuts) for ep in eps]
    # Interleave fragments of different episodes in a random but per-episode ordered way.
    rng = np.random.default_rng(seed)
    order = np.concatenate([np.full(len(p), i) for i, p in enumerate(pieces)])
    rng.shuffle(order)
    store = EpisodeStorage(sum(len(e) + 1 for e in eps) * 3)
    nxt = [0] * len(eps)
    for i in order:
        store.add_episode(pieces[i][nxt[i]])
        nxt[i] += 1
    got = {e.id: e for e in store.episodes()}
    assert len(got) == len(eps)
    for ep in eps:
        assert_same_episode(got[ep.id], ep)
    c = store.counters
    assert c["episodes_added"] == len(eps)
    assert c["fragments_appended"] == sum(len(p) - 1 for p in pieces)
    assert c["timesteps_added"] == sum(lengths)


def test_fragment_at_head_is_appended_in_place_else_moved():
    ep = make_episode("a", 10, "terminated")
    store = EpisodeStorage(100)
    store.add_episode(ep.slice(0, 4))
    start = int(store.starts[0])
    store.add_episode(ep.slice(4, 7))
    assert int(store.starts[0]) == start and store.counters["episodes_moved"] == 0
    store.add_episode(make_episode("b", 3))
    store.add_episode(ep.slice(7, 10))
    assert store.counters["episodes_moved"] == 1
    assert_same_episode(store.episode(store.row_of_id("a")), ep)
    assert [e.id for e in store.episodes()] == ["b", "a"]


def test_moving_a_fragment_can_evict_and_survives_a_full_ring():
    ep = make_episode("a", 8, "terminated")
    store = EpisodeStorage(12)
    store.add_episode(ep.slice(0, 5))  # slots 0..5
    store.add_episode(make_episode("b", 4))  # slots 6..10
    store.add_episode(ep.slice(5, 8))  # joined needs 9 slots: wraps to 0, evicts b
    assert [e.id for e in store.episodes()] == ["a"]
    assert_same_episode(store.episodes()[0], ep)
    assert store.counters["episodes_evicted"] == 1


def test_duplicates_are_dropped_and_counted():
    ep = make_episode("a", 6, "terminated")
    store = EpisodeStorage(50)
    store.add_episode(ep)
    store.add_episode(ep)
    store.add_episode(ep.slice(2, 4))
    assert store.counters["duplicates_dropped"] == 2
    assert store.num_timesteps == 6 and store.counters["timesteps_added"] == 6
    # A re-sent fragment of an unfinished episode too.
    ep2 = make_episode("b", 6, "truncated")
    store.add_episode(ep2.slice(0, 3))
    store.add_episode(ep2.slice(0, 3))
    assert store.counters["duplicates_dropped"] == 3
    # The same steps again, now done: the flag is taken, nothing duplicated.
    store.add_episode(
        Episode(
            id="b",
            observations=ep2.observations[:4],
            actions=ep2.actions[:3],
            rewards=ep2.rewards[:3],
            truncated=True,
            extras={"logp": np.zeros(3)},
        )
    )
    assert store.truncated[store.row_of_id("b")]


@pytest.mark.parametrize(
    "second,reason",
    [
        (lambda ep: ep.slice(5, 8), "gap"),
        (lambda ep: ep.slice(2, 6), "overlap"),
        (
            lambda ep: Episode(
                id="a",
                observations=np.zeros((3, 3), np.float32),
                actions=np.zeros(2, np.int64),
                rewards=np.zeros(2, np.float32),
                t_started=4,
                extras={"logp": np.zeros(2)},
            ),
            "obs_gap",
        ),
    ],
)
def test_fragment_contradictions_are_errors(second, reason):
    ep = make_episode("a", 8, "truncated")
    store = EpisodeStorage(50)
    store.add_episode(ep.slice(0, 4))
    with pytest.raises(EpisodeValidationError) as e:
        store.add_episode(second(ep))
    assert e.value.reason == reason and e.value.where.episode_id == "a"


def test_continuing_a_finished_episode_is_an_error():
    ep = make_episode("a", 8, "terminated")
    store = EpisodeStorage(50)
    store.add_episode(ep.slice(0, 8))
    more = make_episode("a", 2, t_started=8)
    with pytest.raises(EpisodeValidationError, match="already ended"):
        store.add_episode(more)


def test_mismatched_columns_are_errors():
    store = EpisodeStorage(50)
    store.add_episode(make_episode("a", 3))
    with pytest.raises(EpisodeValidationError, match="extra columns"):
        store.add_episode(make_episode("b", 3, logp=None))
    bad = Episode(
        id="c",
        observations=np.zeros((4, 5), np.float32),
        actions=np.zeros(3, int),
        rewards=np.zeros(3),
        extras={"logp": np.zeros(3)},
    )
    with pytest.raises(EpisodeValidationError, match="obs steps are float32\\[5\\]") as e:
        store.add_episode(bad)
    assert e.value.where.column == "obs"


def test_ids_are_normalized():
    store = EpisodeStorage(50)
    store.add_episode(make_episode(np.int64(7), 2))
    store.add_episode(make_episode(7, 2))  # same id
    assert store.counters["duplicates_dropped"] == 1
    store.add_episode(make_episode(b"x", 2))
    assert store.row_of_id("x") is not None
    with pytest.raises(EpisodeValidationError, match="without an id"):
        store.add_episode(make_episode(None, 2))


# ---------------------------------------------------------------------- handles
def test_handles_go_stale_on_eviction_and_move():
    store = EpisodeStorage(20)
    a = make_episode("a", 5, "truncated")
    store.add_episode(a.slice(0, 3))
    store.add_episode(make_episode("b", 4))
    slots = np.array([int(store.starts[0]), int(store.starts[1]) + 2])
    h = store.handles(slots, store.rows_of(slots))
    got, ok = store.resolve(h)
    np.testing.assert_array_equal(got, slots)
    assert ok.all()
    store.add_episode(a.slice(3, 5))  # moves "a": its old handle is stale, b's is not
    np.testing.assert_array_equal(store.resolve(h)[1], [False, True])
    for i in range(10):
        store.add_episode(make_episode(f"x{i}", 5))
    assert not store.resolve(h)[1].any()


# ---------------------------------------------------------------------- memory
def test_cartpole_memory_within_1_2x_raw_bytes():
    rng = np.random.default_rng(0)
    store = EpisodeStorage(100_000)
    raw = 0
    for i in range(8000):
        n = int(rng.integers(10, 35))
        ep = Episode(
            id=f"{i:032x}",
            observations=np.zeros((n + 1, 4), np.float32),
            actions=np.zeros(n, np.int64),
            rewards=np.ones(n, np.float32),
            terminated=True,
        )
        store.add_episode(ep)
    for ep in store.episodes():
        raw += ep.observations.nbytes + ep.actions.nbytes + ep.rewards.nbytes + len(ep.id)
    ids = sum(len(i) + 49 for i in store.ids if i is not None)  # the str objects themselves
    assert (store.nbytes() + ids) / raw < 1.2
