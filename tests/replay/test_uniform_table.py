"""Uniform's lazily built lookup table draws exactly what the plain reference draws."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.replay.samplers.base import ValidStarts
from offline_prelearner.replay.samplers.uniform import Uniform


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1), hi=st.sampled_from([1, 2, 3, 20, 200]), zeros=st.floats(0, 0.9)
)
def test_lut_matches_reference(seed, hi, zeros):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2048, 6000))
    count = rng.integers(0, hi + 1, n)
    count[rng.random(n) < zeros] = 0
    if count.sum() == 0:
        count[-1] = 1
    first = np.cumsum(count + 3) - count
    v = ValidStarts(first, count, 0)
    slots_all = np.concatenate([np.arange(f, f + c) for f, c in zip(first, count, strict=True)])
    rows_all = np.repeat(np.arange(n), count)
    u = Uniform()
    for call in range(3):
        r1 = np.random.default_rng(call)
        uu = (np.random.default_rng(call).random(512) * count.sum()).astype(np.int64)
        slots, info = u.sample(None, 512, r1, v)
        assert (u._lut is not None) == (call >= 1 and np.count_nonzero(count) >= 2048)
        assert (slots == slots_all[uu]).all() and (info["rows"] == rows_all[uu]).all()
