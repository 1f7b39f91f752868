"""The prelearner's call in one process (no Ray), per connector case, paired with another tree.

``OfflinePreLearner(config)`` called on Arrow tables, every output drained, as Ray Data's
``map_batches`` calls it, but in one process: readers -> validate/dedup -> connectors on
episodes -> buffer -> sample -> connectors on batches. The input is made once under ``--work``
(git-ignored ``.bench/prelearner`` by default) and reused:

* rows: ``--rows`` synthetic CartPole rows in RLlib's new-stack row layout
  (``bench_scaling.make_rows``: ``eps_id`` strings, ``obs`` / ``new_obs`` float32 (4,),
  ``actions``, ``rewards``, ``terminateds``, ``truncateds``; episodes of 5-59 steps cut across
  files), fed in tables of ``--batch-rows`` (4096) rows;
* episodes: the same rows written as msgpack episodes (``offline-prelearner convert ... --to
  episodes``, with this checkout's package), fed in tables of ``--batch-episodes`` (128:
  about 4096 steps) episodes.

Cases (``CASES``; ``sample 256`` is replay sampling by RLlib's rule, ``train_batch_size=256``
per call; ``sample_all`` is every step once):

* ``sample256``, ``sample_all.n1``, ``sample_all.n3``;
* ``returns_to_go.sample256`` (an episode connector);
* ``returns_to_go.gae.sample256``: GAE's defaults need a value column (``vf_preds``, as RLlib
  records for PPO), so this case adds a float32 ``vf_preds`` column to every row table before
  the clock starts;
* ``normalize_obs.sample256`` (a batch-only connector), ``cast.sample_all`` (``actions`` to
  int32, ``rewards`` to float32: batch-only);
* ``episodes.sample256``: the msgpack-episodes input.

Each (side, case, round) runs in a fresh process (``--one CASE``) that reads its input into
memory, runs one untimed call on a separate prelearner (imports, first-use costs), then times
``--passes`` (5) passes, each a fresh prelearner over every table (one pass over 200k rows takes
well under a second), pyarrow on one thread (``pa.set_cpu_count(1)``): ``throughput`` is input
rows (steps) per CPU second of the median pass (``time.process_time``; ``cpu_seconds_passes``
lists them, ``best_cpu_rows_per_s`` is the fastest's rate), ``wall_rows_per_s`` rows per wall
second of the median pass; the same figures come
again as ``<case>.wall`` lines with the wall rate as ``throughput``. ``--baseline TREE`` runs the
same worker with ``PYTHONPATH=TREE`` (the package imported from that checkout; the worker uses
only the constructor with a config dict, the call on a ``pyarrow.Table`` and draining its
generator), the sides alternating within each round and the order reversed every other round
(``_common.alternate``), and adds ``prelearner.<case>/baseline`` ratio lines (CPU and wall):
``ratio_median_of_rounds`` is the median of each round's ours / baseline. A human table goes to
stderr at the end.

Usage: ``python benchmarks/bench_prelearner.py [--rounds 3] [--baseline TREE] [--cases a,b]
[--rows 200000] [--work DIR]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C
from bench_scaling import make_rows

REPO = Path(__file__).resolve().parent.parent
SAMPLE256: dict[str, Any] = {"sample_all": False, "train_batch_size": 256}
SAMPLE_ALL: dict[str, Any] = {"sample_all": True, "n_step": 1}

#: case -> (input: "rows" | "episodes", config dict).
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "sample256": ("rows", {"sample": SAMPLE256}),
    "sample_all.n1": ("rows", {"sample": SAMPLE_ALL}),
    "sample_all.n3": ("rows", {"sample": {**SAMPLE_ALL, "n_step": 3}}),
    "returns_to_go.sample256": ("rows", {"sample": SAMPLE256, "connectors": ["returns_to_go"]}),
    "returns_to_go.gae.sample256": (
        "rows",
        {"sample": SAMPLE256, "connectors": ["returns_to_go", "gae"]},
    ),
    "normalize_obs.sample256": ("rows", {"sample": SAMPLE256, "connectors": ["normalize_obs"]}),
    "cast.sample_all": (
        "rows",
        {
            "sample": SAMPLE_ALL,
            "connectors": [{"name": "cast", "mapping": {"actions": "int32", "rewards": "float32"}}],
        },
    ),
    "episodes.sample256": ("episodes", {"read": {"format": "episodes"}, "sample": SAMPLE256}),
}


def make_inputs(work: Path, rows: int, seed: int) -> tuple[Path, Path]:
    """The row files and the msgpack-episodes files under ``work`` (made once, then reused)."""
    row_dir = work / f"rows-{rows}-{seed}"
    ep_dir = work / f"episodes-{rows}-{seed}"
    if not (row_dir.is_dir() and list(row_dir.glob("*.parquet"))):
        C.log(f"making {rows:,} rows under {row_dir}")
        make_rows(row_dir, rows, 4, seed)
    if not (ep_dir.is_dir() and list(ep_dir.rglob("*.parquet"))):
        C.log(f"converting them to msgpack episodes under {ep_dir} (this checkout's convert)")
        code = "import sys; from offline_prelearner.cli import main; sys.exit(main(sys.argv[1:]))"
        cmd = [sys.executable, "-c", code, "convert", str(row_dir), "--to", "episodes"]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        subprocess.run([*cmd, "--out", str(ep_dir)], check=True, env=env, capture_output=True)
    return row_dir, ep_dir


def load_tables(directory: Path, per_table: int, value_column: bool) -> list[pa.Table]:
    """Every Parquet file under ``directory`` in name order (a convert output's are in its data
    folder, ``episodes/``), cut into tables of ``per_table`` rows."""
    files = sorted(directory.rglob("*.parquet"))
    whole = pa.concat_tables(pq.read_table(f) for f in files).combine_chunks()
    if value_column:  # a per-step value estimate, as RLlib records for PPO (GAE reads it)
        rng = np.random.default_rng(0)
        values = rng.standard_normal(whole.num_rows).astype(np.float32)
        whole = whole.append_column("vf_preds", pa.array(values))
    return [whole.slice(s, per_table).combine_chunks() for s in range(0, whole.num_rows, per_table)]


def run_case(case: str, row_dir: Path, ep_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One case in this process: an untimed call, then every table through a fresh prelearner."""
    from offline_prelearner import OfflinePreLearner  # the tree on sys.path: ours or --baseline's

    fmt, config = CASES[case]
    pa.set_cpu_count(1)  # one thread: CPU time is one core's work, not a pool's
    pa.set_io_thread_count(1)
    if fmt == "rows":
        tables = load_tables(row_dir, args.batch_rows, value_column="gae" in case)
        n = sum(t.num_rows for t in tables)
    else:  # the steps: the rows the convert kept
        tables = load_tables(ep_dir, args.batch_episodes, value_column=False)
        stats = json.loads((ep_dir / "stats.json").read_text())
        n = sum(int(f["rows_kept"]) for f in stats["per_file"])
    warm = OfflinePreLearner(config)
    for _ in warm(tables[0]):
        pass
    samples, walls, cpus = 0, [], []
    for _ in range(args.passes):  # each pass: a fresh prelearner over every table
        pre = OfflinePreLearner(config)
        t0, c0 = time.perf_counter(), time.process_time()
        for table in tables:
            for out in pre(table):
                samples += len(out["module_id"])
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    return {
        "bench": f"prelearner.{case}",
        "impl": args.tree or "ours",
        "throughput": round(n / cpu, 1),
        "unit": "rows per CPU second",
        "seconds": round(cpu, 4),
        "peak_mem_mb": None,
        "n": n,
        "wall_seconds": round(wall, 4),
        "wall_rows_per_s": round(n / wall, 1),
        "cpu_seconds_passes": [round(c, 4) for c in cpus],
        "best_cpu_rows_per_s": round(n / min(cpus), 1),
        "samples": samples // args.passes,
        "tables": len(tables),
        "passes": args.passes,
    }


