"""Shared helpers for the benchmark scripts: JSON lines, timing, peak memory, the RLlib side.

Every measurement is one JSON object on its own line of stdout (progress goes to stderr), with
at least the keys in :data:`KEYS`::

    {"bench": "cartpole_rows.map", "impl": "ours", "throughput": 2.1e6, "unit": "rows/s",
     "seconds": 0.47, "peak_mem_mb": 61.2, "n": 1000003, ...extras}

* ``throughput`` is ``n / seconds``; ``seconds`` is the **median** wall time over the timed
  repeats (after an untimed warm-up); extras ``seconds_best`` / ``throughput_best`` give the
  fastest repeat, ``repeats`` how many there were, and ``cpu_seconds`` / ``cpu_throughput`` the
  median process CPU time where it was measured (steadier than wall time on a shared machine).
* ``peak_mem_mb`` is measured in a separate, untimed run of the same call (tracing slows
  allocation-heavy code, so it never overlaps a timed run). It is the sum of two peaks above the
  level at the start of the call: ``py_peak_mb`` -- ``tracemalloc``'s peak, which covers Python
  objects and numpy arrays (numpy reports its buffers to tracemalloc) -- and ``arrow_peak_mb`` --
  the peak of bytes allocated through pyarrow's default memory pool during the call (a proxy pool
  is installed for the call), which tracemalloc cannot see. Memory held by buffers that exist
  before the call (e.g. the input table) is not counted. ``maxrss_mb`` is the process's
  high-water resident set (``resource.getrusage(RUSAGE_SELF).ru_maxrss``) when the line is
  written: a coarse, never-decreasing figure for the whole process, reported for context only.
* ``loadavg_1m`` is the machine's 1-minute load average when the line is written: figures taken
  while other work shares the cores are noisy (compare it with the number of cores).
* The first line of a run is a **header** (:func:`header`): ``{"bench": "header", "impl":
  "header", "cpu_model": ..., "nproc": ..., "loadavg": [1m, 5m, 15m], "commit": ..., "utc":
  ...}`` -- the machine and the code the figures below it were taken on.
* **Interleaved rounds** (:func:`alternate`, :func:`summarize_rounds`): two (or more) sides run
  alternately, A B, B A, A B, ..., so a change of the machine's speed or load hits both; each
  side's figure is the median over rounds (with min / max), and a ratio line carries both the
  ratio of the medians and the median of the per-round ratios (each round's two sides ran
  back to back). Ratios, not rates, carry a claim: on a shared VM rates move 1.5x within
  seconds, the ratio of two sides measured in the same round much less.
* An RLlib line that could not be measured is ``{"bench": ..., "impl": "rllib", "skipped":
  reason}``; a ratio line is ``{"bench": ..., "impl": "ratio", "ratio": ours / rllib}``
  (medians; also ``ratio_best`` and, where both sides measured CPU time, ``ratio_cpu``).

This module imports only the standard library, numpy and pyarrow, so the RLlib-side scripts
(run by the RLlib venv's python) use it too. It never imports ``offline_prelearner``.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "KEYS",
    "MemoryPeak",
    "Timing",
    "add_common_args",
    "alternate",
    "data_dir",
    "dataset_digest",
    "emit",
    "header",
    "limited_tables",
    "log",
    "machine",
    "markdown_table",
    "maxrss_mb",
    "measure_peak",
    "parquet_files",
    "ratio_lines",
    "record",
    "rllib_python",
    "run_rllib",
    "summarize_rounds",
    "time_repeats",
]

KEYS = ("bench", "impl", "throughput", "unit", "seconds", "peak_mem_mb", "n")
#: ``impl`` of lines that are not one measurement (no :data:`KEYS` required): ratios, the header,
#: fits (slopes, efficiencies) and descriptions of the data.
NOT_MEASURED = frozenset({"ratio", "header", "fit", "data"})
#: The repository (this file's folder's parent); ``.bench/`` in it is git-ignored scratch space.
REPO = Path(__file__).resolve().parent.parent
#: Where ``benchmarks/make_data.sh`` writes the datasets unless $OFFLINE_PRELEARNER_BENCH_DATA says.
DEFAULT_DATA = str(REPO / ".bench" / "data")
#: The venv ``benchmarks/setup_rllib.sh`` builds: $OFFLINE_PRELEARNER_RLLIB_VENV, else this.
DEFAULT_RLLIB_VENV = str(REPO / ".bench" / "rllib-venv")
DEFAULT_RLLIB_PYTHON = str(
    Path(os.environ.get("OFFLINE_PRELEARNER_RLLIB_VENV") or DEFAULT_RLLIB_VENV) / "bin" / "python"
)
_MB = 1024.0 * 1024.0


# ----------------------------------------------------------------------------- arguments, data


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """``--data``, ``--quick`` and ``--repeats``, identical in every benchmark script."""
    parser.add_argument(
        "--data",
        default=None,
        help="benchmark data directory (default: $OFFLINE_PRELEARNER_BENCH_DATA or "
        "<repo>/.bench/data); made by benchmarks/make_data.sh",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a small subset and one repeat: a smoke run"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed repeats (default: the script's, 1 with --quick)",
    )


def data_dir(arg: str | None) -> Path:
    """The data directory: the argument, else ``$OFFLINE_PRELEARNER_BENCH_DATA``, else default."""
    path = Path(arg or os.environ.get("OFFLINE_PRELEARNER_BENCH_DATA") or DEFAULT_DATA)
    if not path.is_dir():
        raise SystemExit(
            f"benchmark data not found at {path}: make it with `bash benchmarks/setup_rllib.sh && "
            "bash benchmarks/make_data.sh` (writes $OFFLINE_PRELEARNER_BENCH_DATA, default "
            "<repo>/.bench/data; see benchmarks/README.md), or pass --data DIR"
        )
    return path


def dataset_digest(data: Path) -> str | None:
    """The content digest in ``manifest.json`` (quote it next to every figure)."""
    try:
        return str(json.loads((data / "manifest.json").read_text())["digest"])
    except (OSError, ValueError, KeyError):
        return None


def parquet_files(directory: Path) -> list[Path]:
    """The ``*.parquet`` files of a directory in name order (the order RLlib's recorder wrote)."""
    files = sorted(directory.glob("*.parquet"))
    if not files:
        raise SystemExit(f"no Parquet files in {directory}")
    return files


def limited_tables(
    files: Sequence[Path], limit: int | None, episode_column: str | None = "eps_id"
) -> Iterator[tuple[Path, pa.Table]]:
    """Reads files in order, yielding ``(path, table)`` until ``limit`` rows have been yielded.

    The last table is cut just after the episode that holds row ``limit`` (by ``episode_column``,
    so no episode is split; ``None`` cuts at exactly ``limit`` rows). ``limit=None`` reads all.
    """
    left = limit
    for path in files:
        if left is not None and left <= 0:
            return
        if left is None:
            table = pq.read_table(path)
        else:
            table = _read_prefix(path, left, episode_column)
            if table.num_rows > left:
                table = table.slice(0, _episode_end(table, left, episode_column))
            left -= table.num_rows
        yield path, table


def _read_prefix(path: Path, rows: int, column: str | None) -> pa.Table:
    """The first ``rows`` rows of a file and the rest of the episode they end in, or all rows.

    Decodes batch by batch and stops as soon as it can: much faster than ``read_table`` for a
    few rows of a large file (a 5,000-row file of 84x84x4 pixels takes seconds to decode whole).
    """
    batches: list[pa.RecordBatch] = []
    got = 0
    size = max(64, min(rows, 4096))
    for batch in pq.ParquetFile(path, pre_buffer=False).iter_batches(batch_size=size):
        batches.append(batch)
        got += batch.num_rows
        if got > rows and (column is None or _ended(batches, rows, column)):
            break
    return pa.Table.from_batches(batches)


def _ended(batches: list[pa.RecordBatch], rows: int, column: str) -> bool:
    """Whether the episode holding row ``rows - 1`` ends before the last row read."""
    ids = pa.Table.from_batches(batches).column(column)
    return bool(ids[rows - 1].as_py() != ids[len(ids) - 1].as_py())


def _episode_end(table: pa.Table, limit: int, column: str | None) -> int:
    """The first row index >= ``limit`` where ``column`` changes value (or the table's end)."""
    if column is None:
        return limit
    tail = table.column(column).slice(limit - 1).to_numpy(zero_copy_only=False)
    change = np.flatnonzero(tail[1:] != tail[0])
    return table.num_rows if len(change) == 0 else limit + int(change[0])


# ----------------------------------------------------------------------------- timing, memory


@dataclass(frozen=True)
class Timing:
    """Wall seconds of each timed repeat (the warm-up is not included), and CPU seconds if known.

    ``cpu`` is this process's CPU time (``time.process_time``, all threads) per repeat. On a
    shared machine it is far less disturbed by other processes than wall time; a multi-threaded
    call (e.g. a Parquet read) can use more CPU than wall time.
    """

    times: tuple[float, ...]
    cpu: tuple[float, ...] = ()

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def best(self) -> float:
        return min(self.times)

    @property
    def cpu_median(self) -> float | None:
        return statistics.median(self.cpu) if self.cpu else None


Elapsed = float | tuple[float, float] | None


def timed_calls(fn: Callable[[Any], Any], items: Iterable[Any]) -> tuple[float, float]:
    """Calls ``fn(item)`` for each item; returns (wall, CPU) seconds summed over the calls only
    (loading the next item, if ``items`` is lazy, is not counted). Results are dropped at once."""
    wall = cpu = 0.0
    for item in items:
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn(item)
        wall, cpu = wall + time.perf_counter() - t0, cpu + time.process_time() - c0
        del out
    return wall, cpu


def time_repeats(fn: Callable[[], Elapsed], repeats: int, warmup: int = 1) -> Timing:
    """Runs ``fn`` ``warmup`` times untimed, then ``repeats`` times timed.

    ``fn`` may return its own elapsed seconds -- wall, or ``(wall, cpu)`` -- when only part of it
    is to be timed (e.g. the map but not the Parquet read); otherwise the wall and CPU time of
    the whole call are used. A full garbage collection runs before each call, never inside one.
    """
    times, cpus = [], []
    for i in range(warmup + repeats):
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        inner = fn()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if isinstance(inner, tuple):
            wall, cpu = float(inner[0]), float(inner[1])
        elif inner is not None:
            wall, cpu = float(inner), float("nan")
        if i >= warmup:
            times.append(wall)
            cpus.append(cpu)
    known = all(c == c for c in cpus)  # NaN: fn reported wall time only
    return Timing(tuple(times), tuple(cpus) if known else ())


@dataclass(frozen=True)
class MemoryPeak:
    """Peaks (MiB) above the starting level during one call; see the module docstring."""

    py_mb: float
    arrow_mb: float

    @property
    def total_mb(self) -> float:
        return self.py_mb + self.arrow_mb


def measure_peak(fn: Callable[[], Any]) -> MemoryPeak:
    """Runs ``fn`` once under tracemalloc and a proxy Arrow memory pool; returns the peaks.

    The result of ``fn`` is dropped after the peaks are read. The proxy pool is deliberately
    never freed (Arrow buffers allocated through it may outlive the call, and freeing a pool
    before its buffers crashes the process); it costs a few bytes per call.
    """
    gc.collect()
    base = pa.default_memory_pool()
    proxy = pa.proxy_memory_pool(base)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(proxy))
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    start, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    pa.set_memory_pool(proxy)
    try:
        result = fn()
        _, peak = tracemalloc.get_traced_memory()
        arrow_peak = proxy.max_memory()
    finally:
        pa.set_memory_pool(base)
        if not was_tracing:
            tracemalloc.stop()
    del result
    return MemoryPeak(max(peak - start, 0) / _MB, max(arrow_peak, 0) / _MB)


