"""Column conversion (io/arrow_numpy) and the row readers' frames (io/formats/rows/frame), each
vectorized operation checked against a plain-loop reference."""

from __future__ import annotations

import base64
import json
import pickle
from pathlib import Path
from typing import Any

import lz4.frame
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from offline_prelearner.errors import SchemaError
from offline_prelearner.io.arrow_numpy import (
    ColumnValueError,
    column_to_numpy,
    decode_cells,
    from_numpy,
    stack_cells,
    to_numpy,
)
from offline_prelearner.io.codec import pack_array
from offline_prelearner.io.formats.rows.frame import (
    ColumnBatch,
    Groups,
    Keys,
    assemble_observations,
    factorize,
    order_rows,
    rows_differ,
)

SETTINGS = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
DTYPES = [np.float32, np.float64, np.int8, np.int64, np.uint8, np.bool_]


class FakeRayTensor(pa.ExtensionType):
    """Stands in for Ray's ArrowTensorTypeV2 (same name, same storage) without importing Ray."""

    def __init__(self, shape: tuple[int, ...], dtype: pa.DataType) -> None:
        self.shape = shape
        super().__init__(pa.large_list(dtype), "ray.data.arrow_tensor_v2")

    def __arrow_ext_serialize__(self) -> bytes:
        return json.dumps(list(self.shape)).encode()

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: Any, serialized: bytes) -> FakeRayTensor:
        return cls(tuple(json.loads(serialized)), storage_type.value_type)


class FakeVariableTensor(pa.ExtensionType):
    def __init__(self, dtype: pa.DataType) -> None:
        storage = pa.struct([("data", pa.large_list(dtype)), ("shape", pa.list_(pa.int64()))])
        super().__init__(storage, "ray.data.arrow_variable_shaped_tensor")

    def __arrow_ext_serialize__(self) -> bytes:
        return b"2"

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: Any, serialized: bytes) -> FakeVariableTensor:
        return cls(storage_type.field("data").type.value_type)


def flat_large_list(a: np.ndarray) -> pa.LargeListArray:
    size = int(np.prod(a.shape[1:]))
    offsets = pa.array(np.arange(len(a) + 1, dtype=np.int64) * size)
    return pa.LargeListArray.from_arrays(offsets, pa.array(a.reshape(-1)))


