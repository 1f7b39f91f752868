"""Learner batches cut from Ray Data's blocks (``jobs/stream/learner_stream.train_batches``):
every row once, in order, in batches of exactly ``train_batch_size`` rows but the last; a batch
inside one block is a view of it, not a copy."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.jobs.stream.learner_stream import train_batches


def _blocks(sizes: list[int]) -> list[dict[str, np.ndarray]]:
    out, at = [], 0
    for n in sizes:
        i = np.arange(at, at + n)
        out.append({"i": i, "obs": np.repeat(i, 3).reshape(n, 3).astype(np.float32)})
        at += n
    return out


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 40), max_size=12), rows=st.integers(1, 17))
def test_batches_are_the_rows_in_order_cut_at_train_batch_size(sizes: list[int], rows: int) -> None:
    blocks = _blocks(sizes)
    got = list(train_batches(iter(blocks), rows))
    total = sum(sizes)
    lengths = [len(b["i"]) for b in got]
    # reference: a plain loop over the rows, a batch every ``rows``
    expected, batch = [], []
    for k in range(total):
        batch.append(k)
        if len(batch) == rows:
            expected.append(batch)
            batch = []
    if batch:
        expected.append(batch)
    assert [b["i"].tolist() for b in got] == expected
    assert all(n == rows for n in lengths[:-1]) and (not lengths or 0 < lengths[-1] <= rows)
    for b in got:
        assert (b["obs"][:, 0] == b["i"]).all()  # the columns stay aligned row by row


def test_a_batch_inside_a_block_is_a_view() -> None:
    blocks = _blocks([512, 256])
    got = list(train_batches(iter(blocks), 256))
    assert [len(b["i"]) for b in got] == [256, 256, 256]
    assert all(np.shares_memory(b["obs"], blocks[0]["obs"]) for b in got[:2])
    assert np.shares_memory(got[2]["obs"], blocks[1]["obs"])
