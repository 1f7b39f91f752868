"""The fast tensor layout (io/fast_tensor.py): round trips through Parquet, zero rows, nulls
refused, RLlib's layout still read, both writers."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from offline_prelearner.episodes.episode import Episode
from offline_prelearner.errors import SchemaError
from offline_prelearner.io.arrow_numpy import ColumnValueError, column_to_numpy
from offline_prelearner.io.fast_tensor import (
    FAST_TENSOR_NAME,
    FastTensorType,
    fixed_binary_column,
    tensor_spec,
)
from offline_prelearner.io.formats.rows.reader import RowsReader
from offline_prelearner.io.formats.rows.writer import columns_to_table, episodes_to_rows


def _parquet(table: pa.Table) -> pa.Table:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    sink.seek(0)
    return pq.read_table(sink)


DTYPES = [np.uint8, np.int8, np.int32, np.int64, np.float16, np.float32, np.float64, np.bool_]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1,), (4,), (3, 5), (8, 8, 4)])
@pytest.mark.parametrize("n", [0, 1, 7])
def test_round_trip(dtype: type, shape: tuple[int, ...], n: int) -> None:
    rng = np.random.default_rng(n)
    x: np.ndarray = (rng.random((n, *shape)) * 100).astype(dtype)
    table = _parquet(columns_to_table({"x": x, "r": np.arange(n)}, layout="fast"))
    assert isinstance(table.schema.field("x").type, FastTensorType)  # registered on import
    assert table.schema.field("r").type == pa.int64()  # scalars stay plain
    y = column_to_numpy(table, "x")
    assert y.dtype == np.dtype(dtype)
    assert y.shape == (n, *shape)
    np.testing.assert_array_equal(y, x)


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(
        dtype=st.sampled_from([np.dtype(d) for d in DTYPES]),
        shape=hnp.array_shapes(min_dims=2, max_dims=4, min_side=0, max_side=5),
    )
)
def test_decode_encode_is_identity(x: np.ndarray) -> None:
    if int(np.prod(x.shape[1:])) == 0:
        return  # a cell of zero bytes is not a fixed_size_binary Arrow accepts
    y = column_to_numpy(_parquet(columns_to_table({"x": x}, layout="fast")), "x")
    np.testing.assert_array_equal(y, x)  # NaN equals NaN here
    assert y.dtype == x.dtype


def test_zero_copy_view() -> None:
    x = np.arange(2 * 84 * 84 * 4, dtype=np.uint8).reshape(2, 84, 84, 4)
    fld, arr = fixed_binary_column("obs", x)
    y = column_to_numpy(pa.Table.from_arrays([arr], schema=pa.schema([fld])), "obs")
    assert np.shares_memory(y, x)
    # a slice of the column (a batch of a larger file) is still a view at the right rows
    sliced = pa.Table.from_arrays([arr.slice(1, 1)], schema=pa.schema([fld]))
    np.testing.assert_array_equal(column_to_numpy(sliced, "obs"), x[1:])


def test_several_chunks() -> None:
    x = np.arange(6 * 3, dtype=np.float32).reshape(6, 3)
    t = pa.concat_tables(
        [columns_to_table({"x": x[:2]}, layout="fast")] * 2
        + [columns_to_table({"x": x[2:]}, layout="fast")]
    )
    np.testing.assert_array_equal(column_to_numpy(t, "x"), np.concatenate([x[:2], x[:2], x[2:]]))


def test_nulls_refused_with_one_line() -> None:
    fld, arr = fixed_binary_column("obs", np.zeros((3, 2, 2), np.uint8))
    valid = pa.array([True, False, True]).buffers()[1]
    nulls = pa.Array.from_buffers(arr.type, 3, [valid, arr.buffers()[1]])
    table = pa.Table.from_arrays([nulls], schema=pa.schema([fld.with_nullable(True)]))
    with pytest.raises(ColumnValueError) as err:
        column_to_numpy(table, "obs", "f.parquet")
    msg = str(err.value)
    assert "\n" not in msg
    assert "'obs'" in msg and "null" in msg and "row 1" in msg
    assert err.value.rows is not None and list(err.value.rows) == [1]


def test_writer_refuses_object_columns() -> None:
    cells = np.empty((2, 2), dtype=object)
    with pytest.raises(SchemaError, match="numeric or bool"):
        columns_to_table({"x": cells}, layout="fast")


def test_unknown_layout_refused() -> None:
    want = "layout must be one of 'auto', 'lists', 'fast', 'rllib', found 'ray'"
    with pytest.raises(SchemaError, match=want):
        columns_to_table({"x": np.zeros((1, 2))}, layout="ray")  # type: ignore[arg-type]


def test_bad_metadata_is_one_line() -> None:
    fld, arr = fixed_binary_column("x", np.zeros((2, 3), np.float32))
    bad = fld.with_metadata(
        {b"ARROW:extension:name": FAST_TENSOR_NAME, b"ARROW:extension:metadata": b"[3]"}
    )
    with pytest.raises(ColumnValueError, match=r"not .*dtype"):
        column_to_numpy(pa.Table.from_arrays([arr], schema=pa.schema([bad])), "x")
    wrong = fld.with_metadata(
        {
            b"ARROW:extension:name": FAST_TENSOR_NAME,
            b"ARROW:extension:metadata": b'{"dtype": "<f4", "shape": [4]}',
        }
    )
    with pytest.raises(ValueError, match=r"needs fixed_size_binary\(16\)"):
        tensor_spec(wrong)


def _episodes(frame: tuple[int, ...] = (6, 6, 2)) -> list[Episode]:
    rng = np.random.default_rng(0)
    eps = []
    for i, n in enumerate([1, 4, 9]):
        eps.append(
            Episode(
                id=f"e{i}",
                observations=rng.integers(0, 255, (n + 1, *frame), dtype=np.uint8),
                actions=rng.integers(0, 3, n),
                rewards=rng.random(n),
                terminated=i != 1,
                truncated=i == 1,
                extras={"logits": rng.random((n, 3)).astype(np.float32)},
            )
        )
    return eps


@pytest.mark.parametrize("layout", ["fast", "rllib"])
def test_rows_reader_reads_both_layouts(layout: str) -> None:
    eps = _episodes()
    table = _parquet(episodes_to_rows(eps, layout=layout))  # type: ignore[arg-type]
    # Once ray.data is imported (by an earlier test), pyarrow hands RLlib's layout over as Ray's
    # tensor extension type: compare the stored type.
    kinds = {
        getattr(t, "storage_type", t).__class__.__name__
        for t in (table.schema.field(c).type for c in ("obs", "new_obs", "logits"))
    }
    assert kinds == ({"FixedSizeBinaryType"} if layout == "fast" else {"LargeListType"})
    got = RowsReader().read(table, source="f").episodes
    assert [e.id for e in got] == [e.id for e in eps]
    for a, b in zip(got, eps, strict=True):
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.extras["logits"], b.extras["logits"])
        np.testing.assert_array_equal(a.actions, b.actions)
        assert (a.terminated, a.truncated) == (b.terminated, b.truncated)


@pytest.mark.parametrize("layout", ["fast", "rllib"])
def test_record_writes_the_layout_asked(tmp_path: Any, layout: str) -> None:
    from offline_prelearner.jobs.record import record_env, write_recording

    rec = record_env("CartPole-v1", 60, seed=0)
    (path,) = write_recording(rec, tmp_path, layout=layout)  # type: ignore[arg-type]
    table = pq.read_table(path)
    obs_type = table.schema.field("obs").type
    assert isinstance(obs_type, FastTensorType) == (layout == "fast")
    got = RowsReader().read(table, source=path).episodes
    assert sum(len(e) for e in got) == sum(len(e) for e in rec.episodes) == 60
    np.testing.assert_array_equal(got[0].observations, rec.episodes[0].observations)
