"""The writer's object-id columns: runs of one id converted once, against ``pa.array``'s inference.

``columns_to_table`` turns an object column of ids (``eps_id``, ``module_id``: a run of one id
per episode or module) into Arrow strings a run at a time; whatever the column holds (ids in runs,
one id throughout, empty strings, non-ASCII text, None, ints mixed in), the Arrow array must be
the one ``pa.array`` infers, type and values, or the column must take ``pa.array`` itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.io.formats.rows.writer import _object_strings, columns_to_table

ids = st.one_of(
    st.sampled_from(["a", "b", "", "é", "default_policy"]), st.none(), st.integers(0, 3)
)


def objects(values: list[Any]) -> np.ndarray:
    out = np.empty(len(values), object)
    out[:] = values
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(ids, st.integers(1, 6)), min_size=1, max_size=8))
def test_runs_of_ids_convert_as_pyarrow_infers(runs: list[tuple[Any, int]]) -> None:
    values = objects([v for v, n in runs for _ in range(n)])
    try:
        want: pa.Array | None = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        want = None
    got = _object_strings(values)
    if got is None:  # not all strings: the column takes pa.array, as before
        assert want is None or not pa.types.is_string(want.type) or values[0] is None
        return
    assert want is not None
    got.validate(full=True)
    assert got.type == want.type and got.equals(want)
    table = columns_to_table({"eps_id": values})
    assert table.column("eps_id").combine_chunks().equals(want)


def test_one_id_throughout() -> None:
    values = objects(["default_policy"] * 4096)
    got = _object_strings(values)
    assert got is not None and got.equals(pa.array(values)) and got.null_count == 0
