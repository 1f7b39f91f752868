"""Outputs on object stores, exactly once (issue 22): ``process --out s3://...`` and ``az://...``.

Against real servers started by the fixtures (``s3_store``: SeaweedFS; ``azure_store``: Azurite;
skipped, with the reason, where the server cannot be installed). A store has no rename and no
lock: units write their files under their final names with the job's id, ``_manifest.json``
written last is the commit (``offline_prelearner/jobs/store_commit.py``). Each test checks the
store's whole listing, not only the manifest:

* ``process --out s3://`` commits what the same job commits on the local disk (the same rows,
  the same files in unit order), the manifest lists every file and only those; a second run is
  refused, ``--overwrite`` leaves only the new generation;
* the driver SIGKILLed mid-job (between uploads) then ``--resume``: the clean output, the units
  it finished reused; SIGINT: exit 130, no manifest;
* two jobs into one prefix, started together: the committed output is one clean run's, whole;
* a bad store (no such bucket, wrong key, nothing listening): exit 2 in one line, before any
  unit ran; a store that fails mid-job: exit 3, nothing committed;
* Azurite (no rename at all there): write, commit, an interrupted job resumed.

All runs use ``--engine local`` (in-process units: the kill and the signal reach the process that
uploads); the Ray engine writes through the same unit code.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO
from test_job_ownership import write_dataset

from offline_prelearner.io.stores import locate

UNIT_ROWS = 2000
N_FILES = 12
TIMEOUT = 120


# ============================================================================ helpers
def _argv(data: Path | str, out: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "offline_prelearner", "process", str(data), "--out", out,
            "--json", "--engine", "local", *extra]  # fmt: skip


def _env(**more: str) -> dict[str, str]:
    env = dict(os.environ)  # the store fixture set the store's variables here
    env.pop("RAY_ADDRESS", None)
    env["OFFLINE_PRELEARNER_UNIT_MIN_ROWS"] = str(UNIT_ROWS)
    env.update(more)
    return env


def run(data: Path | str, out: str, *extra: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _argv(data, out, *extra),
        cwd=REPO,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def one_line(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1, proc.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def listing(out: str) -> list[str]:
    """Every object under the prefix, relative to it, in name order."""
    root = locate(out)
    base = root.path.rstrip("/") + "/"
    return [f.path[len(base) :] for f in root.walk()]


def manifest(out: str) -> dict[str, Any]:
    m: dict[str, Any] = json.loads(locate(out).join("_manifest.json").read_bytes())
    assert m["complete"] is True
    return m


def committed_table(out: str) -> pa.Table:
    """The rows the manifest lists, read file by file from the store, sorted by episode and t."""
    root = locate(out)
    tables = []
    for f in manifest(out)["files"]:
        with root.join("samples", f["name"]).open_input_file() as src:
            t = pq.read_table(src)
        assert t.num_rows == f["rows"]
        tables.append(t)
    return _sorted(pa.concat_tables(tables))


def _sorted(table: pa.Table) -> pa.Table:
    keys = [c for c in ("eps_id", "t") if c in table.column_names]
    return table.sort_by([(k, "ascending") for k in keys])


def assert_clean_commit(out: str, reference: pa.Table, ref_rows: list[int]) -> dict[str, Any]:
    """The manifest lists every data file and only those; nothing else but stats.json is left;
    the rows are the local run's."""
    m = manifest(out)
    names = [f"samples/{f['name']}" for f in m["files"]]
    index = ["_index.parquet"] if names else []  # written after the commit point
    assert listing(out) == sorted(["_manifest.json", "stats.json", *index, *names])
    assert [f["rows"] for f in m["files"]] == ref_rows
    assert committed_table(out).equals(reference)
    return m


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("stores-out") / "rows"
    write_dataset(folder, N_FILES, UNIT_ROWS)
    return folder


@pytest.fixture(scope="module")
def local_run(data: Path) -> tuple[pa.Table, list[int]]:
    """The same job on the local disk: its rows (sorted) and its files' row counts in order."""
    out = data.parent / "local"
    proc = run(data, str(out))
    assert proc.returncode == 0, proc.stderr
    m = json.loads((out / "_manifest.json").read_text())
    table = pa.concat_tables(pq.read_table(out / "samples" / f["name"]) for f in m["files"])
    return _sorted(table), [f["rows"] for f in m["files"]]


