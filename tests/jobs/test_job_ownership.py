"""A job owns its ``--out`` (issue 20, "exactly once at the edges"), run as users run it.

Each test starts ``offline-prelearner`` in subprocesses (``--engine local``; one Ray case) on a
CartPole-like rows dataset written here: episodes cut across files as RLlib's recorder cuts them,
every file its own unit (``OFFLINE_PRELEARNER_UNIT_MIN_ROWS``), uncompressed so that a file can
be rewritten with other values and the same size.

* two ``process`` jobs into one ``--out`` started together (seeded delays, with and without
  ``--overwrite``): one commits, the other is refused in one line (or, started after the first
  ended, overwrites it whole); the output is always exactly one job's, never a mix;
* the lock: refused while held, naming the holder's pid; a killed holder leaves no stale lock;
* ``--resume`` re-plans against the inputs as they are now: inputs deleted, an input rewritten
  with the same size and mtime: the result is a clean run's over the current inputs;
* a stray file in the staging folder (before a resume, or dropped while the job runs) is never
  committed; a staged file changed after its unit wrote it stops the commit;
* ``--out`` inside the input folder, the input folder itself, or holding it: refused in one
  line before anything is read;
* a full disk (a real tmpfs in a user namespace: ENOSPC; ``RLIMIT_FSIZE``: EFBIG): exit 3, one
  line naming the output, nothing committed, then ``--resume`` finishes identically;
* ``process --on-invalid quarantine`` writes the refused rows with their reason into the
  committed output, listed in the manifest as non-sample files and counted in stats.json.
"""

from __future__ import annotations

import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO, to_table

from offline_prelearner.io.manifest import Manifest, verify_checksums
from offline_prelearner.jobs.batch.batch_job import run_pipeline
from offline_prelearner.jobs.ownership import OutLock, lock_path, staging_path
from offline_prelearner.prelearner import OfflinePreLearner

UNIT_MIN_ROWS_ENV = "OFFLINE_PRELEARNER_UNIT_MIN_ROWS"
TIMEOUT = 180.0


# ============================================================================ data
def _stream(n_rows: int, seed: int) -> dict[str, np.ndarray]:
    """``n_rows`` rows of CartPole-like episodes (lengths 5-120) one after another; the last
    episode is cut truncated at the end, so every episode ends within the data."""
    rng = np.random.default_rng(seed)
    ids, ts, dones = [], [], []
    n = 0
    while n < n_rows:
        length = min(int(rng.integers(5, 120)), n_rows - n)
        eid = f"{seed:04d}{len(ids):028x}"
        ids += [eid] * length
        ts += list(range(length))
        dones += [False] * (length - 1) + [True]
        n += length
    obs = rng.normal(size=(n_rows + 1, 4)).astype(np.float32)
    return {
        "eps_id": np.array([str(i) for i in ids], dtype=object),
        "obs": obs[:-1],
        "actions": rng.integers(0, 2, n_rows).astype(np.int64),
        "rewards": np.ones(n_rows),
        "new_obs": obs[1:],
        "terminateds": np.array(dones),
        "truncateds": np.zeros(n_rows, dtype=bool),
        "t": np.array(ts, dtype=np.int64),
    }


def write_dataset(
    folder: Path,
    n_files: int,
    rows_per_file: int,
    seed: int = 0,
    edits: Any = None,
    only: tuple[int, ...] | None = None,
) -> list[Path]:
    """The stream cut into ``n_files`` files (episodes run across files). ``edits(k, cols)``
    may change file ``k``'s columns in place before it is written (same types, same size);
    ``only``: (re)write just those files."""
    folder.mkdir(parents=True, exist_ok=True)
    cols = _stream(n_files * rows_per_file, seed)
    paths = []
    for k in range(n_files):
        part = {
            name: v[k * rows_per_file : (k + 1) * rows_per_file].copy() for name, v in cols.items()
        }
        if edits is not None:
            edits(k, part)
        path = folder / f"rows-{k:05d}.parquet"
        if only is None or k in only:
            write_rows(path, part)
        paths.append(path)
    return paths


