"""Tensor layouts of the output: what each costs to write and to read, by cell size, and end to end.

Two parts, one JSON line per measurement (``_common.py`` describes the keys):

* ``cells.<size>.{write,read}`` -- one column of ``--rows`` per-row arrays of one cell size (from
  CartPole's 16-byte ``obs`` to 84x84x4 uint8 frames, 28 KB) in each layout (``lists``: plain
  nested ``fixed_size_list``, what pandas / polars / Hugging Face ``datasets`` read as numbers;
  ``fast``: fixed-size binary cells; ``rllib``: Ray's tensor extension), written to an in-memory
  Parquet file as ``process`` writes it (``columns_to_table`` + ``pq.write_table``, snappy) and
  read back to one numpy array (``pq.read_table`` of the file + ``column_to_numpy``). ``file_mb``
  is the Parquet size. ``peak_mem_mb`` is of one untimed call in a fresh process (the growth of
  its resident high-water mark over the level after set-up; see ``_child_peak``).
* ``process.<data>`` -- the whole batch job (``run_pipeline``, in-process engine, ``sample_all``)
  on CartPole-shaped rows (obs ``(4,)`` float32, input in RLlib's layout) and on pixel rows
  (84x84x4 uint8, input in the fast layout, as ``convert --layout fast`` leaves it), once per
  output layout, with ``sample_all`` as the CLI sets it (every transition written): rows/s of the
  job, which includes writing its samples.

The crossover these lines show is where ``FAST_MIN_CELL_BYTES`` (``io/fast_tensor.py``) is set:
the cell size from which ``layout="auto"`` writes the fast layout. The data are synthetic (a fixed
seed), so the script needs no prepared data set.

    python benchmarks/bench_layouts.py [--quick] [--repeats 3] [--only cells|process]
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _common import emit, log, record, time_repeats

from offline_prelearner.episodes.episode import Episode
from offline_prelearner.io.arrow_numpy import column_to_numpy
from offline_prelearner.io.fast_tensor import parquet_dictionary_columns
from offline_prelearner.io.formats.rows.writer import columns_to_table, write_rows

LAYOUTS = ("lists", "fast", "rllib")
#: (name, dtype, per-row shape): cell sizes from CartPole's obs to Atari frame stacks.
CELLS = (
    ("16B", np.float32, (4,)),
    ("64B", np.float32, (16,)),
    ("256B", np.float32, (64,)),
    ("1KB", np.float32, (256,)),
    ("4KB", np.uint8, (32, 32, 4)),
    ("28KB", np.uint8, (84, 84, 4)),
)


def _values(dtype: Any, shape: tuple[int, ...], rows: int, rng: np.random.Generator) -> np.ndarray:
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal((rows, *shape)).astype(dtype)
    # Frames: a gradient background, a moving bright block and a little sensor noise, so that
    # Parquet compresses them about as much as rendered pixels (not all-flat, not random).
    side = shape[0]
    grad = (np.add.outer(np.arange(side), np.arange(shape[1])) * (128 // side)).astype(np.uint8)
    out = np.broadcast_to(grad[None, :, :, None], (rows, *shape)).copy()
    out += rng.integers(0, 4, out.shape, dtype=np.uint8)
    pos = (np.arange(rows) * 3) % max(side - 8, 1)
    for k in range(8):  # an 8x8 block, one fancy-indexed row of it at a time
        out[np.arange(rows)[:, None], (pos + k)[:, None], pos[:, None] + np.arange(8)] = 230
    return out


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, use_dictionary=parquet_dictionary_columns(table.schema))
    return sink.getvalue()


def _cell_values(name: str, rows_cap: int) -> np.ndarray:
    """The column of cell size ``name`` (the same values in every process: a fixed seed)."""
    k = [c[0] for c in CELLS].index(name)
    _, dtype, shape = CELLS[k]
    cell = np.dtype(dtype).itemsize * int(np.prod(shape))
    rows = int(min(rows_cap, max(1000, (64 << 20) // cell)))  # at most ~64 MB a column
    return _values(dtype, shape, rows, np.random.default_rng(k))


def _write(x: np.ndarray, layout: str) -> bytes:
    return _parquet_bytes(columns_to_table({"obs": x}, layout=layout))  # type: ignore[arg-type]


def _read(path: str) -> np.ndarray:
    return column_to_numpy(pq.read_table(path), "obs")


def _child_peak(args: list[str]) -> float:
    """Peak memory (MiB) of one call, measured in a fresh process as the growth of its resident
    high-water mark (``VmHWM``, reset after set-up) over its resident size then.

    Not ``_common.measure_peak``: its proxy memory pool crashes pyarrow 26 here (a segfault in an
    I/O thread when Parquet fields carrying extension metadata are read under it, reproduced with
    pure pyarrow)."""
    r = subprocess.run(
        [sys.executable, __file__, "--child-peak", *args], capture_output=True, text=True
    )
    if r.returncode != 0:
        raise RuntimeError(f"peak child {args} failed: {r.stderr[-2000:]}")
    return float(json.loads(r.stdout.strip().splitlines()[-1])["peak_mb"])


def _run_child_peak(args: list[str]) -> None:
    what = args[0]
    if what == "write":
        name, layout, rows_cap = args[1], args[2], int(args[3])
        x = _cell_values(name, rows_cap)

        def fn() -> object:
            return _write(x, layout)
    elif what == "read":

        def fn() -> object:
            return _read(args[1])
    else:  # process
        from offline_prelearner.config import PreLearnerConfig
        from offline_prelearner.jobs.batch.batch_job import run_pipeline

        src, layout, out_dir, capacity = args[1], args[2], args[3], int(args[4])
        config = PreLearnerConfig().with_updates({"buffer.capacity": capacity, "sample_all": True})

        def fn() -> object:
            return run_pipeline(src, config, out_dir=out_dir, engine="local", layout=layout)  # type: ignore[arg-type]

    gc.collect()
    base = _reset_peak_rss()
    result = fn()
    peak = _status_mb("VmHWM") - base
    del result
    print(json.dumps({"peak_mb": round(peak, 1)}))


def _status_mb(key: str) -> float:
    """A ``/proc/self/status`` memory figure in MiB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"no {key} in /proc/self/status")


