"""The learner stream: prelearner actors on Ray Data, feeding a learner train batches.

::

    for batch in iter_learner_batches("data/", config):                         # MultiAgentBatch
        learner.update(batch)
    streams = split_learner_batches("data/", config, num_learners=2)            # one per learner

:func:`build_dataset` reads with Ray Data in file order (``preserve_order``) into long-lived
prelearner actors whose buffers fill as the data streams. Their state cannot survive a restart,
so the actors are created with ``max_restarts=0``: a lost actor ends the stream with an error
instead of silently dropping what it held. :func:`train_batches` cuts Ray Data's blocks into
batches of ``sample.train_batch_size`` rows. With several actors, rows without ``t`` are planned
into file ranges that each read the episodes they own, whole (:mod:`.episode_ranges`).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ...config import PreLearnerConfig, check_int
from ...errors import ConfigError
from ...io.leaf_spaces import with_leaf_spaces
from ...io.parquet_guard import check_files
from ...io.stores import is_remote, locate
from ...prelearner import OfflinePreLearner
from ...replay.batch import MultiAgentBatch
from ...replay.storage.memory import for_worker_process
from ..file_batches import FilePiece, ReadAhead, read_groups
from ..preflight import ConfigLike, NodeCheck, job_config, prepare
from ..session.ray_session import data_context, import_ray, init_ray, worker_env
from .episode_ranges import plan_ranges

__all__ = [
    "LearnerStream",
    "build_dataset",
    "iter_learner_batches",
    "split_learner_batches",
    "train_batches",
]

#: The target size of the learner stream's output blocks when its actors read their own files.
#: Ray Data cuts a block of 1.5x its target: a train batch of up to 384 MiB (a 256-row batch of 4
#: stacked 84x84x4 frames is 58 MB) reaches the learner whole, and a task's smaller outputs are
#: handed on once they pass 256 MiB or the task ends (see :func:`~.ray_session.data_context`).
WHOLE_OUTPUT_BYTES = 256 * 2**20


class OfflinePreLearnerActor:
    """A prelearner as the batch job runs it in ``map_batches``: the prelearner's output batches
    (dicts of numpy columns, its public contract) are handed to Ray as Arrow tables built here.

    Ray's own conversion of a dict checks each column in Python: ~2 ms for a 256-row CartPole
    batch of 14 columns, half the prelearner's whole cost per 4096-row input batch. This builds the
    same schema (Ray's tensor type for columns of arrays, strings for ids) in ~0.25 ms, and hands
    anything it cannot type (mixed-type ids) to Ray unchanged.

    Args:
        prelearner: The prelearner class (not an instance); the actor builds one, with
            ``config``, and keeps it (and its buffers) for its whole life.
        config: The job's resolved config; ``validate.observation_space``, when set, is
            attached to each output table per observation leaf.
    """

    def __init__(
        self,
        prelearner: type[OfflinePreLearner],
        config: PreLearnerConfig,
    ) -> None:
        for_worker_process()  # see replay/storage/memory.py
        self.prelearner = prelearner(config)
        self.obs_space = config.validate.observation_space

    def __call__(self, batch: Any) -> Iterator[Any]:
        for out in self.prelearner(batch):  # a custom __call__ may yield Arrow already
            block = to_arrow_block(out) if isinstance(out, dict) else out
            if self.obs_space is not None and isinstance(block, pa.Table):
                block = with_leaf_spaces(block, self.obs_space)  # composite: space per leaf
            yield block


class ReadingPreLearnerActor(OfflinePreLearnerActor):
    """The learner stream's actor: takes the index of a group of *file names* and reads them
    itself, in ``config.ray.rows_per_batch``-row batches, one batch ahead on a thread, across groups
    when it is the only actor (:class:`~offline_prelearner.jobs.file_batches.ReadAhead`: the
    input never passes through the object store). The prelearner is told each batch's file, so
    its errors name it.

    Args:
        prelearner: The prelearner class, as for :class:`OfflinePreLearnerActor`.
        config: The job's resolved config (``ray.rows_per_batch``, ``ray.read_threads``,
            ``read.limits``).
        groups: The file groups of the whole job, indexed by the ``group`` column of the task
            rows; each group is file names, or :class:`FilePiece` ranges when several actors
            read episodes whole. At least one (ConfigError otherwise); a task naming a group
            past the end is refused in one line (:meth:`ReadAhead.batches`).
        read_ahead: Read the next batch on a thread, across groups; only right when this is
            the only actor (with several, the next group is another actor's).
    """

    last_group = -1  # the file group read last

    def __init__(
        self,
        prelearner: type[OfflinePreLearner],
        config: PreLearnerConfig,
        groups: Sequence[Sequence[str | FilePiece]],
        read_ahead: bool = True,
    ) -> None:
        if not groups:  # every task names a group: with none, each would read nothing
            raise ConfigError("ReadingPreLearnerActor needs the job's file groups; none given")
        super().__init__(prelearner, config)
        # Ray caps a worker's thread pools at its CPUs (OMP_NUM_THREADS); this actor does the
        # reading that read tasks did on other CPUs, and decodes its columns in parallel.
        pa.set_cpu_count(max(pa.cpu_count(), config.ray.read_threads))
        self.reader = ReadAhead(groups, config.ray.rows_per_batch, read_ahead, config.read.limits)

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
    when a column is not one Arrow type, e.g. ids of mixed types: Ray then converts it).

    Args:
        columns: Column name to numpy array, all of one row count: arrays of more than one
            dimension become Ray's tensor columns, object arrays (ids) Arrow strings or ints.

    Returns:
        A :class:`pyarrow.Table` with the columns in order, or ``columns`` unchanged.
    """
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


def build_dataset(
    path: str | os.PathLike[str] | list[str],
    config: PreLearnerConfig,
    *,
    prelearner: Any = None,
) -> Any:
    """The lazy Ray Dataset of learner-ready rows (read -> [groupby] -> map_batches -> [limit]).

    Starts Ray (:func:`~..session.ray_session.init_ray`) and checks that every node sees the
    local input files; nothing is read until the dataset is consumed.

    Args:
        path: A data file, a folder of them, a glob, a store URI, or a list of these.
        config: The job's config (any form :func:`~..preflight.job_config` takes works too); it
            is resolved against the files before use.
        prelearner: A subclass of :class:`~offline_prelearner.OfflinePreLearner` or
            ``"package.module:Class"``; default ``config.prelearner``, else the base class.

    Returns:
        A ``ray.data.Dataset`` whose rows are the prelearner's output rows (at most
        ``sample.num_samples`` when set).

    Raises:
        ConfigError: The config, the files or the prelearner are refused before Ray runs.
        FileNotFoundError: Nothing matches ``path``.
    """
    ray = import_ray()
    files, config, cls = prepare(path, config, prelearner)
    init_ray(config)
    # On a cluster, every node must see the local input files as this one does (one line if not).
    NodeCheck([(f, 0 if is_remote(f) else os.path.getsize(f)) for f in files]).run()
    # Where the actors read their files, the only blocks are the prelearner's outputs: Ray would
    # cut one larger than 1.5x the target into pieces (a 256-row batch of stacked pixel frames,
    # 58 MB, into 75 + 75 + 106 rows, each piece copied again to be stored). A train batch stays
    # whole; a task's outputs are handed on together when it ends, or once they pass this size
    # (which bounds what an actor holds and how long a learner waits when a file is many batches).
    whole = WHOLE_OUTPUT_BYTES if reads_in_actor(config) else 0
    with data_context(ray, config, min_block_bytes=whole):
        return _build(ray, files, config, cls)


def _build(ray: Any, files: list[str], config: PreLearnerConfig, cls: type) -> Any:
    kwargs = {"prelearner": cls, "config": config}
    rc = config.ray
    # A restarted actor would start with empty buffers and no pending fragments: refuse it.
    remote_args: dict[str, Any] = {"num_cpus": rc.num_cpus, "max_restarts": 0}
    env = worker_env(cls)
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
        actors = rc.concurrency or 1
        names = read_groups(files, rc.rows_per_batch)
        # Several actors and rows without t: each range reads the episodes it owns, whole.
        plan = plan_ranges(names, config) if actors > 1 else None
        groups: Sequence[Sequence[str | FilePiece]] = names if plan is None else plan
        items = [{"group": k} for k in range(len(groups))]
        tasks = ray.data.from_items(items, override_num_blocks=len(groups))
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
        from ...io.schema import load_schema

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
            batch_size=rc.rows_per_batch,
            batch_format="pyarrow",
            **remote_args,
        )
    if config.sample.num_samples is not None:
        ds = ds.limit(config.sample.num_samples)
    return ds


