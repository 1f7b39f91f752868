"""One core's rate (issue 24): the batch job on CartPole rows against pyarrow's floor, one thread.

Makes (or reuses, ``--data DIR``) ``--rows`` CartPole-sized rows in ``--files`` Parquet files in
RLlib's row layout (``bench_scaling.make_rows``: ``eps_id`` strings, ``obs`` / ``new_obs``
float32 (4,) fixed-size lists, ``actions``, ``rewards``, ``terminateds``, ``truncateds``; no
``t``; episodes of 5-59 steps cut across files), pins this process to one CPU (``--cpu``) and
pyarrow to one thread (``pa.set_cpu_count(1)``, ``pa.set_io_thread_count(1)``), then prints, each
as one JSON line (``_common.py``; the first is the header: CPU model, cores, load, commit):

* ``per_core.floor.read`` -- ``pq.read_table`` of every file (rows/s); ``per_core.floor.read_write``
  -- the same read plus ``pq.write_table`` of the same table with pyarrow's defaults (a dictionary
  tried on every column, the float observations' included), and
  ``per_core.floor.read_write_job_options`` -- with the job's own choice (no dictionary on float
  arrays, :func:`~offline_prelearner.io.fast_tensor.parquet_dictionary_columns`): what one core
  does with these bytes end to end, **the floor** (the job reads the same bytes and writes more:
  its samples carry ``t``, ``n_step``, ``weights``, ``indices`` and ``module_id`` besides the
  input's columns).
* ``per_core.local.n1`` / ``per_core.local.n3`` -- ``run_pipeline(DATA, sample_all=true,
  n_step=1|3, out_dir=OUT, engine="local")`` in this process (what ``process --engine local``
  runs, after the imports): ``throughput`` is rows read per second of the job's wall time (plan,
  units, commit), ``units_throughput`` rows per second of the units' own seconds
  (``stats.json["phases"]["units"]`` when the package writes phases), ``cpu_throughput`` rows
  per second of this process's CPU time.
* ``per_core.ray_worker.n1`` / ``.n3`` (``--ray``) -- the same job on ``engine="ray"`` with
  ``ray.concurrency=1``: rows per second of the units' own seconds (``phases["units"]``), i.e. one
  Ray worker's rate (the start of Ray and its workers is not in it); skipped without phases.
  Its ``cpu_throughput`` is rows per CPU second of the worker's units (each unit record's
  ``cpu_seconds``, summed in ``stats.json["nodes"]``): the ``.cpu`` line is one Ray worker's rows
  per CPU second, beside the local engine's.
* ``per_core.local.n1/floor`` ... -- ratio lines: the job's rate over the floor's, per round
  and as the ratio of medians (how close one core comes to reading and writing the bytes).

``--rounds R`` runs every measurement once per round, the order reversed every other round
(``_common.alternate``); figures are medians over rounds. Each line with CPU time comes again as
``<bench>.cpu`` with ``throughput`` its CPU rate, and every ratio too: on a shared machine the
CPU rate is what one core did (a wall rate also counts the time others held it).
``--baseline TREE`` (a checkout of another commit, e.g. ``git worktree add ../base <commit>``)
runs the local-engine jobs with the package imported from ``TREE`` in a subprocess, alternating
with this checkout's (also a subprocess), and adds ``per_core.local.n<k>/baseline`` ratio lines.

Usage: ``python benchmarks/bench_per_core.py [--rows 2000000] [--files 20] [--data DIR]
[--work DIR] [--rounds 3] [--cpu N] [--ray] [--baseline TREE]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C
from bench_scaling import count_rows, make_rows

REPO = Path(__file__).resolve().parent.parent
N_STEPS = (1, 3)


def pin(cpu: int | None) -> int | None:
    """This process on one CPU (the last one it may use by default) and pyarrow on one thread."""
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    if not hasattr(os, "sched_setaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    chosen = allowed[-1] if cpu is None else cpu
    os.sched_setaffinity(0, {chosen})
    return chosen


def floor_lines(data: Path, work: Path) -> list[dict[str, Any]]:
    """pyarrow's read of every file, and read + write of the same tables, on one thread."""
    files = [str(f) for f in C.parquet_files(data)]
    sink = work / "floor.parquet"
    t0, c0, n = time.perf_counter(), time.process_time(), 0
    for f in files:
        n += pq.read_table(f, use_threads=False).num_rows
    read = _line("per_core.floor.read", "pyarrow", n, time.perf_counter() - t0)
    read["cpu_throughput"] = round(n / (time.process_time() - c0), 1)
    lines = [read]
    for bench, dictionary in (("read_write", None), ("read_write_job_options", True)):
        t0, c0 = time.perf_counter(), time.process_time()
        for f in files:
            table = pq.read_table(f, use_threads=False)
            if dictionary is None:  # pyarrow's defaults: a dictionary tried on every column
                pq.write_table(table, sink)
            else:  # as the job writes: none on float arrays (io/fast_tensor.py)
                pq.write_table(table, sink, use_dictionary=_job_dictionary(table.schema))
        line = _line(f"per_core.floor.{bench}", "pyarrow", n, time.perf_counter() - t0)
        line["cpu_throughput"] = round(n / (time.process_time() - c0), 1)
        lines.append(line)
    sink.unlink(missing_ok=True)
    return lines


