"""Prioritized replay benchmark: PER sample + update at B=256 from 1M CartPole-like timesteps.

Workloads (bench names; the ``per.*`` ones also run on RLlib 2.60's side, so they get ratios):

* ``per.add``            -- add all episodes to an empty PrioritizedEpisodeReplayBuffer, steps/s;
* ``per.sample_update``  -- ``batch = buf.sample(256)`` then ``buf.update_priorities(
  batch["indices"], td)``, repeated; samples/s. The headline (cpprb ~670k/s, RLlib ~8.6k/s);
* ``per.sample``         -- ``buf.sample(256)`` alone (priorities already spread), samples/s;
* ``per.update``         -- ``update_priorities`` alone on handles sampled beforehand, items/s;
* ``per.sample_update.nstep3`` -- the same with ``NStep(3, 0.99)`` units (ours only);
* ``tree.update`` / ``tree.find_prefixsum`` -- SumTree micro-benchmarks, B=256 over 1M leaves;
* ``sampler.sample``     -- ``Prioritized.sample`` alone: draws + weights, no unit expansion.

Every line also carries ``cpu_throughput`` (per second of this process's CPU time): a steadier
figure than wall time when other work shares the two cores (see ``loadavg_1m``).

Episodes are synthetic and deterministic (:func:`cartpole_like`: CartPole's shapes and dtypes,
episode lengths like a random policy's, rewards 1, terminated; truncated at 500), built the same
way on both sides. TD errors are drawn once up front and cycled. RLlib's side
(``rllib_prioritized.py``) runs afterwards in its own venv; ``--no-rllib`` skips it.

Usage: ``python benchmarks/bench_prioritized.py [--quick] [--repeats K] [--no-rllib]``
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _common as C  # noqa: E402

B = 256
ALPHA, BETA = 0.6, 0.4
PER_BENCHES = ("per.add", "per.sample_update", "per.sample", "per.update")


def cartpole_like(timesteps: int, seed: int = 0) -> list[dict[str, Any]]:
    """Episodes totalling ``timesteps`` steps, as plain numpy columns (both sides build from this).

    Lengths follow a random CartPole policy's (geometric-ish, mean ~22, at least 8, at most 500;
    500 means truncated); the last episode is cut to hit ``timesteps`` exactly.
    """
    rng = np.random.default_rng(seed)
    lengths: list[int] = []
    left = timesteps
    while left > 0:
        n = int(min(max(rng.geometric(1 / 22), 8), 500, left))
        lengths.append(n)
        left -= n
    obs = rng.standard_normal((timesteps + len(lengths), 4)).astype(np.float32)
    actions = rng.integers(0, 2, timesteps)
    out, o, a = [], 0, 0
    for i, n in enumerate(lengths):
        out.append(
            {
                "id": i,
                "obs": obs[o : o + n + 1],
                "actions": actions[a : a + n],
                "rewards": np.ones(n, np.float32),
                "terminated": n < 500,
                "truncated": n == 500,
            }
        )
        o, a = o + n + 1, a + n
    return out


def _loop(count: int, fn: Callable[[int], Any]) -> None:
    """Calls ``fn(0) .. fn(count - 1)``; returns None so ``time_repeats`` times the whole call."""
    for i in range(count):
        fn(i)


def td_errors(count: int, seed: int = 1) -> np.ndarray:
    """``count`` batches of ``B`` TD errors (|N(0, 1)|-like, with a heavy tail)."""
    rng = np.random.default_rng(seed)
    return rng.standard_t(3, (count, B))


# ----------------------------------------------------------------------------- ours


def ours(args: argparse.Namespace) -> list[dict[str, Any]]:
    from offline_prelearner.episodes.episode import Episode
    from offline_prelearner.replay.prioritized import PrioritizedEpisodeReplayBuffer
    from offline_prelearner.replay.samplers.prioritized import Prioritized
    from offline_prelearner.replay.samplers.segment_tree import SumTree
    from offline_prelearner.replay.units import NStep

    steps = args.timesteps
    raw = cartpole_like(steps)
    episodes = [
        Episode(
            id=e["id"],
            observations=e["obs"],
            actions=e["actions"],
            rewards=e["rewards"],
            terminated=e["terminated"],
            truncated=e["truncated"],
        )
        for e in raw
    ]
    capacity = steps + len(episodes)  # slots: every step plus one final observation each
    iters = args.iters
    tds = td_errors(iters)
    lines = []

    def fresh(unit: Any = None) -> PrioritizedEpisodeReplayBuffer:
        return PrioritizedEpisodeReplayBuffer(capacity, Prioritized(ALPHA, BETA), unit, seed=0)

    def add() -> tuple[float, float]:
        buf = fresh()
        t0, c0 = time.perf_counter(), time.process_time()
        buf.add(episodes)
        return time.perf_counter() - t0, time.process_time() - c0

    C.log(f"ours: add {steps} steps ({len(episodes)} episodes)")
    t = C.time_repeats(add, args.repeats)
    lines.append(C.record("per.add", "ours", n=steps, timing=t, unit="steps/s"))

    for name, unit in (("per.sample_update", None), ("per.sample_update.nstep3", NStep(3, 0.99))):
        buf = fresh(unit)
        buf.add(episodes)
        C.log(f"ours: {name}, {iters} x B={B}")
        lines += measure_buffer(name, buf, tds, args, details=name == "per.sample_update")

    # Segment-tree micro-benchmarks at 1M leaves.
    rng = np.random.default_rng(2)
    leaves = 1_000_000
    tree = SumTree(leaves)
    tree.update(np.arange(leaves), rng.random(leaves))
    idx = rng.integers(0, leaves, (iters, B))
    vals = rng.random((iters, B))
    t = C.time_repeats(lambda: _loop(iters, lambda i: tree.update(idx[i], vals[i])), args.repeats)
    lines.append(
        C.record("tree.update", "ours", n=iters * B, timing=t, unit="items/s", leaves=leaves)
    )
    prefixes = rng.random((iters, B)) * tree.total()
    t = C.time_repeats(
        lambda: _loop(iters, lambda i: tree.find_prefixsum(prefixes[i])), args.repeats
    )
    lines.append(
        C.record(
            "tree.find_prefixsum", "ours", n=iters * B, timing=t, unit="items/s", leaves=leaves
        )
    )
    return lines


def measure_buffer(
    name: str, buf: Any, tds: np.ndarray, args: argparse.Namespace, details: bool
) -> list[dict[str, Any]]:
    """Sample + update on a filled buffer; with ``details`` also each half and the sampler."""
    iters = len(tds)

    def sample_update() -> None:
        for i in range(iters):
            batch = buf.sample(B)
            buf.update_priorities(batch["indices"], tds[i])

    t = C.time_repeats(sample_update, args.repeats)
    tree = buf.sampler.sum_tree
    lines = [
        C.record(
            name,
            "ours",
            n=iters * B,
            timing=t,
            unit="samples/s",
            memory=C.measure_peak(sample_update) if details else None,
            batch_size=B,
            timesteps=args.timesteps,
            trees_mb=round(2 * tree.nbytes / 2**20, 1),
            storage_mb=round(buf.storage.nbytes() / 2**20, 1),
        )
    ]
    if not details:
        return lines
    # Sample alone and update alone, on the same (now well-spread) priorities.
    t = C.time_repeats(lambda: _loop(iters, lambda i: buf.sample(B)), args.repeats)
    lines.append(C.record("per.sample", "ours", n=iters * B, timing=t, unit="samples/s"))
    handles = [buf.sample(B)["indices"] for _ in range(iters)]
    t = C.time_repeats(
        lambda: _loop(iters, lambda i: buf.update_priorities(handles[i], tds[i])), args.repeats
    )
    lines.append(C.record("per.update", "ours", n=iters * B, timing=t, unit="items/s"))
    sampler, storage, valid = buf.sampler, buf.storage, buf.valid_starts()
    t = C.time_repeats(
        lambda: _loop(iters, lambda i: sampler.sample(storage, B, buf.rng, valid)), args.repeats
    )
    lines.append(C.record("sampler.sample", "ours", n=iters * B, timing=t, unit="samples/s"))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats (default 3)")
    parser.add_argument("--quick", action="store_true", help="100k steps, one repeat")
    parser.add_argument("--no-rllib", action="store_true", help="skip RLlib's side")
    args = parser.parse_args()
    args.timesteps = 100_000 if args.quick else 1_000_000
    args.iters = 40 if args.quick else 200
    args.repeats = args.repeats or (1 if args.quick else 3)

    lines = [C.emit(x) for x in ours(args)]
    if not args.no_rllib:
        C.log("RLlib side (rllib_prioritized.py) in its own venv")
        rl_args = ["--timesteps", str(args.timesteps), "--repeats", str(args.repeats)]
        rllib = C.run_rllib(HERE / "rllib_prioritized.py", rl_args, PER_BENCHES)
        lines += [C.emit(x) for x in rllib]
        for x in C.ratio_lines(lines):
            C.emit(x)


if __name__ == "__main__":
    main()
