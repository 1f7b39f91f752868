"""Episode: invariants, views, joining fragments, RLlib's state layout."""

from __future__ import annotations

import itertools
import re
from typing import Any

import numpy as np
import pytest
from conftest import make_episode
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.episodes.episode import Episode
from offline_prelearner.errors import DecodeError, EpisodeValidationError
from offline_prelearner.io.codec import packb, unpackb


def columns(n: int = 3, **over: Any) -> dict[str, Any]:
    kw: dict[str, Any] = dict(
        id="e1",
        observations=np.zeros((n + 1, 2), np.float32),
        actions=np.zeros(n, np.int64),
        rewards=np.ones(n),
    )
    kw.update(over)
    return kw


def assert_equal_episodes(a: Episode, b: Episode) -> None:
    assert (a.id, a.agent_id, a.module_id, a.t_started) == (
        b.id,
        b.agent_id,
        b.module_id,
        b.t_started,
    )
    assert (a.terminated, a.truncated) == (b.terminated, b.truncated)
    assert a.infos == b.infos and sorted(a.extras) == sorted(b.extras)
    for x, y in [
        (a.observations, b.observations),
        (a.actions, b.actions),
        (a.rewards, b.rewards),
        *((a.extras[k], b.extras[k]) for k in a.extras),
    ]:
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)


# --------------------------------------------------------------------------------------------
# invariants
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("over", "field", "text"),
    [
        ({"observations": np.zeros((3, 2))}, "obs", "needs 4 observations"),
        ({"observations": np.float32(1)}, "obs", "time axis"),
        ({"actions": np.int64(1)}, "actions", "time axis"),
        ({"rewards": np.ones(2)}, "rewards", "shape (3,)"),
        ({"rewards": np.ones((3, 1))}, "rewards", "shape (3,)"),
        ({"rewards": np.array(["a", "b", "c"])}, "rewards", "numeric"),
        ({"observations": np.array([None, 1, 2, 3], dtype=object)}, "obs", "dtype object"),
        ({"actions": np.array([{}, {}, {}], dtype=object)}, "actions", "dtype object"),
        ({"t_started": -1}, "t", "t_started"),
        ({"infos": [{}] * 3}, "infos", "4 entries"),
        ({"extras": {"logp": np.zeros(2)}}, "logp", "3 rows"),
        ({"extras": {"logp": np.float64(0)}}, "logp", "a scalar"),
    ],
)
def test_invariants_name_the_field_and_episode(over: dict[str, Any], field: str, text: str) -> None:
    with pytest.raises(EpisodeValidationError, match=re.escape(text)) as info:
        Episode(**columns(**over))
    assert info.value.where.column == field
    assert info.value.where.episode_id == "e1"
    assert "episode 'e1'" in str(info.value)


def test_both_flags_is_an_error() -> None:
    with pytest.raises(EpisodeValidationError, match="both terminated and truncated"):
        Episode(**columns(terminated=True, truncated=True))


def test_empty_episode_is_legal() -> None:
    ep = Episode(**columns(0))
    assert len(ep) == 0 and ep.t_end == 0 and ep.total_reward == 0.0


def test_repr_shows_shapes_and_dtypes_not_values() -> None:
    ep = make_episode(4, id="r", obs_shape=(2, 3), extras=("logp",), infos=True)
    text = repr(ep)
    assert "float32[5, 2, 3]" in text and "int64[4]" in text and "logp=float64[4]" in text
    assert "id='r'" in text and "terminated" in text and "infos" in text
    assert str(ep.observations[0, 0, 0]) not in text and "[[" not in text