def _job_dictionary(schema: pa.Schema) -> list[str] | bool:
    from offline_prelearner.io.fast_tensor import parquet_dictionary_columns

    return parquet_dictionary_columns(schema)


def _line(bench: str, impl: str, n: int, seconds: float, **extra: Any) -> dict[str, Any]:
    return {
        "bench": bench,
        "impl": impl,
        "throughput": round(n / seconds, 1),
        "unit": "rows/s",
        "seconds": round(seconds, 3),
        "peak_mem_mb": None,
        "n": n,
        **extra,
    }


def warm_up(data: Path, work: Path) -> None:
    """One small job first (its first file), so no timed job pays the imports it does."""
    from offline_prelearner import run_pipeline

    out = work / "warm-up"
    shutil.rmtree(out, ignore_errors=True)
    first = [str(C.parquet_files(data)[0])]
    run_pipeline(first, {"sample": {"sample_all": True}}, out_dir=out, engine="local")
    shutil.rmtree(out, ignore_errors=True)


def job_line(data: Path, work: Path, n_step: int, engine: str, impl: str) -> dict[str, Any]:
    """One ``run_pipeline`` (sample_all, ``n_step``) on ``engine``; rows/s of the job, of its
    units' own seconds and of this process's CPU time."""
    from offline_prelearner import run_pipeline  # the tree on sys.path: ours or --baseline's

    out = work / f"out-{engine}-{n_step}"
    shutil.rmtree(out, ignore_errors=True)
    config: dict[str, Any] = {"sample": {"sample_all": True, "n_step": n_step}}
    if engine == "ray":
        config["ray"] = {"concurrency": 1}
    t0, c0 = time.perf_counter(), time.process_time()
    result = run_pipeline(str(data), config, out_dir=out, engine=engine)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    shutil.rmtree(out, ignore_errors=True)
    stats = result.stats
    rows = int(stats["rows_in"])
    units = (stats.get("phases") or {}).get("units")
    kind = "local" if engine == "local" else "ray_worker"
    line = _line(f"per_core.{kind}.n{n_step}", impl, rows, wall, samples=stats.get("samples"))
    line["units_seconds"] = units
    line["units_throughput"] = round(rows / units, 1) if units else None
    # The units' own CPU seconds (each unit record's, summed per node in stats["nodes"]).
    unit_cpu = [n.get("cpu_seconds") for n in stats.get("nodes") or []]
    line["units_cpu_seconds"] = sum(unit_cpu) if unit_cpu and None not in unit_cpu else None
    if engine == "local":
        line["cpu_throughput"] = round(rows / cpu, 1)
    else:  # one Ray worker: its own seconds, not the driver's
        if not units:
            return {"bench": line["bench"], "impl": impl, "skipped": "no phases in stats.json"}
        line.update(throughput=line["units_throughput"], seconds=round(units, 3))
        if line["units_cpu_seconds"]:  # the worker's rows per CPU second
            line["cpu_throughput"] = round(rows / line["units_cpu_seconds"], 1)
    return line


