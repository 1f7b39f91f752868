"""RLlib 2.60's side of ``bench_prioritized.py``: its PrioritizedEpisodeReplayBuffer.

Run ONLY by the RLlib venv's python (``bench_prioritized.py`` starts it with the python of
the venv ``benchmarks/setup_rllib.sh`` builds: ``$OFFLINE_PRELEARNER_RLLIB_VENV``, default
``<repo>/.bench/rllib-venv``; ``$RLLIB_PYTHON`` overrides the interpreter). Never imported by
the package or its tests. Prints JSON lines with the same bench names as our side, so ratios
pair up.

The episodes are :func:`bench_prioritized.cartpole_like`'s, as ``SingleAgentEpisode`` objects
(numpy-finalized, no lookback). The buffer is ``PrioritizedEpisodeReplayBuffer(capacity=steps,
alpha=0.6)``; a sample is ``buf.sample(num_items=256, beta=0.4, n_step=1)`` and an update
``buf.update_priorities(|td|)`` (RLlib updates the items of its last sample; it takes no indices).
RLlib is slow, so the sample/update loops run fewer iterations than ours (``n`` says how many
samples) and ``per.add`` is timed once without a warm-up; throughput is a rate, so the ratio
stays fair.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _common as C  # noqa: E402
from bench_prioritized import ALPHA, BETA, B, _loop, cartpole_like, td_errors  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timesteps", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    args = parser.parse_args()

    import gymnasium as gym
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode
    from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import (
        PrioritizedEpisodeReplayBuffer,
    )

    obs_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    act_space = gym.spaces.Discrete(2)
    raw = cartpole_like(args.timesteps)
    C.log(f"rllib: building {len(raw)} SingleAgentEpisodes")
    episodes = []
    for e in raw:
        ep = SingleAgentEpisode(
            id_=str(e["id"]),
            observations=list(e["obs"]),
            actions=list(e["actions"]),
            rewards=list(e["rewards"]),
            terminated=e["terminated"],
            truncated=e["truncated"],
            observation_space=obs_space,
            action_space=act_space,
            len_lookback_buffer=0,
        )
        episodes.append(ep.to_numpy())
    steps = args.timesteps

    def fresh() -> PrioritizedEpisodeReplayBuffer:
        return PrioritizedEpisodeReplayBuffer(capacity=steps, alpha=ALPHA)

    def add() -> tuple[float, float]:
        buf = fresh()
        t0, c0 = time.perf_counter(), time.process_time()
        buf.add(episodes)
        return time.perf_counter() - t0, time.process_time() - c0

    C.log(f"rllib: per.add {steps} steps (once, no warm-up: a minute per 1M steps)")
    t = C.time_repeats(add, 1, warmup=0)
    C.emit(C.record("per.add", "rllib", n=steps, timing=t, unit="steps/s"))

    buf = fresh()
    buf.add(episodes)
    iters = args.iters
    tds = np.abs(td_errors(iters))

    def sample_update() -> None:
        for i in range(iters):
            buf.sample(num_items=B, beta=BETA, n_step=1)
            buf.update_priorities(tds[i])

    C.log(f"rllib: per.sample_update {iters} x B={B}")
    t = C.time_repeats(sample_update, args.repeats)
    C.emit(C.record("per.sample_update", "rllib", n=iters * B, timing=t, unit="samples/s"))

    t = C.time_repeats(
        lambda: _loop(iters, lambda i: buf.sample(num_items=B, beta=BETA, n_step=1)),
        args.repeats,
    )
    C.emit(C.record("per.sample", "rllib", n=iters * B, timing=t, unit="samples/s"))

    def update() -> tuple[float, float]:
        wall = cpu = 0.0
        for i in range(iters):
            buf.sample(num_items=B, beta=BETA, n_step=1)  # RLlib updates its last sample only
            t0, c0 = time.perf_counter(), time.process_time()
            buf.update_priorities(tds[i])
            wall += time.perf_counter() - t0
            cpu += time.process_time() - c0
        return wall, cpu

    t = C.time_repeats(update, args.repeats)
    C.emit(C.record("per.update", "rllib", n=iters * B, timing=t, unit="items/s"))


if __name__ == "__main__":
    main()
