"""RLlib 2.60's side of ``bench_readers.py``: its row mapping and msgpack episode decoding.

Run ONLY by the RLlib venv's python (``bench_readers.py`` starts it with the python of
the venv ``benchmarks/setup_rllib.sh`` builds: ``$OFFLINE_PRELEARNER_RLLIB_VENV``, default
``<repo>/.bench/rllib-venv``; ``$RLLIB_PYTHON`` overrides the interpreter). Never imported by
the package or its tests. Prints JSON lines (see ``_common.py``) with the same bench names as
our side, so ratios pair up.

What is timed, and nothing else:

* rows (``cartpole_rows.map``, ``pixels_rows.map``):
  ``OfflinePreLearner._map_to_episodes(self, batch, to_numpy=False)`` -- exactly the call RLlib's
  ``OfflinePreLearner.__call__`` makes for row data -- with ``self.config = AlgorithmConfig()``
  (RLlib's defaults: single agent, default schema, ``input_compress_columns=["obs", "new_obs"]``,
  ``ignore_final_observation=False``). Building a whole prelearner would also build an RL module,
  which the mapping never touches. ``batch`` is the file's table converted the way Ray Data's
  ``batch_format="numpy"`` converts a block (``BlockAccessor.to_batch_format("numpy")``), done
  before timing. One batch per Parquet file, as on our side.
* episodes (``cartpole_episodes.decode``): the list comprehension of ``OfflinePreLearner.__call__``
  for ``input_read_episodes=True``:
  ``SingleAgentEpisode.from_state(msgpack.unpackb(item, object_hook=msgpack_numpy.decode))``.

RLlib is slow, so it runs on a prefix of each dataset (``n`` in each line says how much);
throughput is a rate, so the ratio to our full-dataset figure stays fair.
"""

from __future__ import annotations

import argparse
import sys
import time
import types
from pathlib import Path
from typing import Any

import _common as C

ROWS, PIXELS, EPISODES = "cartpole_rows.map", "pixels_rows.map", "cartpole_episodes.decode"
#: Timed passes per workload, as in bench_readers.py (``--repeats`` overrides; 1 under --quick).
DEFAULT_REPEATS = {"rows": 5, "pixels": 3, "episodes": 5}


def to_numpy_batches(tables: list[tuple[Path, Any]]) -> list[dict[str, Any]]:
    """Arrow tables -> the dicts of numpy columns Ray Data hands to ``map_batches``."""
    import ray.data  # noqa: F401  (registers Ray's Arrow tensor extension types)
    from ray.data.block import BlockAccessor

    return [BlockAccessor.for_block(t).to_batch_format("numpy") for _, t in tables]


def read_tables(directory: Path, limit: int, episode_column: str | None) -> list[tuple[Path, Any]]:
    import ray.data  # noqa: F401  (so pq.read_table yields ArrowTensorTypeV2 columns, as in Ray)

    return list(C.limited_tables(C.parquet_files(directory), limit, episode_column))


def bench_rows(name: str, directory: Path, limit: int, repeats: int, to_numpy: bool) -> None:
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
    from ray.rllib.offline.offline_prelearner import OfflinePreLearner

    tables = read_tables(directory, limit, "eps_id")
    batches = to_numpy_batches(tables)
    n = sum(len(b["eps_id"]) for b in batches)
    this = types.SimpleNamespace(config=AlgorithmConfig())
    mapper = OfflinePreLearner._map_to_episodes

    def one_pass() -> tuple[float, float]:
        return C.timed_calls(lambda b: mapper(this, b, to_numpy=to_numpy), batches)

    C.log(f"rllib {name}: {n} rows in {len(batches)} batches")
    mapper(this, {k: v[:1000] for k, v in batches[0].items()}, to_numpy=to_numpy)  # warm-up
    timing = C.time_repeats(one_pass, repeats, warmup=0)
    memory = C.measure_peak(lambda: mapper(this, batches[0], to_numpy=to_numpy))
    C.emit(
        C.record(
            name,
            "rllib",
            n=n,
            timing=timing,
            unit="rows/s",
            memory=memory,
            mem_batch_rows=len(batches[0]["eps_id"]),
            batches=len(batches),
            files=[p.name for p, _ in tables],
            call=f"OfflinePreLearner._map_to_episodes(batch, to_numpy={to_numpy}), "
            "AlgorithmConfig() defaults; batch = Ray Data numpy batch of one file",
            to_numpy=to_numpy,
            **_versions(),
        )
    )


