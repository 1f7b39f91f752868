"""The batch job: input files -> committed Parquet samples, in-process or on Ray.

::

    result = run_pipeline("datasets/cartpole-v1/rows", config, out_dir="out/")   # a commit

:func:`run_pipeline` plans self-contained units of work (:mod:`.plan`), runs them in-process
(``engine="local"``) or as Ray tasks that Ray retries when a worker dies (``engine="ray"``),
and commits the output (:mod:`..commit`): staged, counted from the unit records, checked against
the input's row count, moved into place whole. Same input and config, same output, whatever Ray
retried or a ``resume`` reused. ``stats["phases"]`` says where the job's time went
(:data:`PHASES`).

A unit is one Ray task, not a Ray Data map: a unit reads and writes its own files and hands back
a small record, so Ray Data's streaming executor would move nothing, and its start (its import on
the driver and on every worker, its stats and autoscaling actors) cost seconds on every job.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import secrets
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..._version import __version__
from ...config import Engine, PreLearnerConfig, check_engine
from ...errors import JobFailed, OfflinePrelearnerError, error_from_dict, error_to_dict
from ...io.fast_tensor import Layout, check_layout
from ...replay.storage.memory import for_worker_process
from ..commit import QUARANTINE
from ..preflight import MIXED_FORMAT_CHECKED, ConfigLike, NodeCheck, job_config, prepare
from ..records import FileRecord, JobStats, UnitRecord
from ..session.ray_session import import_ray, init_ray, release_ray, worker_env
from ..staging import Staging, staging_for
from ..store_commit import CommittedWarning
from .file_tally import per_file
from .index import index_output
from .plan import Plan, unit_key
from .planner import plan_job, plans_on_ray, ray_scanner
from .run import UnitJob, run_unit, units_by_node

__all__ = ["JobFailed", "PipelineResult", "choose_engine", "run_pipeline"]


@dataclass
class PipelineResult:
    """What :func:`run_pipeline` did: where the samples went and the summed counters.

    Attributes:
        out_dir: The committed output (None: a dry run).
        files_written: The sample files, as paths or URIs.
        job_stats: The job's stats (``stats.json``).
    """

    out_dir: str | None
    files_written: list[str]
    job_stats: JobStats

    @property
    def stats(self) -> dict[str, Any]:
        """The job's stats as ``stats.json`` holds them."""
        return self.job_stats.to_dict()


#: ``stats["phases"]``, seconds: planning (inputs listed, footers and keys read, staging opened);
#: starting the engine (Ray: from ``import ray`` to the first unit begun on a worker; local: 0);
#: the units (to the last unit's record); the commit (accounting, the manifest, the move into
#: place); the stop (letting go of the engine after the commit: ~0 where the CLI leaves its local
#: Ray instance to the watchdog that ends it after the process exits; disconnecting from a
#: cluster; 0 where Ray stays up for a library caller). Their sum is the job's time to its end.
PHASES = ("plan", "engine_start", "units", "commit", "stop")

#: Below this many input bytes (and with no cluster address) ``engine="auto"`` runs in-process:
#: starting Ray costs seconds that a small job should not pay (see benchmarks/README.md).
LOCAL_ENGINE_MAX_BYTES = 64 * 2**20

#: ``progress(rows_done, rows_total, samples_written)``: input rows (``rows_total`` from the
#: Parquet footers, None when unknown) and samples so far; called as the job advances.
Progress = Callable[[int, "int | None", int], None]


def choose_engine(engine: str, config: PreLearnerConfig, plan: Plan) -> str:
    """``local`` or ``ray``: ``auto`` is local for inputs under LOCAL_ENGINE_MAX_BYTES when no
    cluster address is set (``ray.address`` or ``RAY_ADDRESS``), else Ray.

    Args:
        engine: ``"local"``, ``"ray"`` or ``"auto"``, as the caller asked (``--engine``); an
            explicit choice is returned unchanged.
        config: The job's config; only ``ray.address`` is read.
        plan: The job's plan; its files' sizes (bytes on disk, not decoded) are summed.

    Returns:
        ``"local"`` or ``"ray"``.

    Raises:
        ConfigError: ``engine`` is not one of :data:`~offline_prelearner.config.ENGINES`.
    """
    if check_engine(engine) != "auto":
        return engine
    if config.ray.address or os.environ.get("RAY_ADDRESS"):
        return "ray"
    size = sum(f.size for f in plan.files)
    return "local" if size < LOCAL_ENGINE_MAX_BYTES else "ray"


