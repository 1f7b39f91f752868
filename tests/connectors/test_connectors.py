"""Connectors against plain-Python-loop references; pipelines; building from specs.

Every vectorized connector is compared with a reference computed one value at a time, mostly
under Hypothesis; batch connectors also run on real batches sampled from an
``EpisodeReplayBuffer`` (transitions, sequences with padding, frame stacks).
"""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from conftest import make_episode, random_episodes
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.connectors import (
    GAE,
    CastDtypes,
    Connector,
    ConnectorContext,
    ConnectorPipeline,
    DiscountedReturns,
    FlattenObservations,
    NormalizeObservations,
    OneHotActions,
    RunningMeanStd,
    available_connectors,
    build_connector,
    build_pipeline,
    discounted_cumsum,
    register_connector,
)
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.episodes.episode_columns import EpisodeColumns
from offline_prelearner.errors import ConfigError, DataError, EpisodeValidationError, SchemaError
from offline_prelearner.replay import EpisodeReplayBuffer
from offline_prelearner.replay.batch import SampleBatch
from offline_prelearner.replay.units import FrameStack, Sequence, Transition

SETTINGS = settings(max_examples=60, deadline=None)
CTX = ConnectorContext()


# ---------------------------------------------------------------------------------------------
# plain-loop references
# ---------------------------------------------------------------------------------------------
def ref_returns(rewards, gamma):
    out = [0.0] * len(rewards)
    acc = 0.0
    for t in reversed(range(len(rewards))):
        acc = float(rewards[t]) + gamma * acc
        out[t] = acc
    return out


def ref_gae(rewards, values, terminated, gamma, lam):
    n = len(rewards)
    adv = [0.0] * n
    acc = 0.0
    for t in reversed(range(n)):
        if t == n - 1:
            v_next = 0.0 if terminated else float(values[n - 1])
        else:
            v_next = float(values[t + 1])
        delta = float(rewards[t]) + gamma * v_next - float(values[t])
        acc = delta + gamma * lam * acc
        adv[t] = acc
    return adv, [a + float(v) for a, v in zip(adv, values, strict=True)]


def ref_mean_var(rows):
    """Per-feature mean and population variance by loops over rows (float64)."""
    rows = [np.asarray(r, np.float64).reshape(-1) for r in rows]
    n, d = len(rows), len(rows[0])
    mean = [sum(r[j] for r in rows) / n for j in range(d)]
    var = [sum((r[j] - mean[j]) ** 2 for r in rows) / n for j in range(d)]
    return np.array(mean), np.array(var)


def tight(a, b):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), 1e-9, 1e-9)


def sampled(episodes, unit=None, n=64, seed=0):
    """A real batch sampled from a buffer holding ``episodes`` (objects or a table)."""
    if isinstance(episodes, EpisodeColumns):
        cap = int(episodes.length.sum()) + len(episodes) + 8
    else:
        cap = sum(len(e) + 1 for e in episodes) + 8
    buf = EpisodeReplayBuffer(cap, unit=unit or Transition(), seed=seed)
    buf.add(episodes)
    return buf.sample(n)


def columns_of(episodes, keep=None):
    """``episodes`` as the table an episode connector takes (``keep``: a boolean subset, so the
    table's steps are not contiguous from row 0 and the new columns are scattered)."""
    cols = EpisodeColumns.from_episodes(list(episodes))
    return cols if keep is None else cols.select(np.asarray(keep, bool))


def on_eps(connector, episodes, ctx=None, keep=None):
    """``connector.on_episodes`` on ``episodes`` as columns; the result one Episode each."""
    cols = columns_of(episodes, keep)
    out = connector.on_episodes(cols) if ctx is None else connector.on_episodes(cols, ctx)
    assert isinstance(out, EpisodeColumns) and len(out) == len(cols)
    return list(out.iter_episodes())


floats = st.floats(-100, 100, allow_nan=False, width=32)


# ---------------------------------------------------------------------------------------------
# discounted_cumsum
# ---------------------------------------------------------------------------------------------
@SETTINGS
@given(
    st.lists(st.lists(floats, min_size=0, max_size=40), min_size=1, max_size=8),
    st.one_of(st.sampled_from([0.0, 1.0, 0.5, 0.99]), st.floats(0, 1)),
)
def test_discounted_cumsum_matches_loop_per_segment(segments, gamma):
    x = np.array([v for s in segments for v in s], np.float64)
    got = discounted_cumsum(x, gamma, [len(s) for s in segments])
    want = [v for s in segments for v in ref_returns(s, gamma)]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-9)


def test_discounted_cumsum_long_segment_no_overflow():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(100_000)
    for gamma in (0.5, 0.99, 0.9999):
        got = discounted_cumsum(x, gamma, [60_000, 40_000])
        assert np.isfinite(got).all()
        want = ref_returns(x[:60_000], gamma) + ref_returns(x[60_000:], gamma)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


