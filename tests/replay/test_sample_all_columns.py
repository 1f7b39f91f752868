"""``sample_all_columns``: whole episodes expanded straight from their columns, against a buffer.

The ``sample_all`` rule is "what a fresh buffer holding exactly these episodes gives for
``sample(valid_starts().total)`` under ``InOrder``". Units that expand whole episodes from their
columns (``Transition``, ``NStep`` with an int ``n``) skip that buffer; for random batches of
done episodes (lengths 0-9, terminated or truncated, float32 or float64 rewards, an extra column
or not, assembled or split observations, in any table order, with gaps) the result must equal
the buffer's column for column: names and their order, dtypes, values (bit for bit, ``-0.0``
included) -- ``weights`` and ``indices`` too. Units without the capability, and ids that repeat,
go through the buffer itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from buffer_helpers import make_episode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offline_prelearner.episodes.episode_columns import EpisodeColumns
from offline_prelearner.errors import EpisodeValidationError
from offline_prelearner.replay.batch import SampleBatch
from offline_prelearner.replay.replay_buffer import EpisodeReplayBuffer, sample_all_columns
from offline_prelearner.replay.samplers.in_order import InOrder
from offline_prelearner.replay.units.n_step import NStep
from offline_prelearner.replay.units.sequence import Sequence
from offline_prelearner.replay.units.stack import FrameStack
from offline_prelearner.replay.units.transition import Transition


def through_buffer(cols: EpisodeColumns, unit: Any) -> SampleBatch | None:
    """The reference: a fresh buffer holding the episodes (added as objects), drawn in order."""
    eps = list(cols.iter_episodes())
    buf = EpisodeReplayBuffer(sum(len(e) + 1 for e in eps) + 1, InOrder(), unit, seed=0)
    buf.add(eps)
    total = buf.valid_starts().total
    return buf.sample(total) if total else None


def assert_same(got: SampleBatch | None, want: SampleBatch | None) -> None:
    assert (got is None) == (want is None)
    if got is None or want is None:
        return
    assert list(got.keys()) == list(want.keys())
    for k in want:
        a, b = np.asarray(got[k]), np.asarray(want[k])
        assert a.dtype == b.dtype, k
        assert a.shape == b.shape, k
        if a.dtype.kind == "f":  # bit for bit: the sign of a zero too
            assert a.tobytes() == b.tobytes(), k
        else:
            assert a.tolist() == b.tolist(), k


@st.composite
def batches(draw: Any) -> EpisodeColumns:
    n = draw(st.integers(1, 8))
    lengths = draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))
    ends = draw(st.lists(st.sampled_from(["terminated", "truncated"]), min_size=n, max_size=n))
    reward = draw(st.sampled_from([np.float32, np.float64]))
    logp = draw(st.sampled_from([None, np.float32]))
    ids = draw(st.sampled_from(["int", "str"]))
    eps = [
        make_episode(
            i if ids == "int" else f"e{i}",
            lengths[i],
            ends[i],
            seed=i,
            t_started=draw(st.integers(0, 5)),
            reward_dtype=reward,
            logp=logp,
        )
        for i in range(n)
    ]
    for e in eps:  # zeros of both signs, where a window's sum can keep or lose the sign
        if len(e) and draw(st.booleans()):
            e.rewards[0] = -0.0
    cols = EpisodeColumns.from_episodes(eps, split=draw(st.booleans()))
    order = draw(st.permutations(range(n)))
    keep = draw(st.integers(1, n))
    return cols.select(np.array(order[:keep], np.int64))


UNITS = [Transition(), NStep(1, 0.9), NStep(2, 0.5), NStep(3, 0.99), NStep(5, 0.7)]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.sampled_from(UNITS))
def test_expanded_from_columns_equals_the_buffer(cols: EpisodeColumns, unit: Any) -> None:
    assert_same(sample_all_columns(cols, unit, seed=0), through_buffer(cols, unit))


@pytest.mark.parametrize(
    "unit", [NStep((1, 3), 0.9), Sequence(3), FrameStack(2, Transition())], ids=repr
)
def test_other_units_go_through_a_buffer(unit: Any) -> None:
    eps = [make_episode(i, 4 + i, seed=i) for i in range(3)]
    cols = EpisodeColumns.from_episodes(eps)
    assert_same(sample_all_columns(cols, unit, seed=0), through_buffer(cols, unit))


@pytest.mark.parametrize("second", [(2, 0), (2, 3), (4, 1)], ids=["inside", "after", "overlap"])
def test_repeated_ids_do_what_the_buffer_does(second: tuple[int, int]) -> None:
    """A second episode with a held id is the buffer's business: a duplicate dropped, a
    continuation after the end refused, an overlap refused -- the same here."""
    length, t0 = second
    eps = [make_episode("a", 3, seed=1), make_episode("a", length, seed=2, t_started=t0)]
    cols = EpisodeColumns.from_episodes(eps)
    try:
        want = through_buffer(cols, Transition())
    except EpisodeValidationError as e:
        with pytest.raises(EpisodeValidationError) as got:
            sample_all_columns(cols, Transition())
        assert (got.value.reason, str(got.value)) == (e.reason, str(e))
        return
    assert_same(sample_all_columns(cols, Transition()), want)


def test_no_steps_is_none() -> None:
    cols = EpisodeColumns.from_episodes([make_episode(0, 0), make_episode(1, 0, seed=1)])
    assert sample_all_columns(cols, Transition()) is None
    assert sample_all_columns(cols, NStep(3)) is None


def test_concat_keeps_each_part_and_refuses_other_dtypes() -> None:
    a = EpisodeColumns.from_episodes([make_episode(0, 3), make_episode(1, 0, seed=1)], split=True)
    b = EpisodeColumns.from_episodes([make_episode(2, 2, seed=2)], split=True)
    both = EpisodeColumns.concat([a, b])
    got = list(both.iter_episodes())
    want = [*a.iter_episodes(), *b.iter_episodes()]
    assert [e.id for e in got] == [0, 1, 2]
    for x, y in zip(got, want, strict=True):
        np.testing.assert_array_equal(x.observations, y.observations)
        np.testing.assert_array_equal(x.actions, y.actions)
    c = EpisodeColumns.from_episodes([make_episode(3, 2, reward_dtype=np.float32)], split=True)
    with pytest.raises(ValueError, match="dtypes"):
        EpisodeColumns.concat([a, c])
    d = EpisodeColumns.from_episodes([make_episode(3, 2)])  # assembled, not split
    with pytest.raises(ValueError, match="layouts"):
        EpisodeColumns.concat([a, d])