def side(tree: Path, data: Path, work: Path, n_step: int, cpu: int | None) -> dict[str, Any]:
    """One local-engine job in a fresh process with the package imported from ``tree``."""
    cmd = [sys.executable, __file__, "--one", str(n_step), "--data", str(data), "--work", str(work)]
    cmd += ["--tree", str(tree)] + ([] if cpu is None else ["--cpu", str(cpu)])
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=tree, env=env)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or [""])[-1]
        return {"bench": f"per_core.local.n{n_step}", "impl": str(tree), "skipped": tail}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--files", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default=None, help="existing row files (default: made under --work)")
    p.add_argument("--work", default=str(REPO / ".bench" / "per_core"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cpu", type=int, default=None, help="the CPU to pin to (default: the last)")
    p.add_argument("--ray", action="store_true", help="also one Ray worker's rate")
    p.add_argument("--baseline", default=None, help="a checkout to compare with, interleaved")
    p.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # a side's process
    p.add_argument("--tree", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    cpu = pin(args.cpu)
    if args.one is not None:  # one job, the package from --tree (the parent set PYTHONPATH)
        data = Path(args.data)
        warm_up(data, work)
        line = job_line(data, work, args.one, "local", args.tree or "ours")
        print(json.dumps(line))
        return 0
    if args.data:
        data = Path(args.data)
    else:
        data = work / f"rows-{args.rows}-{args.files}-{args.seed}"
        if not (data.is_dir() and C.parquet_files(data)):
            C.log(f"making {args.rows:,} rows in {args.files} files under {data}")
            make_rows(data, args.rows, args.files, args.seed)
    if not args.baseline:
        warm_up(data, work)
    C.emit(C.header("bench_per_core.py", data=str(data), rows=count_rows(data), pinned_cpu=cpu))
    sides: list[tuple[str, Any]] = [("floor", lambda r: floor_lines(data, work))]
    if args.baseline:
        for k in N_STEPS:
            sides.append((f"ours.n{k}", lambda r, k=k: [side(REPO, data, work, k, cpu)]))
            sides.append(
                (f"base.n{k}", lambda r, k=k: [side(Path(args.baseline), data, work, k, cpu)])
            )
    else:
        for k in N_STEPS:
            sides.append((f"ours.n{k}", lambda r, k=k: [job_line(data, work, k, "local", "ours")]))
    if args.ray:
        for k in N_STEPS:
            sides.append((f"ray.n{k}", lambda r, k=k: [job_line(data, work, k, "ray", "ours")]))
    lines = C.alternate(sides, args.rounds)
    for line in lines:  # mark the baseline's lines as such, whatever tree they name
        if args.baseline and line.get("side", "").startswith("base"):
            line["impl"] = "baseline"
        elif line.get("side", "").startswith("ours"):
            line["impl"] = "ours"
    lines += [  # the same lines by CPU time: what one core did, whatever else ran beside it
        {
            **{k: v for k, v in x.items() if k not in ("cpu_throughput", "units_throughput")},
            "bench": x["bench"] + ".cpu",
            "throughput": x["cpu_throughput"],
            "unit": "rows per CPU second",
        }
        for x in lines
        if x.get("cpu_throughput")
    ]
    pairs = []
    for k in N_STEPS:
        for floor in ("read_write", "read_write_job_options"):
            pairs.append(
                (
                    f"per_core.local.n{k}/{floor}.cpu",
                    (f"per_core.local.n{k}.cpu", "ours"),
                    (f"per_core.floor.{floor}.cpu", "pyarrow"),
                )
            )
        if args.ray:
            pairs.append(
                (
                    f"per_core.ray_worker.n{k}/read_write_job_options.cpu",
                    (f"per_core.ray_worker.n{k}.cpu", "ours"),
                    ("per_core.floor.read_write_job_options.cpu", "pyarrow"),
                )
            )
        if args.baseline:
            pairs.append(
                (
                    f"per_core.local.n{k}/baseline.cpu",
                    (f"per_core.local.n{k}.cpu", "ours"),
                    (f"per_core.local.n{k}.cpu", "baseline"),
                )
            )
    for k in N_STEPS:
        ours = (f"per_core.local.n{k}", "ours")
        for floor in ("read_write", "read_write_job_options"):
            pairs.append(
                (f"per_core.local.n{k}/{floor}", ours, (f"per_core.floor.{floor}", "pyarrow"))
            )
        if args.baseline:
            pairs.append((f"per_core.local.n{k}/baseline", ours, (ours[0], "baseline")))
        if args.ray:
            pairs.append(
                (
                    f"per_core.ray_worker.n{k}/read_write_job_options",
                    (f"per_core.ray_worker.n{k}", "ours"),
                    ("per_core.floor.read_write_job_options", "pyarrow"),
                )
            )
    for line in C.summarize_rounds(lines, pairs):
        C.emit(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
