"""Composite observations (gymnasium Dict / Tuple, nested): struct columns -> per-leaf arrays.

Rows whose ``obs`` / ``new_obs`` are Arrow struct columns become episodes whose observations are
flat ``{leaf path: [T + 1, ...]}`` maps; checked against a plain loop over the rows per leaf, with
random spaces and episodes (Hypothesis). Plain observations are untouched (the other reader
tests).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.config import ReadConfig
from offline_prelearner.episodes import observations as O
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.errors import DataError
from offline_prelearner.io.formats.rows.reader import RowsReader

Leaf = tuple[str, tuple[int, ...]]  # dtype, shape per step

leaf_st = st.tuples(
    st.sampled_from(["float32", "float64", "int64", "uint8"]),
    st.sampled_from([(), (1,), (3,), (2, 2)]),
)
names = st.sampled_from(["observation", "desired_goal", "achieved_goal", "0", "1", "pos"])
space_st = st.recursive(
    leaf_st,
    lambda kids: st.dictionaries(names, kids, min_size=1, max_size=3),
    max_leaves=5,
).filter(lambda s: isinstance(s, dict))


def _paths(space: Any, prefix: str = "") -> dict[str, Leaf]:
    if isinstance(space, dict):
        out: dict[str, Leaf] = {}
        for k, v in space.items():
            out.update(_paths(v, f"{prefix}.{k}" if prefix else k))
        return out
    return {prefix: space}


def _arrow(leaf: np.ndarray) -> pa.Array:
    if leaf.ndim == 1:
        return pa.array(leaf)
    flat = pa.array(leaf.reshape(-1))
    for size in reversed(leaf.shape[1:]):
        flat = pa.FixedSizeListArray.from_arrays(flat, size)
    return flat


def _struct(space: Any, values: dict[str, np.ndarray], prefix: str = "") -> pa.Array:
    fields, arrays = [], []
    for k, v in space.items():
        path = f"{prefix}.{k}" if prefix else k
        arrays.append(_struct(v, values, path) if isinstance(v, dict) else _arrow(values[path]))
        fields.append(k)
    return pa.StructArray.from_arrays(arrays, fields)


def _episodes(space: Any, lengths: list[int], seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for n in lengths:
        obs = {}
        for path, (dtype, shape) in _paths(space).items():
            obs[path] = (rng.normal(size=(n + 1, *shape)) * 10).astype(dtype)
        out.append(obs)
    return out


def _table(space: Any, eps: list[dict[str, np.ndarray]]) -> pa.Table:
    ids, obs, new_obs, term = [], [], [], []
    for e, ep in enumerate(eps):
        n = len(next(iter(ep.values()))) - 1
        ids += [f"e{e}"] * n
        obs.append({k: v[:-1] for k, v in ep.items()})
        new_obs.append({k: v[1:] for k, v in ep.items()})
        term += [False] * (n - 1) + [True]
    cat = {k: np.concatenate([o[k] for o in obs]) for k in obs[0]}
    new = {k: np.concatenate([o[k] for o in new_obs]) for k in new_obs[0]}
    n = len(ids)
    return pa.table(
        {
            "eps_id": ids,
            "obs": _struct(space, cat),
            "new_obs": _struct(space, new),
            "actions": np.zeros(n, np.int64),
            "rewards": np.ones(n),
            "terminateds": term,
            "truncateds": [False] * n,
        }
    )


@settings(max_examples=40, deadline=None)
@given(
    space=space_st,
    lengths=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    seed=st.integers(0, 2**16),
)
def test_struct_rows_become_per_leaf_episodes(space: Any, lengths: list[int], seed: int) -> None:
    eps = _episodes(space, lengths, seed)
    batch = RowsReader(ReadConfig()).read(_table(space, eps))
    assert batch.ledger.rows_kept == sum(lengths) and not batch.ledger.rows_rejected
    got = {ep.id: ep for ep in batch.episodes}
    for e, ref in enumerate(eps):
        ep = got[f"e{e}"]
        assert set(ep.observations) == set(ref)
        for path, leaf in ref.items():  # plain reference: the rows' obs then the last new_obs
            assert ep.observations[path].dtype == leaf.dtype
            np.testing.assert_array_equal(ep.observations[path], leaf)


def test_ten_goal_conditioned_rows_are_read() -> None:
    """The issue's case: 10 rows with struct obs (observation, desired_goal), 0 episodes before."""
    space = {"observation": ("float32", (4,)), "desired_goal": ("float32", (2,))}
    eps = _episodes(space, [4, 6], seed=0)
    batch = RowsReader(ReadConfig()).read(_table(space, eps))
    assert batch.ledger.rows_kept == 10 and len(batch.episodes) == 2
    assert "desired_goal" in repr(batch.episodes[0])


