"""RLlib's EpisodeReplayBuffer on the workloads of ``bench_replay.py``, for side-by-side ratios.

Run by RLlib's own interpreter (``.bench/rllib-venv/bin/python benchmarks/rllib_replay.py``: the
venv ``benchmarks/setup_rllib.sh`` builds, or ``$RLLIB_PYTHON``);
``bench_replay.py`` does that itself when that interpreter exists. Prints one JSON line per
workload. The synthetic episodes come from :func:`synthetic_cartpole`, which ``bench_replay.py``
imports too, so both sides see identical data. Nothing here imports offline_prelearner.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np


def synthetic_cartpole(timesteps: int, seed: int = 0) -> list[dict]:
    """CartPole-like episodes as plain arrays: lengths ~22 on average, obs float32[4], int64
    actions, float64 rewards of 1.0, terminated (an uuid-like hex id each)."""
    rng = np.random.default_rng(seed)
    out, total, i = [], 0, 0
    while total < timesteps:
        n = int(min(rng.geometric(1 / 22), timesteps - total))
        out.append(
            {
                "id": f"{i:032x}",
                "obs": rng.standard_normal((n + 1, 4)).astype(np.float32),
                "actions": rng.integers(0, 2, n),
                "rewards": np.ones(n),
                "terminated": True,
            }
        )
        total += n
        i += 1
    return out


def synthetic_pixels(timesteps: int, seed: int = 0, length: int = 500) -> list[dict]:
    """Atari-like episodes of 84x84 uint8 frames (single frames, not stacked)."""
    rng = np.random.default_rng(seed)
    out, total, i = [], 0, 0
    while total < timesteps:
        n = min(length, timesteps - total)
        out.append(
            {
                "id": f"px{i:030x}",
                "obs": rng.integers(0, 255, (n + 1, 84, 84), dtype=np.uint8),
                "actions": rng.integers(0, 6, n),
                "rewards": rng.standard_normal(n),
                "terminated": False,
                "truncated": True,
            }
        )
        total += n
        i += 1
    return out


def _rate(
    fn, items_per_call: int, min_seconds: float = 2.0, max_calls: int = 10_000
) -> tuple[float, float]:
    """Items per second of wall-clock time and per second of this process's CPU time (the
    latter is the steadier figure on a machine shared with other jobs)."""
    fn()  # warm up
    calls, t0, c0 = 0, time.perf_counter(), time.process_time()
    while calls < max_calls and (calls == 0 or time.perf_counter() - t0 < min_seconds):
        fn()
        calls += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return items_per_call * calls / wall, items_per_call * calls / max(cpu, 1e-9)


def main() -> None:
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode
    from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer

    timesteps = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000

    def to_rllib(eps: list[dict]) -> list:
        return [
            SingleAgentEpisode(
                id_=e["id"],
                observations=list(e["obs"]),
                actions=list(e["actions"]),
                rewards=list(e["rewards"]),
                terminated=e.get("terminated", False),
                truncated=e.get("truncated", False),
                len_lookback_buffer=0,
            ).to_numpy()
            for e in eps
        ]

    def emit(name: str, value: float | tuple[float, float], unit: str) -> None:
        wall, cpu = value if isinstance(value, tuple) else (value, None)
        rec = {
            "name": name,
            "impl": "rllib",
            "throughput": wall,
            "cpu_throughput": cpu,
            "unit": unit,
        }
        print(json.dumps(rec), flush=True)

    eps = to_rllib(synthetic_cartpole(timesteps))
    buf = EpisodeReplayBuffer(capacity=timesteps + 10)
    t0 = time.perf_counter()
    buf.add(eps)
    emit("add_cartpole", timesteps / (time.perf_counter() - t0), "timesteps/s")
    for n in (1, 3):
        emit(
            f"uniform_{n}step_B256",
            _rate(
                lambda n=n: buf.sample(
                    batch_size_B=256, n_step=n, gamma=0.99, sample_episodes=True
                ),
                256,
                max_calls=50,
            ),
            "samples/s",
        )
    emit(
        "sequences_B32_T20",
        _rate(lambda: buf.sample(batch_size_B=32, batch_length_T=20), 32, max_calls=200),
        "sequences/s",
    )


if __name__ == "__main__":
    main()
