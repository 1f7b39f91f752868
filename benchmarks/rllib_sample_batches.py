"""RLlib 2.60's side of ``bench_sample_batches.py``: ``_map_sample_batch_to_episode``.

Run ONLY by the RLlib venv's python (``bench_sample_batches.py`` starts it with the python of
the venv ``benchmarks/setup_rllib.sh`` builds: ``$OFFLINE_PRELEARNER_RLLIB_VENV``, default
``<repo>/.bench/rllib-venv``; ``$RLLIB_PYTHON`` overrides the interpreter). Prints JSON lines with
the same bench names as our side so ratios pair up:

* ``cartpole_sample_batches.map`` -- ``OfflinePreLearner._map_sample_batch_to_episode(self, batch,
  to_numpy=True)``, the call ``OfflinePreLearner.__call__`` makes for ``input_read_sample_batches``,
  with ``self.config = AlgorithmConfig()``. ``batch`` is one file read by ``pyarrow.json`` (what
  ``ray.data.read_json`` does) and converted as Ray Data's ``batch_format="numpy"`` does, before
  timing. The ``infos`` column is dropped first: with it RLlib fails (``ndarray or list`` raises,
  and given as lists its T infos fail the T+1 length assertion), so it cannot read these files as
  written. RLlib makes ONE episode per record (it does not split at ``eps_id`` changes nor join
  batches), so its output is wrong for ~3/4 of the records; the figure is its speed, not a result.
* ``cartpole_sample_batches.read_map`` -- the JSON read and the numpy conversion plus the map.

Steps/s counts env steps (transitions) in the input.
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import _common as C

MAP, READ_MAP = "cartpole_sample_batches.map", "cartpole_sample_batches.read_map"


def load(path: Path, limit: int | None):  # type: ignore[no-untyped-def]
    import pyarrow as pa
    import pyarrow.json as pajson
    import ray.data  # noqa: F401
    from ray.data.block import BlockAccessor

    if limit is None:
        table = pajson.read_json(path)
    else:
        with open(path, "rb") as fh:
            data = b"".join(fh.readline() for _ in range(limit))
        table = pajson.read_json(pa.BufferReader(data))
    table = table.drop_columns([c for c in ("infos",) if c in table.column_names])
    return table, BlockAccessor.for_block(table).to_batch_format("numpy")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    C.add_common_args(parser)
    args = parser.parse_args(argv)
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
    from ray.rllib.offline.offline_prelearner import OfflinePreLearner

    data = C.data_dir(args.data) / "cartpole_sample_batches"
    files = sorted(data.glob("*.json"))
    limit = 300 if args.quick else None
    files = files[:1] if args.quick else files
    repeats = args.repeats or (1 if args.quick else 3)
    this = types.SimpleNamespace(config=AlgorithmConfig())
    mapper = OfflinePreLearner._map_sample_batch_to_episode
    batches = [load(f, limit)[1] for f in files]
    n = sum(sum(len(a) for a in b["actions"]) for b in batches)
    mapper(this, {k: v[:10] for k, v in batches[0].items()}, to_numpy=True)  # warm-up

    def map_pass() -> tuple[float, float]:
        return C.timed_calls(lambda b: mapper(this, b, to_numpy=True), batches)

    def read_map_pass() -> tuple[float, float]:
        return C.timed_calls(lambda f: mapper(this, load(f, limit)[1], to_numpy=True), files)

    episodes = sum(len(mapper(this, b, to_numpy=True)["episodes"]) for b in batches)
    call = "OfflinePreLearner._map_sample_batch_to_episode(batch, to_numpy=True), infos dropped"
    for name, fn in ((MAP, map_pass), (READ_MAP, read_map_pass)):
        C.log(f"rllib {name}: {n} steps, {len(files)} files")
        timing = C.time_repeats(fn, repeats, warmup=0)
        C.emit(
            C.record(
                name,
                "rllib",
                n=n,
                timing=timing,
                unit="steps/s",
                episodes_out=episodes,
                files=len(files),
                call=call,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
