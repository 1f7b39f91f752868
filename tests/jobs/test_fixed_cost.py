"""The end of a Ray job, as users run it: ``offline-prelearner process ... --engine ray --json``.

Once its output is committed and its line printed, the CLI exits without waiting for
``ray.shutdown()`` (seconds; more than ten on 16 cores): its local Ray instance is left to the
watchdog (``jobs/session/reaper.py``), which ends it once the CLI is gone. So:

* the process exits within ``LINE_TO_EXIT`` of printing its JSON line, exit status 0, and that
  line carries ``phases`` as ``stats.json`` does (the Ray start counted in ``engine_start``);
* no process of its Ray instance (gcs_server, raylet, agents, workers) outlives it by more than
  ``GONE_AFTER_EXIT``: every process seen while it ran -- its session (``start_new_session``),
  its descendants, and whatever carries the instance's mark (``OFFLINE_PRELEARNER_RAY_OWNER``,
  whose value starts with the CLI's pid) -- is gone, by pid and start time;
* a job that fails in a worker (a NaN reward) keeps its exit status (2) and its one line, and
  leaves no process either.

Ray's temp dir is a short folder of this module's. Only processes these tests started are killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SHIPPED = REPO / "datasets" / "cartpole-v1-heuristic" / "rows"
OWNER_ENV = "OFFLINE_PRELEARNER_RAY_OWNER"  # jobs/session/reaper.py's mark
LINE_TO_EXIT = 1.0  # seconds from the JSON line to the exit (ray.shutdown(): 1-2 s on 2 cores)
GONE_AFTER_EXIT = 8.0  # the watchdog's REAP_SECONDS (5) and its look at the table
JOB_TIMEOUT = 180.0


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _cmd(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return ""
    return " ".join(c.decode(errors="replace").rsplit("/", 1)[-1] for c in cmd[:3])[:90]


def _marked(pid: int, prefix: bytes) -> bool:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(e.startswith(prefix) for e in env)


@dataclass
class Watch:
    """The CLI's process and every process of its Ray instance seen while it ran."""

    proc: subprocess.Popen[bytes]
    stdout: Path
    seen: dict[int, int] = field(default_factory=dict)  # pid -> start time
    names: dict[int, str] = field(default_factory=dict)
    line_at: float | None = None
    exit_at: float | None = None

    def look(self) -> None:
        cli = self.proc.pid
        prefix = f"{OWNER_ENV}={cli}-".encode()
        table = {}
        for d in os.listdir("/proc"):
            if d.isdigit() and int(d) != cli and (f := _stat(int(d))) is not None:
                table[int(d)] = f
        grew = True
        while grew:  # the session, the descendants (of the CLI or of one seen), the marked
            grew = False
            for pid, f in table.items():
                if pid in self.seen or f[0] in ("Z", "X"):
                    continue
                ppid, sid = int(f[1]), int(f[3])
                if sid == cli or ppid == cli or ppid in self.seen or _marked(pid, prefix):
                    self.seen[pid] = int(f[19])
                    grew = True
        for pid in self.seen:  # seen between its fork and its exec, a process shows no name
            if pid in table:  # yet, or its parent's (the raylet as "python -m ..."): the last
                self.names[pid] = _cmd(pid) or self.names.get(pid, "")  # name it shows counts

    def alive(self) -> list[str]:
        left = []
        for pid, start in self.seen.items():
            f = _stat(pid)
            if f is not None and int(f[19]) == start and f[0] not in ("Z", "X"):
                left.append(f"{pid} {self.names.get(pid, '')}")
        return left

    def run(self) -> int:
        end = time.monotonic() + JOB_TIMEOUT
        while self.proc.poll() is None:
            if time.monotonic() > end:
                self.kill()
                pytest.fail("the job did not end in time (a hang)")
            self.look()
            if self.line_at is None and b"\n" in self.stdout.read_bytes():
                self.line_at = time.monotonic()
            time.sleep(0.02)
        self.exit_at = time.monotonic()
        if self.line_at is None and b"\n" in self.stdout.read_bytes():
            self.line_at = self.exit_at
        return int(self.proc.returncode)

    def left_after_exit(self) -> list[str]:
        end = time.monotonic() + GONE_AFTER_EXIT
        left = self.alive()
        while left and time.monotonic() < end:
            time.sleep(0.1)
            left = self.alive()
        return left

    def kill(self) -> None:
        for pid in self.seen:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                f = _stat(pid)
                if f is not None and int(f[19]) == self.seen[pid]:
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    # Unix socket paths are limited to ~107 bytes: a short folder, not pytest's tmp_path.
    d = Path(tempfile.mkdtemp(prefix="opl-fc-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _process(data: Path, out: Path, logs: Path, ray_tmp: Path) -> Watch:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_TMPDIR"] = str(ray_tmp)
    cmd = [sys.executable, "-m", "offline_prelearner", "process", str(data), "--out", str(out)]
    cmd += ["--engine", "ray", "--json"]
    logs.mkdir()
    with open(logs / "stdout", "wb") as so, open(logs / "stderr", "wb") as se:
        proc = subprocess.Popen(cmd, env=env, stdout=so, stderr=se, start_new_session=True)
    return Watch(proc, logs / "stdout")


def _finish(watch: Watch) -> list[str]:
    try:
        return watch.left_after_exit()
    finally:
        watch.kill()  # whatever the test found, nothing of it stays


def test_cli_exits_after_its_line_and_its_ray_instance_goes_with_it(
    tmp_path: Path, ray_tmp: Path
) -> None:
    watch = _process(SHIPPED, tmp_path / "out", tmp_path / "logs", ray_tmp)
    code = watch.run()
    left = _finish(watch)
    err = (tmp_path / "logs" / "stderr").read_text()
    assert code == 0, err
    assert err == "", err  # nothing from Ray's threads or exit hooks
    ran = " ".join(watch.names.values())
    assert "raylet" in ran and "gcs_server" in ran, f"no Ray instance seen: {watch.names}"
    assert not left, f"processes of the job's Ray instance alive after it exited: {left}"
    assert watch.line_at is not None and watch.exit_at is not None
    waited = watch.exit_at - watch.line_at
    assert waited < LINE_TO_EXIT, f"the CLI waited {waited:.2f} s after its line (Ray's shutdown?)"
    summary = json.loads(watch.stdout.read_text())
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert summary["phases"] == stats["phases"]
    phases = stats["phases"]
    assert phases["engine_start"] > 0.5  # ray.init and the first task: seconds, never units
    assert phases["units"] > 0.0 and phases["commit"] > 0.0
    assert phases["stop"] < 0.5  # the instance is left to the watchdog: nothing waits
    assert stats["samples_written"] == summary["samples_written"] > 0


def test_a_job_failing_in_a_worker_keeps_its_exit_status_and_leaves_no_process(
    tmp_path: Path, ray_tmp: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    files = sorted(SHIPPED.glob("*.parquet"))
    for f in files:
        shutil.copy(f, data / f.name)
    bad = pq.read_table(files[0])
    rewards = bad.column("rewards").to_numpy().astype(np.float64)
    rewards[len(rewards) // 2] = np.nan
    bad = bad.set_column(bad.schema.get_field_index("rewards"), "rewards", pa.array(rewards))
    pq.write_table(bad, data / files[0].name)
    watch = _process(data, tmp_path / "out", tmp_path / "logs", ray_tmp)
    code = watch.run()
    left = _finish(watch)
    err = (tmp_path / "logs" / "stderr").read_text()
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "rewards" in err, err
    assert files[0].name in err, err
    assert not (tmp_path / "out").exists()
    assert "raylet" in " ".join(watch.names.values())
    assert not left, f"processes of the job's Ray instance alive after it exited: {left}"
