"""The fixed cost of a Ray job (issue 24): what ``process --engine ray`` costs above bare Ray.

Prints JSON lines (``_common.py``; the first is the header: CPU model, cores, load, commit):

* ``fixed_cost.bare_ray`` -- a fresh Python process running ``import ray;
  ray.init(num_cpus=<cores>, include_dashboard=False); ray.shutdown()``: the least any Ray job
  on this machine pays (``seconds``: the process's wall time).
* ``fixed_cost.ray.<rows>`` / ``fixed_cost.local.<rows>`` -- ``offline-prelearner process DATA
  --out OUT --engine ray|local --json`` in a fresh process (what a user runs and waits for), at
  two sizes (default 0.5M and 2M CartPole rows in RLlib's row layout, 100k rows a file,
  ``bench_scaling.make_rows``): ``seconds`` is the process's wall time, start to exit; ``phases``
  the job's own (``stats.json``: plan, engine_start, units, commit, stop); ``fixed_s`` the wall
  time less the units' phase (everything but the units' own work: Python and imports, planning,
  Ray's start up to the first unit begun, the commit, the stop, the exit).
* ``fixed_cost.fit.<engine>.<impl>`` -- the line through the two sizes' median wall times: ``slope``
  (rows/s of the data-proportional part) and ``intercept_s`` (a job of no rows: the fixed cost).
* ``fixed_cost.excess.<impl>`` -- the target's figure: the Ray job's fixed cost above the bare Ray
  process (``intercept_excess_s`` from the fit; ``fixed_excess_s`` per size from the phases),
  and ``met``: at most 3 s at every size.

``--rounds R`` (default 3) runs every side once per round, the order reversed every other round
(``_common.alternate``): figures are medians over rounds. ``--baseline-ref REF`` also runs the
CLI as of commit ``REF`` (a ``git worktree`` under ``<repo>/.bench/``, the checkout untouched)
in the same rounds, as ``impl: "baseline"`` (its stats.json may hold no phases: then only its
fit says its fixed cost).

Usage: ``python benchmarks/bench_fixed_cost.py [--sizes 500000 2000000] [--rounds 3]
[--data-dir DIR] [--baseline-ref REF]``
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C
from bench_scaling import make_rows

#: At most this many seconds above bare Ray, at every size (issue 24).
TARGET_EXCESS_S = 3.0
ROWS_PER_FILE = 100_000


def dataset(root: Path, rows: int) -> Path:
    """``rows`` CartPole rows under ``root`` (made once, then reused)."""
    out = root / f"rows-{rows}"
    if not (out / "_done").exists():
        shutil.rmtree(out, ignore_errors=True)
        make_rows(out, rows, max(1, rows // ROWS_PER_FILE))
        (out / "_done").write_text("ok\n")
    return out


def _env(pythonpath: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_USAGE_STATS_ENABLED"] = "0"  # the same for every side (the CLI sets it itself)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def bare_ray(cores: int) -> dict[str, Any]:
    """A fresh process: ``import ray``, ``ray.init``, ``ray.shutdown``; its wall time."""
    code = (
        f"import ray; ray.init(num_cpus={cores}, include_dashboard=False, log_to_driver=False); "
        "ray.shutdown()"
    )
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(None), check=False
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"bare ray.init failed: {proc.stderr.strip()[-300:]}")
    C.log(f"bare ray: {wall:.2f} s")
    return _line("fixed_cost.bare_ray", "ours", 1, wall)


def run_cli(
    bench: str, impl: str, data: Path, engine: str, work: Path, pythonpath: str | None
) -> dict[str, Any]:
    """``offline-prelearner process`` in a fresh process: wall time, phases, fixed part."""
    out = work / f"out-{impl}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "offline_prelearner", "process", str(data), "--out", str(out)]
    cmd += ["--engine", engine, "--json"]
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=_env(pythonpath), check=False, cwd=work
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        shutil.rmtree(out, ignore_errors=True)
        raise SystemExit(f"{bench} ({impl}) failed: {proc.stderr.strip()[-300:]}")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    stats = json.loads((out / "stats.json").read_text())
    shutil.rmtree(out, ignore_errors=True)
    line = _line(bench, impl, int(summary["rows_in"]), wall)
    line["job_seconds"] = summary.get("wall_seconds")
    phases = stats.get("phases")
    if phases:
        line["phases"] = phases
        line["fixed_s"] = round(wall - phases["units"], 3)
    C.log(f"{bench} ({impl}): {wall:.2f} s wall, phases {phases}")
    return line


def _line(bench: str, impl: str, n: int, seconds: float) -> dict[str, Any]:
    return {
        "bench": bench,
        "impl": impl,
        "throughput": round(n / seconds, 1),
        "unit": "rows/s" if n > 1 else "runs/s",
        "seconds": round(seconds, 3),
        "peak_mem_mb": None,
        "n": n,
    }


def _medians(lines: list[dict[str, Any]], bench: str, impl: str, key: str) -> float | None:
    xs = [x[key] for x in lines if x["bench"] == bench and x["impl"] == impl and key in x]
    return round(statistics.median(xs), 3) if xs else None


def _median_phases(lines: list[dict[str, Any]], bench: str, impl: str) -> dict[str, float]:
    runs = [
        x["phases"] for x in lines if x["bench"] == bench and x["impl"] == impl and "phases" in x
    ]
    if not runs:
        return {}
    return {k: round(statistics.median(float(p[k]) for p in runs), 3) for k in runs[0]}


def derived(
    lines: list[dict[str, Any]], sizes: list[int], impls: list[str]
) -> list[dict[str, Any]]:
    """Fits (slope, intercept) per engine and implementation, and the excess over bare Ray."""
    bare = _medians(lines, "fixed_cost.bare_ray", "ours", "seconds")
    out: list[dict[str, Any]] = []
    lo, hi = min(sizes), max(sizes)
    for impl in impls:
        for engine in ("ray", "local"):
            a = _medians(lines, f"fixed_cost.{engine}.{lo}", impl, "seconds")
            b = _medians(lines, f"fixed_cost.{engine}.{hi}", impl, "seconds")
            fit: dict[str, Any] = {"bench": f"fixed_cost.fit.{engine}.{impl}", "impl": "fit"}
            if a is not None and b is not None and b > a and hi > lo:
                slope = (hi - lo) / (b - a)
                fit.update(slope=round(slope, 1), intercept_s=round(b - hi / slope, 3))
            fit["unit"] = "slope rows/s, intercept s"
            out.append(fit)
        ray_fit = out[-2]
        excess: dict[str, Any] = {
            "bench": f"fixed_cost.excess.{impl}",
            "impl": "fit",
            "bare_ray_s": bare,
            "unit": "s above the bare Ray process",
        }
        if bare is not None and "intercept_s" in ray_fit:
            excess["intercept_excess_s"] = round(ray_fit["intercept_s"] - bare, 3)
        per_size = {}
        for n in sizes:
            fixed = _medians(lines, f"fixed_cost.ray.{n}", impl, "fixed_s")
            if fixed is not None and bare is not None:
                per_size[str(n)] = round(fixed - bare, 3)
            phases = _median_phases(lines, f"fixed_cost.ray.{n}", impl)
            if phases:
                excess[f"phases_{n}"] = phases
        if per_size:
            excess["fixed_excess_s"] = per_size
            excess["met"] = max(per_size.values()) <= TARGET_EXCESS_S
        out.append(excess)
    return out


def baseline_tree(ref: str) -> Path:
    """A worktree of ``ref`` under ``<repo>/.bench/`` (made once; the checkout is untouched)."""
    tree = C.REPO / ".bench" / f"fixed-cost-base-{ref}"
    if not tree.exists():
        subprocess.run(
            ["git", "-C", str(C.REPO), "worktree", "add", "--detach", str(tree), ref],
            check=True,
            capture_output=True,
        )
    return tree


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs=2, default=[500_000, 2_000_000])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--data-dir",
        default=None,
        help="where the row data is made once (default <repo>/.bench/fixed_cost)",
    )
    p.add_argument("--baseline-ref", default=None, help="also run the CLI as of this commit")
    p.add_argument("--no-local", action="store_true", help="skip the local engine's runs")
    args = p.parse_args(argv)
    root = Path(args.data_dir or C.REPO / ".bench" / "fixed_cost")
    cores = os.cpu_count() or 1
    C.emit(C.header("bench_fixed_cost.py", argv=sys.argv[1:] if argv is None else argv))
    data = {n: dataset(root, n) for n in args.sizes}
    impls = [("ours", None)]
    if args.baseline_ref:
        impls.append(("baseline", str(baseline_tree(args.baseline_ref))))
    work = Path(tempfile.mkdtemp(prefix="bench_fixed_cost-"))
    try:
        sides: list[tuple[str, C.Side]] = [("bare", lambda _: [bare_ray(cores)])]
        engines = ["ray"] if args.no_local else ["ray", "local"]
        for n in args.sizes:
            for engine in engines:
                for impl, path in impls:
                    bench = f"fixed_cost.{engine}.{n}"
                    sides.append(
                        (
                            f"{bench}:{impl}",
                            lambda _, b=bench, i=impl, d=data[n], e=engine, pp=path: [
                                run_cli(b, i, d, e, work, pp)
                            ],
                        )
                    )
        lines = C.alternate(sides, args.rounds)
        for line in C.summarize_rounds(lines):
            line.pop("side", None)
            if "phases" in line:
                line["phases"] = _median_phases(lines, line["bench"], line["impl"])
                line["fixed_s"] = _medians(lines, line["bench"], line["impl"], "fixed_s")
            C.emit(line)
        for line in derived(lines, args.sizes, [i for i, _ in impls]):
            C.emit(line)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
