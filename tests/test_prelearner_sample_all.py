"""``sample_all`` across batch edges: fragments of an episode cut by the edges wait, as columns,
until it ends, then it is sampled whole, where it ended.

For random streams of RLlib-layout rows (episodes cut at random batch edges, some never ending,
ids as strings or ints, with or without ``t``, one module or several by a ``module_id`` column,
rewards whose dtype changes from one batch to the next) the samples of the stream, batch after
batch, are those of the whole table read as one batch: every window of every complete episode,
once, in order, none cut by an edge; the one never ending stays pending.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offline_prelearner import OfflinePreLearner


def rows_table(
    lengths: list[int], open_last: bool, ids: str, with_t: bool, modules: bool, seed: int
) -> pa.Table:
    """Episodes one after another, RLlib's row layout; the last one unfinished if asked."""
    rng = np.random.default_rng(seed)
    n = sum(lengths)
    eid = np.repeat(np.arange(len(lengths)), lengths)
    first = np.repeat(np.cumsum(lengths) - lengths, lengths)
    t = np.arange(n) - first
    last = t == np.repeat(np.array(lengths) - 1, lengths)
    if open_last:
        last[-1] = False
    obs = rng.standard_normal((n + len(lengths), 3)).astype(np.float32)
    at = np.arange(n) + eid
    trunc = last & (rng.random(n) < 0.3)
    cols: dict[str, Any] = {
        "eps_id": pa.array(eid.astype(str)) if ids == "str" else pa.array(eid),
        "obs": pa.FixedSizeListArray.from_arrays(pa.array(obs[at].ravel()), 3),
        "actions": rng.integers(0, 2, n),
        "rewards": np.where(rng.random(n) < 0.2, -0.0, rng.standard_normal(n)),
        "new_obs": pa.FixedSizeListArray.from_arrays(pa.array(obs[at + 1].ravel()), 3),
        "terminateds": last & ~trunc,
        "truncateds": trunc,
    }
    if with_t:
        cols["t"] = t
    if modules:
        cols["module_id"] = pa.array(np.where(eid % 3 == 0, "m0", "m1").tolist())
    return pa.table(cols)


@st.composite
def streams(draw: Any) -> tuple[dict[str, Any], pa.Table, list[pa.Table]]:
    lengths = draw(st.lists(st.integers(1, 12), min_size=1, max_size=14))
    table = rows_table(
        lengths,
        open_last=draw(st.booleans()),
        ids=draw(st.sampled_from(["str", "int"])),
        with_t=draw(st.booleans()),
        modules=draw(st.booleans()),
        seed=draw(st.integers(0, 99)),
    )
    n = table.num_rows
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=5))))
    edges = [0, *[c for c in cuts if 0 < c < n], n]
    batches = [table.slice(a, b - a) for a, b in itertools.pairwise(edges)]
    if draw(st.booleans()) and len(batches) > 1:  # rewards of another dtype from batch 2 on
        k = batches[1].schema.get_field_index("rewards")
        batches[1:] = [
            b.set_column(k, "rewards", b.column("rewards").cast(pa.float32())) for b in batches[1:]
        ]
    config = {
        "sample_all": True,
        "n_step": draw(st.sampled_from([1, 2, 3])),
        "gamma": 0.9,
        "seed": 0,
    }
    return config, table, batches


