"""Composite observations (issue 12): the cost per observation leaf.

The same 16 float32 numbers per observation, as one plain column (``plain``) or as a struct of
``L`` leaves of ``16 / L`` numbers each (a Dict space), through: the rows reader (struct columns
-> per-leaf episodes), the buffer's add (one ring column per leaf) and Transition sampling
(one gather per leaf). One JSON line per stage and layout, with rows/s and the ratio to plain.

    python benchmarks/bench_leaves.py [--steps 200000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pyarrow as pa

from offline_prelearner.config import ReadConfig
from offline_prelearner.io.formats.rows.reader import RowsReader
from offline_prelearner.replay import EpisodeReplayBuffer
from offline_prelearner.replay.samplers import Uniform
from offline_prelearner.replay.units import Transition

WIDTH, EP_LEN, BATCH = 16, 200, 256


def table(steps: int, leaves: int | None) -> pa.Table:
    n_ep = steps // EP_LEN
    obs = np.random.default_rng(0).normal(size=(n_ep, EP_LEN + 1, WIDTH)).astype(np.float32)

    def col(x: np.ndarray) -> pa.Array:
        if leaves is None:
            return pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), WIDTH)
        w = WIDTH // leaves
        parts = [
            pa.FixedSizeListArray.from_arrays(pa.array(x[:, i * w : (i + 1) * w].reshape(-1)), w)
            for i in range(leaves)
        ]
        return pa.StructArray.from_arrays(parts, [f"leaf{i}" for i in range(leaves)])

    term = np.zeros((n_ep, EP_LEN), bool)
    term[:, -1] = True
    return pa.table(
        {
            "eps_id": np.repeat(np.arange(n_ep), EP_LEN),
            "obs": col(obs[:, :-1].reshape(-1, WIDTH)),
            "new_obs": col(obs[:, 1:].reshape(-1, WIDTH)),
            "actions": np.zeros(n_ep * EP_LEN, np.int64),
            "rewards": np.ones(n_ep * EP_LEN, np.float32),
            "terminateds": term.reshape(-1),
            "truncateds": np.zeros(n_ep * EP_LEN, bool),
        }
    )


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200_000)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    plain: dict[str, float] = {}
    for leaves in (None, 1, 2, 4, 8, 16):
        name = "plain" if leaves is None else f"leaves{leaves}"
        t = table(args.steps, leaves)
        eps = RowsReader(ReadConfig()).read(t).episodes
        if not eps:  # the plain path hands a columnar batch: take its episodes
            batch = RowsReader(ReadConfig()).read(t)
            eps = [batch.columns.episode(i) for i in range(len(batch.columns))]
        buf = EpisodeReplayBuffer(args.steps + len(eps) + 1, Uniform(), Transition(), seed=0)
        buf.add(eps)
        n_samples = 200 * BATCH
        rates = {
            "read": args.steps / best(lambda t=t: RowsReader(ReadConfig()).read(t), args.repeats),
            "add": args.steps
            / best(
                lambda eps=eps: EpisodeReplayBuffer(
                    args.steps + len(eps) + 1, Uniform(), Transition(), seed=0
                ).add(eps),
                args.repeats,
            ),
            "sample": n_samples
            / best(lambda buf=buf: [buf.sample(BATCH) for _ in range(200)], args.repeats),
        }
        for stage, rate in rates.items():
            if leaves is None:
                plain[stage] = rate
            line = {
                "bench": f"leaves.{stage}.{name}",
                "unit": "samples/s" if stage == "sample" else "steps/s",
                "throughput": round(rate, 1),
                "leaves": leaves or 0,
                "vs_plain": round(rate / plain[stage], 3),
            }
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
