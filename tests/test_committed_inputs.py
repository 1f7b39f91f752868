"""Every command reads the folder another command wrote (issue 19).

A folder holding ``_manifest.json`` is read by its manifest: exactly the files it lists, never
``stats.json``, the manifest, quarantine output or stray files; a ``process`` output (samples) is
refused in one line. Symlinked folders are followed, loops refused; a Parquet file of zero rows is
an empty partition in every command. Real files, real CLI runs (``cli.main``).
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

from offline_prelearner.cli import main
from offline_prelearner.config import PreLearnerConfig
from offline_prelearner.errors import DataError, UnsupportedFormatError
from offline_prelearner.io.manifest import MANIFEST_FILE, verify_checksums
from offline_prelearner.io.sources import check_one_format, detect_format, expand_paths
from offline_prelearner.jobs.batch.plan import plan_units
from offline_prelearner.jobs.commit import iter_manifest_files
from offline_prelearner.jobs.file_batches import iter_file_batches, read_groups

ROWS = REPO / "datasets" / "cartpole-v1" / "rows"
OLD_STACK = "cartpole-v1_old_stack_json_uncompressed.json"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def process(capsys: pytest.CaptureFixture[str], src: Path, out: Path, *argv: str) -> dict[str, Any]:
    """``process --engine local``; its ``stats.json`` (which holds ``per_file``)."""
    run_json(capsys, "process", str(src), "--out", str(out), "--engine", "local", *argv)
    return json.loads((out / "stats.json").read_text())


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one line a refused command prints (exit 2, no traceback)."""
    code, _, err = run(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _rel(files: list[str], root: Path) -> list[str]:
    return [Path(f).relative_to(root).as_posix() for f in files]


def _write(path: Path, rows: int = 1, **cols: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(cols or {"x": list(range(rows))}), path)
    return path


def _manifest(folder: Path, names: list[str], files_dir: str = "", **extra: Any) -> None:
    """A convert-like manifest listing ``names`` with their sizes."""
    base = folder / files_dir if files_dir else folder
    files = [{"name": n, "rows": 1, "bytes": (base / n).stat().st_size} for n in names]
    doc = {"complete": True, "files": files, "files_dir": files_dir, **extra}
    (folder / MANIFEST_FILE).write_text(json.dumps(doc))


@pytest.fixture
def committed(tmp_path: Path) -> Path:
    """A committed folder with stray files beside the listed ones."""
    out = tmp_path / "conv"
    for name in ("rows-00000.parquet", "rows-00001.parquet", "sub/rows-00002.parquet"):
        _write(out / name)
    _manifest(out, ["rows-00000.parquet", "rows-00001.parquet", "sub/rows-00002.parquet"])
    (out / "stats.json").write_text('{"rows_in": 3}\n')
    _write(out / "rows-00000 copy.parquet")  # a stray copy: not listed, not data
    _write(out / "quarantine" / "quarantine.parquet")
    return out


# ================================================================ the listing (no CLI)
def test_a_committed_folder_gives_exactly_what_its_manifest_lists(committed: Path) -> None:
    listed = ["rows-00000.parquet", "rows-00001.parquet", "sub/rows-00002.parquet"]
    assert _rel(expand_paths(committed), committed) == listed
    assert _rel(expand_paths(committed / MANIFEST_FILE), committed) == listed  # the manifest
    assert _rel(expand_paths(str(committed / "*")), committed) == listed  # a glob over it
    assert _rel(expand_paths(str(committed / "rows-*.parquet")), committed) == listed[:2]
    assert _rel(expand_paths(committed / "sub"), committed) == listed[2:]  # a folder inside
    assert [str(p) for p in iter_manifest_files(committed)] == expand_paths(committed)


def test_a_committed_folder_inside_a_larger_input_gives_only_its_listed_files(
    tmp_path: Path, committed: Path
) -> None:
    data = tmp_path / "data"
    shutil.move(committed, data / "run1")
    _write(data / "loose.parquet")
    _write(data / "run2" / "a.parquet")
    assert _rel(expand_paths(data), data) == [
        "loose.parquet",
        "run1/rows-00000.parquet",
        "run1/rows-00001.parquet",
        "run1/sub/rows-00002.parquet",
        "run2/a.parquet",
    ]


def test_a_file_the_manifest_does_not_list_is_refused_when_named(committed: Path) -> None:
    for name in ("stats.json", "rows-00000 copy.parquet", "quarantine/quarantine.parquet"):
        with pytest.raises(DataError, match="does not list it") as ei:
            expand_paths(committed / name)
        assert ei.value.where.file == str(committed / name)
    assert expand_paths(committed / "rows-00001.parquet") == [str(committed / "rows-00001.parquet")]


def test_a_listed_file_missing_or_of_another_size_is_an_error_naming_it(committed: Path) -> None:
    gone = committed / "rows-00001.parquet"
    gone.rename(committed / "elsewhere.parquet")
    with pytest.raises(FileNotFoundError, match=r"rows-00001\.parquet.*_manifest\.json"):
        expand_paths(committed)
    (committed / "elsewhere.parquet").rename(gone)
    with open(gone, "ab") as fh:
        fh.write(b"\0")
    for path in (committed, gone, str(committed / "*.parquet")):  # folder, named file, glob
        with pytest.raises(DataError, match="bytes") as ei:
            expand_paths(path)
        assert ei.value.where.file == str(gone) and ei.value.reason == "manifest_mismatch"
    # A glob that does not match the changed file does not check it.
    assert _rel(expand_paths(str(committed / "rows-00000.*")), committed) == ["rows-00000.parquet"]


def test_checksums_are_checked_on_demand_only(tmp_path: Path) -> None:
    """Reading checks sizes (a stat per file); a same-size change is what verify_checksums
    is for (it reads every byte)."""
    out = tmp_path / "c"
    f = _write(out / "a.parquet", rows=4)
    _manifest(out, ["a.parquet"])
    doc = json.loads((out / MANIFEST_FILE).read_text())
    import hashlib

    doc["files"][0]["sha256"] = hashlib.sha256(f.read_bytes()).hexdigest()
    (out / MANIFEST_FILE).write_text(json.dumps(doc))
    assert verify_checksums(out) == [str(f)]
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    assert expand_paths(out) == [str(f)]  # same size: an ordinary read takes it
    with pytest.raises(DataError, match="sha256") as ei:
        verify_checksums(out)
    assert ei.value.where.file == str(f)


@pytest.mark.parametrize(
    ("manifest", "match"),
    [
        ("{not json", "is not JSON"),
        ('{"complete": true}', "no 'files' list"),
        ('{"files": [{"name": "../outside.parquet"}]}', "not a file name inside"),
        ('{"files": [], "files_dir": "/abs"}', "not a folder inside"),
    ],
)
def test_a_broken_manifest_is_one_error_naming_it(
    tmp_path: Path, manifest: str, match: str
) -> None:
    _write(tmp_path / "outside.parquet")
    _write(tmp_path / "c" / "a.parquet")
    (tmp_path / "c" / MANIFEST_FILE).write_text(manifest)
    with pytest.raises(DataError, match=match) as ei:
        expand_paths(tmp_path / "c")
    assert ei.value.where.file == str(tmp_path / "c" / MANIFEST_FILE)


def test_another_tools_manifest_above_the_input_is_not_obeyed(tmp_path: Path) -> None:
    """A ``_manifest.json`` in an ancestor folder that is not a job's (another tool's file of
    that name) says nothing about the input below it; one in the input's own folder does."""
    (tmp_path / MANIFEST_FILE).write_text('{"version": 3, "shards": ["x"]}')
    data = _write(tmp_path / "data" / "a.parquet").parent
    assert _rel(expand_paths(data), tmp_path) == ["data/a.parquet"]
    assert _rel(expand_paths(data / "a.parquet"), tmp_path) == ["data/a.parquet"]
    assert _rel(expand_paths(str(data / "*.parquet")), tmp_path) == ["data/a.parquet"]
    with pytest.raises(DataError, match="not a job manifest"):
        expand_paths(tmp_path)


def test_a_process_output_is_refused_however_it_is_named(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _write(out / "samples" / "part-00000-000.parquet")
    _manifest(out, ["part-00000-000.parquet"], files_dir="samples")
    legacy = json.loads((out / MANIFEST_FILE).read_text())
    del legacy["files_dir"]  # manifests written before "content" and "files_dir": samples too
    (tmp_path / "old").mkdir()
    shutil.copytree(out / "samples", tmp_path / "old" / "samples")
    (tmp_path / "old" / MANIFEST_FILE).write_text(json.dumps(legacy))
    for path in (out, out / "samples", out / "samples" / "part-00000-000.parquet",
                 str(out / "samples" / "*.parquet"), tmp_path / "old", tmp_path):  # fmt: skip
        with pytest.raises(UnsupportedFormatError, match="samples 'process' wrote"):
            expand_paths(path)


def test_symlinked_folders_are_followed_in_name_order(tmp_path: Path) -> None:
    real = tmp_path / "real"
    _write(real / "b.parquet")
    _write(real / "a.parquet")
    data = tmp_path / "data"
    _write(data / "z.parquet")
    (data / "linked").symlink_to(real, target_is_directory=True)
    assert _rel(expand_paths(data), data) == ["linked/a.parquet", "linked/b.parquet", "z.parquet"]


@pytest.mark.parametrize("target", ["..", ".", "self"])
def test_a_symlink_loop_is_refused_naming_the_link(tmp_path: Path, target: str) -> None:
    data = tmp_path / "data"
    _write(data / "sub" / "a.parquet")
    link = data / "sub" / "loop"
    link.symlink_to("loop" if target == "self" else target)
    with pytest.raises(DataError, match="symlink loop") as ei:
        expand_paths(data)
    assert ei.value.where.file == str(link)


def test_hidden_and_underscore_folders_are_not_data(tmp_path: Path) -> None:
    """As pyarrow and Spark have it: a job's staging folder, ``_temporary/``... are skipped."""
    _write(tmp_path / "a.parquet")
    _write(tmp_path / ".out.staging" / "samples" / "part-0.parquet")
    _write(tmp_path / "_temporary" / "0" / "part-0.parquet")
    assert _rel(expand_paths(tmp_path), tmp_path) == ["a.parquet"]


def test_an_empty_partition_says_nothing_about_the_format(tmp_path: Path) -> None:
    """Spark writes a file with no columns at all for an empty partition; the files holding
    rows say the format, and the empty one is no second format."""
    empty = tmp_path / "000-empty.parquet"
    pq.write_table(pa.table({}), empty)
    eps = _write(tmp_path / "eps.parquet", item=pa.array([b"\x80"], pa.binary()))
    assert detect_format([str(empty), str(eps)]) == "episodes"
    check_one_format([str(empty), str(eps)])


def test_an_empty_partition_in_the_learner_stream_file_groups(tmp_path: Path) -> None:
    paths = []
    for i, n in enumerate([300, 0, 500, 0]):
        p = tmp_path / f"f{i}.parquet"
        pq.write_table(pa.table({"i": pa.array(np.arange(n), pa.int64())}), p)
        paths.append(str(p))
    got = [b.num_rows for b, _ in iter_file_batches(paths, 400)]
    assert sum(got) == 800
    assert [p for g in read_groups(paths, 400) for p in g] == paths


def test_planning_takes_columns_from_the_first_file_with_rows(tmp_path: Path) -> None:
    """An empty partition first must not hide the episode id column (else episodes cut
    across files would not be joined)."""
    pq.write_table(pa.table({}), tmp_path / "000.parquet")
    shutil.copy(ROWS / "cartpole-v1-rows-00000.parquet", tmp_path / "001.parquet")
    plan = plan_units(expand_paths(tmp_path), PreLearnerConfig().with_updates({"format": "rows"}))
    assert plan.key_columns and plan.files[0].rows == 0


def test_listing_2000_files_stays_cheap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk is one scandir per folder and no stat per file (2,000 files list in ~2 ms, ~22 ms
    with the rglob it replaced: benchmarks/bench_planning.py times it); counted here, the work
    does not depend on how loaded the machine is."""
    import os

    table = pa.table({"x": [1]})
    for d in range(4):
        (tmp_path / f"d{d}").mkdir()
        for i in range(500):
            pq.write_table(table, tmp_path / f"d{d}" / f"f{i:04d}.parquet")
    calls = {"scandir": 0, "stat": 0}
    scandir, stat = os.scandir, os.stat

    def counted_scandir(*args: Any, **kwargs: Any) -> Any:
        calls["scandir"] += 1
        return scandir(*args, **kwargs)

    def counted_stat(*args: Any, **kwargs: Any) -> Any:
        calls["stat"] += 1
        return stat(*args, **kwargs)

    monkeypatch.setattr(os, "scandir", counted_scandir)  # the real calls, counted
    monkeypatch.setattr(os, "stat", counted_stat)
    files = expand_paths(tmp_path)
    monkeypatch.undo()
    assert len(files) == 2000
    assert calls["scandir"] == 5 and calls["stat"] < 50, calls  # 5 folders; not one per file


# ================================================================ commands on each other's output
def test_convert_rows_then_process_and_inspect_read_the_committed_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conv = tmp_path / "conv"
    stats = run_json(capsys, "convert", str(ROWS), "--to", "rows", "--out", str(conv))
    assert (conv / "stats.json").is_file()
    assert json.loads((conv / MANIFEST_FILE).read_text())["content"] == "dataset"
    _write(conv / "stray.parquet", bogus=[1])  # beside the manifest: ignored
    got = process(capsys, conv, tmp_path / "p")
    assert got["rows_in"] == stats["rows_in"] == 5000 and got["files_read"] == 5
    assert all("stray" not in f["file"] and "stats" not in f["file"] for f in got["per_file"])
    info = run_json(capsys, "inspect", str(conv))
    assert info["rows"] == 5000 and info["episodes"] == 222 and info["files"] == 5


def test_convert_fast_layout_then_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fast = tmp_path / "fast"
    run_json(capsys, "convert", str(ROWS), "--to", "rows", "--layout", "fast", "--out", str(fast))
    got = process(capsys, fast, tmp_path / "p")
    assert got["rows_in"] == 5000 and got["episodes_kept"] == 222


@pytest.mark.parametrize("to", ["rows", "episodes"])
def test_old_stack_convert_then_process(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], to: str
) -> None:
    conv = tmp_path / "conv"
    stats = run_json(
        capsys, "convert", str(shared_data / OLD_STACK), "--to", to, "--out", str(conv)
    )
    got = process(capsys, conv, tmp_path / "p")
    assert got["rows_balance"] and got["episodes_kept"] == stats["episodes_written"] > 0
    assert [Path(f["file"]).name for f in got["per_file"]] == [
        Path(f).name for f in stats["files_written"]
    ]


def test_process_output_is_refused_by_every_command_but_inspect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p"
    process(capsys, ROWS, out)
    doc = json.loads((out / MANIFEST_FILE).read_text())
    assert (doc["content"], doc["files_dir"]) == ("samples", "samples")
    for argv in (
        ("process", str(out), "--out", str(tmp_path / "p2")),
        ("process", str(out / "samples"), "--out", str(tmp_path / "p3")),
        ("convert", str(out), "--to", "rows", "--out", str(tmp_path / "c")),
        ("report", str(out), "--out", str(tmp_path / "r.html")),
    ):
        line = refused(capsys, *argv)
        assert "samples 'process' wrote" in line and repr(str(out)) in line, line
    assert not (tmp_path / "p2").exists() and not (tmp_path / "r.html").exists()
    # inspect describes them (what a job produced), without reading them as experience
    assert main(["inspect", str(out), "--json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["kind"] == "samples" and described["rows"] == doc["samples_written"]


def test_a_missing_listed_file_is_one_line_naming_it(
    committed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (committed / "rows-00001.parquet").unlink()
    line = refused(capsys, "inspect", str(committed))
    assert "rows-00001.parquet" in line and "listed" in line


def test_symlinked_folder_and_loop_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "rows").symlink_to(ROWS, target_is_directory=True)
    assert run_json(capsys, "inspect", str(data))["rows"] == 5000
    (data / "loop").symlink_to(data, target_is_directory=True)
    line = refused(capsys, "process", str(data), "--out", str(tmp_path / "o"))
    assert "symlink loop" in line and str(data / "loop") in line
    assert "--on-invalid" not in line  # no policy skips a listing refusal: no such hint


# ================================================================ zero-row Parquet, every command
@pytest.fixture
def with_empty(tmp_path: Path) -> Path:
    """Two shipped row files and two empty partitions (one with the schema, one with none)."""
    data = tmp_path / "data"
    data.mkdir()
    for n in (0, 1):
        shutil.copy(ROWS / f"cartpole-v1-rows-0000{n}.parquet", data / f"part-{n}.parquet")
    schema = pq.read_schema(ROWS / "cartpole-v1-rows-00000.parquet")
    pq.write_table(schema.empty_table(), data / "part-0a.parquet")
    pq.write_table(pa.table({}), data / "part-9.parquet")
    return data


def _per_file(stats: dict[str, Any]) -> dict[str, tuple[int, Any]]:
    return {Path(f["file"]).name: (f["rows_read"], f["error"]) for f in stats["per_file"]}


EMPTY = {"part-0a.parquet": (0, None), "part-9.parquet": (0, None)}


def test_zero_row_parquet_in_process_inspect_and_convert(
    with_empty: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    got = process(capsys, with_empty, tmp_path / "p", "--on-invalid", "raise")
    assert got["rows_in"] == 2000 and _per_file(got).items() >= EMPTY.items()
    info = run_json(capsys, "inspect", str(with_empty), "--on-invalid", "raise")
    assert info["rows"] == 2000 and not info["files_unreadable"]
    assert _per_file(info).items() >= EMPTY.items()
    conv = tmp_path / "conv"
    stats = run_json(capsys, "convert", str(with_empty), "--to", "rows", "--out", str(conv))
    assert stats["rows_in"] == 2000 and stats["files_in"] == 4
    again = process(capsys, conv, tmp_path / "p2")
    assert again["rows_in"] == 2000


def test_zero_row_parquet_among_old_stack_files_in_convert(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "old"
    data.mkdir()
    shutil.copy(shared_data / OLD_STACK, data / "a.json")
    pq.write_table(pa.table({}), data / "b-empty.parquet")
    stats = run_json(capsys, "convert", str(data), "--to", "rows", "--out", str(tmp_path / "c"),
                     "--on-invalid", "raise")  # fmt: skip
    assert stats["episodes_written"] > 0 and not stats["files_unreadable"]


@pytest.mark.ray
def test_zero_row_parquet_and_a_committed_folder_on_the_ray_engine_and_learner_stream(
    ray_local: Any, with_empty: Path, tmp_path: Path
) -> None:
    from offline_prelearner.jobs.batch.batch_job import run_pipeline
    from offline_prelearner.jobs.stream.learner_stream import iter_learner_batches

    (with_empty / "stats.json").write_text("{}")  # metadata of a committed folder: not data
    _manifest(with_empty, sorted(p.name for p in with_empty.glob("*.parquet")))
    cfg = PreLearnerConfig().with_updates({"n_step": 3})
    outs = {}
    for engine in ("local", "ray"):
        res = run_pipeline(with_empty, cfg, out_dir=tmp_path / engine, engine=engine)
        assert res.stats["rows_in"] == 2000 and _per_file(res.stats).items() >= EMPTY.items()
        outs[engine] = json.loads((tmp_path / engine / MANIFEST_FILE).read_text())["files"]
    assert outs["local"] == outs["ray"]
    rows = sum(len(b["default_policy"]) for b in iter_learner_batches(with_empty, cfg))
    assert rows > 0
