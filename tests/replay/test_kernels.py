"""The compiled replay kernels (numba) against the numpy path, bit for bit.

The other replay tests run every tree and sampler test on both backends against plain-Python
references (``backends.BACKENDS``); here the two backends are run side by side on the same
operations and must agree exactly: every stored node, every search result, every sample (slots,
weights, handles) of the same seed, every counter.
"""

from __future__ import annotations

import os
import subprocess
import sys
from functools import partial

import numpy as np
import pytest
from buffer_helpers import make_episode as _make_episode
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.replay.prioritized import PrioritizedEpisodeReplayBuffer
from offline_prelearner.replay.samplers import kernels
from offline_prelearner.replay.samplers.prioritized import Prioritized
from offline_prelearner.replay.samplers.segment_tree import MinTree, SumTree, write_unique
from offline_prelearner.replay.units import NStep

pytestmark = pytest.mark.skipif(not kernels.available(), reason="numba is unavailable")

make_episode = partial(_make_episode, seed=None, obs_shape=(3,), n_actions=4)


def pair(make):
    """The same object built on each backend: ``(numpy's, numba's)``."""
    with kernels.use("numpy"):
        a = make()
    with kernels.use("numba"):
        b = make()
    return a, b


def same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def test_a_tree_keeps_the_backend_it_was_created_with():
    a, b = pair(lambda: SumTree(10))
    assert a._kernels is None and b._kernels is not None
    with kernels.use("numpy"):
        assert kernels.backend() == "numpy"
        b.update([3], [2.0])  # still compiled
        assert b.total() == 2.0
    assert kernels.backend() == "numba"


def test_unknown_backend_is_an_error():
    with pytest.raises(ValueError, match="'numba' or 'numpy'"), kernels.use("cuda"):
        pass


def test_environment_turns_numba_off_without_importing_it():
    code = (
        "import sys; from offline_prelearner.replay.samplers import kernels, segment_tree;"
        "t = segment_tree.SumTree(4); t.update([1], [1.0]); t.find_prefixsum([0.5]);"
        "print(kernels.backend(), kernels.available(), t._kernels is None, 'numba' in sys.modules)"
    )
    env = dict(os.environ, OFFLINE_PRELEARNER_NUMBA="0")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["numpy", "False", "True", "False"]


# -- trees -----------------------------------------------------------------------------------------

values = st.floats(0.0, 1e6, allow_nan=False, allow_infinity=False) | st.just(0.0)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 300),
    st.sampled_from([1, 2, 4, 16, 2048]),
    st.lists(
        st.tuples(
            st.lists(st.integers(0, 10**6), max_size=80),  # indices, modulo capacity
            st.lists(values, min_size=80, max_size=80),
        ),
        min_size=1,
        max_size=6,
    ),
    st.lists(st.floats(-0.1, 1.1, allow_nan=False), min_size=1, max_size=60),
)
def test_trees_and_searches_are_identical_on_both_backends(capacity, top_width, batches, fracs):
    sums = pair(lambda: SumTree(capacity, top_width=top_width))
    mins = pair(lambda: MinTree(capacity, top_width=top_width))
    for raw, vals in batches:
        idx = np.array(raw, dtype=np.int64) % capacity
        v = np.array(vals[: idx.size])
        for s, m in zip(sums, mins, strict=True):
            s.update(idx, v)  # repeated indices: the last write wins on both
            m.update(idx, -v)
        assert same_bits(sums[0]._tree, sums[1]._tree)
        assert same_bits(mins[0]._tree, mins[1]._tree)
        assert sums[0].total() == sums[1].total() and mins[0].min() == mins[1].min()
        if sums[0].total() > 0:
            total = sums[0].total()
            cum = np.cumsum(sums[0].values())
            # Uniform fractions, exact boundaries of the leaves' running sums, the total itself.
            prefixes = np.concatenate([np.array(fracs) * total, cum[::7], [total]])
            a, b = (s._find(prefixes) for s in sums)
            assert same_bits(a[0], b[0]) and same_bits(a[1], b[1])
    # Sum and min trees written together (the prioritized sampler's write) as well.
    idx = np.unique(np.array(batches[0][0], dtype=np.int64) % capacity)
    for s, m in zip(sums, mins, strict=True):
        write_unique((s, m), idx, (np.full(idx.size, 0.5), np.full(idx.size, 0.25)))
    assert same_bits(sums[0]._tree, sums[1]._tree) and same_bits(mins[0]._tree, mins[1]._tree)


# -- the prioritized buffer ------------------------------------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 700)),
        st.tuples(st.just("sample"), st.integers(1, 300)),
        st.tuples(st.just("update"), st.integers(0, 5), st.floats(-50, 50)),
        st.tuples(st.just("beta"), st.sampled_from([0.0, 0.4, 1.0])),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=40, deadline=None)
@given(
    ops,
    st.integers(2100, 5000),  # above the default top width: the trees have levels to descend
    st.booleans(),
    st.sampled_from([0.0, 0.6, 1.0]),
    st.sampled_from([None, 3]),
)
def test_prioritized_buffer_samples_identically_on_both_backends(
    ops, capacity, stratified, alpha, n_step
):
    def make():
        unit = None if n_step is None else NStep(n_step, 0.9)
        sampler = Prioritized(alpha=alpha, stratified=stratified)
        return PrioritizedEpisodeReplayBuffer(capacity, sampler, unit, seed=7)

    bufs = pair(make)
    pending: list[np.ndarray] = []
    next_id = 0
    for op in ops:
        if op[0] == "add":  # long enough runs of adds evict the oldest episodes
            ep = make_episode(next_id, op[1])
            for buf in bufs:
                buf.add(ep)
            next_id += 1
        elif op[0] == "sample" and bufs[0].valid_starts().total:
            a, b = (buf.sample(op[1]) for buf in bufs)
            assert a == b
            assert same_bits(a["weights"], b["weights"])
            pending.append(a["indices"])
        elif op[0] == "update" and pending:
            handles = pending[op[1] % len(pending)]
            td = np.linspace(-1.0, 1.0, handles.size) * op[2]
            assert bufs[0].update_priorities(handles, td) == bufs[1].update_priorities(handles, td)
        elif op[0] == "beta":
            for buf in bufs:
                buf.sampler.beta = op[1]
        ta, tb = (buf.sampler.sum_tree for buf in bufs)
        if ta is not None:
            assert same_bits(ta._tree, tb._tree)
            ma, mb = (buf.sampler.min_tree for buf in bufs)
            assert same_bits(ma._tree, mb._tree)
        assert bufs[0].stats() == bufs[1].stats()
        assert bufs[0].sampler.max_priority == bufs[1].sampler.max_priority


@pytest.mark.parametrize("name", ["numpy", "numba"])
def test_a_pickled_tree_keeps_its_backend_and_its_nodes(name):
    import pickle

    with kernels.use(name):
        tree = SumTree(5000)
    tree.update(np.arange(0, 5000, 7), 1.5)
    other = pickle.loads(pickle.dumps(tree))
    assert (other._kernels is None) == (name == "numpy")
    assert same_bits(other._tree, tree._tree) and other.total() == tree.total()
    other.update([3], [2.0])  # the pairs view belongs to the copy's own array
    assert other.total() == tree.total() + 2.0 and tree.get([3])[0] == 0.0