def by_module(outputs: list[dict[str, Any]]) -> dict[str, dict[str, np.ndarray]]:
    """Each module's rows over all outputs, in order (``indices`` left out: handles name the
    buffer of one batch)."""
    parts: dict[str, list[dict[str, Any]]] = {}
    for out in outputs:
        parts.setdefault(str(out["module_id"][0]), []).append(out)
    return {
        m: {k: np.concatenate([o[k] for o in outs]) for k in outs[0] if k != "indices"}
        for m, outs in parts.items()
    }


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams())
def test_sample_all_across_batch_edges_equals_one_batch(
    case: tuple[dict[str, Any], pa.Table, list[pa.Table]],
) -> None:
    config, table, batches = case
    stream, whole = OfflinePreLearner(**config), OfflinePreLearner(**config)
    got = by_module([out for batch in batches for out in stream(batch)])
    want = by_module(list(whole(table)))
    assert list(got) == list(want)
    for m, cols in want.items():
        assert list(got[m]) == list(cols)
        for k, y in cols.items():
            x = got[m][k]
            if y.dtype.kind == "f":  # rewards may be float32 from batch 2 on: the values agree
                np.testing.assert_allclose(x.astype(np.float64), y, rtol=1e-5, atol=1e-6, err_msg=k)
            else:
                assert x.tolist() == y.tolist(), k
    a, b = stream.stats(), whole.stats()
    # The episode never ending waits, in as many fragments as batches it spans.
    assert (a["pending_fragments"] > 0) == (b["pending_fragments"] > 0)
    assert b["pending_fragments"] <= a["pending_fragments"] <= len(batches)
    assert a["samples"] == b["samples"]
    assert a["ledger"]["rows_in"] == b["ledger"]["rows_in"]
    assert a["ledger"]["episodes_kept"] == b["ledger"]["episodes_kept"]


def test_a_subclass_with_its_own_sample_all_keeps_it() -> None:
    """``sample_all`` is a hook like the others: a subclass's override takes the batch's
    episodes as columns and runs for every batch."""

    class Counting(OfflinePreLearner):
        calls = 0

        def sample_all(self, columns: Any) -> Any:
            type(self).calls += 1
            return super().sample_all(columns)

    table = rows_table([3, 4], open_last=False, ids="str", with_t=False, modules=False, seed=0)
    out = list(Counting(sample_all=True)(table))
    assert Counting.calls == 1 and len(out[0]["obs"]) == 7


def test_fragments_of_one_episode_in_one_batch_join_with_a_pending_one() -> None:
    """msgpack records may hold two fragments of one episode in a batch: both continue the
    pending one (the id more than once in ``_complete``), and the output is the whole episode's."""
    from offline_prelearner.episodes.episode import Episode
    from offline_prelearner.io.formats.episodes.reader import episodes_to_table

    rng = np.random.default_rng(0)
    obs = rng.standard_normal((13, 4)).astype(np.float32)
    act, rew = rng.integers(0, 2, 12), rng.standard_normal(12)

    def part(a: int, b: int, done: bool) -> Episode:
        return Episode(id="A", observations=obs[a : b + 1], actions=act[a:b], rewards=rew[a:b],
                       terminated=done, t_started=a)  # fmt: skip

    other = Episode(id="B", observations=obs[:4], actions=act[:3], rewards=rew[:3], terminated=True)
    config = {"read": {"format": "episodes"}, "sample": {"sample_all": True, "n_step": 3}}
    stream = OfflinePreLearner(config)
    batches = [[part(0, 4, False), other], [part(4, 8, False), part(8, 12, True)]]
    got = by_module([out for b in batches for out in stream(episodes_to_table(b))])
    want = by_module(list(OfflinePreLearner(config)(episodes_to_table([other, part(0, 12, True)]))))
    assert stream.stats()["pending_fragments"] == 0
    for m, cols in want.items():
        order_got = np.argsort(got[m]["eps_id"].astype(str), kind="stable")
        order_want = np.argsort(cols["eps_id"].astype(str), kind="stable")
        for k, y in cols.items():
            assert got[m][k][order_got].tolist() == y[order_want].tolist(), k


