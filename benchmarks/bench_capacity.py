#!/usr/bin/env python
"""Does sampling cost depend on how much the buffer holds? (issue 3: "cost independent of capacity")

Fills EpisodeReplayBuffers of 0.1M, 1M and 4M slots to 90% with CartPole-shaped episodes (10-40
steps) and times Sequence(20) B=32 and uniform 3-step B=256 draws for one second each. Prints one
JSON line per (unit, capacity). Usage: python benchmarks/bench_capacity.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from offline_prelearner import Episode, EpisodeReplayBuffer, NStep, Sequence, Uniform


def episodes(total: int, rng: np.random.Generator) -> list[Episode]:
    out, n = [], 0
    while n < total:
        length = int(rng.integers(10, 40))
        out.append(
            Episode(
                id=f"e{len(out)}",
                observations=rng.standard_normal((length + 1, 4)).astype(np.float32),
                actions=rng.integers(0, 2, length),
                rewards=np.ones(length),
                terminated=True,
            )
        )
        n += length
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="0.1M and 0.4M slots only")
    args = ap.parse_args()
    capacities = (100_000, 400_000) if args.quick else (100_000, 1_000_000, 4_000_000)
    rng = np.random.default_rng(0)
    for name, unit, batch in (("sequence_32x20", Sequence(20), 32), ("nstep3_b256", NStep(3), 256)):
        for cap in capacities:
            buf = EpisodeReplayBuffer(cap, Uniform(), unit, seed=0)
            buf.add(episodes(int(cap * 0.9), rng))
            buf.sample(batch)  # warm-up (builds the sampler's lookup table)
            t0, n = time.perf_counter(), 0
            while time.perf_counter() - t0 < 1.0:
                buf.sample(batch)
                n += batch
            rate = n / (time.perf_counter() - t0)
            line = {
                "bench": f"capacity.{name}",
                "impl": "ours",
                "capacity": cap,
                "timesteps_held": len(buf),
                "throughput": round(rate),
                "unit": "samples/s",
            }
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
