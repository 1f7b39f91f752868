"""``sample_all`` on columns (no object per episode) against the episode path, batch by batch.

Rows read as columns take ``OfflinePreLearner.sample_all_columns``; a subclass whose
``postprocess_columns`` returns None takes the episode path (``sample_all`` over objects, the
reference). For random streams of RLlib-layout rows (episodes cut at random batch edges, some
never ending, ids as strings or ints, with or without ``t``, one module or several by a
``module_id`` column, rewards whose dtype changes from one batch to the next) both must yield
the same batches, column for column and dtype for dtype, and hold the same pending fragments.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offline_prelearner import OfflinePreLearner
from offline_prelearner.episodes.episode_columns import EpisodeColumns


class EpisodePath(OfflinePreLearner):
    """The reference: every batch through Episode objects."""

    def postprocess_columns(self, columns: EpisodeColumns) -> EpisodeColumns | None:
        return None


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
def streams(draw: Any) -> tuple[dict[str, Any], list[pa.Table]]:
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
    return config, batches


def assert_same_output(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert list(a) == list(b)
        for k in b:
            x, y = np.asarray(a[k]), np.asarray(b[k])
            assert x.dtype == y.dtype, k
            if x.dtype.kind == "f":
                assert x.tobytes() == y.tobytes(), k
            else:
                assert x.tolist() == y.tolist(), k


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams())
def test_sample_all_on_columns_equals_the_episode_path(
    case: tuple[dict[str, Any], list[pa.Table]],
) -> None:
    config, batches = case
    fast, slow = OfflinePreLearner(**config), EpisodePath(**config)
    for batch in batches:
        assert_same_output(list(fast(batch)), list(slow(batch)))
    a, b = fast.stats(), slow.stats()
    assert a["pending_fragments"] == b["pending_fragments"]
    assert a["samples"] == b["samples"]
    assert a["ledger"] == b["ledger"]


def test_a_subclass_with_its_own_sample_all_keeps_it() -> None:
    """``sample_all`` is an episode hook: a subclass that overrides it alone takes the episode
    path (with the FutureWarning every such subclass gets), so its override runs."""
    import pytest

    with pytest.warns(FutureWarning, match="sample_all"):

        class Counting(OfflinePreLearner):
            calls = 0

            def sample_all(self, episodes: list[Any]) -> Any:
                type(self).calls += 1
                return super().sample_all(episodes)

    table = rows_table([3, 4], open_last=False, ids="str", with_t=False, modules=False, seed=0)
    out = list(Counting(sample_all=True)(table))
    assert Counting.calls == 1 and len(out[0]["obs"]) == 7