def _reset_peak_rss() -> float:
    """Resets this process's resident high-water mark (``VmHWM``; ``ru_maxrss`` cannot be reset
    and a child inherits its parent's) and returns the current resident size, MiB."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_mb("VmRSS")


def bench_cells(rows_cap: int, repeats: int, only: list[str] | None = None) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-layouts-") as tmp:
        for name, dtype, shape in CELLS:
            if only and name not in only:
                continue
            cell = np.dtype(dtype).itemsize * int(np.prod(shape))
            x = _cell_values(name, rows_cap)
            rows = len(x)
            for layout in LAYOUTS:
                log(f"cells {name}: {rows} rows, layout {layout}")
                data = _write(x, layout)
                path = str(Path(tmp) / f"{name}-{layout}.parquet")
                Path(path).write_bytes(data)
                back = _read(path)
                assert back.shape == x.shape and np.array_equal(back, x), (name, layout)
                del back

                def write(layout: str = layout, x: np.ndarray = x) -> None:
                    _write(x, layout)

                def read(path: str = path) -> None:
                    _read(path)

                extra = {
                    "layout": layout,
                    "cell_bytes": cell,
                    "file_mb": round(len(data) / 2**20, 2),
                }
                peaks = {
                    "write": ["write", name, layout, str(rows_cap)],
                    "read": ["read", path],
                }
                for kind, fn in (("write", write), ("read", read)):
                    line = record(
                        f"cells.{name}.{kind}",
                        layout,
                        n=rows,
                        timing=time_repeats(fn, repeats),
                        unit="rows/s",
                        **extra,
                    )
                    line["peak_mem_mb"] = _child_peak(peaks[kind])
                    emit(line)


def _episodes(kind: str, steps: int) -> list[Episode]:
    """CartPole-shaped (random obs, ~22 steps an episode) or pixel episodes (50 steps)."""
    rng = np.random.default_rng(1)
    eps, total, i = [], 0, 0
    while total < steps:
        n = int(rng.integers(10, 35)) if kind == "cartpole" else 50
        n = min(n, steps - total)
        if kind == "cartpole":
            obs = rng.standard_normal((n + 1, 4)).astype(np.float32)
        else:
            obs = _values(np.uint8, (84, 84, 4), n + 1, rng)
        eps.append(
            Episode(
                id=f"ep{i:06d}",
                observations=obs,
                actions=rng.integers(0, 2, n).astype(np.int64),
                rewards=np.ones(n, np.float32),
                terminated=True,
            )
        )
        total, i = total + n, i + 1
    return eps


def bench_process(cartpole_rows: int, pixel_rows: int, repeats: int) -> None:
    from offline_prelearner.config import PreLearnerConfig
    from offline_prelearner.jobs.batch.batch_job import run_pipeline

    with tempfile.TemporaryDirectory(prefix="bench-layouts-") as tmp:
        for kind, rows, in_layout in (
            ("cartpole", cartpole_rows, "rllib"),
            ("pixels", pixel_rows, "fast"),
        ):
            if rows <= 0:
                continue
            src = Path(tmp) / kind
            write_rows(_episodes(kind, rows), src / "rows.parquet", layout=in_layout)  # type: ignore[arg-type]
            updates = {"buffer.capacity": 2 * rows, "sample_all": True}
            config = PreLearnerConfig().with_updates(updates)
            for layout in LAYOUTS:
                log(f"process {kind}: {rows} rows -> layout {layout}")
                out = Path(tmp) / "out"

                def job(
                    layout: str = layout, src: Path = src, out: Path = out, config: Any = config
                ) -> None:
                    shutil.rmtree(out, ignore_errors=True)
                    res = run_pipeline(str(src), config, out_dir=out, engine="local", layout=layout)  # type: ignore[arg-type]
                    assert res is not None

                timing = time_repeats(job, repeats)
                size = sum(f.stat().st_size for f in out.rglob("*.parquet"))
                line = record(
                    f"process.{kind}",
                    layout,
                    n=rows,
                    timing=timing,
                    unit="rows/s",
                    layout=layout,
                    input_layout=in_layout,
                    out_mb=round(size / 2**20, 2),
                )
                peak_out = str(Path(tmp) / "peak-out")
                shutil.rmtree(peak_out, ignore_errors=True)
                line["peak_mem_mb"] = _child_peak(
                    ["process", str(src), layout, peak_out, str(2 * rows)]
                )
                emit(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats (default 3)")
    parser.add_argument("--only", choices=["cells", "process"], default=None)
    parser.add_argument("--rows", type=int, default=200_000, help="cells: at most this many rows")
    parser.add_argument(
        "--cells", nargs="*", default=None, help="cells: only these sizes (e.g. 16B 28KB)"
    )
    parser.add_argument(
        "--process-rows",
        nargs=2,
        type=int,
        default=(100_000, 3_000),
        metavar=("CARTPOLE", "PIXELS"),
        help="process: rows of each data set (0 skips it; default 100000 3000)",
    )
    parser.add_argument("--child-peak", nargs="+", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_peak:
        _run_child_peak(args.child_peak)
        return 0
    repeats = args.repeats or (1 if args.quick else 3)
    if args.only in (None, "cells"):
        bench_cells(10_000 if args.quick else args.rows, repeats, args.cells)
    if args.only in (None, "process"):
        if args.quick:
            bench_process(5_000, 500, repeats)
        else:
            bench_process(*args.process_rows, repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