def _cluster_info() -> dict[str, Any]:
    """Where the job ran: the cluster's GCS address, its live nodes and CPUs."""
    ray = import_ray()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return {
        "address": ray.get_runtime_context().gcs_address,
        "nodes": len(nodes),
        "cpus": sum(n.get("Resources", {}).get("CPU", 0) for n in nodes),
    }


def _check_accounting(
    stats: JobStats, plan: Plan, config: PreLearnerConfig, listed: list[dict[str, Any]]
) -> None:
    """Row data: every input row (Parquet footers) was read by exactly one unit; of a file the
    reader gave up on (skip / quarantine: its ``error`` in ``listed``), the rows read before."""
    if config.read.format != "rows" or any(f.rows is None for f in plan.files):
        return
    failed = {e["file"]: e["rows_read"] for e in listed if e["error"] is not None}
    expected = sum(failed.get(f.path, f.rows or 0) for f in plan.files)
    if stats.rows_in != expected or not stats.rows_balance:
        raise JobFailed(
            f"accounting mismatch: the input holds {expected} rows, the units read "
            f"{stats.rows_in} (balanced: {stats.rows_balance}); nothing was committed"
        )


def _job_description(
    config: PreLearnerConfig,
    cls: type,
    plan: Plan,
    engine: str,
    seed: int,
    fingerprints: tuple[str, ...],
    layout: Layout,
) -> dict[str, Any]:
    """The staging's job: what a resume must match (version, config, prelearner, format, layout,
    seed), the inputs as planned now (with their content fingerprints) and each unit's key."""
    return {
        "version": __version__,
        "format": config.read.format,
        "prelearner": f"{cls.__module__}:{cls.__qualname__}",
        "engine": engine,
        "seed": seed,
        "layout": layout,
        "config": config.to_dict(),
        "inputs": [
            {**f.to_dict(), "fingerprint": fp}
            for f, fp in zip(plan.files, fingerprints, strict=True)
        ],
        "units": len(plan.units),
        "unit_keys": [unit_key(plan, u, fingerprints) for u in plan.units],
    }


def _cap(staging: Staging, files: list[FileRecord], cap: int | None) -> list[FileRecord]:
    """``sample.num_samples``: the first ``cap`` samples in unit order; later files dropped, the
    file that crosses the cap cut and written again whole (same result whatever ran when)."""
    if cap is None:
        return files
    kept: list[FileRecord] = []
    total = 0
    for f in files:
        at = staging.data_file(f.name)
        if total >= cap:
            at.delete()
            continue
        if total + f.rows > cap:
            with at.open_input_file() as src:
                table = pq.read_table(src).slice(0, cap - total)
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink)
            data = sink.getvalue().to_pybytes()
            at.write_bytes(data)
            sha = hashlib.sha256(data).hexdigest()
            f = dataclasses.replace(f, rows=table.num_rows, bytes=len(data), sha256=sha)
        kept.append(f)
        total += f.rows
    return kept


