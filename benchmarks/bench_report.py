"""``report`` against ``inspect`` on the same dataset: the report may take at most 2x (issue 25).

Writes (once, then reuses) CartPole-sized rows in RLlib's layout and names -- episodes of 5-59
steps cut across ``--files`` files, ``--rows`` rows (default 5M; the generator of the device
benchmarks) -- under ``$OFFLINE_PRELEARNER_BENCH_DATA/report_rows_<rows>`` (default
``<repo>/.bench/data``), then runs ``offline-prelearner inspect DATA --json`` and
``offline-prelearner report DATA --out page.html`` as separate processes, alternately (A B, B A,
...), ``--repeats`` rounds. Each process's wall time, CPU time and peak resident memory
(``wait4``'s rusage of that process alone) is one JSON line; the last lines are the medians and the
ratio report / inspect (of the medians, and the median of the per-round ratios: each round's two
runs ran back to back).

    python benchmarks/bench_report.py [--rows 5000000] [--files 50] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import alternate, emit, header, log
from bench_scaling import make_rows

REPO = Path(__file__).resolve().parent.parent


def rows_once(out: Path, n: int, files: int) -> None:
    """:func:`bench_scaling.make_rows`'s rows, written once: reused when ``out`` holds them all."""
    if len(list(out.glob("part-*.parquet"))) != files:
        make_rows(out, n, files)


def run(command: list[str], env: dict[str, str]) -> dict[str, Any]:
    """One process: its wall seconds and its own peak resident memory (MB)."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}): {err.strip()}")
    cpu = usage.ru_utime + usage.ru_stime  # steadier than wall time on a shared machine
    return {
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu, 3),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=5_000_000)
    p.add_argument("--files", type=int, default=50)
    p.add_argument("--repeats", type=int, default=3, help="rounds (each runs both sides once)")
    p.add_argument("--data", default=None, help="the data folder (default: generated)")
    args = p.parse_args()
    emit(header("bench_report", rows=args.rows))
    base = Path(os.environ.get("OFFLINE_PRELEARNER_BENCH_DATA", REPO / ".bench" / "data"))
    data = Path(args.data) if args.data else base / f"report_rows_{args.rows}"
    if not args.data:
        log(f"data: {data}")
        rows_once(data, args.rows, args.files)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cli = [sys.executable, "-m", "offline_prelearner"]
    with tempfile.TemporaryDirectory() as tmp:
        page = os.path.join(tmp, "report.html")

        def side(name: str, command: list[str]) -> Any:
            def once(r: int) -> list[dict[str, Any]]:
                got = run(command, env)
                line = {"bench": "report_vs_inspect", "impl": name, "rows": args.rows, **got}
                line |= {"n": args.rows, "unit": "rows/s", "peak_mem_mb": got["peak_rss_mb"]}
                return [emit({**line, "round": r, "throughput": args.rows / got["seconds"]})]

            return once

        lines = alternate(
            [
                ("inspect", side("inspect", [*cli, "inspect", str(data), "--json"])),
                ("report", side("report", [*cli, "report", str(data), "--out", page])),
            ],
            args.repeats,
        )
        page_mb = round(os.path.getsize(page) / 2**20, 2)
    by: dict[str, list[dict[str, Any]]] = {"inspect": [], "report": []}
    for x in lines:
        by[x["impl"]].append(x)
    med = {k: statistics.median(x["seconds"] for x in v) for k, v in by.items()}
    cpu = {k: statistics.median(x["cpu_seconds"] for x in v) for k, v in by.items()}
    rss = {k: max(x["peak_rss_mb"] for x in v) for k, v in by.items()}
    rounds = [r["seconds"] / i["seconds"] for i, r in zip(by["inspect"], by["report"], strict=True)]
    emit(
        {
            "bench": "report_vs_inspect",
            "impl": "ratio",
            "rows": args.rows,
            "n": args.rows,
            "unit": "report seconds / inspect seconds",
            "throughput": args.rows / med["report"],
            "seconds": round(med["report"], 3),
            "peak_mem_mb": rss["report"],
            "inspect_seconds": round(med["inspect"], 3),
            "report_seconds": round(med["report"], 3),
            "ratio": round(med["report"] / med["inspect"], 3),
            "ratio_median_of_rounds": round(statistics.median(rounds), 3),
            "ratio_rounds": [round(x, 3) for x in rounds],
            "inspect_cpu_seconds": round(cpu["inspect"], 3),
            "report_cpu_seconds": round(cpu["report"], 3),
            "ratio_cpu": round(cpu["report"] / cpu["inspect"], 3),
            "inspect_peak_rss_mb": rss["inspect"],
            "report_peak_rss_mb": rss["report"],
            "page_mb": page_mb,
            "rounds": args.repeats,
        }
    )


if __name__ == "__main__":
    main()