def nested_lists(a: np.ndarray) -> pa.Array:
    arr = pa.array(a.reshape(-1))
    for size in reversed(a.shape[1:]):
        offsets = pa.array(np.arange(len(arr) // size + 1, dtype=np.int32) * size)
        arr = pa.ListArray.from_arrays(offsets, arr)
    return arr


def encode(a: np.ndarray, how: str) -> tuple[Any, pa.Field | None]:
    """``a`` as an Arrow column in one of the layouts Ray Data / pyarrow produce."""
    ray_meta = {
        b"ARROW:extension:name": b"ray.data.arrow_tensor_v2",
        b"ARROW:extension:metadata": json.dumps(list(a.shape[1:])).encode(),
    }
    if how == "fixed":
        return from_numpy(a), None
    if how == "list":
        return nested_lists(a), None
    if how == "ray_meta":
        arr = flat_large_list(a)
        return arr, pa.field("x", arr.type, metadata=ray_meta)
    if how == "ray_ext":
        storage = flat_large_list(a)
        return pa.ExtensionArray.from_storage(
            FakeRayTensor(a.shape[1:], storage.type.value_type), storage
        ), None
    raise AssertionError(how)


# ---------------------------------------------------------------------------------------------
# to_numpy
# ---------------------------------------------------------------------------------------------
@SETTINGS
@given(
    a=hnp.arrays(
        st.sampled_from(DTYPES),
        hnp.array_shapes(min_dims=1, max_dims=4, max_side=4),
        elements={"allow_nan": False},
    ),
    how=st.sampled_from(["fixed", "list", "ray_meta", "ray_ext"]),
    chunked=st.booleans(),
    sliced=st.booleans(),
)
def test_round_trip_layouts(a: np.ndarray, how: str, chunked: bool, sliced: bool) -> None:
    if a.ndim == 1 and how != "fixed":
        how = "fixed"  # a scalar column has no list layout
    arr, field = encode(a, how)
    expect = a
    if sliced and len(a) > 1:
        arr, expect = arr.slice(1), a[1:]
    col = pa.chunked_array([arr[: len(arr) // 2], arr[len(arr) // 2 :]]) if chunked else arr
    got = to_numpy(col, "x", field=field)
    assert got.dtype == expect.dtype and got.shape == expect.shape
    np.testing.assert_array_equal(got, expect)


def test_scalar_columns_are_zero_copy() -> None:
    arr = pa.array(np.arange(10.0))
    got = to_numpy(pa.chunked_array([arr]), "x")
    assert np.shares_memory(got, np.frombuffer(arr.buffers()[1], np.float64))
    values = pa.array(np.arange(12, dtype=np.float32))
    lists = pa.FixedSizeListArray.from_arrays(values, 4)
    got = to_numpy(lists, "x")
    assert got.shape == (3, 4)
    assert np.shares_memory(got, np.frombuffer(values.buffers()[1], np.float32))


def test_plain_types() -> None:
    assert to_numpy(pa.array([True, False]), "b").dtype == np.bool_
    s = to_numpy(pa.array(["a", None, "c"]), "s")
    assert s.dtype == object and s.tolist() == ["a", None, "c"]
    n = to_numpy(pa.nulls(3), "n")
    assert n.dtype == object and n.tolist() == [None, None, None]
    d = to_numpy(pa.array(["x", "y", "x"]).dictionary_encode(), "d")
    assert d.tolist() == ["x", "y", "x"]
    assert to_numpy(pa.array([], pa.float32()), "e").shape == (0,)
    structs = to_numpy(pa.array([{"a": 1}, None]), "infos")
    assert structs.tolist() == [{"a": 1}, None]


def test_table_column_uses_field_metadata() -> None:
    a = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    arr, field = encode(a, "ray_meta")
    table = pa.Table.from_arrays([arr], schema=pa.schema([field]))
    np.testing.assert_array_equal(column_to_numpy(table, "x"), a)


def test_ragged_lists_name_every_offending_row() -> None:
    with pytest.raises(ColumnValueError, match="row 1 has 1 elements where most rows have 2") as e:
        to_numpy(pa.array([[1, 2], [3], [4, 5], [6, 7], []]), "obs", "f.parquet")
    assert e.value.rows.tolist() == [1, 4] and e.value.reason == "ragged"
    w = e.value.where
    assert (w.file, w.column, w.row) == ("f.parquet", "obs", 1)


def test_nested_ragged_maps_to_outer_row() -> None:
    with pytest.raises(ColumnValueError) as e:
        to_numpy(pa.array([[[1, 2], [3, 4]], [[1, 2], [3, 4]], [[5, 6], [7]]]), "img")
    assert e.value.rows.tolist() == [2] and e.value.where.row == 2


def test_nulls_name_rows() -> None:
    with pytest.raises(ColumnValueError, match="null value") as e:
        to_numpy(pa.array([1.0, 2.0, None, 4.0, None]), "rewards")
    assert e.value.rows.tolist() == [2, 4] and e.value.reason == "null_value"
    with pytest.raises(ColumnValueError, match="null list at row 1") as e:
        to_numpy(pa.array([[1, 2], None, [3, 4]]), "obs")
    with pytest.raises(ColumnValueError) as e:
        to_numpy(pa.array([[1, 2], [3, 4], [5, None]]), "obs")
    assert e.value.rows.tolist() == [2]


def test_chunked_rows_are_offset() -> None:
    col = pa.chunked_array([pa.array([1.0, 2.0]), pa.array([3.0, None])])
    with pytest.raises(ColumnValueError) as e:
        to_numpy(col, "r")
    assert e.value.rows.tolist() == [3]


def test_extension_edge_cases() -> None:
    bad_meta = pa.field(
        "x",
        pa.large_list(pa.float32()),
        metadata={
            b"ARROW:extension:name": b"ray.data.arrow_tensor_v2",
            b"ARROW:extension:metadata": b"\x80\x04pickled",
        },
    )
    with pytest.raises(ColumnValueError, match="not a JSON shape"):
        to_numpy(pa.array([[1.0]], pa.large_list(pa.float32())), "x", field=bad_meta)
    wrong = pa.ExtensionArray.from_storage(
        FakeRayTensor((3,), pa.float32()), pa.array([[1, 2]], pa.large_list(pa.float32()))
    )
    with pytest.raises(ColumnValueError, match="shape \\[3\\] needs 3"):
        to_numpy(wrong, "x")
    storage = pa.StructArray.from_arrays(
        [
            pa.array([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]], pa.large_list(pa.float64())),
            pa.array([[2, 2], [2, 2]], pa.list_(pa.int64())),
        ],
        names=["data", "shape"],
    )
    var = pa.ExtensionArray.from_storage(FakeVariableTensor(pa.float64()), storage)
    np.testing.assert_array_equal(to_numpy(var, "v"), np.arange(1.0, 9.0).reshape(2, 2, 2))
    storage = pa.StructArray.from_arrays(
        [
            pa.array([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0]], pa.large_list(pa.float64())),
            pa.array([[2, 2], [1, 2]], pa.list_(pa.int64())),
        ],
        names=["data", "shape"],
    )
    var = pa.ExtensionArray.from_storage(FakeVariableTensor(pa.float64()), storage)
    with pytest.raises(ColumnValueError) as e:
        to_numpy(var, "v")
    assert e.value.rows.tolist() == [1]


def test_real_ray_extension_types() -> None:
    arrow = pytest.importorskip("ray.data._internal.tensor_extensions.arrow")
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(to_numpy(arrow.ArrowTensorArray.from_numpy(a), "x"), a)


def test_numpy_input() -> None:
    a = np.arange(6.0).reshape(3, 2)
    assert to_numpy(a, "x") is a
    cells = np.empty(3, dtype=object)
    cells[:] = [np.zeros(2), np.ones(2), np.full(2, 2.0)]
    np.testing.assert_array_equal(to_numpy(cells, "x"), [[0, 0], [1, 1], [2, 2]])
    cells[1] = np.ones(3)
    with pytest.raises(ColumnValueError) as e:
        to_numpy(cells, "x")
    assert e.value.rows.tolist() == [1]
    cells[1] = None
    with pytest.raises(ColumnValueError, match="null value at row 1"):
        to_numpy(cells, "x")
    text = np.array(["a", "b"], dtype=object)
    assert to_numpy(text, "s") is text


def test_stack_cells_reports_all_rows() -> None:
    with pytest.raises(ColumnValueError) as e:
        stack_cells([np.zeros(2), np.zeros(3), np.zeros(2), np.zeros(1)], "obs")
    assert e.value.rows.tolist() == [1, 3]


# ---------------------------------------------------------------------------------------------
# compressed cells
# ---------------------------------------------------------------------------------------------
def legacy_cell(x: Any) -> str:
    return base64.b64encode(lz4.frame.compress(pickle.dumps(x))).decode()


def test_decode_lz4_msgpack_cells() -> None:
    rows = [np.arange(4, dtype=np.float32) + i for i in range(5)]
    got = decode_cells([pack_array(r) for r in rows], "lz4_msgpack", "obs")
    np.testing.assert_array_equal(got, np.stack(rows))
    cells: list[Any] = [pack_array(r) for r in rows]
    cells[1] = b"garbage"
    cells[3] = 7
    with pytest.raises(ColumnValueError, match="cannot decode lz4_msgpack") as e:
        decode_cells(cells, "lz4_msgpack", "obs", "f.parquet")
    assert e.value.rows.tolist() == [1, 3] and e.value.where.row == 1


def test_decode_legacy_cells_refuses_code() -> None:
    cells = [legacy_cell(np.full(3, i, np.float32)) for i in range(3)]
    np.testing.assert_array_equal(decode_cells(cells, "legacy_pickle", "obs")[:, 0], [0, 1, 2])

    class Evil:
        def __reduce__(self) -> Any:
            return (print, ("pwned",))

    cells[2] = legacy_cell(Evil())
    with pytest.raises(ColumnValueError) as e:
        decode_cells(cells, "legacy_pickle", "obs")
    assert e.value.reason == "refused_pickle" and e.value.rows.tolist() == [2]
    with pytest.raises(ColumnValueError, match="unknown codec"):
        decode_cells(cells, "zip", "obs")


def test_decode_rllib_compressed_column(shared_data: Path) -> None:
    table = pq.read_table(shared_data / "cartpole-v1_rows_compressed.parquet")
    batch = ColumnBatch(table)
    obs = decode_cells(batch.cells("obs"), "legacy_pickle", "obs")
    assert obs.shape == (234, 4) and obs.dtype == np.float32


# ---------------------------------------------------------------------------------------------
# frames (io/formats/rows/frame.py)
# ---------------------------------------------------------------------------------------------
def reference_factorize(values: list[Any]) -> tuple[list[int], list[Any]]:
    seen: dict[Any, int] = {}
    codes = []
    for v in values:
        if v not in seen:
            seen[v] = len(seen)
        codes.append(seen[v])
    return codes, list(seen)


@SETTINGS
@given(
    values=st.lists(st.one_of(st.none(), st.sampled_from(["a", "b", "cc"])), max_size=30),
    kind=st.sampled_from(["numpy", "arrow", "chunked"]),
)
def test_factorize_matches_reference(values: list[Any], kind: str) -> None:
    if kind == "numpy":
        col: Any = np.empty(len(values), dtype=object)
        col[:] = values
    else:
        col = pa.array(values, pa.string())
        if kind == "chunked":
            col = pa.chunked_array([col[:3], col[3:]], pa.string())
    codes, uniques = factorize(col)
    ref_codes, ref_uniques = reference_factorize(values)
    assert codes.tolist() == ref_codes and uniques == ref_uniques


def test_factorize_numbers_nan_and_mixed() -> None:
    codes, uniques = factorize(np.array([3, 1, 3, 2]))
    assert codes.tolist() == [0, 1, 0, 2] and uniques == [3, 1, 2]
    codes, uniques = factorize(np.array([np.nan, np.nan], np.float32))
    assert codes.tolist() == [0, 0] and uniques == [None]
    mixed = np.array(["a", 1, "a", (1, 2)], dtype=object)
    codes, uniques = factorize(mixed)
    assert codes.tolist() == [0, 1, 0, 2] and uniques == ["a", 1, (1, 2)]
    with pytest.raises(SchemaError):
        factorize(np.zeros((2, 2)))


def row_differs_reference(a: np.ndarray, b: np.ndarray) -> list[bool]:
    out = []
    for x, y in zip(a, b, strict=True):
        same = np.array_equal(x, y, equal_nan=x.dtype.kind == "f" and y.dtype.kind == "f")
        out.append(not same)
    return out


@SETTINGS
@given(data=st.data())
def test_rows_differ_matches_reference(data: Any) -> None:
    dtype = data.draw(st.sampled_from([np.float32, np.float64, np.int16, np.uint8, np.bool_]))
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=4))
    elements = (
        st.sampled_from([0.0, -0.0, 1.5, np.nan]) if dtype in (np.float32, np.float64) else None
    )
    a = data.draw(hnp.arrays(dtype, shape, elements=elements))
    b = a.copy()
    flips = data.draw(st.lists(st.integers(0, max(0, b.size - 1)), max_size=3))
    flat = b.reshape(-1)
    for i in flips:
        if b.size:
            if dtype == np.bool_:
                flat[i] = not flat[i]
            elif np.issubdtype(dtype, np.integer):
                flat[i] ^= 1
            else:
                flat[i] += 1
    if dtype in (np.float32, np.float64) and b.size:  # -0.0 equals 0.0; NaN equals NaN
        b = np.where(b == 0, -b, b)
    assert rows_differ(a, b).tolist() == row_differs_reference(a, b)
    ia = np.asarray(data.draw(st.lists(st.integers(0, len(a) - 1), max_size=6)), np.int64)
    ib = np.asarray(
        data.draw(st.lists(st.integers(0, len(a) - 1), min_size=len(ia), max_size=len(ia))),
        np.int64,
    )
    assert rows_differ(a, b, ia, ib).tolist() == row_differs_reference(a[ia], b[ib])


def test_rows_differ_in_chunks() -> None:
    a = np.zeros((5, 3_000_000), np.float32)  # 12 MB rows: two rows per 32 MB chunk
    b = a.copy()
    b[3, -1] = 1.0
    assert rows_differ(a, b).tolist() == [False, False, False, True, False]
    assert rows_differ(a, b, np.array([3, 4]), np.array([0, 3])).tolist() == [False, True]


@SETTINGS
@given(data=st.data())
def test_order_rows_matches_sorted_reference(data: Any) -> None:
    lengths = data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=6))
    codes = np.repeat(np.arange(len(lengths)), lengths)
    t = np.concatenate([np.arange(n) + data.draw(st.integers(0, 9)) for n in lengths])
    if data.draw(st.booleans()):  # break the contract: a gap or a repeat
        i = data.draw(st.integers(0, len(t) - 1))
        t[i] += data.draw(st.sampled_from([-1, 1, 5]))
    perm = np.asarray(data.draw(st.permutations(range(len(codes)))), np.int64)
    codes, t = codes[perm], t[perm]
    with_t = data.draw(st.booleans())
    order = order_rows(codes, t if with_t else None)
    order = np.arange(len(codes)) if order is None else order
    assert sorted(order.tolist()) == list(range(len(codes)))
    # reference: each episode's rows, in (t, row) order with t, in row order without
    by_code: dict[int, list[int]] = {}
    for i in range(len(codes)):
        by_code.setdefault(int(codes[i]), []).append(i)
    seen = []
    pos = 0
    while pos < len(order):  # walk the episodes as the permutation lays them out
        c = int(codes[order[pos]])
        assert c not in seen, "an episode's rows must be contiguous"
        seen.append(c)
        rows = by_code[c]
        got = order[pos : pos + len(rows)].tolist()
        if with_t:  # rows in t order; ties (a broken contract) may come in any order
            assert [t[i] for i in got] == sorted(t[i] for i in rows) and sorted(got) == rows
        else:
            assert got == rows
        pos += len(rows)