def write_rows(path: Path, cols: dict[str, np.ndarray]) -> None:
    """Uncompressed, no dictionary: a value changed in place keeps the file's size."""
    pq.write_table(to_table(cols, tensor="ray"), path, compression="none", use_dictionary=False)


# ============================================================================ the CLI
def _env(unit_rows: int) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env[UNIT_MIN_ROWS_ENV] = str(unit_rows)
    return env


def _argv(data: Path | str, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "offline_prelearner", "process", str(data), "--out", str(out),
            "--json", *extra]  # fmt: skip


@dataclass
class Ran:
    rc: int
    stdout: str
    stderr: str

    @property
    def summary(self) -> dict[str, Any]:
        return json.loads(self.stdout)

    def one_line(self, *fragments: str) -> str:
        lines = self.stderr.splitlines()
        assert len(lines) == 1, self.stderr
        for f in fragments:
            assert f in lines[0], (f, lines[0])
        return lines[0]


def run(
    data: Path | str, out: Path, *extra: str, unit_rows: int = 2000, preexec_fn: Any = None
) -> Ran:
    proc = subprocess.run(
        _argv(data, out, "--engine", "local", *extra),
        cwd=REPO,
        env=_env(unit_rows),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        preexec_fn=preexec_fn,
    )
    return Ran(proc.returncode, proc.stdout, proc.stderr)


def manifest_files(out: Path) -> list[tuple[str, int, str]]:
    m = json.loads((out / "_manifest.json").read_text())
    assert m["complete"] is True
    return [(f["name"], f["rows"], f["sha256"]) for f in m["files"]]


def assert_clean_commit(out: Path) -> dict[str, Any]:
    """Exactly what the manifest lists (checksums verified), stats.json and the manifest; the
    folder read back holds the rows the manifest counts; no staging or lock left beside it."""
    manifest = json.loads((out / "_manifest.json").read_text())
    verify_checksums(out)
    listed = {f"samples/{f['name']}" for f in manifest["files"]}
    listed |= {f["name"] for f in manifest.get("quarantine", [])}
    found = {p.relative_to(out).as_posix() for p in out.rglob("*") if not p.is_dir()}
    # and the index of the samples, written after the commit point (never trusted: a reader
    # checks it against the listing)
    listed |= {"stats.json", "_manifest.json"} | (
        {"_index.parquet"} if manifest["files"] else set()
    )
    assert found == listed, found ^ listed
    rows = pq.read_table(out / "samples").num_rows if manifest["files"] else 0
    assert rows == manifest["samples_written"]
    assert not staging_path(out).exists()
    assert not lock_path(out).exists()
    return manifest


def assert_nothing_committed(out: Path) -> None:
    assert not out.exists(), sorted(p.name for p in out.rglob("*"))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """5 files of 2,000 rows: 5 units."""
    folder = tmp_path_factory.mktemp("ownership") / "data"
    write_dataset(folder, 5, 2000)
    return folder


def _nan_in(k: int, at: int = 700) -> Any:
    def edit(i: int, cols: dict[str, np.ndarray]) -> None:
        if i == k:
            cols["rewards"][at] = np.nan

    return edit


