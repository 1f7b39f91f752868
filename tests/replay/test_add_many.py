"""Batched adds (``EpisodeReplayBuffer.add`` of Episode objects, joined into columns and placed
in runs by ``EpisodeStorage.add_columns``) against one ``add`` per episode.

The reference is the per-episode path itself: a storage fed one ``add`` at a time, its
``Change`` records notified the way a buffer did before batching. Random streams mix new
episodes, continuations (in place and moved), duplicates, re-sent evicted episodes, fragments
after the end, other column layouts and wraps of small rings; after every add both sides must
hold the same columns, table, counters and sampler notifications, and draw the same samples.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from buffer_helpers import make_episode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offline_prelearner.episodes.episode import Episode
from offline_prelearner.episodes.episode_columns import EpisodeColumns
from offline_prelearner.errors import EpisodeValidationError
from offline_prelearner.replay import EpisodeReplayBuffer
from offline_prelearner.replay.replay_buffer import as_columns
from offline_prelearner.replay.samplers import Uniform
from offline_prelearner.replay.storage.ring import Change, EpisodeStorage, Placements


class Recorder(Uniform):
    """A Uniform that logs every on_add / on_evict call (the slots, in order)."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, list[int]]] = []

    def on_add(self, storage: Any, slots: np.ndarray) -> None:
        self.log.append(("add", slots.tolist()))

    def on_evict(self, storage: Any, slots: np.ndarray) -> None:
        self.log.append(("evict", slots.tolist()))

    def __repr__(self) -> str:
        return "Recorder()"


def sequential_add(buf: EpisodeReplayBuffer, eps: list[Episode]) -> None:
    """The per-episode path: ``storage.add`` one by one, then notify the Change records."""
    changes: list[Change] = []
    try:
        for ep in eps:
            change = buf.storage.add_episode(ep)
            changes += change.side
            changes.append(change)
    finally:
        buf._notify(changes)


def table_state(st_: EpisodeStorage) -> dict[str, Any]:
    tab = st_.table
    out: dict[str, Any] = {f: tab.view(f).tolist() for f in tab.cols}
    out.update(
        first_serial=tab.base + tab.lo, where=dict(tab.where), version=tab.version, head=st_.head
    )
    return out


def assert_same(a: EpisodeReplayBuffer, b: EpisodeReplayBuffer) -> None:
    sa, sb = a.storage, b.storage
    assert table_state(sa) == table_state(sb)
    assert sa.counters == sb.counters
    assert sa.columns.keys() == sb.columns.keys()
    for k in sa.columns:
        assert sa.columns[k].dtype == sb.columns[k].dtype
        np.testing.assert_array_equal(sa.columns[k], sb.columns[k])
    assert a.sampler.log == b.sampler.log  # type: ignore[attr-defined]


@st.composite
def streams(draw: st.DrawFn) -> tuple[int, list[list[Episode]]]:
    """A capacity and a list of add calls, each a list of episodes or fragments."""
    capacity = draw(st.integers(6, 60))
    ends: dict[Any, tuple[int, np.ndarray, bool]] = {}  # id -> (t_end, last obs, done)
    sent: list[Episode] = []
    calls: list[list[Episode]] = []
    seed = 0
    for _ in range(draw(st.integers(1, 6))):
        call: list[Episode] = []
        for _ in range(draw(st.integers(0, 12))):
            seed += 1
            kind = draw(st.sampled_from(["new"] * 6 + ["cont", "dup", "after", "layout", "long"]))
            n = draw(st.integers(0, 7))
            end = draw(st.sampled_from(["terminated", "truncated", "open"]))
            if kind == "cont" and ends:
                eid = draw(st.sampled_from(list(ends)))
                t_end, last, _ = ends[eid]
                ep = make_episode(eid, n, end, seed, t_started=t_end, obs0=last)
            elif kind == "dup" and sent:
                ep = draw(st.sampled_from(sent))
            elif kind == "after" and ends:  # may be a gap, a fragment after the end, ...
                eid = draw(st.sampled_from(list(ends)))
                ep = make_episode(eid, n, end, seed, t_started=ends[eid][0] + 1)
            elif kind == "layout":  # another reward dtype: a new accepted layout, mid-run
                ep = make_episode(10_000 + seed, n, end, seed, reward_dtype=np.float32)
            elif kind == "long":
                ep = make_episode(10_000 + seed, capacity, end, seed)  # needs capacity + 1
            else:
                ep = make_episode(draw(st.sampled_from([seed, f"s{seed}"])), n, end, seed)
            if ep.id not in ends or ep.t_end > ends[ep.id][0]:  # where a fragment would go on
                ends[ep.id] = (ep.t_end, ep.observations[-1], ep.is_done)
            sent.append(ep)
            call.append(ep)
        calls.append(call)
    return capacity, calls