def test_discounted_cumsum_rejects_bad_lengths():
    with pytest.raises(ValueError, match="sum to 3"):
        discounted_cumsum(np.zeros(3), 0.9, [1, 1])


# ---------------------------------------------------------------------------------------------
# returns-to-go
# ---------------------------------------------------------------------------------------------
@SETTINGS
@given(random_episodes(max_len=30), st.sampled_from([0.0, 0.9, 0.99, 1.0]), st.data())
def test_returns_to_go_matches_loop(episodes, gamma, data):
    """The columnar scan against a loop per episode, on a whole table and on a subset of one
    (steps not contiguous from row 0)."""
    keep = data.draw(st.lists(st.booleans(), min_size=len(episodes), max_size=len(episodes)))
    cols = columns_of(episodes, keep)
    episodes = [ep for ep, k in zip(episodes, keep, strict=True) if k]
    before = dict(cols.extras)
    out = DiscountedReturns(gamma, dtype="float64").on_episodes(cols)
    assert cols.extras.keys() == before.keys()  # inputs untouched
    assert len(out) == len(episodes)
    for ep, new in zip(episodes, out.iter_episodes(), strict=True):
        assert new.id == ep.id
        np.testing.assert_array_equal(new.rewards, ep.rewards)
        tight(new.extras["returns_to_go"], ref_returns(ep.rewards, gamma))
        partial = new.extras["returns_to_go_partial"]
        assert partial.dtype == bool and partial.shape == (len(ep),)
        assert (partial == (not ep.is_done)).all()


def test_return_connectors_take_gamma_from_context_unless_given():
    ep = make_episode(6, extras=("vf_preds",))
    ctx = ConnectorContext(gamma=0.5)
    (a,) = on_eps(DiscountedReturns(dtype="float64"), [ep], ctx)
    tight(a.extras["returns_to_go"], ref_returns(ep.rewards, 0.5))
    (b,) = on_eps(
        build_pipeline([{"name": "returns_to_go", "gamma": 0.9, "dtype": "float64"}]), [ep], ctx
    )
    tight(b.extras["returns_to_go"], ref_returns(ep.rewards, 0.9))
    (c,) = on_eps(DiscountedReturns(dtype="float64"), [ep])  # the default context: 0.99
    tight(c.extras["returns_to_go"], ref_returns(ep.rewards, 0.99))
    (d,) = on_eps(GAE(lambda_=0.7, dtype="float64"), [ep], ctx)
    tight(d.extras["advantages"], ref_gae(ep.rewards, ep.extras["vf_preds"], True, 0.5, 0.7)[0])


def test_returns_to_go_float32_default_and_custom_column():
    ep = make_episode(7)
    (new,) = on_eps(DiscountedReturns(0.9, column="rtg"), [ep])
    assert new.extras["rtg"].dtype == np.float32
    np.testing.assert_allclose(new.extras["rtg"], ref_returns(ep.rewards, 0.9), rtol=1e-6)
    assert "rtg_partial" in new.extras


def test_returns_to_go_incomplete_raise_names_episode():
    eps = [make_episode(3, id="done"), make_episode(4, id="open", terminated=False)]
    with pytest.raises(EpisodeValidationError, match="'open'") as info:
        on_eps(DiscountedReturns(incomplete="raise"), eps)
    assert info.value.where.episode_id == "open"
    (new,) = on_eps(DiscountedReturns(incomplete="raise"), eps[:1])
    assert "returns_to_go_partial" not in new.extras


def test_returns_to_go_stored_and_sampled_at_t():
    """The column goes through the buffer: every sampled row carries the reference at its t."""
    eps = [make_episode(n, id=f"e{n}", seed=n) for n in (1, 5, 9)]
    eps = on_eps(DiscountedReturns(0.9), eps)
    ref = {ep.id: ref_returns(ep.rewards, 0.9) for ep in eps}
    batch = sampled(eps, n=200)
    for eid, t, rtg in zip(batch["eps_id"], batch["t"], batch["returns_to_go"], strict=True):
        assert rtg == pytest.approx(ref[eid][t], rel=1e-5, abs=1e-5)
    seq = sampled(eps, unit=Sequence(4, burn_in=1), n=50)
    assert seq["returns_to_go"].shape == (50, 5)
    mask = np.arange(5) < seq["seq_lens"][:, None]
    for b, k in zip(*np.nonzero(mask), strict=True):
        eid, t = seq["eps_id"][b], seq["t"][b, k]
        assert seq["returns_to_go"][b, k] == pytest.approx(ref[eid][t], rel=1e-5, abs=1e-5)


