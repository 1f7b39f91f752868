"""End-to-end benchmark (issue 4): files -> Ray Data map_batches(prelearner) -> all batches out.

Both sides run in a local ``ray.init(num_cpus=2)`` session, one prelearner actor (``num_cpus=1``)
in ``map_batches``, and the timed span is everything a user waits for: building the dataset,
starting the actor, reading the Parquet files, mapping, and iterating every output batch in the
driver. Ray is started before the clock; each repeat builds a fresh dataset (and actor).

Workloads (bench names; ``b<N>`` is the ``map_batches`` batch size in input rows):

* ``cartpole_rows.e2e.b<N>`` -- ours, the learner stream: read_parquet -> map_batches(prelearner)
  -> iterate every output batch (``build_dataset`` + ``iter_batches``, what
  ``iter_learner_batches`` and a learner run) on the 1,000,003 CartPole rows with the defaults
  (uniform replay, ``Transition``, ``train_batch_size=256`` samples per input batch).
  ``first_batch_s`` is the time to the first output batch (what a learner waits before it can
  train). RLlib: ``OfflineData.sample(num_samples=N, return_iterator=True)`` of a ``BCConfig``
  (each row becomes a one-step episode and runs through BC's learner connector; every row is
  emitted).
* ``cartpole_rows.e2e_nstep3.b<N>`` -- the same stream, ``n_step=3`` (RLlib's row path ignores
  ``n_step``).
* ``cartpole_rows.e2e_sample_all.b<N>`` -- the same stream, ``sample_all=true``: every transition
  emitted once, which is what RLlib's row path emits too (the closest like-for-like pair).
* ``cartpole_rows.e2e_job.b<N>`` -- the batch job: ``run_pipeline(files, config, out_dir=OUT,
  engine="ray")`` with a fresh, absent ``OUT`` per repeat (units of work as Ray tasks, staged
  output, unit records, manifest, commit; removing ``OUT`` afterwards is not timed).
  ``e2e_job_local`` -- the same with ``engine="local"`` (the units in the driver process).
  ``e2e_job_sample_all`` / ``e2e_job_sample_all_local`` -- both with ``sample_all=true`` (every
  transition written once: here rows/s is the honest figure). ``e2e_job_sample_all_auto`` -- the
  Ray job with ``sample_all`` and ``ray.batch_size="auto"``, the default, whatever ``<N>`` says
  (its chunks hold ~16 MiB of input: 65,536 CartPole rows); ``<N>`` still sets the RLlib side's.
* ``--baseline-ref REF`` (e.g. ``f391f09``, the code before the batch job became units + commit)
  also runs the row / episode benches with the package as of ``REF``: a ``git worktree`` of it
  under ``<repo>/.bench/`` (the checkout is not touched), the same script and interpreter in a
  subprocess with ``PYTHONPATH`` and working directory there, on the same data. Both sides then
  run as subprocesses, ``--rounds`` times each, alternating (baseline, ours, ours, baseline, ...)
  so that a change in the machine's load hits both; the lines pool every round's repeats
  (``times``, ``rounds``, ``loadavg_rounds``). Baseline lines are ``impl: "baseline"``
  (``baseline_ref`` says which commit); code without the ``engine`` argument runs its one Ray
  job (the local-engine benches are skipped there). Then one line per bench measured by both,
  ``{"bench": "<bench>/baseline", "impl": "ratio", "ratio": ours / baseline}`` (medians;
  ``e2e_job_local`` against the baseline's ``e2e_job``), with ``met`` = ratio >= 0.9 (the
  issue's bar: lose at most 10%).
* ``cartpole_rows.read_iter.b<N>`` -- the bare floor: ``read_parquet(files).iter_batches``.
* ``cartpole_rows.read_iter_sized.b<N>`` -- the same through the pipeline's read (one Parquet
  footer actor per 10 files instead of Ray's 32): the floor our job actually stands on.
* ``cartpole_episodes.e2e.b<N>`` -- the 44,685 msgpack episodes, ``format=episodes``, the batch
  job without ``out_dir`` (a dry run: counted, nothing kept; ``engine="ray"``); RLlib with
  ``input_read_episodes=True`` (its episode buffer, 256 samples per input batch). ``N`` counts
  episodes; ``n`` and ``throughput`` are episodes, ``steps_per_s`` env steps.
* ``pixels_rows.<variant>.b<N>`` (``--only pixels``) -- the 100,017 rows of 84x84x4 uint8
  frames, one batch size (the first of ``--batch-sizes``): ``read_iter`` (the floor), ``e2e``
  (defaults, but ``buffer.capacity=50_000``: the default 1M slots of 28 KB frames is a 26 GiB
  ``np.zeros`` that the actor cannot allocate), ``e2e_nstep3`` and ``e2e_framestack4``
  (``frame_stack=4``: four stacked frames per sample). RLlib: the same ``BCConfig`` job with the
  frames' spaces (``Box(0, 255, (84, 84, 4), uint8)``, ``Discrete(2)``) on the first
  ``--rllib-pixel-files`` files. Ours are the learner stream (no job). One repeat unless
  ``--repeats`` says otherwise: a pass decodes 5.6 GB of Parquet lists (~300-700 rows/s on 2
  cores), so it takes minutes; not in the default ``--only`` for that reason.
* ``pixels_rows_fast.<variant>.b<N>`` (``--only pixels``, ``--pixel-layouts`` has ``fast``) -- the
  same rows in the fast tensor layout, converted once with our ``convert`` (``offline-prelearner
  convert .bench/data/pixels_rows --to rows --layout fast --out .bench/pixels_rows_fast``;
  ``--pixel-fast-dir``): ``read_iter`` (the floor), ``e2e`` and ``e2e_nstep3_framestack4`` (issue
  14's pixel job: n-step 3, frame stack 4, one actor), each with its fraction of the floor;
  ``read_actor`` is the floor of the learner stream's own read (one actor reading the files in
  batches, ``ray.read=actor``, nothing mapped), with ``/actor`` ratios against it.

Each line's ``n`` / ``throughput`` is input rows (episodes) per second of wall time;
``samples_per_s`` is learner-ready rows out per second. ``peak_mem_mb`` is the peak summed RSS of
the session's Ray worker processes (``ray::*``, polled from ``/proc`` every 0.2 s), ``actor_rss_mb``
the largest single worker; both include Ray's per-process baseline. RLlib runs in its own venv
(``rllib_pipeline.py``), on a prefix of the files (``n`` says how many rows).

What is counted: ``n`` / ``throughput`` are rows *read*; ``samples`` / ``samples_per_s`` rows
*delivered* to the learner (the learner stream's defaults hand over one 256-row sample per
4096-row input batch; ``e2e_sample_all`` and RLlib's row path deliver every row) or, for the
batch job, samples *written*.

Rounds (default ``--rounds 3``, 1 with ``--quick``): RLlib's side and ours each run in their own
process, alternating (RLlib, ours; ours, RLlib; ...), ``--repeats`` runs per side per round
(default 1; ours after an untimed warm-up on the first file); each figure is the median over
rounds with its min / max, and each ratio line gives the ratio of the medians and the median of
the per-round ratios (``_common.summarize_rounds``). ``--rounds 1``: one pass, RLlib first, then
ours in this process.

Usage: ``python benchmarks/bench_pipeline.py [--data DIR] [--quick] [--repeats K] [--no-rllib]
[--batch-sizes 4096,65536] [--only rows,episodes,pixels] [--variants e2e,e2e_job,...]
[--pixel-files K] [--pixel-layouts rllib,fast] [--baseline-ref f391f09 [--rounds 2]]``
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
#: Row variants: bench suffix -> (config updates on top of the defaults, how it runs). ``stream``
#: is the learner's view (``build_dataset`` -> iterate); ``job:<engine>`` the batch job
#: ``run_pipeline`` into a fresh out dir with that engine.
ROW_VARIANTS: dict[str, tuple[dict[str, Any], str]] = {
    "e2e": ({}, "stream"),
    "e2e_nstep3": ({"n_step": 3}, "stream"),
    "e2e_sample_all": ({"sample_all": True}, "stream"),
    "e2e_job": ({"sample_all": False}, "job:ray"),  # replay sampling (the job's default: all)
    "e2e_job_local": ({"sample_all": False}, "job:local"),
    "e2e_job_sample_all": ({"sample_all": True}, "job:ray"),
    "e2e_job_sample_all_local": ({"sample_all": True}, "job:local"),
    "e2e_job_sample_all_auto": ({"sample_all": True, "ray.batch_size": "auto"}, "job:ray"),
}
#: ``--quick`` runs these row variants only.
QUICK_VARIANTS = ("e2e", "e2e_sample_all", "e2e_job", "e2e_job_local")
#: The issue's bar for the rewritten job against ``--baseline-ref``: lose at most 10%.
BASELINE_MIN_RATIO = 0.9
#: Variants of our pixel job, on top of :data:`PIXEL_BASE`.
PIXEL_VARIANTS: dict[str, dict[str, Any]] = {
    "e2e": {},
    "e2e_nstep3": {"n_step": 3},
    "e2e_framestack4": {"frame_stack": 4},
}
#: Variants of our pixel job on the fast layout (``pixels_rows_fast``), on top of PIXEL_BASE.
PIXEL_FAST_VARIANTS: dict[str, dict[str, Any]] = {
    "e2e": {},
    "e2e_nstep3_framestack4": {"n_step": 3, "frame_stack": 4},
}
#: The pixel job's one change from the defaults: 50k replay slots of 84x84x4 frames (1.4 GB). The
#: default 1M slots would be a 26 GiB array, more than this machine's memory.
PIXEL_BASE: dict[str, Any] = {"capacity": 50_000}
#: Timed passes of each pixel job unless ``--repeats`` is given (a pass takes minutes).
PIXEL_REPEATS = 1
#: Row datasets whose end-to-end lines get ratios against RLlib's and against the bare read.
ROW_DATASETS = ("cartpole_rows", "pixels_rows", "pixels_rows_fast")


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
    line["times"] = [round(x.seconds, 4) for x in runs]  # each repeat, for merging rounds
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


def pipeline_module() -> Any:
    """The jobs of the package imported, as one namespace: ``jobs.batch.batch_job`` and
    ``jobs.stream.learner_stream`` since the jobs were grouped in rooms, ``jobs.batch_job`` and
    ``jobs.learner_stream`` since the jobs hub was cut at its seams, ``jobs.pipeline`` since the
    package was grouped by the data flow, ``offline_prelearner.pipeline`` in older code
    (``--baseline-ref``)."""
    import importlib
    import types

    for batch_name, stream_name in (
        ("jobs.batch.batch_job", "jobs.stream.learner_stream"),
        ("jobs.batch_job", "jobs.learner_stream"),
    ):
        try:
            batch = importlib.import_module(f"offline_prelearner.{batch_name}")
            stream = importlib.import_module(f"offline_prelearner.{stream_name}")
            return types.SimpleNamespace(**{**vars(batch), **vars(stream)})
        except ModuleNotFoundError:
            pass
    try:
        return importlib.import_module("offline_prelearner.jobs.pipeline")
    except ModuleNotFoundError:
        return importlib.import_module("offline_prelearner.pipeline")


def has_engines() -> bool:
    """Whether the imported package's ``run_pipeline`` takes ``engine=`` (the units + commit job);
    older code (``--baseline-ref``) has one Ray job and writes with ``write_parquet``."""
    import inspect

    return "engine" in inspect.signature(pipeline_module().run_pipeline).parameters


def run_ours(files: list[Path], updates: dict[str, Any], mode: str = "stream") -> Run:
    """One timed run of a row variant (``mode`` as in :data:`ROW_VARIANTS`).

    ``stream``: what a learner runs -- ``build_dataset`` (read -> map_batches) and iterating
    every output batch, no job around it. ``job:<engine>``: the batch job ``run_pipeline`` into
    a fresh, absent out dir (removed after the clock stops); the stats it returns must account
    for every input row, or the script stops.
    """
    import shutil

    from offline_prelearner.config import PreLearnerConfig

    build_dataset, run_pipeline = pipeline_module().build_dataset, pipeline_module().run_pipeline

    config = PreLearnerConfig().with_updates(updates)
    expected = total_rows(files)
    stats: dict[str, Any] = {}
    parent = Path(tempfile.mkdtemp(prefix="bench_pipeline_"))

    def job() -> tuple[int, int, float | None]:
        paths = [str(f) for f in files]
        if mode == "stream":
            t0, first, n = time.perf_counter(), None, 0
            ds = build_dataset(paths, config)
            rows = config.sample.train_batch_size  # what a learner takes (iter_learner_batches)
            for b in ds.iter_batches(batch_format="pyarrow", batch_size=rows):
                first = time.perf_counter() - t0 if first is None else first
                n += b.num_rows
            stats.update(rows_in=expected, rows_kept=expected, rows_balance=True)
            return expected, n, first
        kwargs: dict[str, Any] = {"out_dir": parent / "out"}
        if has_engines():
            kwargs["engine"] = mode.partition(":")[2] or "ray"
        stats.update(run_pipeline(paths, config, **kwargs).stats)
        return stats["rows_in"], stats["samples_written"], None

    try:
        run = timed(job)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    if stats["rows_in"] != expected or stats["rows_kept"] != expected or not stats["rows_balance"]:
        raise SystemExit(f"pipeline did not keep every row ({expected} in the files): {stats}")
    return run


def run_ours_episodes(files: list[Path], updates: dict[str, Any], steps: int | None) -> Run:
    """Our job on msgpack episodes; ``rows`` counts episodes, ``steps`` (given) env steps."""
    from offline_prelearner.config import PreLearnerConfig

    run_pipeline = pipeline_module().run_pipeline

    config = PreLearnerConfig().with_updates({"format": "episodes", **updates})
    stats: dict[str, Any] = {}
    kwargs: dict[str, Any] = {"engine": "ray"} if has_engines() else {}

    def job() -> tuple[int, int, float | None]:
        stats.update(run_pipeline([str(f) for f in files], config, **kwargs).stats)
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

    _read = pipeline_module()._read

    def job() -> tuple[int, int, float | None]:
        paths = [str(f) for f in files]
        ds = _read(ray, paths, PreLearnerConfig()) if sized else ray.data.read_parquet(paths)
        n = 0
        for b in ds.iter_batches(batch_size=batch_size, batch_format="pyarrow"):
            n += b.num_rows
        return n, n, None

    return timed(job)


class _CountRows:
    """The learner stream's own read with nothing mapped: the rows of each batch it would hand
    to the prelearner (``jobs/file_batches.py``: read ahead across groups, one actor), counted."""

    def __init__(self, groups: list[list[str]], batch_size: int) -> None:
        from offline_prelearner.jobs.file_batches import ReadAhead

        self.reader = ReadAhead(groups, batch_size)

    def __call__(self, batch: Any) -> Any:
        for k in batch.column("group").to_pylist():
            for table, _ in self.reader.batches(k):
                yield {"rows": [table.num_rows]}


def has_file_batches() -> bool:
    """Whether the package measured reads in its actors (``jobs/file_batches.py``; not in a
    ``--baseline-ref`` older than it)."""
    import importlib.util

    return importlib.util.find_spec("offline_prelearner.jobs.file_batches") is not None


def run_bare_actor(files: list[Path], batch_size: int) -> Run:
    """The floor of the learner stream's actor read: one actor reads the files in batches (as
    ``ray.read=actor`` does) and hands back row counts only."""
    import ray

    from offline_prelearner.jobs.file_batches import read_groups

    def job() -> tuple[int, int, float | None]:
        groups = read_groups([str(f) for f in files], batch_size)
        items = [{"group": k} for k in range(len(groups))]
        ds = ray.data.from_items(items, override_num_blocks=len(groups))
        ds = ds.map_batches(
            _CountRows,
            fn_constructor_args=(groups, batch_size),
            compute=ray.data.ActorPoolStrategy(size=1, max_tasks_in_flight_per_actor=1),
            batch_size=None,
            batch_format="pyarrow",
        )
        n = sum(int(b["rows"].sum()) for b in ds.iter_batches(batch_size=None))
        return n, n, None

    return timed(job)


def bench_ours(
    data: Path,
    quick: bool,
    repeats: int,
    sizes: list[int],
    only: list[str],
    extra: dict[str, Any],
    variants: list[str] | None = None,
    impl: str = "ours",
) -> list[dict[str, Any]]:
    """Our rows (floors, then each variant) and episodes lines; ``impl`` labels them (``baseline``
    when this runs the package of ``--baseline-ref``, which measures the jobs only)."""
    rows_files = C.parquet_files(data / "cartpole_rows")[: 1 if quick else None]
    eps_files = C.parquet_files(data / "cartpole_episodes")[: 1 if quick else None]
    steps = None if quick else episode_steps(data)
    engines = has_engines()
    names = variants or list(QUICK_VARIANTS if quick else ROW_VARIANTS)
    chosen = {k: v for k, v in ROW_VARIANTS.items() if k in names}
    if not engines:  # older code: one Ray job, no engine to choose
        chosen = {k: v for k, v in chosen.items() if v[1] in ("stream", "job:ray")}
    lines = []
    if not quick:
        C.log(f"{impl}: untimed warm-up on the first file")
        warm = {"ray.batch_size": sizes[0]}
        for mode in dict.fromkeys(["stream", *(m for _, m in chosen.values())]):
            run_ours(rows_files[:1], warm, mode)
    for size in sizes:
        if "rows" in only:
            ups = {"ray.batch_size": size}
            if impl == "ours":
                bench = f"cartpole_rows.read_iter.b{size}"
                runs = repeat(bench, lambda size=size: run_bare(rows_files, size), repeats)
                line = line_for(bench, impl, runs, "rows/s", batch_size=size, **extra)
                lines.append(C.emit(line))
                bench = f"cartpole_rows.read_iter_sized.b{size}"
                runs = repeat(bench, lambda size=size: run_bare(rows_files, size, True), repeats)
                line = line_for(bench, impl, runs, "rows/s", batch_size=size, **extra)
                lines.append(C.emit(line))
            for suffix, (updates, mode) in chosen.items():
                bench = f"cartpole_rows.{suffix}.b{size}"
                runs = repeat(
                    f"{impl} {bench}",
                    lambda u=updates, ups=ups, mode=mode: run_ours(rows_files, {**ups, **u}, mode),
                    repeats,
                )
                line = line_for(
                    bench, impl, runs, "rows/s", batch_size=size, mode=mode, **updates, **extra
                )
                lines.append(C.emit(line))
        if "episodes" in only:
            esize = EPISODE_BATCH_SIZES.get(size, size)
            bench = f"cartpole_episodes.e2e.b{esize}"
            runs = repeat(
                f"{impl} {bench}",
                lambda esize=esize: run_ours_episodes(eps_files, {"ray.batch_size": esize}, steps),
                repeats,
            )
            line = line_for(bench, impl, runs, "episodes/s", batch_size=esize, **extra)
            lines.append(C.emit({**line, "mode": "job:ray"}))
    return lines


def bench_pixels(
    data: Path,
    files: int | None,
    repeats: int,
    size: int,
    extra: dict[str, Any],
    layouts: tuple[str, ...] = ("rllib", "fast"),
    fast_dir: Path | None = None,
) -> list[dict[str, Any]]:
    """The pixel rows (the first ``files`` files) in each of ``layouts``: bare read + iterate,
    then each variant. The fast layout is read from ``fast_dir`` (made by our ``convert``)."""
    lines = []
    if "rllib" in layouts:
        lines += _bench_pixel_set(
            "pixels_rows", data / "pixels_rows", PIXEL_VARIANTS, files, repeats, size, extra
        )
    if "fast" in layouts:
        fast_dir = fast_dir or data.parent / "pixels_rows_fast"
        if not any(fast_dir.glob("*.parquet")):
            C.log(
                f"no fast-layout pixel rows at {fast_dir}: make them once with "
                f"`offline-prelearner convert {data / 'pixels_rows'} --to rows --layout fast "
                f"--out {fast_dir}`; skipped"
            )
        else:
            lines += _bench_pixel_set(
                "pixels_rows_fast", fast_dir, PIXEL_FAST_VARIANTS, files, repeats, size, extra
            )
    return lines


def _bench_pixel_set(
    name: str,
    folder: Path,
    variants: dict[str, dict[str, Any]],
    files: int | None,
    repeats: int,
    size: int,
    extra: dict[str, Any],
) -> list[dict[str, Any]]:
    pixel_files = C.parquet_files(folder)[:files]
    lines = []
    bench = f"{name}.read_iter.b{size}"
    runs = repeat(bench, lambda: run_bare(pixel_files, size), repeats)
    lines.append(C.emit(line_for(bench, "ours", runs, "rows/s", batch_size=size, **extra)))
    if has_file_batches():
        bench = f"{name}.read_actor.b{size}"
        runs = repeat(bench, lambda: run_bare_actor(pixel_files, size), repeats)
        lines.append(C.emit(line_for(bench, "ours", runs, "rows/s", batch_size=size, **extra)))
    for suffix, updates in variants.items():
        bench = f"{name}.{suffix}.b{size}"
        ups = {"ray.batch_size": size, **PIXEL_BASE, **updates}
        runs = repeat(bench, lambda ups=ups: run_ours(pixel_files, ups, "stream"), repeats)
        line = line_for(bench, "ours", runs, "rows/s", batch_size=size, **PIXEL_BASE, **updates)
        lines.append(C.emit({**line, "files": len(pixel_files), **extra}))
    return lines


# ----------------------------------------------------------------------------- the baseline


def baseline_worktree(ref: str) -> tuple[Path, str]:
    """A ``git worktree`` of ``ref`` at ``<repo>/.bench/baseline-<sha>`` (made once, detached;
    the main checkout is not touched), and the commit's full hash."""
    import subprocess

    repo = HERE.parent

    def git(*args: str, cwd: Path = repo) -> str:
        out = subprocess.run(["git", *args], cwd=cwd, check=True, stdout=subprocess.PIPE, text=True)
        return out.stdout.strip()

    try:
        sha = git("rev-parse", "--verify", f"{ref}^{{commit}}")
    except subprocess.CalledProcessError:
        raise SystemExit(f"--baseline-ref {ref!r} is not a commit of {repo}") from None
    tree = repo / ".bench" / f"baseline-{sha[:12]}"
    if (tree / ".git").exists() and git("rev-parse", "HEAD", cwd=tree) == sha:
        return tree, sha
    if tree.exists():
        raise SystemExit(f"{tree} exists but is not a worktree of {sha}: remove it first")
    git("worktree", "prune")
    tree.parent.mkdir(parents=True, exist_ok=True)
    C.log(f"baseline: git worktree add --detach {tree} {sha[:12]}")
    git("worktree", "add", "--detach", str(tree), sha)
    return tree, sha


