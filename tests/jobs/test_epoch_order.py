"""The epoch stream's order and cursor, without Ray (``jobs/stream/epoch_order.py``): windows
cover every unit once and stay within ``shuffle_rows``; a learner's batches, cut by the cursor,
match a plain loop over the epoch's samples; a stop, a state and a resume with any number of
learners add up to one uninterrupted epoch."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.errors import ConfigError
from offline_prelearner.jobs.stream.epoch_order import Cursor, EpochOrder, StreamState

FP = "0123456789abcdef"


@given(
    rows=st.lists(st.integers(0, 50), min_size=1, max_size=30),
    seed=st.integers(0, 2**32),
    epoch=st.integers(0, 5),
    shuffle_rows=st.integers(1, 120),
)
def test_windows_hold_every_unit_once_within_the_shuffle_rows(
    rows: list[int], seed: int, epoch: int, shuffle_rows: int
) -> None:
    order = EpochOrder.build(rows, seed, epoch, shuffle_rows)
    units = [u for w in order.windows for u in w]
    assert sorted(units) == list(range(len(rows)))
    for w in order.windows:  # a window over the bound is one unit larger than it
        assert sum(rows[u] for u in w) <= shuffle_rows or len(w) == 1
    assert order == EpochOrder.build(rows, seed, epoch, shuffle_rows)  # (seed, epoch) decide


def test_epochs_shuffle_units_and_windows_differently() -> None:
    rows = [10] * 40
    a, b = (EpochOrder.build(rows, 7, e, 30) for e in (0, 1))
    assert a.windows != b.windows
    assert not np.array_equal(a.permutation(0, 100), b.permutation(0, 100))
    assert not np.array_equal(a.permutation(0, 100), a.permutation(1, 100))
    assert sorted(a.permutation(3, 100)) == list(range(100))


def _epoch(sizes: list[int]) -> list[tuple[int, int]]:
    """A plain loop's epoch: sample ``(window, i)`` for each window in order."""
    return [(w, i) for w, n in enumerate(sizes) for i in range(n)]


def _blocks(
    sizes: list[int], first: int, cut: int
) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """The windows from ``first`` on as the stream hands them over: blocks of up to ``cut``."""
    for w in range(first, len(sizes)):
        ids = np.arange(sizes[w])
        for s in range(0, sizes[w], cut):
            part = ids[s : s + cut]
            yield np.full(len(part), w), {"w": np.full(len(part), w), "i": part}


def _keys(batch: dict[str, np.ndarray]) -> list[tuple[int, int]]:
    return list(zip(batch["w"].tolist(), batch["i"].tolist(), strict=True))


def _run(
    sizes: list[int], state: StreamState, rows: int, learners: int, stop: int | None, cut: int
) -> tuple[list[list[list[tuple[int, int]]]], StreamState]:
    """Each learner's batches from ``state`` (``stop`` each, or to the end), and the state."""
    got: list[list[list[tuple[int, int]]]] = []
    states = []
    for r in range(learners):
        cur = Cursor(state, rows, learners, r, len(sizes))
        mine: list[list[tuple[int, int]]] = []
        for batch in cur.batches(_blocks(sizes, state.window, cut)) if stop != 0 else ():
            mine.append(_keys(batch))
            if len(mine) == stop:
                break
        got.append(mine)
        states.append(cur.state())
    return got, states[0]


def _rounds(per_learner: list[list[list[tuple[int, int]]]]) -> list[list[tuple[int, int]]]:
    """The learners' batches in global order: round after round, learner 0 first."""
    out = []
    for k in range(max(map(len, per_learner))):
        out += [m[k] for m in per_learner if k < len(m)]
    return out


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=8),
    rows=st.integers(1, 17),
    before=st.integers(1, 4),
    after=st.integers(1, 4),
    stop=st.integers(0, 12),
    cut=st.integers(1, 50),
)
def test_a_stop_and_a_resume_with_any_learners_add_up_to_one_epoch(
    sizes: list[int], rows: int, before: int, after: int, stop: int, cut: int
) -> None:
    samples = _epoch(sizes)
    whole = [samples[i : i + rows] for i in range(0, len(samples), rows)]
    start = StreamState(FP, 1, 0)
    first, state = _run(sizes, start, rows, before, stop, cut)
    assert all(len(m) == min(stop, len(m)) for m in first)
    if any(len(m) < stop for m in first):  # the epoch ended before every learner stopped
        assert _rounds(first) == whole
        return
    assert state.batches == before * stop
    # The resume re-reads from the window the group stopped in: at most a window and the
    # other learners' batches of the last round before the position.
    assert state.window == len(sizes) or state.skip <= max(sizes) + (before - 1) * rows
    state = StreamState.from_dict(json.loads(json.dumps(state.to_dict())), FP, 1)
    rest, _ = _run(sizes, state, rows, after, None, cut)
    assert _rounds(first) + _rounds(rest) == whole


def test_a_state_from_another_stream_is_refused_in_one_line() -> None:
    state = StreamState(FP, 3, 1, 10, 2, 5).to_dict()
    assert StreamState.from_dict(state, FP, 3) == StreamState(FP, 3, 1, 10, 2, 5)
    for fingerprint, seed, match in [
        ("fedcba9876543210", 3, "another dataset or config"),
        (FP, 4, "seed 3"),
    ]:
        with pytest.raises(ConfigError, match=match) as e:
            StreamState.from_dict(state, fingerprint, seed)
        assert "\n" not in str(e.value)
    for bad in [{**state, "version": 9}, {"batches": 1}, [], {**state, "skip": -1}]:
        with pytest.raises(ConfigError):
            StreamState.from_dict(bad, FP, 3)