def _wait_for_units(out: str, proc: subprocess.Popen[str], n: int) -> int:
    """Polls the store until the job committed ``n`` unit records; returns how many it saw."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline and proc.poll() is None:
        seen = sum(1 for p in listing(out) if "/units/unit-" in p)
        if seen >= n:
            return seen
        time.sleep(0.02)
    pytest.fail(f"the job ended or hung before {n} units: {proc.poll()}")


# ============================================================================ S3
def test_process_to_s3_commits_the_local_output(
    s3_store: str, data: Path, local_run: tuple[pa.Table, list[int]]
) -> None:
    out = f"{s3_store}/out"
    proc = run(data, out)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["out"] == out
    m = assert_clean_commit(out, *local_run)
    assert all(len(f["sha256"]) == 64 and f["bytes"] > 0 for f in m["files"])
    assert all(m["job_id"] in f["name"] for f in m["files"])  # the attempt is in every name

    again = run(data, out)  # a committed output is not replaced without --overwrite
    assert again.returncode == 2
    one_line(again, "not empty", "--overwrite")
    assert manifest(out)["job_id"] == m["job_id"]

    over = run(data, out, "--overwrite")
    assert over.returncode == 0, over.stderr
    m2 = assert_clean_commit(out, *local_run)  # only the new generation is left
    assert m2["job_id"] != m["job_id"]


def test_driver_killed_mid_job_then_resume(
    s3_store: str, data: Path, local_run: tuple[pa.Table, list[int]]
) -> None:
    out = f"{s3_store}/out"
    proc = subprocess.Popen(
        _argv(data, out), cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        _wait_for_units(out, proc, 3)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.communicate(timeout=TIMEOUT)
    assert "_manifest.json" not in listing(out)  # nothing committed
    left = [p for p in listing(out) if p.startswith("samples/")]
    assert left  # the finished units' files are there, listed by no manifest

    resumed = run(data, out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["units_reused"] >= 3
    assert_clean_commit(out, *local_run)


def test_sigint_is_130_and_commits_nothing(s3_store: str, data: Path) -> None:
    out = f"{s3_store}/out"
    proc = subprocess.Popen(
        _argv(data, out), cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        _wait_for_units(out, proc, 1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)  # a hang guard
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    if proc.returncode == 0:  # the signal came after the commit point: a whole commit
        manifest(out)
        return
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert "_manifest.json" not in listing(out)


def test_two_jobs_into_one_prefix_commit_one_clean_run(
    s3_store: str, data: Path, local_run: tuple[pa.Table, list[int]]
) -> None:
    out = f"{s3_store}/out"
    procs = [
        subprocess.Popen(
            _argv(data, out),
            cwd=REPO,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = [(p.wait(TIMEOUT), *p.communicate()) for p in procs]
    codes = sorted(rc for rc, _, _ in results)
    assert codes[0] == 0, results  # at least one commits; the other commits first or fails
    for rc, _, err in results:
        if rc:
            assert rc == 2 and "Traceback" not in err, err
    m = manifest(out)
    committed = [f"samples/{f['name']}" for f in m["files"]]
    assert committed_table(out).equals(local_run[0])
    # Files of the other job may be left (no manifest lists them); the next run cleans them.
    left = [p for p in listing(out) if p.startswith("samples/") and p not in committed]
    assert all(m["job_id"] not in p for p in left)
    over = run(data, out, "--overwrite")
    assert over.returncode == 0, over.stderr
    assert_clean_commit(out, *local_run)


def test_bad_stores_fail_in_one_line_before_any_unit(
    s3_store: str, s3_server: Any, data: Path
) -> None:
    bucket = s3_store.split("/")[2]
    cases = [
        (f"{s3_store}/out", s3_server.reader_env, "denied"),  # may read, may not write
        (s3_store.replace(f"s3://{bucket}/", "s3://no-such-bucket-r/"), {}, "no such bucket"),
        (f"{s3_store}/out", {"AWS_SECRET_ACCESS_KEY": "wrong"}, "--out"),
        (f"{s3_store}/out", {"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}, "cannot be reached"),
    ]
    for out, env, words in cases:
        start = time.monotonic()
        proc = run(data, out, **env)
        assert proc.returncode == 2, (out, env, proc.stderr)
        one_line(proc, words, "nothing was committed")
        assert time.monotonic() - start < 60
    assert listing(f"{s3_store}/out") == []  # no unit ran


def test_a_store_failing_mid_job_is_exit_3_and_commits_nothing(s3_store: str, data: Path) -> None:
    """The endpoint goes away once the job has started: the units' uploads fail."""
    from offline_prelearner.jobs.batch.batch_job import run_pipeline
    from offline_prelearner.jobs.store_commit import StoreStaging

    out = f"{s3_store}/out"
    real = StoreStaging.open
    with pytest.MonkeyPatch.context() as mp:

        def open_then_fail(self: StoreStaging) -> Any:
            kept = real(self)
            # From here nothing listens at the endpoint: the units' uploads fail.
            mp.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
            return kept

        mp.setattr(StoreStaging, "open", open_then_fail)
        with pytest.raises(OSError) as e:
            run_pipeline(str(data), out_dir=out, engine="local")
    assert e.value.errno == 5 and "--out" in str(e.value), e.value  # EIO: exit 3 at the CLI
    assert "_manifest.json" not in listing(out)
    assert not [p for p in listing(out) if p.startswith("samples/")]


