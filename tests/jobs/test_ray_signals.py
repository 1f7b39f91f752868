"""Ctrl-C, SIGTERM and SIGKILL on the Ray engine, and clusters nobody named, as users meet them.

Each job is ``python -m offline_prelearner process <data> --out <out> --engine ray --json`` on
198,000 CartPole rows (the shipped dataset under 66 sets of episode ids, 10 files, one unit per
file: a few seconds of Ray work), started in a session of its own (``start_new_session``): every
process it starts -- Ray's gcs_server, raylet, agents and workers, our watchdog -- carries the
job's pid as its session id, which is how "a Ray process of ours" is found here. Ray's temp dir
(``RAY_TMPDIR``) is a folder of this module's, so no ``/tmp/ray`` of other runs is read or written.

* **SIGINT to the process group** (what a terminal's Ctrl-C sends) at seeded moments spread over
  the phases -- Python still importing, planning, ``ray.init``, just after it, the units, the last
  unit (the commit follows), after the summary (Ray's shutdown): the job exits 130 with one line
  and nothing at ``--out``, or 0 with ``--out`` committed and complete (never 130 after a commit,
  never a traceback, a crash or a second line), and no process of its session is alive 5 s after
  it exited. 5 moments by default; ``OFFLINE_PRELEARNER_SIGNAL_TRIES=20`` runs 20
  (``OFFLINE_PRELEARNER_SIGNAL_SEED`` draws other delays).
* **SIGTERM while Ray starts** (to the driver, as ``kill`` sends; to the group, as a supervisor
  stopping everything sends) and during the units: exit 143, one line (it was a bare exit 15).
* **SIGKILL of the driver** mid-job: Ray's processes are gone within 10 s (the raylet's agents
  used to live ~60 s more).
* **A stale ``ray_current_cluster``** (a past ``ray start``'s address, its cluster dead) lies in
  Ray's temp dir of every job here: a job with no address starts a fresh local instance (the
  jobs above: they used to hang on the dead address, killed at 100-200 s); ``RAY_ADDRESS=auto``
  or ``--address`` at a dead cluster: one line within seconds, exit 2.

Only processes these tests started are killed: by session id, and only sessions they created.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import REPO

from offline_prelearner.jobs.commit import file_sha256

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SHIPPED = REPO / "datasets" / "cartpole-v1-heuristic" / "rows"
COPIES = 66  # x 3,000 shipped rows
N_FILES = 10
TRIES_ENV = "OFFLINE_PRELEARNER_SIGNAL_TRIES"
TRIES = int(os.environ.get(TRIES_ENV, "5"))
SEED = int(os.environ.get("OFFLINE_PRELEARNER_SIGNAL_SEED", "20"))  # the moments' jitter
JOB_TIMEOUT = 150.0  # seconds: a hang fails the test, not the whole run
EXIT_AFTER_SIGNAL = 90.0  # a hang guard: an interrupted job exits in a few seconds when idle
GONE_AFTER_EXIT = 5.0


# ============================================================================ processes
def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def session_members(sid: int) -> list[tuple[int, str]]:
    """Live (not zombie) processes of session ``sid``, with their command lines."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == sid:
            continue
        f = _stat(int(d))
        if f is None or int(f[3]) != sid or f[0] in ("Z", "X"):
            continue
        try:
            raw = Path(f"/proc/{d}/cmdline").read_bytes()
        except OSError:
            continue
        cmd = raw.replace(b"\0", b" ").decode(errors="replace").strip()
        found.append((int(d), cmd[:90]))
    return found