def test_returns_to_go_empty_and_bad_args():
    empty = columns_of([make_episode(3)], keep=[False])
    assert DiscountedReturns().on_episodes(empty) is empty
    for bad in ({"gamma": 1.5}, {"gamma": "x"}, {"incomplete": "skip"}, {"dtype": "int32"}):
        with pytest.raises(ConfigError):
            DiscountedReturns(**bad)


# ---------------------------------------------------------------------------------------------
# GAE
# ---------------------------------------------------------------------------------------------
@SETTINGS
@given(
    random_episodes(max_len=25, extras=("vf_preds",)),
    st.sampled_from([0.0, 0.9, 0.99, 1.0]),
    st.sampled_from([0.0, 0.5, 0.95, 1.0]),
)
def test_gae_matches_loop(episodes, gamma, lam):
    cols = columns_of(episodes)
    out = list(GAE(gamma, lam, dtype="float64").on_episodes(cols).iter_episodes())
    for ep, new in zip(episodes, out, strict=True):
        adv, targets = ref_gae(ep.rewards, ep.extras["vf_preds"], ep.terminated, gamma, lam)
        tight(new.extras["advantages"], adv)
        tight(new.extras["value_targets"], targets)
    assert "advantages" not in cols.extras  # inputs untouched


@pytest.mark.parametrize("end", ["terminated", "truncated", "open"])
def test_gae_bootstrap_at_ends(end):
    ep = Episode(
        id="e",
        observations=np.zeros((3, 1)),
        actions=np.zeros(2, np.int64),
        rewards=np.array([1.0, 2.0]),
        terminated=end == "terminated",
        truncated=end == "truncated",
        extras={"vf_preds": np.array([[0.5], [4.0]])},  # [T, 1] is accepted
    )
    (new,) = on_eps(GAE(gamma=0.5, lambda_=1.0, dtype="float64"), [ep])
    boot = 0.0 if end == "terminated" else 4.0
    a1 = 2.0 + 0.5 * boot - 4.0
    a0 = 1.0 + 0.5 * 4.0 - 0.5 + 0.5 * a1
    tight(new.extras["advantages"], [a0, a1])
    tight(new.extras["value_targets"], [a0 + 0.5, a1 + 4.0])


def test_gae_missing_value_column():
    eps = [make_episode(4, id="a"), make_episode(3, id="b")]
    cols = columns_of(eps)
    with pytest.raises(SchemaError, match="vf_preds") as info:
        GAE().on_episodes(cols)
    assert info.value.where.episode_id == "a"
    with pytest.warns(UserWarning, match="vf_preds"):
        assert GAE(missing="skip").on_episodes(cols) is cols
    bad = make_episode(2, id="c")
    bad.extras = {"vf_preds": np.zeros((2, 3))}
    with pytest.raises(SchemaError, match=r"\[T\] or \[T, 1\]") as info:
        on_eps(GAE(), [bad])
    assert info.value.where.episode_id == "c"


def test_gae_columns_stored_and_sampled():
    eps = [make_episode(n, id=f"e{n}", seed=n, extras=("vf_preds",)) for n in (2, 6)]
    ref = {ep.id: ref_gae(ep.rewards, ep.extras["vf_preds"], True, 0.99, 0.95)[0] for ep in eps}
    batch = sampled(on_eps(GAE(), eps), n=100)
    for eid, t, a in zip(batch["eps_id"], batch["t"], batch["advantages"], strict=True):
        assert a == pytest.approx(ref[eid][t], rel=1e-5, abs=1e-5)
    assert batch["value_targets"].dtype == np.float32


# ---------------------------------------------------------------------------------------------
# running statistics and NormalizeObservations
# ---------------------------------------------------------------------------------------------
row_arrays = st.integers(1, 40).flatmap(
    lambda n: st.lists(st.lists(floats, min_size=3, max_size=3), min_size=n, max_size=n)
)


