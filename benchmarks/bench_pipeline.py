"""End-to-end benchmark (issue 4): files -> Ray Data map_batches(prelearner) -> all batches out.

Both sides run in a local ``ray.init(num_cpus=2)`` session, one prelearner actor (``num_cpus=1``)
in ``map_batches``, and the timed span is everything a user waits for: building the dataset,
starting the actor, reading the Parquet files, mapping, and iterating every output batch in the
driver. Ray is started before the clock; each repeat builds a fresh dataset (and actor).

Workloads (bench names; ``b<N>`` is the ``map_batches`` batch size in input rows):

* ``cartpole_rows.e2e.b<N>`` -- ours: read_parquet -> map_batches(prelearner) -> iterate every
  output batch (``build_dataset`` + ``iter_batches``, what ``iter_learner_batches`` and a learner
  run) on the 1,000,003 CartPole rows with the defaults (uniform replay, ``Transition``,
  ``train_batch_size=256`` samples per input batch). ``first_batch_s`` is the time to the first
  output batch (what a learner waits before it can train).
* ``cartpole_rows.e2e_job.b<N>`` -- the batch job: ``run_pipeline`` (the same, plus the stats
  collector actor that sums every prelearner's ledger into ``stats.json``).
  RLlib: ``OfflineData.sample(num_samples=N, return_iterator=True)`` of a ``BCConfig`` (each row
  becomes a one-step episode and runs through BC's learner connector; every row is emitted).
* ``cartpole_rows.e2e_nstep3.b<N>`` -- ours, ``n_step=3`` (RLlib's row path ignores ``n_step``).
* ``cartpole_rows.e2e_sample_all.b<N>`` -- ours, ``sample_all=true``: every transition emitted
  once, which is what RLlib's row path emits too (so this is the closest like-for-like pair).
* ``cartpole_rows.read_iter.b<N>`` -- the bare floor: ``read_parquet(files).iter_batches``.
* ``cartpole_rows.read_iter_sized.b<N>`` -- the same through the pipeline's read (one Parquet
  footer actor per 10 files instead of Ray's 32): the floor our job actually stands on.
* ``cartpole_episodes.e2e.b<N>`` -- the 44,685 msgpack episodes, ``format=episodes``; RLlib with
  ``input_read_episodes=True`` (its episode buffer, 256 samples per input batch). ``N`` counts
  episodes; ``n`` and ``throughput`` are episodes, ``steps_per_s`` env steps.
* ``pixels_rows.<variant>.b<N>`` (``--only pixels``) -- the 100,017 rows of 84x84x4 uint8
  frames, one batch size (the first of ``--batch-sizes``): ``read_iter`` (the floor), ``e2e``
  (defaults, but ``buffer.capacity=50_000``: the default 1M slots of 28 KB frames is a 26 GiB
  ``np.zeros`` that the actor cannot allocate), ``e2e_nstep3`` and ``e2e_framestack4``
  (``frame_stack=4``: four stacked frames per sample). RLlib: the same ``BCConfig`` job with the
  frames' spaces (``Box(0, 255, (84, 84, 4), uint8)``, ``Discrete(2)``) on the first
  ``--rllib-pixel-files`` files. One repeat unless ``--repeats`` says otherwise: a pass decodes
  5.6 GB of Parquet lists (~300-700 rows/s on 2 cores), so it takes minutes; not in the default
  ``--only`` for that reason.

Each line's ``n`` / ``throughput`` is input rows (episodes) per second of wall time;
``samples_per_s`` is learner-ready rows out per second. ``peak_mem_mb`` is the peak summed RSS of
the session's Ray worker processes (``ray::*``, polled from ``/proc`` every 0.2 s), ``actor_rss_mb``
the largest single worker; both include Ray's per-process baseline. RLlib runs first, in its own
venv (``rllib_pipeline.py``), on a prefix of the files (``n`` says how many rows).

Usage: ``python benchmarks/bench_pipeline.py [--data DIR] [--quick] [--repeats K] [--no-rllib]
[--batch-sizes 4096,65536] [--only rows,episodes,pixels] [--pixel-files K]``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common as C

HERE = Path(__file__).resolve().parent
DEFAULT_REPEATS = 3
DEFAULT_BATCH_SIZES = (4096, 65536)
EPISODE_BATCH_SIZES = {4096: 256, 65536: 4096}  # rows batch size -> episodes batch size
#: Variants of our row job: bench suffix -> config updates (on top of the defaults).
ROW_VARIANTS: dict[str, dict[str, Any]] = {
    "e2e": {"job_stats": False},
    "e2e_job": {},
    "e2e_nstep3": {"n_step": 3},
    "e2e_sample_all": {"sample_all": True},
}
#: Variants of our pixel job, on top of :data:`PIXEL_BASE`.
PIXEL_VARIANTS: dict[str, dict[str, Any]] = {
    "e2e": {},
    "e2e_nstep3": {"n_step": 3},
    "e2e_framestack4": {"frame_stack": 4},
}
#: The pixel job's one change from the defaults: 50k replay slots of 84x84x4 frames (1.4 GB). The
#: default 1M slots would be a 26 GiB array, more than this machine's memory.
PIXEL_BASE: dict[str, Any] = {"capacity": 50_000}
#: Timed passes of each pixel job unless ``--repeats`` is given (a pass takes minutes).
PIXEL_REPEATS = 1
#: Row datasets whose end-to-end lines get ratios against RLlib's and against the bare read.
ROW_DATASETS = ("cartpole_rows", "pixels_rows")


# ----------------------------------------------------------------------------- shared with RLlib


def init_ray() -> None:
    """The same local session on both sides: 2 logical CPUs, no dashboard, quiet workers."""
    import ray

    os.environ.setdefault("RAY_DATA_DISABLE_PROGRESS_BARS", "1")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False


class RssPoller:
    """Peak RSS of this process's ``ray::`` descendants (Ray workers and actors), from /proc.

    ``peak_total_mb`` is the largest sum seen at one poll, ``peak_single_mb`` the largest single
    process. Polls every ``interval`` seconds on a daemon thread between ``start`` and ``stop``.
    """

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.peak_total_mb = 0.0
        self.peak_single_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            rss = _worker_rss_mb()
            if rss:
                self.peak_total_mb = max(self.peak_total_mb, sum(rss))
                self.peak_single_mb = max(self.peak_single_mb, max(rss))
            if self._stop.wait(self.interval):
                return


def descendants(root: int | None = None) -> list[int]:
    """PIDs of every process descending from ``root`` (default: this one), from Linux /proc."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    parent[int(entry)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    me, out = root or os.getpid(), []
    for pid in parent:
        p, seen = parent.get(pid), 0
        while p and p != me and seen < 64:
            p, seen = parent.get(p), seen + 1
        if p == me:
            out.append(pid)
    return out


