"""Kill one unit worker at a random point of a Ray batch job, many times: is the output exact?

Each run starts ``offline-prelearner process DATA --out OUT --engine ray --set sample_all=true
--json`` in its own process group on a CartPole rows dataset (20 files of 20k rows, one unit of
work per file via ``OFFLINE_PRELEARNER_UNIT_MIN_ROWS``) and, once a random number of units
(seeded, 0 to 18 of 20: two run at a time) is committed, SIGKILLs one Ray worker that is running
a unit (``ray::MapBatches(_run_units)``). The output is compared with a clean ``--engine local``
run of the same input: the manifest's files (name, rows, sha256) and the multiset of (eps_id, t)
of the rows. A run that exits non-zero is resumed (``--resume``, in-process) and the resumed
output compared.

One JSON line per run on stdout (``kill_at_s``: seconds after the CLI started)::

    {"run": 3, "kill_after_units": 9, "killed": true, "kill_at_s": 11.3, "units_done_at_kill": 9,
     "exit": 0, "seconds": 17.2, "stderr_lines": 0, "identical": true, "lost_rows": 0,
     "duplicated_rows": 0}

then a summary line (``{"summary": ...}``). A correct job never has ``exit`` 0 with
``identical`` false; ``lost_rows`` and ``duplicated_rows`` stay 0; with ``--json`` a run that
succeeds prints nothing on stderr and one that fails one line.

Data and outputs go under ``$OFFLINE_PRELEARNER_BENCH_DIR`` (default ``<repo>/.bench/faults``);
the dataset is reused across invocations.

Usage: ``python benchmarks/bench_faults.py [--repeats 20] [--seed 0]``
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# as tests/jobs/test_faults.py: 400k rows, 20 units
STEPS, COPIES, ROWS_PER_FILE = 100_000, 4, 20_000
UNIT_TITLE = "_run_units"
TIMEOUT = 300.0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ============================================================================ processes
def _stat(pid: int) -> tuple[int, int, str, int] | None:
    """(ppid, pgid, state, start time) of a process, None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), int(fields[2]), fields[0], int(fields[19])