def bench_episodes(directory: Path, limit: int, repeats: int) -> None:
    import msgpack
    import msgpack_numpy as mnp
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    tables = read_tables(directory, limit, None)
    batches = to_numpy_batches(tables)
    n = sum(len(b["item"]) for b in batches)

    def decode(batch: dict[str, Any]) -> list[Any]:
        return [
            SingleAgentEpisode.from_state(msgpack.unpackb(item, object_hook=mnp.decode))
            for item in batch["item"]
        ]

    steps = sum(len(e) for b in batches for e in decode(b))  # also the warm-up

    def one_pass() -> tuple[float, float]:
        return C.timed_calls(decode, batches)

    C.log(f"rllib {EPISODES}: {n} episodes ({steps} steps) in {len(batches)} batches")
    timing = C.time_repeats(one_pass, repeats, warmup=0)
    memory = C.measure_peak(lambda: decode(batches[0]))
    C.emit(
        C.record(
            EPISODES,
            "rllib",
            n=n,
            timing=timing,
            unit="episodes/s",
            memory=memory,
            steps=steps,
            steps_per_s=round(steps / timing.median, 1),
            mem_batch_rows=len(batches[0]["item"]),
            batches=len(batches),
            files=[p.name for p, _ in tables],
            call="SingleAgentEpisode.from_state(msgpack.unpackb(item, "
            "object_hook=msgpack_numpy.decode)) per item",
            **_versions(),
        )
    )


_EXTRA: dict[str, Any] = {}


def _versions() -> dict[str, Any]:
    import ray

    return {"rllib_version": ray.__version__, "python": sys.version.split()[0], **_EXTRA}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    C.add_common_args(parser)
    parser.add_argument("--rows", type=int, default=None, help="CartPole rows (default 100000)")
    parser.add_argument("--pixel-rows", type=int, default=None, help="pixel rows (default 20000)")
    parser.add_argument("--episodes", type=int, default=None, help="episodes (default 2000)")
    parser.add_argument("--only", default="rows,pixels,episodes")
    parser.add_argument(
        "--to-numpy",
        action="store_true",
        help="call _map_to_episodes with to_numpy=True (slower; RLlib's __call__ passes False)",
    )
    args = parser.parse_args(argv)
    data = C.data_dir(args.data)

    def repeats(key: str) -> int:
        return int(args.repeats or (1 if args.quick else DEFAULT_REPEATS[key]))

    only = set(args.only.split(","))
    _EXTRA.update(digest=C.dataset_digest(data), quick=args.quick)
    warm = time.perf_counter()
    import ray.rllib  # noqa: F401  (import cost paid before any timing)

    C.log(f"rllib imported in {time.perf_counter() - warm:.1f} s")
    if "rows" in only:
        rows = args.rows or (5_000 if args.quick else 100_000)
        bench_rows(ROWS, data / "cartpole_rows", rows, repeats("rows"), args.to_numpy)
    if "pixels" in only:
        pixel_rows = args.pixel_rows or (200 if args.quick else 20_000)
        bench_rows(PIXELS, data / "pixels_rows", pixel_rows, repeats("pixels"), args.to_numpy)
    if "episodes" in only:
        episodes = args.episodes or (300 if args.quick else 2_000)
        bench_episodes(data / "cartpole_episodes", episodes, repeats("episodes"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