def _worker_rss_mb() -> list[float]:
    """RSS (MiB) of every ``ray::`` process descending from this one (Linux /proc)."""
    out = []
    for pid in descendants():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                name = fh.read(64).split(b"\0")[0]
            if not name.startswith(b"ray::") or name.endswith((b"IDLE", b"Agent")):
                continue
            with open(f"/proc/{pid}/statm") as fh:
                pages = int(fh.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue
        out.append(pages * os.sysconf("SC_PAGE_SIZE") / (1024.0 * 1024.0))
    return out


@dataclass
class Run:
    """One timed end-to-end run."""

    seconds: float
    rows: int  # input rows (episodes for the episodes dataset) consumed
    samples: int  # learner-ready rows out
    first_batch_s: float | None = None  # time to the first output batch (None: not observed)
    peak_total_mb: float = 0.0
    peak_single_mb: float = 0.0
    steps: int | None = None  # env steps in the input (episodes dataset)


def timed(fn: Callable[[], tuple[int, int, float | None]]) -> Run:
    """Runs ``fn() -> (rows, samples, first_batch_s)`` under the RSS poller and the clock."""
    with RssPoller() as rss:
        t0 = time.perf_counter()
        rows, samples, first = fn()
        seconds = time.perf_counter() - t0
    return Run(seconds, rows, samples, first, rss.peak_total_mb, rss.peak_single_mb)


def line_for(bench: str, impl: str, runs: list[Run], unit: str, **extra: Any) -> dict[str, Any]:
    """A JSON line from the runs: medians of wall time; samples/s and steps/s as extras."""
    timing = C.Timing(tuple(r.seconds for r in runs))
    r = runs[0]
    line = C.record(bench, impl, n=r.rows, timing=timing, unit=unit, **extra)
    line["peak_mem_mb"] = round(max(x.peak_total_mb for x in runs), 1)
    line["actor_rss_mb"] = round(max(x.peak_single_mb for x in runs), 1)
    line["samples"] = r.samples
    line["samples_per_s"] = round(r.samples / timing.median, 1)
    firsts = [x.first_batch_s for x in runs if x.first_batch_s is not None]
    if firsts:
        line["first_batch_s"] = round(min(firsts), 3)
    if r.steps is not None:
        line["steps"] = r.steps
        line["steps_per_s"] = round(r.steps / timing.median, 1)
    return line


def repeat(label: str, fn: Callable[[], Run], repeats: int) -> list[Run]:
    """``repeats`` timed runs, each logged."""
    runs = []
    for i in range(repeats):
        runs.append(fn())
        r = runs[-1]
        C.log(
            f"{label} run {i + 1}/{repeats}: {r.seconds:.2f} s, {r.rows} in "
            f"({r.rows / r.seconds:,.0f}/s), {r.samples} out, "
            f"peak workers {r.peak_total_mb:.0f} MiB"
        )
    return runs


# ----------------------------------------------------------------------------- our side


def total_rows(files: list[Path]) -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(f).num_rows for f in files)