@SETTINGS
@given(data=st.data())
def test_assemble_observations_matches_loop(data: Any) -> None:
    lengths = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=5))
    m = sum(lengths)
    codes = np.repeat(np.arange(len(lengths)), lengths)
    perm = np.asarray(data.draw(st.permutations(range(m))), np.int64)
    codes = codes[perm]
    obs = np.arange(m * 2, dtype=np.float64).reshape(m, 2)
    new_obs = obs + 1000
    keys = Keys(codes, list(range(len(lengths))), [None] * len(lengths))
    gr = Groups.of(codes, None, np.arange(m), keys)
    out = assemble_observations(gr, obs, new_obs)
    for e, (st_, en) in enumerate(zip(gr.starts.tolist(), gr.ends.tolist(), strict=True)):
        rows = [i for i in range(m) if codes[i] == codes[gr.first[e]]]  # in row order
        expect = np.stack([obs[i] for i in rows] + [new_obs[rows[-1]]])
        np.testing.assert_array_equal(out[st_ + e : en + e + 1], expect)


def test_column_batch_formats() -> None:
    with pytest.raises(SchemaError, match="differ in length"):
        ColumnBatch({"a": np.zeros(2), "b": np.zeros(3)})
    with pytest.raises(SchemaError, match="pyarrow Table or a dict"):
        ColumnBatch([1, 2])
    b = ColumnBatch({"obs": np.arange(6.0).reshape(3, 2), "id": np.array(["x", "y", "z"])})
    table = b.take(np.array([2, 0]))
    assert table.column("id").to_pylist() == ["z", "x"]
    np.testing.assert_array_equal(to_numpy(table.column("obs"), "obs"), [[4, 5], [0, 1]])
    sub = b.filter(np.array([True, False, True]))
    assert sub.num_rows == 2 and sub.to_numpy("id").tolist() == ["x", "z"]
    ragged = ColumnBatch({"obs": [[1, 2], [3]]})
    with pytest.raises(ColumnValueError):
        ragged.to_numpy("obs")
