"""The batch job and the learner stream on Ray Data (and, for small jobs, in-process).

::

    result = run_pipeline("datasets/cartpole-v1/rows", config, out_dir="out/")   # a commit
    for batch in iter_learner_batches("data/", config):                         # MultiAgentBatch
        learner.update(batch)
    streams = split_learner_batches("data/", config, num_learners=2)            # one per learner

**The batch job** (:func:`run_pipeline`) plans self-contained units of work (:mod:`.units`),
runs them in-process (``engine="local"``) or as Ray Data tasks that Ray retries when a worker
dies (``engine="ray"``), and commits the output (:mod:`.commit`): staged, counted from the unit
records, checked against the input's row count, moved into place whole. Same input and config,
same output, whatever Ray retried or a ``resume`` reused.

**The learner stream** (:func:`build_dataset`, :func:`iter_learner_batches`) reads with Ray Data
in file order (``preserve_order``) into long-lived prelearner actors whose buffers fill as the data
streams. Their state cannot survive a restart, so the actors are created with ``max_restarts=0``:
a lost actor ends the stream with an error instead of silently dropping what it held.

Ray is imported only in ``jobs/`` (here, and the modules that drive it) and ``replay/shards.py``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .._version import __version__
from ..config import PreLearnerConfig
from ..episodes.ledger import Ledger
from ..errors import ConfigError, OfflinePrelearnerError, error_from_dict, error_to_dict
from ..io.fast_tensor import Layout, check_layout
from ..io.leaf_spaces import with_leaf_spaces
from ..io.parquet_guard import check_files
from ..io.sources import check_one_format, detect_format, expand_paths
from ..plugins import import_object
from ..prelearner import OfflinePreLearner
from ..replay.batch import MultiAgentBatch
from ..replay.memory import for_worker_process
from . import reaper
from .commit import (
    QUARANTINE,
    Staging,
    check_out_apart,
    file_sha256,
    input_fingerprint,
    output_storage,
    staging_path,
)
from .file_batches import ReadAhead, read_groups
from .file_tally import per_file
from .units import Plan, UnitJob, plan_units, run_unit, unit_key

__all__ = [
    "JobFailed",
    "LearnerStream",
    "PipelineResult",
    "build_dataset",
    "iter_learner_batches",
    "run_pipeline",
    "split_learner_batches",
]


@dataclass
class PipelineResult:
    """What :func:`run_pipeline` did: where the samples went and the summed counters."""

    out_dir: str | None
    files_written: list[str]
    stats: dict[str, Any] = field(default_factory=dict)


def _ray() -> Any:
    import ray

    return ray


_STARTED_RAY = False
_LOG_DIR: str | None = None
_OWNER: str | None = None  # the mark of the local instance this process started (reaper.py)
_REAPER: Any = None  # its watchdog process, held for the life of this process

#: Show Ray's own log lines on the console (the CLI's ``-v``). Off: Ray's INFO/WARNING lines and
#: its "(raylet) ..." error lines stay in the session's log folder (:func:`ray_log_dir`).
VERBOSE = True

#: The target size of the learner stream's output blocks when its actors read their own files.
#: Ray Data cuts a block of 1.5x its target: a train batch of up to 384 MiB (a 256-row batch of 4
#: stacked 84x84x4 frames is 58 MB) reaches the learner whole, and a task's smaller outputs are
#: handed on once they pass 256 MiB or the task ends (see :func:`_data_context`).
WHOLE_OUTPUT_BYTES = 256 * 2**20


def _init_ray(config: PreLearnerConfig) -> None:
    """Connects to the cluster the user named (``ray.address`` or ``RAY_ADDRESS``), else starts
    a fresh local instance -- never one found in a ``ray_current_cluster`` file a past
    ``ray start`` left behind (``address="local"``): a job joins no cluster it was not told to.

    A named address that does not answer is refused within CLUSTER_PROBE_SECONDS, in one line.
    A local instance is marked and watched (:mod:`.reaper`): whatever ends this process, no Ray
    process it started outlives it by more than a few seconds. Signals stay the CLI's
    (:mod:`.interrupts`): ``ray.init`` installs a SIGTERM handler of its own, which is kept out.
    """
    global _STARTED_RAY, _LOG_DIR, _OWNER, _REAPER
    ray = _ray()
    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {"log_to_driver": False}
    if not VERBOSE:
        kwargs["logging_level"] = logging.ERROR
        _mute_ray_driver_prints()
        _mute_ray_data_console()
    address = config.ray.address or os.environ.get("RAY_ADDRESS") or None
    if address:
        check_cluster_address(address)
    else:
        kwargs["include_dashboard"] = False
        _OWNER = f"{os.getpid()}-{secrets.token_hex(8)}"
        _REAPER = reaper.start(_OWNER)  # before the mark: the watchdog is not marked itself
        os.environ[reaper.OWNER_ENV] = _OWNER  # inherited by every process Ray starts
    _STARTED_RAY = True
    try:
        with _our_sigterm_handler():
            ctx = ray.init(address=address or "local", **kwargs)
    except (ConnectionError, RuntimeError) as e:
        if not address:
            raise
        raise ConfigError(_connect_failure(address, e)) from None
    finally:
        os.environ.pop(reaper.OWNER_ENV, None)
    with contextlib.suppress(AttributeError, KeyError, TypeError):
        _LOG_DIR = os.path.join(ctx.address_info["session_dir"], "logs")


@contextlib.contextmanager
def _our_sigterm_handler() -> Iterator[None]:
    """``ray.init`` replaces the SIGTERM handler with one that calls ``sys.exit(15)`` (a bare
    exit, mid-start); the caller's stays in place: Ray's setter is skipped for the call (a
    private name: if it moves, Ray's exit is read as the SIGTERM it was), and the caller's
    handler is installed again after it (Ray's C++ core adds one of its own)."""
    main = threading.current_thread() is threading.main_thread()
    on_term: Any = signal.getsignal(signal.SIGTERM) if main else None
    utils: Any = None
    with contextlib.suppress(ImportError):
        import ray._private.utils as utils
    setter = getattr(utils, "set_sigterm_handler", None)
    if setter is not None:
        utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    except SystemExit as e:
        if e.code != signal.SIGTERM or on_term in (None, signal.SIG_DFL, signal.SIG_IGN):
            raise
        on_term(signal.SIGTERM, None)  # the caller's handler decides (the CLI's raises)
        raise
    finally:
        if setter is not None:
            utils.set_sigterm_handler = setter
        if main and on_term is not None:
            # Always, even when Python's table still holds it: Ray's core worker installs a C
            # failure-signal handler for SIGTERM that prints "*** SIGTERM received ***" and a
            # stack before passing the signal on; this puts Python's own C handler back.
            signal.signal(signal.SIGTERM, on_term)


def _mute_ray_driver_prints() -> None:
    """Ray prints worker-death notices ("(raylet) A worker died ...") to the driver's stdout
    whatever its options say; they are in the session's logs, and a retried unit is not news.
    Ray 2.60 offers no switch, so its printer is replaced (a private name: skipped if absent)."""
    with contextlib.suppress(ImportError, AttributeError):
        import ray._private.worker as worker

        if hasattr(worker, "print_to_stdstream"):
            worker.print_to_stdstream = lambda *args, **kwargs: None


def _mute_ray_data_console() -> None:
    """Ray Data logs a job it aborts (a unit whose worker died for good) at ERROR with stack
    traces, on the console as well as in ``ray-data.log``: its console handler is silenced (the
    file keeps the records; the CLI's one line names the log folder)."""
    import ray.data  # noqa: F401  (sets up its loggers on import)

    for h in logging.getLogger("ray.data").handlers:
        if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler):
            h.setLevel(logging.CRITICAL + 1)


def ray_log_dir() -> str | None:
    """The log folder of the Ray session this module started (None if it started none)."""
    return _LOG_DIR


def shutdown_ray() -> None:
    """Shuts down the Ray instance this module started (the CLI calls it on every exit), then
    ends any process of a local instance still alive (marked, :mod:`.reaper`)."""
    global _STARTED_RAY
    if _STARTED_RAY and "ray" in sys.modules:
        sys.modules["ray"].shutdown()
    _STARTED_RAY = False
    if _OWNER is not None and reaper.supported():
        reaper.Instance(_OWNER).kill(seconds=2.0)


def ray_watched() -> bool:
    """Whether this process's exit alone ends the Ray processes it started: none were started
    here (none, or a cluster's), or the local instance's watchdog runs (:mod:`.reaper`). The CLI
    then leaves an interrupted job's instance to it instead of a shutdown that waits."""
    return _OWNER is None or (_REAPER is not None and _REAPER.poll() is None)


#: Seconds a named cluster address gets to accept a connection before the job is refused.
CLUSTER_PROBE_SECONDS = 2.0


def check_cluster_address(
    address: str, timeout: float = CLUSTER_PROBE_SECONDS, found_by: str = ""
) -> None:
    """Fails fast when nothing listens at a ``host:port`` cluster address.

    ``ray.init(address=...)`` retries an absent cluster for ~14 minutes before it raises; a TCP
    connect to the GCS port says the same in seconds. ``auto`` is probed at the address Ray
    would pick (the ``ray_current_cluster`` file of the last ``ray start``: a stale one names a
    dead cluster); ``local`` and ``ray://`` client addresses are left to Ray.

    Raises:
        ConfigError: nothing accepts a connection at ``address`` within ``timeout`` seconds.
    """
    if address == "auto":
        found = _auto_address()
        if found is not None:  # else Ray says in one line that it found no cluster
            check_cluster_address(found, timeout, " (found by 'auto': a past `ray start` left it)")
        return
    if address == "local" or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"Ray address {address!r} must be host:port (or auto, or ray://...)")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout).close()
    except OSError as e:
        raise ConfigError(
            f"no Ray cluster answers at {address}{found_by} ({e.strerror or e}); start one with "
            "`ray start --head`, fix --address / RAY_ADDRESS, or leave both unset to run locally"
        ) from None


