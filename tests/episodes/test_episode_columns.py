"""Batches held as shared columns (``EpisodeColumns``) through validation and de-duplication.

The rows reader hands a batch over as columns; ``Validator.validate`` and
``Deduplicator.dedupe`` then work on the columns without building objects. The reference is the
same batch held as objects: for random mixes of good and bad episodes (one column layout, as a
reader's batch has) and episodes sent again, both forms must keep the same episodes and record
the same rejections, duplicates, ledger and warnings. The prelearner's columnar path must emit
exactly what its object path emits, on real recorded rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_validate_batch import episode, outcome, validate_configs, validator

from offline_prelearner.config import PreLearnerConfig
from offline_prelearner.episodes.dedupe import Deduplicator
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.episodes.episode_columns import EpisodeColumns
from offline_prelearner.episodes.ledger import EpisodeBatch, Ledger
from offline_prelearner.episodes.validate import Validator
from offline_prelearner.prelearner import OfflinePreLearner

#: The kinds of test_validate_batch that keep one column layout (a reader's batch has one).
SAME_LAYOUT = [
    "good", "good", "good", "good", "short", "empty", "bad_t", "open", "nan_reward",
    "inf_reward", "nan_obs", "obs_out", "act_out",
]  # fmt: skip


def columns_batch(eps: list[Episode]) -> EpisodeBatch:
    n = sum(len(e) for e in eps)
    batch = EpisodeBatch(ledger=Ledger(rows_in=n))
    if eps:
        batch.add_columns(EpisodeColumns.from_episodes(eps))
    return batch


def objects_batch(eps: list[Episode]) -> EpisodeBatch:
    rows = [len(e) for e in eps]
    return EpisodeBatch(list(eps), rows, Ledger(rows_in=sum(rows)))


@st.composite
def cases(draw: st.DrawFn) -> tuple[dict[str, Any], list[list[Episode]]]:
    cfg = draw(validate_configs())
    out: list[list[Episode]] = []
    sent: list[Episode] = []
    k = 0
    for _ in range(draw(st.integers(1, 3))):
        batch: list[Episode] = []
        for kind, n in draw(
            st.lists(
                st.tuples(st.sampled_from([*SAME_LAYOUT, "again"]), st.integers(1, 8)), max_size=25
            )
        ):
            if kind == "again" and sent:  # sent before: a duplicate (or a repeat in this batch)
                ep = draw(st.sampled_from(sent))
            else:
                ep = episode("good" if kind == "again" else kind, k := k + 1, n)
            if all(e.id != ep.id for e in batch):  # a reader never gives one key twice a batch
                batch.append(ep)
                sent.append(ep)
        out.append(batch)
    return cfg, out


def run(v: Validator, d: Deduplicator, batch: EpisodeBatch) -> None:
    d.dedupe(v.validate(batch))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_columns_validate_and_dedupe_like_objects(
    case: tuple[dict[str, Any], list[list[Episode]]],
) -> None:
    cfg, batches = case
    fast = (validator(cfg), Deduplicator())
    slow = (validator(cfg), Deduplicator())
    for eps in batches:
        a, b = columns_batch(eps), objects_batch(eps)
        got = outcome(fast[0], lambda v, x: run(v, fast[1], x), a)
        want = outcome(slow[0], lambda v, x: run(v, slow[1], x), b)
        assert got == want
        if got["raised"]:
            break


class ObjectPath(OfflinePreLearner):
    """The same prelearner, forced onto the per-object path (its columnar hook declines)."""

    def postprocess_columns(self, columns: EpisodeColumns) -> None:
        return None


@pytest.mark.parametrize(
    "updates",
    [{}, {"n_step": 3}, {"buffer.kind": "prioritized", "buffer.capacity": 3000}],
    ids=["uniform", "nstep3", "prioritized-small"],
)
def test_prelearner_columnar_path_emits_what_the_object_path_emits(updates: dict[str, Any]) -> None:
    table = pq.read_table(sorted((REPO / "datasets/cartpole-v1/rows").glob("*.parquet")))
    cfg = PreLearnerConfig().with_updates(
        {"read.format": "rows", "train_batch_size": 64, **updates}
    )
    fast, slow = OfflinePreLearner(cfg), ObjectPath(cfg)
    for start in range(0, table.num_rows, 700):  # batch edges cut episodes: fragments too
        part = table.slice(start, 700)
        got, want = list(fast(part)), list(slow(part))
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert g.keys() == w.keys()
            for k in g:
                np.testing.assert_array_equal(g[k], w[k], err_msg=k)
    assert fast.stats() == slow.stats()


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
    assert cols is not None and cols.last_obs is not None
    a = EpisodeReplayBuffer(10_000, Uniform(), Transition(), seed=0)
    b = EpisodeReplayBuffer(10_000, Uniform(), Transition(), seed=0)
    a.add(cols)
    b.add(cols.episodes())
    sa, sb = a.sample(500), b.sample(500)
    for k in ("obs", "new_obs", "actions", "rewards"):
        assert (np.asarray(sa[k]) == np.asarray(sb[k])).all()
