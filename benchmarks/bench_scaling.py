"""Scaling of the batch job with cores (issue 24): the table, as JSON lines, on this machine.

Makes (or reuses, ``--data DIR``) ``--rows`` CartPole-sized rows in ``--files`` Parquet files in
RLlib's row layout (:func:`make_rows`: ``eps_id``, ``obs``, ``actions``, ``rewards``, ``new_obs``,
``terminateds``, ``truncateds``; episodes of 5-59 steps cut across files; deterministic for a
``--seed``), then prints, each as one JSON line (``_common.py``; the first line is the header:
CPU model, cores, load, commit):

* ``scaling.floor.read_1thread`` / ``read_threads`` -- pyarrow's ``read_table`` of every file,
  one thread / all threads (rows/s): the floor no job beats;
  ``scaling.floor.read_write_1thread`` -- the same read plus ``write_table`` of the same table on
  one thread: what one core can do with these bytes end to end.
* ``scaling.local`` -- ``offline-prelearner process DATA --out OUT --json --engine local``, a fresh
  process (what a user runs); ``scaling.ray.c<N>`` -- ``--engine ray --set ray.concurrency=N``
  for N = 1, 2, 4, ... up to the number of cores (and the number of cores itself).
  ``throughput`` is rows read per second of the process's wall time (start to exit: Python,
  imports, ``ray.init``, the job, ``ray.shutdown``); ``job_seconds`` is ``wall_seconds`` of
  stats.json (the job inside the process) and ``phases`` its ``phases`` when the package
  writes them (plan, engine start, units, commit, stop).
* ``scaling.ray.half.c<N>`` -- the first half of the files at concurrency 1 and at the largest
  N. The two sizes give a line each: ``slope`` (the data-proportional rate, rows/s: the extra
  rows over the extra seconds) and ``intercept`` (the fixed cost, seconds: what a job of no
  rows would take), for the process wall time and for the job's own ``wall_seconds``.
* ``scaling.fit.c<N>`` -- ``wall_slope`` / ``wall_intercept_s`` from the process wall times,
  ``job_*`` from stats.json's ``wall_seconds``, ``units_*`` from its ``units`` phase.
* ``scaling.efficiency`` -- the parallel efficiency of the data-proportional part:
  ``efficiency`` = ``wall_slope(c=max) / (max * wall_slope(c=1))`` (``efficiency_units`` the same
  from the ``units`` phase); ``speedup_vs_local`` of the whole job (wall, c=max against the local
  engine); ``local_fraction_of_read_1thread``: the local engine's rate over pyarrow's 1-thread
  read.

``--rounds R`` runs every configuration once per round, the order reversed every other round
(``_common.alternate``); figures are medians over rounds with min / max.

Sizes: ``--rows 2000000 --rounds 3`` finishes in 2-4 minutes on 2 cores (more under load);
the defaults (8M rows, 80 files) are the 16-core table of issue 24. Needs only numpy, pyarrow,
ray and this package (no network): it runs as it is on a machine staged with
``../shared/device/stage.sh``.

Usage: ``python benchmarks/bench_scaling.py [--rows N] [--files F] [--data DIR] [--work DIR]
[--concurrency 1,2,4] [--rounds R] [--seed S] [--no-half]``
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C

#: The 16-core table of issue 24: 8M rows in 80 files.
DEFAULT_ROWS = 8_000_000
DEFAULT_FILES = 80


# ----------------------------------------------------------------------------- data


def make_rows(out: Path, rows: int, files: int, seed: int = 0) -> int:
    """Writes ``rows`` CartPole-sized rows in ``files`` Parquet files in RLlib's row layout.

    Episodes of 5-59 steps (uniform), ids as strings, cut across files as RLlib's recorder cuts
    them; ``obs`` / ``new_obs`` float32 (4,) as fixed-size lists, one more observation per
    episode than steps (``new_obs[t] == obs[t + 1]``); ``rewards`` 1.0, ``actions`` 0/1, the last
    step of each episode ``terminateds``. The same bytes for the same ``(rows, files, seed)``
    (the generator of ``../shared/device/device.sh``, seeded).

    Args:
        out: The folder to write into (made if absent).
        rows: Rows in all.
        files: Files, ``part-00000.parquet`` ... in name order.
        seed: numpy's ``default_rng`` seed.

    Returns:
        The rows written.
    """
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    lens = rng.integers(5, 60, size=rows // 5 + 1)
    lens = lens[np.cumsum(lens) <= rows]
    lens[-1] += rows - lens.sum()
    starts = np.cumsum(lens) - lens
    eid = np.repeat(np.arange(len(lens)), lens)
    t = np.arange(rows) - np.repeat(starts, lens)
    last = t == np.repeat(lens, lens) - 1
    obs = rng.standard_normal((rows + len(lens), 4)).astype(np.float32)
    idx = np.arange(rows) + eid  # each episode has one more observation than steps

    def tensor(a: np.ndarray) -> pa.Array:
        return pa.FixedSizeListArray.from_arrays(pa.array(a.ravel()), 4)

    for k in range(files):
        s = slice(k * rows // files, (k + 1) * rows // files)
        n = s.stop - s.start
        table = pa.table(
            {
                "eps_id": pa.array(eid[s].astype(str)),
                "obs": tensor(obs[idx[s]]),
                "actions": rng.integers(0, 2, n),
                "rewards": np.ones(n),
                "new_obs": tensor(obs[idx[s] + 1]),
                "terminateds": last[s],
                "truncateds": np.zeros(n, bool),
            }
        )
        pq.write_table(table, out / f"part-{k:05d}.parquet")
    return rows


def half_of(data: Path, work: Path) -> Path:
    """A folder of links to the first half of ``data``'s files (the half-size job's input)."""
    half = work / "half"
    if half.exists():
        shutil.rmtree(half)
    half.mkdir(parents=True)
    files = C.parquet_files(data)
    for f in files[: max(1, len(files) // 2)]:
        (half / f.name).symlink_to(f.resolve())
    return half


def count_rows(data: Path) -> int:
    return sum(pq.read_metadata(f).num_rows for f in C.parquet_files(data))


# ----------------------------------------------------------------------------- floors


def floors(data: Path, work: Path) -> list[dict[str, Any]]:
    """pyarrow's read of every file on one thread and on all; read + write on one thread."""
    files = [str(f) for f in C.parquet_files(data)]
    lines = []
    for name, threads in (("read_1thread", False), ("read_threads", True)):
        t0, n = time.perf_counter(), 0
        for f in files:
            n += pq.read_table(f, use_threads=threads).num_rows
        lines.append(_line(f"scaling.floor.{name}", n, time.perf_counter() - t0))
    sink = work / "floor.parquet"
    t0, n = time.perf_counter(), 0
    for f in files:
        table = pq.read_table(f, use_threads=False)
        pq.write_table(table, sink)
        n += table.num_rows
    lines.append(_line("scaling.floor.read_write_1thread", n, time.perf_counter() - t0))
    sink.unlink(missing_ok=True)
    return lines


