"""The batch job on Ray Data: read -> map_batches(OfflinePreLearner) -> write or iterate.

::

    result = run_pipeline("datasets/cartpole-v1/rows", config, out_dir="out/")   # Parquet + stats
    for batch in iter_learner_batches("data/", config):                         # MultiAgentBatch
        learner.update(batch)

Ray is imported here (and in ``cli.py``) only. Files are read in name order with Ray Data's
``preserve_order`` on, so row data without a ``t`` column keeps its order into a single
prelearner actor; ``ray.group_by_episode`` groups rows by ``eps_id`` with Ray Data instead, so any
number of actors each see whole episodes. Per-actor counters travel through a small Ray actor
and are summed into ``stats.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from .batch import MultiAgentBatch
from .config import PreLearnerConfig
from .errors import ConfigError
from .plugins import import_object
from .prelearner import OfflinePreLearner
from .report import Ledger
from .sources import detect_format, expand_paths

__all__ = ["PipelineResult", "build_dataset", "iter_learner_batches", "run_pipeline"]


@dataclass
class PipelineResult:
    """What :func:`run_pipeline` did: where the samples went and the summed counters."""

    out_dir: str | None
    files_written: list[str]
    stats: dict[str, Any] = field(default_factory=dict)


def _ray() -> Any:
    import ray

    return ray


def _init_ray(config: PreLearnerConfig) -> None:
    ray = _ray()
    if ray.is_initialized():
        return
    address = config.ray.address or os.environ.get("RAY_ADDRESS")
    if address:
        check_cluster_address(address)
        try:
            ray.init(address=address, log_to_driver=False)
        except (ConnectionError, RuntimeError) as e:
            raise ConfigError(_connect_failure(address, e)) from None
    else:
        ray.init(include_dashboard=False, log_to_driver=False)


def check_cluster_address(address: str, timeout: float = 5.0) -> None:
    """Fails fast when nothing listens at a ``host:port`` cluster address.

    ``ray.init(address=...)`` retries an absent cluster for ~14 minutes before it raises; a TCP
    connect to the GCS port says the same in seconds. ``auto``, ``local`` and ``ray://`` client
    addresses are left to Ray.

    Raises:
        ConfigError: nothing accepts a connection at ``address`` within ``timeout`` seconds.
    """
    if address in ("auto", "local") or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"Ray address {address!r} must be host:port (or auto, or ray://...)")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout).close()
    except OSError as e:
        raise ConfigError(
            f"no Ray cluster answers at {address} ({e.strerror or e}); start one with "
            "`ray start --head`, fix --address / RAY_ADDRESS, or leave both unset to run locally"
        ) from None


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


def _stats_actor() -> Any:
    ray = _ray()

    @ray.remote(num_cpus=0)
    class StatsCollector:
        """Keeps each prelearner's latest cumulative stats; sums them on request."""

        def __init__(self) -> None:
            self.latest: dict[str, dict[str, Any]] = {}

        def report(self, key: str, stats: dict[str, Any]) -> None:
            self.latest[key] = stats

        def all(self) -> dict[str, dict[str, Any]]:
            return self.latest

    return StatsCollector.remote()  # type: ignore[attr-defined]


