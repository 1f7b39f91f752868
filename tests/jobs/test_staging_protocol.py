"""The :class:`~offline_prelearner.jobs.staging.Staging` protocol: both places, the same behaviour.

Every test runs twice, through :func:`~offline_prelearner.jobs.staging.staging_for` only: on a
local folder (a staging folder beside ``--out``, renamed into place) and on a real SeaweedFS
bucket (``tests/stores.py``; final names with the job's id, the manifest's PUT as the commit).
The unit side is the job's own writer (``run._UnitWriter``) over the staging's ``UnitOutput``:

* what a unit writes is what its record says (rows, bytes, sha256 of the bytes read back), and
  the commit lists exactly those files, readable where ``output_file`` says;
* a unit that fails leaves no data file, and its record is never written;
* a unit whose staging is gone (committed or discarded elsewhere) writes nothing
  (``check_owner``), and a commit whose staging is gone commits nothing;
* a listed file that is missing refuses the commit: no manifest;
* a resume adopts the staged job's id and seed and keeps a unit whose files still hold.
"""

from __future__ import annotations

import hashlib
import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from offline_prelearner.io.stores import locate
from offline_prelearner.jobs.batch.run import _UnitWriter
from offline_prelearner.jobs.ownership import CommitError
from offline_prelearner.jobs.records import UnitRecord
from offline_prelearner.jobs.staging import Staging, staging_for

JOB: dict[str, Any] = {
    "version": "test",
    "format": "rows",
    "prelearner": "offline_prelearner:OfflinePreLearner",
    "engine": "local",
    "seed": 7,
    "layout": "lists",
    "config": {"a": 1},
    "inputs": [],
    "units": 2,
    "unit_keys": ["k0", "k1"],
}


