"""The fixed-n fast path of NStep (per-step values computed at add) against the range path.

A buffer with ``NStep(n)`` (an int) samples from a :class:`FixedNStepTable` fed as episodes
arrive; ``NStep.expand`` computes the same batch from the ring at sample time. They must agree on
every valid start, column for column, after every add: with eviction (a small ring), fragments
that join an episode held at the head (appended in place), fragments of an episode that is not
at the head (moved), an episode flagged done by a step-less fragment, and a checkpoint restore.
"""

from __future__ import annotations

import contextlib

import numpy as np
from buffer_helpers import make_episode
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.episodes.episode import Episode
from offline_prelearner.errors import EpisodeValidationError
from offline_prelearner.replay import EpisodeReplayBuffer
from offline_prelearner.replay.units import NStep
from offline_prelearner.replay.units.n_step import FixedNStepTable


def assert_same_as_range_path(buf: EpisodeReplayBuffer) -> None:
    table = buf._step_table
    assert table is not None
    slots = buf.valid_starts().slots()
    if len(slots) == 0:
        return
    rows = buf.storage.rows_of(slots)
    fast = table.expand(slots, rows, buf.storage)
    slow = buf.unit.expand(slots, rows, buf.storage, np.random.default_rng(0))
    assert list(fast.keys()) == list(slow.keys())
    for k in list(slow.keys()):
        a, b = np.asarray(fast[k]), np.asarray(slow[k])
        assert a.dtype == b.dtype, (k, a.dtype, b.dtype)
        np.testing.assert_array_equal(a, b, err_msg=k)


# One op: (episode number, steps in the fragment, whether it ends the episode).
ops = st.lists(
    st.tuples(
        st.integers(0, 4), st.integers(0, 7), st.sampled_from([None, "terminated", "truncated"])
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(
    ops=ops,
    n=st.integers(2, 6),
    gamma=st.sampled_from([0.0, 0.5, 0.99, 1.0]),
    capacity=st.integers(6, 40),
    batched=st.booleans(),
)
def test_fixed_n_equals_range_path_under_streaming_and_eviction(ops, n, gamma, capacity, batched):
    buf = EpisodeReplayBuffer(capacity, unit=NStep(n, gamma), seed=0)
    assert isinstance(buf._step_table, FixedNStepTable)
    state: dict[int, tuple[int, np.ndarray, int]] = {}  # episode -> (t_end, last obs, serial)
    pending: list[Episode] = []
    gen = 0
    for num, k, end in ops:
        t_end, last, serial = state.get(num, (0, None, 0))
        full = make_episode(
            f"{num}-{serial}", k, end or "open", seed=gen, t_started=t_end, obs0=last
        )
        gen += 1
        ep = Episode(
            id=f"{num}-{serial}",
            observations=full.observations,
            actions=full.actions,
            rewards=full.rewards,
            terminated=full.terminated,
            truncated=full.truncated,
            t_started=t_end,
        )
        if end is None:
            state[num] = (t_end + k, full.observations[-1], serial)
        else:  # the episode ended: the next op on this number starts a new one
            state[num] = (0, None, serial + 1)
        if k + 1 > capacity:
            state[num] = (0, None, serial + 1)
            continue
        if batched:
            pending.append(ep)
            if len(pending) < 3:
                continue
            eps, pending = pending, []
        else:
            eps = [ep]
        try:
            buf.add(eps)
        except EpisodeValidationError:  # an evicted episode continued: the data is refused
            for e in eps:
                state.pop(int(e.id.split("-")[0]), None)
        assert_same_as_range_path(buf)
    if pending:
        with contextlib.suppress(EpisodeValidationError):  # refused data: see above
            buf.add(pending)
        assert_same_as_range_path(buf)
    # A restored buffer rebuilds the table from its valid starts.
    other = EpisodeReplayBuffer(capacity, unit=NStep(n, gamma), seed=0)
    other.set_state(buf.get_state())
    assert_same_as_range_path(other)


def test_same_draws_as_the_range_path_at_n():
    eps = [
        make_episode(i, 5 + 3 * i, "terminated" if i % 2 else "truncated", seed=i) for i in range(8)
    ]
    fixed = EpisodeReplayBuffer(200, unit=NStep(3, 0.9), seed=1)
    ranged = EpisodeReplayBuffer(200, unit=NStep((3, 3), 0.9), seed=1)
    assert fixed._step_table is not None and ranged._step_table is None
    for buf in (fixed, ranged):
        buf.add(eps[:4])
        buf.add(eps[4:])
    a, b = fixed.sample(512), ranged.sample(512)
    for k in list(b.keys()):
        np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]), err_msg=k)


def test_join_recomputes_the_old_tail():
    """An unfinished episode's last window reaches its stored end; after a fragment joins and
    terminates the episode further on, that window must no longer say terminated."""
    first = make_episode("a", 4, "open", seed=0)
    buf = EpisodeReplayBuffer(50, unit=NStep(3, 0.5), seed=0)
    buf.add(first)
    rest = make_episode("a", 5, "terminated", seed=1, t_started=4, obs0=first.observations[-1])
    buf.add(rest)
    assert_same_as_range_path(buf)
    slots = buf.valid_starts().slots()
    batch = buf._step_table.expand(slots, buf.storage.rows_of(slots), buf.storage)
    np.testing.assert_array_equal(batch["terminateds"], [False] * 6 + [True] * 3)