def test_a_store_failing_after_the_commit_point_is_a_warning_not_exit_3(
    s3_store: str, data: Path
) -> None:
    """Once ``_manifest.json`` landed the job is committed: a store failing on what follows
    (stats.json, deletions) is a one-line warning and the job succeeds. It was EIO, exit 3, over a
    committed output (seen in CI, a loaded SeaweedFS failing the write after the manifest)."""
    from offline_prelearner.jobs import store_commit
    from offline_prelearner.jobs.batch.batch_job import run_pipeline

    out = f"{s3_store}/out"
    real = store_commit.write_json

    def failing_stats(loc: Any, obj: Any) -> None:
        if loc.name == "stats.json":
            raise OSError(5, "the store went away")
        real(loc, obj)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store_commit, "write_json", failing_stats)
        with pytest.warns(store_commit.CommittedWarning, match="committed; writing stats.json"):
            run_pipeline(str(data), out_dir=out, engine="local")
    names = listing(out)
    assert "_manifest.json" in names and "stats.json" not in names
    manifest = json.loads(locate(out).join("_manifest.json").read_bytes())
    assert sorted(n for n in names if n.startswith("samples/")) == sorted(
        f"samples/{f['name']}" for f in manifest["files"]
    )


# ============================================================================ Azure (Azurite)
def _stopping_prelearner() -> type:
    """A prelearner that fails once ``budget`` batches ran (an interrupted job, in-process)."""
    from offline_prelearner import OfflinePreLearner

    class Stopping(OfflinePreLearner):  # type: ignore[misc]
        budget = 10**9

        def __call__(self, batch: Any) -> Any:
            if Stopping.budget <= 0:
                raise RuntimeError("stopped by the test")
            Stopping.budget -= 1
            return super().__call__(batch)

    return Stopping


def test_azure_write_commit_resume(
    azure_store: str, data: Path, local_run: tuple[pa.Table, list[int]]
) -> None:
    from offline_prelearner.config import PreLearnerConfig
    from offline_prelearner.jobs.batch.batch_job import run_pipeline

    config = PreLearnerConfig().with_updates({"sample_all": True, "seed": 7})
    pre = _stopping_prelearner()
    out = f"{azure_store}/out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OFFLINE_PRELEARNER_UNIT_MIN_ROWS", str(UNIT_ROWS))
        pre.budget = 4  # type: ignore[attr-defined]
        with pytest.raises(RuntimeError, match="stopped by the test"):
            run_pipeline(str(data), config, out_dir=out, engine="local", prelearner=pre)
        assert "_manifest.json" not in listing(out)
        assert any("/units/unit-" in p for p in listing(out))
        pre.budget = 10**9  # type: ignore[attr-defined]
        result = run_pipeline(
            str(data), config, out_dir=out, engine="local", prelearner=pre, resume=True
        )
    assert result.stats["units_reused"] >= 1
    assert_clean_commit(out, *local_run)