@SETTINGS
@given(row_arrays, st.lists(st.integers(0, 40), max_size=6))
def test_running_stats_any_split_equals_whole(rows, cuts):
    x = np.array(rows, np.float64)
    edges = sorted({min(c, len(x)) for c in cuts})
    parts = np.split(x, edges)
    one = RunningMeanStd()
    for p in parts:
        one.update(p)
    # the same parts in two workers, merged
    left, right = RunningMeanStd(), RunningMeanStd()
    for i, p in enumerate(parts):
        (left if i % 2 else right).update(p)
    left.merge(right)
    mean, var = ref_mean_var(rows)
    for stats in (one, left):
        assert stats.count == len(x)
        np.testing.assert_allclose(stats.mean, mean, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(stats.var, var, rtol=1e-7, atol=1e-7)


def test_running_stats_state_and_shape_errors():
    s = RunningMeanStd()
    assert s.get_state() == {"count": 0}
    s.update(np.arange(12.0).reshape(4, 3))
    t = RunningMeanStd()
    t.set_state(
        json.loads(json.dumps({k: np.asarray(v).tolist() for k, v in s.get_state().items()}))
    )
    assert t.count == 4 and np.array_equal(t.mean, s.mean) and np.array_equal(t.var, s.var)
    with pytest.raises(SchemaError, match=r"\[2\]"):
        s.update(np.zeros((2, 2)))
    with pytest.raises(ConfigError, match="var >= 0"):
        t.set_state({"count": 1, "mean": [0.0], "var": [-1.0]})
    with pytest.raises(ConfigError, match="bad running-statistics state"):
        t.set_state({"count": 2})


@SETTINGS
@given(random_episodes(agents=False, max_len=10), st.integers(1, 3))
def test_normalize_obs_matches_loop(episodes, calls):
    conn = NormalizeObservations(eps=1e-8, clip=None)
    seen = []
    for k in range(calls):
        batch = sampled(episodes, n=16, seed=k)
        out = conn(batch, CTX)
        seen += list(batch["obs"])
        mean, var = ref_mean_var(seen)
        shape = batch["obs"].shape[1:]
        mean, var = mean.reshape(shape), var.reshape(shape)
        for col in ("obs", "new_obs"):
            want = [(np.asarray(r, np.float64) - mean) / np.sqrt(var + 1e-8) for r in batch[col]]
            assert out[col].dtype == np.float32
            np.testing.assert_allclose(out[col], np.array(want), rtol=1e-3, atol=1e-3)
        assert out["actions"] is batch["actions"]  # untouched columns are shared


def test_normalize_obs_clip_state_round_trip_and_update_false():
    eps = [make_episode(20, id=f"e{i}", seed=i) for i in range(3)]
    conn = NormalizeObservations(clip=0.5)
    b0 = sampled(eps, n=32)
    out = conn(b0, CTX)
    assert out["obs"].min() >= -0.5 and out["obs"].max() <= 0.5
    state = conn.get_state()
    assert set(state) == {"None"} and state["None"]["count"] == 32
    frozen = NormalizeObservations(clip=0.5, update=False)
    frozen.set_state(state)
    b1 = sampled(eps, n=32, seed=1)
    np.testing.assert_array_equal(frozen(b1, CTX)["obs"], frozen(b1, CTX)["obs"])
    again = NormalizeObservations(clip=0.5, update=False)
    again.set_state(frozen.get_state())
    np.testing.assert_array_equal(again(b1, CTX)["obs"], frozen(b1, CTX)["obs"])
    assert frozen.get_state()["None"]["count"] == 32  # update=False does not count
    with pytest.raises(ConfigError, match="no statistics"):
        NormalizeObservations(update=False)(b1, CTX)


def test_normalize_obs_per_module_statistics():
    conn = NormalizeObservations()
    a = sampled([make_episode(5, seed=1)], n=8)
    b = sampled([make_episode(5, seed=2, obs_shape=(2,))], n=4)
    conn(a, ConnectorContext(module_id="pi"))
    conn(b, ConnectorContext(module_id="q"))
    state = conn.get_state()
    assert {k: v["count"] for k, v in state.items()} == {"pi": 8, "q": 4}
    assert state["q"]["mean"].shape == (2,)


def test_normalize_obs_sequences_exclude_padding():
    eps = [make_episode(n, id=f"e{n}", seed=n) for n in (2, 3, 7)]
    batch = sampled(eps, unit=Sequence(4, burn_in=2), n=30)
    conn = NormalizeObservations(clip=None)
    out = conn(batch, CTX)
    real = np.arange(6) < batch["seq_lens"][:, None]
    rows = [batch["obs"][b, k] for b, k in zip(*np.nonzero(real), strict=True)]
    mean, var = ref_mean_var(rows)
    stats = conn.stats_for(None)
    assert stats.count == len(rows) < real.size
    np.testing.assert_allclose(stats.mean, mean, rtol=1e-9)
    np.testing.assert_allclose(stats.var, var, rtol=1e-7, atol=1e-9)
    assert out["obs"].shape == batch["obs"].shape


def test_normalize_obs_frame_stack_uses_space_shape():
    eps = [make_episode(6, seed=3, obs_shape=(2,))]
    batch = sampled(eps, unit=FrameStack(3), n=10)
    assert batch["obs"].shape == (10, 3, 2)
    space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    conn = NormalizeObservations(clip=None)
    conn(batch, ConnectorContext(observation_space=space))
    stats = conn.stats_for(None)
    assert stats.shape == (2,) and stats.count == 30
    mean, _ = ref_mean_var(batch["obs"].reshape(-1, 2))
    np.testing.assert_allclose(stats.mean, mean, rtol=1e-9)
    wrong = gym.spaces.Box(-1, 1, (5,), np.float32)
    with pytest.raises(SchemaError, match="observation space's shape"):
        conn(batch, ConnectorContext(observation_space=wrong))


# ---------------------------------------------------------------------------------------------
# FlattenObservations
# ---------------------------------------------------------------------------------------------
@SETTINGS
@given(
    st.sampled_from([(), (1,), (3,), (2, 3), (2, 2, 2)]),
    st.integers(1, 6),
    st.booleans(),
)
def test_flatten_matches_loop(shape, rows, seq):
    rng = np.random.default_rng(rows)
    lead = (rows, 3) if seq else (rows,)
    obs = rng.standard_normal((*lead, *shape)).astype(np.float32)
    cols = {"obs": obs, "new_obs": obs + 1, "actions": np.zeros(lead, np.int64)}
    if seq:
        cols["seq_lens"] = np.full(rows, 3, np.int32)
    out = FlattenObservations()(SampleBatch(cols), CTX)
    for name in ("obs", "new_obs"):
        flat = out[name]
        assert flat.shape == (*lead, max(1, int(np.prod(shape))))
        for idx in np.ndindex(*lead):
            assert flat[idx].tolist() == [float(v) for v in np.asarray(cols[name][idx]).flat]


def test_flatten_structured_observations():
    dt = np.dtype([("pos", np.float32, (2,)), ("id", np.int16), ("grid", np.uint8, (2, 2))])
    obs = np.zeros(4, dt)
    obs["pos"] = np.arange(8).reshape(4, 2)
    obs["id"] = [7, 8, 9, 10]
    obs["grid"] = np.arange(16).reshape(4, 2, 2)
    out = FlattenObservations(columns=["obs"])(SampleBatch(obs=obs), CTX)
    assert out["obs"].shape == (4, 7) and out["obs"].dtype == np.float32
    for i in range(4):
        want = [*obs[i]["pos"].tolist(), int(obs[i]["id"]), *obs[i]["grid"].reshape(-1).tolist()]
        assert out["obs"][i].tolist() == want


def test_flatten_frame_stack_and_missing_column():
    batch = sampled([make_episode(5, obs_shape=(2,))], unit=FrameStack(3), n=4)
    out = FlattenObservations()(batch, CTX)
    assert out["obs"].shape == (4, 6)
    np.testing.assert_array_equal(out["obs"], batch["obs"].reshape(4, 6))
    with pytest.raises(SchemaError, match="no column 'new_obs'"):
        FlattenObservations()(SampleBatch(obs=np.zeros((2, 2))), CTX)


# ---------------------------------------------------------------------------------------------
# OneHotActions
# ---------------------------------------------------------------------------------------------
@SETTINGS
@given(st.integers(1, 6), st.integers(0, 3), st.lists(st.integers(0, 5), min_size=1, max_size=20))
def test_one_hot_matches_loop(n, start, raw):
    actions = np.array([start + a % n for a in raw], np.int64)
    ctx = ConnectorContext(action_space=gym.spaces.Discrete(n, start=start))
    out = OneHotActions()(SampleBatch(actions=actions), ctx)
    enc = out["actions_one_hot"]
    assert enc.dtype == np.float32 and enc.shape == (len(actions), n)
    for row, a in zip(enc, actions, strict=True):
        assert row.tolist() == [1.0 if j == a - start else 0.0 for j in range(n)]
    assert out["actions"] is actions


def test_one_hot_replace_and_sequences_zero_padding():
    eps = [make_episode(n, id=f"e{n}", seed=n) for n in (2, 6)]  # actions in [0, 4)
    batch = sampled(eps, unit=Sequence(3, burn_in=1), n=20)
    out = OneHotActions(4, replace=True, dtype="int8")(batch, CTX)
    enc = out["actions"]
    assert enc.shape == (20, 4, 4) and enc.dtype == np.int8
    for b in range(20):
        for k in range(4):
            want = [0] * 4
            if k < batch["seq_lens"][b]:
                want[batch["actions"][b, k]] = 1
            assert enc[b, k].tolist() == want


def test_one_hot_out_of_range_names_value_and_episode():
    batch = SampleBatch(
        actions=np.array([0, 1, 7, 2]),
        eps_id=np.array(["a", "b", "c", "d"], dtype=object),
        t=np.array([0, 1, 5, 3]),
    )
    with pytest.raises(DataError, match="action 7 is outside") as info:
        OneHotActions(3)(batch, CTX)
    assert (info.value.where.episode_id, info.value.where.timestep) == ("c", 5)
    with pytest.raises(DataError, match=r"action 1\.5"):
        OneHotActions(3)(SampleBatch(actions=np.array([0.0, 1.5])), CTX)
    assert OneHotActions(3)(SampleBatch(actions=np.array([0.0, 2.0])), CTX)[
        "actions_one_hot"
    ].tolist() == [[1, 0, 0], [0, 0, 1]]
    with pytest.raises(ConfigError, match="not Discrete"):
        OneHotActions()(SampleBatch(actions=np.array([0])), CTX)
    with pytest.raises(ConfigError, match="n must be"):
        OneHotActions(0)


# ---------------------------------------------------------------------------------------------
# CastDtypes
# ---------------------------------------------------------------------------------------------
def test_cast():
    batch = SampleBatch(obs=np.ones((3, 2)), actions=np.array([1.7, 2.2, 0.0]))
    out = CastDtypes({"obs": "float16", "actions": np.int32})(batch, CTX)
    assert out["obs"].dtype == np.float16 and out["actions"].tolist() == [1, 2, 0]
    assert batch["obs"].dtype == np.float64  # input batch untouched
    with pytest.raises(SchemaError, match="no column 'rewards'"):
        CastDtypes({"rewards": "float32"})(batch, CTX)
    with pytest.raises(ConfigError, match="'nope' is not a numpy dtype"):
        CastDtypes({"obs": "nope"})
    with pytest.raises(ConfigError, match="object"):
        CastDtypes({"obs": object})
    with pytest.raises(ConfigError, match="non-empty"):
        CastDtypes({})


# ---------------------------------------------------------------------------------------------
# pipeline
# ---------------------------------------------------------------------------------------------
class Tag(Connector):
    """Test connector: appends its tag to ``log`` on both hooks; counts calls as state."""

    name = "tag"
    touches = frozenset({"episodes", "batches"})

    def __init__(self, tag: str = "x", log: list | None = None) -> None:
        self.name = tag
        self.log = log if log is not None else []
        self.calls = 0

    def on_episodes(self, episodes, ctx):
        self.log.append(("ep", self.name))
        return episodes

    def __call__(self, batch, ctx):
        self.log.append(("batch", self.name))
        self.calls += 1
        out = SampleBatch(batch.to_dict())
        out["trail"] = (
            np.char.add(batch["trail"], self.name)
            if "trail" in batch
            else (np.full(len(batch), self.name))
        )
        return out

    def get_state(self):
        return {"calls": self.calls} if self.calls else {}

    def set_state(self, state):
        self.calls = int(state["calls"])


TinyConnector = Tag  # importable as "test_connectors:TinyConnector"
TINY_INSTANCE = Tag("instance")


def test_pipeline_order_editing_and_repr():
    log: list = []
    pipe = ConnectorPipeline([Tag("a", log), Tag("c", log)])
    pipe.insert_before("c", Tag("b", log))
    pipe.append(Tag("d", log))
    assert (
        pipe.names == ["a", "b", "c", "d"]
        and repr(pipe) == "ConnectorPipeline(['a', 'b', 'c', 'd'])"
    )
    removed = pipe.remove("d")
    assert removed.name == "d" and len(pipe) == 3 and pipe["b"].name == "b"
    out = pipe(SampleBatch(x=np.zeros(2)), CTX)
    assert out["trail"].tolist() == ["abc", "abc"]
    pipe.on_episodes(columns_of([make_episode(2)]))
    assert log == [("batch", n) for n in "abc"] + [("ep", n) for n in "abc"]
    with pytest.raises(ConfigError, match="already has a connector named 'a'"):
        pipe.append(Tag("a"))
    with pytest.raises(ConfigError, match="no connector named 'zz'"):
        pipe.remove("zz")
    with pytest.raises(ConfigError, match="not a Connector"):
        pipe.append(lambda b, c: b)  # type: ignore[arg-type]


def test_pipeline_state_round_trip_and_return_type_check():
    pipe = build_pipeline([Tag("a"), "normalize_obs", Tag("b")])
    batch = sampled([make_episode(4)], n=5)
    for _ in range(2):
        pipe(batch, CTX)
    state = pipe.get_state()
    assert set(state) == {"a", "b", "normalize_obs"} and state["a"] == {"calls": 2}
    fresh = build_pipeline([Tag("a"), "normalize_obs", Tag("b")])
    fresh.set_state(state)
    assert fresh["a"].calls == 2
    np.testing.assert_array_equal(
        fresh["normalize_obs"].get_state()["None"]["mean"], state["normalize_obs"]["None"]["mean"]
    )
    with pytest.raises(ConfigError, match=r"\['zz'\]"):
        fresh.set_state({"zz": {}})
    with pytest.raises(ConfigError, match="keeps no state"):
        Connector().set_state({"x": 1})

    class Bad(Connector):
        name = "bad"
        touches = frozenset({"episodes", "batches"})

        def __call__(self, batch, ctx):
            return batch.to_dict()

        def on_episodes(self, columns, ctx):
            return list(columns.iter_episodes())

    with pytest.raises(TypeError, match="'bad' returned dict"):
        ConnectorPipeline([Bad()])(batch)
    with pytest.raises(TypeError, match=r"'bad'\.on_episodes returned list"):
        ConnectorPipeline([Bad()]).on_episodes(columns_of([make_episode(2)]))


def test_pipeline_episode_then_batch_connectors_end_to_end():
    pipe = build_pipeline(
        [
            {"name": "returns_to_go", "gamma": 0.5},
            {"name": "gae", "missing": "skip"},
            "one_hot_actions",
            {"name": "cast", "mapping": {"rewards": "float32"}},
            "flatten_obs",
        ]
    )
    eps = [
        make_episode(6, id=f"e{i}", seed=i, obs_shape=(2, 2), extras=("vf_preds",))
        for i in range(3)
    ]
    assert pipe.touches_episodes and pipe.touches_batches
    stored = pipe.on_episodes(columns_of(eps))
    batch = sampled(stored, n=12)
    out = pipe(batch, ConnectorContext(action_space=gym.spaces.Discrete(4)))
    assert out["obs"].shape == (12, 4) and out["actions_one_hot"].shape == (12, 4)
    assert out["rewards"].dtype == np.float32
    assert {"returns_to_go", "returns_to_go_partial", "advantages", "value_targets"} <= set(
        out.keys()
    )


# ---------------------------------------------------------------------------------------------
# building from specs
# ---------------------------------------------------------------------------------------------
def test_build_by_name_dict_import_path_and_instance():
    assert set(available_connectors()) >= {
        "returns_to_go",
        "gae",
        "normalize_obs",
        "flatten_obs",
        "one_hot_actions",
        "cast",
    }
    c = build_connector("returns_to_go")
    assert isinstance(c, DiscountedReturns) and c.name == "returns_to_go"
    assert build_connector("gae").gamma is None  # the context's gamma
    c = build_connector({"name": "gae", "gamma": 0.9, "lambda_": 0.5})
    assert isinstance(c, GAE) and (c.gamma, c.lambda_) == (0.9, 0.5)
    c = build_connector({"name": "cast", "mapping": {"obs": "float16"}, "as": "cast_obs"})
    assert c.name == "cast_obs"
    c = build_connector("test_connectors:TinyConnector")
    assert isinstance(c, Tag) and c.name == "x"
    c = build_connector({"class": "test_connectors:TinyConnector", "tag": "mine"})
    assert c.name == "mine"
    assert build_connector("test_connectors:TINY_INSTANCE") is TINY_INSTANCE
    inst = Tag("z")
    assert build_connector(inst) is inst


def test_register_connector_decorator():
    @register_connector("test_only_double")
    class Double(Connector):
        def __call__(self, batch, ctx):
            return SampleBatch({k: v * 2 for k, v in batch.items()})

    assert Double.name == "test_only_double" and "test_only_double" in available_connectors()
    out = build_pipeline(["test_only_double"])(SampleBatch(x=np.ones(2)))
    assert out["x"].tolist() == [2.0, 2.0]
    with pytest.raises(ConfigError, match="Connector subclass"):
        register_connector("nope")(dict)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("no_such_connector", r"unknown connector 'no_such_connector'; registered: \[.*'gae'"),
        ("no_such_module_xyz:Thing", "cannot import module 'no_such_module_xyz'"),
        ("test_connectors:Missing", "module 'test_connectors' has no attribute 'Missing'"),
        ("test_connectors:ref_gae", "not a Connector"),
        ("json:loads", "'json:loads'.*not a Connector"),
        (":Thing", "not of the form"),
        ({"name": "gae", "class": "x:Y"}, "exactly one of 'name'"),
        ({"gamma": 0.9}, "exactly one of 'name'"),
        ({"name": "x:Y"}, "use 'class'"),
        ({"class": "gae"}, "'package.module:Name'"),
        ({"name": "gae", "gama": 0.9}, "bad arguments for GAE.*gama"),
        ({"name": "gae", "gamma": 2.0}, r"gamma must be a number in \[0\.0, 1\.0\]"),
        ({"name": "cast", "mapping": {"obs": "f4"}, "as": ""}, "'as' must be"),
        ({"class": "test_connectors:TINY_INSTANCE", "tag": "q"}, "names an instance"),
        (42, "found 42"),
    ],
)
def test_bad_specs_raise_config_error_naming_spec(spec, match):
    with pytest.raises(ConfigError, match=match):
        build_connector(spec)