def _auto_address() -> str | None:
    """The ``host:port`` Ray resolves ``address="auto"`` to, or None (none found, or Ray's
    private resolver moved: then Ray resolves it itself)."""
    quiet = logging.getLogger("ray._private.services")  # "Found multiple active Ray instances"
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # the console is ours: Ray's warning is not our one line
    try:
        from ray._private.services import canonicalize_bootstrap_address

        found = canonicalize_bootstrap_address("auto")
    except Exception:  # no cluster found, or the private name moved
        return None
    finally:
        quiet.setLevel(level)
    return found if isinstance(found, str) and found else None


def _connect_failure(address: str, error: BaseException) -> str:
    """One line for a failed ``ray.init(address=...)``: the chain of causes, and what to do."""
    chain: list[BaseException] = [error]
    while True:
        nxt = chain[-1].__cause__ or chain[-1].__context__
        if nxt is None or nxt in chain:
            break
        chain.append(nxt)
    msg = f"could not connect to the Ray cluster at {address}: " + " <- ".join(
        f"{type(e).__name__}: {_gist(e)}" for e in chain
    )
    text = " ".join(str(e) for e in chain).lower()
    if "auth" in text or "token" in text:
        msg += (
            "; the cluster requires a token: set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or "
            "RAY_AUTH_TOKEN_PATH) to the cluster's token"
        )
    return msg


