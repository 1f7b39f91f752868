"""Episodes held as shared columns (``EpisodeColumns``), the one carrier from reader to buffer.

Episode views of the columns are the episodes given, and read-only; composite observations and
infos travel in the columns; the per-episode helpers (``iter_episodes``, ``map_episodes``,
``join_fragments``) rebuild what they are given; split and assembled observations read alike.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.episodes import observations as O
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.episodes.episode_columns import EpisodeColumns
from offline_prelearner.errors import EpisodeValidationError


def _episodes(lengths: list[int], seed: int = 0, **kw: Any) -> list[Episode]:
    rng = np.random.default_rng(seed)
    return [
        Episode(
            id=f"e{k}",
            observations=rng.standard_normal((n + 1, 3)).astype(np.float32),
            actions=rng.integers(0, 2, n),
            rewards=rng.random(n),
            terminated=k % 2 == 0,
            truncated=k % 2 == 1,
            t_started=k,
            extras={"logp": rng.random(n).astype(np.float32)},
            **kw,
        )
        for k, n in enumerate(lengths)
    ]


def assert_same(a: Episode, b: Episode) -> None:
    assert (a.id, a.agent_id, a.module_id, a.t_started) == (
        b.id,
        b.agent_id,
        b.module_id,
        b.t_started,
    )
    assert (a.terminated, a.truncated, a.infos) == (b.terminated, b.truncated, b.infos)
    assert O.same(a.observations, b.observations)
    for x, y in [(a.actions, b.actions), (a.rewards, b.rewards)] + [
        (a.extras[k], b.extras[k]) for k in b.extras
    ]:
        assert x.dtype == y.dtype and np.array_equal(x, y)


@pytest.mark.parametrize("split", [False, True])
def test_episode_views_are_the_episodes_given_and_read_only(split: bool) -> None:
    eps = _episodes([3, 1, 0, 5])
    cols = EpisodeColumns.from_episodes(eps, split=split)
    views = list(cols.iter_episodes())
    assert len(views) == len(cols) == 4
    for view, ep in zip(views, eps, strict=True):
        assert_same(view, ep)
        for arr in (view.observations, view.actions, view.rewards, view.extras["logp"]):
            assert not arr.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            view.rewards[:] = 0.0
    np.testing.assert_allclose(cols.returns(), [e.total_reward for e in eps], rtol=1e-12)


def test_composite_observations_and_infos_travel_in_columns() -> None:
    rng = np.random.default_rng(1)
    eps = [
        Episode(
            id=k,
            observations={"pos": rng.random((n + 1, 2)), "img": rng.integers(0, 9, (n + 1, 4, 4))},
            actions=np.arange(n),
            rewards=np.ones(n),
            infos=[{"k": k, "t": t} for t in range(n + 1)] if k != 1 else None,
        )
        for k, n in enumerate([2, 4, 1])
    ]
    cols = EpisodeColumns.from_episodes(eps)
    assert cols.composite and cols.obs.dtype.names == ("pos", "img")
    for view, ep in zip(cols.iter_episodes(), eps, strict=True):
        assert_same(view, ep)
    joined = EpisodeColumns.concat([cols.select(np.array([2])), EpisodeColumns.empty(), cols])
    assert [e.id for e in joined.iter_episodes()] == [2, 0, 1, 2]
    assert joined.infos is not None and joined.infos[1] == eps[0].infos and joined.infos[2] is None


def test_map_episodes_rebuilds_columns_from_what_fn_returns() -> None:
    eps = _episodes([4, 2, 3])
    cols = EpisodeColumns.from_episodes(eps, split=True)

    def scaled(ep: Episode) -> Episode:
        return Episode(
            id=ep.id, observations=ep.observations, actions=ep.actions, rewards=ep.rewards * 2,
            terminated=ep.terminated, truncated=ep.truncated, t_started=ep.t_started,
            extras={**ep.extras, "ret": np.cumsum(ep.rewards[::-1])[::-1]},
        )  # fmt: skip

    out = cols.map_episodes(scaled)
    assert out.last_obs is not None and list(out.extras) == ["logp", "ret"]
    for view, ep in zip(out.iter_episodes(), eps, strict=True):
        assert np.array_equal(view.rewards, ep.rewards * 2)
        assert np.array_equal(view.observations, ep.observations)
    assert cols.map_episodes(lambda e: e) is not cols  # the identity still copies once
    assert EpisodeColumns.empty().map_episodes(scaled).ids == []


@pytest.mark.parametrize("cuts", [[], [3], [1, 2, 6]])
def test_join_fragments_gives_back_the_episode(cuts: list[int]) -> None:
    (ep,) = _episodes([7], seed=3)
    bounds = [0, *cuts, 7]
    parts = [EpisodeColumns.from_episodes([ep.slice(a, b)]) for a, b in itertools.pairwise(bounds)]
    (joined,) = EpisodeColumns.join_fragments(parts).iter_episodes()
    assert_same(joined, ep)


def test_join_fragments_refuses_what_does_not_continue() -> None:
    (ep,) = _episodes([6])
    a, b = ep.slice(0, 2), ep.slice(3)  # a step missing between them
    with pytest.raises(EpisodeValidationError, match="do not continue"):
        EpisodeColumns.join_fragments([EpisodeColumns.from_episodes([x]) for x in (a, b)])
    with pytest.raises(ValueError, match="exactly one episode"):
        EpisodeColumns.join_fragments([EpisodeColumns.from_episodes([ep, ep])])


def test_episodes_of_another_layout_cannot_share_columns() -> None:
    eps = _episodes([2, 3])
    other = Episode(id="x", observations=np.zeros((3, 4), np.float32), actions=np.zeros(2, int),
                    rewards=np.zeros(2), extras={"logp": np.zeros(2, np.float32)})  # fmt: skip
    with pytest.raises(ValueError, match="different layouts"):
        EpisodeColumns.from_episodes([*eps, other])
    with pytest.raises(ValueError, match="dtypes or step shapes"):
        EpisodeColumns.concat(
            [EpisodeColumns.from_episodes(eps), EpisodeColumns.from_episodes([other])]
        )


# ---------------------------------------------------------------------------- split observations
def _split(cols: EpisodeColumns) -> EpisodeColumns:
    """The same episodes with split observations: step obs in step order plus each last obs."""
    from dataclasses import replace

    steps = np.concatenate(
        [cols.obs[o : o + n] for o, n in zip(cols.obs_at, cols.length, strict=True)]
    )
    last = cols.obs[cols.obs_at + cols.length]
    return replace(cols, obs=steps, last_obs=last)


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=8),
    keep=st.lists(st.booleans(), min_size=8, max_size=8),
    seed=st.integers(0, 2**16),
)
def test_split_observations_are_the_assembled_ones(
    lengths: list[int], keep: list[bool], seed: int
) -> None:
    """Every way to read observations gives the same frames from both layouts, after any
    selection of episodes (a plain loop over the episode objects is the reference)."""
    rng = np.random.default_rng(seed)
    eps = [
        Episode(
            id=f"e{k}",
            observations=rng.integers(0, 255, (n + 1, 3, 2), dtype=np.uint8),
            actions=rng.integers(0, 2, n),
            rewards=rng.random(n).astype(np.float32),
            terminated=True,
        )
        for k, n in enumerate(lengths)
    ]
    whole = EpisodeColumns.from_episodes(eps)
    mask = np.array(keep[: len(eps)], bool)
    picked = [e for e, m in zip(eps, mask, strict=True) if m]
    for cols, chosen in ((whole, eps), (whole.select(mask), picked)):
        split = _split(whole).select(mask) if cols is not whole else _split(whole)
        if not chosen:
            continue
        want = np.concatenate([e.observations for e in chosen])
        assert (split.observations() == want).all()
        assert (cols.observations() == want).all()
        dest = np.zeros_like(want)
        split.write_observations(dest)
        assert (dest == want).all()
        for e, ep in enumerate(chosen):
            assert (split.episode(e).observations == ep.observations).all()
            assert (split.final_obs(e) == ep.observations[-1]).all()
            one = np.zeros_like(ep.observations)
            split.write_observations(one, e, e + 1)
            assert (one == ep.observations).all()
        if len(chosen) > 1:  # a middle range
            lo, hi = 1, len(chosen)
            part = np.concatenate([e.observations for e in chosen[lo:hi]])
            assert (split.observations(lo, hi) == part).all()


def test_rows_reader_hands_over_split_observations_and_the_buffer_stores_the_same() -> None:
    """Real recorded rows in episode order become split observations; the buffer filled from
    them holds exactly what it holds when filled from the episode objects."""
    from offline_prelearner.config import ReadConfig
    from offline_prelearner.io.readers import make_reader
    from offline_prelearner.replay.replay_buffer import EpisodeReplayBuffer
    from offline_prelearner.replay.samplers import Uniform
    from offline_prelearner.replay.units import Transition

    table = pq.read_table(sorted((REPO / "datasets/cartpole-v1/rows").glob("*.parquet"))[0])
    batch = make_reader(ReadConfig()).read(table)
    cols = batch.columns
    assert cols.last_obs is not None
    a = EpisodeReplayBuffer(10_000, Uniform(), Transition(), seed=0)
    b = EpisodeReplayBuffer(10_000, Uniform(), Transition(), seed=0)
    a.add(cols)
    b.add(list(cols.iter_episodes()))
    sa, sb = a.sample(500), b.sample(500)
    for k in ("obs", "new_obs", "actions", "rewards"):
        assert (np.asarray(sa[k]) == np.asarray(sb[k])).all()