def side(tree: Path, case: str, row_dir: Path, ep_dir: Path, args: argparse.Namespace) -> Any:
    """One case in a fresh process with the package imported from ``tree``."""
    cmd = [sys.executable, __file__, "--one", case, "--rows", str(args.rows)]
    cmd += ["--seed", str(args.seed), "--work", str(args.work), "--tree", str(tree)]
    cmd += ["--batch-rows", str(args.batch_rows), "--batch-episodes", str(args.batch_episodes)]
    cmd += ["--passes", str(args.passes)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=tree, env=env)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or [""])[-1]
        return [{"bench": f"prelearner.{case}", "impl": str(tree), "skipped": tail}]
    return [json.loads(proc.stdout.strip().splitlines()[-1])]


def table(lines: list[dict[str, Any]], cases: list[str], baseline: bool) -> str:
    """The human summary: per case, ours and the baseline (k rows per CPU s), the ratio."""
    by = {(x["bench"], x["impl"]): x for x in lines}
    head = f"{'case':30} {'ours kr/cpu-s':>14} {'base kr/cpu-s':>14} {'ratio (med rounds)':>19}"
    rows = [head + f" {'wall ratio':>11} {'load 1m per round':>20}"]
    for case in cases:
        b = f"prelearner.{case}"
        ours, base = by.get((b, "ours"), {}), by.get((b, "baseline"), {})
        ratio = by.get((f"{b}/baseline", "ratio"), {})
        wall = by.get((f"{b}.wall/baseline", "ratio"), {})

        def k(x: dict[str, Any]) -> str:
            t = x.get("throughput")
            return f"{t / 1000:.1f}" if t else str(x.get("skipped", "-"))[:14]

        loads = ours.get("loadavg_rounds") or []
        rows.append(
            f"{case:30} {k(ours):>14} {k(base) if baseline else '-':>14} "
            f"{ratio.get('ratio_median_of_rounds', '-')!s:>19} "
            f"{wall.get('ratio_median_of_rounds', '-')!s:>11} {loads!s:>20}"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-rows", type=int, default=4096)
    p.add_argument("--batch-episodes", type=int, default=128)
    p.add_argument("--passes", type=int, default=5, help="timed passes over the input per run")
    p.add_argument("--work", default=str(REPO / ".bench" / "prelearner"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated, of CASES")
    p.add_argument("--baseline", default=None, help="a checkout to compare with, interleaved")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # a side's process
    p.add_argument("--tree", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    work = Path(args.work).resolve()
    args.work = work
    work.mkdir(parents=True, exist_ok=True)
    row_dir, ep_dir = make_inputs(work, args.rows, args.seed)
    if args.one is not None:  # one case, the package from --tree (the parent set PYTHONPATH)
        print(json.dumps(run_case(args.one, row_dir, ep_dir, args)))
        return 0
    cases = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        raise SystemExit(f"unknown cases {unknown}; have {sorted(CASES)}")
    C.emit(C.header("bench_prelearner.py", rows=args.rows, batch_rows=args.batch_rows))
    trees = [("ours", REPO)] + ([("base", Path(args.baseline))] if args.baseline else [])
    sides = [
        (f"{name}.{case}", lambda r, t=tree, c=case: side(t, c, row_dir, ep_dir, args))
        for case in cases
        for name, tree in trees
    ]
    lines = C.alternate(sides, args.rounds)
    for line in lines:  # name the sides, whatever tree they ran from
        line["impl"] = "baseline" if line["side"].startswith("base.") else "ours"
    lines += [  # the same runs by wall time
        {**x, "bench": x["bench"] + ".wall", "throughput": x["wall_rows_per_s"], "unit": "rows/s"}
        for x in lines
        if x.get("wall_rows_per_s")
    ]
    pairs = []
    if args.baseline:
        for case in cases:
            for b in (f"prelearner.{case}", f"prelearner.{case}.wall"):
                pairs.append((f"{b}/baseline", (b, "ours"), (b, "baseline")))
    out = [C.emit(x) for x in C.summarize_rounds(lines, pairs)]
    print(table(out, cases, bool(args.baseline)), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
