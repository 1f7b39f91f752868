"""SumTree / MinTree against plain-Python references (Hypothesis), plus edges and errors."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
from backends import BACKENDS
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.errors import DataError
from offline_prelearner.replay.samplers import kernels
from offline_prelearner.replay.samplers.segment_tree import (
    MinTree,
    SumTree,
    fill_constant,
    write_where_positive,
)


# Every test here runs on both backends: numba's compiled loops and the numpy fallback.
@pytest.fixture(autouse=True, scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    with kernels.use(request.param):
        yield request.param


# -- plain-loop references ---------------------------------------------------------------------


def ref_total(leaves: list[float], top_width: int) -> float:
    """The tree's total, by Python loops: pairwise sums level by level, left to right, up to the
    widest level of at most ``top_width`` nodes, then a running sum along that level."""
    size = 1
    while size < len(leaves):
        size *= 2
    level = list(leaves) + [0.0] * (size - len(leaves))
    while len(level) > top_width:
        level = [level[i] + level[i + 1] for i in range(0, len(level), 2)]
    total = 0.0
    for v in level:
        total += v
    return total


def ref_find(leaves: list[float], prefix: float) -> int:
    """First leaf whose running sum exceeds the prefix; past the total, the last leaf with mass."""
    prefix = max(prefix, 0.0)
    running = 0.0
    for i, v in enumerate(leaves):
        running += v
        if running > prefix:
            return i
    return max(i for i, v in enumerate(leaves) if v > 0)


def apply_updates(leaves: list[float], indices: list[int], values: list[float]) -> None:
    for i, v in zip(indices, values, strict=True):  # a loop: the last write wins by construction
        leaves[i] = v


# -- strategies ----------------------------------------------------------------------------------

# Dyadic values (multiples of 1/4, small): every sum and difference is exact in float64, so the
# tree must agree with the references bit for bit, boundaries included.
dyadic = st.integers(0, 40).map(lambda k: k / 4)
# Small widths make even small trees search and update through stored levels; 1024 is the default.
top_widths = st.sampled_from([1, 2, 4, 16, 1024])


@st.composite
def update_sequences(draw, values=dyadic, max_capacity=70):
    capacity = draw(st.integers(1, max_capacity))
    batches = []
    for _ in range(draw(st.integers(1, 6))):
        n = draw(st.integers(0, 2 * capacity + 3))
        idx = draw(st.lists(st.integers(0, capacity - 1), min_size=n, max_size=n))
        vals = draw(st.lists(values, min_size=n, max_size=n))
        batches.append((idx, vals))
    return capacity, batches


# -- properties ------------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    update_sequences(values=st.floats(0.0, 1e6, allow_nan=False, allow_infinity=False)), top_widths
)
def test_sum_tree_root_is_sum_of_leaves_after_any_updates(case, top_width):
    capacity, batches = case
    tree, leaves = SumTree(capacity, top_width=top_width), [0.0] * capacity
    for idx, vals in batches:
        tree.update(np.array(idx, dtype=np.int64), np.array(vals))
        apply_updates(leaves, idx, vals)
        assert tree.values().tolist() == leaves
        assert tree.total() == ref_total(leaves, top_width)  # bit for bit: no drift
        assert tree.total() == pytest.approx(math.fsum(leaves), rel=1e-12, abs=1e-300)
    # No drift: a tree rebuilt from scratch from the same leaves holds the same total bit for bit.
    fresh = SumTree(capacity, top_width=top_width)
    fresh.set_state(tree.get_state())
    assert fresh.total() == tree.total()
    assert (fresh._tree == tree._tree).all()  # every stored node, not only the total


@settings(max_examples=100, deadline=None)
@given(
    update_sequences(values=st.floats(-1e9, 1e9, allow_nan=False) | st.just(math.inf)), top_widths
)
def test_min_tree_root_is_min_of_leaves_after_any_updates(case, top_width):
    capacity, batches = case
    tree, leaves = MinTree(capacity, top_width=top_width), [math.inf] * capacity
    for idx, vals in batches:
        tree.update(idx, vals)
        apply_updates(leaves, idx, vals)
        assert tree.values().tolist() == leaves
        assert tree.min() == min(leaves)
        assert tree.get(np.arange(capacity)).tolist() == leaves


@settings(max_examples=150, deadline=None)
@given(update_sequences(), top_widths, st.data())
def test_find_prefixsum_matches_loop_reference(case, top_width, data):
    capacity, batches = case
    tree, leaves = SumTree(capacity, top_width=top_width), [0.0] * capacity
    for idx, vals in batches:
        tree.update(idx, vals)
        apply_updates(leaves, idx, vals)
    total = sum(leaves)
    if total == 0:
        with pytest.raises(ValueError, match="total 0"):
            tree.find_prefixsum([0.0])
        return
    boundaries = np.cumsum([0.0, *leaves]).tolist()  # exact boundaries, including 0 and total
    prefixes = data.draw(
        st.lists(
            st.sampled_from(boundaries)
            | st.integers(-4, int(4 * total) + 8).map(lambda k: k / 4)
            | st.floats(0.0, total, exclude_max=True),
            min_size=1,
            max_size=50,
        )
    )
    got = tree.find_prefixsum(np.array(prefixes)).tolist()
    assert got == [ref_find(leaves, p) for p in prefixes]
    assert all(leaves[i] > 0 for i in got)  # zero-mass leaves are never chosen


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(0.0, 1e3) | st.just(0.0), min_size=1, max_size=300).filter(
        lambda v: sum(v) > 0
    ),
    st.lists(st.floats(0.0, 1.0, exclude_max=True), min_size=1, max_size=100),
    top_widths,
)
def test_find_prefixsum_never_returns_zero_mass_with_arbitrary_floats(leaves, fractions, top_width):
    tree = SumTree(len(leaves), top_width=top_width)
    tree.update(np.arange(len(leaves)), leaves)
    # Include u * total for u just below 1, where float rounding reaches the total.
    prefixes = np.array([*fractions, np.nextafter(1.0, 0.0), 1.0]) * tree.total()
    got = tree.find_prefixsum(prefixes)
    assert (np.asarray(leaves)[got] > 0).all()
    cum = np.cumsum(leaves)
    ref = np.minimum(np.searchsorted(cum, prefixes, side="right"), np.flatnonzero(leaves)[-1])
    # Away from boundaries the float descent and a float cumsum agree.
    lo = np.where(ref > 0, cum[np.maximum(ref - 1, 0)], 0.0)
    clear = (prefixes - lo > 1e-9 * tree.total()) & (cum[ref] - prefixes > 1e-9 * tree.total())
    assert (got[clear] == ref[clear]).all()


# -- edges -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("top_width", [1, 1024])
@pytest.mark.parametrize("capacity", [1, 2, 3, 5, 8, 1000, 1025, 5000])
def test_capacities_not_a_power_of_two(capacity, top_width):
    tree = SumTree(capacity, top_width=top_width)
    tree.update(np.arange(capacity), np.ones(capacity))
    assert tree.total() == capacity
    assert tree.find_prefixsum(np.arange(capacity) + 0.5).tolist() == list(range(capacity))
    assert tree.find_prefixsum([capacity + 10.0]).tolist() == [capacity - 1]  # padding never
    mt = MinTree(capacity, top_width=top_width)
    assert mt.min() == math.inf
    mt.update([capacity - 1], [3.0])
    assert mt.min() == 3.0


def test_duplicate_indices_last_write_wins():
    tree = SumTree(4)
    tree.update([2, 1, 2, 2, 1], [1.0, 5.0, 2.0, 3.0, 7.0])
    assert tree.values().tolist() == [0.0, 7.0, 3.0, 0.0]
    assert tree.total() == 10.0
    mt = MinTree(4)
    mt.update([0, 0], [-1.0, 4.0])
    assert mt.min() == 4.0


def test_scalar_value_broadcasts_and_shapes_are_kept():
    tree = SumTree(6)
    tree.update([0, 3, 5], 2.0)
    assert tree.get(np.array([[0, 3], [5, 1]])).tolist() == [[2.0, 2.0], [2.0, 0.0]]
    assert tree.find_prefixsum(np.array([[0.0], [5.9]])).tolist() == [[0], [5]]


def test_empty_batches_are_no_ops():
    tree = SumTree(3)
    tree.update([], [])
    tree.update(np.empty(0, dtype=np.int64), np.empty(0))
    assert tree.total() == 0.0


def test_state_round_trip_rebuilds_parents():
    rng = np.random.default_rng(0)
    tree = SumTree(1000)
    tree.update(rng.integers(0, 1000, 5000), rng.random(5000))
    other = SumTree(1000)
    other.set_state(tree.get_state())
    assert other.total() == tree.total()
    prefixes = rng.random(500) * tree.total()
    assert (other.find_prefixsum(prefixes) == tree.find_prefixsum(prefixes)).all()
    state = tree.get_state()
    state["values"][:] = 0.0  # the state is a copy, not a view into the tree
    assert tree.total() > 0


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -3])
def test_capacity_must_be_positive(bad):
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        SumTree(bad)


@pytest.mark.parametrize("bad", [0, 3, 1000])
def test_top_width_must_be_a_power_of_two(bad):
    with pytest.raises(ValueError, match="top_width"):
        SumTree(10, top_width=bad)


def test_capacity_must_be_int():
    with pytest.raises(TypeError, match="capacity must be an int"):
        SumTree(3.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        MinTree(True)  # type: ignore[arg-type]


@pytest.mark.parametrize("index", [-1, 5, 99])
def test_index_out_of_range(index):
    with pytest.raises(IndexError, match=f"index {index} is outside"):
        SumTree(5).update([0, index], [1.0, 1.0])
    with pytest.raises(IndexError):
        MinTree(5).get([index])


def test_float_indices_rejected():
    with pytest.raises(TypeError, match="integers"):
        SumTree(5).update([0.0, 1.0], [1.0, 1.0])


@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf])
def test_sum_tree_rejects_inadmissible_values_and_stays_unchanged(value):
    tree = SumTree(5)
    tree.update([1], [2.0])
    with pytest.raises(ValueError, match="finite and >= 0"):
        tree.update([0, 1], [1.0, value])
    assert tree.values().tolist() == [0.0, 2.0, 0.0, 0.0, 0.0]


def test_min_tree_rejects_nan():
    with pytest.raises(ValueError, match="NaN"):
        MinTree(5).update([0], [math.nan])


def test_length_mismatch():
    with pytest.raises(ValueError, match="pair one to one"):
        SumTree(5).update([0, 1], [1.0, 2.0, 3.0])


def test_nan_prefix_rejected():
    tree = SumTree(2)
    tree.update([0], [1.0])
    with pytest.raises(ValueError, match="NaN"):
        tree.find_prefixsum([math.nan])


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda s: s.update(capacity=6), "capacity 6"),
        (lambda s: s.update(values=s["values"][:-1]), "shape"),
        (lambda s: s["values"].__setitem__(0, -1.0), "finite and >= 0"),
        (lambda s: s.pop("values"), "malformed"),
    ],
)
def test_tampered_state_is_an_error(mutate, match):
    tree = SumTree(5)
    tree.update([0, 4], [1.0, 2.0])
    state = tree.get_state()
    mutate(state)
    fresh = SumTree(5)
    with pytest.raises(DataError, match=match):
        fresh.set_state(state)
    assert fresh.total() == 0.0


def test_large_tree_incremental_updates_match_fresh_build_and_cumsum():
    rng = np.random.default_rng(7)
    n = 100_003
    tree = SumTree(n)
    tree.update(np.arange(n), rng.random(n))
    for _ in range(20):  # sparse batches: the per-level gather path
        tree.update(rng.integers(0, n, 256), rng.random(256) * (rng.random(256) > 0.3))
    fresh = SumTree(n)
    fresh.set_state(tree.get_state())
    assert (fresh._tree == tree._tree).all() and fresh.total() == tree.total()
    leaves = tree.values()
    assert tree.total() == pytest.approx(math.fsum(leaves), rel=1e-12)
    prefixes = rng.random(4096) * tree.total()
    got = tree.find_prefixsum(prefixes)
    cum = np.cumsum(leaves)
    ref = np.searchsorted(cum, prefixes, side="right")
    assert (leaves[got] > 0).all()
    assert (got == ref).mean() > 0.999  # differences only within float rounding of a boundary
    off = got != ref
    assert np.allclose(cum[np.minimum(got, ref)][off], prefixes[off], rtol=1e-9)


# -- the public batched operations a sampler uses ------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(update_sequences(), top_widths, st.data())
def test_find_with_values_matches_loop_reference(case, top_width, data):
    capacity, batches = case
    tree, leaves = SumTree(capacity, top_width=top_width), [0.0] * capacity
    for idx, vals in batches:
        tree.update(idx, vals)
        apply_updates(leaves, idx, vals)
    total = sum(leaves)
    if total == 0:
        return
    prefixes = np.array(data.draw(st.lists(st.floats(0.0, total), min_size=1, max_size=50)))
    before = prefixes.copy()
    got, values = tree.find_with_values(prefixes)
    assert got.tolist() == [ref_find(leaves, p) for p in prefixes.tolist()]
    assert values.tolist() == [leaves[i] for i in got.tolist()]
    assert (prefixes == before).all()  # not modified


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 40).flatmap(
        lambda cap: st.tuples(
            st.just(cap),
            st.lists(dyadic, min_size=cap, max_size=cap),
            st.lists(
                st.tuples(st.integers(-3, cap + 3), st.booleans(), dyadic.filter(bool)),
                max_size=2 * cap,
            ),
        )
    ),
    top_widths,
)
def test_write_where_positive_matches_loop_reference(case, top_width):
    capacity, start, writes = case
    sums, mins = SumTree(capacity, top_width=top_width), MinTree(capacity, top_width=top_width)
    sums.update(np.arange(capacity), start)
    mins.update(np.arange(capacity), [v if v > 0 else math.inf for v in start])
    leaves, applied, top = list(start), 0, 0.0
    for k, (i, keep, v) in enumerate(writes):  # the reference: one write at a time, in order
        if keep and 0 <= i < capacity and leaves[i] > 0:
            leaves[i] = v
            applied += 1
            top = max(top, float(k))
    idx = np.array([w[0] for w in writes], np.int64)
    keep = np.array([w[1] for w in writes], bool)
    vals = np.array([w[2] for w in writes], np.float64)
    got = write_where_positive(sums, mins, idx, keep, vals, np.arange(len(writes), dtype=float))
    assert got == (applied, top)
    assert sums.values().tolist() == leaves
    assert mins.values().tolist() == [v if v > 0 else math.inf for v in leaves]
    assert sums.total() == ref_total(leaves, top_width) and mins.min() == min(
        [v if v > 0 else math.inf for v in leaves]
    )


@st.composite
def fill_batches(draw):
    """A capacity and batches of ``fill_constant`` writes: runs of consecutive slots that may wrap
    around the end (a ring's new steps), overlapping runs and plain random slots (repeats)."""
    capacity = draw(st.integers(1, 600))
    batches = []
    for _ in range(draw(st.integers(1, 5))):
        parts = []
        for _ in range(draw(st.integers(0, 4))):
            if draw(st.booleans()):
                start, length = draw(st.integers(0, capacity - 1)), draw(st.integers(0, capacity))
                parts.append((start + np.arange(length)) % capacity)  # a run, maybe wrapping
            else:
                size = draw(st.integers(0, 40))
                parts.append(
                    np.array(
                        draw(st.lists(st.integers(0, capacity - 1), min_size=size, max_size=size)),
                        dtype=np.int64,
                    )
                )
        idx = np.concatenate([np.zeros(0, np.int64), *parts]).astype(np.int64)
        value = draw(dyadic)
        if draw(st.booleans()):  # an eviction: 0 in the sum tree, +inf in the min tree
            batches.append((idx, 0.0, math.inf))
        else:
            batches.append((idx, value, draw(st.floats(-1e9, 1e9, allow_nan=False))))
    return capacity, batches


@settings(max_examples=150, deadline=None)
@given(fill_batches(), top_widths, st.data())
def test_fill_constant_matches_loop_reference_and_a_fresh_build(case, top_width, data):
    capacity, batches = case
    sums, mins = SumTree(capacity, top_width=top_width), MinTree(capacity, top_width=top_width)
    sum_leaves, min_leaves = [0.0] * capacity, [math.inf] * capacity
    for idx, sum_value, min_value in batches:
        if data.draw(st.booleans()):  # other writes in between, through the per-item path
            upd = data.draw(st.lists(st.integers(0, capacity - 1), max_size=20))
            vals = [float(k % 5) for k in range(len(upd))]
            sums.update(upd, vals)
            mins.update(upd, vals)
            apply_updates(sum_leaves, upd, vals)
            apply_updates(min_leaves, upd, vals)
        fill_constant(sums, mins, idx, sum_value, min_value)
        for i in idx.tolist():  # the reference: one write at a time
            sum_leaves[i], min_leaves[i] = sum_value, min_value
        assert sums.values().tolist() == sum_leaves
        assert mins.values().tolist() == min_leaves
        assert sums.total() == ref_total(sum_leaves, top_width)
        assert mins.min() == min(min_leaves)
    # Every stored node equals a from-scratch build of the same leaves, bit for bit.
    for tree, kind in ((sums, SumTree), (mins, MinTree)):
        fresh = kind(capacity, top_width=top_width)
        fresh.set_state(tree.get_state())
        assert (fresh._tree == tree._tree).all()


def test_fill_constant_on_a_large_tree_touches_only_the_ancestors_of_its_runs():
    n = 1_000_003
    sums, mins = SumTree(n), MinTree(n)
    rng = np.random.default_rng(3)
    sums.update(np.arange(n), rng.random(n))
    mins.update(np.arange(n), rng.random(n) + 0.5)
    # Runs of new steps, one wrapping around the end of the ring, one overlapping another.
    runs = [(n - 700, 1400), (12_345, 10_000), (500_000, 3), (12_000, 2_000)]
    idx = np.concatenate([(a + np.arange(k)) % n for a, k in runs]).astype(np.int64)
    fill_constant(sums, mins, idx, 2.0, 0.25)
    leaves = sums.values()
    assert (leaves[idx] == 2.0).all() and (mins.values()[idx] == 0.25).all()
    for tree, kind in ((sums, SumTree), (mins, MinTree)):
        fresh = kind(n)
        fresh.set_state(tree.get_state())
        assert (fresh._tree == tree._tree).all()
    assert mins.min() == 0.25