def _gist(error: BaseException) -> str:
    """An exception's message in one line: its first line, or for a message that carries a
    traceback, that traceback's last line (the error itself)."""
    lines = [ln.strip() for ln in str(error).strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    return lines[-1] if "Traceback (most recent call last)" in lines[0] else lines[0]


class OfflinePreLearnerActor:
    """A prelearner as the batch job runs it in ``map_batches``: the prelearner's output batches
    (dicts of numpy columns, its public contract) are handed to Ray as Arrow tables built here.

    Ray's own conversion of a dict checks each column in Python: ~2 ms for a 256-row CartPole
    batch of 14 columns, half the prelearner's whole cost per 4096-row input batch. This builds the
    same schema (Ray's tensor type for columns of arrays, strings for ids) in ~0.25 ms, and hands
    anything it cannot type (mixed-type ids) to Ray unchanged.
    """

    def __init__(
        self,
        prelearner: type[OfflinePreLearner],
        config: PreLearnerConfig,
        stats_sink: Any = None,
    ) -> None:
        for_worker_process()  # see replay/memory.py
        self.prelearner = prelearner(config, stats_sink=stats_sink)
        self.obs_space = config.validate.observation_space

    def __call__(self, batch: Any) -> Iterator[Any]:
        for out in self.prelearner(batch):  # a custom __call__ may yield Arrow already
            block = to_arrow_block(out) if isinstance(out, dict) else out
            if self.obs_space is not None and isinstance(block, pa.Table):
                block = with_leaf_spaces(block, self.obs_space)  # composite: space per leaf
            yield block


class ReadingPreLearnerActor(OfflinePreLearnerActor):
    """The learner stream's actor: takes the index of a group of *file names* and reads them
    itself, in ``config.ray.batch_size``-row batches, one batch ahead on a thread, across groups
    when it is the only actor (:class:`~offline_prelearner.jobs.file_batches.ReadAhead`: the
    input never passes through the object store). The prelearner is told each batch's file, so
    its errors name it."""

    last_group = -1  # the file group read last

    def __init__(
        self,
        prelearner: type[OfflinePreLearner],
        config: PreLearnerConfig,
        stats_sink: Any = None,
        groups: list[list[str]] | None = None,
        read_ahead: bool = True,
    ) -> None:
        super().__init__(prelearner, config, stats_sink)
        # Ray caps a worker's thread pools at its CPUs (OMP_NUM_THREADS); this actor does the
        # reading that read tasks did on other CPUs, and decodes its columns in parallel.
        pa.set_cpu_count(max(pa.cpu_count(), config.ray.read_threads))
        self.reader = ReadAhead(groups or [], config.ray.batch_size, read_ahead, config.read.limits)

    def __call__(self, batch: Any) -> Iterator[Any]:
        # The prelearner's state (fragments waiting for their continuation) needs the groups in
        # file order: each task is dispatched after the last one ended, and this checks it.
        for k in batch.column("group").to_pylist():
            if k <= self.last_group:
                raise RuntimeError(
                    f"file group {k} reached the prelearner after group {self.last_group}: "
                    "the learner stream's files must arrive in order"
                )
            self.last_group = k
            for table, source in self.reader.batches(k):
                self.prelearner.source = source
                yield from super().__call__(table)


def to_arrow_block(columns: dict[str, Any]) -> Any:
    """A dict of numpy columns as the Arrow table Ray Data would make of it (or the dict itself
    when a column is not one Arrow type, e.g. ids of mixed types: Ray then converts it)."""
    import pyarrow as pa
    from ray.data.extensions import ArrowTensorArray

    arrays = []
    try:
        for v in columns.values():
            if v.ndim > 1:
                arrays.append(ArrowTensorArray.from_numpy(v))
            elif v.dtype == object:
                arrays.append(pa.array(v.tolist()))
            else:
                arrays.append(pa.array(v))
    except (pa.ArrowException, TypeError, ValueError):
        return columns
    return pa.Table.from_arrays(arrays, names=list(columns))


def resolve_config(config: PreLearnerConfig, files: list[str]) -> PreLearnerConfig:
    """Fills in what depends on the files: the detected format, and the spaces a ``convert``
    wrote into the Parquet metadata (enforced where the config declares none: the config's win).
    Files of several formats are refused whatever the format chosen
    (:func:`~offline_prelearner.io.sources.check_one_format`)."""
    if config.read.format == "auto":
        config = replace(config, read=replace(config.read, format=detect_format(files)))
    elif config.read.format in ("rows", "episodes", "sample_batches"):
        check_one_format(files)
    return _declared_spaces(config, files)


def _declared_spaces(config: PreLearnerConfig, files: list[str]) -> PreLearnerConfig:
    """``config`` with the spaces of the files' :class:`DatasetInfo` where it names none (a
    declaration this package cannot read declares nothing, as before)."""
    from .dataset_info import info_of_files

    v = config.validate
    if v.observation_space is not None and v.action_space is not None:
        return config
    try:
        info = info_of_files(files)
    except Exception:  # an unreadable declaration is no declaration
        return config
    obs = v.observation_space if v.observation_space is not None else info.observation_space
    act = v.action_space if v.action_space is not None else info.action_space
    if obs is v.observation_space and act is v.action_space:
        return config
    return replace(config, validate=replace(v, observation_space=obs, action_space=act))


def prelearner_class(config: PreLearnerConfig, cls: Any = None) -> type[OfflinePreLearner]:
    """``cls`` (a class or ``"package.module:Class"``), else ``config.prelearner``, else base."""
    spec = cls if cls is not None else config.prelearner
    if spec is None:
        return OfflinePreLearner
    obj = import_object(spec, f"prelearner {spec!r}") if isinstance(spec, str) else spec
    if not (isinstance(obj, type) and issubclass(obj, OfflinePreLearner)):
        raise ConfigError(f"prelearner {spec!r} is not a subclass of OfflinePreLearner")
    return obj


def _worker_env(cls: type) -> dict[str, Any] | None:
    """A runtime_env that lets Ray workers import ``cls`` when its module is only on the driver's
    path (a user's ``my_prelearners.py`` next to the data, not an installed package)."""
    if cls is OfflinePreLearner or cls.__module__ == "__main__":  # __main__: pickled by value
        return None
    module = sys.modules.get(cls.__module__)
    file = getattr(module, "__file__", None)
    if not file or "site-packages" in file:
        return None
    depth = cls.__module__.count(".")
    root = Path(file).resolve().parents[depth]
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)
    return {"env_vars": {"PYTHONPATH": path}}


