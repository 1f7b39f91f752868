"""Regressions for what the job layer's review found, each on real files (and SeaweedFS for the
store cases, ``s3_store``; skipped, with the reason, where it cannot start):

* ``convert --out s3://`` commits a ``stats.json`` naming the store (``out_dir``,
  ``quarantine_file``, ``files_written``), not the local folder it converted into first;
* ``iter_manifest_files`` of a store output yields its files' URIs (``s3://b/k``, not
  ``s3:/b/k``), each readable;
* ``prefetch(depth=0)`` is refused at the call (its queue would have no bound);
* ``convert --on-invalid skip`` passes over an unreadable Parquet file and lists it, as
  ``process`` does (it failed, exit 2).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import REPO
from corpus import make_corpus as mc

from offline_prelearner.config import ReadConfig
from offline_prelearner.io.stores import locate
from offline_prelearner.jobs.commit import iter_manifest_files
from offline_prelearner.jobs.convert.config import ConvertConfig
from offline_prelearner.jobs.convert.path import convert
from offline_prelearner.jobs.file_batches import prefetch

ROWS = REPO / "datasets" / "cartpole-v1" / "rows"
EPISODES = REPO / "datasets" / "cartpole-v1" / "episodes"


def _read(on_invalid: str) -> ReadConfig:
    return ReadConfig(format="auto", on_invalid=on_invalid)  # type: ignore[arg-type]


def test_convert_into_a_store_commits_stats_naming_the_store(
    s3_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))  # the local twins' folder
    (tmp_path / "gap").mkdir()
    src = mc.t_gap(tmp_path / "gap")
    out = f"{s3_store}/episodes"
    config = ConvertConfig(to="episodes", read=_read("quarantine"))
    returned = convert(str(src), out, config)
    root = locate(out)
    stats = json.loads(root.join("stats.json").read_bytes())
    manifest = json.loads(root.join("_manifest.json").read_bytes())
    (q,) = manifest["quarantine"]
    assert stats["out_dir"] == out
    assert stats["quarantine_file"] == f"{out}/{q['name']}"
    under = manifest["files_dir"]  # files_written: paths under the output
    assert stats["files_written"] == [f"{under}/{f['name']}" for f in manifest["files"]]
    assert str(cache) not in json.dumps(stats)  # nothing names the local folder
    with locate(stats["quarantine_file"]).open_input_file() as fh:
        assert pq.read_table(fh).num_rows == sum(stats["rows_rejected"].values())
    assert returned == stats  # what convert returns is what was committed


def test_convert_to_minari_on_a_store_names_the_store(
    s3_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = f"{s3_store}/minari"
    convert(str(EPISODES), out, ConvertConfig(to="minari", env_id="CartPole-v1"))
    stats = json.loads(locate(out).join("stats.json").read_bytes())
    manifest = json.loads(locate(out).join("_manifest.json").read_bytes())
    assert stats["out_dir"] == out
    under = manifest["files_dir"]  # Minari's fixed names, in a folder named by the job
    assert stats["files_written"] == [f"{under}/{f['name']}" for f in manifest["files"]]


def test_iter_manifest_files_of_a_store_output_yields_its_uris(
    s3_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = f"{s3_store}/rows"
    convert(str(EPISODES), out, ConvertConfig(to="rows"))
    manifest = json.loads(locate(out).join("_manifest.json").read_bytes())
    files = list(iter_manifest_files(out))
    assert files == [f"{out}/rows/{f['name']}" for f in manifest["files"]]
    rows = 0
    for uri in files:
        with locate(uri).open_input_file() as fh:
            rows += pq.read_table(fh).num_rows
    assert rows == sum(f["rows"] for f in manifest["files"]) > 0


def test_iter_manifest_files_of_a_local_output_yields_its_paths(tmp_path: Path) -> None:
    out = tmp_path / "rows"
    convert(str(EPISODES), str(out), ConvertConfig(to="rows"))
    manifest = json.loads((out / "_manifest.json").read_text())
    assert [str(p) for p in iter_manifest_files(out)] == [
        str(out / "rows" / f["name"]) for f in manifest["files"]
    ]


@pytest.mark.parametrize("depth", [0, -1])
def test_prefetch_refuses_a_depth_below_one_at_the_call(depth: int) -> None:
    pulled: list[int] = []

    def items() -> object:
        for i in range(3):
            pulled.append(i)
            yield i

    with pytest.raises(ValueError, match=f"depth must be at least 1, got {depth}"):
        prefetch(items(), depth=depth)  # type: ignore[arg-type]
    assert pulled == []  # no thread started, nothing read ahead
    assert list(prefetch(iter(range(3)), depth=1)) == [0, 1, 2]


def test_convert_on_invalid_skip_lists_an_unreadable_parquet_file(tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    good = sorted(EPISODES.glob("*.parquet"))[0]
    (src / "a.parquet").write_bytes(good.read_bytes())
    (src / "b.parquet").write_bytes(good.read_bytes()[:500])  # truncated: no footer
    out = tmp_path / "out"
    stats = convert(str(src), str(out), ConvertConfig(to="rows", read=_read("skip")))
    broken = str(src / "b.parquet")
    assert stats["files_unreadable"] == [broken]
    (entry,) = [p for p in stats["per_file"] if p["file"] == broken]
    assert entry["error"] == "cannot read the file" and entry["rows_read"] == 0
    assert stats["balanced"] and stats["rows_out"] == pq.read_metadata(good).num_rows
    written = json.loads((out / "stats.json").read_text())
    assert written["files_unreadable"] == [broken]

    with pytest.raises(Exception, match=r"b\.parquet"):  # under raise: one error naming it
        convert(str(src), str(tmp_path / "out2"), ConvertConfig(to="rows"))


def _corrupt_second_row_group(src: Path, dst: Path) -> tuple[int, int]:
    """``src``'s rows written in two row groups, the second's first data page header overwritten
    (the footer stays valid: the file's row count is known, its second group cannot be decoded).
    Returns the rows of the two groups."""
    table = pq.read_table(src)
    first = table.num_rows // 2
    pq.write_table(table, dst, row_group_size=first, compression="none")
    meta = pq.read_metadata(dst)
    assert meta.num_row_groups == 2
    at = meta.row_group(1).column(0).data_page_offset
    data = bytearray(dst.read_bytes())
    data[at : at + 16] = b"\xff" * 16
    dst.write_bytes(bytes(data))
    return first, table.num_rows - first


@pytest.mark.parametrize("on_invalid", ["skip", "quarantine"])
@pytest.mark.parametrize("batch_size", [100, None])
def test_a_parquet_file_corrupt_in_its_second_row_group_is_counted_once(
    tmp_path: Path, on_invalid: str, batch_size: int | None
) -> None:
    """In chunks of 100 rows the first row group is passed on before the second fails: those
    rows are kept and counted once, the file listed with an error naming the row it failed at;
    read whole, nothing of it is kept. Either way the job commits (it failed: the footers'
    rows did not match the rows read) and its ledger balances."""
    from offline_prelearner.jobs.batch.batch_job import run_pipeline

    src = tmp_path / "in"
    src.mkdir()
    shipped = sorted(ROWS.glob("*.parquet"))
    broken = src / "a.parquet"
    first, _ = _corrupt_second_row_group(shipped[0], broken)
    for f in shipped[1:3]:
        (src / f.name).write_bytes(f.read_bytes())
    good_rows = sum(pq.read_metadata(f).num_rows for f in shipped[1:3])
    out = tmp_path / "out"
    config: dict[str, object] = {"read": {"on_invalid": on_invalid}}
    if batch_size is not None:
        config["ray"] = {"batch_size": batch_size}
    run_pipeline(str(src), config, out_dir=out, engine="local")
    stats = json.loads((out / "stats.json").read_text())
    (entry,) = [e for e in stats["per_file"] if e["error"] is not None]
    assert entry["file"] == str(broken) and stats["files_rejected"] == 1
    kept = first // batch_size * batch_size if batch_size else 0  # whole chunks before it
    assert entry["rows_read"] == entry["rows_kept"] == kept
    if kept:
        assert f"its first {kept} rows were read" in entry["error"]
        assert f"row {kept}]" in entry["error"]
    assert stats["rows_in"] == good_rows + kept  # each row once
    rejected = sum(stats["rows_rejected"].values())
    assert stats["rows_in"] == stats["rows_kept"] + rejected + stats["rows_duplicate"]
    assert stats["rows_balance"]
    manifest = json.loads((out / "_manifest.json").read_text())
    samples = sum(pq.read_metadata(out / "samples" / f["name"]).num_rows for f in manifest["files"])
    assert samples == stats["samples_written"] > 0


def test_publish_uploads_a_file_the_manifest_does_not_list(s3_store: str, tmp_path: Path) -> None:
    """A committed local folder with a file the manifest does not list: it goes up under its
    name, with the same bytes (streamed in blocks: 16 KiB here, the path is the same)."""
    from offline_prelearner.jobs.store_commit import StoreStaging, publish

    local = tmp_path / "local"
    convert(str(EPISODES), str(local), ConvertConfig(to="rows"))
    (local / "notes").mkdir()
    extra = bytes(range(256)) * 64
    (local / "notes" / "extra.bin").write_bytes(extra)
    out = f"{s3_store}/pub"
    staging = StoreStaging(out, {})
    staging.acquire()
    stats = publish(str(local), staging)
    root = locate(out)
    assert root.join("notes", "extra.bin").read_bytes() == extra
    manifest = json.loads(root.join("_manifest.json").read_bytes())
    assert stats["out_dir"] == out and manifest["job_id"] in manifest["files"][0]["name"]
