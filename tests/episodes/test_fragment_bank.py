"""FragmentBank: the fragments two prelearners could not complete meet there, by t, whatever the
order; each episode comes back once, to the deposit that completed it; a later epoch's copies of
fragments that can never complete are duplicates, never joined (see fragment_bank's docstring).

The prelearners here take the path ``offline_prelearner.rllib`` takes with ``to_learner=
"episodes"`` and more than one map_batches actor (read, validate, de-duplicate, complete what the
batch completes, deposit the rest), with the bank as a plain object instead of a Ray actor.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_prelearner_sample_all import rows_table

from offline_prelearner import OfflinePreLearner
from offline_prelearner.episodes.episode_columns import EpisodeColumns
from offline_prelearner.episodes.fragment_bank import FragmentBank, OpenFragments


def actor() -> OfflinePreLearner:
    """A prelearner as RLlibPreLearner runs one for whole episodes (any-order de-duplication)."""
    return OfflinePreLearner(sample_all=True)


def call(pre: OfflinePreLearner, bank: FragmentBank, batch: pa.Table) -> list[EpisodeColumns]:
    """One prelearner call: the episodes it hands on (its own, then those the bank gave back)."""
    kept = pre.validate(pre.map_to_episodes(batch))
    pre._count_episodes(kept)
    out = [pre._complete(kept.columns)]
    if len(pre._pending):
        done, _ = bank.deposit(pre._pending.drain())
        out += done
    return out


def episodes(parts: list[EpisodeColumns]) -> list[tuple[str, int, int, bool]]:
    """(id, t_started, length, done) of every episode handed on."""
    return [
        (str(i), int(t), int(n), bool(d))
        for p in parts
        for i, t, n, d in zip(p.ids, p.t_started, p.length, p.done, strict=True)
    ]


def epoch(table: pa.Table, cuts: list[int], seed: int, bank: FragmentBank) -> list[Any]:
    """One epoch: the table cut into batches, shuffled, dealt at random to two new prelearners."""
    n = table.num_rows
    edges = [0, *sorted({c for c in cuts if 0 < c < n}), n]
    batches = [table.slice(a, b - a) for a, b in itertools.pairwise(edges)]
    rng = random.Random(seed)
    rng.shuffle(batches)
    actors = [actor(), actor()]
    got: list[Any] = []
    for b in batches:
        got += episodes(call(actors[rng.randrange(2)], bank, b))
    return got


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=12),
    cuts=st.lists(st.integers(1, 150), max_size=10),
    seed=st.integers(0, 10_000),
    open_last=st.booleans(),
)
def test_two_prelearners_and_the_bank_hand_on_each_complete_episode_once(
    lengths: list[int], cuts: list[int], seed: int, open_last: bool
) -> None:
    table = rows_table(lengths, open_last, ids="str", with_t=True, modules=False, seed=seed)
    complete = [
        (str(e), 0, n, True)
        for e, n in enumerate(lengths)
        if not (open_last and e == len(lengths) - 1)
    ]
    bank = FragmentBank()
    for k in range(2):  # two epochs through the same bank, in new prelearners each
        got = epoch(table, cuts, seed + k, bank)
        assert sorted(got) == sorted(complete)  # every complete episode once, whole
        stats = bank.stats()
        # Only the episode that never ends stays (its fragments, with its every row); the
        # second epoch's copies of them are duplicates, never joined with the first's.
        assert stats["held_rows"] == (lengths[-1] if open_last else 0)
        assert stats["duplicates"] == (stats["held_fragments"] if k else 0)


def test_an_episode_never_seen_at_t0_is_held_not_handed_on() -> None:
    # Fragments t=4..8 (done) and t=2..4 of an episode recorded from t=2: nothing says an
    # earlier fragment is not still to come, so it is never complete: held, counted.
    table = rows_table([9], False, ids="str", with_t=True, modules=False, seed=0).slice(2)
    held = OpenFragments()
    pre = actor()
    cols = pre.map_to_episodes(table).columns
    assert held.add(("0", None), cols) is None
    assert len(held) == 1 and held.rows == 7


def test_an_overlapping_fragment_is_a_counted_duplicate() -> None:
    table = rows_table([9], False, ids="str", with_t=True, modules=False, seed=0)
    pre = actor()
    first = pre.map_to_episodes(table.slice(0, 5)).columns
    again = pre.map_to_episodes(table.slice(3, 3)).columns
    rest = pre.map_to_episodes(table.slice(5)).columns
    held = OpenFragments()
    assert held.add(("0", None), first) is None
    assert held.add(("0", None), again) is None and held.duplicates == 1
    whole = held.add(("0", None), rest)
    assert whole is not None and whole.length.tolist() == [9] and len(held) == 0
    np.testing.assert_array_equal(whole.rewards, table.column("rewards").to_numpy())


@pytest.mark.parametrize("order", ["in order", "reversed"])
def test_a_done_fragment_before_its_start_waits(order: str) -> None:
    table = rows_table([9], False, ids="str", with_t=True, modules=False, seed=1)
    pre = actor()
    parts = [
        pre.map_to_episodes(table.slice(a, b - a)).columns for a, b in [(0, 3), (3, 6), (6, 9)]
    ]
    if order == "reversed":
        parts.reverse()
    held = OpenFragments()
    results = [held.add(("0", None), p) for p in parts]
    assert all(r is None for r in results[:2])
    assert results[2] is not None and results[2].t_started.tolist() == [0]
    assert results[2].length.tolist() == [9] and len(held) == 0


def plain_overlap_dedup(stream: list[tuple[str, str, int, int]]) -> list[bool]:
    """A plain loop over (id, agent, t_started, length): kept unless it shares a step with an
    episode of its key kept before (any order of arrival; an empty one shares none)."""
    kept: list[tuple[tuple[str, str], int, int]] = []
    out = []
    for eid, agent, start, length in stream:
        key, end = (eid, agent), start + length
        dup = length > 0 and any(k == key and s < end and start < e for k, s, e in kept if s < e)
        out.append(not dup)
        if not dup:
            kept.append((key, start, end))
    return out


@settings(max_examples=200, deadline=None)
@given(
    stream=st.lists(
        st.tuples(
            st.sampled_from("abc"),
            st.sampled_from(["p", "q"]),
            st.integers(0, 12),
            st.integers(0, 5),
        ),
        max_size=30,
    ),
    cuts=st.lists(st.integers(0, 30), max_size=4),
)
def test_any_order_dedup_drops_only_overlaps(
    stream: list[tuple[str, str, int, int]], cuts: list[int]
) -> None:
    # The whole-episode paths' Deduplicator: an earlier fragment arriving after a later one is
    # kept (the joining needs it); only a fragment sharing a step with one kept is a repeat.
    from conftest import make_episode

    from offline_prelearner.episodes.dedupe import Deduplicator
    from offline_prelearner.episodes.ledger import EpisodeBatch, Ledger

    eps = [
        make_episode(n, id=e, agent_id=a, t_started=s, module_id=i)
        for i, (e, a, s, n) in enumerate(stream)
    ]
    d = Deduplicator(any_order=True)
    kept: list[int] = []
    bounds = [0, *sorted(c for c in cuts if c < len(eps)), len(eps)]
    for lo, hi in itertools.pairwise(bounds):
        part = eps[lo:hi]
        rows = [len(e) for e in part]
        batch = EpisodeBatch(EpisodeColumns.from_episodes(part), rows, Ledger(rows_in=sum(rows)))
        out = d.dedupe(batch)
        assert out.ledger.balanced()
        kept.extend(out.columns.modules)
    assert kept == [i for i, k in enumerate(plain_overlap_dedup(stream)) if k]