# --------------------------------------------------------------------------------------------
# slices
# --------------------------------------------------------------------------------------------
def test_slices_are_views_and_flags_stay_at_the_end() -> None:
    ep = make_episode(6, id="s", extras=("logp",), infos=True, terminated=True)
    head, tail = ep.slice(0, 4), ep.slice(4)
    for part in (head, tail):
        assert np.shares_memory(part.observations, ep.observations)
        assert np.shares_memory(part.actions, ep.actions)
        assert np.shares_memory(part.rewards, ep.rewards)
        assert np.shares_memory(part.extras["logp"], ep.extras["logp"])
    assert not head.terminated and tail.terminated
    assert (head.t_started, head.t_end, tail.t_started, tail.t_end) == (0, 4, 4, 6)
    assert len(head.observations) == 5 and np.array_equal(
        head.observations[-1], tail.observations[0]
    )
    assert head.infos == ep.infos[:5] and tail.infos == ep.infos[4:]


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 12),
    st.integers(-15, 15),
    st.integers(-15, 15) | st.none(),
    st.sampled_from(["terminated", "truncated", "open"]),
)
def test_slice_matches_a_plain_loop(n: int, start: int, stop: int | None, flag: str) -> None:
    ep = make_episode(
        n,
        terminated=flag == "terminated",
        truncated=flag == "truncated",
        t_started=3,
        extras=("v",),
        infos=True,
    )
    part = ep.slice(start, stop)
    steps = list(range(n))[start:stop]  # the reference: Python's own slicing of step indices
    assert len(part) == len(steps)
    if steps:
        assert part.t_started == 3 + steps[0]
        assert np.array_equal(part.actions, [ep.actions[i] for i in steps])
        assert np.array_equal(
            part.observations, [ep.observations[i] for i in [*steps, steps[-1] + 1]]
        )
        ends = steps[-1] == n - 1
    else:
        ends = False
    assert part.terminated == (ep.terminated and (ends or (not steps and part.t_end == ep.t_end)))
    assert part.truncated == (ep.truncated and (ends or (not steps and part.t_end == ep.t_end)))
    assert not (part.is_done and part.t_end != ep.t_end)


# --------------------------------------------------------------------------------------------
# joining fragments
# --------------------------------------------------------------------------------------------
def test_concat_continues_t() -> None:
    ep = make_episode(7, id="c", extras=("logp",), infos=True)
    joined = ep.slice(0, 3).concat(ep.slice(3, 5), ep.slice(5))
    assert_equal_episodes(joined, ep)


def test_concat_orders_fragments_by_t() -> None:
    ep = make_episode(5, id="o")
    assert_equal_episodes(Episode.concat_fragments([ep.slice(2), ep.slice(0, 2)]), ep)


def test_concat_gap_is_an_error() -> None:
    ep = make_episode(6, id="g")
    with pytest.raises(EpisodeValidationError, match="do not continue") as info:
        ep.slice(0, 2).concat(ep.slice(3))
    assert info.value.where.episode_id == "g" and info.value.where.timestep == 3


def test_concat_observation_mismatch_is_an_error() -> None:
    ep = make_episode(4, id="m")
    later = ep.slice(2)
    later = Episode(
        **{
            **{k: getattr(later, k) for k in Episode.__slots__},
            "observations": later.observations + 1,
        }
    )
    with pytest.raises(EpisodeValidationError, match="first observation") as info:
        ep.slice(0, 2).concat(later)
    assert info.value.where.column == "obs" and info.value.where.timestep == 2


def test_nothing_may_follow_a_done_fragment() -> None:
    first = make_episode(3, id="d", terminated=True)
    more = make_episode(2, id="d", t_started=3, terminated=False)
    more = Episode(
        **{
            **{k: getattr(more, k) for k in Episode.__slots__},
            "observations": np.concatenate([first.observations[-1:], more.observations[1:]]),
        }
    )
    with pytest.raises(EpisodeValidationError, match="already done"):
        first.concat(more)


def test_concat_refuses_other_episodes_and_other_extras() -> None:
    ep = make_episode(4, id="x", extras=("logp",))
    other = ep.slice(2)
    other.id = "y"
    with pytest.raises(EpisodeValidationError, match="different episodes"):
        ep.slice(0, 2).concat(other)
    bare = ep.slice(2)
    bare.extras = {}
    with pytest.raises(EpisodeValidationError, match="different extra columns"):
        ep.slice(0, 2).concat(bare)
    with pytest.raises(ValueError, match="at least one"):
        Episode.concat_fragments([])


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 30),
    st.lists(st.integers(0, 30), max_size=6),
    st.sampled_from(["terminated", "truncated", "open"]),
    st.booleans(),
    st.randoms(),
)
def test_concat_of_a_split_is_the_original(
    n: int, cuts: list[int], flag: str, infos: bool, rnd: Any
) -> None:
    ep = make_episode(
        n,
        id="h",
        terminated=flag == "terminated",
        truncated=flag == "truncated",
        t_started=rnd.randint(0, 9),
        extras=("logp", "vf"),
        infos=infos,
        obs_shape=(2,),
    )
    bounds = sorted({0, n, *(c % (n + 1) for c in cuts)})
    parts = [ep.slice(a, b) for a, b in itertools.pairwise(bounds)]
    rnd.shuffle(parts)
    joined = Episode.concat_fragments(parts)
    assert_equal_episodes(joined, ep)
    assert not np.shares_memory(joined.observations, ep.observations) or len(parts) == 1