def run_side(
    impl: str,
    tree: Path,
    sha: str,
    data: Path,
    args: argparse.Namespace,
    only: list[str],
    sizes: list[int],
    repeats: int,
) -> list[dict[str, Any]]:
    """One round of one side in a subprocess (this script, same interpreter and data):
    ``baseline`` imports the package of the worktree ``tree`` (``PYTHONPATH`` and working
    directory there), ``ours`` the checkout this script is in. Both sides start their own Ray
    session the same way, so neither runs beside the other's idle cluster."""
    import json
    import subprocess

    root = tree if impl == "baseline" else HERE.parent
    env = dict(os.environ)
    if impl == "baseline":
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--impl", impl, "--no-rllib"]
    cmd += ["--data", str(data.resolve()), "--only", ",".join(only)]
    cmd += ["--package-root", str(root)]
    cmd += ["--batch-sizes", ",".join(map(str, sizes)), "--repeats", str(repeats)]
    cmd += ["--variants", args.variants] if args.variants else []
    cmd += ["--quick"] * args.quick
    if "pixels" in only:
        cmd += ["--pixel-layouts", args.pixel_layouts]
        cmd += ["--pixel-files", str(args.pixel_files)] if args.pixel_files else []
        cmd += ["--pixel-fast-dir", args.pixel_fast_dir] if args.pixel_fast_dir else []
    # The working directory matters: Ray puts the driver's on its workers' sys.path, ahead of
    # PYTHONPATH, so a baseline started from the main checkout would import its package there.
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env, cwd=root, check=False)
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    if impl == "baseline":
        lines = [{**x, "baseline_ref": sha[:12]} for x in lines]
    if proc.returncode != 0:
        reason = f"the {impl} run exited with code {proc.returncode} (its stderr is above)"
        lines.append({"bench": f"{impl}:{sha[:12]}", "impl": impl, "skipped": reason})
    return lines


