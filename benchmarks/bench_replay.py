"""Replay benchmarks: add, uniform 1-/3-step, sequences, frame stacks, memory per timestep.

    python benchmarks/bench_replay.py [--timesteps 1000000] [--pixels 100000] [--no-rllib]

Prints one JSON line per measurement: ``name``, ``impl``, ``throughput`` (+ ``unit``), and where
it applies ``peak_mb`` (tracemalloc peak while adding) or ``bytes_per_timestep``. When
``/work/rllib-venv/bin/python`` exists (override with ``RLLIB_PYTHON``), the same workloads run on
RLlib's EpisodeReplayBuffer in a subprocess (``rllib_replay.py``) and ``ratio`` lines follow.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rllib_replay import _rate, synthetic_cartpole, synthetic_pixels

from offline_prelearner.buffers import EpisodeReplayBuffer
from offline_prelearner.episode import Episode
from offline_prelearner.samplers import FrameStack, NStep, Sequence, Transition

RLLIB_PYTHON = os.environ.get("RLLIB_PYTHON", "/work/rllib-venv/bin/python")
TARGETS = {  # samples/s this machine must reach (the bar)
    "uniform_1step_B256": 2.9e6,
    "uniform_3step_B256": 2.0e6,
    "sequences_B32_T20": 5.0e4,
    "framestack4_84x84_B32": 1.0e5,
}


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def to_episode(d: dict) -> Episode:
    return Episode(
        id=d["id"],
        observations=d["obs"],
        actions=d["actions"],
        rewards=d["rewards"],
        terminated=d.get("terminated", False),
        truncated=d.get("truncated", False),
    )


def raw_bytes(eps: list[Episode]) -> int:
    """What the episodes themselves hold: observations (T + 1), actions, rewards, the id."""
    return sum(
        e.observations.nbytes + e.actions.nbytes + e.rewards.nbytes + len(str(e.id)) for e in eps
    )


def sample_rate(buf: EpisodeReplayBuffer, batch: int) -> tuple[float, float]:
    return _rate(lambda: buf.sample(batch), batch, min_seconds=3.0, max_calls=100_000)


Rates = dict[str, tuple[float, float | None]]  # name -> (wall-clock rate, CPU-time rate)


def ours(timesteps: int, pixels: int) -> Rates:
    got: Rates = {}
    eps = [to_episode(d) for d in synthetic_cartpole(timesteps)]
    raw = raw_bytes(eps)

    t0 = time.perf_counter()
    buf = EpisodeReplayBuffer(timesteps + len(eps), unit=Transition(), seed=0)
    buf.add(eps)
    dt = time.perf_counter() - t0
    held = buf.stats()
    assert held["timesteps_held"] == timesteps, held
    got["add_cartpole"] = (timesteps / dt, None)
    tracemalloc.start()  # a second, traced fill: tracing slows Python, so it is not timed
    EpisodeReplayBuffer(timesteps + len(eps), seed=0).add(eps)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    emit(
        name="add_cartpole",
        impl="ours",
        throughput=timesteps / dt,
        unit="timesteps/s",
        peak_mb=peak / 2**20,
    )
    ids = sum(sys.getsizeof(e.id) for e in eps)  # the id strings the table keeps alive
    emit(
        name="memory_cartpole",
        impl="ours",
        bytes_per_timestep=(buf.storage.nbytes() + ids) / timesteps,
        raw_bytes_per_timestep=raw / timesteps,
        ratio_to_raw=(buf.storage.nbytes() + ids) / raw,
    )

    for name, unit, batch in (
        ("uniform_1step_B256", Transition(), 256),
        ("uniform_3step_B256", NStep(3, 0.99), 256),
        ("uniform_nstep_1to3_B256", NStep((1, 3), 0.99), 256),
        ("sequences_B32_T20", Sequence(20), 32),
    ):
        buf.unit = unit
        buf._valid = None
        got[name] = wall, cpu = sample_rate(buf, batch)
        emit(
            name=name,
            impl="ours",
            throughput=wall,
            cpu_throughput=cpu,
            unit="sequences/s" if "seq" in name else "samples/s",
            target=TARGETS.get(name),
        )
    del buf, eps

    # Pixels: single 84x84 frames stored once, stacked at sample time.
    length = 500
    n_eps = -(-pixels // length)
    px = [to_episode(d) for d in synthetic_pixels(pixels, length=length)]
    t0 = time.perf_counter()
    pbuf = EpisodeReplayBuffer(pixels + n_eps, unit=FrameStack(4), seed=0)
    pbuf.add(px)
    del px
    emit(
        name="add_pixels_84x84",
        impl="ours",
        throughput=pixels / (time.perf_counter() - t0),
        unit="timesteps/s",
    )
    pbytes = pbuf.storage.nbytes()
    emit(
        name="memory_pixels_84x84",
        impl="ours",
        bytes_per_timestep=pbytes / pixels,
        ratio_to_single_frames=pbytes / (pixels * 84 * 84),
    )
    got["framestack4_84x84_B32"] = wall, cpu = sample_rate(pbuf, 32)
    emit(
        name="framestack4_84x84_B32",
        impl="ours",
        throughput=wall,
        cpu_throughput=cpu,
        unit="samples/s",
        target=TARGETS["framestack4_84x84_B32"],
    )
    return got


def rllib(timesteps: int) -> Rates:
    script = Path(__file__).resolve().parent / "rllib_replay.py"
    proc = subprocess.run(
        [RLLIB_PYTHON, str(script), str(timesteps)],
        capture_output=True,
        text=True,
        check=False,
        timeout=3600,
    )
    got: Rates = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            print(line, flush=True)
            got[rec["name"]] = (rec["throughput"], rec.get("cpu_throughput"))
    if proc.returncode != 0:
        emit(name="rllib_error", impl="rllib", error=proc.stderr[-2000:])
    return got


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--timesteps", type=int, default=1_000_000)
    p.add_argument("--pixels", type=int, default=100_000)
    p.add_argument("--no-rllib", action="store_true")
    args = p.parse_args()
    mine = ours(args.timesteps, args.pixels)
    if args.no_rllib or not Path(RLLIB_PYTHON).exists():
        return
    theirs = rllib(args.timesteps)
    for name, (wall, cpu) in theirs.items():
        if name in mine and wall > 0:
            ours_wall, ours_cpu = mine[name]
            emit(
                name=name,
                impl="ratio",
                ours_over_rllib=ours_wall / wall,
                cpu_ours_over_rllib=ours_cpu / cpu if ours_cpu and cpu else None,
            )


if __name__ == "__main__":
    main()
