"""The job commit's check of a staged file against its unit record (issue 24).

A unit hashes its files as it writes them and records each one's stat after the rename; the
commit re-hashes only a file whose stat changed. These jobs run for real (local engine, real
files) and change unit 0's staged sample file while unit 1 runs: rewritten in place with the
same size, renamed over with other bytes of the same size (both refused), and renamed over with
the very same bytes (a zombie retry of the unit: committed).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import to_table

from offline_prelearner.io.manifest import verify_checksums
from offline_prelearner.jobs.batch.batch_job import run_pipeline
from offline_prelearner.jobs.commit import STAGED_STAT
from offline_prelearner.jobs.ownership import staging_path
from offline_prelearner.prelearner import OfflinePreLearner

UNIT_MIN_ROWS_ENV = "OFFLINE_PRELEARNER_UNIT_MIN_ROWS"
FIRST = "part-00000-000.parquet"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 files of 1,000 rows, one truncated episode of 50 steps after another: 3 units."""
    folder = tmp_path_factory.mktemp("stat_check") / "data"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for k in range(3):
        n = 1000
        ids = np.array([f"{k}-{i // 50:04d}" for i in range(n)], dtype=object)
        obs = rng.normal(size=(n + 1, 4)).astype(np.float32)
        cols = {
            "eps_id": ids,
            "obs": obs[:-1],
            "actions": rng.integers(0, 2, n).astype(np.int64),
            "rewards": np.ones(n),
            "new_obs": obs[1:],
            "terminateds": np.zeros(n, dtype=bool),
            "truncateds": (np.arange(n) % 50) == 49,
            "t": (np.arange(n) % 50).astype(np.int64),
        }
        pq.write_table(to_table(cols, tensor="ray"), folder / f"rows-{k:05d}.parquet")
    return folder


def _flipped(path: Path) -> bytes:
    """The file's bytes with one byte in its middle changed (same size)."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    return bytes(data)


def _in_place(path: Path) -> None:
    data = _flipped(path)
    time.sleep(0.05)  # past the filesystem's timestamp tick of the unit's rename
    with open(path, "r+b") as fh:  # same inode, same size
        fh.write(data)


def _renamed_over(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.zombie")
    tmp.write_bytes(data)
    os.replace(tmp, path)  # a new inode under the same name


class _Changer(OfflinePreLearner):
    """Changes unit 0's staged sample file (``how``) once, when the next unit runs."""

    out: Path | None = None
    how: str = ""
    done: bool = False

    def __call__(self, batch: Any) -> Any:
        cls = type(self)
        first = staging_path(cls.out) / "samples" / FIRST if cls.out else None
        if first is not None and first.exists() and not cls.done:
            cls.done = True
            if cls.how == "in_place":
                _in_place(first)
            elif cls.how == "renamed_other":
                _renamed_over(first, _flipped(first))
            else:
                _renamed_over(first, first.read_bytes())
        yield from super().__call__(batch)


def _run(data: Path, out: Path, how: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv(UNIT_MIN_ROWS_ENV, "1000")
    monkeypatch.setattr(_Changer, "out", out)
    monkeypatch.setattr(_Changer, "how", how)
    monkeypatch.setattr(_Changer, "done", False)
    return run_pipeline(data, out_dir=out, prelearner=_Changer, engine="local")


@pytest.mark.parametrize("how", ["in_place", "renamed_other"])
def test_a_staged_file_changed_with_its_size_kept_stops_the_commit(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    out = tmp_path / "out"
    with pytest.raises(Exception, match=rf"{FIRST}' has another sha256.*nothing was committed"):
        _run(data, out, how, monkeypatch)
    assert _Changer.done
    assert not out.exists()
    # the staged unit record carries the stat the unit saw after its rename
    record = json.loads((staging_path(out) / "units" / "unit-00000.json").read_text())
    assert set(record["files"][0][STAGED_STAT]) == {"size", "ino", "mtime_ns"}


def test_a_zombie_retry_renaming_the_same_bytes_over_is_committed(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    result = _run(data, out, "renamed_same", monkeypatch)
    assert _Changer.done
    assert result.stats["units"] == 3
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["files"][0]["name"] == FIRST
    assert all(STAGED_STAT not in f for f in manifest["files"])  # the stat stays in staging
    verify_checksums(out)


def test_an_untouched_commit_hashes_as_it_wrote(data: Path, tmp_path: Path) -> None:
    """The recorded sha256 (hashed while writing) is the file's: the manifest verifies."""
    out = tmp_path / "out"
    run_pipeline(data, out_dir=out, engine="local")
    verify_checksums(out)
