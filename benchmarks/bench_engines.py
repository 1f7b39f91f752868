"""Where ``--engine auto`` switches from in-process to Ray: the whole command, both engines.

For inputs of growing size (CartPole rows recorded by this tool, cached under
``$OFFLINE_PRELEARNER_BENCH_DIR`` or ``<repo>/.bench/engines``), runs ``offline-prelearner process``
as a user does (a fresh process each time, so Ray's start-up is counted) with ``--engine local``
and ``--engine ray``, and prints one JSON line per (size, engine) with the median wall time over
``--repeats`` runs, then a line naming the smallest input size (in bytes) at which Ray was faster.
That figure is what ``LOCAL_ENGINE_MAX_BYTES`` in ``offline_prelearner/jobs/batch_job.py`` is set
from.

    python benchmarks/bench_engines.py [--sizes 5000 100000 1000000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, emit, log

SCRATCH = Path(os.environ.get("OFFLINE_PRELEARNER_BENCH_DIR") or REPO / ".bench") / "engines"


def dataset(rows: int) -> Path:
    """CartPole rows in files of 100k rows (RLlib-like: episodes cut across files), cached."""
    out = SCRATCH / f"cartpole-{rows}"
    if not (out / "_done").exists():
        from offline_prelearner.jobs.record import record_env, write_recording

        shutil.rmtree(out, ignore_errors=True)
        log(f"recording {rows} CartPole steps into {out}")
        rec = record_env("CartPole-v1", rows, seed=0)
        write_recording(rec, out, fmt="rows", rows_per_file=100_000)
        (out / "_done").write_text("ok\n")
    return out


def run(path: Path, engine: str, extra: list[str]) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "offline_prelearner",
                "process",
                str(path),
                "--out",
                f"{tmp}/o",
                "--engine",
                engine,
                "--json",
                *extra,
            ],
            capture_output=True,
            text=True,
            env={k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},
        )
        seconds = time.perf_counter() - start
    if r.returncode != 0:
        raise SystemExit(f"{engine} on {path} failed: {r.stderr.strip()}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[5_000, 100_000, 300_000, 1_000_000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--set", action="append", default=[], help="passed to process as --set")
    args = ap.parse_args()
    extra = [a for s in args.set for a in ("--set", s)]
    crossover = None
    for rows in args.sizes:
        path = dataset(rows)
        size = sum(p.stat().st_size for p in path.glob("*.parquet"))
        medians = {}
        for engine in ("local", "ray"):
            times = [run(path, engine, extra) for _ in range(args.repeats)]
            medians[engine] = statistics.median(times)
            emit(
                {
                    "bench": "process.engine",
                    "impl": engine,
                    "n": rows,
                    "unit": "rows/s",
                    "throughput": rows / medians[engine],
                    "seconds": medians[engine],
                    "seconds_best": min(times),
                    "repeats": args.repeats,
                    "input_bytes": size,
                    "peak_mem_mb": None,
                    "loadavg_1m": os.getloadavg()[0],
                }
            )
        if crossover is None and medians["ray"] < medians["local"]:
            crossover = size
    print(
        json.dumps(
            {"bench": "process.engine", "impl": "crossover", "ray_faster_from_bytes": crossover}
        )
    )


if __name__ == "__main__":
    main()
