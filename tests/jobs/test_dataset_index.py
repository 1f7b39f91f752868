"""The dataset index (jobs/batch/index.py): written by ``offline-prelearner index`` for a local
folder or a store's prefix, read back into the plan a scan gives, never trusted past the
listing (a file rewritten at the same size, added or removed is scanned afresh, with one
warning), refused in one line when it is not an index; ``process`` commits the same bytes
with and without it."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO
from plan_reference import serial_plan

from offline_prelearner import run_pipeline
from offline_prelearner.cli.app import main
from offline_prelearner.config import PreLearnerConfig
from offline_prelearner.errors import DataError, StaleIndexWarning
from offline_prelearner.io.sources import expand_paths
from offline_prelearner.jobs.batch import index as I
from offline_prelearner.jobs.batch import scan as S
from offline_prelearner.jobs.batch.planner import plan_job
from offline_prelearner.jobs.batch.scan import FileScan, InputFile, ScanSpec, ThreadScanner
from offline_prelearner.jobs.commit import input_fingerprint

CONFIG = PreLearnerConfig().with_updates({"format": "rows"})
ROWS = REPO / "datasets/cartpole-v1/rows"


def small_files(folder: Path, n: int = 40, per: int = 20) -> list[str]:
    """``n`` RLlib-layout CartPole files of ``per`` rows, cut from the repo's dataset in row
    order (its episodes cross files)."""
    table = pq.read_table(sorted(ROWS.glob("*.parquet"))[0])
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        pq.write_table(table.slice(i * per, per), folder / f"part-{i:05d}.parquet")
    return sorted(str(p) for p in folder.glob("*.parquet"))


def test_an_index_plans_what_the_files_plan(tmp_path: Path) -> None:
    files = small_files(tmp_path / "d")
    done = I.write_index(tmp_path / "d")
    assert (done.files, done.rows) == (40, 800) and done.index.endswith("_index.parquet")
    assert expand_paths(str(tmp_path / "d")) == files  # the index is not a data file
    spec = ScanSpec.of(CONFIG)
    scans = I.scans_from_index(str(tmp_path / "d"), files, spec, ThreadScanner())
    direct = ThreadScanner().scan(files, spec)
    assert scans is not None
    assert [replace(s, bound=None) for s in scans.files] == list(direct.files)
    for a, b in zip(scans.files, direct.files, strict=True):
        assert a.keys is not None and b.keys is not None and a.keys.equals(b.keys)
        assert a.last is not None and b.last is not None and list(a.last) == list(b.last)
    plan, fps = plan_job(str(tmp_path / "d"), files, CONFIG)
    assert plan == serial_plan(files, CONFIG)
    assert fps == tuple(input_fingerprint(f) for f in files)
    assert any(p.keep for u in plan.units for p in u.parts) or len(plan.units) == 1


def test_a_stale_index_is_scanned_afresh_where_stale(tmp_path: Path) -> None:
    d = tmp_path / "d"
    files = small_files(d, 12, 20)
    I.write_index(d)
    os.environ["OFFLINE_PRELEARNER_UNIT_MIN_ROWS"] = "40"
    try:
        # A file rewritten at the same size (its own bytes again), one added, one gone.
        data = Path(files[3]).read_bytes()
        os.utime(files[3], ns=(1, 1))
        Path(files[3]).write_bytes(data)
        pq.write_table(pq.read_table(files[3]), d / "part-00099.parquet")
        os.unlink(files[5])
        now = expand_paths(str(d))
        with pytest.warns(StaleIndexWarning, match=r"1 file\(s\) changed, 1 added and 1 gone"):
            plan, fps = plan_job(str(d), now, CONFIG)
        assert plan == serial_plan(now, CONFIG)
        assert fps == tuple(input_fingerprint(f) for f in now)
    finally:
        del os.environ["OFFLINE_PRELEARNER_UNIT_MIN_ROWS"]


def test_a_large_index_passes_the_decode_limits(tmp_path: Path) -> None:
    n = 30_000
    scans = [
        FileScan(
            InputFile(str(tmp_path / f"part-{i:06d}.parquet"), 4000 + i, 10**18 + i, 20),
            "footer:" + "ab" * 32,
            "cd" * 16,
            1800,
            False,
            ("eps_id", "agent_id"),
            pa.array([f"{i:032x}", f"{i + 1:032x}"]),
            np.array([9, 19]),
            (5000, 5000),
        )
        for i in range(n)
    ]
    (tmp_path / I.INDEX_FILE).write_bytes(I._encode(I._table(str(tmp_path), scans)))
    table = I.read_index(str(tmp_path / I.INDEX_FILE))
    assert table.num_rows == n and table.column("keys")[n - 1].as_py()[1] == f"{n:032x}"


@pytest.mark.parametrize("kind", ["garbage", "other_table", "too_large", "bad_rows"])
def test_a_broken_index_is_one_line_naming_it(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "d"
    files = small_files(d, 4)
    index = d / I.INDEX_FILE
    if kind == "garbage":
        index.write_bytes(b"PAR1" + os.urandom(200) + b"PAR1")
    elif kind == "other_table":
        pq.write_table(pa.table({"path": ["x"], "size": [1]}), index)
    else:
        I.write_index(d)
        if kind == "too_large":
            monkeypatch.setattr(I, "MAX_INDEX_BYTES", 100)
        else:
            table = pq.read_table(index)
            last = pa.array([[10_000]] * table.num_rows, pa.list_(pa.int64()))
            keys = pa.array([["x"]] * table.num_rows, pa.list_(pa.string()))
            table = table.set_column(10, "keys", keys).set_column(11, "last", last)
            pq.write_table(table, index)
    with pytest.raises(DataError) as err:
        plan_job(str(d), files, CONFIG)
    line = str(err.value)
    assert "\n" not in line and str(index) in line and "not a dataset index" in line


def test_the_index_command_on_a_folder_and_on_s3(
    tmp_path: Path, s3_store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    small_files(tmp_path / "d", 8)
    assert main(["index", str(tmp_path / "d")]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {tmp_path / 'd' / I.INDEX_FILE} (8 files")
    import pyarrow.fs as pafs

    from offline_prelearner.io.stores import locate

    loc = locate(s3_store)
    for f in sorted((tmp_path / "d").glob("*.parquet")):
        with loc.fs.open_output_stream(f"{loc.path}/{f.name}") as out:
            out.write(f.read_bytes())
    assert main(["index", s3_store, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["index"] == f"{s3_store}/{I.INDEX_FILE}" and (got["files"], got["rows"]) == (8, 160)
    files = expand_paths(s3_store)
    plan, fps = plan_job(s3_store, files, CONFIG)
    assert plan == serial_plan(files, CONFIG)
    assert fps == tuple(input_fingerprint(f) for f in files)
    info = loc.fs.get_file_info(f"{loc.path}/{I.INDEX_FILE}")
    assert info.type == pafs.FileType.File
    assert main(["index", f"{s3_store}/nothing-here"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_process_commits_the_same_bytes_with_and_without_an_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "d"
    small_files(d, 30)
    settings = {"seed": 3, "sample": {"sample_all": True}}
    os.environ["OFFLINE_PRELEARNER_UNIT_MIN_ROWS"] = "100"
    try:
        plain = run_pipeline(d, settings, out_dir=tmp_path / "a", engine="local")
        I.write_index(d)

        scan_file = S.scan_file

        def no_scan(path: str, spec: ScanSpec, listed: Any = None) -> Any:
            assert not path.startswith(str(d)), f"{path} was scanned: the index covers it"
            return scan_file(path, spec, listed)  # the output's own index, written after its commit

        monkeypatch.setattr(S, "scan_file", no_scan)
        indexed = run_pipeline(d, settings, out_dir=tmp_path / "b", engine="local")
    finally:
        del os.environ["OFFLINE_PRELEARNER_UNIT_MIN_ROWS"]
    assert len(plain.files_written) == len(indexed.files_written) > 1
    for a, b in zip(plain.files_written, indexed.files_written, strict=True):
        assert Path(a).name == Path(b).name and Path(a).read_bytes() == Path(b).read_bytes()
    # process writes the index of what it committed beside it (after the commit point)
    index = I.read_index(str(tmp_path / "b" / I.INDEX_FILE))
    assert index.column("path").to_pylist() == [
        f"samples/{Path(f).name}" for f in indexed.files_written
    ]