def run_pipeline(
    path: str | os.PathLike[str] | list[str],
    config: ConfigLike = None,
    *,
    out_dir: str | os.PathLike[str] | None = None,
    prelearner: Any = None,
    engine: Engine = "auto",
    overwrite: bool = False,
    resume: bool = False,
    progress: Progress | None = None,
    layout: Layout = "auto",
) -> PipelineResult:
    """Runs the batch job: ``out_dir/samples/*.parquet``, ``stats.json``, ``_manifest.json``.

    The job is a commit (:mod:`..commit`): units of work (:mod:`.run`) write into a staging
    folder beside ``out_dir``, which is moved into place only when every unit succeeded and the
    counts add up. A failed or interrupted job changes nothing at ``out_dir``; ``resume=True``
    reuses the units it finished. Without ``out_dir`` the job runs and counts, and keeps nothing.

    Args:
        path: A data file, a folder of them (recursive, name order), a glob, or a list of
            these; the format is ``config.read.format`` (``"auto"``: detected from the files).
        config: The prelearner config (default ``PreLearnerConfig()``): reading, validation,
            connectors, the buffer and the batch size; or a dict of its sections or fields, or
            a JSON/YAML file's path, local or on a store
            (:func:`~offline_prelearner.jobs.preflight.job_config`).
        out_dir: Where the job commits its output; absent or empty unless ``overwrite``.
            ``None`` runs the job and keeps nothing.
        prelearner: The prelearner each unit runs: a subclass of
            :class:`~offline_prelearner.OfflinePreLearner` or ``"package.module:Class"``;
            default ``config.prelearner``, else the base class.
        engine: ``auto`` (in-process for small inputs without a cluster, else Ray), ``local`` or
            ``ray``. Both run the same units and write the same bytes.
        overwrite: Replace a non-empty ``out_dir`` when the job succeeds (else refused).
        resume: Reuse the units an interrupted run of the same job committed.
        progress: ``progress(rows_done, rows_total, samples_written)`` as the job advances (per
            input chunk in-process, per unit on Ray).
        layout: How sample files hold array columns (obs, new_obs...): ``"auto"`` (the
            default: ``"fast"`` for cells of at least ``FAST_MIN_CELL_BYTES``, else ``"lists"``),
            ``"lists"`` (plain nested Arrow lists: numbers in pandas, polars, Hugging Face
            ``datasets`` and torch), ``"fast"`` (:mod:`~offline_prelearner.io.fast_tensor`, read
            several times faster for large cells, as arrays by this library only) or ``"rllib"``
            (Ray's tensor extension, which RLlib and Ray Data read as tensors).

    The job owns ``out_dir`` for its whole life (:class:`~..ownership.OutLock`, taken before any
    input is read); with ``on_invalid="quarantine"`` the refused rows are committed with the
    samples (``quarantine/``, the manifest's ``quarantine`` list, ``stats["quarantine_files"]``).

    Returns:
        A :class:`PipelineResult`: ``out_dir``, the sample files written and the job's stats
        (also in ``stats.json``).

    Raises:
        CommitError: ``out_dir`` is an input folder, lies inside one or holds an input; another
            job is writing it; it is not empty (without ``overwrite``); ``resume`` finds nothing
            to resume or another job; a staged file is not what its unit wrote.
        OSError: A write failed for want of room (ENOSPC, EDQUOT, EFBIG), naming ``out_dir``.
    """
    layout = check_layout(layout)
    config = job_config(config).for_job("batch")  # sample_all None: every transition once
    out: str | os.PathLike[str]
    if out_dir is None:  # a dry run: staged in a temporary folder, committed nowhere
        out = Path(tempfile.mkdtemp(prefix="offline-prelearner-dry-")) / "out"
    else:
        out = out_dir
    staging = staging_for(out, overwrite=overwrite, resume=resume)
    try:
        if out_dir is not None:
            staging.check_apart(path if isinstance(path, list) else os.fspath(path))
        # The job owns --out from here to its end: a second job into a local --out is refused
        # in one line, before either reads anything (ownership.OutLock); a store is probed.
        with staging, staging.guard():
            return _run_job(path, config, staging, out_dir, prelearner, engine, progress, layout)
    finally:
        if out_dir is None:
            staging.discard()
            shutil.rmtree(Path(out).parent, ignore_errors=True)


