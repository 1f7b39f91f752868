"""RLlib BC training with RLlib's own prelearner against ``offline_prelearner.rllib`` (issue 23).

Run ONLY by the RLlib venv's python (``benchmarks/setup_rllib.sh`` builds it and installs this
checkout editable there), from the repository root::

    .bench/rllib-venv/bin/python benchmarks/bench_rllib_prelearner.py

Both sides in one run, back to back, same data, seed and settings (Ray on 2 CPUs, one learner in
the driver, one ``map_batches`` actor, ``train_batch_size_per_learner=256``, 5 updates per
iteration, ``lr=1e-2``, seed 0). JSON lines (``_common.py``):

* ``rllib_bc.prelearner_call`` -- the prelearner's call alone, outside Ray (as OfflineData builds
  it), on the first 40 batches of 256 rows: samples per second; ``peak_mem_mb`` of one pass.
  ``impl`` ``rllib`` (RLlib's ``OfflinePreLearner``), ``ours`` (``RLlibPreLearner``) and
  ``ours_per_sample`` (ours forced to build one RLlib episode per sample, as before the columnar
  hand-over: the before/after figure).
* ``rllib_bc.train`` -- ``Algorithm.train()``: trained env steps per second (RLlib's
  ``num_env_steps_trained``) over ``--iterations`` iterations after one untimed warm-up
  iteration (``median_iteration_steps_per_s``: the same from the median iteration, steadier
  when a stall of the shared machine lands in one side's run); ``ceiling_steps_per_s``
  (``Learner.update`` alone on pre-made batches of 256, the same for both sides, best of 5 on the
  side's trained learner: the throughput if reading, the prelearner and Ray Data's hand-over
  were free) and ``of_ceiling`` (throughput / ceiling);
  ``peak_mem_mb`` is the prelearner call's (the actor's work) from the line above.
* ``rllib_bc.to_return`` -- a fresh algorithm's training wall time (evaluation excluded; the
  first iteration, Ray Data's start-up, included and also given as ``first_iteration_s``) until
  the greedy mean return over 5 CartPole-v1 episodes (seeds 100-104) reaches ``--target``,
  evaluated after every iteration, at most ``--max-iterations``; ``throughput`` is 1 / seconds
  (``null`` seconds and ``reached: false`` when it never did).

The data is ``datasets/cartpole-v1-heuristic/rows`` (3,000 rows of a heuristic policy, 6
episodes of 500 steps: the set cloning can reach 500 on); ``--rows`` names another rows folder.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import _common as C
import numpy as np
from _rllib import greedy_return

BATCH = 256
#: Batches the prelearner-call line times (the first of the data).
CALLS = 40
#: Learner updates per iteration (``dataset_num_iters_per_learner``; ``--updates``).
UPDATES = [5]


def _batches(path: Path) -> list[dict[str, np.ndarray]]:
    """The rows as Ray Data's numpy batches of 256 rows, in file order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.concat_tables(pq.read_table(f) for f in C.parquet_files(path))
    cols: dict[str, np.ndarray] = {}
    for name in table.column_names:
        col = table.column(name).to_numpy(zero_copy_only=False)
        if col.dtype == object and len(col) and isinstance(col[0], np.ndarray):
            col = np.stack(col)
        cols[name] = col
    n = table.num_rows
    return [{k: v[i : i + BATCH] for k, v in cols.items()} for i in range(0, n - BATCH + 1, BATCH)]


def _config(rows: Path, side: str) -> Any:
    import gymnasium as gym
    from ray.rllib.algorithms.bc import BCConfig

    from offline_prelearner.rllib import RLlibPreLearner

    env = gym.make("CartPole-v1")
    config = (
        BCConfig()
        .environment(observation_space=env.observation_space, action_space=env.action_space)
        .learners(num_learners=0)
        .offline_data(
            input_=[str(rows.resolve())],
            dataset_num_iters_per_learner=UPDATES[0],
            map_batches_kwargs={"concurrency": 1},
        )
        .training(train_batch_size_per_learner=BATCH, lr=1e-2)
        .debugging(seed=0)
    )
    if side == "ours":
        config = config.offline_data(prelearner_class=RLlibPreLearner.configure())
    return config


def _prelearner_lines(rows: Path, repeats: int) -> dict[str, dict[str, Any]]:
    """The prelearner's call alone, each side, as OfflineData builds it."""
    from ray.rllib.offline.offline_prelearner import OfflinePreLearner

    from offline_prelearner.rllib import RLlibPreLearner

    batches = _batches(rows)[:CALLS]
    out = {}
    for impl in ("rllib", "ours", "ours_per_sample"):
        config = _config(rows, "rllib")
        cls = OfflinePreLearner if impl == "rllib" else RLlibPreLearner.configure()
        spaces = (config.observation_space, config.action_space)
        spec = config.get_multi_rl_module_spec(spaces={"default_policy": spaces})
        pre = cls(config=config, spaces=spaces, module_spec=spec)
        if impl == "ours_per_sample":
            pre._bulk = False

        def run(pre: Any = pre) -> None:
            for b in batches:
                got = pre(b)
                if not isinstance(got, dict):
                    list(got)

        timing = C.time_repeats(run, repeats)
        memory = C.measure_peak(run)
        out[impl] = C.emit(
            C.record(
                "rllib_bc.prelearner_call",
                impl,
                n=BATCH * len(batches),
                timing=timing,
                unit="samples/s",
                memory=memory,
                calls=len(batches),
                ms_per_call=round(timing.median / len(batches) * 1e3, 2),
            )
        )
    return out


