"""Writes this folder's two old-stack files from the shipped CartPole rows (run from the repo root).

    python datasets/cartpole-v1-old-stack/make_old_stack.py

The first 6 complete episodes of ``datasets/cartpole-v1/rows`` as RLlib's old-stack
``JsonWriter`` lays them out: one ``{"type": "SampleBatch", ...}`` line per episode, with the
columns it writes (``obs``, ``new_obs``, ``actions``, ``rewards``, ``terminateds``,
``truncateds``, ``eps_id``, ``agent_index``, ``unroll_id``, ``t``, ``action_prob``,
``action_logp``, ``infos``). The compressed file holds ``obs`` and ``new_obs`` as RLlib packs
them: one base64(lz4-frame(pickle(array))) string per column. Needs lz4 (the test extra).
"""

from __future__ import annotations

import base64
import json
import math
import pickle
from pathlib import Path

import lz4.frame
import numpy as np
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
ROWS = HERE.parent / "cartpole-v1" / "rows"
EPISODES = 6


def pack(array: np.ndarray) -> str:
    """RLlib's packed column: base64(lz4-frame(pickle(array)))."""
    return base64.b64encode(lz4.frame.compress(pickle.dumps(array))).decode()


def main() -> None:
    """Writes old_stack.json and old_stack_compressed.json beside this script."""
    table = pq.read_table(sorted(ROWS.glob("*.parquet"))[0])
    ids = list(dict.fromkeys(table.column("eps_id").to_pylist()))[:EPISODES]
    eps_id = np.asarray(table.column("eps_id").to_pylist(), dtype=object)
    obs = np.stack(table.column("obs").to_numpy(zero_copy_only=False)).astype(np.float32)
    new_obs = np.stack(table.column("new_obs").to_numpy(zero_copy_only=False)).astype(np.float32)
    plain, packed = [], []
    for k, eid in enumerate(ids):
        rows = np.flatnonzero(eps_id == eid)
        n = len(rows)
        line = {
            "type": "SampleBatch",
            "actions": table.column("actions").take(rows).to_pylist(),
            "rewards": table.column("rewards").take(rows).to_pylist(),
            "terminateds": table.column("terminateds").take(rows).to_pylist(),
            "truncateds": table.column("truncateds").take(rows).to_pylist(),
            "eps_id": [100000 + k] * n,
            "agent_index": [0] * n,
            "unroll_id": [k] * n,
            "t": table.column("t").take(rows).to_pylist(),
            "action_prob": [0.5] * n,
            "action_logp": [math.log(0.5)] * n,
            "infos": [{}] * n,
        }
        plain.append({"type": "SampleBatch", "obs": obs[rows].tolist(),
                      "new_obs": new_obs[rows].tolist(), **line})  # fmt: skip
        packed.append({"type": "SampleBatch", "obs": pack(obs[rows]),
                       "new_obs": pack(new_obs[rows]), **line})  # fmt: skip
    for name, lines in (("old_stack.json", plain), ("old_stack_compressed.json", packed)):
        (HERE / name).write_text("".join(json.dumps(ln) + "\n" for ln in lines))


if __name__ == "__main__":
    main()