# ============================================================================ convert
def test_convert_to_s3_commits_the_local_output(
    s3_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``convert --out s3://``: the job commits locally (its own folder under the cache), then
    its files go up under names with its id and the manifest last; --overwrite replaces it."""
    from offline_prelearner.jobs.convert.path import convert_path

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    src = REPO / "datasets" / "cartpole-v1" / "episodes"
    local = tmp_path / "local"
    convert_path(str(src), "rows", str(local))
    want = json.loads((local / "_manifest.json").read_text())
    under = local / want["files_dir"]  # the data folder, OUT/rows
    table = _sorted(pa.concat_tables(pq.read_table(under / f["name"]) for f in want["files"]))

    out = f"{s3_store}/conv"
    for overwrite in (False, True):
        convert_path(str(src), "rows", out, overwrite=overwrite)
        m = manifest(out)
        assert [(f["rows"], f["sha256"]) for f in m["files"]] == [
            (f["rows"], f["sha256"]) for f in want["files"]
        ]  # the same bytes, under names with the job's id
        assert all(m["job_id"] in f["name"] for f in m["files"])
        assert m["files_dir"] == "rows"
        assert listing(out) == sorted(
            [
                "_index.parquet",  # written after the commit, beside the manifest
                "_manifest.json",
                "stats.json",
                *(f"rows/{f['name']}" for f in m["files"]),
            ]
        )
        root = locate(out).join("rows")
        got = []
        for f in m["files"]:
            with root.join(f["name"]).open_input_file() as fh:
                got.append(pq.read_table(fh))
        assert _sorted(pa.concat_tables(got)).equals(table)
    assert not list((tmp_path / "cache").rglob("*.parquet"))  # the local copy is gone


def test_convert_to_minari_on_s3_keeps_minari_names(
    s3_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Minari's file names are its layout's: the generation goes under a folder named by the
    job (the manifest's files_dir); --overwrite leaves only the new one."""
    from offline_prelearner.jobs.convert.config import ConvertConfig
    from offline_prelearner.jobs.convert.path import convert

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    src = REPO / "datasets" / "cartpole-v1" / "episodes"
    out = f"{s3_store}/minari"
    config = ConvertConfig(to="minari", env_id="CartPole-v1")
    for overwrite in (False, True):
        stats = convert(str(src), out, config, overwrite=overwrite)
        m = manifest(out)
        assert m["files_dir"] == m["job_id"]
        assert [f["name"] for f in m["files"]] == ["data/main_data.hdf5", "data/metadata.json"]
        assert listing(out) == sorted(
            ["_manifest.json", "stats.json", *(f"{m['job_id']}/{f['name']}" for f in m["files"])]
        )
        assert stats["dataset_id"] == f"{s3_store.rsplit('/', 1)[-1]}/minari"
    assert not [p for p in (tmp_path / "cache").rglob("*") if not p.is_dir()]


# ============================================================================ replay checkpoints
@pytest.mark.parametrize("store", ["s3_store", "azure_store"])
def test_replay_checkpoint_on_a_store(store: str, request: pytest.FixtureRequest) -> None:
    """A checkpoint saved to a store reads back checked (sizes, sha256); a second save replaces
    the first generation; an altered array is one DecodeError naming it."""
    import numpy as np

    from offline_prelearner.errors import DecodeError
    from offline_prelearner.replay import checkpoint

    uri = f"{request.getfixturevalue(store)}/ckpt"
    arrays = {"obs": np.arange(12, dtype=np.float32).reshape(3, 4), "n": np.array([3])}
    assert checkpoint.write(uri, {"k": 1}, arrays) == uri
    first = json.loads(locate(uri).join("manifest.json").read_bytes())["generation"]
    meta, got = checkpoint.read(uri)
    assert meta == {"k": 1} and all(np.array_equal(got[k], v) for k, v in arrays.items())

    checkpoint.write(uri, {"k": 2}, {**arrays, "n": np.array([4])})
    names = listing(uri)
    assert not any(n.startswith(first) for n in names)  # the old generation is gone
    meta, got = checkpoint.read(uri)
    assert meta == {"k": 2} and got["n"].tolist() == [4]

    second = json.loads(locate(uri).join("manifest.json").read_bytes())["generation"]
    locate(uri).join(second, "a0000.npy").write_bytes(b"\x93NUMPY altered")
    with pytest.raises(DecodeError, match="'obs'"):
        checkpoint.read(uri)


# ============================================================================ quarantine
def test_quarantine_on_a_store(s3_store: str, tmp_path: Path) -> None:
    """``process --on-invalid quarantine --out s3://``: the refused rows are committed with the
    samples (named with the job's id, listed under ``quarantine``); ``inspect --quarantine-dir
    s3://`` writes its file there."""
    from test_job_ownership import _nan_in

    data = tmp_path / "bad"
    write_dataset(data, 3, UNIT_ROWS, edits=_nan_in(1))
    out = f"{s3_store}/out"
    proc = run(data, out, "--on-invalid", "quarantine")
    assert proc.returncode == 0, proc.stderr
    m = manifest(out)
    (q,) = m["quarantine"]
    assert q["name"].startswith(f"quarantine/quarantine-{m['job_id']}-") and q["rows"] >= 1
    names = [f"samples/{f['name']}" for f in m["files"]]
    index = ["_index.parquet"] if names else []  # written after the commit point
    assert listing(out) == sorted(["_manifest.json", "stats.json", q["name"], *index, *names])
    stats = json.loads(locate(out).join("stats.json").read_bytes())
    assert stats["quarantine_files"] == [f"{out}/{q['name']}"]

    qdir = f"{s3_store}/inspect-q"
    ins = subprocess.run(
        [sys.executable, "-m", "offline_prelearner", "inspect", str(data / "rows-00001.parquet"),
         "--on-invalid", "quarantine", "--quarantine-dir", qdir],
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert ins.returncode == 0, ins.stderr
    (written,) = listing(qdir)
    with locate(qdir).join(written).open_input_file() as fh:
        assert pq.read_table(fh).num_rows >= 1


# ============================================================================ Ray: a worker dies
def _descendants(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            kids.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(d))
    found, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            found.append(c)
            todo.append(c)
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.ray
@pytest.mark.slow
def test_unit_worker_killed_on_ray_then_clean_or_exit_3(s3_store: str, tmp_path: Path) -> None:
    """SIGKILL a Ray worker while it runs a unit that uploads to S3: Ray redoes the unit (the
    same names, the same bytes) and the output is a clean run's, or the job exits 3 with nothing
    committed and ``--resume`` finishes it."""
    rows = 20_000
    data = tmp_path / "big"
    write_dataset(data, 6, rows)
    local = tmp_path / "local"
    env = {"OFFLINE_PRELEARNER_UNIT_MIN_ROWS": str(rows)}
    assert run(data, str(local), **env).returncode == 0
    m = json.loads((local / "_manifest.json").read_text())
    ref = _sorted(
        pa.concat_tables(pq.read_table(local / "samples" / f["name"]) for f in m["files"])
    )
    ref_rows = [f["rows"] for f in m["files"]]

    out = f"{s3_store}/out"
    argv = [a if a != "local" else "ray" for a in _argv(data, out)]
    proc = subprocess.Popen(
        argv, cwd=REPO, env=_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    killed = None
    try:
        deadline = time.monotonic() + TIMEOUT
        while killed is None and proc.poll() is None and time.monotonic() < deadline:
            for pid in _descendants(proc.pid):
                if "_run_units" in _cmdline(pid):
                    time.sleep(0.3)  # into the unit: reading, writing, uploading
                    os.kill(pid, signal.SIGKILL)
                    killed = pid
                    break
            time.sleep(0.05)
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert killed is not None, "no unit worker seen"
    assert "Traceback" not in err, err
    if proc.returncode == 0:
        assert_clean_commit(out, ref, ref_rows)
        return
    assert proc.returncode == 3, err
    assert "_manifest.json" not in listing(out)
    resumed = run(data, out, "--resume", **env)
    assert resumed.returncode == 0, resumed.stderr
    assert_clean_commit(out, ref, ref_rows)
