"""Joining fragments of one episode that arrive in different batches or files."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.episodes.episode import Episode
from offline_prelearner.episodes.episode_columns import EpisodeColumns
from offline_prelearner.episodes.ledger import EpisodeBatch
from offline_prelearner.episodes.stitch import stitch_fragments
from offline_prelearner.errors import EpisodeValidationError


def _episode(eid: str, n: int, seed: int = 0, terminated: bool = True) -> Episode:
    rng = np.random.default_rng(seed)
    return Episode(
        id=eid,
        observations=rng.normal(size=(n + 1, 3)).astype(np.float32),
        actions=rng.integers(0, 4, n),
        rewards=rng.normal(size=n),
        terminated=terminated,
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 30), st.lists(st.integers(1, 29), max_size=4)),
        min_size=1,
        max_size=5,
    ),
    st.randoms(use_true_random=False),
)
def test_cut_and_shuffled_fragments_join_back(specs, rnd) -> None:
    originals, frags = [], []
    for k, (n, cuts) in enumerate(specs):
        ep = _episode(f"e{k}", n, seed=k)
        originals.append(ep)
        points = sorted({c for c in cuts if c < n})
        bounds = [0, *points, n]
        frags += [ep.slice(a, b) for a, b in itertools.pairwise(bounds)]
    rnd.shuffle(frags)
    batch = EpisodeBatch(EpisodeColumns.from_episodes(frags))
    batch.ledger.rows_in = sum(len(f) for f in frags)
    out = stitch_fragments(batch)
    got = {e.id: e for e in out.episodes}
    assert len(got) == len(originals) == len(out.episodes)
    for ep in originals:
        g = got[ep.id]
        assert np.array_equal(g.observations, ep.observations)
        assert np.array_equal(g.rewards, ep.rewards) and g.terminated and len(g) == len(ep)
    assert out.ledger.balanced()


def test_overlapping_copies_stay_apart_for_the_deduplicator() -> None:
    ep = _episode("x", 5)
    batch = EpisodeBatch(EpisodeColumns.from_episodes([ep, ep]), [5, 5])
    out = stitch_fragments(batch)
    assert len(out.episodes) == 2 and out.ledger.rows_kept == 10


def test_boundary_mismatch_is_rejected_by_policy() -> None:
    a = _episode("x", 4, seed=1, terminated=False)
    b = _episode("x", 3, seed=2).slice(0)
    b = Episode(
        id="x",
        observations=b.observations,
        actions=b.actions,
        rewards=b.rewards,
        t_started=4,
        terminated=True,
    )
    for policy in ("raise", "skip"):
        batch = EpisodeBatch(EpisodeColumns.from_episodes([a, b]), [4, 3])
        batch.ledger.rows_in = 7
        if policy == "raise":
            with pytest.raises(EpisodeValidationError, match="first observation differs"):
                stitch_fragments(batch, policy)
        else:
            out = stitch_fragments(batch, policy)
            assert len(out) == 0 and out.ledger.rows_rejected == {"inconsistent": 7}
            assert out.ledger.balanced()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 12), st.booleans()), min_size=1, max_size=12),
    st.booleans(),
    st.randoms(use_true_random=False),
)
def test_whole_episodes_beside_joined_ones_keep_their_order_and_each_row_once(
    specs: list[tuple[int, bool]], split: bool, rnd
) -> None:
    """Episodes that need no join stay as they are, in first-seen order among the joined ones,
    and the batch holds each row once: a batch of many whole episodes and a few cut ones used to
    hold every episode's copy of all the rows (200,000 rows in 4 files: 18.6 GiB asked)."""
    frags = []
    for k, (n, cut) in enumerate(specs):
        ep = _episode(f"e{k}", n, seed=k)
        frags += [ep.slice(0, n // 2), ep.slice(n // 2, n)] if cut and n > 1 else [ep]
    rnd.shuffle(frags)
    batch = EpisodeBatch(EpisodeColumns.from_episodes(frags, split=split))
    batch.ledger.rows_in = sum(len(f) for f in frags)
    out = stitch_fragments(batch)
    first_seen = list(dict.fromkeys(f.id for f in frags))  # a plain loop: the reference
    assert [e.id for e in out.episodes] == first_seen
    for e in out.episodes:
        k = int(e.id[1:])
        ref = _episode(e.id, specs[k][0], seed=k)
        assert np.array_equal(e.observations, ref.observations)
        assert np.array_equal(e.actions, ref.actions) and np.array_equal(e.rewards, ref.rewards)
    cols = out.columns
    steps = sum(n for n, _ in specs)
    assert len(cols.actions) == steps
    assert len(cols.obs) == (steps if split else steps + len(specs))
    assert out.ledger.balanced()