def kill_session(sid: int) -> None:
    for pid, _ in session_members(sid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


@dataclass
class Job:
    proc: subprocess.Popen[bytes]
    out: Path
    logs: Path
    started: float

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def stdout(self) -> str:
        return (self.logs / "stdout").read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return (self.logs / "stderr").read_text(errors="replace")

    def running(self) -> bool:
        return self.proc.poll() is None

    def members(self) -> list[tuple[int, str]]:
        return session_members(self.pid)

    def has(self, word: str) -> bool:
        return any(word in cmd for _, cmd in self.members())

    def units_done(self) -> int:
        return sum(1 for _ in self.out.parent.glob(f".{self.out.name}.staging*/**/unit-*.json"))

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_session(self.pid)
            self.proc.kill()
            self.proc.wait(10)
            pytest.fail(f"the job did not end within {timeout:.0f} s (a hang): {self.stderr}")

    def left_after_exit(self) -> list[tuple[int, str]]:
        """Processes of its session still alive GONE_AFTER_EXIT seconds after it exited."""
        end = time.monotonic() + GONE_AFTER_EXIT
        left = self.members()
        while left and time.monotonic() < end:
            time.sleep(0.1)
            left = self.members()
        return left


@pytest.fixture(scope="module")
def ray_tmp() -> Iterator[Path]:
    """Ray's temp dir for every job here, holding a stale ``ray_current_cluster``: the address a
    past ``ray start`` left, its cluster gone. Every job must start a fresh local instance.

    The port stays bound (not listening) while the module runs: a connection is refused, and no
    Ray instance started meanwhile can take the port and make the stale address answer."""
    # Unix socket paths are limited to ~107 bytes: a short folder, not pytest's tmp_path.
    d = Path(tempfile.mkdtemp(prefix="opl-sig-"))
    with socket.socket() as held:
        held.bind(("", 0))
        (d / "ray").mkdir()
        (d / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{held.getsockname()[1]}")
        yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def stale_address(ray_tmp: Path) -> str:
    return (ray_tmp / "ray" / "ray_current_cluster").read_text()


@pytest.fixture
def start(ray_tmp: Path, tmp_path: Path) -> Iterator[Callable[..., Job]]:
    jobs: list[Job] = []

    def _start(data: Path, *extra: str, env: dict[str, str] | None = None) -> Job:
        out = tmp_path / f"out{len(jobs)}"
        logs = tmp_path / f"logs{len(jobs)}"
        logs.mkdir()
        e = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        e.update(
            RAY_TMPDIR=str(ray_tmp),
            OFFLINE_PRELEARNER_UNIT_MIN_ROWS=str(3000 * COPIES // N_FILES),
            RAY_USAGE_STATS_ENABLED="0",
        )
        e.update(env or {})
        cmd = [sys.executable, "-m", "offline_prelearner", "process", str(data)]
        cmd += ["--out", str(out), "--engine", "ray", "--json", *extra]
        with open(logs / "stdout", "wb") as so, open(logs / "stderr", "wb") as se:
            proc = subprocess.Popen(cmd, env=e, stdout=so, stderr=se, start_new_session=True)
        job = Job(proc, out, logs, time.monotonic())
        jobs.append(job)
        return job

    yield _start
    for job in jobs:  # only the sessions these tests created
        if job.running():
            kill_session(job.pid)
            job.proc.kill()
            job.proc.wait(10)
        kill_session(job.pid)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """198,000 rows: the shipped 3,000 under COPIES sets of episode ids, in N_FILES files."""
    folder = tmp_path_factory.mktemp("signals") / "rows"
    folder.mkdir()
    src = pa.concat_tables(pq.read_table(f) for f in sorted(SHIPPED.glob("*.parquet")))
    ids = src.column("eps_id")
    copies = [
        src.set_column(0, "eps_id", pc.binary_join_element_wise(ids, pa.scalar(f"-{k}"), ""))
        for k in range(COPIES)
    ]
    table = pa.concat_tables(copies)
    per = table.num_rows // N_FILES
    for i in range(N_FILES):
        pq.write_table(table.slice(i * per, per), folder / f"rows-{i:05d}.parquet")
    return folder


# ============================================================================ what a job left
def error_lines(job: Job) -> list[str]:
    return [ln for ln in re.split(r"[\r\n]+", job.stderr) if ln.strip()]


def assert_complete(out: Path) -> None:
    """``--out`` is committed: the manifest lists every file, each of its rows and sha256."""
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["complete"] is True
    rows = 0
    for f in manifest["files"]:
        path = out / "samples" / f["name"]
        assert file_sha256(path) == f["sha256"], f["name"]
        assert pq.ParquetFile(path).metadata.num_rows == f["rows"], f["name"]
        rows += f["rows"]
    assert rows == 3000 * COPIES  # sample_all: every transition once


def assert_clean_end(job: Job, rc: int, name: str = "SIGINT") -> None:
    lines = error_lines(job)
    assert "Traceback" not in job.stderr, job.stderr
    assert len(lines) <= 1, job.stderr
    if rc == 0:
        assert_complete(job.out)
        assert json.loads(job.stdout.strip().splitlines()[-1])["samples_written"] == 3000 * COPIES
    else:
        assert rc == 128 + signal.Signals[name], (rc, job.stderr)
        assert len(lines) == 1 and lines[0].startswith("offline-prelearner"), job.stderr
        assert f"interrupted by {name}" in lines[0], lines[0]
        assert not job.out.exists(), sorted(p.name for p in job.out.rglob("*"))
    left = job.left_after_exit()
    assert not left, f"processes of the job alive {GONE_AFTER_EXIT:.0f} s after it exited: {left}"


# ============================================================================ moments
def _until(job: Job, ready: Callable[[], bool], what: str) -> bool:
    """Waits for ``ready()``; False if the job ended first."""
    deadline = time.monotonic() + JOB_TIMEOUT
    while not ready():
        if not job.running():
            return False
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {JOB_TIMEOUT:.0f} s: {job.stderr}")
        time.sleep(0.02)
    return True


#: Where a signal lands: a condition on the job, each a phase of its life.
PHASES: dict[str, Callable[[Job], bool]] = {
    "importing": lambda job: True,
    "planning": lambda job: any(job.out.parent.glob(f".{job.out.name}.staging*")),
    "ray.init": lambda job: job.has("gcs_server"),
    "after ray.init": lambda job: job.has("ray::"),
    "units": lambda job: job.units_done() >= 1,
    "last unit": lambda job: job.units_done() >= N_FILES - 1,  # the commit follows it
    "shutdown": lambda job: bool(job.stdout.strip()),
}


def moments(n: int) -> list[tuple[str, float]]:
    """``n`` seeded (phase, delay after the phase began) pairs, phases in turn: 5 span the job."""
    rng = random.Random(SEED)
    names = list(PHASES)
    order = ["importing", "planning", "ray.init", "units", "shutdown"] if n <= 5 else names
    return [(order[k % len(order)], round(rng.uniform(0.0, 0.6), 3)) for k in range(n)]


@pytest.mark.parametrize(("phase", "delay"), moments(TRIES), ids=lambda v: str(v))
def test_sigint_to_the_group_at_any_moment(
    data: Path, start: Callable[..., Job], phase: str, delay: float
) -> None:
    job = start(data)
    if not _until(job, lambda: PHASES[phase](job), phase):  # too fast to catch: still clean
        assert job.proc.returncode == 0, (job.proc.returncode, job.stderr)
        assert_clean_end(job, 0)
        pytest.skip(f"the job ended before {phase!r} was seen (complete, exit 0)")
    time.sleep(delay)
    sent = time.monotonic()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(job.pid, signal.SIGINT)
    rc = job.wait(JOB_TIMEOUT)
    took = time.monotonic() - sent
    assert rc in (0, 130), (rc, job.stderr)
    if rc == 130:
        assert took < EXIT_AFTER_SIGNAL, f"exit {took:.1f} s after SIGINT"
    assert_clean_end(job, rc)


@pytest.mark.parametrize(
    ("to", "phase"), [("driver", "ray.init"), ("group", "ray.init"), ("driver", "units")]
)
def test_sigterm_is_one_line_and_143(
    data: Path, start: Callable[..., Job], to: str, phase: str
) -> None:
    """While Ray starts (it was a bare exit 15) and during the units (Ray's C++ core printed
    "*** SIGTERM received ***" and a stack before our line)."""
    job = start(data)
    assert _until(job, lambda: PHASES[phase](job), phase), job.stderr
    if to == "driver":
        job.proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(job.pid, signal.SIGTERM)
    rc = job.wait(JOB_TIMEOUT)
    assert rc == 143, (rc, job.stderr)
    assert_clean_end(job, rc, "SIGTERM")


def test_sigkill_of_the_driver_takes_its_ray_along(data: Path, start: Callable[..., Job]) -> None:
    job = start(data)
    assert _until(job, lambda: job.has("ray::IDLE") or job.has("MapBatches"), "a worker"), (
        job.stderr
    )
    ray_procs = [cmd for _, cmd in job.members()]
    assert any("raylet" in c for c in ray_procs), ray_procs
    os.kill(job.pid, signal.SIGKILL)
    job.proc.wait(10)
    end = time.monotonic() + 10
    left = job.members()
    while left and time.monotonic() < end:
        time.sleep(0.2)
        left = job.members()
    assert not left, f"Ray processes alive 10 s after the driver was killed: {left}"


# ============================================================================ clusters nobody named
def _auto_finds(ray_tmp: Path) -> str | None:
    """The port Ray resolves ``address="auto"`` to with this module's temp dir: the stale file's,
    unless exactly one other cluster runs on this machine (Ray then picks that one)."""
    env = {**os.environ, "RAY_TMPDIR": str(ray_tmp), "RAY_ADDRESS": "auto"}
    code = (
        "from ray._private.services import canonicalize_bootstrap_address as c;"
        "print(c('auto').rsplit(':', 1)[1])"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return done.stdout.strip() or None


@pytest.mark.parametrize("how", ["RAY_ADDRESS=auto", "--address"])
def test_an_address_that_does_not_answer_is_one_line_in_seconds(
    data: Path, start: Callable[..., Job], stale_address: str, how: str, ray_tmp: Path
) -> None:
    if how == "--address":
        job = start(data, "--address", stale_address)
    else:
        if _auto_finds(ray_tmp) != stale_address.rsplit(":", 1)[1]:
            pytest.skip("a Ray cluster runs on this machine: 'auto' joins it, as Ray documents")
        job = start(data, env={"RAY_ADDRESS": "auto"})
    rc = job.wait(120)
    assert time.monotonic() - job.started < 120  # a hang guard: Ray would retry ~14 minutes
    assert rc == 2, job.stderr
    lines = error_lines(job)
    assert len(lines) == 1 and "Traceback" not in job.stderr, job.stderr
    port = stale_address.rsplit(":", 1)[1]  # Ray reads 127.0.0.1 as this node's address
    assert re.search(f"no Ray cluster answers at [^ ]+:{port}", lines[0]), lines[0]
    assert not job.out.exists()
    assert not job.left_after_exit()


# ============================================================================ where Python swallows
_SWALLOWED = """
import os, signal, subprocess, time
from offline_prelearner.jobs.session import interrupts
interrupts.install()
# the SIGINT lands while a fork hook runs (as logging's does), sent from inside it: no timing
os.register_at_fork(after_in_parent=lambda: os.kill(os.getpid(), signal.SIGINT))
try:
    subprocess.Popen(["true"], preexec_fn=lambda: None).wait()  # Ray starts its processes so
    time.sleep(2)
    print("not interrupted")
except KeyboardInterrupt:
    print("interrupted", interrupts.received())
"""


def test_an_interrupt_raised_where_python_swallows_it_is_raised_again() -> None:
    """A SIGINT that lands in a fork hook (Ray starting a process, logging's hook running) was
    printed as "Exception ignored ... Traceback" and lost; it is raised again just after."""
    done = subprocess.run(
        [sys.executable, "-c", _SWALLOWED], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == f"interrupted {int(signal.SIGINT)}", (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "ignored" not in done.stderr, done.stderr