def run_ours(
    files: list[Path], updates: dict[str, Any], write: bool = False, job_stats: bool = True
) -> Run:
    """``run_pipeline`` (a dry run that iterates every batch, or writing Parquet to a temp dir);
    without ``job_stats``, what a learner runs: ``build_dataset`` (read -> map_batches) and
    iterating every output batch, with no stats collector."""
    from offline_prelearner.config import PreLearnerConfig
    from offline_prelearner.pipeline import build_dataset, run_pipeline

    config = PreLearnerConfig().with_updates(updates)
    expected = total_rows(files)
    stats: dict[str, Any] = {}

    def job() -> tuple[int, int, float | None]:
        paths = [str(f) for f in files]
        if not job_stats:
            t0, first, n = time.perf_counter(), None, 0
            ds = build_dataset(paths, config)
            for b in ds.iter_batches(batch_format="pyarrow", batch_size=None):
                first = time.perf_counter() - t0 if first is None else first
                n += b.num_rows
            stats.update(rows_in=expected, rows_kept=expected, rows_balance=True)
            return expected, n, first
        if write:
            with tempfile.TemporaryDirectory(prefix="bench_pipeline_") as out:
                stats.update(run_pipeline(paths, config, out_dir=out).stats)
        else:
            stats.update(run_pipeline(paths, config).stats)
        return stats["rows_in"], stats["samples_written"], None

    run = timed(job)
    if stats["rows_in"] != expected or stats["rows_kept"] != expected or not stats["rows_balance"]:
        raise SystemExit(f"pipeline did not keep every row ({expected} in the files): {stats}")
    return run


def run_ours_episodes(files: list[Path], updates: dict[str, Any], steps: int | None) -> Run:
    """Our job on msgpack episodes; ``rows`` counts episodes, ``steps`` (given) env steps."""
    from offline_prelearner.config import PreLearnerConfig
    from offline_prelearner.pipeline import run_pipeline

    config = PreLearnerConfig().with_updates({"format": "episodes", **updates})
    stats: dict[str, Any] = {}

    def job() -> tuple[int, int, float | None]:
        stats.update(run_pipeline([str(f) for f in files], config).stats)
        return total_rows(files), stats["samples_written"], None

    run = timed(job)
    if not stats["rows_balance"] or sum(stats["rows_rejected"].values()):
        raise SystemExit(f"pipeline rejected episode data: {stats}")
    run.steps = steps
    return run


def episode_steps(data: Path) -> int | None:
    """Env steps in the whole msgpack episodes dataset, from ``manifest.json``."""
    import json

    try:
        manifest = json.loads((data / "manifest.json").read_text())
        return int(manifest["datasets"]["cartpole_episodes"]["steps"])
    except (OSError, ValueError, KeyError):
        return None


def run_bare(files: list[Path], batch_size: int, sized: bool = False) -> Run:
    """The floor: ``read_parquet(files).iter_batches(batch_size)``, nothing mapped; ``sized``:
    through the pipeline's own read (Parquet footer actors sized to the files, not Ray's 32)."""
    import ray

    from offline_prelearner.config import PreLearnerConfig
    from offline_prelearner.pipeline import _read

    def job() -> tuple[int, int, float | None]:
        paths = [str(f) for f in files]
        ds = _read(ray, paths, PreLearnerConfig()) if sized else ray.data.read_parquet(paths)
        n = 0
        for b in ds.iter_batches(batch_size=batch_size, batch_format="pyarrow"):
            n += b.num_rows
        return n, n, None

    return timed(job)


