"""The default output of ``process`` opens as numbers in other tools (issue 19), one test each.

A real ``process`` run on the shipped CartPole rows (default layout: ``auto``, which writes
CartPole's 16-byte ``obs`` as plain ``fixed_size_list<float>[4]``) is read by pandas, polars,
Hugging Face ``datasets``, Ray Data and torch. The non-Ray consumers run in a fresh interpreter
that never imports ``offline_prelearner``: what a user of those tools gets. Then the public
read API (``op.read_samples`` / ``op.to_numpy`` / ``op.to_torch``) on every layout, and the fast
layout's extension type registered on import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO

import offline_prelearner as op
from offline_prelearner.cli import main
from offline_prelearner.io.fast_tensor import FAST_MIN_CELL_BYTES

ROWS = REPO / "datasets" / "cartpole-v1" / "rows"


def _process(out: Path, *argv: str) -> Path:
    code = main(["process", str(ROWS), "--out", str(out), "--engine", "local", "--json", *argv])
    assert code == 0
    return out


@pytest.fixture(scope="module")
def default_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _process(tmp_path_factory.mktemp("consumers") / "out")


def _sample_files(out: Path) -> list[str]:
    files = sorted(str(p) for p in (out / "samples").glob("*.parquet"))
    assert files
    return files


def _clean_python(code: str, tmp_path: Path, **env: str) -> dict[str, Any]:
    """Runs ``code`` in a fresh interpreter (``print`` one JSON line); asserts it never imported
    this library."""
    code = textwrap.dedent(code) + (
        "\nimport sys\nassert 'offline_prelearner' not in sys.modules, 'imported the library'\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, **env},
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_default_layout_is_plain_lists_for_small_cells(default_out: Path) -> None:
    schema = pq.read_schema(_sample_files(default_out)[0])
    for name in ("obs", "new_obs"):
        field = schema.field(name)
        assert field.type == pa.list_(pa.float32(), 4), field
        assert not field.metadata  # no extension: nothing for another tool to trip on
    manifest = json.loads((default_out / "_manifest.json").read_text())
    assert manifest["files"]


def test_pandas_reads_numbers(default_out: Path, tmp_path: Path) -> None:
    got = _clean_python(
        f"""
        import json, numpy as np, pandas as pd
        df = pd.concat([pd.read_parquet(f) for f in {_sample_files(default_out)!r}])
        obs = np.stack(df.obs.to_numpy())
        print(json.dumps({{"dtype": str(obs.dtype), "shape": obs.shape, "rows": len(df)}}))
        """,
        tmp_path,
    )
    assert got["dtype"] == "float32" and got["shape"] == [got["rows"], 4]


def test_polars_reads_a_numeric_array_dtype(default_out: Path, tmp_path: Path) -> None:
    pytest.importorskip("polars")
    got = _clean_python(
        f"""
        import json, polars as pl
        df = pl.read_parquet({_sample_files(default_out)!r})
        obs = df["obs"].to_numpy()
        print(json.dumps({{"dtype": str(df.schema["obs"]), "np": str(obs.dtype),
                           "shape": obs.shape, "rows": df.height}}))
        """,
        tmp_path,
    )
    assert got["dtype"] == "Array(Float32, shape=(4,))"
    assert got["np"] == "float32" and got["shape"] == [got["rows"], 4]


def test_hugging_face_datasets_reads_numbers(default_out: Path, tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    got = _clean_python(
        f"""
        import json
        from datasets import Dataset
        ds = Dataset.from_parquet({_sample_files(default_out)!r}).with_format("numpy")
        obs = ds[:]["obs"]
        print(json.dumps({{"dtype": str(obs.dtype), "shape": obs.shape, "rows": len(ds)}}))
        """,
        tmp_path,
        HF_DATASETS_CACHE=str(tmp_path / "hf"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_DISABLE_PROGRESS_BARS="1",
    )
    assert got["dtype"] == "float32" and got["shape"] == [got["rows"], 4]


def test_torch_reads_numbers(default_out: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="torch is not in the test extra (a CPU build: .ci/run)")
    got = _clean_python(
        f"""
        import json, numpy as np, pyarrow.parquet as pq, torch
        t = pq.read_table({_sample_files(default_out)!r}[0])
        obs = torch.as_tensor(np.stack(t.column("obs").to_numpy(zero_copy_only=False)))
        print(json.dumps({{"dtype": str(obs.dtype), "shape": list(obs.shape),
                           "rows": t.num_rows}}))
        """,
        tmp_path,
    )
    assert got["dtype"] == "torch.float32" and got["shape"] == [got["rows"], 4]


def test_torch_through_the_public_api(default_out: Path) -> None:
    torch = pytest.importorskip("torch", reason="torch is not in the test extra (.ci/run)")
    cols = op.read_samples(default_out)
    batch = op.to_torch(cols)
    assert batch["obs"].dtype == torch.float32 and tuple(batch["obs"].shape) == (
        len(cols["obs"]),
        4,
    )
    assert batch["actions"].dtype == torch.int64
    assert "eps_id" not in batch and "module_id" not in batch  # strings are not tensors
    np.testing.assert_array_equal(batch["new_obs"].numpy(), cols["new_obs"])
    with pytest.raises(TypeError, match="'eps_id'"):
        op.to_torch(cols, columns=["eps_id"])


@pytest.mark.ray
def test_ray_data_numpy_batches_hold_numbers(default_out: Path, ray_local: Any) -> None:
    ds = ray_local.data.read_parquet(_sample_files(default_out))
    batch = ds.take_batch(64, batch_format="numpy")
    obs = batch["obs"]
    assert isinstance(obs, np.ndarray) and len(obs) == 64
    # Ray hands plain Arrow lists over one array per row (a tensor column needs Ray's own
    # extension: --layout rllib); each row is float32 numbers, and one stack makes the batch.
    stacked = np.stack(obs)
    assert stacked.dtype == np.float32 and stacked.shape == (64, 4)
    torch = pytest.importorskip("torch", reason="torch is not in the test extra (.ci/run)")
    tb = next(iter(ds.select_columns(["obs", "actions"]).iter_torch_batches(batch_size=16)))
    assert tb["obs"].dtype == torch.float32 and tuple(tb["obs"].shape) == (16, 4)


@pytest.mark.ray
def test_ray_data_reads_the_fast_layout_as_tensors_once_the_package_is_imported(
    tmp_path: Path, ray_local: Any
) -> None:
    from offline_prelearner.io.formats.rows.writer import columns_to_table

    frames = np.arange(5 * 84 * 84 * 4, dtype=np.uint8).reshape(5, 84, 84, 4)
    pq.write_table(columns_to_table({"obs": frames}, layout="fast"), tmp_path / "f.parquet")
    batch = ray_local.data.read_parquet(str(tmp_path / "f.parquet")).take_batch(
        5, batch_format="numpy"
    )
    assert batch["obs"].dtype == np.uint8 and batch["obs"].shape == (5, 84, 84, 4)
    np.testing.assert_array_equal(batch["obs"], frames)


# --------------------------------------------------------------------- the public read API
@pytest.mark.parametrize("layout", ["auto", "lists", "fast", "rllib"])
def test_read_samples_gives_the_same_arrays_for_every_layout(
    default_out: Path, tmp_path: Path, layout: str
) -> None:
    ref = op.read_samples(default_out)
    got = op.read_samples(_process(tmp_path / "out", "--layout", layout))
    assert list(got) == list(ref)
    for name, a in ref.items():
        np.testing.assert_array_equal(got[name], a)
        assert got[name].dtype == a.dtype, name
    assert ref["obs"].dtype == np.float32 and ref["obs"].shape == (len(ref["eps_id"]), 4)


def test_read_samples_columns_files_and_errors(default_out: Path, tmp_path: Path) -> None:
    files = _sample_files(default_out)
    cols = op.read_samples(files, columns=["rewards", "obs"])
    assert list(cols) == ["rewards", "obs"]
    one = op.to_numpy(pq.read_table(files[0]), ["obs"])
    np.testing.assert_array_equal(one["obs"], cols["obs"][: len(one["obs"])])
    batch = pq.read_table(files[0]).to_batches()[0]
    assert op.to_numpy(batch)["obs"].shape == (batch.num_rows, 4)
    with pytest.raises(KeyError, match="'nope'"):
        op.to_numpy(pq.read_table(files[0]), ["nope"])
    with pytest.raises(FileNotFoundError):
        op.read_samples(tmp_path / "missing")
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(op.UnsupportedFormatError, match="Parquet"):
        op.read_samples(tmp_path / "x.json")
    # a committed folder gives what its manifest lists, not a stray file beside it
    stray = default_out / "samples" / "stray.parquet"
    pq.write_table(pq.read_table(files[0]), stray)
    try:
        assert len(op.read_samples(default_out)["obs"]) == len(op.read_samples(files)["obs"])
    finally:
        stray.unlink()


def test_fast_layout_extension_is_registered_on_import(tmp_path: Path) -> None:
    from offline_prelearner.io.formats.rows.writer import columns_to_table

    frames = np.arange(3 * 84 * 84 * 4, dtype=np.uint8).reshape(3, 84, 84, 4)
    assert frames[0].nbytes >= FAST_MIN_CELL_BYTES
    table = columns_to_table({"obs": frames}, layout="auto")  # frames: auto writes them fast
    pq.write_table(table, tmp_path / "f.parquet")
    code = f"""
        import json, pyarrow.parquet as pq
        import offline_prelearner  # nothing else: the import registers the extension type
        col = pq.read_table({str(tmp_path / "f.parquet")!r}).column("obs")
        arr = col.chunk(0).to_numpy()
        print(json.dumps({{"type": type(col.type).__name__, "shape": arr.shape,
                           "dtype": str(arr.dtype), "sum": int(arr.sum(dtype="int64"))}}))
        """
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got == {
        "type": "FastTensorType",
        "shape": [3, 84, 84, 4],
        "dtype": "uint8",
        "sum": int(frames.sum(dtype=np.int64)),
    }
    np.testing.assert_array_equal(op.to_numpy(pq.read_table(tmp_path / "f.parquet"))["obs"], frames)