def test_a_stream_continues_a_composite_episode_across_batches() -> None:
    space = {"observation": ("float32", (3,)), "goal": {"x": ("int64", ())}}
    (ep,) = _episodes(space, [6], seed=1)
    table = _table(space, [ep])
    reader = RowsReader(ReadConfig(check_continuity=True))
    first, second = reader.read(table.slice(0, 4)), reader.read(table.slice(4))
    whole = Episode.concat_fragments(first.episodes + second.episodes)
    for path, leaf in ep.items():
        np.testing.assert_array_equal(whole.observations[path], leaf)
    assert whole.slice(2, 4).observations["goal.x"].tolist() == ep["goal.x"][2:5].tolist()


def test_a_scrambled_composite_episode_is_refused() -> None:
    space = {"observation": ("float32", (3,))}
    (ep,) = _episodes(space, [5], seed=2)
    table = _table(space, [ep])
    scrambled = table.take([0, 2, 1, 3, 4])
    with pytest.raises(DataError, match="differs from the previous row's new_obs"):
        RowsReader(ReadConfig(check_continuity=True)).read(scrambled)


def test_a_null_observation_names_the_leaf_row() -> None:
    obs = pa.StructArray.from_arrays([pa.array([1.0, 2.0])], ["x"], mask=pa.array([False, True]))
    table = pa.table(
        {
            "eps_id": ["e", "e"],
            "obs": obs,
            "new_obs": obs,
            "actions": [0, 0],
            "rewards": [0.0, 0.0],
            "terminateds": [False, True],
            "truncateds": [False, False],
        }
    )
    with pytest.raises(DataError, match="null observation at row 1"):
        RowsReader(ReadConfig()).read(table)


def test_nest_rebuilds_the_dicts() -> None:
    flat = {"a.b": 1, "a.c": 2, "d": 3}
    assert O.nest(flat) == {"a": {"b": 1, "c": 2}, "d": 3}
    assert O.flatten(O.nest(flat)) == {k: np.asarray(v) for k, v in flat.items()}


# ---------------------------------------------------------------------------- the buffer


def _buffer_samples(eps: list[Episode], capacity: int, frames: int | None = None) -> Any:
    from offline_prelearner.replay import EpisodeReplayBuffer
    from offline_prelearner.replay.samplers.in_order import InOrder
    from offline_prelearner.replay.units import FrameStack, Transition

    unit: Any = Transition() if frames is None else FrameStack(frames, Transition())
    buf = EpisodeReplayBuffer(capacity, InOrder(), unit, seed=0)
    buf.add(eps)
    return buf, buf.sample(buf.valid_starts().total)


@settings(max_examples=30, deadline=None)
@given(
    space=space_st,
    lengths=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    seed=st.integers(0, 2**16),
)
def test_rows_to_buffer_to_samples_per_leaf(space: Any, lengths: list[int], seed: int) -> None:
    """rows -> episodes -> one ring column per leaf -> Transition samples: every step's
    ``obs.<leaf>`` / ``new_obs.<leaf>`` equal a plain loop over the reference episodes."""
    ref = _episodes(space, lengths, seed)
    batch = RowsReader(ReadConfig()).read(_table(space, ref))
    buf, sb = _buffer_samples(batch.episodes, capacity=sum(lengths) + len(lengths) + 3)
    assert not {"obs", "new_obs"} & set(sb.keys())
    assert {k for k in buf.storage.columns if k.startswith("obs/")} == {f"obs/{p}" for p in ref[0]}
    expected: dict[str, list[Any]] = {}
    for ep in ref:  # the plain loop: one sample per step, in episode order
        for t in range(len(next(iter(ep.values()))) - 1):
            for path, leaf in ep.items():
                expected.setdefault(f"obs.{path}", []).append(leaf[t])
                expected.setdefault(f"new_obs.{path}", []).append(leaf[t + 1])
    for name, rows in expected.items():
        np.testing.assert_array_equal(sb[name], np.stack(rows), err_msg=name)
        assert sb[name].dtype == rows[0].dtype
    for got, want in zip(buf.storage.episodes(), ref, strict=True):  # read back out of the ring
        for path, leaf in want.items():
            np.testing.assert_array_equal(got.observations[path], leaf)