def bench_ours(
    data: Path, quick: bool, repeats: int, sizes: list[int], only: list[str], extra: dict[str, Any]
) -> list[dict[str, Any]]:
    rows_files = C.parquet_files(data / "cartpole_rows")[: 1 if quick else None]
    eps_files = C.parquet_files(data / "cartpole_episodes")[: 1 if quick else None]
    steps = None if quick else episode_steps(data)
    lines = []
    if not quick:
        C.log("ours: untimed warm-up on the first file")
        run_ours(rows_files[:1], {"ray.batch_size": sizes[0]})
    for size in sizes:
        if "rows" in only:
            ups = {"ray.batch_size": size}
            bench = f"cartpole_rows.read_iter.b{size}"
            runs = repeat(bench, lambda size=size: run_bare(rows_files, size), repeats)
            lines.append(C.emit(line_for(bench, "ours", runs, "rows/s", batch_size=size, **extra)))
            bench = f"cartpole_rows.read_iter_sized.b{size}"
            runs = repeat(bench, lambda size=size: run_bare(rows_files, size, True), repeats)
            lines.append(C.emit(line_for(bench, "ours", runs, "rows/s", batch_size=size, **extra)))
            variants = ROW_VARIANTS
            if quick:
                variants = {k: v for k, v in ROW_VARIANTS.items() if k != "e2e_nstep3"}
            for suffix, updates in variants.items():
                bench = f"cartpole_rows.{suffix}.b{size}"
                u = {k: v for k, v in updates.items() if k != "job_stats"}
                job = updates.get("job_stats", True)
                runs = repeat(
                    bench,
                    lambda u=u, ups=ups, job=job: run_ours(rows_files, {**ups, **u}, job_stats=job),
                    repeats,
                )
                line = line_for(bench, "ours", runs, "rows/s", batch_size=size, **u, **extra)
                lines.append(C.emit(line))
        if "episodes" in only:
            esize = EPISODE_BATCH_SIZES.get(size, size)
            bench = f"cartpole_episodes.e2e.b{esize}"
            runs = repeat(
                bench,
                lambda esize=esize: run_ours_episodes(eps_files, {"ray.batch_size": esize}, steps),
                repeats,
            )
            lines.append(
                C.emit(line_for(bench, "ours", runs, "episodes/s", batch_size=esize, **extra))
            )
    if "rows" in only and not quick:
        size = sizes[0]
        bench = f"cartpole_rows.e2e_sample_all_write.b{size}"
        updates = {"ray.batch_size": size, "sample_all": True}
        runs = repeat(bench, lambda: run_ours(rows_files, updates, write=True), repeats)
        lines.append(C.emit(line_for(bench, "ours", runs, "rows/s", batch_size=size, **extra)))
    return lines


def bench_pixels(
    data: Path, files: int | None, repeats: int, size: int, extra: dict[str, Any]
) -> list[dict[str, Any]]:
    """The pixel rows (the first ``files`` files): bare read + iterate, then each variant."""
    pixel_files = C.parquet_files(data / "pixels_rows")[:files]
    lines = []
    bench = f"pixels_rows.read_iter.b{size}"
    runs = repeat(bench, lambda: run_bare(pixel_files, size), repeats)
    lines.append(C.emit(line_for(bench, "ours", runs, "rows/s", batch_size=size, **extra)))
    for suffix, updates in PIXEL_VARIANTS.items():
        bench = f"pixels_rows.{suffix}.b{size}"
        ups = {"ray.batch_size": size, **PIXEL_BASE, **updates}
        runs = repeat(bench, lambda ups=ups: run_ours(pixel_files, ups), repeats)
        line = line_for(bench, "ours", runs, "rows/s", batch_size=size, **PIXEL_BASE, **updates)
        lines.append(C.emit({**line, "files": len(pixel_files), **extra}))
    return lines


# ----------------------------------------------------------------------------- ratios, main