def maxrss_mb() -> float:
    """The process's resident-set high-water mark in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ----------------------------------------------------------------------------- JSON lines


def record(
    bench: str,
    impl: str,
    *,
    n: int,
    timing: Timing,
    unit: str,
    memory: MemoryPeak | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A measurement line: throughput ``n / median seconds``, plus best, memory and extras."""
    line: dict[str, Any] = {
        "bench": bench,
        "impl": impl,
        "throughput": round(n / timing.median, 1),
        "unit": unit,
        "seconds": round(timing.median, 6),
        "peak_mem_mb": None if memory is None else round(memory.total_mb, 1),
        "n": n,
        "seconds_best": round(timing.best, 6),
        "throughput_best": round(n / timing.best, 1),
        "repeats": len(timing.times),
    }
    if timing.cpu_median:
        line["cpu_seconds"] = round(timing.cpu_median, 6)
        line["cpu_throughput"] = round(n / timing.cpu_median, 1)
    if memory is not None:
        line["py_peak_mb"] = round(memory.py_mb, 1)
        line["arrow_peak_mb"] = round(memory.arrow_mb, 1)
    line["maxrss_mb"] = round(maxrss_mb(), 1)
    line["loadavg_1m"] = round(os.getloadavg()[0], 2)
    line.update(extra)
    return line


