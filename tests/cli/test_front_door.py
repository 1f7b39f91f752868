"""The front door: what a person sees of each job (a few lines; ``--json`` for scripts), ``inspect``
of every folder the jobs write, and the folders themselves as other readers open them.

One module-scoped set of outputs (the shipped CartPole rows processed and converted each way) is
shared by every test here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO

import offline_prelearner as op
from offline_prelearner.cli import main

ROWS = REPO / "datasets/cartpole-v1/rows"


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The shipped rows processed (n_step 3) and converted to episodes, rows and Minari."""
    root = tmp_path_factory.mktemp("front")
    made = {name: root / name for name in ("samples", "rows", "episodes", "minari")}
    jobs = [
        ["process", ROWS, "--out", made["samples"], "--engine", "local", "--set", "n_step=3"],
        ["convert", ROWS, "--to", "episodes", "--out", made["episodes"]],
        # from episodes: converted file by file (rows -> rows would be a relayout, in a pool)
        ["convert", made["episodes"], "--to", "rows", "--out", made["rows"]],
        ["convert", ROWS, "--to", "minari", "--env-id", "CartPole-v1", "--out", made["minari"]],
    ]
    for argv in jobs:
        assert main([str(a) for a in [*argv, "--json"]]) == 0
    return made


# ------------------------------------------------------------------------------ the console
def test_process_says_a_few_lines_and_json_says_everything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    code, said, _ = run(capsys, "process", ROWS, "--out", out, "--engine", "local")
    assert code == 0
    lines = said.splitlines()
    assert 2 <= len(lines) <= 5, said
    assert lines[0].startswith(f"222 episodes, 5,000 rows -> 5,000 samples in {out} (")
    assert lines[0].endswith(" s); every row accounted for"), lines[0]
    assert lines[-1] == f"details: {out}/stats.json (or run with --json)"
    code, printed, _ = run(capsys, "process", ROWS, "--out", out, "--engine", "local", "--json",
                           "--overwrite")  # fmt: skip
    assert code == 0 and len(printed.splitlines()) == 1
    summary = json.loads(printed)
    got = (summary["rows_in"], summary["samples_written"], summary["out"])
    assert got == (5000, 5000, str(out))


def test_process_names_what_it_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "bad"
    data.mkdir()
    t = pq.read_table(ROWS / "cartpole-v1-rows-00000.parquet")
    rewards = t.column("rewards").to_numpy().copy()
    rewards[10] = np.nan
    t = t.set_column(t.column_names.index("rewards"), "rewards", pa.array(rewards))
    pq.write_table(t, data / "part.parquet")
    argv = ["process", data, "--out", tmp_path / "o", "--engine", "local", "--on-invalid", "skip"]
    code, said, _ = run(capsys, *argv)
    stats = json.loads((tmp_path / "o" / "stats.json").read_text())
    (reason,) = stats["rows_rejected"]
    n = stats["rows_rejected"][reason]
    lines = said.splitlines()
    assert code == 0 and len(lines) <= 5, said
    assert lines[0].endswith("every row accounted for"), lines
    assert lines[1] == f"rejected {n} rows ({reason} {n})", lines


def test_convert_says_a_few_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "e"
    code, said, _ = run(capsys, "convert", ROWS, "--to", "episodes", "--out", out)
    lines = said.splitlines()
    assert code == 0 and 2 <= len(lines) <= 5, said
    assert lines[0].startswith(f"222 episodes, 5,000 rows -> 5,000 written as episodes (5 files) "
                               f"in {out} (")  # fmt: skip
    assert lines[0].endswith("every row accounted for")


def test_report_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small = tmp_path / "small.parquet"
    shutil.copy(ROWS / "cartpole-v1-rows-00000.parquet", small)
    code, printed, _ = run(capsys, "report", small, "--out", tmp_path / "r.html", "--json")
    assert code == 0 and len(printed.splitlines()) == 1
    done: dict[str, Any] = json.loads(printed)
    assert done["out"] == str(tmp_path / "r.html") and (tmp_path / "r.html").is_file()
    assert done["episodes"] == done["summary"]["episodes"] > 0
    assert "episode_return" in done["charts"] and isinstance(done["anomalies"], list)
    code, said, _ = run(capsys, "report", small, "--out", tmp_path / "r2.html")
    lines = said.splitlines()
    assert code == 0 and lines[0].startswith(f"wrote {tmp_path / 'r2.html'} ({done['episodes']} "
                                             "episodes, ")  # fmt: skip
    assert len(lines) == (2 if done["anomalies"] else 1)


