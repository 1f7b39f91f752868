"""The job's records as types (``jobs/records.py``): the JSON they write is the JSON a job wrote
before them, key for key, and a malformed record is refused in one line naming its file and key.

* a unit record of the oldest resumable kind (no ``node``, ``cpu_seconds``, ``per_file`` or
  ``quarantine``) is read, and one of today's round-trips to the same JSON, key order included;
* a file entry keeps keys another job records (``convert``'s) and drops its staged stat only in
  the manifest;
* the stats of a real job are what ``JobStats.to_dict`` writes (and the CLI's summary is theirs);
* each required key, missing or of another type, is named with the record's file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from offline_prelearner.jobs.batch.batch_job import run_pipeline
from offline_prelearner.jobs.ownership import CommitError
from offline_prelearner.jobs.records import FileRecord, JobManifest, JobStats, UnitRecord

LEDGER = {
    "rows_in": 10,
    "rows_kept": 9,
    "rows_duplicate": 0,
    "rows_rejected": {"nan": 1},
    "episodes_kept": 2,
    "episodes_duplicate": 0,
    "episodes_rejected": {},
    "fragments": 2,
    "balanced": True,
}
FILE = {
    "name": "part-00003-000.parquet",
    "rows": 9,
    "bytes": 1234,
    "sha256": "ab" * 32,
    "stat": {"size": 1234, "ino": 77, "mtime_ns": 5},
}
RECORD: dict[str, Any] = {
    "unit": 3,
    "job_id": "20261207T000000-0123456789abcdef",
    "plan": "f" * 64,
    "inputs": [{"path": "/d/a.parquet", "size": 10, "mtime_ns": 1, "rows": 10}],
    "files": [FILE],
    "samples": 9,
    "quarantine": [],
    "stats": {"batches": 1, "samples": 9, "ledger": LEDGER, "pending_fragments": 0},
    "per_file": {"/d/a.parquet": {"rows_read": 10, "rows_rejected": 1, "rows_duplicate": 0}},
    "node": {"host": "m1"},
    "cpu_seconds": 0.5,
}


def test_a_unit_record_round_trips_to_the_same_json() -> None:
    rec = UnitRecord.from_dict(RECORD, "units/unit-00003.json")
    assert rec.files[0].stat is not None and rec.files[0].stat.ino == 77
    assert json.dumps(rec.to_dict()) == json.dumps(RECORD)  # keys, values and their order


def test_an_older_unit_record_is_read_and_counted() -> None:
    old = {k: v for k, v in RECORD.items() if k not in ("node", "cpu_seconds", "per_file")}
    del old["quarantine"]
    old["files"] = [{k: v for k, v in FILE.items() if k != "stat"}]  # before stats were kept
    rec = UnitRecord.from_dict(old, "units/unit-00003.json")
    assert (rec.node, rec.cpu_seconds, rec.quarantine, dict(rec.per_file)) == (None, None, (), {})
    assert rec.files[0].stat is None
    stats = JobStats.summed([rec, rec])
    assert (stats.units, stats.rows_in, stats.counters["samples"]) == (2, 20, 18)
    assert stats.to_dict()["rows_rejected"] == {"nan": 2}


def test_a_file_entry_keeps_other_keys_and_the_manifest_drops_the_stat() -> None:
    entry = {**{k: v for k, v in FILE.items() if k != "stat"}, "kind": "quarantine"}
    rec = FileRecord.from_dict({**entry, "stat": FILE["stat"]}, "x")
    assert rec.to_dict(with_stat=False) == entry
    job = {"version": "v", "format": "rows", "prelearner": "p", "engine": "local"}
    manifest = JobManifest(
        "J", {**job, "inputs": [], "config": {}}, (rec,), "samples", "samples",
        {"quarantine": [rec]}, committed_at="t",
    )  # fmt: skip
    out = manifest.to_dict()
    assert list(out) == [
        "complete", "committed_at", "job_id", "version", "format", "prelearner", "engine",
        "inputs", "files", "samples_written", "config", "quarantine", "files_dir", "content",
    ]  # fmt: skip
    assert out["files"] == [entry] and out["quarantine"] == [entry]
    assert out["samples_written"] == 9


@pytest.mark.parametrize(
    ("key", "value"),
    [("unit", None), ("unit", "3"), ("unit", True), ("job_id", 7), ("files", {}),
     ("samples", 1.5), ("stats", [])],
)  # fmt: skip
def test_a_malformed_unit_record_names_its_file_and_key(key: str, value: Any) -> None:
    bad = (
        {**RECORD, key: value}
        if value is not None
        else {k: v for k, v in RECORD.items() if k != key}
    )
    with pytest.raises(CommitError) as e:
        UnitRecord.from_dict(bad, "out/.x.staging/units/unit-00003.json")
    line = str(e.value)
    assert "\n" not in line
    assert line.startswith("out/.x.staging/units/unit-00003.json: ") and repr(key) in line


def test_a_malformed_file_entry_names_its_key() -> None:
    bad = {**RECORD, "files": [{**FILE, "rows": "9"}]}
    with pytest.raises(CommitError, match=r"^units/u\.json: .*'rows' is '9'"):
        UnitRecord.from_dict(bad, "units/u.json")


def test_a_jobs_stats_are_what_the_types_write(tmp_path: Path) -> None:
    rows = REPO / "datasets/cartpole-v1/rows"
    result = run_pipeline(rows, {"sample": {"sample_all": True}}, out_dir=tmp_path / "out")
    written = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert written == result.stats == result.job_stats.to_dict()
    assert list(written)[:2] == ["units", "rows_in"] and written["rows_balance"] is True
    summary = result.job_stats.summary()
    assert list(summary) == list(JobStats.SUMMARY)
    assert summary["samples_written"] == written["samples_written"] > 0
