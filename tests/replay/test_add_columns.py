"""Episodes held as shared columns (``EpisodeColumns``) added in bulk, against one at a time.

The rows reader gives a batch's episodes as views of a few shared arrays; the buffer's ``add``
writes them (``EpisodeStorage.add_columns``) without building an object per episode. The
reference is the per-episode step (``storage.add_episode`` one by one, as in ``test_add_many``):
for random streams of new episodes, continuations, duplicates, wraps of small rings and dropped
episodes (gaps in the shared arrays), both sides must hold the same columns, table, counters and
sampler notifications, raise the same error at the same episode, and draw the same samples.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from buffer_helpers import make_episode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_add_many import assert_same, buffers, sequential_add, streams

from offline_prelearner.episodes.episode import Episode
from offline_prelearner.episodes.episode_columns import EpisodeColumns
from offline_prelearner.errors import EpisodeValidationError
from offline_prelearner.replay.storage.placement import layout as _layout

columns_of = EpisodeColumns.from_episodes


def same_layout_chunks(call: list[Episode]) -> list[list[Episode]]:
    out: list[list[Episode]] = []
    for ep in call:
        if out and _layout(out[-1][-1]) == _layout(ep):
            out[-1].append(ep)
        else:
            out.append([ep])
    return out


def assert_same_episode(a: Episode, b: Episode) -> None:
    for f in ("id", "terminated", "truncated", "agent_id", "module_id", "t_started", "infos"):
        assert getattr(a, f) == getattr(b, f), f
    for f in ("observations", "actions", "rewards"):
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)
    assert a.extras.keys() == b.extras.keys()
    for k in a.extras:
        np.testing.assert_array_equal(a.extras[k], b.extras[k])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.data())
def test_add_columns_equals_one_add_per_episode(
    case: tuple[int, list[list[Episode]]], data: Any
) -> None:
    capacity, calls = case
    batched, sequential = buffers(capacity)
    for call in calls:
        for chunk in same_layout_chunks(call):
            cols = columns_of(chunk)
            keep = np.array(
                data.draw(st.lists(st.booleans(), min_size=len(chunk), max_size=len(chunk)))
            )
            if keep.any() and not keep.all():  # gaps in the shared arrays
                cols = cols.select(keep)
                chunk = [e for e, k in zip(chunk, keep.tolist(), strict=True) if k]
            for got, want in zip(cols.iter_episodes(), chunk, strict=True):
                assert_same_episode(got, want)
            errors: list[tuple[str, str] | None] = []
            for fn in (batched.add, lambda c: sequential_add(sequential, list(c.iter_episodes()))):
                try:
                    fn(cols)
                    errors.append(None)
                except EpisodeValidationError as e:
                    errors.append((e.reason, str(e)))
            assert errors[0] == errors[1]
            assert_same(batched, sequential)
        if batched.valid_starts().total:
            a, b = batched.sample(16), sequential.sample(16)
            for k in a:
                np.testing.assert_array_equal(a[k], b[k])


def test_runs_of_new_episodes_take_the_bulk_path() -> None:
    eps = [make_episode(i, 3, seed=i) for i in range(6)]
    batched, sequential = buffers(100)
    batched.add(columns_of(eps[:1]))  # the first add fixes the layout
    out: list[Any] = []
    batched.storage.add_columns(columns_of(eps[1:]), out)
    assert [type(c).__name__ for c in out] == ["Placements"]
    batched._notify(out)
    sequential_add(sequential, eps[:1])
    sequential_add(sequential, eps[1:])
    assert_same(batched, sequential)


def test_select_and_ranges_against_a_loop() -> None:
    eps = [make_episode(i, n, seed=i) for i, n in enumerate([3, 0, 5, 1, 2])]
    cols = columns_of(eps)
    keep = np.array([True, False, True, False, True])
    sub = cols.select(keep)
    want_steps = [
        s
        for e in np.flatnonzero(keep)
        for s in range(cols.step_at[e], cols.step_at[e] + cols.length[e])
    ]
    want_obs = [
        s
        for e in np.flatnonzero(keep)
        for s in range(cols.obs_at[e], cols.obs_at[e] + cols.length[e] + 1)
    ]
    assert np.arange(len(cols.actions))[sub.step_rows()].tolist() == want_steps
    assert np.arange(len(cols.obs))[sub.obs_rows()].tolist() == want_obs
    assert cols.step_rows() == slice(0, 11)  # contiguous: a view