@pytest.fixture(params=["local", "s3"])
def out(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """``--out``: a local folder, or a fresh prefix on a real SeaweedFS bucket."""
    if request.param == "local":
        return str(tmp_path / "out")
    return str(request.getfixturevalue("s3_store"))


def _open(out: str, resume: bool = False) -> tuple[Staging, dict[int, dict[str, Any]]]:
    staging = staging_for(out, resume=resume)
    staging.__enter__()
    staging.job = json.loads(json.dumps(JOB))
    return staging, staging.open()


def _table(n: int, start: int = 0) -> pa.Table:
    return pa.table({"x": pa.array(range(start, start + n), pa.int64())})


def _unit(staging: Staging, unit: int, tables: list[pa.Table]) -> UnitRecord:
    """Runs the unit side as a unit does: files through the one writer, the owner check, then
    the record."""
    output = staging.unit_output()
    writer = _UnitWriter(output, "part", unit)
    for t in tables:
        writer.write(t)
    output.check_owner()
    files = writer.close()
    record = UnitRecord(
        unit=unit,
        job_id=output.job_id,
        plan=JOB["unit_keys"][unit],
        inputs=(),
        files=tuple(files),
        samples=sum(f.rows for f in files),
        quarantine=(),
        stats={"ledger": {}},
        per_file={},
    )
    output.write_record(record)
    return record


def _read(staging: Staging, name: str) -> bytes:
    return staging.data_file(name).read_bytes()


def test_files_are_what_their_records_say_and_the_commit_lists_them(out: str) -> None:
    staging, kept = _open(out)
    assert kept == {}
    r0 = _unit(staging, 0, [_table(5), _table(3, 5)])
    # A new schema starts a new file.
    r1 = _unit(staging, 1, [_table(4), pa.table({"y": pa.array([1.0, 2.0])})])
    assert [f.rows for f in r0.files] == [8]
    assert [f.rows for f in r1.files] == [4, 2]
    files = [f for r in (r0, r1) for f in r.files]
    assert len({f.name for f in files}) == 3
    for f in files:
        data = _read(staging, f.name)
        assert len(data) == f.bytes
        assert hashlib.sha256(data).hexdigest() == f.sha256
        assert pq.read_table(io.BytesIO(data)).num_rows == f.rows
    assert staging.committed_units() == 2
    staging.commit({"rows": 14}, files, {"quarantine": []})
    staging.__exit__(None, None, None)
    manifest = json.loads(locate(staging.output_file("_manifest.json")).read_bytes())
    assert manifest["job_id"] == staging.job_id
    assert [f["name"] for f in manifest["files"]] == [f.name for f in files]
    assert all("stat" not in f for f in manifest["files"])  # a local stat is the staging's own
    for f in files:
        data = locate(staging.output_file("samples", f.name)).read_bytes()
        assert hashlib.sha256(data).hexdigest() == f.sha256
    assert json.loads(locate(staging.output_file("stats.json")).read_bytes()) == {"rows": 14}


def _part_files(out: str) -> list[str]:
    """Every file a unit's writer may have left, under any name (temporary ones included): a
    local job's beside ``out`` (its staging folder), a store's under ``out``."""
    where = locate(out)
    root = where.parent if where.local else where
    return [f.name for f in root.walk() if "part-" in f.name]


def test_a_failed_unit_leaves_no_file_and_no_record(out: str) -> None:
    staging, _ = _open(out)
    writer = _UnitWriter(staging.unit_output(), "part", 0)
    writer.write(_table(5))
    writer.write(pa.table({"y": pa.array([1.0])}))  # a finished file, and one being written
    writer._flush()  # the open file holds bytes too
    assert len(_part_files(out)) >= 1
    writer.abort()
    assert _part_files(out) == []
    assert staging.committed_units() == 0
    staging.__exit__(None, None, None)


def test_a_unit_of_a_job_whose_staging_is_gone_writes_nothing(out: str) -> None:
    staging, _ = _open(out)
    output = staging.unit_output()
    writer = _UnitWriter(output, "part", 0)
    writer.write(_table(5))
    staging.discard()  # another job's commit or discard took the staging away
    with pytest.raises(CommitError, match="no longer belongs to this job"):
        output.check_owner()
    writer.abort()
    with pytest.raises(CommitError, match="nothing was committed"):
        staging.commit({}, [], {"quarantine": []})
    assert not locate(staging.output_file("_manifest.json")).exists()
    staging.__exit__(None, None, None)


def test_a_missing_listed_file_refuses_the_commit(out: str) -> None:
    staging, _ = _open(out)
    record = _unit(staging, 0, [_table(5)])
    staging.data_file(record.files[0].name).delete()
    with pytest.raises(CommitError, match=r"is missing.*nothing was committed"):
        staging.commit({}, list(record.files), {"quarantine": []})
    assert not locate(staging.output_file("_manifest.json")).exists()
    staging.__exit__(None, None, None)


def test_a_resume_adopts_the_job_and_keeps_the_units_whose_files_hold(out: str) -> None:
    first, _ = _open(out)
    r0 = _unit(first, 0, [_table(5)])
    r1 = _unit(first, 1, [_table(6)])
    first.data_file(r1.files[0].name).delete()  # unit 1's file is lost: it is redone
    first.__exit__(None, None, None)  # the job is interrupted: its staging stays

    again = staging_for(out, resume=True)
    with again:
        assert again.staged_seed() == JOB["seed"]
        again.job = json.loads(json.dumps(JOB))
        kept = again.open()
        assert again.job_id == first.job_id
        assert set(kept) == {0}
        assert UnitRecord.from_dict(kept[0], "unit 0").files == r0.files
        again.drop_unit_files(1)
        r1 = _unit(again, 1, [_table(6)])
        again.commit({}, [*r0.files, *r1.files], {"quarantine": []})
    manifest = json.loads(locate(again.output_file("_manifest.json")).read_bytes())
    assert [f["rows"] for f in manifest["files"]] == [5, 6]