def prepare(
    path: str | os.PathLike[str] | list[str], config: PreLearnerConfig, prelearner: Any = None
) -> tuple[list[str], PreLearnerConfig, type[OfflinePreLearner]]:
    """Everything that can fail before Ray starts: files, format, the class, and one dry
    construction of the prelearner (connectors, buffers, reader), so a bad config is an error
    here and not a stack trace from inside an actor."""
    files = expand_paths(path if isinstance(path, list) else os.fspath(path))
    config = resolve_config(config, files)
    cls = prelearner_class(config, prelearner)
    cls(config)
    return files, config, cls


def build_dataset(
    path: str | os.PathLike[str] | list[str],
    config: PreLearnerConfig,
    *,
    prelearner: Any = None,
    stats_sink: Any = None,
) -> Any:
    """The lazy Ray Dataset of learner-ready rows (read -> [groupby] -> map_batches -> [limit])."""
    ray = _ray()
    files, config, cls = prepare(path, config, prelearner)
    _init_ray(config)
    with _data_context(ray, config):
        return _build(ray, files, config, cls, stats_sink)


@contextlib.contextmanager
def _data_context(ray: Any, config: PreLearnerConfig) -> Iterator[None]:
    """The Ray Data settings of our datasets, set only while they are built (each dataset keeps
    a copy of the context it was built under; the caller's own context is left as it was)."""
    ctx = ray.data.DataContext.get_current()
    saved = (ctx.execution_options.preserve_order, ctx.target_max_block_size)
    saved_bars = ctx.enable_progress_bars
    ctx.execution_options.preserve_order = True
    ctx.target_max_block_size = config.ray.block_mb * 2**20
    if reads_in_actor(config):
        # The only blocks are the prelearner's outputs: Ray would cut one larger than 1.5x the
        # target into pieces (a 256-row batch of stacked pixel frames, 58 MB, into 75 + 75 + 106
        # rows, each piece copied again to be stored). A train batch stays whole; a task's
        # outputs are handed on together when it ends, or once they pass this size (which bounds
        # what an actor holds and how long a learner waits when a file is many batches).
        ctx.target_max_block_size = max(ctx.target_max_block_size, WHOLE_OUTPUT_BYTES)
    if not VERBOSE:
        ctx.enable_progress_bars = False  # the CLI draws its own
    try:
        yield
    finally:
        ctx.execution_options.preserve_order, ctx.target_max_block_size = saved
        ctx.enable_progress_bars = saved_bars


def _build(ray: Any, files: list[str], config: PreLearnerConfig, cls: type, stats_sink: Any) -> Any:
    kwargs = {"prelearner": cls, "config": config, "stats_sink": stats_sink}
    rc = config.ray
    # A restarted actor would start with empty buffers and no pending fragments: refuse it.
    remote_args: dict[str, Any] = {"num_cpus": rc.num_cpus, "max_restarts": 0}
    env = _worker_env(cls)
    if env:
        remote_args["runtime_env"] = env
    # Ray 2.60 has no named parameter for max_restarts and warns about extra remote args; its
    # actor pool documents ``max_restarts=0`` as the way to refuse restarts.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated")
        return _map(ray, files, config, kwargs, remote_args)


def _map(
    ray: Any,
    files: list[str],
    config: PreLearnerConfig,
    kwargs: dict[str, Any],
    remote_args: dict[str, Any],
) -> Any:
    rc = config.ray
    if reads_in_actor(config):
        # A group of files per task, named by its index (its outputs reach the learner when it
        # ends); the actors hold the groups and read them, one task at a time each, in order.
        if config.read.on_invalid == "raise":  # bombs and drift: one line, no actor started
            check_files(files, config.read.limits)
        groups = read_groups(files, rc.batch_size)
        items = [{"group": k} for k in range(len(groups))]
        tasks = ray.data.from_items(items, override_num_blocks=len(groups))
        actors = rc.concurrency or 1
        ds = tasks.map_batches(
            ReadingPreLearnerActor,
            fn_constructor_kwargs={**kwargs, "groups": groups, "read_ahead": actors == 1},
            compute=ray.data.ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=1),
            batch_size=None,
            batch_format="pyarrow",
            **remote_args,
        )
    elif rc.group_by_episode:
        ds = _read(ray, files, config)
        from ..io.schema import load_schema

        eps_col = load_schema(config.read.schema).column("eps_id") or "eps_id"
        ds = ds.groupby(eps_col).map_groups(
            OfflinePreLearnerActor,
            fn_constructor_kwargs=kwargs,
            compute=ray.data.ActorPoolStrategy(size=rc.concurrency or 1),
            batch_format="pyarrow",
            **remote_args,
        )
    else:
        ds = _read(ray, files, config).map_batches(
            OfflinePreLearnerActor,
            fn_constructor_kwargs=kwargs,
            compute=ray.data.ActorPoolStrategy(size=rc.concurrency or 1),
            batch_size=rc.batch_size,
            batch_format="pyarrow",
            **remote_args,
        )
    if config.sample.num_samples is not None:
        ds = ds.limit(config.sample.num_samples)
    return ds