def test_build_pipeline_inputs():
    assert len(build_pipeline(None)) == 0
    pipe = build_pipeline(["flatten_obs"])
    assert build_pipeline(pipe) is pipe
    with pytest.raises(ConfigError, match="a list of specs"):
        build_pipeline("flatten_obs")
    with pytest.raises(ConfigError, match="already has a connector named 'flatten_obs'"):
        build_pipeline(["flatten_obs", "flatten_obs"])


def test_episode_connectors_edge_episodes():
    """Zero-length episodes among others: their columns are empty, the others' are right."""
    empty = Episode(
        id="empty",
        observations=np.zeros((1, 3), np.float32),
        actions=np.zeros(0, np.int64),
        rewards=np.zeros(0),
        terminated=True,
        extras={"vf_preds": np.zeros(0)},
    )
    full = make_episode(4, id="full", extras=("vf_preds",))
    trunc = Episode(
        id="trunc",
        observations=full.observations,
        actions=full.actions,
        rewards=full.rewards,
        truncated=True,
        extras=full.extras,
    )
    eps = [empty, full, empty, trunc]
    eps[2] = Episode(
        id="empty2",
        observations=empty.observations,
        actions=empty.actions,
        rewards=empty.rewards,
        terminated=True,
        extras=empty.extras,
    )
    out = on_eps(DiscountedReturns(0.9, dtype="float64"), eps)
    assert [len(e.extras["returns_to_go"]) for e in out] == [0, 4, 0, 4]
    tight(out[3].extras["returns_to_go"], ref_returns(full.rewards, 0.9))
    gae = on_eps(GAE(0.9, 0.8, dtype="float64"), eps)
    for ep, new in zip(eps, gae, strict=True):
        adv, _ = ref_gae(ep.rewards, ep.extras["vf_preds"], ep.terminated, 0.9, 0.8)
        tight(new.extras["advantages"], adv)
        assert repr(new).startswith(f"Episode(id={ep.id!r}")