# ======================================================================= 1. two jobs, one --out
@pytest.fixture(scope="module")
def race(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """8 files of 6,000 rows (8 units), and what each of the two racing jobs commits alone."""
    root = tmp_path_factory.mktemp("race")
    write_dataset(root / "data", 8, 6000, seed=1)
    refs = {}
    for name, extra in JOBS.items():
        ran = run(root / "data", root / f"ref-{name}", *extra, unit_rows=6000)
        assert ran.rc == 0, ran.stderr
        refs[name] = manifest_files(root / f"ref-{name}")
    assert refs["a"] != refs["b"]
    return root / "data", refs


JOBS = {"a": ("--set", "n_step=1"), "b": ("--set", "n_step=3")}


@pytest.mark.parametrize("seed", range(6))
def test_two_jobs_into_one_out_never_mix(
    race: tuple[Path, dict[str, Any]], tmp_path: Path, seed: int
) -> None:
    data, refs = race
    rng = random.Random(seed)
    overwrite = ("--overwrite",) if seed % 2 else ()
    first, second = rng.sample(sorted(JOBS), 2)
    out = tmp_path / "out"
    procs = {}
    for i, name in enumerate((first, second)):
        if i:
            time.sleep(rng.uniform(0.0, 1.2))
        procs[name] = subprocess.Popen(
            _argv(data, out, "--engine", "local", *JOBS[name], *overwrite),
            cwd=REPO,
            env=_env(6000),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    ran = {}
    for name, p in procs.items():
        stdout, stderr = p.communicate(timeout=TIMEOUT)
        ran[name] = Ran(p.returncode, stdout, stderr)
    codes = sorted(r.rc for r in ran.values())
    assert codes in ([0, 0], [0, 2]), {n: (r.rc, r.stderr[-2000:]) for n, r in ran.items()}
    if codes == [0, 0]:  # one ran after the other ended: only with --overwrite
        assert overwrite
    for r in ran.values():
        if r.rc == 2:
            line = r.one_line(str(out))
            assert "another job is writing" in line or "is not empty" in line, line
            if "another job" in line:
                assert "pid " in line and "started at" in line, line
    assert_clean_commit(out)
    assert manifest_files(out) in (refs["a"], refs["b"])


def test_a_held_lock_refuses_a_job_and_a_killed_holder_leaves_none(
    data: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from offline_prelearner.jobs.ownership import OutLock; "
         "OutLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(600)",
         str(out)],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        refused = run(data, out)
        assert refused.rc == 2, refused.stderr
        refused.one_line("another job is writing", repr(str(out)), f"pid {holder.pid},",
                         "started at", "nothing was committed")  # fmt: skip
        assert "kept for --resume" not in refused.stderr
        assert_nothing_committed(out)
        assert not staging_path(out).exists()  # refused before anything was staged
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    assert lock_path(out).exists()  # the killed holder's file is left; its lock is not
    ran = run(data, out)
    assert ran.rc == 0, ran.stderr
    assert_clean_commit(out)


def test_the_lock_in_one_process(tmp_path: Path) -> None:
    """A library user: the lock is released when a job fails, so the same process can resume."""
    out = tmp_path / "out"
    lock = OutLock(out)
    lock.acquire()
    try:
        with pytest.raises(Exception, match="another job is writing"):
            OutLock(out).acquire()
    finally:
        lock.release()
    assert not lock_path(out).exists()
    again = OutLock(out)
    again.acquire()
    again.release()


# ============================================================================ 2. resume re-plans
def _failed_then(data: Path, out: Path, last_bad: int) -> str:
    """A first run that fails on bad data in file ``last_bad`` after the units before it were
    committed; returns the staged job's id."""
    ran = run(data, out)
    assert ran.rc == 2, ran.stderr
    ran.one_line(f"rows-{last_bad:05d}.parquet", "nothing was committed", "kept for --resume")
    assert_nothing_committed(out)
    return json.loads((staging_path(out) / "job.json").read_text())["job_id"]


def _clean(data: Path, out: Path) -> list[tuple[str, int, str]]:
    ran = run(data, out)
    assert ran.rc == 0, ran.stderr
    return manifest_files(out)


def test_resume_after_inputs_were_deleted_commits_only_what_the_manifest_lists(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    files = write_dataset(data, 5, 2000, edits=_nan_in(4))
    out = tmp_path / "out"
    job_id = _failed_then(data, out, 4)
    files[4].unlink()
    files[3].unlink()  # units 3 (committed) and 4 (failed) have no input now
    ran = run(data, out, "--resume")
    assert ran.rc == 0, ran.stderr
    assert ran.summary["units"] == 3 and ran.summary["units_reused"] >= 1
    manifest = assert_clean_commit(out)
    assert manifest["job_id"] == job_id  # the resumed job adopted the staging it resumed
    assert [f["path"] for f in manifest["inputs"]] == [str(f) for f in files[:3]]
    assert manifest_files(out) == _clean(data, tmp_path / "clean")


def test_resume_after_an_input_was_rewritten_with_the_same_size_and_mtime(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    files = write_dataset(data, 5, 2000, edits=_nan_in(4))
    out = tmp_path / "out"
    _failed_then(data, out, 4)
    st = files[1].stat()

    def halve(k: int, cols: dict[str, np.ndarray]) -> None:
        if k == 1:
            cols["rewards"][:] = 0.5

    write_dataset(data, 5, 2000, edits=halve, only=(1, 4))  # 1 rewritten, 4 repaired
    assert files[1].stat().st_size == st.st_size
    os.utime(files[1], ns=(st.st_atime_ns, st.st_mtime_ns))
    ran = run(data, out, "--resume")
    assert ran.rc == 0, ran.stderr
    assert ran.summary["units_reused"] >= 1  # units that read neither file 1 nor file 4
    assert_clean_commit(out)
    rewards = pq.read_table(out / "samples", columns=["rewards"]).column("rewards")
    assert 0.5 in set(rewards.to_pylist())
    assert manifest_files(out) == _clean(data, tmp_path / "clean")


def test_a_unit_record_of_another_job_is_not_reused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_dataset(data, 5, 2000, edits=_nan_in(4))
    out, control = tmp_path / "out", tmp_path / "control"
    _failed_then(data, out, 4)
    shutil.copytree(staging_path(out), staging_path(control))  # the same staging, untouched
    records = sorted((staging_path(out) / "units").glob("unit-*.json"))
    assert len(records) == 4
    rec = json.loads(records[0].read_text())
    rec["job_id"] = "another-job"
    records[0].write_text(json.dumps(rec))
    write_dataset(data, 5, 2000, only=(4,))  # repaired
    reused = {}
    for folder in (out, control):
        ran = run(data, folder, "--resume")
        assert ran.rc == 0, ran.stderr
        reused[folder] = ran.summary["units_reused"]
        assert_clean_commit(folder)
    assert reused[out] == reused[control] - 1 >= 0
    assert manifest_files(out) == manifest_files(control) == _clean(data, tmp_path / "clean")


# ============================================================================ 3. strays in staging
def test_stray_files_in_staging_are_never_committed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_dataset(data, 5, 2000, edits=_nan_in(4))
    out = tmp_path / "out"
    _failed_then(data, out, 4)
    staged = staging_path(out)
    part = next((staged / "samples").glob("part-00000-*.parquet"))
    shutil.copy(part, staged / "samples" / "part-00009-000.parquet")  # a unit no plan has
    shutil.copy(part, staged / "samples" / "stray.parquet")
    (staged / "samples" / "sub").mkdir()
    shutil.copy(part, staged / "samples" / "sub" / "part-00001-000.parquet")
    (staged / "samples" / ".part-00002-000.parquet.tmp-1").write_bytes(b"half")
    (staged / "samples" / "link.parquet").symlink_to(part)
    (staged / "quarantine").mkdir()
    (staged / "quarantine" / "quarantine-00000-000.parquet").write_bytes(b"not ours")
    (staged / "notes.txt").write_text("stray")
    write_dataset(data, 5, 2000, only=(4,))  # repaired
    ran = run(data, out, "--resume")
    assert ran.rc == 0, ran.stderr
    assert ran.summary["units_reused"] >= 1
    assert_clean_commit(out)
    assert manifest_files(out) == _clean(data, tmp_path / "clean")


def test_a_staging_folder_that_is_a_symlink_is_never_walked(data: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.parquet").write_bytes(b"keep me")
    out = tmp_path / "out"
    staging_path(out).symlink_to(elsewhere)
    for extra in (("--resume",), ()):
        ran = run(data, out, *extra)
        assert ran.rc == 2, ran.stderr
        ran.one_line("symbolic link", repr(str(staging_path(out))))
    assert (elsewhere / "precious.parquet").read_bytes() == b"keep me"
    assert_nothing_committed(out)


class _StrayDropper(OfflinePreLearner):
    """Drops a stray Parquet file into the staging folder on its first batch."""

    out: Path | None = None

    def __call__(self, batch: Any) -> Any:
        assert self.out is not None
        samples = staging_path(self.out) / "samples"
        stray = samples / "part-00042-000.parquet"
        if not stray.exists():
            pq.write_table(pa.table({"x": [1, 2, 3]}), stray)
        yield from super().__call__(batch)


class _Tamperer(OfflinePreLearner):
    """Rewrites unit 0's committed sample file (other bytes, same name) once unit 1 runs."""

    out: Path | None = None

    def __call__(self, batch: Any) -> Any:
        assert self.out is not None
        first = staging_path(self.out) / "samples" / "part-00000-000.parquet"
        if first.exists():
            pq.write_table(pq.read_table(first).slice(1), first)
        yield from super().__call__(batch)


def test_a_stray_dropped_while_the_job_runs_is_not_committed(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(UNIT_MIN_ROWS_ENV, "2000")
    out = tmp_path / "out"
    monkeypatch.setattr(_StrayDropper, "out", out)
    result = run_pipeline(data, out_dir=out, prelearner=_StrayDropper, engine="local")
    assert result.stats["units"] == 5
    assert_clean_commit(out)
    assert not (out / "samples" / "part-00042-000.parquet").exists()


def test_a_staged_file_changed_after_its_unit_stops_the_commit(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(UNIT_MIN_ROWS_ENV, "2000")
    out = tmp_path / "out"
    monkeypatch.setattr(_Tamperer, "out", out)
    with pytest.raises(Exception, match=r"part-00000-000\.parquet.*nothing was committed") as e:
        run_pipeline(data, out_dir=out, prelearner=_Tamperer, engine="local")
    assert "\n" not in str(e.value)
    assert_nothing_committed(out)
    assert not lock_path(out).exists()  # released when the job failed


# ======================================================================= 4. --out and the input
def test_out_inside_the_input_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_dataset(data, 2, 500)
    (data / "zz-not-parquet.parquet").write_bytes(b"garbage")  # a read would stop on this
    cases = {
        "inside": (str(data), data / "out", "inside the input folder"),
        "itself": (str(data), data, "is the input"),
        "holds": (str(data), tmp_path, "holds the input"),
        "glob": (f"{data}/*.parquet", data / "processed", "inside the input folder"),
        "nested": (str(data), data / "a" / "b", "inside the input folder"),
    }
    for name, (src, out, why) in cases.items():
        before = sorted(p.name for p in tmp_path.rglob("*"))
        ran = run(src, out, "--overwrite")
        assert ran.rc == 2, (name, ran.stderr)
        ran.one_line(why, repr(str(out)), "choose an --out outside the input")
        assert sorted(p.name for p in tmp_path.rglob("*")) == before, name  # nothing written
    conv = subprocess.run(
        [sys.executable, "-m", "offline_prelearner", "convert", str(data), "--to", "episodes",
         "--out", str(data / "episodes")],
        cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert conv.returncode == 2, conv.stderr
    assert len(conv.stderr.splitlines()) == 1 and "inside the input folder" in conv.stderr


def test_out_beside_a_single_input_file_is_fine(data: Path, tmp_path: Path) -> None:
    folder = tmp_path / "one"
    folder.mkdir()
    shutil.copy(data / "rows-00000.parquet", folder / "rows-00000.parquet")
    ran = run(folder / "rows-00000.parquet", folder / "out")
    assert ran.rc == 0, ran.stderr
    assert_clean_commit(folder / "out")


# ============================================================================ 5. a full disk
def _file_size_limit(limit: int) -> Any:
    def apply() -> None:  # in the child, before exec
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_file_size_limit_is_exit_3_and_one_line(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    ran = run(data, out, preexec_fn=_file_size_limit(48 * 1024))
    assert ran.rc == 3, ran.stderr
    ran.one_line("EFBIG", "File too large", repr(str(out)), "nothing was committed")
    assert_nothing_committed(out)
    assert not [p for p in staging_path(out).rglob("*") if ".tmp-" in p.name]
    ran = run(data, out, "--resume")
    assert ran.rc == 0, ran.stderr
    assert manifest_files(out) == _clean(data, tmp_path / "clean")


def _tmpfs_works(tmp_path: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = tmp_path / "probe"
    probe.mkdir()
    ok = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs '{probe}'"],
        capture_output=True,
        timeout=30,
    )
    return ok.returncode == 0


def run_on_tmpfs(data: Path, tmp_path: Path, size: str, *extra: str) -> tuple[Ran, list[str]]:
    """The CLI with ``--out`` on a tmpfs of ``size`` mounted in a user + mount namespace (no
    root needed): a real filesystem that fills up. Returns the run and what the tmpfs held
    after it (the mount ends with the namespace)."""
    if not _tmpfs_works(tmp_path):
        pytest.skip("no unprivileged user + mount namespace here to mount a small tmpfs")
    disk = tmp_path / "disk"
    disk.mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    argv = " ".join(f"'{a}'" for a in _argv(data, disk / "out", *extra))
    script = (
        f"mount -t tmpfs -o size={size} tmpfs '{disk}' || exit 99; "
        f"{argv} > '{logs}/stdout' 2> '{logs}/stderr'; echo $? > '{logs}/rc'; "
        f"find '{disk}' > '{logs}/files'"
    )
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script], cwd=REPO, env=_env(2000), timeout=TIMEOUT
    )
    assert done.returncode == 0
    ran = Ran(
        int((logs / "rc").read_text()),
        (logs / "stdout").read_text(),
        (logs / "stderr").read_text(),
    )
    return ran, (logs / "files").read_text().splitlines()


def test_a_full_disk_is_exit_3_and_one_line(data: Path, tmp_path: Path) -> None:
    ran, files = run_on_tmpfs(data, tmp_path, "160k", "--engine", "local")
    assert ran.rc == 3, ran.stderr
    out = str(tmp_path / "disk" / "out")
    ran.one_line("ENOSPC", "No space left on device", repr(out), "nothing was committed")
    assert not any(f.endswith("_manifest.json") for f in files), files
    assert not any(".tmp-" in f for f in files), files  # no temporary file left behind


@pytest.mark.ray
@pytest.mark.slow
def test_a_full_disk_on_the_ray_engine_is_exit_3_and_one_line(data: Path, tmp_path: Path) -> None:
    ran, files = run_on_tmpfs(data, tmp_path, "160k", "--engine", "ray")
    assert ran.rc == 3, ran.stderr
    out = str(tmp_path / "disk" / "out")
    ran.one_line("ENOSPC", repr(out), "nothing was committed")
    assert not any(f.endswith("_manifest.json") for f in files), files


# ============================================================================ 6. quarantine
def test_process_quarantine_writes_the_refused_rows_into_the_commit(tmp_path: Path) -> None:
    data = tmp_path / "data"

    def two_nans(k: int, cols: dict[str, np.ndarray]) -> None:
        _nan_in(2, 300)(k, cols)
        _nan_in(3, 10)(k, cols)

    write_dataset(data, 5, 2000, edits=two_nans)
    out = tmp_path / "out"
    ran = run(data, out, "--on-invalid", "quarantine")
    assert ran.rc == 0, ran.stderr
    manifest = assert_clean_commit(out)
    stats = json.loads((out / "stats.json").read_text())
    rejected = sum(stats["rows_rejected"].values())
    assert rejected > 0
    entries = manifest["quarantine"]
    assert entries and all(e["name"].startswith("quarantine/") for e in entries)
    assert not any(f["name"].startswith("quarantine") for f in manifest["files"])
    assert stats["rows_quarantined"] == rejected == sum(e["rows"] for e in entries)
    assert stats["quarantine_files"] == [str(out / e["name"]) for e in entries]
    table = pa.concat_tables([pq.read_table(out / e["name"]) for e in entries])
    assert table.num_rows == rejected
    assert set(table.column("_reject_reason").to_pylist()) == set(stats["rows_rejected"])
    messages = table.column("_reject_message").to_pylist()
    assert all("rows-0000" in m for m in messages)  # each names its file
    # A reader of the output takes the samples only; the quarantine is not data.
    assert all(Path(f.path).parent == out / "samples" for f in Manifest.read(out).files)

    skipped = run(data, tmp_path / "skipped", "--on-invalid", "skip")
    assert skipped.rc == 0, skipped.stderr
    assert not (tmp_path / "skipped" / "quarantine").exists()
    assert json.loads((tmp_path / "skipped" / "stats.json").read_text())["quarantine_files"] == []
    assert manifest_files(tmp_path / "skipped") == manifest_files(out)  # the same samples
