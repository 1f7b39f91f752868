"""convert benchmark: steps/s of rows <-> msgpack episodes <-> Minari through ``convert_path``.

Data: the shipped CartPole episodes (``datasets/cartpole-v1/rows``) repeated under new ids to
``--steps`` steps (default 1M, ~44k episodes), written as rows Parquet in RLlib's layout plus ``t``,
100k rows a file (cutting through episodes, as RLlib's recorder does). Then, each timed as
``convert_path`` end to end (read, stitch, validate, write, commit): rows -> episodes,
episodes -> rows, rows -> minari, minari -> rows. One JSON line per pair: ``steps_per_s``
(steps written / wall seconds), the best of ``--repeats``.

``--pixels DIR`` (e.g. ``.bench/data/pixels_rows``: RLlib's layout, 84x84x4 frames) times
instead the rewrite of new-stack rows into the fast tensor layout -- ``offline-prelearner convert
DIR --to rows --layout fast --out OUT`` in a fresh process, wall time to exit (rows written per
second) -- against pyarrow reading the same files (``pq.read_table`` of each, all threads, in this
process: rows read per second), alternating for ``--rounds`` rounds (``_common.alternate``); the
ratio line pairs the two sides of each round. The first line is the header (CPU model, load).

Usage: ``python benchmarks/bench_convert.py [--steps N] [--repeats K] [--work DIR]
[--pixels DIR --rounds R]``
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from offline_prelearner.config import ReadConfig
from offline_prelearner.episodes.ledger import EpisodeBatch
from offline_prelearner.episodes.stitch import stitch_fragments
from offline_prelearner.io.formats.rows.writer import episodes_to_rows
from offline_prelearner.io.readers import make_reader
from offline_prelearner.io.sources import expand_paths, read_table
from offline_prelearner.jobs.convert import convert_path

ROWS = Path(__file__).resolve().parents[1] / "datasets" / "cartpole-v1" / "rows"
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

PAIRS = [("rows", "episodes"), ("episodes", "rows"), ("rows", "minari"), ("minari", "rows")]


def make_rows(out: Path, steps: int, per_file: int = 100_000) -> int:
    """The shipped episodes repeated to ``steps`` steps; returns the steps written."""
    reader = make_reader(ReadConfig(format="rows"))
    total = EpisodeBatch()
    for f in expand_paths(str(ROWS)):
        total.extend(reader.read(read_table(f), source=f))
    base = stitch_fragments(total).episodes
    eps, n, k = [], 0, 0
    while n < steps:
        ep = base[k % len(base)]
        eps.append(ep._replace(id=f"{k:07d}"))
        n += len(ep)
        k += 1
    table = episodes_to_rows(eps, with_t=True)
    out.mkdir(parents=True)
    for i, s in enumerate(range(0, table.num_rows, per_file)):
        pq.write_table(table.slice(s, per_file), out / f"rows-{i:05d}.parquet")
    return table.num_rows


def bench_fast_layout(src: Path, work: Path, rounds: int) -> None:
    """``convert --to rows --layout fast`` of ``src`` against pyarrow's read of the same files."""
    files = C.parquet_files(src)
    rows = sum(pq.read_metadata(f).num_rows for f in files)

    def convert(_: int) -> list[dict[str, Any]]:
        out = work / "fast"
        shutil.rmtree(out, ignore_errors=True)
        cmd = [sys.executable, "-m", "offline_prelearner", "convert", str(src), "--to", "rows"]
        t0 = time.perf_counter()
        subprocess.run(
            [*cmd, "--layout", "fast", "--out", str(out)], check=True, capture_output=True
        )
        seconds = time.perf_counter() - t0
        shutil.rmtree(out)
        return [_line("convert.pixels_to_fast", "ours", rows, seconds, "rows written/s")]

    def read(_: int) -> list[dict[str, Any]]:
        t0, n = time.perf_counter(), 0
        for f in files:
            n += pq.read_table(f).num_rows
        return [
            _line(
                "convert.pixels_to_fast", "pyarrow_read", n, time.perf_counter() - t0, "rows read/s"
            )
        ]

    lines = C.alternate([("convert", convert), ("pyarrow_read", read)], rounds)
    pair = (
        "convert.pixels_to_fast/pyarrow_read",
        ("convert.pixels_to_fast", "ours"),
        ("convert.pixels_to_fast", "pyarrow_read"),
    )
    for line in C.summarize_rounds(lines, [pair]):
        C.emit(line)


def _line(bench: str, impl: str, n: int, seconds: float, unit: str) -> dict[str, Any]:
    C.log(f"{bench} {impl}: {seconds:.2f} s, {n / seconds:,.0f} {unit}")
    return {
        "bench": bench,
        "impl": impl,
        "throughput": round(n / seconds, 1),
        "unit": unit,
        "seconds": round(seconds, 3),
        "peak_mem_mb": None,
        "n": n,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    p.add_argument("--pixels", default=None, help="time convert --layout fast of these rows")
    p.add_argument("--rounds", type=int, default=3, help="--pixels: alternating rounds")
    args = p.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="bench_convert-"))
    if args.pixels:
        C.emit(C.header("bench_convert.py", argv=sys.argv[1:] if argv is None else argv))
        bench_fast_layout(Path(args.pixels), work, args.rounds)
        if args.work is None:
            shutil.rmtree(work)
        return
    paths = {"rows": work / "rows"}
    steps = make_rows(paths["rows"], args.steps)
    for src, to in PAIRS:
        best = float("inf")
        for r in range(args.repeats):
            out = work / f"{src}-to-{to}-{r}" / "ns" / "bench-v0"
            t0 = time.perf_counter()
            stats = convert_path(paths[src], to, out)
            best = min(best, time.perf_counter() - t0)
            if r:
                shutil.rmtree(out.parent.parent)
            else:
                paths.setdefault(to, out)
        line = {
            "bench": f"convert.{src}_to_{to}",
            "steps": steps,
            "episodes": stats["episodes_written"],
            "seconds": round(best, 3),
            "steps_per_s": round(steps / best, 1),
        }
        print(json.dumps(line), flush=True)
    if args.work is None:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
