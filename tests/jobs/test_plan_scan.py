"""The plan from one scan per file, many at once (jobs/batch/scan.py), against the serial plan
it replaced (plan_reference.py): the same units, parts, files and fingerprints, whether the
scans ran in threads, one after another, or as Ray tasks; refusals and errors as before."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from plan_reference import serial_plan

from offline_prelearner import run_pipeline
from offline_prelearner.config import DecodeLimits, PreLearnerConfig
from offline_prelearner.errors import DataError, UnsupportedFormatError
from offline_prelearner.io.sources import check_one_format
from offline_prelearner.jobs.batch.plan import plan_scans, plan_units
from offline_prelearner.jobs.batch.scan import RayScanner, ScanSpec, ThreadScanner
from offline_prelearner.jobs.commit import input_fingerprint

CONFIG = PreLearnerConfig().with_updates({"format": "rows"})
IDS = ["a", "b", "c", "10", "é", ""]
ROW = st.tuples(st.sampled_from(IDS), st.one_of(st.none(), st.integers(0, 2)))


def write_files(
    folder: Path, spread: list[list[tuple[str, int | None]]], agents: list[bool]
) -> list[str]:
    """One Parquet file per list of (eps_id, agent_id) rows; ``agents[i]``: file i has an
    agent_id column (files without one beside files with one: the plan's keys come from the
    first file that holds rows)."""
    paths = []
    for i, rows in enumerate(spread):
        cols: dict[str, pa.Array] = {
            "eps_id": pa.array([e for e, _ in rows], pa.string()),
            "obs": pa.array(np.arange(len(rows), dtype=np.float32)),
        }
        if agents[i % len(agents)]:
            cols["agent_id"] = pa.array([a for _, a in rows], pa.int64())
        path = folder / f"part-{i:05d}.parquet"
        pq.write_table(pa.table(cols), path, row_group_size=5)
        paths.append(str(path))
    return paths


@settings(max_examples=40, deadline=None)
@given(
    spread=st.lists(st.lists(ROW, max_size=12), min_size=1, max_size=7),
    agents=st.lists(st.booleans(), min_size=1, max_size=3),
    min_rows=st.integers(1, 12),
    workers=st.sampled_from([1, 3]),
)
def test_the_scanned_plan_is_the_serial_plan(
    spread: list[list[tuple[str, int | None]]], agents: list[bool], min_rows: int, workers: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        files = write_files(Path(tmp), spread, agents)
        scans = ThreadScanner(workers).scan(files, ScanSpec.of(CONFIG))
        assert plan_scans(scans, CONFIG, min_rows) == serial_plan(files, CONFIG, min_rows)
        assert [s.fingerprint for s in scans.files] == [input_fingerprint(f) for f in files]


def test_refusals_and_errors_are_the_serial_plans(tmp_path: Path) -> None:
    files = write_files(tmp_path, [[("a", None)] * 50, [("a", None), ("b", None)]], [False])
    limits = DecodeLimits(max_parquet_row_group_bytes=64)
    tight = replace(CONFIG, read=replace(CONFIG.read, limits=limits))
    with pytest.raises(DataError) as serial:
        serial_plan(files, tight, 1)
    with pytest.raises(DataError) as scanned:
        plan_units(files, tight, 1)
    assert str(scanned.value) == str(serial.value)
    skip = replace(tight, read=replace(tight.read, on_invalid="skip"))
    assert plan_units(files, skip, 1) == serial_plan(files, skip, 1)
    with pytest.raises(FileNotFoundError):
        plan_units([*files, str(tmp_path / "gone.parquet")], CONFIG, 1)


@pytest.mark.ray
def test_ray_tasks_plan_what_threads_plan(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    rng = np.random.default_rng(0)
    spread = [[(str(int(e)), None) for e in np.sort(rng.integers(0, 30, 15))] for _ in range(24)]
    files = write_files(tmp_path, spread, [False])
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        scans = RayScanner(batch=5).scan(files, ScanSpec.of(CONFIG))
    finally:
        if started:
            ray.shutdown()
    local = ThreadScanner().scan(files, ScanSpec.of(CONFIG))
    assert scans.files == local.files
    assert plan_scans(scans, CONFIG, 40) == plan_units(files, CONFIG, 40)
    assert plan_scans(scans, CONFIG, 40) == serial_plan(files, CONFIG, 40)


@pytest.mark.parametrize("fmt", ["auto", "rows"])
def test_mixed_formats_are_refused_from_the_scan_as_before(tmp_path: Path, fmt: str) -> None:
    files = write_files(tmp_path, [[("a", None)] * 3, [("b", None)] * 3], [False])
    episodes = tmp_path / "part-00002.parquet"  # msgpack episodes: an 'item' binary column
    pq.write_table(pa.table({"item": pa.array([b"x"], pa.binary())}), episodes)
    files.append(str(episodes))
    with pytest.raises(UnsupportedFormatError) as before:
        check_one_format(files)
    with pytest.raises(UnsupportedFormatError) as now:
        run_pipeline(str(tmp_path), {"format": fmt}, engine="local")
    assert str(now.value) == str(before.value) and "mixed formats" in str(now.value)


def test_a_stores_listing_gives_the_scan_its_sizes_once(tmp_path: Path, s3_store: str) -> None:
    """The listing that named a store's files told their sizes and mtimes: the scan takes them
    from it instead of asking the store for each file again, once, and scans what asking gives;
    a later expansion forgets them (a file named later is never given an old listing's size)."""
    from offline_prelearner.io.sources import expand_paths
    from offline_prelearner.io.stores import file_stat, locate, take_listed

    local = write_files(tmp_path, [[("a", None)] * 7, [("a", None), ("b", None)], []], [False])
    fs_loc = locate(s3_store)
    for f in local:
        with fs_loc.fs.open_output_stream(f"{fs_loc.path}/{Path(f).name}") as out:
            out.write(Path(f).read_bytes())
    files = expand_paths(s3_store)
    asked = [file_stat(f) for f in files]
    listed = [take_listed(f) for f in files]
    assert [(s.st_size, s.st_mtime_ns) for s in listed if s] == [
        (s.st_size, s.st_mtime_ns) for s in asked
    ]
    assert [take_listed(f) for f in files] == [None] * 3  # taken once
    spec = ScanSpec.of(CONFIG)
    with_listing = ThreadScanner(2).scan(files, spec, listed)
    without = ThreadScanner(2).scan(files, spec, [None] * 3)
    assert with_listing.files == without.files
    assert plan_scans(with_listing, CONFIG, 1) == serial_plan(files, CONFIG, 1)
    expand_paths(s3_store)
    expand_paths(files[0])  # a new expansion: the folder's listing is forgotten
    assert take_listed(files[1]) is None
