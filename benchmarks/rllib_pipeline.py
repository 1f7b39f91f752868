"""RLlib 2.60's side of ``bench_pipeline.py``: its offline data path on Ray Data, end to end.

Run ONLY by the RLlib venv's python (``bench_pipeline.py`` starts it with the python of
the venv ``benchmarks/setup_rllib.sh`` builds: ``$OFFLINE_PRELEARNER_RLLIB_VENV``, default
``<repo>/.bench/rllib-venv``; ``$RLLIB_PYTHON`` overrides the interpreter). Never imported by
the package or its tests. Prints JSON lines (see ``_common.py``) with the bench names of our
default jobs, so ratios pair up.

What is timed is what RLlib's BC / MARWIL training step runs to get data: a ``BCConfig`` with
CartPole-v1's spaces, ``num_learners=0`` (a local learner) and
``.offline_data(input_=FILES, input_read_method="read_parquet", map_batches_kwargs={"concurrency":
1, "num_cpus": 1})`` is built into an algorithm (untimed: that builds the learner and its RL
module); then, timed, ``algo.offline_data.sample(num_samples=N, return_iterator=True,
num_shards=0)`` -- which adds ``map_batches(OfflinePreLearner, batch_size=N, concurrency=1)`` to
the dataset -- and every batch of the returned ``DataIterator`` is consumed with
``iter_batches(batch_size=None)``. A fresh algorithm (so a fresh dataset and actor) per repeat.

* ``cartpole_rows.e2e.b<N>``: row data. For rows RLlib's map batch size is ``num_samples`` (it
  refuses ``input_read_batch_size`` for rows), and every row becomes a one-step episode that runs
  through BC's learner connector: every row comes out once (``n_step`` is not used on this path).
* ``cartpole_episodes.e2e.b<E>``: msgpack episodes, ``input_read_episodes=True``,
  ``input_read_batch_size=E`` episodes per map batch; each batch goes into RLlib's episode buffer
  (capacity ``10 * train_batch_size_per_learner``) and ``train_batch_size_per_learner=256``
  samples come out.
* ``pixels_rows.e2e.b<N>``: the 84x84x4 uint8 pixel rows (the first ``--pixel-files`` files), the
  row job as for CartPole but with the frames' spaces (``Box(0, 255, (84, 84, 4), uint8)``,
  ``Discrete(2)``; RLlib builds a CNN module for them, untimed). A pixel pass that runs past
  ``--pixel-timeout`` seconds is stopped: a ``skipped`` line names the bench and the time, the Ray
  processes this script started are killed by PID, and the script exits with code 3.

The session is ``ray.init(num_cpus=2)`` as on our side (``bench_pipeline.init_ray``), with one
prelearner actor: RLlib's default ``concurrency=max(2, num_learners)`` puts two 1-CPU actors on a
2-CPU session, leaving no CPU for the read tasks. RLlib runs on a prefix of the files (``n``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import _common as C
from bench_pipeline import (
    EPISODE_BATCH_SIZES,
    Run,
    descendants,
    init_ray,
    line_for,
    repeat,
    timed,
    total_rows,
)

#: The pixel rows' observation space (``gymnasium.spaces.Box`` arguments); actions are CartPole's.
PIXEL_OBS = (0, 255, (84, 84, 4), "uint8")


def build_algo(files: list[Path], episodes: bool, episode_batch: int, pixels: bool = False) -> Any:
    import gymnasium as gym
    import numpy as np
    from ray.rllib.algorithms.bc import BCConfig

    env = gym.make("CartPole-v1")
    obs_space = env.observation_space
    if pixels:
        low, high, shape, dtype = PIXEL_OBS
        obs_space = gym.spaces.Box(low, high, shape, np.dtype(dtype))
    data_kwargs: dict[str, Any] = {
        "input_": [str(f) for f in files],
        "input_read_method": "read_parquet",
        "map_batches_kwargs": {"concurrency": 1, "num_cpus": 1},
        "dataset_num_iters_per_learner": 1,
    }
    if episodes:
        data_kwargs.update(input_read_episodes=True, input_read_batch_size=episode_batch)
    config = (
        BCConfig()
        .environment(observation_space=obs_space, action_space=env.action_space)
        .learners(num_learners=0)
        .training(train_batch_size_per_learner=256)
        .offline_data(**data_kwargs)
    )
    return config.build_algo()


def run_rllib(
    files: list[Path], batch: int, episodes: bool, limit: int | None, pixels: bool = False
) -> Run:
    """One timed end-to-end pass (the algorithm is built before the clock)."""
    algo = build_algo(files, episodes, batch, pixels)
    data = algo.offline_data
    if limit is not None:
        data.data = data.data.limit(limit)
    rows = limit or total_rows(files)

    def job() -> tuple[int, int, float | None]:
        t0 = time.perf_counter()
        num_samples = 256 if episodes else batch
        (it,) = data.sample(num_samples=num_samples, return_iterator=True, num_shards=0)
        samples, first = 0, None
        for b in it.iter_batches(batch_size=None, batch_format="numpy"):
            samples += len(next(iter(b.values())))
            first = first if first is not None else time.perf_counter() - t0
        return rows, samples, first

    run = timed(job)
    algo.stop()
    if not episodes and run.samples != rows:
        raise SystemExit(f"RLlib emitted {run.samples} samples for {rows} rows")
    return run


class Watchdog:
    """Stops this script if the work inside ``with Watchdog(...)`` runs past ``seconds``.

    On time-out (from a timer thread, while the main thread may be blocked inside Ray): prints a
    ``skipped`` line for ``bench`` with the reason, kills every process this one started (Ray's
    GCS, raylet and workers of this session, by PID), and exits with code 3. ``_common.run_rllib``
    keeps the lines printed so far and reports the benches never reached as skipped.
    """

    def __init__(self, seconds: float, bench: str) -> None:
        self.seconds, self.bench = seconds, bench
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def __enter__(self) -> Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def _fire(self) -> None:
        reason = f"no result after {self.seconds:.0f} s (hung or too slow); stopped"
        C.log(f"rllib {self.bench}: {reason}")
        C.emit({"bench": self.bench, "impl": "rllib", "skipped": reason})
        for pid in descendants():
            with contextlib.suppress(OSError):  # already gone
                os.kill(pid, signal.SIGKILL)
        sys.stdout.flush()
        os._exit(3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    C.add_common_args(parser)
    parser.add_argument("--only", default="rows,episodes")
    parser.add_argument("--batch-sizes", default="4096,65536")
    parser.add_argument("--files", type=int, default=2, help="row files to read (100k rows each)")
    parser.add_argument("--pixel-files", type=int, default=4, help="pixel files (~5k rows each)")
    parser.add_argument("--pixel-repeats", type=int, default=1, help="timed pixel passes")
    parser.add_argument(
        "--pixel-timeout", type=float, default=900.0, help="seconds per pixel pass, then stop"
    )
    args = parser.parse_args(argv)
    data = C.data_dir(args.data)
    only = args.only.split(",")
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    repeats = args.repeats or (1 if args.quick else 3)
    extra = {"digest": C.dataset_digest(data), "quick": args.quick, "ray_num_cpus": 2}
    rows_files = C.parquet_files(data / "cartpole_rows")[: args.files]
    eps_files = C.parquet_files(data / "cartpole_episodes")[:1]
    pixel_files = C.parquet_files(data / "pixels_rows")[: args.pixel_files]
    # Ray's read_parquet probes ``fsspec.implementations.http`` from several listing threads; in a
    # venv without aiohttp one thread can see the other's half-imported module and fail with
    # ImportError (only ModuleNotFoundError is caught). Marking the module absent makes every
    # probe a clean ModuleNotFoundError. Local files only, so nothing measured changes.
    sys.modules.setdefault("fsspec.implementations.http", None)  # type: ignore[arg-type]
    init_ray()
    for size in sizes:
        if "rows" in only:
            bench = f"cartpole_rows.e2e.b{size}"
            limit = 2 * size if args.quick else None
            runs = repeat(
                f"rllib {bench}",
                lambda size=size, limit=limit: run_rllib(rows_files, size, False, limit),
                repeats,
            )
            line = line_for(bench, "rllib", runs, "rows/s", batch_size=size, files=len(rows_files))
            C.emit({**line, **extra})
        if "episodes" in only:
            esize = EPISODE_BATCH_SIZES.get(size, size)
            bench = f"cartpole_episodes.e2e.b{esize}"
            limit = 2 * esize if args.quick else None
            runs = repeat(
                f"rllib {bench}",
                lambda esize=esize, limit=limit: run_rllib(eps_files, esize, True, limit),
                repeats,
            )
            C.emit({**line_for(bench, "rllib", runs, "episodes/s", batch_size=esize), **extra})
    if "pixels" in only:  # last: a time-out ends the script
        size = sizes[0]
        bench = f"pixels_rows.e2e.b{size}"
        timeout = args.pixel_timeout * args.pixel_repeats
        with Watchdog(timeout, bench):
            runs = repeat(
                f"rllib {bench}",
                lambda: run_rllib(pixel_files, size, False, None, pixels=True),
                args.pixel_repeats,
            )
        line = line_for(bench, "rllib", runs, "rows/s", batch_size=size, files=len(pixel_files))
        C.emit({**line, **extra})
    return 0


if __name__ == "__main__":
    sys.exit(main())