def _learner_only(algo: Any, batches: list[dict[str, Any]], repeats: int = 5) -> float:
    """Env steps per second of ``Learner.update`` alone on pre-made train batches: the best of
    ``repeats`` passes (a ceiling; torch's threads lose the most to a busy machine)."""
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
    from ray.rllib.utils import unflatten_dict
    from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

    learner = algo.learner_group._learner
    made = []
    for flat in batches:
        per_module = unflatten_dict(dict(flat))
        n = len(next(iter(per_module["default_policy"].values())))
        made.append(MultiAgentBatch({m: SampleBatch(v) for m, v in per_module.items()}, n))
    steps = sum(b.env_steps() for b in made)
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for b in made:
            learner.update(batch=b, timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: 0})
        rates.append(steps / (time.perf_counter() - t0))
    return max(rates)


def _train_batches(rows: Path) -> list[dict[str, Any]]:
    """Train batches of 256 (our prelearner's output) for :func:`_learner_only`, both sides."""
    from offline_prelearner.rllib import RLlibPreLearner

    config = _config(rows, "ours")
    spaces = (config.observation_space, config.action_space)
    spec = config.get_multi_rl_module_spec(spaces={"default_policy": spaces})
    pre = RLlibPreLearner.configure()(config=config, spaces=spaces, module_spec=spec)
    return [flat for flat in (pre(b) for b in _batches(rows)[:CALLS]) if flat]


def _train(
    rows: Path,
    side: str,
    args: argparse.Namespace,
    mem: dict[str, Any],
    batches: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """BC with one side's prelearner: the ``train`` and ``to_return`` lines.

    Two algorithms, one after the other: the throughput one trains back to back (an evaluation
    between iterations would give the prelearner's actor idle time to read ahead), the other
    evaluates after every iteration until the target.
    """
    algo = _config(rows, side).build_algo()
    algo.train()  # start-up: Ray Data's pipeline and the actor; not timed
    walls, steps = [], []
    for _ in range(args.iterations):
        t0 = time.perf_counter()
        result = algo.train()
        walls.append(time.perf_counter() - t0)
        steps.append(result["learners"]["__all_modules__"]["num_env_steps_trained"])
    upd = _learner_only(algo, batches)
    algo.stop()

    algo = _config(rows, side).build_algo()
    returns: list[float] = []
    first = elapsed = 0.0
    reached_at = None
    for i in range(args.max_iterations):
        t0 = time.perf_counter()
        algo.train()
        wall = time.perf_counter() - t0
        first = first or wall
        elapsed += wall
        returns.append(round(greedy_return(algo), 1))
        if returns[-1] >= args.target:
            reached_at = (i + 1, elapsed)
            break
    algo.stop()
    n, seconds = int(sum(steps)), sum(walls)
    line = C.record(
        "rllib_bc.train",
        side,
        n=n,
        timing=C.Timing((seconds,)),
        unit="env_steps/s",
        iterations=len(walls),
        iteration_s=round(statistics.median(walls), 4),
        median_iteration_steps_per_s=round(n / len(walls) / statistics.median(walls), 1),
        ceiling_steps_per_s=round(upd, 1),
        of_ceiling=round(n / seconds / upd, 2),
    )
    line["peak_mem_mb"] = mem[side]["peak_mem_mb"]
    C.emit(line)
    seconds_to = None if reached_at is None else round(reached_at[1], 3)
    to_line = C.emit(
        {
            "bench": "rllib_bc.to_return",
            "impl": side,
            "throughput": None if seconds_to is None else round(1 / seconds_to, 4),
            "unit": "1/s",
            "seconds": seconds_to,
            "peak_mem_mb": mem[side]["peak_mem_mb"],
            "n": 1,
            "reached": reached_at is not None,
            "target": args.target,
            "iterations_to_target": None if reached_at is None else reached_at[0],
            "first_iteration_s": round(first, 3),
            "returns": returns,
            "loadavg_1m": round(os.getloadavg()[0], 2),
        }
    )
    return [line, to_line]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    C.add_common_args(parser)
    parser.add_argument("--rows", default="datasets/cartpole-v1-heuristic/rows")
    parser.add_argument("--iterations", type=int, default=30, help="timed iterations")
    parser.add_argument("--target", type=float, default=450.0, help="evaluated return to reach")
    parser.add_argument("--max-iterations", type=int, default=40)
    parser.add_argument(
        "--updates", type=int, default=5, help="learner updates per iteration (5, as the tests)"
    )
    args = parser.parse_args(argv)
    UPDATES[0] = args.updates
    if args.quick:
        args.iterations, args.max_iterations = 2, 3
    repeats = args.repeats or (1 if args.quick else 3)
    rows = Path(args.rows)
    os.environ.setdefault("RAY_DATA_LOG_LEVEL", "ERROR")
    import ray

    C.log(f"rows {rows}; prelearner calls, {repeats} repeats")
    mem = _prelearner_lines(rows, repeats)
    batches = _train_batches(rows)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    trained: dict[str, list[dict[str, Any]]] = {}
    for side in ("rllib", "ours"):
        C.log(f"BC training, {side}'s prelearner")
        trained[side] = _train(rows, side, args, mem, batches)
    ray.shutdown()
    lines = [*mem.values(), trained["rllib"][0], trained["ours"][0]]
    for line in C.ratio_lines(lines):
        C.emit(line)
    theirs, ours = trained["rllib"][1]["seconds"], trained["ours"][1]["seconds"]
    C.emit(
        {
            "bench": "rllib_bc.to_return",
            "impl": "ratio",
            "ratio": None if not (theirs and ours) else round(theirs / ours, 1),
            "reached": {"rllib": theirs is not None, "ours": ours is not None},
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