def _line(bench: str, n: int, seconds: float, **extra: Any) -> dict[str, Any]:
    return {
        "bench": bench,
        "impl": "ours",
        "throughput": round(n / seconds, 1),
        "unit": "rows/s",
        "seconds": round(seconds, 3),
        "peak_mem_mb": None,
        "n": n,
        "loadavg_1m": round(os.getloadavg()[0], 2),
        **extra,
    }


# ----------------------------------------------------------------------------- jobs


def run_process(bench: str, data: Path, work: Path, args: list[str]) -> dict[str, Any]:
    """``offline-prelearner process`` in a fresh process; its wall time, summary and phases."""
    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "offline_prelearner", "process", str(data), "--out", str(out)]
    cmd += ["--json", *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or [""]
        C.log(f"{bench}: exit {proc.returncode}: {tail[0]}")
        shutil.rmtree(out, ignore_errors=True)
        return {"bench": bench, "impl": "ours", "skipped": f"exit {proc.returncode}: {tail[0]}"}
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    try:
        stats = json.loads((out / "stats.json").read_text())
    except (OSError, ValueError):
        stats = {}
    shutil.rmtree(out, ignore_errors=True)
    rows = int(summary["rows_in"])
    line = _line(
        bench,
        rows,
        wall,
        job_seconds=summary.get("wall_seconds"),
        job_rows_per_s=summary.get("rows_per_second"),
        samples_written=summary.get("samples_written"),
        engine=summary.get("engine"),
        units=summary.get("units"),
        args=args,
    )
    phases = stats.get("phases")
    if phases is not None:
        line["phases"] = phases
    C.log(f"{bench}: {wall:.2f} s wall, {rows / wall:,.0f} rows/s, job {line['job_seconds']} s")
    return line


def concurrencies(cores: int, given: str | None) -> list[int]:
    """1, 2, 4, ... up to ``cores``, and ``cores`` itself; or the ``--concurrency`` list."""
    if given:
        return [int(x) for x in given.split(",") if x]
    out, c = [], 1
    while c < cores:
        out.append(c)
        c *= 2
    return [*out, cores]


def configurations(
    data: Path, half: Path | None, levels: list[int]
) -> list[tuple[str, Path, list[str]]]:
    """``(bench, input, process arguments)`` of every job of one round."""
    jobs = [("scaling.local", data, ["--engine", "local"])]
    for c in levels:
        jobs.append(
            (f"scaling.ray.c{c}", data, ["--engine", "ray", "--set", f"ray.concurrency={c}"])
        )
    if half is not None:
        for c in sorted({levels[0], levels[-1]}):
            args = ["--engine", "ray", "--set", f"ray.concurrency={c}"]
            jobs.append((f"scaling.ray.half.c{c}", half, args))
    return jobs


# ----------------------------------------------------------------------------- derived lines


def fits(summary: list[dict[str, Any]], levels: list[int]) -> list[dict[str, Any]]:
    """Slope / intercept per concurrency measured at both sizes; efficiency and speed-up."""
    by = {x["bench"]: x for x in summary if "throughput" in x}
    out: list[dict[str, Any]] = []
    slopes: dict[int, dict[str, Any]] = {}
    for c in sorted({levels[0], levels[-1]}):
        full, half = by.get(f"scaling.ray.c{c}"), by.get(f"scaling.ray.half.c{c}")
        if full is None or half is None or full["n"] == half["n"]:
            continue
        line: dict[str, Any] = {"bench": f"scaling.fit.c{c}", "impl": "fit", "concurrency": c}
        for key, f_s, h_s in (
            ("wall", full["seconds"], half["seconds"]),
            ("job", full.get("job_seconds"), half.get("job_seconds")),
            ("units", _units(full), _units(half)),
        ):
            if f_s is None or h_s is None or f_s <= h_s:
                line[f"{key}_slope"] = None  # not measured, or the larger job was not slower
                continue
            slope = (full["n"] - half["n"]) / (f_s - h_s)
            line[f"{key}_slope"] = round(slope, 1)
            line[f"{key}_intercept_s"] = round(f_s - full["n"] / slope, 3)
        line["unit"] = "slope rows/s, intercept s"
        slopes[c] = line
        out.append(line)
    lo, hi = levels[0], levels[-1]
    eff: dict[str, Any] = {"bench": "scaling.efficiency", "impl": "fit", "concurrency": hi}
    for key in ("wall", "units"):  # efficiency = slope(hi) / (hi / lo * slope(lo))
        s_lo = slopes.get(lo, {}).get(f"{key}_slope")
        s_hi = slopes.get(hi, {}).get(f"{key}_slope")
        if s_lo and s_hi and hi != lo:
            eff["efficiency" if key == "wall" else f"efficiency_{key}"] = round(
                s_hi / (hi / lo * s_lo), 3
            )
    local, top = by.get("scaling.local"), by.get(f"scaling.ray.c{hi}")
    if local and top:
        eff["speedup_vs_local"] = round(top["throughput"] / local["throughput"], 3)
    floor = by.get("scaling.floor.read_1thread")
    if local and floor:
        eff["local_fraction_of_read_1thread"] = round(local["throughput"] / floor["throughput"], 3)
    out.append(eff)
    return out


def _units(line: dict[str, Any]) -> float | None:
    """The ``units`` phase of stats.json (the units' own work), when the package writes it."""
    return (line.get("phases") or {}).get("units")


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=DEFAULT_ROWS, help="rows to make (default 8M)")
    p.add_argument("--files", type=int, default=None, help="files to make (default rows / 100k)")
    p.add_argument("--seed", type=int, default=0, help="the data's seed (default 0)")
    p.add_argument("--data", default=None, help="reuse this folder of row files (made if absent)")
    p.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    p.add_argument("--concurrency", default=None, help="ray.concurrency levels (default 1,2,4..)")
    p.add_argument("--rounds", type=int, default=1, help="rounds, alternating (default 1)")
    p.add_argument("--no-half", action="store_true", help="skip the half-size jobs (no fit)")
    args = p.parse_args(argv)
    files = args.files or max(1, args.rows // 100_000)
    work = Path(args.work or tempfile.mkdtemp(prefix="bench_scaling-"))
    work.mkdir(parents=True, exist_ok=True)
    data = Path(args.data) if args.data else work / "data"
    levels = concurrencies(os.cpu_count() or 1, args.concurrency)
    C.emit(C.header("bench_scaling.py", argv=sys.argv[1:] if argv is None else argv))
    try:
        if not (data.is_dir() and glob.glob(str(data / "*.parquet"))):
            t0 = time.perf_counter()
            make_rows(data, args.rows, files, args.seed)
            C.log(f"made {args.rows:,} rows in {files} files in {time.perf_counter() - t0:.1f} s")
        rows = count_rows(data)
        C.emit(
            {
                "bench": "scaling.data",
                "impl": "data",
                "rows": rows,
                "data": str(data),
                "files": len(C.parquet_files(data)),
                "bytes": sum(f.stat().st_size for f in C.parquet_files(data)),
            }
        )
        half = None if args.no_half else half_of(data, work)
        jobs = configurations(data, half, levels)

        sides: list[tuple[str, C.Side]] = [("floor", lambda _: floors(data, work))]
        for bench, inp, job_args in jobs:
            sides.append(
                (bench, lambda _, b=bench, i=inp, a=job_args: [run_process(b, i, work, a)])
            )
        lines = C.alternate(sides, args.rounds)
        summary = C.summarize_rounds(lines)
        for line in summary:
            line.pop("side", None)
            jobs_s = [
                x["job_seconds"]
                for x in lines
                if x["bench"] == line["bench"] and x.get("job_seconds") is not None
            ]
            if jobs_s:
                line["job_seconds"] = round(statistics.median(jobs_s), 3)
                line["job_seconds_rounds"] = jobs_s
            phases = [x["phases"] for x in lines if x["bench"] == line["bench"] and x.get("phases")]
            if phases:  # each phase's median over rounds
                keys = dict.fromkeys(k for ph in phases for k in ph)
                line["phases"] = {
                    k: round(statistics.median(ph.get(k, 0.0) for ph in phases), 3) for k in keys
                }
            C.emit(line)
        for line in fits(summary, levels):
            C.emit(line)
    finally:  # a --work folder keeps its data for the next run; a temporary one goes
        shutil.rmtree(work if args.work is None else work / "half", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
