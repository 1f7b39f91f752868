"""convert benchmark: steps/s of rows <-> msgpack episodes <-> Minari through ``convert_path``.

Data: the shipped CartPole episodes (``datasets/cartpole-v1/rows``) repeated under new ids to
``--steps`` steps (default 1M, ~44k episodes), written as rows Parquet in RLlib's layout plus ``t``,
100k rows a file (cutting through episodes, as RLlib's recorder does). Then, each timed as
``convert_path`` end to end (read, stitch, validate, write, commit): rows -> episodes,
episodes -> rows, rows -> minari, minari -> rows. One JSON line per pair: ``steps_per_s``
(steps written / wall seconds), the best of ``--repeats``.

Usage: ``python benchmarks/bench_convert.py [--steps N] [--repeats K] [--work DIR]``
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from offline_prelearner.config import ReadConfig
from offline_prelearner.episodes.ledger import EpisodeBatch
from offline_prelearner.episodes.stitch import stitch_fragments
from offline_prelearner.io.formats.rows.writer import episodes_to_rows
from offline_prelearner.io.readers import make_reader
from offline_prelearner.io.sources import expand_paths, read_table
from offline_prelearner.jobs.convert import convert_path

ROWS = Path(__file__).resolve().parents[1] / "datasets" / "cartpole-v1" / "rows"
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
    import pyarrow.parquet as pq

    for i, s in enumerate(range(0, table.num_rows, per_file)):
        pq.write_table(table.slice(s, per_file), out / f"rows-{i:05d}.parquet")
    return table.num_rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    args = p.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="bench_convert-"))
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