def emit(line: dict[str, Any]) -> dict[str, Any]:
    """Prints one JSON line to stdout (flushed) and returns it."""
    if "skipped" not in line and line.get("impl") not in NOT_MEASURED:
        missing = [k for k in KEYS if k not in line]
        if missing:
            raise ValueError(f"benchmark line {line.get('bench')!r} lacks keys {missing}")
    print(json.dumps(line), flush=True)
    return line


def log(message: str) -> None:
    """Progress for humans, on stderr (stdout is JSON lines only)."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- header, rounds


def cpu_model() -> str | None:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), else ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo") as fh:
            for row in fh:
                if row.startswith("model name"):
                    return row.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or None


def _git_commit() -> str | None:
    """The checkout's commit (short hash, ``+dirty`` when tracked files differ), or None."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "diff", "--quiet", "HEAD", "--", "offline_prelearner"],
            cwd=REPO,
            capture_output=True,
            check=False,
            timeout=10,
        ).returncode
    except (OSError, subprocess.SubprocessError):
        return None
    return sha + ("+dirty" if dirty else "")


def machine() -> dict[str, Any]:
    """What the figures of a run depend on: CPU model, cores, load, Python, pyarrow, commit."""
    import platform

    return {
        "cpu_model": cpu_model(),
        "nproc": os.cpu_count(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
        "commit": _git_commit(),
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def header(script: str, **extra: Any) -> dict[str, Any]:
    """The header line a run prints first: the script, its options, and :func:`machine`."""
    return {"bench": "header", "impl": "header", "script": script, **machine(), **extra}


Side = Callable[[int], list[dict[str, Any]]]


def alternate(sides: Sequence[tuple[str, Side]], rounds: int) -> list[dict[str, Any]]:
    """Runs every side once per round, the order reversed every other round (A B, B A, ...).

    Args:
        sides: ``(name, fn)`` pairs; ``fn(round)`` runs that side once and returns its JSON
            lines (each with ``bench``, ``impl`` and, when measured, ``throughput``).
        rounds: How many rounds (>= 1; 3 or more for a figure anyone quotes).

    Returns:
        Every side's lines in the order they ran, each tagged ``round`` (0-based), ``side``
        and ``loadavg_1m`` (when the side did not set it).
    """
    out: list[dict[str, Any]] = []
    for r in range(max(1, rounds)):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for name, fn in order:
            log(f"round {r + 1}/{rounds}: {name}")
            for line in fn(r):
                line.setdefault("loadavg_1m", round(os.getloadavg()[0], 2))
                out.append({**line, "round": r, "side": name})
    return out


def _spread(values: Sequence[float]) -> dict[str, Any]:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
    }


def summarize_rounds(
    lines: Sequence[dict[str, Any]],
    pairs: Sequence[tuple[str, tuple[str, str], tuple[str, str]]] = (),
) -> list[dict[str, Any]]:
    """One line per ``(bench, impl)`` over the rounds, then one ratio line per pair.

    Args:
        lines: Lines tagged ``round`` (from :func:`alternate`); those without ``throughput``
            (skipped, ratios) are passed through once.
        pairs: ``(name, (bench_a, impl_a), (bench_b, impl_b))``: a ratio line ``a / b`` of
            throughputs, for each pair both of whose sides were measured.

    Returns:
        Per ``(bench, impl)``: the last round's line with ``throughput`` / ``seconds`` (and
        every ``*_per_s`` extra all rounds have) the medians over rounds, ``throughput_min`` /
        ``throughput_max``, ``throughput_rounds``, ``loadavg_rounds`` and ``rounds``. Per pair:
        ``{"bench": name, "impl": "ratio", "ratio": median_a / median_b,
        "ratio_median_of_rounds": median(a_r / b_r), "ratio_min", "ratio_max",
        "ratio_rounds"}`` (per-round ratios use the rounds both sides ran in).
    """
    groups: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    out: list[dict[str, Any]] = []
    seen: set[tuple[Any, Any]] = set()
    for x in lines:
        key = (x.get("bench"), x.get("impl"))
        if "throughput" in x and x.get("impl") != "ratio":
            groups.setdefault((x["bench"], x["impl"]), {})[int(x.get("round", 0))] = x
        elif key not in seen:
            seen.add(key)
            out.append(x)
    for by_round in groups.values():
        xs = [by_round[r] for r in sorted(by_round)]
        tp = [float(x["throughput"]) for x in xs]
        secs = [float(x["seconds"]) for x in xs if x.get("seconds") is not None]
        s = _spread(tp)
        line = dict(xs[-1])
        line.pop("round", None)
        line.update(
            throughput=round(s["median"], 1),
            throughput_min=round(s["min"], 1),
            throughput_max=round(s["max"], 1),
            throughput_rounds=[round(v, 1) for v in tp],
            rounds=len(xs),
            loadavg_rounds=[x.get("loadavg_1m") for x in xs],
        )
        if secs:
            line["seconds"] = round(statistics.median(secs), 6)
        for key in [k for k in line if k.endswith("_per_s")]:  # e.g. samples_per_s: medians too
            vals = [x[key] for x in xs if isinstance(x.get(key), (int, float))]
            if len(vals) == len(xs):
                line[key] = round(statistics.median(vals), 1)
        out.append(line)
    for name, a, b in pairs:
        ra, rb = groups.get(a), groups.get(b)
        if not ra or not rb:
            continue
        med_a = statistics.median(float(x["throughput"]) for x in ra.values())
        med_b = statistics.median(float(x["throughput"]) for x in rb.values())
        both = sorted(set(ra) & set(rb))
        per = [float(ra[r]["throughput"]) / float(rb[r]["throughput"]) for r in both]
        ratio: dict[str, Any] = {
            "bench": name,
            "impl": "ratio",
            "ratio": round(med_a / med_b, 3),
            "of": [f"{a[0]}:{a[1]}", f"{b[0]}:{b[1]}"],
            "throughput_a": round(med_a, 1),
            "throughput_b": round(med_b, 1),
            "unit": ra[max(ra)].get("unit"),
        }
        if per:
            s = _spread(per)
            ratio.update(
                ratio_median_of_rounds=round(s["median"], 3),
                ratio_min=round(s["min"], 3),
                ratio_max=round(s["max"], 3),
                ratio_rounds=[round(v, 3) for v in per],
                rounds=len(per),
            )
        out.append(ratio)
    return out


# ----------------------------------------------------------------------------- the RLlib side


def rllib_python() -> tuple[str | None, str]:
    """The RLlib venv's interpreter or None, and why: ``$RLLIB_PYTHON``, else the python of
    ``$OFFLINE_PRELEARNER_RLLIB_VENV`` (default ``<repo>/.bench/rllib-venv``, which
    ``benchmarks/setup_rllib.sh`` builds)."""
    path = os.environ.get("RLLIB_PYTHON") or DEFAULT_RLLIB_PYTHON
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return None, (
            f"no RLlib interpreter at {path} (run benchmarks/setup_rllib.sh, or set RLLIB_PYTHON)"
        )
    return path, path


def run_rllib(
    script: Path, args: Sequence[str], benches: Sequence[str], timeout: float = 3600.0
) -> list[dict[str, Any]]:
    """Runs ``script`` under the RLlib venv's python and returns the JSON lines it printed.

    The child inherits this process's environment (thread settings included) and stderr. When
    the interpreter is absent or the script fails, each of ``benches`` gets a ``skipped`` line
    with the reason instead, so a run without RLlib still completes.
    """
    python, why = rllib_python()
    if python is None:
        return [{"bench": b, "impl": "rllib", "skipped": why} for b in benches]
    try:
        proc = subprocess.run(
            [python, str(script), *args],
            stdout=subprocess.PIPE,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return [
            {"bench": b, "impl": "rllib", "skipped": f"timed out after {timeout:.0f} s"}
            for b in benches
        ]
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    seen = {line["bench"] for line in lines}
    if proc.returncode != 0:
        reason = f"{script.name} exited with code {proc.returncode} (its stderr is above)"
        lines += [
            {"bench": b, "impl": "rllib", "skipped": reason} for b in benches if b not in seen
        ]
    return lines


def ratio_lines(lines: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One ``ours / rllib`` line per bench measured by both (same unit), median and best.

    Extras ending in ``_per_s`` present on both sides (e.g. ``steps_per_s``) get a ratio too.
    """
    by_key = {(x["bench"], x["impl"]): x for x in lines if "throughput" in x}
    out = []
    for (bench, impl), ours in by_key.items():
        theirs = by_key.get((bench, "rllib"))
        if impl != "ours" or theirs is None or theirs["unit"] != ours["unit"]:
            continue
        line: dict[str, Any] = {
            "bench": bench,
            "impl": "ratio",
            "ratio": round(ours["throughput"] / theirs["throughput"], 1),
            "ratio_best": round(ours["throughput_best"] / theirs["throughput_best"], 1),
            "unit": ours["unit"],
            "n_ours": ours["n"],
            "n_rllib": theirs["n"],
        }
        if ours.get("cpu_throughput") and theirs.get("cpu_throughput"):
            line["ratio_cpu"] = round(ours["cpu_throughput"] / theirs["cpu_throughput"], 1)
        for key, value in ours.items():
            if key.endswith("_per_s") and key in theirs:
                line[f"ratio_{key}"] = round(value / theirs[key], 1)
        out.append(line)
    return out


def markdown_table(lines: Sequence[dict[str, Any]]) -> str:
    """The lines as a Markdown table: one row per bench, ours and RLlib side by side."""

    def fmt(x: Any) -> str:
        if x is None:
            return "-"
        if isinstance(x, float):
            return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"
        return f"{x:,}" if isinstance(x, int) else str(x)

    rows = [
        "| bench | unit | ours | ours best | ours CPU | RLlib | RLlib CPU | ratio | ratio CPU "
        "| n ours / RLlib | peak MiB ours / RLlib |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    by_key = {(x["bench"], x["impl"]): x for x in lines}
    for bench in dict.fromkeys(x["bench"] for x in lines):
        ours = by_key.get((bench, "ours"))
        if ours is None:
            continue
        theirs = by_key.get((bench, "rllib"), {})
        ratio = by_key.get((bench, "ratio"), {})
        rows.append(
            "| "
            + " | ".join(
                fmt(v)
                for v in (
                    bench,
                    ours["unit"],
                    ours["throughput"],
                    ours["throughput_best"],
                    ours.get("cpu_throughput"),
                    theirs.get("throughput"),
                    theirs.get("cpu_throughput"),
                    ratio.get("ratio"),
                    ratio.get("ratio_cpu"),
                    f"{fmt(ours['n'])} / {fmt(theirs.get('n'))}",
                    f"{fmt(ours['peak_mem_mb'])} / {fmt(theirs.get('peak_mem_mb'))}",
                )
            )
            + " |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    # python benchmarks/_common.py RESULTS.jsonl  ->  the Markdown table of a saved run
    for name in sys.argv[1:]:
        with open(name) as fh:
            print(markdown_table([json.loads(x) for x in fh if x.startswith("{")]))