def reads_in_actor(config: PreLearnerConfig) -> bool:
    """Whether the learner stream's actors read their files themselves (``ray.read="actor"``, and
    ``"auto"`` unless the rows are grouped by episode: that needs Ray Data's read and shuffle)."""
    mode = config.ray.read
    return mode == "actor" or (mode == "auto" and not config.ray.group_by_episode)


#: Ray Data reads this when ``read_parquet`` is called (on the driver) and starts that many
#: footer-reading actors per read; each handles 10 files per call.
FOOTER_ACTORS_ENV = "RAY_DATA_PARQUET_FOOTER_NUM_ACTORS"


def footer_readers(config: PreLearnerConfig, num_files: int) -> int:
    """How many Parquet footer actors a read of ``num_files`` files starts (see RayConfig)."""
    if config.ray.footer_readers is not None:
        return config.ray.footer_readers
    return max(1, min(32, -(-num_files // 10)))


def _read(ray: Any, files: list[str], config: PreLearnerConfig) -> Any:
    """The read stage: JSON lines through pyarrow's reader, Parquet with sized footer reading."""
    if files[0].endswith((".json", ".jsonl", ".ndjson")):
        return ray.data.read_json(files)  # pyarrow's JSON reader (newline-delimited); keeps types
    # Ray Data's reader decodes on the workers whatever a footer claims: bombs and files that
    # disagree are refused here, on the driver, from the footers (io/parquet_guard.py).
    check_files(files, config.read.limits)
    if FOOTER_ACTORS_ENV in os.environ:  # the user's setting wins
        return ray.data.read_parquet(files)
    os.environ[FOOTER_ACTORS_ENV] = str(footer_readers(config, len(files)))
    try:
        return ray.data.read_parquet(files)
    finally:
        del os.environ[FOOTER_ACTORS_ENV]


_COUNTERS = ("batches", "samples", "fragments_added", "not_ready", "pending_fragments")

#: Below this many input bytes (and with no cluster address) ``engine="auto"`` runs in-process:
#: starting Ray costs seconds that a small job should not pay (see benchmarks/README.md).
LOCAL_ENGINE_MAX_BYTES = 64 * 2**20

#: ``progress(rows_done, rows_total, samples_written)``: input rows (``rows_total`` from the
#: Parquet footers, None when unknown) and samples so far; called as the job advances.
Progress = Callable[[int, "int | None", int], None]


class JobFailed(OfflinePrelearnerError):
    """The job could not finish; nothing was committed to its output folder."""


def choose_engine(engine: str, config: PreLearnerConfig, plan: Plan) -> str:
    """``local`` or ``ray``: ``auto`` is local for inputs under LOCAL_ENGINE_MAX_BYTES when no
    cluster address is set (``ray.address`` or ``RAY_ADDRESS``), else Ray."""
    if engine not in ("auto", "local", "ray"):
        raise ConfigError(f"engine must be 'auto', 'local' or 'ray', found {engine!r}")
    if engine != "auto":
        return engine
    if config.ray.address or os.environ.get("RAY_ADDRESS"):
        return "ray"
    size = sum(f.size for f in plan.files)
    return "local" if size < LOCAL_ENGINE_MAX_BYTES else "ray"


def _cluster_info() -> dict[str, Any]:
    """Where the job ran: the cluster's GCS address, its live nodes and CPUs."""
    ray = _ray()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return {
        "address": ray.get_runtime_context().gcs_address,
        "nodes": len(nodes),
        "cpus": sum(n.get("Resources", {}).get("CPU", 0) for n in nodes),
    }


def _sum_records(records: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The job's counters: every unit's record counted once (ledgers, counters, buffers)."""
    ledger = Ledger()
    counters = dict.fromkeys(_COUNTERS, 0)
    held = {"episodes_held": 0, "timesteps_held": 0}
    for rec in records.values():
        st = rec["stats"]
        ledger += Ledger.from_dict(st["ledger"])
        for k in _COUNTERS:
            counters[k] += st.get(k, 0)
        for buf in st.get("buffers", {}).values():
            for k in held:
                held[k] += buf[k]
    total = ledger.to_dict()
    total["rows_balance"] = total.pop("balanced")
    return {"units": len(records), **total, **counters, **held}


def _check_accounting(stats: dict[str, Any], plan: Plan, config: PreLearnerConfig) -> None:
    """Row data: every input row (Parquet footers) was read by exactly one unit."""
    if config.read.format != "rows" or any(f.rows is None for f in plan.files):
        return
    expected = sum(f.rows or 0 for f in plan.files)
    if stats["rows_in"] != expected or not stats["rows_balance"]:
        raise JobFailed(
            f"accounting mismatch: the input holds {expected} rows, the units read "
            f"{stats['rows_in']} (balanced: {stats['rows_balance']}); nothing was committed"
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


def _cap(staging: Staging, files: list[dict[str, Any]], cap: int | None) -> list[dict[str, Any]]:
    """``sample.num_samples``: the first ``cap`` samples in unit order; later files dropped, the
    file that crosses the cap cut (same result whatever ran when)."""
    if cap is None:
        return files
    kept: list[dict[str, Any]] = []
    total = 0
    for f in files:
        p = staging.samples / f["name"]
        if total >= cap:
            p.unlink()
            continue
        if total + f["rows"] > cap:
            table = pq.read_table(p).slice(0, cap - total)
            pq.write_table(table, p)
            f = {**f, "rows": table.num_rows, "bytes": p.stat().st_size, "sha256": file_sha256(p)}
        kept.append(f)
        total += f["rows"]
    return kept


def run_pipeline(
    path: str | os.PathLike[str] | list[str],
    config: PreLearnerConfig | None = None,
    *,
    out_dir: str | os.PathLike[str] | None = None,
    prelearner: Any = None,
    engine: str = "auto",
    overwrite: bool = False,
    resume: bool = False,
    progress: Progress | None = None,
    layout: Layout = "auto",
) -> PipelineResult:
    """Runs the batch job: ``out_dir/samples/*.parquet``, ``stats.json``, ``_manifest.json``.

    The job is a commit (:mod:`.commit`): units of work (:mod:`.units`) write into a staging
    folder beside ``out_dir``, which is moved into place only when every unit succeeded and the
    counts add up. A failed or interrupted job changes nothing at ``out_dir``; ``resume=True``
    reuses the units it finished. Without ``out_dir`` the job runs and counts, and keeps nothing.

    Args:
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

    The job owns ``out_dir`` for its whole life (:class:`~.commit.OutLock`, taken before any
    input is read); with ``on_invalid="quarantine"`` the refused rows are committed with the
    samples (``quarantine/``, the manifest's ``quarantine`` list, ``stats["quarantine_files"]``).

    Raises:
        CommitError: ``out_dir`` is an input folder, lies inside one or holds an input; another
            job is writing it; it is not empty (without ``overwrite``); ``resume`` finds nothing
            to resume or another job; a staged file is not what its unit wrote.
        OSError: A write failed for want of room (ENOSPC, EDQUOT, EFBIG), naming ``out_dir``.
    """
    layout = check_layout(layout)
    config = config or PreLearnerConfig()
    if out_dir is None:
        out = Path(tempfile.mkdtemp(prefix="offline-prelearner-dry-")) / "out"
    else:
        out = Path(out_dir)
        check_out_apart(out, path if isinstance(path, list) else os.fspath(path))
    staging = Staging(out, {}, overwrite=overwrite, resume=resume)
    try:
        # The job owns --out from here to its end: a second job into it is refused in one
        # line, before either reads anything (commit.OutLock).
        with staging, output_storage(out):
            return _run_job(path, config, staging, out_dir, prelearner, engine, progress, layout)
    finally:
        if out_dir is None:
            staging.discard()
            shutil.rmtree(out.parent, ignore_errors=True)


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
    start = time.perf_counter()
    out, resume = staging.out, staging.resume
    files, config, cls = prepare(path, config, prelearner)
    plan = plan_units(files, config)
    eng = choose_engine(engine, config, plan)
    # The inputs as they are now: a resume reuses a unit only if its key (its parts and the
    # size, mtime and content fingerprint of every file it reads) is the one planned now.
    fingerprints = tuple(input_fingerprint(f.path) for f in plan.files)
    seed = config.seed if config.seed is not None else staged_seed(out, resume)
    staging.job = _job_description(config, cls, plan, eng, seed, fingerprints, layout)
    kept = staging.open()
    todo = [u.index for u in plan.units if u.index not in kept]
    for k in todo:
        staging.drop_unit_files(k)
    job = UnitJob(
        plan,
        config,
        cls,
        seed,
        str(staging.samples),
        str(staging.units),
        layout=layout,
        job_id=staging.job_id,
        fingerprints=fingerprints,
    )
    records = dict(kept)
    known = [f.rows for f in plan.files]
    rows_total = None if any(r is None for r in known) else sum(r or 0 for r in known)
    done = [sum(r["stats"]["ledger"]["rows_in"] for r in kept.values()), 0]
    done[1] = sum(r["samples"] for r in kept.values())

    def chunk_done(rows: int, samples: int) -> None:
        done[0] += rows
        done[1] += samples
        if progress is not None:
            progress(done[0], rows_total, done[1])

    def finished(rec: dict[str, Any]) -> None:
        records[int(rec["unit"])] = rec
        if eng == "ray":
            chunk_done(rec["stats"]["ledger"]["rows_in"], rec["samples"])

    chunk_done(0, 0)
    if eng == "local":
        for k in todo:
            finished(run_unit(job, k, chunk_done))
    elif todo:
        _run_on_ray(job, todo, config, finished)
    seconds = time.perf_counter() - start
    stats = _sum_records(records)
    _check_accounting(stats, plan, config)
    sample_files = _cap(
        staging,
        sorted((f for r in records.values() for f in r["files"]), key=lambda f: f["name"]),
        config.sample.num_samples,
    )
    quarantined = sorted(
        (f for r in records.values() for f in r.get(QUARANTINE, [])), key=lambda f: f["name"]
    )
    samples_out = sum(f["rows"] for f in sample_files)
    listed = per_file(files, config.read.format, (r.get("per_file", {}) for r in records.values()))
    stats.update(
        {
            "input": [os.fspath(p) for p in (path if isinstance(path, list) else [path])],
            "files_read": len(files),
            "files_rejected": sum(f["error"] is not None for f in listed),
            "per_file": listed,
            "format": config.read.format,
            "engine": eng,
            "units_reused": len(kept),
            "samples_written": samples_out,
            "samples_rule": _samples_rule(config),
            "quarantine_files": [str(out / f["name"]) for f in quarantined],
            "rows_quarantined": sum(f["rows"] for f in quarantined),
            "wall_seconds": round(seconds, 3),
            "rows_per_second": round(stats["rows_in"] / seconds, 1) if seconds else None,
            "samples_per_second": round(samples_out / seconds, 1) if seconds else None,
            "config": config.to_dict(),
        }
    )
    if eng == "ray":
        stats["ray_cluster"] = _cluster_info()
    if out_dir is None:
        return PipelineResult(None, [], stats)
    staging.commit(stats, sample_files, {QUARANTINE: quarantined})  # holds the commit point
    written = [str(out / "samples" / f["name"]) for f in sample_files]
    return PipelineResult(os.fspath(out_dir), written, stats)


def staged_seed(out: Path, resume: bool) -> int:
    """The seed of a job whose config has none: the interrupted run's (to resume), else fresh.
    Read under the job's lock on ``out`` (:func:`run_pipeline`), so no other job changes it."""
    if resume:
        with contextlib.suppress(OSError, ValueError, KeyError):
            staged = json.loads((staging_path(out) / "job.json").read_text())
            return int(staged["seed"])
    return secrets.randbits(31)


def _samples_rule(config: PreLearnerConfig) -> str:
    s = config.sample
    if s.sample_all:
        return "sample_all: every transition (or sequence) of every complete episode, once"
    return (
        f"replay: {s.train_batch_size} samples per {config.ray.batch_size or 'whole'}-row input "
        "batch, from a buffer of the episodes read so far in that unit of work"
    )


def _run_units(batch: dict[str, np.ndarray], job: UnitJob) -> dict[str, np.ndarray]:
    """The Ray Data task: runs the units of one batch (one unit per batch) -> their records.

    Our own errors (bad data, bad config) travel back as a record, not as an exception: Ray Data
    wraps a task's exception into a ``UserCodeException`` that keeps only its text, and the CLI
    needs the error itself (its class gives the exit code, its location the one line). So does
    an OSError (a full disk: errno, message and file), which the CLI answers in one line, exit 3.
    """
    for_worker_process()  # see replay/memory.py
    recs = []
    for k in batch["unit"]:
        try:
            recs.append(run_unit(job, int(k)))
        except OfflinePrelearnerError as e:
            recs.append({"unit": int(k), "error": error_to_dict(e)})
        except OSError as e:
            failed = [e.errno, e.strerror or str(e), e.filename and os.fspath(e.filename)]
            recs.append({"unit": int(k), "oserror": failed})
    return {
        "unit": np.array([r["unit"] for r in recs], dtype=np.int64),
        "record": np.array([json.dumps(r) for r in recs], dtype=object),
    }


#: How often Ray redoes a unit whose worker died before the job fails (exit 3 in the CLI).
UNIT_RETRIES = 3


def _run_on_ray(
    job: UnitJob, todo: list[int], config: PreLearnerConfig, finished: Callable[..., None]
) -> None:
    ray = _ray()
    _init_ray(config)
    # A unit whose worker died is redone from scratch (same files), UNIT_RETRIES times: Ray Data's
    # map tasks default to max_retries=-1, which retries a unit that always kills its worker (out
    # of memory, a crash in native code) forever. Errors raised by our code are not retried.
    remote_args: dict[str, Any] = {"num_cpus": config.ray.num_cpus, "max_retries": UNIT_RETRIES}
    env = _worker_env(job.prelearner)
    if env:
        remote_args["runtime_env"] = env
    # Ray 2.60 has no named parameter for max_retries and warns about extra remote args.
    with _data_context(ray, config), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated")
        ds = ray.data.from_items([{"unit": k} for k in todo], override_num_blocks=len(todo))
        ds = ds.map_batches(
            _run_units,
            fn_kwargs={"job": job},
            batch_size=1,
            batch_format="numpy",
            concurrency=config.ray.concurrency,
            **remote_args,
        )
    seen: set[int] = set()
    before = set(threading.enumerate())
    rows = iter(ds.iter_rows())
    try:
        for row in rows:
            rec = json.loads(row["record"])
            if "error" in rec:
                raise error_from_dict(rec["error"])
            if "oserror" in rec:
                code, message, filename = rec["oserror"]
                args = (code, message) if filename is None else (code, message, filename)
                raise OSError(*args)
            if rec["unit"] not in seen:  # a unit counts once, whatever Ray retried
                seen.add(rec["unit"])
                finished(rec)
    except KeyboardInterrupt:  # Ctrl-C (jobs/interrupts.py): no wait, the CLI's path is its own
        _close(rows)
        raise
    except BaseException:
        # Stop Ray Data's executor now, not at interpreter exit: a job that fails here is
        # followed by ray.shutdown(), and a thread of the executor or of the iterator (its
        # prefetcher, the thread that fetches the units still running) left running then
        # touches the shut-down worker, which ends the process with status 1 instead of ours
        # (1 run in 3 of a full disk on Ray). The executor cancels the running units; their
        # threads are given a few seconds to see it and end.
        _close(rows)
        _join_threads_since(before, UNWIND_SECONDS)
        raise
    _close(rows)


#: How long a failed job on Ray waits for Ray Data's threads to end (see :func:`_run_on_ray`).
UNWIND_SECONDS = 5.0


def _close(rows: Iterator[Any]) -> None:
    close = getattr(rows, "close", None)
    if close is not None:
        close()


def _join_threads_since(before: set[threading.Thread], seconds: float) -> None:
    """Waits up to ``seconds`` in all for the threads started since ``before`` to end.

    Ray Data's block prefetcher (``WaitBlockPrefetcher``, thread "Prefetcher") parks on a
    condition until its ``stop()``, which a closed iterator does not always reach: it is stopped
    here (found through the thread's target, a private name: skipped if absent)."""
    deadline = time.monotonic() + seconds
    new = [t for t in set(threading.enumerate()) - before if t is not threading.current_thread()]
    for t in new:
        owner: Any = getattr(getattr(t, "_target", None), "__self__", None)
        if type(owner).__name__.endswith("BlockPrefetcher"):
            with contextlib.suppress(Exception):
                owner.stop()
    for t in new:
        t.join(max(0.0, deadline - time.monotonic()))


def iter_learner_batches(
    path: str | os.PathLike[str] | list[str],
    config: PreLearnerConfig | None = None,
    *,
    prelearner: Any = None,
) -> Iterator[MultiAgentBatch]:
    """Streams ``MultiAgentBatch`` objects of ``sample.train_batch_size`` rows (the stream's last
    may be shorter) from the job, for a learner: what one update trains on, as RLlib's learners
    take ``train_batch_size_per_learner``. Ray Data hands over blocks of whatever size its
    operators made; they are re-cut here (a slice, no copy, where a batch lies in one block)."""
    config = config or PreLearnerConfig()
    ds = build_dataset(path, config, prelearner=prelearner)
    blocks = ds.iter_batches(batch_format="numpy", batch_size=None)
    for rows in train_batches(blocks, config.sample.train_batch_size):
        yield MultiAgentBatch.from_rows(rows)


def train_batches(
    blocks: Iterable[dict[str, np.ndarray]], rows: int
) -> Iterator[dict[str, np.ndarray]]:
    """``blocks`` (dicts of numpy columns, as Ray Data hands them over) cut into batches of
    ``rows`` rows, in order; only the last may be shorter. A batch inside one block is a view
    (the prelearner's blocks hold whole train batches, so that is every batch); one that spans
    two blocks is copied. Cheaper than Ray Data's own ``iter_batches(batch_size=rows)``, whose
    per-batch work cost 2 learners sharing a split 1/4 of their rows/s (bench_learners.py)."""
    held: dict[str, np.ndarray] | None = None  # a block's tail, shorter than a batch
    for block in blocks:
        n = len(next(iter(block.values()))) if block else 0
        start = 0
        if held is not None:
            need = rows - len(next(iter(held.values())))
            if n < need:
                held = {k: np.concatenate([held[k], v]) for k, v in block.items()}
                continue
            yield {k: np.concatenate([held[k], v[:need]]) for k, v in block.items()}
            held, start = None, need
        while n - start >= rows:
            yield {k: v[start : start + rows] for k, v in block.items()}
            start += rows
        if start < n:
            held = {k: v[start:] for k, v in block.items()}
    if held is not None:
        yield held


@dataclass(frozen=True)
class LearnerStream:
    """One learner's share of the learner stream (see :func:`split_learner_batches`).

    Iterating yields ``MultiAgentBatch`` objects of ``rows`` rows (``sample.train_batch_size``;
    a share's last may be shorter). It wraps a Ray Data ``DataIterator`` from
    ``streaming_split``: it pickles, so it can be handed to a Ray task, actor or Ray Train
    worker, and every share must be iterated at the same time (the split hands blocks to
    whichever share asks next; a share nobody reads holds the others up once its queue is
    full). Each pass over a share is one epoch of the whole split.
    """

    iterator: Any  # ray.data.DataIterator
    index: int
    num_learners: int
    rows: int  # per batch: the config's sample.train_batch_size

    def __iter__(self) -> Iterator[MultiAgentBatch]:
        blocks = self.iterator.iter_batches(batch_format="numpy", batch_size=None)
        for rows in train_batches(blocks, self.rows):
            yield MultiAgentBatch.from_rows(rows)

    def __repr__(self) -> str:
        return f"LearnerStream({self.index} of {self.num_learners})"


def split_learner_batches(
    path: str | os.PathLike[str] | list[str],
    config: PreLearnerConfig | None = None,
    num_learners: int = 2,
    *,
    equal: bool = False,
    batch_rows: int | None = None,
    prelearner: Any = None,
) -> list[LearnerStream]:
    """The learner stream split for ``num_learners`` learners (Ray Data's ``streaming_split``).

    The shares together see every output batch once: with ``equal=False`` (the default) a
    block goes whole to whichever learner asks first, so the shares' sizes differ with the
    learners' speeds; ``equal=True`` gives each share the same number of rows, which Ray Data
    gets by splitting blocks and *dropping* up to ``num_learners - 1`` rows at the end (what
    data-parallel learners that must step together want). A separate function rather than a
    flag of :func:`iter_learner_batches`: it returns N streams, not one.

    The split hands out Ray blocks, one at a time, and the prelearner's output is gathered into
    blocks (a task's output, or up to ``ray.block_mb`` where Ray Data reads the files; all of a
    small dataset can be one block, which one learner would get whole). ``batch_rows`` re-cuts
    the output into blocks of that many rows (Ray's streaming repartition) before the split, so
    the blocks are shared out finely; it costs a stage (bench_learners.py: ~1.4-2x the time of
    the split without it on 2 CPUs), so it is off by default. Either way each share yields
    batches of ``sample.train_batch_size`` rows, cut from the blocks it was handed.
    """
    for name, value in (("num_learners", num_learners), ("batch_rows", batch_rows)):
        if value is None and name == "batch_rows":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name}: expected an integer >= 1, got {value!r}")
    config = config or PreLearnerConfig()
    ds = build_dataset(path, config, prelearner=prelearner)
    if batch_rows is not None:
        ds = ds.repartition(target_num_rows_per_block=batch_rows)
    iterators = ds.streaming_split(num_learners, equal=equal)
    rows = config.sample.train_batch_size
    return [LearnerStream(it, i, num_learners, rows) for i, it in enumerate(iterators)]
