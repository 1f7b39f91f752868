"""Faults injected for real into the batch job, run as users run it: ``offline-prelearner process``.

Each test starts the CLI in a subprocess of its own process group on a CartPole rows dataset of
20 files of 20k rows, planned as 20 units (``OFFLINE_PRELEARNER_UNIT_MIN_ROWS``), with
``--set sample_all=true`` so the output does not depend on the seed. A clean ``--engine local``
run is the reference. Whatever the fault, the job either exits 0 with output byte-identical to
the reference (the manifest's files: name, rows, sha256; and the (eps_id, t) multiset of the
rows), or exits non-zero with one line on stderr and nothing at ``--out``; ``--resume`` then
finishes it identically. It never exits 0 with different output.

* a SIGKILLed unit worker (the first unit running, the middle of the job, one of the last two
  units): Ray redoes the unit; every unit worker killed as it appears: the job gives up after
  a few retries with one line (exit 3), and ``--resume`` finishes it;
* SIGINT / SIGTERM to the CLI: exit 130 / 143 within 10 s, one line, no Ray process of the job
  left (raylet, gcs_server, workers), finished units kept for ``--resume``;
* a second run into a committed ``--out``: refused with one line (exit 2), ``--overwrite``
  replaces it;
* the output filesystem refusing a write (``RLIMIT_FSIZE``: EFBIG): one line, exit 3;
* a NaN reward (found in a Ray worker) / an infinite observation (in-process) in the middle
  file: one line naming the file and the column, exit 2.

Only processes these tests started are killed: the CLI by pid, its process group, and the
descendants seen while it ran (by pid and start time).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

STEPS = 100_000  # recorded once, written COPIES times under other episode ids
COPIES = 4
ROWS_PER_FILE = 20_000  # 400k rows in 20 files and units: ~5 s of Ray work on 2 cores
N_FILES = STEPS * COPIES // ROWS_PER_FILE
UNIT_MIN_ROWS_ENV = "OFFLINE_PRELEARNER_UNIT_MIN_ROWS"
UNIT_TITLE = "_run_units"  # a Ray worker running a unit is titled ray::_run_units
JOB_TIMEOUT = 150.0  # seconds: a hang fails the test instead of the whole run


# ============================================================================ the CLI and /proc
def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)  # each job starts (and must stop) its own local Ray
    env[UNIT_MIN_ROWS_ENV] = str(ROWS_PER_FILE)
    return env


def _cli(data: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "offline_prelearner",
        "process",
        str(data),
        "--out",
        str(out),
        "--set",
        "sample_all=true",
        "--json",
        *extra,
    ]


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    state: str
    start: int  # clock ticks after boot: (pid, start) names one process, whatever pid reuse


def _proc(pid: int) -> Proc | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return Proc(pid, int(fields[1]), int(fields[2]), fields[0], int(fields[19]))


def _processes() -> dict[int, Proc]:
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit() and (p := _proc(int(d))) is not None:
            out[p.pid] = p
    return out


def _title(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def _alive(p: Proc) -> bool:
    now = _proc(p.pid)
    return now is not None and now.start == p.start and now.state != "Z"


@dataclass
class Job:
    """A CLI run in its own process group; remembers every descendant it saw."""

    proc: subprocess.Popen[bytes]
    out: Path
    logs: Path
    seen: dict[int, Proc] = field(default_factory=dict)

    @classmethod
    def start(cls, data: Path, out: Path, *extra: str, preexec_fn: Any = None) -> Job:
        logs = out.parent / f"{out.name}.logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / "stdout", "wb") as so, open(logs / "stderr", "wb") as se:
            proc = subprocess.Popen(
                _cli(data, out, *extra),
                env=_env(),
                stdout=so,
                stderr=se,
                start_new_session=preexec_fn is None,
                preexec_fn=preexec_fn,
            )
        return cls(proc, out, logs)

    def descendants(self) -> list[Proc]:
        table = _processes()
        kids: dict[int, list[int]] = collections.defaultdict(list)
        for p in table.values():
            kids[p.ppid].append(p.pid)
        found, todo = [], [self.proc.pid]
        while todo:
            for c in kids.get(todo.pop(), []):
                found.append(table[c])
                todo.append(c)
        for p in found:
            self.seen.setdefault(p.pid, p)
        return found

    def unit_workers(self) -> list[int]:
        """Pids of the Ray workers running a unit right now."""
        return sorted(p.pid for p in self.descendants() if UNIT_TITLE in _title(p.pid))

    def units_committed(self) -> int:
        units = self.out.parent / f".{self.out.name}.staging" / "units"
        try:
            return sum(1 for n in os.listdir(units) if n.startswith("unit-"))
        except OSError:
            return 0

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float = JOB_TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"the job did not end within {timeout} s (a hang)")

    def leftovers(self) -> list[tuple[int, str]]:
        """Processes of this job alive now: seen descendants, or still in its process group."""
        left = {p.pid for p in self.seen.values() if _alive(p)}
        left |= {p.pid for p in _processes().values() if p.pgid == self.proc.pid and _alive(p)}
        left.discard(self.proc.pid)
        return [(pid, _title(pid)[:80]) for pid in sorted(left)]

    def kill(self) -> None:
        """Cleanup: the CLI, its process group and the descendants it had (ours only)."""
        if self.running():  # its pid is still the id of the group it leads: the group is ours
            self.descendants()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        for p in self.seen.values():  # checked by pid and start time
            if _alive(p):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)

    @property
    def stdout(self) -> str:
        return (self.logs / "stdout").read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return (self.logs / "stderr").read_text(errors="replace")

    def summary(self) -> dict[str, Any]:
        return json.loads(self.stdout.strip().splitlines()[-1])


@pytest.fixture
def jobs() -> Iterator[list[Job]]:
    started: list[Job] = []
    yield started
    for job in started:
        job.kill()


def run(data: Path, out: Path, *extra: str, preexec_fn: Any = None) -> Job:
    job = Job.start(data, out, *extra, preexec_fn=preexec_fn)
    try:
        job.wait()
    finally:
        job.kill()
    return job


def error_lines(stderr: str) -> list[str]:
    """stderr's non-empty lines: with ``--json`` no progress is drawn and Ray's own log lines
    stay in its session folder, so a job prints nothing there, or its one line."""
    return [ln.strip() for ln in re.split(r"[\r\n]+", stderr) if ln.strip()]


def assert_one_line(job: Job, *words: str) -> str:
    err = job.stderr
    assert "Traceback" not in err, err
    lines = error_lines(err)
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("offline-prelearner process: "), line
    for w in words:
        assert w in line, line
    return line


# ============================================================================ outputs
def manifest_files(out: Path) -> list[tuple[str, int, str]]:
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["complete"] is True
    return [(f["name"], f["rows"], f["sha256"]) for f in manifest["files"]]


def row_keys(out: Path) -> collections.Counter[tuple[str, int]]:
    keys: collections.Counter[tuple[str, int]] = collections.Counter()
    for name, _, _ in manifest_files(out):
        t = pq.read_table(out / "samples" / name, columns=["eps_id", "t"])
        keys.update(zip(t.column("eps_id").to_pylist(), t.column("t").to_pylist(), strict=True))
    return keys


@dataclass(frozen=True)
class Reference:
    out: Path
    files: list[tuple[str, int, str]]
    keys: collections.Counter[tuple[str, int]]


def assert_identical(out: Path, ref: Reference) -> None:
    assert manifest_files(out) == ref.files
    keys = row_keys(out)
    lost, extra = ref.keys - keys, keys - ref.keys
    assert not lost and not extra, f"{sum(lost.values())} rows lost, {sum(extra.values())} extra"
    assert sorted(p.name for p in (out / "samples").iterdir()) == [f[0] for f in ref.files]


def assert_nothing_committed(out: Path) -> None:
    assert not out.exists(), sorted(p.name for p in out.rglob("*"))
    assert not list(out.parent.glob(f".{out.name}.replaced-*"))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from offline_prelearner.jobs.record import record_env, write_recording

    root = tmp_path_factory.mktemp("faults")
    folder = root / "cartpole"
    folder.mkdir()
    rec = record_env("CartPole-v1", STEPS, seed=0)
    ids = [ep.id for ep in rec.episodes]
    n = 0
    for k in range(COPIES):  # stepping the env is the slow part: 4 copies, distinct episodes
        for ep, eid in zip(rec.episodes, ids, strict=True):
            ep.id = f"{eid}-{k}"
        for f in sorted(write_recording(rec, root / f"copy{k}", rows_per_file=ROWS_PER_FILE)):
            os.replace(f, folder / f"cartpole-v1-rows-{n:05d}.parquet")
            n += 1
    assert n == N_FILES
    return folder


@pytest.fixture(scope="module")
def reference(dataset: Path) -> Reference:
    out = dataset.parent / "reference"
    job = run(dataset, out, "--engine", "local")
    assert job.proc.returncode == 0, job.stderr
    assert job.summary()["units"] == N_FILES  # the env var reached the plan: one unit per file
    return Reference(out, manifest_files(out), row_keys(out))


def resume_identical(data: Path, out: Path, ref: Reference, at_least: int = 0) -> None:
    job = run(data, out, "--engine", "local", "--resume")
    assert job.proc.returncode == 0, job.stderr
    assert job.summary()["units_reused"] >= at_least
    assert_identical(out, ref)
    assert not list(out.parent.glob(f".{out.name}.staging"))


# ============================================================================ 1. a unit worker dies
@pytest.mark.parametrize("at", ["first", "middle", "last"])
def test_killed_unit_worker_is_redone_or_fails_cleanly(
    dataset: Path, reference: Reference, tmp_path: Path, jobs: list[Job], at: str
) -> None:
    """SIGKILL one worker while it runs a unit: the first unit, half-way, one of the last two."""
    out = tmp_path / "out"
    job = Job.start(dataset, out, "--engine", "ray")
    jobs.append(job)
    after = {"first": 0, "middle": N_FILES // 2, "last": N_FILES - 2}[at]
    killed: tuple[int, int] | None = None
    deadline = time.monotonic() + JOB_TIMEOUT
    while job.running() and time.monotonic() < deadline:
        if killed is None:
            done = job.units_committed()
            workers = job.unit_workers()
            if workers and done >= after and (at != "first" or done == 0):
                os.kill(workers[0], signal.SIGKILL)
                killed = (workers[0], done)
        time.sleep(0.02)
    rc = job.wait()
    assert killed is not None, f"no unit worker seen at {at!r}: {job.stderr}"
    if rc == 0:  # Ray redid the unit, quietly
        assert error_lines(job.stderr) == []
        assert_identical(out, reference)
        assert job.summary()["units"] == N_FILES
        return
    assert rc == 3, job.stderr  # a worker lost for good: one line, nothing committed
    assert_one_line(job, "worker")
    assert_nothing_committed(out)
    resume_identical(dataset, out, reference)


def test_unit_whose_worker_always_dies_fails_in_bounded_time(
    dataset: Path, reference: Reference, tmp_path: Path, jobs: list[Job]
) -> None:
    """Every unit worker SIGKILLed as it appears (a unit that always crashes its worker: out of
    memory, native code): Ray redoes a unit a few times (UNIT_RETRIES), then the job fails with
    one line, exit 3, instead of retrying forever (Ray Data's default for map tasks)."""
    out = tmp_path / "out"
    job = Job.start(dataset, out, "--engine", "ray")
    jobs.append(job)
    kills = 0
    deadline = time.monotonic() + JOB_TIMEOUT
    while job.running() and time.monotonic() < deadline:
        for pid in job.unit_workers():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                kills += 1
        time.sleep(0.02)
    rc = job.wait()
    assert rc == 3, job.stderr
    assert kills >= 4, kills  # the first attempt and 3 retries of one unit, at least
    assert_one_line(job, "worker", "nothing was committed")
    assert_nothing_committed(out)
    resume_identical(dataset, out, reference)


# ============================================================================ 2. SIGINT / SIGTERM
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_stops_the_job_and_its_ray(
    dataset: Path, reference: Reference, tmp_path: Path, jobs: list[Job], sig: signal.Signals
) -> None:
    out = tmp_path / "out"
    job = Job.start(dataset, out, "--engine", "ray")
    jobs.append(job)
    deadline = time.monotonic() + JOB_TIMEOUT
    while job.running() and job.units_committed() < 4 and time.monotonic() < deadline:
        job.descendants()
        time.sleep(0.05)
    assert job.running(), f"the job ended before 4 units were committed: {job.stderr}"
    assert any("raylet" in _title(p.pid) for p in job.seen.values()), "no Ray of its own?"
    committed = job.units_committed()
    sent = time.monotonic()
    job.proc.send_signal(sig)
    rc = job.wait(90)
    took = time.monotonic() - sent
    assert rc == 128 + sig, job.stderr
    assert took < 60, f"exit {took:.1f} s after {sig.name}"  # a hang guard (idle: ~2 s)
    assert_one_line(job, f"interrupted by {sig.name}", "nothing was committed")
    assert_nothing_committed(out)
    left = job.leftovers()
    end = time.monotonic() + 5
    while left and time.monotonic() < end:
        time.sleep(0.2)
        left = job.leftovers()
    assert not left, f"processes of the job alive 5 s after it exited: {left}"
    resume_identical(dataset, out, reference, at_least=committed)


# ============================================================================ 3. a committed --out
def test_rerun_into_committed_out_is_refused_then_overwritten(
    dataset: Path, reference: Reference, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    first = run(dataset, out, "--engine", "local", "--set", "num_samples=1000")
    assert first.proc.returncode == 0, first.stderr
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert sum(f[1] for f in manifest_files(out)) == 1000

    again = run(dataset, out, "--engine", "local")
    assert again.proc.returncode == 2, again.stderr
    assert_one_line(again, str(out), "--overwrite")
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before
    assert not (tmp_path / ".out.staging").exists()

    over = run(dataset, out, "--engine", "local", "--overwrite")
    assert over.proc.returncode == 0, over.stderr
    assert_identical(out, reference)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out")) == []


# ============================================================================ 4. a full filesystem
def _file_size_limit(limit: int) -> Any:
    def apply() -> None:  # runs in the child before exec
        os.setsid()
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_output_filesystem_refusing_a_write(
    dataset: Path, reference: Reference, tmp_path: Path
) -> None:
    """Every file the job writes is capped at 256 KiB (a sample file is ~1 MiB): EFBIG."""
    out = tmp_path / "out"
    job = run(dataset, out, "--engine", "local", preexec_fn=_file_size_limit(256 * 1024))
    assert job.proc.returncode == 3, job.stderr
    assert_one_line(job, "EFBIG", "File too large", "nothing was committed")
    assert_nothing_committed(out)
    staging = tmp_path / ".out.staging"
    assert not list((staging / "units").iterdir())
    assert not list((staging / "samples").iterdir())  # the temporary file was removed too
    resume_identical(dataset, out, reference)  # with room again, the job finishes


# ======================================================================= 5. bad data in a worker
def _poison(src: Path, dst: Path, column: str) -> str:
    """A copy of the dataset whose middle file holds one non-finite value in ``column``."""
    dst.mkdir()
    files = sorted(src.glob("*.parquet"))
    bad = files[len(files) // 2]
    for f in files:
        if f != bad:
            os.link(f, dst / f.name)
    table = pq.read_table(bad)
    i = table.schema.get_field_index(column)
    col = table.column(column).combine_chunks()
    row = table.num_rows // 2
    if column == "rewards":
        values = col.to_numpy().copy()
        values[row] = np.nan
        new = pa.array(values)
    else:  # obs: a large_list<float> tensor column (Ray's layout); keep type and field metadata
        # Once ray.data is imported in this process (an earlier test), pyarrow reads the column
        # as Ray's tensor extension type: edit its storage and wrap it back.
        ext = col.type if isinstance(col, pa.ExtensionArray) else None
        storage = col.storage if ext is not None else col
        flat = storage.flatten().to_numpy().copy()
        width = len(flat) // len(storage)
        flat[row * width] = np.inf
        new = pa.LargeListArray.from_arrays(storage.offsets, pa.array(flat), type=storage.type)
        if ext is not None:
            new = pa.ExtensionArray.from_storage(ext, new)
    table = table.set_column(i, table.schema.field(i), new)
    pq.write_table(table, dst / bad.name)
    return bad.name


@pytest.mark.parametrize("column", ["rewards", "obs"])
def test_bad_value_in_a_worker_is_one_line_naming_the_file(
    dataset: Path, tmp_path: Path, column: str
) -> None:
    data = tmp_path / "data"
    name = _poison(dataset, data, column)
    out = tmp_path / "out"
    # The reward in a Ray worker; the observation in-process (same units, same one line).
    if column == "rewards":
        job = run(data, out, "--engine", "ray")
    else:
        job = run(data, out, "--engine", "local", "--set", "check_finite_obs=true")
    assert job.proc.returncode == 2, job.stderr
    assert_one_line(job, name, f"column '{column}'")
    assert_nothing_committed(out)