class _ActorSink:
    """A picklable stats sink: forwards ``(key, stats)`` to the collector actor, fire-and-forget."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.pending: list[Any] = []

    def __call__(self, key: str, stats: dict[str, Any]) -> None:
        self.pending.append(self.handle.report.remote(key, stats))
        if len(self.pending) > 16:  # keep the reference list short; the actor keeps the latest
            _ray().wait(self.pending, num_returns=len(self.pending) - 8)
            self.pending = self.pending[-8:]


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
        self.prelearner = prelearner(config, stats_sink=stats_sink)

    def __call__(self, batch: Any) -> Iterator[Any]:
        for out in self.prelearner(batch):  # a custom __call__ may yield Arrow already
            yield to_arrow_block(out) if isinstance(out, dict) else out


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
    """Fills in what depends on the files: the detected format."""
    if config.read.format == "auto":
        config = replace(config, read=replace(config.read, format=detect_format(files)))
    return config


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
    ctx.execution_options.preserve_order = True
    ctx.target_max_block_size = config.ray.block_mb * 2**20
    try:
        yield
    finally:
        ctx.execution_options.preserve_order, ctx.target_max_block_size = saved


def _build(ray: Any, files: list[str], config: PreLearnerConfig, cls: type, stats_sink: Any) -> Any:
    ds = _read(ray, files, config)
    kwargs = {"prelearner": cls, "config": config, "stats_sink": stats_sink}
    rc = config.ray
    remote_args: dict[str, Any] = {"num_cpus": rc.num_cpus}
    env = _worker_env(cls)
    if env:
        remote_args["runtime_env"] = env
    if rc.group_by_episode:
        from .schema import load_schema

        eps_col = load_schema(config.read.schema).column("eps_id") or "eps_id"
        ds = ds.groupby(eps_col).map_groups(
            OfflinePreLearnerActor,
            fn_constructor_kwargs=kwargs,
            compute=ray.data.ActorPoolStrategy(size=rc.concurrency),
            batch_format="pyarrow",
            **remote_args,
        )
    else:
        ds = ds.map_batches(
            OfflinePreLearnerActor,
            fn_constructor_kwargs=kwargs,
            compute=ray.data.ActorPoolStrategy(size=rc.concurrency),
            batch_size=rc.batch_size,
            batch_format="pyarrow",
            **remote_args,
        )
    if config.sample.num_samples is not None:
        ds = ds.limit(config.sample.num_samples)
    return ds


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
    if FOOTER_ACTORS_ENV in os.environ:  # the user's setting wins
        return ray.data.read_parquet(files)
    os.environ[FOOTER_ACTORS_ENV] = str(footer_readers(config, len(files)))
    try:
        return ray.data.read_parquet(files)
    finally:
        del os.environ[FOOTER_ACTORS_ENV]


_COUNTERS = ("batches", "samples", "fragments_added", "not_ready", "pending_fragments")


def _sum_stats(per_actor: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Sums every actor's cumulative stats: the ledgers (Ledger +=), counters, buffer holdings."""
    ledger = Ledger()
    counters = dict.fromkeys(_COUNTERS, 0)
    held = {"episodes_held": 0, "timesteps_held": 0}
    for st in per_actor.values():
        ledger += Ledger.from_dict(st["ledger"])
        for k in _COUNTERS:
            counters[k] += st.get(k, 0)
        for buf in st.get("buffers", {}).values():
            for k in held:
                held[k] += buf[k]
    total = ledger.to_dict()
    total["rows_balance"] = total.pop("balanced")
    return {"actors": len(per_actor), **total, **counters, **held}


def _cluster_info() -> dict[str, Any]:
    """Where the job ran: the cluster's GCS address, its live nodes and CPUs."""
    ray = _ray()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return {
        "address": ray.get_runtime_context().gcs_address,
        "nodes": len(nodes),
        "cpus": sum(n.get("Resources", {}).get("CPU", 0) for n in nodes),
    }


def run_pipeline(
    path: str | os.PathLike[str] | list[str],
    config: PreLearnerConfig | None = None,
    *,
    out_dir: str | os.PathLike[str] | None = None,
    prelearner: Any = None,
) -> PipelineResult:
    """Runs the batch job; writes ``out_dir/samples/*.parquet`` and ``out_dir/stats.json``.

    Without ``out_dir`` the samples are only counted (a dry run that still validates everything).
    """
    config = config or PreLearnerConfig()
    start = time.perf_counter()
    files, config, cls = prepare(path, config, prelearner)
    _init_ray(config)
    collector = _stats_actor()
    ds = build_dataset(files, config, prelearner=cls, stats_sink=_ActorSink(collector))
    written: list[str] = []
    if out_dir is not None:
        samples_dir = Path(out_dir) / "samples"
        ds.write_parquet(str(samples_dir))
        written = sorted(str(p) for p in samples_dir.glob("*.parquet"))
        samples_out = sum(pq.read_metadata(p).num_rows for p in written)
    else:
        # Whole blocks, as Arrow: counting must not re-batch or convert what it only counts.
        batches = ds.iter_batches(batch_format="pyarrow", batch_size=None)
        samples_out = sum(b.num_rows for b in batches)
    seconds = time.perf_counter() - start
    stats = _sum_stats(_ray().get(collector.all.remote()))
    stats.update(
        {
            "input": [os.fspath(p) for p in (path if isinstance(path, list) else [path])],
            "files_read": len(files),
            "format": config.read.format,
            "samples_written": samples_out,
            "wall_seconds": round(seconds, 3),
            "rows_per_second": round(stats["rows_in"] / seconds, 1) if seconds else None,
            "samples_per_second": round(samples_out / seconds, 1) if seconds else None,
            "ray_cluster": _cluster_info(),
            "config": config.to_dict(),
        }
    )
    if out_dir is not None:
        with open(Path(out_dir) / "stats.json", "w") as fh:
            json.dump(stats, fh, indent=2)
    return PipelineResult(None if out_dir is None else os.fspath(out_dir), written, stats)


def iter_learner_batches(
    path: str | os.PathLike[str] | list[str],
    config: PreLearnerConfig | None = None,
    *,
    prelearner: Any = None,
) -> Iterator[MultiAgentBatch]:
    """Streams ``MultiAgentBatch`` objects from the job, one per output block, for a learner."""
    ds = build_dataset(path, config or PreLearnerConfig(), prelearner=prelearner)
    for rows in ds.iter_batches(batch_format="numpy", batch_size=None):
        yield MultiAgentBatch.from_rows(rows)