# ------------------------------------------------------------------------------ inspect
def test_inspect_describes_the_samples_process_wrote(
    outputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    out = outputs["samples"]
    code, printed, _ = run(capsys, "inspect", out, "--json")
    d = json.loads(printed)
    assert code == 0 and d == op.inspect(out)  # the API gives what the CLI prints
    assert (d["kind"], d["files"], d["rows"], d["episodes"]) == ("samples", 1, 5000, 222)
    assert d["columns"]["obs"] == {"shape": [4], "dtype": "float32"}
    assert set(d["n_step"]) == {"1", "2", "3"} and sum(d["n_step"].values()) == 5000
    assert (d["sample"]["n_step"], d["sample"]["gamma"]) == (3, 0.99)
    assert d["modules"] == {"default_policy": 5000}
    assert d["job"]["command"] == "process" and d["job"]["input_rows"] == 5000
    assert d["stats"]["rows_balance"] and d["stats"]["samples_written"] == 5000
    for other in (out / "samples", out / "_manifest.json"):  # the same folder, however named
        assert {**op.inspect(other), "path": str(out)} == d
    code, said, _ = run(capsys, "inspect", out)
    assert code == 0 and "5,000 samples from 222 episodes" in said
    assert "n_step      1: " in said and "gamma 0.99" in said and "job         process " in said
    for argv in (["process", out, "--out", out.parent / "again"], ["convert", out, "--to", "rows",
                 "--out", out.parent / "c"]):  # fmt: skip
        code, _, err = run(capsys, *argv)  # still refused as input, in one line
        assert code == 2 and len(err.strip().splitlines()) == 1 and "inspect describes" in err


@pytest.mark.parametrize("name", ["rows", "episodes", "minari"])
def test_inspect_reads_a_converted_folder_and_names_its_job(
    outputs: dict[str, Path], name: str
) -> None:
    d = op.inspect(outputs[name])
    assert d["kind"] == "dataset" and d["episodes"] == 222 and d["rows_balance"]
    assert (d["job"]["command"], d["job"]["to"]) == ("convert", name)
    assert d["job"]["files_dir"] == ("" if name == "minari" else name)


# ------------------------------------------------------------------------------ other readers
def test_every_data_folder_opens_in_other_readers(outputs: dict[str, Path]) -> None:
    """pyarrow, pandas, polars and DuckDB (where installed) open each data folder as it is."""
    import pandas as pd

    folders = {
        "samples": (outputs["samples"] / "samples", 5000),
        "rows": (outputs["rows"] / "rows", 5000),
        "episodes": (outputs["episodes"] / "episodes", 222),
    }
    for name, (folder, rows) in folders.items():
        assert {p.suffix for p in folder.iterdir()} == {".parquet"}, name  # data files only
        assert pq.read_table(folder).num_rows == rows, name
        assert len(pd.read_parquet(folder)) == rows, name
    polars = _optional("polars")
    duckdb = _optional("duckdb")
    for name, (folder, rows) in folders.items():
        if polars is not None:
            assert polars.read_parquet(folder).height == rows, name
        if duckdb is not None:
            got = duckdb.sql(f"SELECT count(*) FROM '{folder}/*.parquet'").fetchone()
            assert got == (rows,), name


@pytest.mark.ray
def test_ray_data_opens_a_data_folder(outputs: dict[str, Path], ray_local: Any) -> None:
    """One read (a Ray Data job costs seconds): the folder convert wrote, beside stats.json and
    the manifest before it had a data folder of its own."""
    ds = ray_local.data.read_parquet(str(outputs["rows"] / "rows"))
    assert ds.count() == 5000 and "eps_id" in ds.schema().names


def _optional(module: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        return None


# ------------------------------------------------------------------------------ the API
def test_record_is_the_cli_s(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    got = op.record("CartPole-v1", 60, tmp_path / "a", seed=3)
    code, printed, _ = run(capsys, "record", "CartPole-v1", "--steps", "60", "--seed", "3",
                           "--out", tmp_path / "b", "--json")  # fmt: skip
    cli = json.loads(printed)
    assert code == 0 and got["steps"] == cli["steps"] == 60 and got["episodes"] == cli["episodes"]
    a, b = (pq.read_table(f) for f in (got["files"][0], cli["files"][0]))
    assert a.equals(b)


def test_the_api_takes_store_uris(outputs: dict[str, Path], s3_store: Any) -> None:
    """What process writes to s3:// reads back through op.read_samples and op.inspect (a
    pathlib.Path made 's3://b/out' into 's3:/b/out')."""
    uri = f"{s3_store}/out"
    stats = op.run_pipeline(ROWS, {"n_step": 3}, out_dir=uri, engine="local").stats
    cols = op.read_samples(uri, columns=["obs", "n_step"])
    assert cols["obs"].shape == (stats["samples_written"], 4)
    local = op.read_samples(outputs["samples"], columns=["obs", "n_step"])
    assert sorted(cols["n_step"].tolist()) == sorted(local["n_step"].tolist())
    d = op.inspect(uri)
    assert d["kind"] == "samples" and d["rows"] == stats["samples_written"] and d["episodes"] == 222
    with pytest.raises(FileNotFoundError, match=f"'{s3_store}/nothing'"):
        op.read_samples(f"{s3_store}/nothing")