def reads_in_actor(config: PreLearnerConfig) -> bool:
    """Whether the learner stream's actors read their files themselves (``ray.read="actor"``, and
    ``"auto"`` unless the rows are grouped by episode: that needs Ray Data's read and shuffle).

    Args:
        config: The job's config; ``ray.read`` and ``ray.group_by_episode`` decide.

    Returns:
        True when the actors read the files, False when Ray Data's read tasks do.
    """
    mode = config.ray.read
    return mode == "actor" or (mode == "auto" and not config.ray.group_by_episode)


#: Ray Data reads this when ``read_parquet`` is called (on the driver) and starts that many
#: footer-reading actors per read; each handles 10 files per call.
FOOTER_ACTORS_ENV = "RAY_DATA_PARQUET_FOOTER_NUM_ACTORS"


def footer_readers(config: PreLearnerConfig, num_files: int) -> int:
    """How many Parquet footer actors a read of ``num_files`` files starts (see RayConfig).

    Args:
        config: The job's config; ``ray.footer_readers``, when set, is the answer.
        num_files: Files in the read (0 or more).

    Returns:
        ``ray.footer_readers``, else one actor per 10 files, at least 1 and at most 32.
    """
    if config.ray.footer_readers is not None:
        return config.ray.footer_readers
    return max(1, min(32, -(-num_files // 10)))


def _read(ray: Any, files: list[str], config: PreLearnerConfig) -> Any:
    """The read stage: JSON lines through pyarrow's reader, Parquet with sized footer reading."""
    paths, kw = ray_read_args(files)
    if files[0].endswith((".json", ".jsonl", ".ndjson")):
        return ray.data.read_json(paths, **kw)  # pyarrow's JSON reader (newline-delimited)
    # Ray Data's reader decodes on the workers whatever a footer claims: bombs and files that
    # disagree are refused here, on the driver, from the footers (io/parquet_guard.py).
    check_files(files, config.read.limits)
    if FOOTER_ACTORS_ENV in os.environ:  # the user's setting wins
        return ray.data.read_parquet(paths, **kw)
    os.environ[FOOTER_ACTORS_ENV] = str(footer_readers(config, len(files)))
    try:
        return ray.data.read_parquet(paths, **kw)
    finally:
        del os.environ[FOOTER_ACTORS_ENV]


def ray_read_args(files: list[str]) -> tuple[list[str], dict[str, Any]]:
    """What Ray Data's readers take for ``files``: local paths as they are; a store's files as
    paths in its filesystem, with ``filesystem=`` the one ``io.stores.locate`` built from
    the store's settings (Ray's own resolution would not see a custom endpoint).

    Args:
        files: The expanded input files, all local or all store URIs (the first decides).

    Returns:
        ``(paths, kwargs)`` for ``ray.data.read_*``: ``files`` and no kwargs for local files or
        files on several stores; else paths inside the store and ``{"filesystem": fs}``.
    """
    if not files or not is_remote(files[0]):
        return files, {}
    locs = [locate(f) for f in files]
    fs = locs[0].fs
    if any(loc.fs is not fs for loc in locs):  # inputs on several stores: Ray resolves each URI
        return files, {}
    return [loc.path for loc in locs], {"filesystem": fs}


def iter_learner_batches(
    path: str | os.PathLike[str] | list[str],
    config: ConfigLike = None,
    *,
    prelearner: Any = None,
) -> Iterator[MultiAgentBatch]:
    """Streams ``MultiAgentBatch`` objects of ``sample.train_batch_size`` rows (the stream's last
    may be shorter) from the job, for a learner: what one update trains on, as RLlib's learners
    take ``train_batch_size_per_learner``. Ray Data hands over blocks of whatever size its
    operators made; they are re-cut here (a slice, no copy, where a batch lies in one block).

    Args:
        path: A data file, a folder of them (recursive, name order), a glob, or a list of
            these; the format is ``config.read.format`` (``"auto"``: detected from the files).
        config: The job's config (default ``PreLearnerConfig()``): reading, validation,
            connectors, the buffer, sampling and ``ray.*``; or a dict of its sections or
            fields (``{"n_step": 3}``), or a JSON/YAML file's path, local or on a store
            (:func:`~offline_prelearner.jobs.preflight.job_config`).
        prelearner: The prelearner each task runs: a subclass of
            :class:`~offline_prelearner.OfflinePreLearner` or ``"package.module:Class"``;
            default ``config.prelearner``, else the base class.

    Yields:
        ``MultiAgentBatch`` objects of ``sample.train_batch_size`` rows.

    Raises:
        ConfigError: The config, the files or the prelearner are refused before Ray runs.
    """
    config = job_config(config)
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
    per-batch work cost 2 learners sharing a split 1/4 of their rows/s (bench_learners.py).

    Args:
        blocks: Dicts of numpy columns, every block with the same column names; a block may
            be empty.
        rows: Rows per batch (``sample.train_batch_size``), at least 1.

    Yields:
        Dicts of the same columns, ``rows`` rows each except possibly the last.
    """
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
    config: ConfigLike = None,
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

    Args:
        path: A data file, a folder of them (recursive, name order), a glob, or a list of
            these; the format is ``config.read.format`` (``"auto"``: detected from the files).
        config: The job's config (default ``PreLearnerConfig()``): reading, validation,
            connectors, the buffer, sampling and ``ray.*``; or a dict of its sections or
            fields (``{"n_step": 3}``), or a JSON/YAML file's path, local or on a store
            (:func:`~offline_prelearner.jobs.preflight.job_config`).
        num_learners: How many shares (one per learner), at least 1.
        equal: Give every share the same number of rows, dropping up to ``num_learners - 1``.
        batch_rows: Re-cut the output into blocks of this many rows before the split; None
            keeps the blocks as the job made them.
        prelearner: The prelearner each task runs: a subclass of
            :class:`~offline_prelearner.OfflinePreLearner` or ``"package.module:Class"``;
            default ``config.prelearner``, else the base class.

    Returns:
        ``num_learners`` :class:`LearnerStream` objects, to be iterated at the same time.

    Raises:
        ConfigError: A setting is out of range, or the config, the files or the prelearner are
            refused before Ray runs.
    """
    check_int("num_learners", num_learners, 1, 2**20)
    check_int("batch_rows", batch_rows, 1, 2**40, none_ok=True)
    config = job_config(config)
    ds = build_dataset(path, config, prelearner=prelearner)
    if batch_rows is not None:
        ds = ds.repartition(target_num_rows_per_block=batch_rows)
    iterators = ds.streaming_split(num_learners, equal=equal)
    rows = config.sample.train_batch_size
    return [LearnerStream(it, i, num_learners, rows) for i, it in enumerate(iterators)]