def merge_rounds(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per (bench, impl): the repeats of every round pooled (median, best), the load
    average of each round in ``loadavg_rounds``, memory peaks the largest."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for x in lines:
        groups.setdefault((x["bench"], x["impl"]), []).append(x)
    out = []
    for (bench, impl), xs in groups.items():
        if len(xs) == 1 or any("times" not in x for x in xs):
            out += xs
            continue
        times = [t for x in xs for t in x["times"]]
        timing = C.Timing(tuple(times))
        pooled = C.record(bench, impl, n=xs[0]["n"], timing=timing, unit=xs[0]["unit"])
        line = {**xs[-1], **{k: pooled[k] for k in ("throughput", "seconds", "seconds_best")}}
        line.update(throughput_best=pooled["throughput_best"], repeats=len(times), times=times)
        line["rounds"] = len(xs)
        line["loadavg_rounds"] = [x["loadavg_1m"] for x in xs]
        for key in ("peak_mem_mb", "actor_rss_mb", "maxrss_mb"):
            line[key] = max(x[key] for x in xs)
        line["samples_per_s"] = round(line["samples"] / timing.median, 1)
        if "steps" in line:
            line["steps_per_s"] = round(line["steps"] / timing.median, 1)
        firsts = [x["first_batch_s"] for x in xs if "first_batch_s" in x]
        if firsts:
            line["first_batch_s"] = min(firsts)
        out.append(line)
    return out


def check_package(root: str) -> None:
    """Stops unless ``offline_prelearner`` -- in the driver and in a Ray worker -- is the copy
    in ``root`` (the ``--baseline-ref`` worktree, or this checkout for our side)."""
    import ray

    import offline_prelearner

    def where() -> str:
        import offline_prelearner as op

        return str(Path(op.__file__).resolve())

    want = (Path(root) / "offline_prelearner").resolve()
    places = {"driver": where(), "worker": ray.get(ray.remote(where).remote())}
    for name, place in places.items():
        if Path(place).parent != want:
            raise SystemExit(f"the {name} imports offline_prelearner from {place}, not {want}")
    C.log(f"offline_prelearner {offline_prelearner.__version__} from {places['driver']}")


def baseline_ratios(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``ours / baseline`` per bench measured by both (medians; ``ratio_best`` from the best
    repeats); a local-engine bench pairs with the baseline's Ray job of the same variant."""
    base = {x["bench"]: x for x in lines if x.get("impl") == "baseline" and "throughput" in x}
    out = []
    for ours in lines:
        if ours.get("impl") != "ours" or "throughput" not in ours:
            continue
        bench = ours["bench"]
        theirs = base.get(bench)
        parts = bench.split(".")
        if theirs is None and len(parts) == 3 and parts[1].endswith("_local"):
            theirs = base.get(".".join([parts[0], parts[1].removesuffix("_local"), parts[2]]))
        if theirs is None or theirs["unit"] != ours["unit"]:
            continue
        ratio = ours["throughput"] / theirs["throughput"]
        out.append(
            {
                "bench": f"{bench}/baseline",
                "impl": "ratio",
                "ratio": round(ratio, 3),
                "ratio_best": round(ours["throughput_best"] / theirs["throughput_best"], 3),
                "unit": f"ours / baseline {ours['unit']}",
                "ours_throughput": ours["throughput"],
                "baseline_throughput": theirs["throughput"],
                "baseline_bench": theirs["bench"],
                "baseline_ref": theirs.get("baseline_ref"),
                "min_ratio": BASELINE_MIN_RATIO,
                "met": ratio >= BASELINE_MIN_RATIO,
                "loadavg_1m": round(os.getloadavg()[0], 2),
            }
        )
    return out


def baseline_table(lines: list[dict[str, Any]]) -> str:
    """The ``ours / baseline`` ratio lines as a Markdown table."""
    rows = [
        "| bench | unit | ours | baseline | ratio (median) | ratio (best) | met |",
        "|---|---|--:|--:|--:|--:|---|",
    ]
    for x in lines:
        if x.get("impl") == "ratio" and x["bench"].endswith("/baseline"):
            rows.append(
                f"| {x['bench'].removesuffix('/baseline')} | {x['unit'].split()[-1]} "
                f"| {x['ours_throughput']:,.0f} | {x['baseline_throughput']:,.0f} "
                f"| {x['ratio']:.3f} | {x['ratio_best']:.3f} | {'yes' if x['met'] else 'NO'} |"
            )
    return "\n".join(rows)


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
        floors = (("read_iter", "bare"), ("read_iter_sized", "bare_sized"), ("read_actor", "actor"))
        for floor, tag in floors:
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


def benches_of(only: list[str], sizes: list[int]) -> list[str]:
    """The RLlib side's bench names for these workloads and batch sizes."""
    benches = []
    for s in sizes:
        benches += [f"cartpole_rows.e2e.b{s}"] * ("rows" in only)
        benches += [f"cartpole_episodes.e2e.b{EPISODE_BATCH_SIZES.get(s, s)}"] * (
            "episodes" in only
        )
    benches += [f"pixels_rows.e2e.b{sizes[0]}"] * ("pixels" in only)
    return benches


def run_rllib_side(
    args: argparse.Namespace,
    data: Path,
    only: list[str],
    sizes: list[int],
    repeats: int,
    pixel_repeats: int,
    benches: list[str],
) -> list[dict[str, Any]]:
    """RLlib's side, once, in the RLlib venv (``rllib_pipeline.py``); skipped lines without it."""
    # --quick: RLlib's rows (and pixels) only (its start-up cost is most of a smoke run).
    rllib_only = [w for w in only if w != "episodes" or not args.quick] or only
    if "pixels" in rllib_only and "rllib" not in args.pixel_layouts.split(","):
        rllib_only = [w for w in rllib_only if w != "pixels"]  # RLlib reads only its layout
    if not rllib_only:
        return []
    rllib_args = ["--data", str(data), "--only", ",".join(rllib_only)]
    rllib_args += ["--batch-sizes", ",".join(map(str, sizes))]
    rllib_args += ["--files", str(args.rllib_files), "--repeats", str(repeats)]
    rllib_args += ["--pixel-files", str(1 if args.quick else args.rllib_pixel_files)]
    rllib_args += ["--pixel-repeats", str(pixel_repeats)]
    rllib_args += ["--pixel-timeout", str(args.rllib_pixel_timeout)]
    rllib_args += ["--quick"] * args.quick
    return C.run_rllib(HERE / "rllib_pipeline.py", rllib_args, benches)


def round_pairs(lines: list[dict[str, Any]]) -> list[tuple[str, tuple[str, str], tuple[str, str]]]:
    """The ratios of an interleaved run: each of our ``e2e*`` lines against RLlib's ``e2e`` of
    the same dataset and batch size, and against each floor of its own (same round)."""
    have = {(x["bench"], x["impl"]) for x in lines if "throughput" in x}
    pairs = []
    for bench, impl in sorted(have):
        parts = bench.split(".")
        if impl != "ours" or len(parts) != 3 or not parts[1].startswith("e2e"):
            continue
        dataset, _, size = parts
        rllib = (f"{dataset}.e2e.{size}", "rllib")
        if rllib in have:
            pairs.append((f"{bench}/rllib", (bench, "ours"), rllib))
        for floor, tag in (("read_iter", "bare"), ("read_iter_sized", "bare_sized")):
            if (f"{dataset}.{floor}.{size}", "ours") in have:
                pairs.append(
                    (f"{bench}/{tag}", (bench, "ours"), (f"{dataset}.{floor}.{size}", "ours"))
                )
        if (f"{dataset}.read_actor.{size}", "ours") in have:
            pairs.append(
                (f"{bench}/actor", (bench, "ours"), (f"{dataset}.read_actor.{size}", "ours"))
            )
    return pairs


def interleaved(
    args: argparse.Namespace,
    data: Path,
    only: list[str],
    sizes: list[int],
    benches: list[str],
    t0: float,
) -> int:
    """``--rounds R`` (R >= 2): RLlib's side and ours, each in its own process, alternating
    (RLlib, ours; ours, RLlib; ...); every figure is the median over rounds (min / max beside
    it) and every ratio pairs the two sides of the same round (``_common.summarize_rounds``)."""
    repeats = args.repeats or 1
    sides: list[tuple[str, C.Side]] = []
    if not args.no_rllib:
        sides.append(
            ("rllib", lambda _: run_rllib_side(args, data, only, sizes, repeats, repeats, benches))
        )
    sides.append(
        ("ours", lambda _: run_side("ours", HERE.parent, "", data, args, only, sizes, repeats))
    )
    lines = C.alternate(sides, args.rounds)
    summary = C.summarize_rounds(lines, round_pairs(lines))
    for line in summary:
        C.emit(line)
    C.log("summary (medians over rounds)\n" + C.markdown_table(summary))
    for x in summary:
        if x.get("impl") == "ratio" and "ratio_rounds" in x:
            C.log(f"{x['bench']}: {x['ratio']} (rounds {x['ratio_rounds']})")
    C.log(f"done in {time.perf_counter() - t0:.1f} s")
    return 0


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
        "--pixel-layouts",
        default="rllib,fast",
        help="pixel row layouts we read: rllib (.bench/data/pixels_rows), fast (--pixel-fast-dir)",
    )
    parser.add_argument(
        "--pixel-fast-dir",
        default=None,
        help="the pixel rows in the fast layout (default: pixels_rows_fast beside --data)",
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
    parser.add_argument(
        "--variants",
        default=None,
        help="comma-separated row variants to run (default all: "
        + ", ".join(ROW_VARIANTS)
        + "; with --quick: "
        + ", ".join(QUICK_VARIANTS)
        + ")",
    )
    parser.add_argument(
        "--baseline-ref",
        default=None,
        metavar="REF",
        help="also run the row / episode jobs with the package as of git REF (e.g. f391f09), "
        "from a worktree under <repo>/.bench/, and print ours / baseline ratio lines",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="rounds of (RLlib, ours) -- with --baseline-ref (baseline, ours) -- the order "
        "swapped every round, each side in its own process, --repeats runs per round (default "
        "1 with rounds); figures are medians over rounds, ratios pair the sides of each round "
        "(default 3, 1 with --quick; 1: one pass, RLlib first, then ours in this process)",
    )
    # A side of a --baseline-ref run (a subprocess): its lines only, labelled --impl.
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--impl", default="ours", help=argparse.SUPPRESS)
    parser.add_argument("--package-root", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    data = C.data_dir(args.data)
    only = [w for w in args.only.split(",") if w]
    if set(only) - {"rows", "episodes", "pixels"}:
        parser.error(f"unknown workloads in {args.only!r}; choose from rows, episodes, pixels")
    variants = [v for v in (args.variants or "").split(",") if v] or None
    if variants and set(variants) - set(ROW_VARIANTS):
        parser.error(
            f"unknown variants in {args.variants!r}; choose from {', '.join(ROW_VARIANTS)}"
        )
    default_sizes = "4096" if args.quick else ",".join(map(str, DEFAULT_BATCH_SIZES))
    sizes = [int(s) for s in (args.batch_sizes or default_sizes).split(",")]
    repeats = args.repeats or (1 if args.quick else DEFAULT_REPEATS)
    pixel_repeats = args.repeats or PIXEL_REPEATS
    pixel_files = args.pixel_files or (1 if args.quick else None)
    extra = {"digest": C.dataset_digest(data), "quick": args.quick, "ray_num_cpus": 2}
    t0 = time.perf_counter()
    if not args.child:
        C.emit(C.header("bench_pipeline.py", argv=sys.argv[1:] if argv is None else argv))
    if args.child:  # one side of a --baseline-ref run: its lines only
        init_ray()
        if args.package_root:
            check_package(args.package_root)
        if set(only) & {"rows", "episodes"}:
            bench_ours(data, args.quick, repeats, sizes, only, extra, variants, impl=args.impl)
        if "pixels" in only:
            if not args.quick and not set(only) & {"rows", "episodes"}:
                run_ours(C.parquet_files(data / "cartpole_rows")[:1], {"ray.batch_size": sizes[0]})
            layouts = tuple(x for x in args.pixel_layouts.split(",") if x)
            fast_dir = Path(args.pixel_fast_dir) if args.pixel_fast_dir else None
            bench_pixels(data, pixel_files, repeats, sizes[0], extra, layouts, fast_dir)
        return 0
    if args.rounds >= 2 and not args.baseline_ref:
        return interleaved(args, data, only, sizes, benches_of(only, sizes), t0)
    benches = benches_of(only, sizes)
    if args.no_rllib:
        rllib = [{"bench": b, "impl": "rllib", "skipped": "--no-rllib"} for b in benches]
    else:
        rllib = run_rllib_side(args, data, only, sizes, repeats, pixel_repeats, benches)
    lines = [C.emit(line) for line in rllib]
    jobs = [w for w in only if w in ("rows", "episodes")]
    if args.baseline_ref and jobs:
        tree, sha = baseline_worktree(args.baseline_ref)
        C.log(f"baseline: {args.baseline_ref} = {sha[:12]} from {tree}")
        sides: list[dict[str, Any]] = []
        for r in range(max(1, args.rounds)):
            for impl in ("baseline", "ours") if r % 2 == 0 else ("ours", "baseline"):
                C.log(f"round {r + 1}/{max(1, args.rounds)}: {impl}")
                sides += run_side(impl, tree, sha, data, args, jobs, sizes, repeats)
        lines += [C.emit(line) for line in merge_rounds(sides)]
        if "pixels" in only:
            init_ray()
    else:
        init_ray()
        if jobs:
            lines += bench_ours(data, args.quick, repeats, sizes, only, extra, variants)
    if "pixels" in only:
        if not args.quick and (args.baseline_ref or not jobs):  # no job warmed this session
            C.log("ours: untimed warm-up on the first CartPole file")
            run_ours(C.parquet_files(data / "cartpole_rows")[:1], {"ray.batch_size": sizes[0]})
        layouts = tuple(x for x in args.pixel_layouts.split(",") if x)
        fast_dir = Path(args.pixel_fast_dir) if args.pixel_fast_dir else None
        lines += bench_pixels(data, pixel_files, pixel_repeats, sizes[0], extra, layouts, fast_dir)
    lines += [C.emit(line) for line in C.ratio_lines(lines)]
    lines += [C.emit(line) for line in extra_ratios(lines)]
    C.log("summary\n" + C.markdown_table(lines))
    if args.baseline_ref:
        lines += [C.emit(line) for line in baseline_ratios(lines)]
        C.log(f"ours / baseline ({args.baseline_ref})\n" + baseline_table(lines))
    C.log(f"done in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