def test_connectors_declare_what_they_touch():
    """Batch-only connectors leave the episodes alone (the pipeline hands the same table back);
    episode connectors say so; a hook a connector defines but does not declare is refused."""
    batch_only = build_pipeline(
        ["normalize_obs", {"name": "cast", "mapping": {"rewards": "float32"}}]
    )
    assert not batch_only.touches_episodes and batch_only.touches_batches
    cols = columns_of([make_episode(3)])
    assert batch_only.on_episodes(cols) is cols
    episodes_only = build_pipeline(["returns_to_go", "gae"])
    assert episodes_only.touches_episodes and not episodes_only.touches_batches
    batch = sampled([make_episode(4)], n=5)
    assert episodes_only(batch, CTX) is batch

    class Undeclared(Connector):
        name = "undeclared"

        def on_episodes(self, columns, ctx):
            return columns

    with pytest.raises(ConfigError, match=r"'undeclared' defines on_episodes .* lacks 'episodes'"):
        ConnectorPipeline([Undeclared()])

    class Nothing(Connector):
        name = "nothing"
        touches = frozenset()

    with pytest.raises(ConfigError, match="touches must be a non-empty frozenset"):
        ConnectorPipeline([Nothing()])


def test_pipeline_pickles_with_state():
    """Ray ships connectors to workers by pickle; state and behaviour survive the trip."""
    import pickle

    pipe = build_pipeline(["returns_to_go", {"name": "normalize_obs", "clip": None}, "flatten_obs"])
    batch = sampled([make_episode(8, obs_shape=(2, 2))], n=16)
    pipe(batch, CTX)
    copy = pickle.loads(pickle.dumps(pipe))
    assert copy.names == pipe.names
    frozen = NormalizeObservations(update=False, clip=None)
    frozen.set_state(pipe["normalize_obs"].get_state())
    copy["normalize_obs"].update = False
    np.testing.assert_array_equal(
        copy(batch, CTX)["obs"], FlattenObservations()(frozen(batch, CTX), CTX)["obs"]
    )


def test_alias_never_renames_a_shared_instance():
    """An instance named by ``"pkg.mod:NAME"`` is one object for every spec naming it: ``"as"``
    on it is refused (it renamed the shared object, in every pipeline and later build), and the
    instance keeps its name; ``"as"`` on a class builds a new connector under the alias."""
    spec = {"class": "test_connectors:TINY_INSTANCE", "as": "renamed"}
    with pytest.raises(ConfigError, match=r"'as' renames .* shared instance \(named 'instance'\)"):
        build_connector(spec)
    assert TINY_INSTANCE.name == "instance"
    pipe = build_pipeline(["test_connectors:TINY_INSTANCE"])
    assert pipe.names == ["instance"] and pipe["instance"] is TINY_INSTANCE
    a = build_connector({"class": "test_connectors:TinyConnector", "tag": "t", "as": "first"})
    b = build_connector({"class": "test_connectors:TinyConnector", "tag": "t"})
    assert (a.name, b.name) == ("first", "t") and a is not b