def test_a_fragment_appends_to_a_composite_episode_in_the_ring() -> None:
    space = {"observation": ("float32", (3,)), "goal": {"x": ("int64", ())}}
    (ep,) = _episodes(space, [6], seed=3)
    whole = Episode(id="e", observations=ep, actions=np.zeros(6, np.int64), rewards=np.ones(6))
    buf, _ = _buffer_samples([whole.slice(0, 3)], capacity=20)
    buf.add([whole.slice(3)])
    (held,) = buf.storage.episodes()
    for path, leaf in ep.items():
        np.testing.assert_array_equal(held.observations[path], leaf)


def test_plain_and_composite_episodes_do_not_mix_in_one_buffer() -> None:
    space = {"observation": ("float32", (3,))}
    (ep,) = _episodes(space, [3], seed=4)
    composite = Episode(id="a", observations=ep, actions=np.zeros(3), rewards=np.ones(3))
    plain = Episode(id="b", observations=ep["observation"], actions=np.zeros(3), rewards=np.ones(3))
    buf, _ = _buffer_samples([composite], capacity=20)
    with pytest.raises(DataError, match="observation leaves"):
        buf.add([plain])


# ---------------------------------------------------------------------------- validation, learner


def _composite(eid: str, ep: dict[str, np.ndarray]) -> Episode:
    n = len(next(iter(ep.values()))) - 1
    return Episode(
        id=eid, observations=ep, actions=np.zeros(n, np.int64), rewards=np.ones(n), truncated=True
    )


def test_validation_checks_each_leaf() -> None:
    from offline_prelearner.config import ValidateConfig
    from offline_prelearner.episodes.episode_columns import EpisodeColumns
    from offline_prelearner.episodes.ledger import EpisodeBatch
    from offline_prelearner.episodes.validate import Validator

    space = {"observation": ("float32", (3,)), "goal": ("float64", (2,))}
    good, nan, other = _episodes(space, [4, 4, 4], seed=5)
    nan["goal"][2, 1] = np.nan
    other["goal"] = other["goal"][:, :1].copy()  # a leaf of another shape
    v = Validator(ValidateConfig(check_finite_obs=True), "skip")
    # A batch holds one layout: the leaf of another shape comes in a batch of its own.
    out = v.validate(
        EpisodeBatch(
            EpisodeColumns.from_episodes([_composite("good", good), _composite("nan", nan)])
        )
    )
    assert [e.id for e in out.episodes] == ["good"]
    assert dict(out.ledger.episodes_rejected) == {"nan_obs": 1}
    out = v.validate(EpisodeBatch(EpisodeColumns.from_episodes([_composite("other", other)])))
    assert len(out) == 0 and dict(out.ledger.episodes_rejected) == {"obs_shape": 1}


def test_the_prelearner_writes_a_column_per_leaf_and_the_learner_gets_nested_dicts() -> None:
    import offline_prelearner as op

    space = {"observation": ("float32", (4,)), "goal": {"xy": ("float32", (2,))}}
    ref = _episodes(space, [4, 6], seed=6)
    prelearner = op.OfflinePreLearner(op.PreLearnerConfig().with_updates({"sample_all": True}))
    (rows,) = list(prelearner(_table(space, ref)))
    assert {k for k in rows if "obs" in k} == {
        "obs.observation",
        "new_obs.observation",
        "obs.goal.xy",
        "new_obs.goal.xy",
    }
    sb = op.MultiAgentBatch.from_rows(rows)["default_policy"]
    obs, new_obs = sb.nested("obs"), sb.nested("new_obs")
    np.testing.assert_array_equal(
        obs["goal"]["xy"], np.concatenate([e["goal.xy"][:-1] for e in ref])
    )
    np.testing.assert_array_equal(
        new_obs["observation"], np.concatenate([e["observation"][1:] for e in ref])
    )
    assert sb.nested("actions") is sb["actions"]


