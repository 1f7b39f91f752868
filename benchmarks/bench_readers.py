"""Readers benchmark: rows -> episodes and msgpack episodes decoded per second, beside RLlib 2.60.

Workloads (bench names; the same names on the RLlib side, so each gets a ratio line):

* ``cartpole_rows.*``  -- the 1,000,003 CartPole rows (RLlib recorder layout, Ray tensor columns,
  no ``t``) through ``make_reader(ReadConfig(format="rows"))``, rows/s;
* ``pixels_rows.*``    -- the 100,017 rows of 84x84x4 uint8 observations, the same way, rows/s;
* ``cartpole_episodes.*`` -- the 44,685 msgpack episodes through ``ReadConfig(format="episodes")``,
  episodes/s (and ``steps_per_s``).
* ``minari_{hdf5,arrow,parquet}.read_map``, ``d4rl_hdf5.read_map`` -- 1M synthetic CartPole-sized
  steps in Minari's three layouts and a D4RL file, files read and mapped, steps/s, beside h5py's
  / pyarrow's raw read of the same arrays (``raw`` lines, ratio ``ours / raw``); no data folder
  or RLlib needed (:mod:`_field_formats`).
* ``obs_only_rows_{cartpole,pixels}.map`` beside ``with_new_obs_rows_*.map`` (``--only obs_only``)
  -- synthetic rows, 1M CartPole-sized steps (float32
  obs of 4) and 20k 84x84x4 uint8 pixel steps, in 200-step episodes (terminated, truncated in
  turn), batches of 4096 rows cut across episodes: the rows reader on the rows *without* a
  ``new_obs`` column (schema ``rllib_obs_only``: next observation from the next row, last rows
  held across batches) beside the same rows *with* ``new_obs`` (schema ``rllib``), rows/s of the
  reader's ``read`` only, ratio ``obs_only / with_new_obs``. Synthetic: no data folder or RLlib.

Each Parquet file is one batch, read in name order with ``pyarrow.parquet.read_table`` (a fresh
reader per pass). Per workload three lines: ``.map`` / ``.decode`` times only the reader's
``read(table)`` (the figure compared with RLlib), ``.read`` only the Parquet read, and
``.read_map`` / ``.read_decode`` the two together, per pass. RLlib's side (``rllib_readers.py``)
runs afterwards in its own venv, on a prefix of each dataset. See ``benchmarks/README.md``.

Usage: ``python benchmarks/bench_readers.py [--data DIR] [--quick] [--repeats K] [--no-rllib]``
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common as C
import numpy as np
import pyarrow as pa

from offline_prelearner.config import ReadConfig
from offline_prelearner.episodes.ledger import Ledger
from offline_prelearner.io.formats.rows.writer import columns_to_table
from offline_prelearner.io.readers import make_reader

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Workload:
    """One dataset through one reader format."""

    name: str  # bench name prefix and data sub-folder, e.g. "cartpole_rows"
    format: str  # ReadConfig.format
    unit: str  # what n counts: "rows" or "episodes"
    verb: str  # what the reader does to them: "map" or "decode"
    episode_column: str | None  # a --quick cut falls where this changes (None: anywhere)
    quick_limit: int  # n under --quick


#: Timed passes per workload (``--repeats`` overrides; 1 under ``--quick``). A pixels pass is
#: dominated by decoding 5.6 GB of Parquet lists (minutes), hence fewer. Same in rllib_readers.py.
DEFAULT_REPEATS = {"rows": 5, "pixels": 3, "episodes": 5}

WORKLOADS = {
    "rows": Workload("cartpole_rows", "rows", "rows", "map", "eps_id", 20_000),
    "pixels": Workload("pixels_rows", "rows", "rows", "map", "eps_id", 300),
    "episodes": Workload("cartpole_episodes", "episodes", "episodes", "decode", None, 1_000),
}


@dataclass
class Pass:
    """Seconds and counts of one pass over the files."""

    read_s: float = 0.0
    map_s: float = 0.0
    read_cpu: float = 0.0
    map_cpu: float = 0.0
    rows: int = 0
    episodes: int = 0
    steps: int = 0


def one_pass(work: Workload, files: list[Path], limit: int | None) -> Pass:
    """Reads each file (timed) and maps it (timed separately) with a fresh reader."""
    reader = make_reader(ReadConfig(format=work.format))
    tables = iter(C.limited_tables(files, limit, work.episode_column))
    result = Pass()
    while True:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            path, table = next(tables)
        except StopIteration:
            break
        t1, c1 = time.perf_counter(), time.process_time()
        out = reader.read(table, source=str(path))
        t2, c2 = time.perf_counter(), time.process_time()
        _check(out, table.num_rows, path)
        result.read_s += t1 - t0
        result.map_s += t2 - t1
        result.read_cpu += c1 - c0
        result.map_cpu += c2 - c1
        result.rows += table.num_rows
        result.episodes += len(out.episodes)
        result.steps += sum(len(e) for e in out.episodes)
        del table, out
    return result


def _check(out: Any, rows: int, path: Path) -> None:
    """A benchmark over silently rejected rows would measure nothing: insist on a clean read."""
    ledger = out.ledger
    if not ledger.balanced() or ledger.rows_in != rows or ledger.rows_kept != rows:
        raise SystemExit(f"{path}: reader did not keep every row: {ledger.to_dict()}")


def bench(
    work: Workload, data: Path, quick: bool, repeats: int, extra: dict[str, Any]
) -> list[dict[str, Any]]:
    """Warm-up, ``repeats`` timed passes, then one untimed run per line for peak memory."""
    files = C.parquet_files(data / work.name)
    limit = work.quick_limit if quick else None
    first = lambda: next(iter(C.limited_tables(files, limit, work.episode_column)))  # noqa: E731
    warm_path, warm_table = first()
    make_reader(ReadConfig(format=work.format)).read(warm_table.slice(0, 2000), str(warm_path))
    passes = []
    for i in range(repeats):
        passes.append(one_pass(work, files, limit))
        p = passes[-1]
        C.log(
            f"ours {work.name} pass {i + 1}/{repeats}: read {p.read_s:.2f} s, "
            f"{work.verb} {p.map_s:.2f} s, {p.rows} {work.unit}"
        )
    p = passes[0]
    n = p.rows
    counts = {"episodes": p.episodes, "steps": p.steps, "files": len(files) if not quick else None}
    reader = make_reader(ReadConfig(format=work.format))
    mem_map = C.measure_peak(functools.partial(reader.read, warm_table, str(warm_path)))
    mem_read = C.measure_peak(lambda: first()[1])
    mem_both = C.measure_peak(
        lambda: make_reader(ReadConfig(format=work.format)).read(first()[1], "first")
    )
    mem_rows = warm_table.num_rows
    del warm_table
    lines = []
    timings: list[tuple[str, Callable[[Pass], tuple[float, float]], C.MemoryPeak]] = [
        (work.verb, lambda q: (q.map_s, q.map_cpu), mem_map),
        ("read", lambda q: (q.read_s, q.read_cpu), mem_read),
        (f"read_{work.verb}", lambda q: (q.read_s + q.map_s, q.read_cpu + q.map_cpu), mem_both),
    ]
    for suffix, seconds, memory in timings:
        wall_cpu = [seconds(q) for q in passes]
        timing = C.Timing(tuple(w for w, _ in wall_cpu), tuple(c for _, c in wall_cpu))
        line = C.record(
            f"{work.name}.{suffix}",
            "ours",
            n=n,
            timing=timing,
            unit=f"{work.unit}/s",
            memory=memory,
            mem_batch_rows=mem_rows,
            **counts,
            **extra,
        )
        if work.unit == "episodes":
            line["steps_per_s"] = round(p.steps / timing.median, 1)
        lines.append(C.emit(line))
    return lines


def _obs_only_batches(
    steps: int, obs_shape: tuple[int, ...], dtype: Any, with_new_obs: bool
) -> list[pa.Table]:
    """``steps`` rows of 200-step episodes (alternately terminated / truncated) in 4096-row
    Arrow batches; obs as the fast tensor layout (one fixed-size cell per row)."""
    rng = np.random.default_rng(0)
    ep_len = 200
    n_ep = -(-steps // ep_len)
    per_ep = ep_len + 1  # each episode's observations, the last one after its last step
    obs_all = rng.integers(0, 255, (n_ep * per_ep, *obs_shape)).astype(dtype)
    step = np.arange(steps)
    ep, t = step // ep_len, step % ep_len
    last = (t == ep_len - 1) | (step == steps - 1)
    cols: dict[str, Any] = {
        "eps_id": ep,
        "t": t,
        "obs": obs_all[ep * per_ep + t],
        "actions": rng.integers(0, 2, steps),
        "rewards": np.ones(steps, np.float32),
        "terminateds": last & (ep % 2 == 0),
        "truncateds": last & (ep % 2 == 1),
    }
    if with_new_obs:
        cols["new_obs"] = obs_all[ep * per_ep + t + 1]
    table = columns_to_table(cols, layout="fast")
    return [table.slice(a, 4096) for a in range(0, steps, 4096)]


def bench_obs_only(quick: bool, repeats: int, extra: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows without a next-observation column vs the same rows with one (see the docstring)."""
    lines = []
    for kind, steps, shape, dtype in (
        ("cartpole", 20_000 if quick else 1_000_000, (4,), np.float32),
        ("pixels", 2_000 if quick else 20_000, (84, 84, 4), np.uint8),
    ):
        results = {}
        for impl, schema, with_new in (
            ("with_new_obs", "rllib", True),
            ("obs_only", "rllib_obs_only", False),
        ):
            batches = _obs_only_batches(steps, shape, dtype, with_new)

            def run(schema: str = schema, batches: list[pa.Table] = batches) -> tuple[float, float]:
                reader = make_reader(ReadConfig(format="rows", schema=schema))
                return C.timed_calls(lambda tbl: reader.read(tbl, "bench"), batches)

            reader = make_reader(ReadConfig(format="rows", schema=schema))
            ledger = Ledger()
            for batch in batches:
                ledger += reader.read(batch, "bench").ledger
            # every row kept, but a truncated episode's last row without new_obs
            if not ledger.balanced() or set(ledger.rows_rejected) - {"next_obs_unknown"}:
                raise SystemExit(f"{kind} {impl}: rows were rejected: {ledger.to_dict()}")
            timing = C.time_repeats(run, repeats)
            results[impl] = C.emit(
                C.record(
                    f"{impl}_rows_{kind}.map",
                    "ours",
                    n=steps,
                    timing=timing,
                    unit="rows/s",
                    batch_rows=4096,
                    **extra,
                )
            )
        a, b = results["obs_only"], results["with_new_obs"]
        lines += [b, a, C.emit({
            "bench": f"obs_only_rows_{kind}.map", "impl": "ratio", "vs": "with_new_obs",
            "ratio": round(a["throughput"] / b["throughput"], 2),
            "ratio_best": round(a["throughput_best"] / b["throughput_best"], 2),
            "unit": "rows/s", "n_ours": steps, "n_rllib": None,
        })]  # fmt: skip
        C.log(
            f"obs_only_rows_{kind}: obs only {a['throughput']:,.0f} rows/s, with new_obs "
            f"{b['throughput']:,.0f} rows/s"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    C.add_common_args(parser)
    parser.add_argument(
        "--only",
        default="rows,pixels,episodes",
        help="comma-separated workloads: rows, pixels, episodes, minari (its three layouts "
        "and D4RL), obs_only (rows without a new_obs column vs with one)",
    )
    parser.add_argument("--no-rllib", action="store_true", help="skip the RLlib side")
    args = parser.parse_args(argv)
    only = [w for w in args.only.split(",") if w]
    field = "minari" in only
    obs_only = "obs_only" in only
    only = [w for w in only if w not in ("minari", "obs_only")]
    if (field or obs_only) and not only:  # synthetic data: no data folder, no RLlib
        from _field_formats import bench_field_formats

        reps = args.repeats or (1 if args.quick else 3)
        lines = bench_field_formats(args.quick, reps, {}) if field else []
        lines += bench_obs_only(args.quick, reps, {}) if obs_only else []
        C.log("summary\n" + C.markdown_table([x for x in lines if x["impl"] != "ratio"]))
        return 0
    data = C.data_dir(args.data)
    unknown = sorted(set(only) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workloads {unknown}; choose from {sorted(WORKLOADS)}")
    extra = {"digest": C.dataset_digest(data), "quick": args.quick}
    t0 = time.perf_counter()
    # RLlib first: a child inherits its parent's ru_maxrss high-water mark, so it must start
    # while this process is still small.
    benches = [f"{WORKLOADS[k].name}.{WORKLOADS[k].verb}" for k in only]
    if args.no_rllib:
        rllib = [{"bench": b, "impl": "rllib", "skipped": "--no-rllib"} for b in benches]
    else:
        rllib_args = ["--data", str(data), "--only", ",".join(only)]
        rllib_args += ["--quick"] * args.quick
        rllib_args += ["--repeats", str(args.repeats)] * bool(args.repeats)
        rllib = C.run_rllib(HERE / "rllib_readers.py", rllib_args, benches)
    lines = [C.emit(line) for line in rllib]
    for key in only:
        repeats = args.repeats or (1 if args.quick else DEFAULT_REPEATS[key])
        lines += bench(WORKLOADS[key], data, args.quick, repeats, extra)
    lines += [C.emit(line) for line in C.ratio_lines(lines)]
    if field:
        from _field_formats import bench_field_formats

        lines += bench_field_formats(args.quick, args.repeats or (1 if args.quick else 3), extra)
    if obs_only:
        lines += bench_obs_only(args.quick, args.repeats or (1 if args.quick else 3), extra)
    C.log("summary\n" + C.markdown_table(lines))
    C.log(f"done in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
