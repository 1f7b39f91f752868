"""Planning the batch job over many small files (issue 33): plan seconds and seconds to the
first unit against the number of files, on the local disk and on an S3 server, for

* ``old``: what the job did before the scan, one file after another: the preflight's format
  check (every footer), the serial plan (``tests/jobs/plan_reference.py``: every footer again,
  then every file's key columns, by path) and each file's content fingerprint;
* ``one_thread``: one scan per file (``jobs/batch/scan.py``), one file after another;
* ``threads``: the same scans in a thread pool (the local engine's planning);
* ``ray`` (asked for by ``--modes``): the same scans as Ray tasks on a local instance of as
  many CPUs as the machine's, started once before the rounds (processes: no GIL between them);
* ``index``: the plan from the folder's ``_index.parquet`` (written once, untimed, and timed
  on its own line ``<set>.index_write``), each entry checked against the listing.

``plan`` lines time the listing (``expand_paths``), the plan and the fingerprints: what the job's
``plan`` phase holds before its staging opens. ``first_unit`` lines (``threads`` and ``index``)
time ``run_pipeline(..., engine="local")`` from its call to the first progress report, the
moment the first unit starts (a dry run, stopped there). The sides run in interleaved rounds
(A B C, C B A, ...; medians). Files: RLlib-layout CartPole rows cut 20 rows a file from the
repo's dataset, tiled with fresh episode ids (episodes cross files), cached under
``.bench/planning``. The S3 server is SeaweedFS started as the tests start it
(``tests/stores.py``), on loopback, stopped by its process group.

    python benchmarks/bench_planning.py [--files 1000,10000,100000] [--stores local,s3]
        [--modes old,one_thread,threads,index] [--rounds 3] [--s3-max 10000]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as C
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

SCRATCH = Path(os.environ.get("OFFLINE_PRELEARNER_BENCH_DIR") or C.REPO / ".bench") / "planning"
ROWS_PER_FILE = 20


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def make_files(folder: Path, n: int) -> Path:
    """``n`` files of 20 CartPole rows (cached: a folder holding ``n`` files is reused)."""
    if folder.is_dir() and len(list(folder.glob("part-*.parquet"))) == n:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    src = pq.read_table(sorted((C.REPO / "datasets/cartpole-v1/rows").glob("*.parquet"))[0])
    per_copy = src.num_rows // ROWS_PER_FILE
    for i in range(n):
        copy, k = divmod(i, per_copy)
        part = src.slice(k * ROWS_PER_FILE, ROWS_PER_FILE)
        eps = pc.binary_join_element_wise(part.column("eps_id"), pa.scalar(f"-{copy}"), "")
        part = part.set_column(part.schema.get_field_index("eps_id"), "eps_id", eps)
        pq.write_table(part, folder / f"part-{i:06d}.parquet")
    C.log(f"wrote {n} files to {folder}")
    return folder


def upload(folder: Path, fs: Any, prefix: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def put(p: Path) -> None:
        with fs.open_output_stream(f"{prefix}/{p.name}") as out:
            out.write(p.read_bytes())

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, sorted(folder.glob("part-*.parquet"))))


class _First(Exception):
    pass


def plan_once(mode: str, path: str, ref: Any) -> float:
    """Seconds to list, plan and fingerprint ``path`` one way."""
    from offline_prelearner.config import PreLearnerConfig
    from offline_prelearner.io.sources import check_one_format, expand_paths
    from offline_prelearner.jobs.batch.planner import plan_job
    from offline_prelearner.jobs.batch.scan import ThreadScanner
    from offline_prelearner.jobs.commit import input_fingerprint

    config = PreLearnerConfig().with_updates({"format": "rows"})
    start = time.perf_counter()
    files = expand_paths(path)
    if mode == "old":  # the old job's preflight read every footer for the format, too
        check_one_format(files)
        plan = ref.serial_plan(files, config)
        _ = [input_fingerprint(f.path) for f in plan.files]
    else:
        scanner = ThreadScanner(1) if mode == "one_thread" else ThreadScanner()
        if mode == "ray":
            from offline_prelearner.jobs.batch.scan import RayScanner

            scanner = RayScanner()
        plan_job(path if mode == "index" else [path], files, config, scanner)
    return time.perf_counter() - start


def first_unit(mode: str, path: str) -> float:
    """Seconds from ``run_pipeline``'s call to its first unit (a local dry run, stopped there)."""
    from offline_prelearner import run_pipeline

    def stop(*_: Any) -> None:
        raise _First

    start = time.perf_counter()
    with contextlib.suppress(_First):
        run_pipeline(
            path if mode == "index" else [path], {"format": "rows"}, engine="local", progress=stop
        )
    return time.perf_counter() - start