# --------------------------------------------------------------------------------------------
# RLlib state layout
# --------------------------------------------------------------------------------------------
@settings(max_examples=100, deadline=None)
@given(
    st.integers(0, 20),
    st.sampled_from(["terminated", "truncated", "open"]),
    st.booleans(),
    st.sampled_from([(), (3,), (2, 2)]),
    st.integers(0, 50),
)
def test_state_round_trip(n: int, flag: str, infos: bool, shape: tuple[int, ...], t0: int) -> None:
    ep = make_episode(
        n,
        id="st",
        terminated=flag == "terminated",
        truncated=flag == "truncated",
        infos=infos,
        extras=("logp",),
        obs_shape=shape,
        t_started=t0,
        agent_id="a",
        module_id="m",
    )
    state = ep.get_state()
    assert state["t"] == ep.t_end and state["observations"]["finalized"]
    assert_equal_episodes(Episode.from_state(state), ep)
    assert_equal_episodes(Episode.from_state(unpackb(packb(state))), ep)


def test_from_state_drops_the_lookback() -> None:
    ep = make_episode(4, id="lb", extras=("logp",), infos=True, t_started=10)
    state = ep.get_state()
    lb = 2

    def pad(buf: dict[str, Any]) -> None:
        data = buf["data"]
        buf["data"] = (
            np.concatenate([data[:lb] * 0 - 7, data])
            if isinstance(data, np.ndarray)
            else [{"old": 1}] * lb + list(data)
        )
        buf["lookback"] = lb

    for key in ("observations", "actions", "rewards", "infos"):
        pad(state[key])
    pad(state["extra_model_outputs"]["logp"])
    out = Episode.from_state(state)
    assert_equal_episodes(out, ep)


def test_from_state_reads_per_step_lists() -> None:
    ep = make_episode(3, id="lists", obs_shape=(2,))
    state = ep.get_state()
    state["observations"]["data"] = list(ep.observations)
    state["actions"]["data"] = [np.int64(a) for a in ep.actions]
    state["rewards"]["data"] = [float(r) for r in ep.rewards]
    assert_equal_episodes(Episode.from_state(state), ep)


def test_from_state_drops_empty_infos() -> None:
    ep = make_episode(3, id="i")
    state = ep.get_state()
    assert state["infos"]["data"] == [{}] * 4
    assert Episode.from_state(state).infos is None
    state["infos"]["data"] = [None, {"a": 1}, None, {}]
    assert Episode.from_state(state).infos == [{}, {"a": 1}, {}, {}]


@pytest.mark.parametrize(
    ("change", "error", "text"),
    [
        (lambda s: s.update(t=99), EpisodeValidationError, "t=99"),
        (lambda s: s.update(t="x"), EpisodeValidationError, "must be integers"),
        (lambda s: s.pop("actions"), DecodeError, "no 'actions' entry"),
        (lambda s: s.update(actions=[1, 2]), DecodeError, "not an InfiniteLookbackBuffer"),
        (
            lambda s: s["observations"].update(data={"a": np.zeros((4, 1))}),
            DecodeError,
            "composite",
        ),
        (
            lambda s: s["observations"].update(
                data=[np.zeros(2), np.zeros(3), np.zeros(2), np.zeros(2)]
            ),
            EpisodeValidationError,
            "inconsistent shapes",
        ),
        (lambda s: s["actions"].update(data=[1, "a", None]), EpisodeValidationError, "ragged"),
        (lambda s: s.update(agent_episodes={}), DecodeError, "MultiAgentEpisode"),
    ],
)
def test_from_state_errors(change: Any, error: type[Exception], text: str) -> None:
    state = make_episode(3, id="bad").get_state()
    change(state)
    with pytest.raises(error, match=text) as info:
        Episode.from_state(state)
    assert info.value.where.episode_id == "bad"


def test_from_state_needs_a_map() -> None:
    with pytest.raises(DecodeError, match="must be a map"):
        Episode.from_state([1, 2])  # type: ignore[arg-type]
