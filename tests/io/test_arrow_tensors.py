"""Arrow's canonical tensor types as input (issue 19): ``arrow.fixed_shape_tensor`` (with and
without a permutation) and ``arrow.variable_shape_tensor`` (read when every row has one shape,
refused in one line when not), against a plain per-row loop; ``inspect``, ``process`` and
``convert`` on rows whose ``obs`` / ``new_obs`` / ``actions`` are fixed-shape tensors."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import offline_prelearner as op
from offline_prelearner.cli import main
from offline_prelearner.io.arrow_numpy import ColumnValueError, column_to_numpy, is_tensor_field

ROWS = REPO / "datasets" / "cartpole-v1" / "rows"
DTYPES = [np.uint8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64, np.bool_]


def _parquet(table: pa.Table) -> pa.Table:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    sink.seek(0)
    return pq.read_table(sink)


def fixed_shape_tensor(x: np.ndarray, perm: list[int] | None = None) -> pa.ExtensionArray:
    """``x`` (``[n, *shape]``) as ``arrow.fixed_shape_tensor``, rows stored in physical order
    ``perm`` (physical dimension ``i`` is logical dimension ``perm[i]``)."""
    shape = x.shape[1:]
    physical = x if perm is None else x.transpose((0, *(1 + np.asarray(perm, dtype=int))))
    flat = pa.array(np.ascontiguousarray(physical).reshape(-1))
    storage = pa.FixedSizeListArray.from_arrays(flat, int(np.prod(shape)))
    typ = pa.fixed_shape_tensor(flat.type, list(shape), permutation=perm)
    return pa.ExtensionArray.from_storage(typ, storage)


def loop_reference(arr: pa.ExtensionArray) -> np.ndarray:
    """One row at a time, through Python lists: the slow, obvious reading of the spec."""
    t = arr.type
    shape = list(t.shape)
    perm = list(t.permutation) if t.permutation is not None else list(range(len(shape)))
    physical = [shape[p] for p in perm]
    dtype = t.value_type.to_pandas_dtype()
    rows = []
    for i in range(len(arr)):
        cell = np.array(arr.storage[i].as_py(), dtype=dtype).reshape(physical)
        rows.append(cell.transpose(np.argsort(perm)))
    return np.stack(rows) if rows else np.zeros((0, *shape), dtype)


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from(DTYPES).flatmap(
        lambda dt: hnp.arrays(
            dtype=dt, shape=hnp.array_shapes(min_dims=2, max_dims=4, min_side=1, max_side=4)
        )
    ),
    st.data(),
)
def test_fixed_shape_tensor_round_trips_like_a_plain_loop(
    x: np.ndarray, data: st.DataObject
) -> None:
    ndim = x.ndim - 1
    perm = data.draw(st.none() | st.permutations(list(range(ndim))).map(list), label="perm")
    arr = fixed_shape_tensor(x, perm)
    table = _parquet(pa.table({"obs": arr}))
    assert isinstance(table.schema.field("obs").type, pa.FixedShapeTensorType)
    got = column_to_numpy(table, "obs")
    ref = loop_reference(arr)
    assert got.dtype == x.dtype and got.shape == x.shape
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got, x)
    assert is_tensor_field(table.schema.field("obs"))


def test_fixed_shape_tensor_is_zero_copy_without_permutation() -> None:
    x = np.arange(6 * 2 * 3, dtype=np.float32).reshape(6, 2, 3)
    arr = fixed_shape_tensor(x)
    got = column_to_numpy(pa.table({"x": arr}), "x")
    assert np.shares_memory(got, np.frombuffer(arr.storage.values.buffers()[1], np.float32))
    np.testing.assert_array_equal(column_to_numpy(pa.table({"x": arr.slice(2, 3)}), "x"), x[2:5])


def test_fixed_shape_tensor_nulls_are_named() -> None:
    x = np.zeros((3, 2), np.float32)
    storage = pa.FixedSizeListArray.from_arrays(
        pa.array(x.reshape(-1)), 2, mask=pa.array([False, True, False])
    )
    arr = pa.ExtensionArray.from_storage(pa.fixed_shape_tensor(pa.float32(), [2]), storage)
    with pytest.raises(ColumnValueError, match=r"'obs'.*null.*row 1") as err:
        column_to_numpy(pa.table({"obs": arr}), "obs", "f.parquet")
    assert "\n" not in str(err.value) and list(err.value.rows) == [1]  # type: ignore[arg-type]


# --------------------------------------------------------------------- variable_shape_tensor
def variable_shape_tensor(cells: list[np.ndarray], perm: list[int] | None = None) -> pa.Table:
    """Arrow's ``arrow.variable_shape_tensor`` as pyarrow (which has no class for it) writes it:
    a struct of ``data`` (each row's values, physical order) and ``shape`` (the logical shape),
    the extension named in the field metadata."""
    ndim = cells[0].ndim
    p = perm or list(range(ndim))
    data = [np.ascontiguousarray(c.transpose(p)).reshape(-1) for c in cells]
    storage = pa.StructArray.from_arrays(
        [
            pa.array(data, pa.list_(pa.from_numpy_dtype(cells[0].dtype))),
            pa.array([list(c.shape) for c in cells], pa.list_(pa.int32(), ndim)),
        ],
        names=["data", "shape"],
    )
    meta = {"permutation": perm} if perm else {}
    field = pa.field(
        "obs",
        storage.type,
        metadata={
            b"ARROW:extension:name": b"arrow.variable_shape_tensor",
            b"ARROW:extension:metadata": json.dumps(meta).encode(),
        },
    )
    return pa.Table.from_arrays([storage], schema=pa.schema([field]))


@pytest.mark.parametrize("perm", [None, [1, 0, 2], [2, 0, 1]])
def test_variable_shape_tensor_of_one_shape_is_read(perm: list[int] | None) -> None:
    x = np.arange(4 * 2 * 3 * 5, dtype=np.int32).reshape(4, 2, 3, 5)
    table = _parquet(variable_shape_tensor(list(x), perm))
    assert is_tensor_field(table.schema.field("obs"))
    np.testing.assert_array_equal(column_to_numpy(table, "obs"), x)


def test_variable_shape_tensor_of_several_shapes_is_refused_in_one_line() -> None:
    cells = [np.zeros((2, 2), np.float32), np.zeros((2, 2), np.float32), np.zeros((3, 2))]
    table = _parquet(variable_shape_tensor([c.astype(np.float32) for c in cells]))
    with pytest.raises(ColumnValueError, match=r"'obs'.*row 2 has shape \[3, 2\]") as err:
        column_to_numpy(table, "obs", "f.parquet")
    assert "\n" not in str(err.value) and err.value.reason == "ragged"
    assert list(err.value.rows) == [2]  # type: ignore[arg-type]


# --------------------------------------------------------------------- the commands
@pytest.fixture(scope="module")
def tensor_rows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped CartPole rows with obs, new_obs and actions as arrow.fixed_shape_tensor."""
    out = tmp_path_factory.mktemp("fst")
    for f in sorted(ROWS.glob("*.parquet")):
        table = pq.read_table(f)
        for name in ("obs", "new_obs", "actions"):
            values = column_to_numpy(table, name)
            if values.ndim == 1:
                values = values[:, None]  # actions as (1,) tensors
            i = table.schema.get_field_index(name)
            table = table.set_column(i, name, fixed_shape_tensor(values))
        pq.write_table(table, out / f.name)
    return out


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_inspect_reads_fixed_shape_tensors(
    tensor_rows: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, "inspect", str(tensor_rows))
    assert code == 0, err
    assert "observation {'shape': [4], 'dtype': 'float32'}" in out
    code, out, err = _run(capsys, "inspect", str(tensor_rows), "--json")
    assert code == 0, err
    assert json.loads(out)["observation"] == {"shape": [4], "dtype": "float32"}


def test_process_reads_fixed_shape_tensors_like_the_original(
    tensor_rows: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = {}
    for name, src in (("tensor", tensor_rows), ("plain", ROWS)):
        out = tmp_path / name
        code, _, err = _run(capsys, "process", str(src), "--out", str(out), "--engine", "local")
        assert code == 0, err
        runs[name] = op.read_samples(out)
    stats = json.loads((tmp_path / "tensor" / "stats.json").read_text())
    assert stats["rows_rejected"] == {} and stats["rows_balance"]
    assert set(runs["tensor"]) == set(runs["plain"]) | set()
    np.testing.assert_array_equal(runs["tensor"]["obs"], runs["plain"]["obs"])
    np.testing.assert_array_equal(runs["tensor"]["new_obs"], runs["plain"]["new_obs"])
    np.testing.assert_array_equal(runs["tensor"]["actions"][:, 0], runs["plain"]["actions"])


def test_convert_relayouts_fixed_shape_tensors(
    tensor_rows: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fast"
    code, _, err = _run(
        capsys, "convert", str(tensor_rows), "--to", "rows", "--layout", "fast", "--out", str(out)
    )
    assert code == 0, err
    files = sorted((out / "rows").glob("*.parquet"))  # convert's data folder
    table = pq.read_table(files[0])
    assert isinstance(table.schema.field("obs").type, op.io.fast_tensor.FastTensorType)
    src = pq.read_table(sorted(tensor_rows.glob("*.parquet"))[0])
    np.testing.assert_array_equal(column_to_numpy(table, "obs"), column_to_numpy(src, "obs"))