def run_set(store: str, n: int, path: str, modes: list[str], rounds: int, ref: Any) -> None:
    from offline_prelearner.jobs.batch.index import write_index

    if "index" in modes:
        t = time.perf_counter()
        done = write_index(path)
        secs = time.perf_counter() - t
        C.emit(
            {
                "bench": f"planning.{store}.{n}.index_write",
                "impl": "threads",
                "throughput": n / secs,
                "unit": "files/s",
                "seconds": round(secs, 3),
                "peak_mem_mb": None,
                "n": n,
                "index_bytes": done.bytes,
                "loadavg_1m": round(os.getloadavg()[0], 2),
            }
        )
    if "ray" in modes:  # started once, outside the timed spans
        import ray

        if not ray.is_initialized():
            ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    times: dict[tuple[str, str], list[float]] = {}
    for r in range(rounds):
        order = modes if r % 2 == 0 else modes[::-1]
        for mode in order:
            times.setdefault(("plan", mode), []).append(plan_once(mode, path, ref))
            if mode in ("threads", "index"):
                times.setdefault(("first_unit", mode), []).append(first_unit(mode, path))
    for (what, mode), xs in times.items():
        med = statistics.median(xs)
        C.emit(
            {
                "bench": f"planning.{store}.{n}.{what}",
                "impl": mode,
                "throughput": round(n / med, 1),
                "unit": "files/s",
                "seconds": round(med, 3),
                "seconds_min": round(min(xs), 3),
                "seconds_max": round(max(xs), 3),
                "rounds": len(xs),
                "peak_mem_mb": None,
                "n": n,
                "loadavg_1m": round(os.getloadavg()[0], 2),
            }
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--files", default="1000,10000")
    p.add_argument("--stores", default="local")
    p.add_argument("--modes", default="old,one_thread,threads,index")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--s3-max",
        type=int,
        default=10_000,
        help="the largest file count uploaded to the S3 server",
    )
    args = p.parse_args()
    sizes = [int(x) for x in args.files.split(",")]
    modes = args.modes.split(",")
    C.emit(C.header("bench_planning.py", argv=sys.argv[1:]))
    ref = _load("_plan_reference", C.REPO / "tests" / "jobs" / "plan_reference.py")
    SCRATCH.mkdir(parents=True, exist_ok=True)
    stores = args.stores.split(",")
    if "local" in stores:
        for n in sizes:
            folder = make_files(SCRATCH / f"local-{n}", n)
            (folder / "_index.parquet").unlink(missing_ok=True)
            run_set("local", n, str(folder), modes, args.rounds, ref)
    if "s3" in stores:
        stores_py = _load("_test_stores", C.REPO / "tests" / "stores.py")
        work = Path(tempfile.mkdtemp(prefix="s3-", dir=SCRATCH))
        server = stores_py.SeaweedS3(work)
        # a SIGTERM (a killed run) stops the server too: the finally below runs
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        server.start()
        try:
            os.environ.update(server.env)
            fs = server.filesystem()
            for n in [n for n in sizes if n <= args.s3_max]:
                folder = make_files(SCRATCH / f"local-{n}", n)
                prefix = f"{server.bucket}/planning-{n}"
                t = time.perf_counter()
                upload(folder, fs, prefix)
                C.log(f"uploaded {n} files in {time.perf_counter() - t:.1f} s")
                run_set("s3", n, f"s3://{prefix}", modes, args.rounds, ref)
        finally:
            server.stop()
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(C.REPO / "tests" / "jobs"))
    main()
