"""A custom prelearner, run in-process and as the Ray Data batch job (run it from the repo root).

``ShapedReward`` adds a ``shaped_rewards`` column (1 minus the pole angle's share of CartPole's
limit) to every episode before the buffer: its ``postprocess_episodes`` takes the batch's
episodes as one ``EpisodeColumns`` and adds the column for all of them at once, with no object
per episode (``columns.map_episodes(fn)`` would do it one ``Episode`` at a time, slower). The
batch job names the class by import path::

    offline-prelearner process datasets/cartpole-v1/rows --out /tmp/out \
        --prelearner custom_prelearner:ShapedReward     # with examples/ on PYTHONPATH
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

import offline_prelearner as op

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "datasets" / "cartpole-v1" / "rows"
ANGLE_LIMIT = 0.2095  # CartPole-v1 terminates beyond 12 degrees


class ShapedReward(op.OfflinePreLearner):
    """Adds ``shaped_rewards = 1 - |angle after the step| / limit`` to every episode."""

    def postprocess_episodes(self, columns: op.EpisodeColumns) -> op.EpisodeColumns:
        columns = super().postprocess_episodes(columns)  # keep the configured connectors
        # Observations after each step: all but every episode's first. Extras go at step rows.
        obs = columns.observations()
        first = np.cumsum(columns.length + 1) - (columns.length + 1)
        after = np.delete(obs, first, axis=0)
        shaped = np.zeros(len(columns.actions), np.float32)
        shaped[columns.step_rows()] = 1.0 - np.abs(after[:, 2]) / ANGLE_LIMIT
        # Never change the columns in place (others may hold them): a new table, arrays shared.
        return dataclasses.replace(columns, extras={**columns.extras, "shaped_rewards": shaped})


def check(rows: dict[str, np.ndarray] | op.SampleBatch) -> float:
    """Largest gap between the column and its definition, recomputed from ``new_obs``."""
    expected = 1.0 - np.abs(rows["new_obs"][:, 2]) / ANGLE_LIMIT
    return float(np.abs(rows["shaped_rewards"] - expected).max())


def main() -> int:
    # 1. In-process, on one Parquet file: the same object Ray would run.
    prelearner = ShapedReward(train_batch_size=64, seed=0)
    table = pq.read_table(sorted(DATA.glob("*.parquet"))[0])
    rows = next(iter(prelearner(table)))
    print(
        f"in-process      {len(rows['obs'])} rows; columns include shaped_rewards: "
        f"{'shaped_rewards' in rows}; max error {check(rows):.2e}"
    )

    # 2. The Ray Data job, the class named by import path. Ray workers import it by that name,
    # so they get this folder on their PYTHONPATH (on a cluster: runtime_env={"py_modules": ...}).
    import ray

    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    ray.init(
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    with tempfile.TemporaryDirectory() as out:
        result = op.run_pipeline(
            DATA, prelearner.config, out_dir=out, prelearner="custom_prelearner:ShapedReward"
        )
        written = pq.read_table(result.files_written)
        cols = op.MultiAgentBatch.from_rows(written)["default_policy"]  # the learner's view
    print(
        f"batch job       {len(written)} rows written from {result.stats['rows_in']} rows read; "
        f"rows balance {result.stats['rows_balance']}; max error {check(cols):.2e}"
    )
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