def _run_job(
    path: str | os.PathLike[str] | list[str],
    config: PreLearnerConfig,
    staging: Staging,
    out_dir: str | os.PathLike[str] | None,
    prelearner: Any,
    engine: str,
    progress: Progress | None,
    layout: Layout,
) -> PipelineResult:
    """:func:`run_pipeline` under the lock on ``staging.out``: plan, stage, run, commit (a dry
    run, without ``out_dir``, stages in a temporary folder and commits nothing)."""
    clock = _Clock()
    resume = staging.resume
    # Mixed formats are refused from the planning scan, which reads every footer anyway.
    check = config.read.format in ("auto", *MIXED_FORMAT_CHECKED)
    files, config, cls = prepare(path, config, prelearner, check_formats=False)
    scanner = None
    if plans_on_ray(engine, config):  # the files are scanned by Ray tasks on every node
        clock.lap("plan")
        init_ray(config)
        clock.lap("engine_start")
        scanner = ray_scanner(files)
    # The inputs as they are now: a resume reuses a unit only if its key (its parts and the
    # size, mtime and content fingerprint of every file it reads) is the one planned now.
    plan, fingerprints = plan_job(path, files, config, scanner, check_formats=check)
    eng = choose_engine(engine, config, plan)
    seed = config.seed
    if seed is None:  # the interrupted run's (to resume), else fresh
        seed = staging.staged_seed() if resume else None
        seed = secrets.randbits(31) if seed is None else seed
    staging.job = _job_description(config, cls, plan, eng, seed, fingerprints, layout)
    kept = {
        k: UnitRecord.from_dict(rec, f"the staged record of unit {k} (--out {staging.out})")
        for k, rec in staging.open().items()
    }
    todo = [u.index for u in plan.units if u.index not in kept]
    for k in todo:
        staging.drop_unit_files(k)
    output = staging.unit_output()
    job = UnitJob(plan, config, cls, seed, output, layout=layout, fingerprints=fingerprints)
    records = dict(kept)
    known = [f.rows for f in plan.files]
    rows_total = None if any(r is None for r in known) else sum(r or 0 for r in known)
    done = [sum(r.ledger.rows_in for r in kept.values()), sum(r.samples for r in kept.values())]

    def chunk_done(rows: int, samples: int) -> None:
        done[0] += rows
        done[1] += samples
        if progress is not None:
            progress(done[0], rows_total, done[1])

    def finished(rec: UnitRecord) -> None:
        records[rec.unit] = rec
        if eng == "ray":
            chunk_done(rec.ledger.rows_in, rec.samples)

    chunk_done(0, 0)
    clock.lap("plan")
    if eng == "local":
        for k in todo:
            finished(run_unit(job, k, chunk_done))
        clock.lap("units")
    elif todo:
        clock.engine_and_units(_run_on_ray(job, todo, config, finished))
    seconds = clock.seconds()
    stats = JobStats.summed(records.values())
    listed = per_file(files, config.read.format, (r.per_file for r in records.values()))
    _check_accounting(stats, plan, config, listed)
    with output.failures():
        sample_files = _cap(
            staging,
            sorted((f for r in records.values() for f in r.files), key=lambda f: f.name),
            config.sample.num_samples,
        )
    quarantined = sorted((f for r in records.values() for f in r.quarantine), key=lambda f: f.name)
    samples_out = sum(f.rows for f in sample_files)
    stats = dataclasses.replace(
        stats,
        input=tuple(os.fspath(p) for p in (path if isinstance(path, list) else [path])),
        files_read=len(files),
        files_rejected=sum(f["error"] is not None for f in listed),
        per_file=tuple(listed),
        format=config.read.format,
        engine=eng,
        units_reused=len(kept),
        samples_written=samples_out,
        samples_rule=_samples_rule(config),
        batch_rows=plan.batch_rows(config),  # rows per chunk of a unit (ray.batch_size)
        quarantine_files=tuple(staging.output_file(f.name) for f in quarantined),
        rows_quarantined=sum(f.rows for f in quarantined),
        wall_seconds=round(seconds, 3),
        rows_per_second=round(stats.rows_in / seconds, 1) if seconds else None,
        samples_per_second=round(samples_out / seconds, 1) if seconds else None,
        config=config.to_dict(),
        phases=dict(clock.phases),
        nodes=tuple(units_by_node(records.values())),
        ray_cluster=_cluster_info() if eng == "ray" else None,
    )
    if out_dir is None:
        clock.lap("commit")  # the accounting: a dry run commits nothing
        _stop(clock)
        return PipelineResult(None, [], dataclasses.replace(stats, phases=dict(clock.phases)))
    # Holds the commit point; stats.json's phases have no commit or stop seconds yet.
    staging.commit(stats.to_dict(), sample_files, {QUARANTINE: quarantined})
    written = [staging.output_file("samples", f.name) for f in sample_files]
    index_output(staging.output_file(), written)  # after the commit point, like stats.json
    clock.lap("commit")
    _stop(clock)
    stats = dataclasses.replace(stats, phases=dict(clock.phases))
    _restate(staging, stats)
    return PipelineResult(os.fspath(out_dir), written, stats)