@st.composite
def shuffled_streams(draw: Any) -> tuple[pa.Table, list[pa.Table], int]:
    """A table with ``t`` cut into batches, some batches lost, one maybe delivered twice, the
    rest in a random order (as Ray Data may deliver blocks); the rows of the repeated batch."""
    lengths = draw(st.lists(st.integers(1, 12), min_size=1, max_size=14))
    table = rows_table(
        lengths,
        open_last=draw(st.booleans()),
        ids=draw(st.sampled_from(["str", "int"])),
        with_t=True,
        modules=draw(st.booleans()),
        seed=draw(st.integers(0, 99)),
    )
    n = table.num_rows
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=8))))
    edges = [0, *[c for c in cuts if 0 < c < n], n]
    batches = [table.slice(a, b - a) for a, b in itertools.pairwise(edges)]
    lost = draw(st.sets(st.integers(0, len(batches) - 1), max_size=2))
    batches = [b for i, b in enumerate(batches) if i not in lost] or batches[:1]
    repeated = 0
    if draw(st.booleans()):
        again = batches[draw(st.integers(0, len(batches) - 1))]
        batches.append(again)
        repeated = again.num_rows
    return table, draw(st.permutations(batches)), repeated


def plain_complete_rows(batches: list[pa.Table]) -> tuple[set[tuple[str, int]], int]:
    """A plain loop over the delivered rows: the ``(eps_id, t)`` of every row of the episodes
    whose rows cover t from 0 to a done row, and how many (batch, episode) fragments the others
    leave."""
    steps: dict[str, dict[int, bool]] = {}
    parts: dict[str, set[int]] = {}
    for k, b in enumerate(batches):
        for e, t, term, trunc in zip(
            b.column("eps_id").to_pylist(),
            b.column("t").to_pylist(),
            b.column("terminateds").to_pylist(),
            b.column("truncateds").to_pylist(),
            strict=True,
        ):
            steps.setdefault(str(e), {})[t] = term or trunc
            parts.setdefault(str(e), set()).add(k)
    want: set[tuple[str, int]] = set()
    open_parts = 0
    for e, ts in steps.items():
        last = max(ts)
        if ts[last] and sorted(ts) == list(range(last + 1)):
            want.update((e, t) for t in ts)
        else:
            open_parts += len(parts[e])
    return want, open_parts


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shuffled_streams())
def test_sample_all_with_t_joins_fragments_in_any_order(
    case: tuple[pa.Table, list[pa.Table], int],
) -> None:
    # Batches of a dataset with t, some lost, one maybe twice, in random order: the episodes
    # sampled are exactly the complete ones of what was delivered (t covered from 0 to a done
    # step), each once, their samples those of the whole table read in one batch; a partial
    # episode is never sampled, and its fragments are held and counted, not dropped.
    table, batches, repeated = case
    config = {"sample_all": True, "n_step": 1, "seed": 0}
    stream = OfflinePreLearner(**config)
    outs = [out for batch in batches for out in stream(batch)]
    got = [(str(e), int(t)) for o in outs for e, t in zip(o["eps_id"], o["t"], strict=True)]
    distinct = list({id(b): b for b in batches}.values())  # a batch twice: its fragments once
    want, open_parts = plain_complete_rows(distinct)
    assert sorted(got) == sorted(want)  # each complete episode's every step, once
    stats = stream.stats()
    assert stats["pending_fragments"] == open_parts
    ledger = stats["ledger"]
    assert ledger["balanced"] and ledger["rows_in"] == sum(b.num_rows for b in batches)
    assert ledger["rows_duplicate"] == repeated
    assert ledger["rows_kept"] == ledger["rows_in"] - repeated
    # The samples of each complete episode are those of the whole table read in one batch.
    whole = by_module(list(OfflinePreLearner(**config)(table)))
    mine = by_module(outs)
    for m, cols in mine.items():
        keys = [(str(e), int(t)) for e, t in zip(cols["eps_id"], cols["t"], strict=True)]
        ref = whole[m]
        at = {
            (str(e), int(t)): i
            for i, (e, t) in enumerate(zip(ref["eps_id"], ref["t"], strict=True))
        }
        rows = np.array([at[k] for k in keys], np.int64)
        for name in ("obs", "new_obs", "actions", "rewards", "terminateds", "truncateds"):
            assert cols[name].tolist() == ref[name][rows].tolist(), name
