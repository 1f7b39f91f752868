"""The learner stream with epochs: a shuffled order that is a function of (seed, epoch), and a
position a learner checkpoints with its model.

::

    stream = epoch_learner_batches("data/", config, seed=7, epoch=0)
    for batch in stream:                                   # MultiAgentBatch, every sample once
        learner.update(batch)
        if step % 1000 == 0:
            save({"model": learner.state(), "data": stream.state_dict()})   # JSON-able
    ...
    stream = epoch_learner_batches("data/", config, seed=7, epoch=0)
    stream.load_state_dict(saved["data"])                  # on from the batch after the last one

The order (:mod:`.epoch_order`): the batch job's units, which own whole episodes, are shuffled
per epoch and grouped into windows of up to ``shuffle_rows`` input rows; each window's samples
are permuted and the windows, one after the other, are cut into train batches. Ray Data runs the
windows (``map_batches`` tasks, ``ray.concurrency`` at once, ``preserve_order``): each window is
computed from scratch by a fresh prelearner per unit, seeded by the unit's index as the batch job
seeds it, so a window read again after a crash holds the same samples, and a task Ray retries
loses nothing (unlike the long-lived actors of :func:`~.learner_stream.iter_learner_batches`).
Tasks, not actors: Ray's worker processes are reused from one stream to the next, so a stream
built to resume starts without a new process per actor.

Learner ``r`` of ``R`` takes global batches ``P0 + r, P0 + r + R, ...`` from the position ``P0``
it started at; each learner runs its own stream (in its own process), so each computes every
window (R learners cost R times the prelearner CPU of one): a window's permutation needs all of
its samples, whichever learner trains on them.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from ...config import PreLearnerConfig, check_int
from ...errors import ConfigError
from ...io.leaf_spaces import with_leaf_spaces
from ...io.stores import is_remote
from ...prelearner import OfflinePreLearner
from ...replay.batch import MultiAgentBatch
from ...replay.storage.memory import for_worker_process
from ..batch.plan import Plan, Unit, plan_units
from ..batch.run import read_unit, unit_seed
from ..file_batches import Prefetcher
from ..preflight import ConfigLike, NodeCheck, job_config, prepare
from ..session.ray_session import data_context, import_ray, init_ray, worker_env
from .epoch_order import Cursor, EpochOrder, StreamState, plan_fingerprint, unit_rows
from .learner_stream import to_arrow_block

__all__ = ["DEFAULT_SHUFFLE_ROWS", "EpochStream", "epoch_learner_batches", "window_samples"]

#: Input rows per window by default: the shuffle buffer (64k CartPole rows: ~10 MB of samples).
DEFAULT_SHUFFLE_ROWS = 1 << 16
#: ``min_rows`` of the stream's plan: a unit per file (plus the look-aheads that finish its
#: episodes), the finest shard that owns whole episodes.
UNIT_ROWS = 1
#: The column that names each sample's window on its way to the learner (dropped there).
WINDOW = "__window"


def _unit_samples(
    plan: Plan, unit: Unit, config: PreLearnerConfig, cls: type[OfflinePreLearner]
) -> Iterator[Any]:
    """A unit's samples, as the batch job computes them (:func:`~..batch.run.run_unit`): a
    fresh prelearner seeded by the unit's index, over the unit's rows in chunks."""
    cfg = dataclasses.replace(config, seed=unit_seed(config.seed or 0, unit.index))
    pre = cls(cfg)
    paths = [f.path for f in plan.files]
    for chunk, files, _ in read_unit(plan, unit, plan.batch_rows(cfg), None, cfg.read.limits):
        pre.source = paths[files[0]] if files[0] == files[-1] else None
        yield from pre(chunk)


def window_samples(
    plan: Plan,
    config: PreLearnerConfig,
    cls: type[OfflinePreLearner],
    order: EpochOrder,
    window: int,
) -> Any:
    """The samples of one window, permuted, with their window in the :data:`WINDOW` column.

    Args:
        plan: The stream's plan.
        config: The stream's resolved config (``seed`` seeds each unit's prelearner).
        cls: The prelearner class.
        order: The epoch's order.
        window: The window's index in ``order.windows``.

    Returns:
        An Arrow table (or, for columns Arrow cannot type, a dict of numpy columns), or None
        when the window's units produced no sample.
    """
    units = [plan.units[u] for u in order.windows[window]]
    outs = [out for unit in units for out in _unit_samples(plan, unit, config, cls)]
    if not outs:
        return None
    if all(isinstance(o, dict) for o in outs):
        cols = {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}
        n = len(next(iter(cols.values())))
        perm = order.permutation(window, n)
        cols = {k: v[perm] for k, v in cols.items()}
        cols[WINDOW] = np.full(n, window, dtype=np.int32)
        block = to_arrow_block(cols)
    else:
        tables = [to_arrow_block(o) if isinstance(o, dict) else o for o in outs]
        table = pa.concat_tables(tables)
        perm = order.permutation(window, table.num_rows)
        table = table.take(pa.array(perm))
        block = table.append_column(WINDOW, pa.array(np.full(len(perm), window, np.int32)))
    obs_space = config.validate.observation_space
    if obs_space is not None and isinstance(block, pa.Table):
        block = with_leaf_spaces(block, obs_space)
    return block


def run_windows(
    batch: pa.Table,
    plan: Plan,
    config: PreLearnerConfig,
    prelearner: type[OfflinePreLearner],
    order: EpochOrder,
) -> Iterator[Any]:
    """The ``map_batches`` function of the stream: the windows named in ``batch``, each computed
    from scratch (a Ray task, which Ray may retry: a window holds no state between calls).

    Args:
        batch: Rows with a ``window`` column, the windows' indices.
        plan: The stream's plan.
        config: The stream's resolved config.
        prelearner: The prelearner class.
        order: The epoch's order.

    Yields:
        Each window's block (:func:`window_samples`); none for a window without samples.
    """
    for_worker_process()  # see replay/storage/memory.py
    for w in batch.column("window").to_pylist():
        block = window_samples(plan, config, prelearner, order, w)
        if block is not None:
            yield block


class EpochStream:
    """One learner's share of the epoch stream (see :func:`epoch_learner_batches`).

    Iterating yields ``MultiAgentBatch`` objects of ``sample.train_batch_size`` samples (the
    epoch's last may be shorter) from the current position to the end of the epoch; a loop
    broken off and iterated again goes on from the batch after the last one handed out.

    Args:
        files: The input files (:func:`~..preflight.prepare`).
        config: The resolved config, ``sample.sample_all`` true.
        prelearner: The prelearner class.
        plan: The plan of ``files`` (:func:`~..batch.plan.plan_units`, a unit per file).
        seed: The order's seed.
        epoch: The epoch to start at.
        num_learners: Learners sharing each epoch.
        rank: This learner.
        shuffle_rows: Input rows per window.
    """

    def __init__(
        self,
        files: list[str],
        config: PreLearnerConfig,
        prelearner: type[OfflinePreLearner],
        plan: Plan,
        *,
        seed: int,
        epoch: int,
        num_learners: int,
        rank: int,
        shuffle_rows: int,
    ) -> None:
        self.files = files
        self.config = config
        self.prelearner = prelearner
        self.plan = plan
        self.seed = seed
        self.num_learners = num_learners
        self.rank = rank
        self.shuffle_rows = shuffle_rows
        name = f"{prelearner.__module__}:{prelearner.__qualname__}"
        self.fingerprint = plan_fingerprint(plan, config, shuffle_rows, name)
        self._rows = unit_rows(plan, shuffle_rows)
        self._order = EpochOrder.build(self._rows, seed, epoch, shuffle_rows)
        self._state = StreamState(self.fingerprint, seed, epoch)
        self._cursor: Cursor | None = None

    @property
    def epoch(self) -> int:
        """The epoch the stream is in."""
        return self._state.epoch

    @property
    def order(self) -> EpochOrder:
        """The current epoch's order (its windows of units)."""
        return self._order

    def set_epoch(self, epoch: int) -> None:
        """Moves to the start of epoch ``epoch`` (as a fresh stream of that epoch would be).

        Args:
            epoch: The epoch, 0 or more.
        """
        check_int("epoch", epoch, 0, 2**31 - 1)
        self._order = EpochOrder.build(self._rows, self.seed, epoch, self.shuffle_rows)
        self._state, self._cursor = StreamState(self.fingerprint, self.seed, epoch), None

    def state_dict(self) -> dict[str, Any]:
        """The stream's position, a small JSON-able dict to checkpoint with the model.

        Returns:
            ``{"version", "fingerprint", "seed", "epoch", "batches", "window", "skip"}``
            (:class:`~.epoch_order.StreamState`): ``batches`` is the group's position,
            the start plus this learner's batches taken times ``num_learners``.
        """
        state = self._cursor.state() if self._cursor is not None else self._state
        return state.to_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resumes from a state that :meth:`state_dict` gave (of any learner of a group, with any
        number of learners): the next batch is the group's position plus this learner's rank,
        then every ``num_learners``-th.

        Args:
            state: What :meth:`state_dict` returned, after a JSON round trip or not.

        Raises:
            ConfigError: The state is of another dataset, config, prelearner, ``shuffle_rows``
                or seed, or not such a state (one line).
        """
        loaded = StreamState.from_dict(state, self.fingerprint, self.seed)
        if loaded.epoch != self._order.epoch:
            self._order = EpochOrder.build(self._rows, self.seed, loaded.epoch, self.shuffle_rows)
        if loaded.window > len(self._order.windows):
            raise ConfigError(
                f"learner stream state names window {loaded.window}; epoch {loaded.epoch} "
                f"has {len(self._order.windows)}"
            )
        self._state, self._cursor = loaded, None

    def __iter__(self) -> Iterator[MultiAgentBatch]:
        start = self._cursor.state() if self._cursor is not None else self._state
        order = self._order
        cursor = Cursor(
            start,
            self.config.sample.train_batch_size,
            self.num_learners,
            self.rank,
            len(order.windows),
        )
        self._state, self._cursor = start, cursor
        if start.window >= len(order.windows):
            return
        # The window the stream starts in is computed here, in the learner's process, while Ray
        # Data starts the tasks of the windows after it (their workers' start-up, seconds, is
        # what a resumed learner would otherwise wait for its first batch): the same function of
        # (plan, config, order, window) either way, so the same samples.
        rest = None
        if start.window + 1 < len(order.windows):
            ds = self._dataset(order, start.window + 1)
            rest = Prefetcher(ds.iter_batches(batch_format="numpy", batch_size=None), 1)
        try:
            blocks = itertools.chain(self._here(order, start.window), rest or ())
            for rows in cursor.batches(_with_windows(blocks)):
                yield MultiAgentBatch.from_rows(rows)
        finally:
            if rest is not None:
                rest.close()

    def _here(self, order: EpochOrder, window: int) -> Iterator[dict[str, np.ndarray]]:
        """One window computed in this process, as Ray Data would hand it over (numpy)."""
        block = window_samples(self.plan, self.config, self.prelearner, order, window)
        if block is None:
            return
        if isinstance(block, pa.Table):
            from ray.data.block import BlockAccessor

            block = BlockAccessor.for_block(block).to_batch_format("numpy")
        yield block

    def _dataset(self, order: EpochOrder, first: int) -> Any:
        ray = import_ray()
        items = [{"window": w} for w in range(first, len(order.windows))]
        rc = self.config.ray
        remote_args: dict[str, Any] = {"num_cpus": rc.num_cpus}
        env = worker_env(self.prelearner)
        if env:
            remote_args["runtime_env"] = env
        kwargs = {
            "plan": self.plan,
            "config": self.config,
            "prelearner": self.prelearner,
            "order": order,
        }
        with data_context(ray, self.config):
            tasks = ray.data.from_items(items, override_num_blocks=len(items))
            return tasks.map_batches(
                run_windows,
                fn_kwargs=kwargs,
                concurrency=rc.concurrency or 1,
                batch_size=1,
                batch_format="pyarrow",
                **remote_args,
            )

    def __repr__(self) -> str:
        s = self.state_dict()
        return (
            f"EpochStream(learner {self.rank} of {self.num_learners}, seed {self.seed}, "
            f"epoch {s['epoch']}, batch {s['batches']}, {len(self._order.windows)} windows)"
        )


def _with_windows(
    blocks: Iterator[dict[str, np.ndarray]],
) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """Ray Data's numpy blocks as ``(window of each sample, the other columns)``."""
    for block in blocks:
        cols = dict(block)
        yield np.asarray(cols.pop(WINDOW)), cols


def epoch_learner_batches(
    path: str | os.PathLike[str] | list[str],
    config: ConfigLike = None,
    *,
    seed: int,
    epoch: int = 0,
    num_learners: int = 1,
    rank: int = 0,
    shuffle_rows: int = DEFAULT_SHUFFLE_ROWS,
    prelearner: Any = None,
) -> EpochStream:
    """The learner stream with epochs, for learner ``rank`` of ``num_learners``: every sample of
    the dataset once per epoch (``sample.sample_all``), in an order that is a function of
    ``(seed, epoch)`` alone, resumable mid-epoch from :meth:`EpochStream.state_dict`.

    The order is shuffled across files by unit (the batch job's units, each owning whole
    episodes) and within windows of up to ``shuffle_rows`` input rows (see
    :mod:`.epoch_order`); ``ray.concurrency`` Ray tasks compute the windows, which changes the
    speed, never the order. Plans the input (reading its key columns) and starts Ray here;
    nothing is read until the stream is iterated.

    Args:
        path: A data file, a folder of them (recursive, name order), a glob, or a list of
            these; the format is ``config.read.format`` (``"auto"``: detected from the files).
        config: The job's config, in any form :func:`iter_learner_batches
            <offline_prelearner.jobs.stream.learner_stream.iter_learner_batches>` takes;
            ``sample.sample_all`` unset or true (an epoch is every sample once),
            ``sample.num_samples`` unset, ``seed`` set (each unit's prelearner is seeded from
            it, so a window read again holds the same samples).
        seed: The order's seed, 0 or more.
        epoch: The epoch to start at, 0 or more (:meth:`EpochStream.set_epoch` moves on).
        num_learners: Learners sharing the epoch, at least 1.
        rank: This learner, ``0 <= rank < num_learners``: it takes every ``num_learners``-th
            global batch, from the ``rank``-th.
        shuffle_rows: Input rows per window (the shuffle buffer; a window's samples are held
            in memory at once, and a unit larger than this is a window of its own).
        prelearner: The prelearner class or ``"package.module:Class"``; default
            ``config.prelearner``, else the base class.

    Returns:
        The stream: iterate it for ``MultiAgentBatch`` objects of ``sample.train_batch_size``
        samples; ``state_dict()`` / ``load_state_dict()`` checkpoint and resume it.

    Raises:
        ConfigError: A setting is out of range or refused, or the config, the files or the
            prelearner are refused before Ray runs.
    """
    check_int("seed", seed, 0, 2**63 - 1)
    check_int("epoch", epoch, 0, 2**31 - 1)
    check_int("num_learners", num_learners, 1, 2**20)
    check_int("rank", rank, 0, num_learners - 1)
    check_int("shuffle_rows", shuffle_rows, 1, 2**62)
    config = job_config(config)
    if config.sample.sample_all is False:
        raise ConfigError(
            "sample.sample_all is false: an epoch is every sample once; leave it unset or true"
        )
    if config.sample.num_samples is not None:
        raise ConfigError("sample.num_samples caps a job; an epoch is every sample once: unset it")
    if config.seed is None:
        raise ConfigError(
            "config.seed is None: the epoch stream seeds each unit's prelearner from it, so that "
            "a window read again after a restart holds the same samples; set it"
        )
    config = config.for_job("batch")  # sample_all: every transition once
    files, config, cls = prepare(path, config, prelearner)
    plan = plan_units(files, config, UNIT_ROWS)
    init_ray(config)
    NodeCheck([(f, 0 if is_remote(f) else os.path.getsize(f)) for f in files]).run()
    return EpochStream(
        files,
        config,
        cls,
        plan,
        seed=seed,
        epoch=epoch,
        num_learners=num_learners,
        rank=rank,
        shuffle_rows=shuffle_rows,
    )