class _Clock:
    """The job's :data:`PHASES` in seconds, each timed as the job leaves it (``phases``: the
    dict ``stats.json`` holds; ``commit`` and ``stop`` are None until measured)."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.phases: dict[str, float | None] = {
            "plan": None,
            "engine_start": 0.0,
            "units": 0.0,
            "commit": None,
            "stop": None,
        }

    def lap(self, phase: str) -> None:
        """Ends ``phase`` now: the seconds since the last phase ended are its own (added to
        what it had: Ray's start, on a job that plans on Ray, comes between two parts of the
        plan)."""
        now = time.perf_counter()
        self.phases[phase] = round((self.phases[phase] or 0.0) + now - self.last, 3)
        self.last = now

    def engine_and_units(self, began: float | None) -> None:
        """Ends the engine's start and the units now, split where the first unit began on a
        worker (``began``: ``time.time()`` there; None: no unit ran, all of it is the engine)."""
        now = time.perf_counter()
        total = now - self.last
        since = total if began is None else time.time() - began  # the units' own seconds
        start = min(max(0.0, total - since), total)
        self.phases["engine_start"] = round((self.phases["engine_start"] or 0.0) + start, 3)
        self.phases["units"] = round(total - start, 3)
        self.last = now

    def seconds(self) -> float:
        """Seconds since the job began."""
        return time.perf_counter() - self.start


def _stop(clock: _Clock) -> None:
    """Lets go of the engine once the job is over, where its process ends with it
    (:func:`~..session.ray_session.release_ray`), and times it."""
    release_ray()
    clock.lap("stop")


def _restate(staging: Staging, stats: JobStats) -> None:
    """``stats.json`` again with the commit's and the stop's seconds, which the commit could not
    know when it wrote it; the output is committed, so a failure is a warning."""
    try:
        staging.write_stats(stats.to_dict())
    except OSError as e:
        warnings.warn(
            f"{staging.out}: committed; writing stats.json again (the job's phases) failed ({e})",
            CommittedWarning,
            stacklevel=3,
        )


def _samples_rule(config: PreLearnerConfig) -> str:
    s = config.sample
    if s.sample_all:
        return "sample_all: every transition (or sequence) of every complete episode, once"
    return (
        f"replay: {s.train_batch_size} samples per {config.ray.rows_per_batch or 'whole'}-row "
        "input batch, from a buffer of the episodes read so far in that unit of work"
    )


def _unit_task() -> Callable[[bytes, int], dict[str, Any]]:
    """The Ray task that runs one unit: ``task(job, unit)``, ``job`` a pickled :class:`UnitJob`.

    Made here so that Ray ships it by value (a nested function): a fresh worker then imports
    this package inside the task, under the task's title (``ray::_run_units``), not while it is
    still ``ray::IDLE`` (a process list shows which workers run units, from their start). The
    unit ``began`` once that import and the job's unpickling are done: a worker's start counts
    in the job's ``engine_start`` phase, not in its ``units``.
    """

    def _run_units(job: bytes, unit: int) -> dict[str, Any]:
        import pickle
        import time

        from offline_prelearner.jobs.batch.batch_job import run_unit_here

        # The driver's own UnitJob (ray.cloudpickle.dumps in _run_on_ray), never a data file's
        # bytes: those are decoded by the readers, under their limits.
        shared = pickle.loads(job)
        began = time.time()
        return {"record": run_unit_here(shared, unit), "began": began}

    return _run_units


def run_unit_here(job: UnitJob, unit: int) -> dict[str, Any]:
    """Runs one unit in a Ray worker -> its record.

    Our own errors (bad data, bad config) travel back as a record, not as an exception: the CLI
    needs the error itself (its class gives the exit code, its location the one line), which
    travels best as our own dict. So does an OSError (a full disk: errno, message and file),
    which the CLI answers in one line, exit 3.

    Args:
        job: What every unit of the job shares.
        unit: The unit's index in the plan.

    Returns:
        The unit's record (:func:`~.run.run_unit`), or ``{"unit", "error"}`` / ``{"unit",
        "oserror"}``.
    """
    for_worker_process()  # see replay/storage/memory.py
    try:
        return run_unit(job, unit).to_dict()
    except OfflinePrelearnerError as e:
        return {"unit": unit, "error": error_to_dict(e)}
    except OSError as e:
        return {
            "unit": unit,
            "oserror": [e.errno, e.strerror or str(e), e.filename and os.fspath(e.filename)],
        }


#: How often Ray redoes a unit whose worker died before the job fails (exit 3 in the CLI).
UNIT_RETRIES = 3

#: Seconds one wait for a finished unit lasts before the driver looks again (signals are
#: handled between two waits at the latest).
WAIT_SECONDS = 0.5


def _run_on_ray(
    job: UnitJob, todo: list[int], config: PreLearnerConfig, finished: Callable[..., None]
) -> float | None:
    """Runs the units ``todo`` as Ray tasks, at most ``ray.concurrency`` at once, handing each
    record to ``finished`` as it arrives; returns when the first unit began on a worker
    (``time.time()`` there; None if none ran).

    A unit whose worker died is redone from scratch (same files), UNIT_RETRIES times, then the
    job fails (``WorkerCrashedError``, exit 3 in the CLI); errors raised by our code are records,
    never retried. Units are spread over the cluster's nodes (``SPREAD``, as Ray Data's maps).
    """
    ray = import_ray()
    init_ray(config)
    shared = job.output.shared_folder  # a local staging folder; None on a store
    NodeCheck([(f.path, f.size) for f in job.plan.files], shared, job.job_id).run()
    options: dict[str, Any] = {
        "num_cpus": config.ray.num_cpus,
        "max_retries": UNIT_RETRIES,
        "retry_exceptions": False,
        "scheduling_strategy": "SPREAD",
    }
    env = worker_env(job.prelearner)
    if env:
        options["runtime_env"] = env
    task = ray.remote(_unit_task()).options(name="_run_units", **options)
    job_ref = ray.put(ray.cloudpickle.dumps(job))  # unpickled in the task (_unit_task)
    queued = list(todo)
    window = _window(ray, config)
    running: dict[Any, int] = {}  # object ref -> unit
    began: list[float] = []
    while queued or running:
        while queued and len(running) < window:
            k = queued.pop(0)
            running[task.remote(job_ref, k)] = k
        ready, _ = ray.wait(list(running), num_returns=1, timeout=WAIT_SECONDS)
        for ref in ready:
            del running[ref]
            out = ray.get(ref)
            began.append(out["began"])
            finished(_unit_record(out["record"]))
    return min(began, default=None)


def _window(ray: Any, config: PreLearnerConfig) -> int:
    """How many units are submitted at once: ``ray.concurrency``, else as many as the cluster's
    CPUs run at once. A failed or interrupted job cancels nothing (``ray.cancel`` of a task whose
    reply is on its way fails a check in Ray 2.60's core worker, which aborts the process): the
    units in flight finish in the background (their records stay for ``--resume``), and the
    CLI's exit ends them at once; so few are in flight."""
    if config.ray.concurrency:
        return int(config.ray.concurrency)
    cpus = float(ray.cluster_resources().get("CPU", 1.0))
    per = config.ray.num_cpus
    return max(1, int(cpus // per)) if per > 0 else 1_000_000


def _unit_record(rec: dict[str, Any]) -> UnitRecord:
    """A unit's record, or the error it carries raised here."""
    if "error" in rec:
        raise error_from_dict(rec["error"])
    if "oserror" in rec:
        code, message, filename = rec["oserror"]
        args = (code, message) if filename is None else (code, message, filename)
        raise OSError(*args)
    return UnitRecord.from_dict(rec, f"the record of unit {rec.get('unit')} (from its Ray task)")
