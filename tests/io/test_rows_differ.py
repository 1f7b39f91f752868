"""rows_differ (the rows reader's continuity check) against a plain loop, including `where`
masks, index gathers and chunk sizes that cut rows mid-way."""

from __future__ import annotations

from typing import Any

import hypothesis.extra.numpy as hnp
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import offline_prelearner.io.formats.rows.frame as B
from offline_prelearner.io.formats.rows.frame import rows_differ


def ref(a, b):
    out = []
    for x, y in zip(a, b, strict=True):
        if x.dtype.kind in "fc" and y.dtype.kind in "fc":
            out.append(not bool(np.all((x == y) | (np.isnan(x) & np.isnan(y)))))
        else:
            out.append(not bool(np.all(x == y)))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_where(data: Any) -> None:
    dtype = data.draw(st.sampled_from([np.float32, np.float64, np.int16, np.uint8, np.bool_]))
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=5))
    el = st.sampled_from([0.0, -0.0, 1.5, np.nan]) if dtype in (np.float32, np.float64) else None
    a = data.draw(hnp.arrays(dtype, shape, elements=el))
    b = data.draw(hnp.arrays(dtype, shape, elements=el)) if data.draw(st.booleans()) else a.copy()
    where = data.draw(hnp.arrays(np.bool_, (len(a),)))
    chunk = data.draw(st.sampled_from([1, 7, 64, 1 << 20]))
    old_chunk, B._CHUNK_BYTES = B._CHUNK_BYTES, chunk  # odd chunk sizes cut rows mid-way
    try:
        _check(a, b, where, data)
    finally:
        B._CHUNK_BYTES = old_chunk


def _check(a: np.ndarray, b: np.ndarray, where: np.ndarray, data: Any) -> None:
    exp = [r and w for r, w in zip(ref(a, b), where.tolist(), strict=True)]
    assert rows_differ(a, b, where=where).tolist() == exp
    assert rows_differ(a[:, ...][::-1], b[::-1], where=where[::-1]).tolist() == exp[::-1]
    ia = np.asarray(data.draw(st.lists(st.integers(0, len(a) - 1), max_size=9)), np.int64)
    ib = np.asarray(
        data.draw(st.lists(st.integers(0, len(a) - 1), min_size=len(ia), max_size=len(ia))),
        np.int64,
    )
    w2 = data.draw(hnp.arrays(np.bool_, (len(ia),)))
    assert rows_differ(a, b, ia, ib, w2).tolist() == [
        r and w for r, w in zip(ref(a[ia], b[ib]), w2.tolist(), strict=True)
    ]
    assert rows_differ(a.astype(np.float64), b, where=where).tolist() == exp