def extra_ratios(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our ``e2e_*`` variants against RLlib's one ``e2e`` job of the same dataset and batch size,
    and each of our end-to-end lines as a fraction of the bare read + iterate rate."""
    by = {(x["bench"], x["impl"]): x for x in lines if "throughput" in x}
    out = []
    for (bench, impl), ours in by.items():
        parts = bench.split(".")
        if impl != "ours" or len(parts) != 3:
            continue
        dataset, variant, size = parts
        if dataset not in ROW_DATASETS or not variant.startswith("e2e"):
            continue
        theirs = by.get((f"{dataset}.e2e.{size}", "rllib"))
        if theirs is not None and variant != "e2e":  # plain e2e pairs in C.ratio_lines
            pair = C.ratio_lines([ours, {**theirs, "bench": bench}])
            out += [{**x, "rllib_bench": theirs["bench"]} for x in pair]
        for floor, tag in (("read_iter", "bare"), ("read_iter_sized", "bare_sized")):
            bare = by.get((f"{dataset}.{floor}.{size}", "ours"))
            if bare is not None:
                out.append(
                    {
                        "bench": f"{bench}/{tag}",
                        "impl": "ratio",
                        "ratio": round(ours["throughput"] / bare["throughput"], 3),
                        "unit": f"fraction of {floor} rows/s",
                        "bare_throughput": bare["throughput"],
                    }
                )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    C.add_common_args(parser)
    parser.add_argument(
        "--only",
        default="rows,episodes",
        help="comma-separated workloads: rows, episodes, pixels (default rows,episodes: a pixel "
        "pass takes minutes)",
    )
    parser.add_argument(
        "--batch-sizes",
        default=None,
        help="map_batches batch sizes in rows (default 4096,65536; 4096 with --quick); "
        "episodes use 256 and 4096 for these two; pixels use the first only",
    )
    parser.add_argument(
        "--rllib-files",
        type=int,
        default=2,
        help="CartPole row files RLlib reads (100k rows each; default 2)",
    )
    parser.add_argument(
        "--pixel-files",
        type=int,
        default=None,
        help="pixel row files we read (~5k rows each; default all 20, 1 with --quick)",
    )
    parser.add_argument(
        "--rllib-pixel-files",
        type=int,
        default=4,
        help="pixel row files RLlib reads (default 4: 20,039 rows; 1 with --quick)",
    )
    parser.add_argument(
        "--rllib-pixel-timeout",
        type=float,
        default=900.0,
        help="seconds one RLlib pixel pass may take before it is stopped and reported skipped",
    )
    parser.add_argument("--no-rllib", action="store_true", help="skip the RLlib side")
    args = parser.parse_args(argv)
    data = C.data_dir(args.data)
    only = [w for w in args.only.split(",") if w]
    if set(only) - {"rows", "episodes", "pixels"}:
        parser.error(f"unknown workloads in {args.only!r}; choose from rows, episodes, pixels")
    default_sizes = "4096" if args.quick else ",".join(map(str, DEFAULT_BATCH_SIZES))
    sizes = [int(s) for s in (args.batch_sizes or default_sizes).split(",")]
    repeats = args.repeats or (1 if args.quick else DEFAULT_REPEATS)
    pixel_repeats = args.repeats or PIXEL_REPEATS
    pixel_files = args.pixel_files or (1 if args.quick else None)
    rllib_pixel_files = 1 if args.quick else args.rllib_pixel_files
    extra = {"digest": C.dataset_digest(data), "quick": args.quick, "ray_num_cpus": 2}
    t0 = time.perf_counter()
    benches = []
    for s in sizes:
        benches += [f"cartpole_rows.e2e.b{s}"] * ("rows" in only)
        benches += [f"cartpole_episodes.e2e.b{EPISODE_BATCH_SIZES.get(s, s)}"] * (
            "episodes" in only
        )
    benches += [f"pixels_rows.e2e.b{sizes[0]}"] * ("pixels" in only)
    if args.no_rllib:
        rllib = [{"bench": b, "impl": "rllib", "skipped": "--no-rllib"} for b in benches]
    else:
        # --quick: RLlib's rows (and pixels) only (its start-up cost is most of a smoke run).
        rllib_only = [w for w in only if w != "episodes" or not args.quick] or only
        rllib_args = ["--data", str(data), "--only", ",".join(rllib_only)]
        rllib_args += ["--batch-sizes", ",".join(map(str, sizes))]
        rllib_args += ["--files", str(args.rllib_files), "--repeats", str(repeats)]
        rllib_args += ["--pixel-files", str(rllib_pixel_files)]
        rllib_args += ["--pixel-repeats", str(pixel_repeats)]
        rllib_args += ["--pixel-timeout", str(args.rllib_pixel_timeout)]
        rllib_args += ["--quick"] * args.quick
        rllib = C.run_rllib(HERE / "rllib_pipeline.py", rllib_args, benches)
    lines = [C.emit(line) for line in rllib]
    init_ray()
    if "rows" in only or "episodes" in only:
        lines += bench_ours(data, args.quick, repeats, sizes, only, extra)
    if "pixels" in only:
        if not args.quick and "rows" not in only and "episodes" not in only:
            C.log("ours: untimed warm-up on the first CartPole file")
            run_ours(C.parquet_files(data / "cartpole_rows")[:1], {"ray.batch_size": sizes[0]})
        lines += bench_pixels(data, pixel_files, pixel_repeats, sizes[0], extra)
    lines += [C.emit(line) for line in C.ratio_lines(lines)]
    lines += [C.emit(line) for line in extra_ratios(lines)]
    C.log("summary\n" + C.markdown_table(lines))
    C.log(f"done in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