def _title(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


def descendants(root: int) -> dict[int, int]:
    """{pid: start time} of every descendant of ``root``."""
    table = {}
    for d in os.listdir("/proc"):
        if d.isdigit() and (st := _stat(int(d))) is not None:
            table[int(d)] = st
    kids: dict[int, list[int]] = collections.defaultdict(list)
    for pid, st in table.items():
        kids[st[0]].append(pid)
    out, todo = {}, [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            out[c] = table[c][3]
            todo.append(c)
    return out


class Job:
    def __init__(self, data: Path, out: Path, *extra: str) -> None:
        env = dict(os.environ, OFFLINE_PRELEARNER_UNIT_MIN_ROWS=str(ROWS_PER_FILE))
        env.pop("RAY_ADDRESS", None)
        cmd = [sys.executable, "-m", "offline_prelearner", "process", str(data), "--out", str(out)]
        cmd += ["--set", "sample_all=true", "--json", *extra]
        self.out = out
        self.logs = out.parent / f"{out.name}.logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.logs / "stdout", "wb") as so, open(self.logs / "stderr", "wb") as se:
            self.proc = subprocess.Popen(cmd, env=env, stdout=so, stderr=se, start_new_session=True)
        self.seen: dict[int, int] = {}

    def unit_workers(self) -> list[int]:
        found = descendants(self.proc.pid)
        self.seen.update(found)
        return sorted(pid for pid in found if UNIT_TITLE in _title(pid))

    def units_done(self) -> int:
        units = self.out.parent / f".{self.out.name}.staging" / "units"
        with contextlib.suppress(OSError):
            return sum(1 for n in os.listdir(units) if n.startswith("unit-"))
        return 0

    def wait(self, timeout: float = TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return -999  # a hang; cleanup() ends it
        finally:
            self.cleanup()

    def cleanup(self) -> None:
        """Ends what this job started, nothing else: its group while it leads it, then the
        descendants it had (by pid and start time)."""
        if self.proc.poll() is None:
            self.unit_workers()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        for pid, start in self.seen.items():
            st = _stat(pid)
            if st is not None and st[3] == start and st[2] != "Z":
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def summary(self) -> dict[str, Any] | None:
        lines = (self.logs / "stdout").read_text(errors="replace").strip().splitlines()
        with contextlib.suppress(IndexError, ValueError):
            return json.loads(lines[-1])
        return None

    def stderr_lines(self) -> list[str]:
        text = (self.logs / "stderr").read_text(errors="replace")
        return [ln for ln in text.splitlines() if ln.strip()]

    def error(self) -> str:
        err = self.stderr_lines()
        return err[-1] if err else ""


# ============================================================================ data and outputs
def make_data(root: Path) -> Path:
    folder = root / "cartpole"
    if (folder / "_done").exists():
        return folder
    from offline_prelearner.jobs.record import record_env, write_recording

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    log(f"recording {STEPS} CartPole steps, written {COPIES} times ...")
    rec = record_env("CartPole-v1", STEPS, seed=0)
    ids = [ep.id for ep in rec.episodes]
    n = 0
    for k in range(COPIES):
        for ep, eid in zip(rec.episodes, ids, strict=True):
            ep.id = f"{eid}-{k}"
        tmp = root / f"copy{k}"
        for f in sorted(write_recording(rec, tmp, rows_per_file=ROWS_PER_FILE)):
            os.replace(f, folder / f"cartpole-v1-rows-{n:05d}.parquet")
            n += 1
        shutil.rmtree(tmp)
    (folder / "_done").write_text(f"{n} files\n")
    return folder


def manifest_files(out: Path) -> list[tuple[str, int, str]] | None:
    try:
        manifest = json.loads((out / "_manifest.json").read_text())
    except (OSError, ValueError):
        return None
    return [(f["name"], f["rows"], f["sha256"]) for f in manifest["files"]]


def row_keys(out: Path) -> collections.Counter[tuple[str, int]]:
    import pyarrow.parquet as pq

    keys: collections.Counter[tuple[str, int]] = collections.Counter()
    for name, _, _ in manifest_files(out) or []:
        t = pq.read_table(out / "samples" / name, columns=["eps_id", "t"])
        keys.update(zip(t.column("eps_id").to_pylist(), t.column("t").to_pylist(), strict=True))
    return keys


def compare(out: Path, ref_files: list[Any], ref_keys: collections.Counter[Any]) -> dict[str, Any]:
    files = manifest_files(out)
    if files is None:
        return {"identical": False, "lost_rows": None, "duplicated_rows": None}
    keys = row_keys(out)
    return {
        "identical": files == ref_files and keys == ref_keys,
        "lost_rows": sum((ref_keys - keys).values()),
        "duplicated_rows": sum((keys - ref_keys).values()),
    }


# ============================================================================ runs
def kill_run(data: Path, out: Path, after_units: int) -> dict[str, Any]:
    """A Ray run; one unit worker SIGKILLed once ``after_units`` units are committed."""
    t0 = time.monotonic()
    job = Job(data, out, "--engine", "ray")
    killed: dict[str, Any] = {"killed": False, "kill_at_s": None, "units_done_at_kill": None}
    while job.proc.poll() is None and time.monotonic() - t0 < TIMEOUT:
        workers = job.unit_workers()
        if not killed["killed"] and workers and (done := job.units_done()) >= after_units:
            with contextlib.suppress(ProcessLookupError):
                os.kill(workers[0], signal.SIGKILL)
                killed = {
                    "killed": True,
                    "kill_at_s": round(time.monotonic() - t0, 2),
                    "units_done_at_kill": done,
                }
        time.sleep(0.02)
    rc = job.wait()
    row: dict[str, Any] = {**killed, "exit": rc, "seconds": round(time.monotonic() - t0, 1)}
    row["stderr_lines"] = len(job.stderr_lines())  # --json: 0 on success, 1 on a failure
    if rc != 0:
        row["error"] = job.error()
        resumed = Job(data, out, "--engine", "local", "--resume")
        row["resume_exit"] = resumed.wait()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    root = Path(os.environ.get("OFFLINE_PRELEARNER_BENCH_DIR") or REPO / ".bench" / "faults")
    root.mkdir(parents=True, exist_ok=True)
    data = make_data(root)
    runs = root / "runs"
    shutil.rmtree(runs, ignore_errors=True)
    runs.mkdir()

    log("reference: a clean --engine local run ...")
    ref = Job(data, runs / "reference", "--engine", "local")
    if ref.wait() != 0:
        sys.exit(f"the reference run failed: {ref.error()}")
    ref_files = manifest_files(runs / "reference")
    ref_keys = row_keys(runs / "reference")
    assert ref_files is not None

    rng = random.Random(args.seed)
    n_units = len(ref_files)  # one sample file per unit here
    rows = []
    for i in range(args.repeats):
        after = rng.randrange(0, n_units - 1)  # 2 units run at a time: one of them is left
        out = runs / f"run-{i:03d}"
        row: dict[str, Any] = {"run": i, "kill_after_units": after}
        row.update(kill_run(data, out, after))
        row.update(compare(out, ref_files, ref_keys))  # the resumed output after a failure
        print(json.dumps(row), flush=True)
        rows.append(row)
        shutil.rmtree(out, ignore_errors=True)
        if row["stderr_lines"] == (row["exit"] != 0):  # else keep the logs to look at
            shutil.rmtree(runs / f"run-{i:03d}.logs", ignore_errors=True)

    bad = [r["run"] for r in rows if r["exit"] == 0 and not r["identical"]]
    summary = {
        "summary": True,
        "runs": len(rows),
        "killed": sum(r["killed"] for r in rows),
        "exit_0": sum(r["exit"] == 0 for r in rows),
        "failed_cleanly": sum(r["exit"] != 0 and r.get("resume_exit") == 0 for r in rows),
        "identical": sum(bool(r["identical"]) for r in rows),
        "exit_0_not_identical": bad,
        "noisy_stderr": [r["run"] for r in rows if r["stderr_lines"] != (r["exit"] != 0)],
        "lost_rows": sum(r["lost_rows"] or 0 for r in rows),
        "duplicated_rows": sum(r["duplicated_rows"] or 0 for r in rows),
        "run_seconds_median": statistics.median(r["seconds"] for r in rows) if rows else None,
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