def buffers(capacity: int) -> tuple[EpisodeReplayBuffer, EpisodeReplayBuffer]:
    return (
        EpisodeReplayBuffer(capacity, Recorder(), seed=1),
        EpisodeReplayBuffer(capacity, Recorder(), seed=1),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams())
def test_batched_add_equals_one_add_per_episode(case: tuple[int, list[list[Episode]]]) -> None:
    capacity, calls = case
    batched, sequential = buffers(capacity)
    for call in calls:
        errors: list[tuple[str, str] | None] = []
        for fn in (batched.add, lambda e: sequential_add(sequential, e)):
            try:
                fn(call)
                errors.append(None)
            except EpisodeValidationError as e:
                errors.append((e.reason, str(e)))
        assert errors[0] == errors[1]
        assert_same(batched, sequential)
        if batched.valid_starts().total:
            a, b = batched.sample(16), sequential.sample(16)
            assert a.keys() == b.keys()
            for k in a:
                np.testing.assert_array_equal(a[k], b[k])


@settings(max_examples=100, deadline=None)
@given(
    st.integers(11, 80),
    st.lists(st.tuples(st.integers(0, 9), st.booleans()), min_size=1, max_size=30),
)
def test_placements_expand_to_the_changes_of_single_adds(
    capacity: int, spec: list[tuple[int, bool]]
) -> None:
    """Runs of new episodes: the Placements records expand to the exact Change list."""
    eps = [make_episode(i, n, done=d, seed=i) for i, (n, d) in enumerate(spec)]
    one, many = EpisodeStorage(capacity), EpisodeStorage(capacity)
    ref: list[Change] = []
    for ep in eps:
        ch = one.add_episode(ep)
        ref += ch.side
        ref.append(ch)
    out: list[Change | Placements] = []
    for cols in as_columns(eps):
        assert isinstance(cols, EpisodeColumns)
        many.add_columns(cols, out)
    got = [c for ch in out for c in (ch.to_changes() if isinstance(ch, Placements) else [ch])]
    assert got == ref
    assert table_state(one) == table_state(many)
    if len(eps) > 1 and sum(n + 1 for n, _ in spec) <= capacity:  # all but the first in bulk
        assert [type(ch) for ch in out] == [Change, Placements]


def test_error_mid_batch_keeps_and_notifies_the_episodes_before_it() -> None:
    batched, sequential = buffers(40)
    first = [make_episode(i, 3, seed=i) for i in range(4)]
    batched.add(first)
    sequential_add(sequential, first)
    bad = make_episode(2, 2, "terminated", seed=9, t_started=5)  # after the end of episode 2
    call = [make_episode(10 + i, 2, seed=10 + i) for i in range(3)] + [bad, make_episode(20, 2)]
    with pytest.raises(EpisodeValidationError) as e1:
        batched.add(call)
    with pytest.raises(EpisodeValidationError) as e2:
        sequential_add(sequential, call)
    assert e1.value.reason == e2.value.reason == "after_done"
    assert_same(batched, sequential)
    assert batched.storage.row_of_id(12) is not None and batched.storage.row_of_id(20) is None


def test_a_non_episode_raises_after_adding_the_ones_before() -> None:
    buf = EpisodeReplayBuffer(40, Recorder(), seed=0)
    with pytest.raises(TypeError, match="Episode objects"):
        buf.add([make_episode(1, 2), make_episode(2, 2), "not an episode"])  # type: ignore[list-item]
    assert buf.storage.num_episodes == 2
    assert buf.sampler.log == [("add", [0, 1, 3, 4])]  # type: ignore[attr-defined]