def _units() -> list[Any]:
    from offline_prelearner.replay.units import FrameStack, NStep, Sequence, Transition

    return [
        Transition(),
        NStep(3, gamma=0.9),
        NStep((1, 3), gamma=0.9),
        Sequence(3, burn_in=1),
        FrameStack(3, Transition()),
        FrameStack(2, NStep(2, gamma=0.9)),
        FrameStack(2, NStep(1, gamma=0.9)),
        FrameStack(2, Sequence(2)),
    ]


@pytest.mark.parametrize("unit", _units(), ids=repr)
@settings(max_examples=15, deadline=None)
@given(
    space=space_st,
    lengths=st.lists(st.integers(1, 7), min_size=1, max_size=4),
    seed=st.integers(0, 2**16),
)
def test_every_unit_gathers_each_leaf_as_a_plain_buffer_of_that_leaf_would(
    unit: Any, space: Any, lengths: list[int], seed: int
) -> None:
    """The reference per leaf: the same episodes with that leaf as a plain observation, through
    the same buffer, sampler and unit (the plain path, itself checked against plain loops)."""
    from offline_prelearner.replay import EpisodeReplayBuffer
    from offline_prelearner.replay.samplers.in_order import InOrder

    ref = _episodes(space, lengths, seed)
    rng = np.random.default_rng(seed)
    acts = [rng.integers(0, 3, n) for n in lengths]
    rews = [rng.normal(size=n) for n in lengths]

    def sample(obs_of: Any) -> Any:
        eps = [
            Episode(id=f"e{i}", observations=obs_of(o), actions=a, rewards=r, truncated=i % 2 == 0)
            for i, (o, a, r) in enumerate(zip(ref, acts, rews, strict=True))
        ]
        buf = EpisodeReplayBuffer(sum(lengths) + len(lengths) + 5, InOrder(), unit, seed=0)
        buf.add(eps)
        return buf.sample(buf.valid_starts().total)

    composite = sample(lambda o: o)
    for path in ref[0]:
        plain = sample(lambda o, path=path: o[path])
        for key, want in plain.items():
            if key in ("obs", "new_obs"):
                key = f"{key}.{path}"
            np.testing.assert_array_equal(composite[key], want, err_msg=key)
            assert composite[key].dtype == want.dtype


def test_each_leaf_column_carries_its_space_in_the_field_metadata() -> None:
    import gymnasium as gym

    from offline_prelearner.io.leaf_spaces import leaf_spaces, read_leaf_space, with_leaf_spaces

    space = gym.spaces.Dict(
        {
            "observation": gym.spaces.Box(-1, 1, (4,), np.float32),
            "goal": gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(0, 1, (2,)))),
        }
    )
    assert list(leaf_spaces(space)) == ["goal.0", "goal.1", "observation"]  # gymnasium sorts
    table = pa.table(
        {
            "obs.goal.0": np.zeros(2, np.int64),
            "new_obs.goal.1": np.zeros((2, 2), np.float32).tolist(),
            "actions": [0, 1],
        }
    )
    out = with_leaf_spaces(table, space)
    assert read_leaf_space(out.schema.field("obs.goal.0")) == gym.spaces.Discrete(3)
    assert read_leaf_space(out.schema.field("new_obs.goal.1")) == space["goal"][1]
    assert read_leaf_space(out.schema.field("actions")) is None
    assert out.equals(table)  # values untouched
    assert with_leaf_spaces(table, gym.spaces.Box(0, 1, (2,))) is table  # plain: unchanged


def test_composite_episodes_travel_to_shards_as_record_columns() -> None:
    from offline_prelearner.replay.replay_buffer import as_columns

    space = {"observation": ("float32", (3,))}
    (ep,) = _episodes(space, [3], seed=7)
    composite = _composite("c", ep)
    plain = _composite("p", ep)
    plain.observations = ep["observation"]
    packed = list(as_columns([composite, plain]))  # in order, a table per layout
    assert [p.ids for p in packed] == [["c"], ["p"]]
    assert packed[0].composite and not packed[1].composite
    got = packed[0].episode(0).observations
    assert isinstance(got, dict)
    np.testing.assert_array_equal(got["observation"], composite.observations["observation"])
