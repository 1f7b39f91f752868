"""Replay benchmarks: add, uniform 1-/3-step, sequences, frame stacks, memory per timestep;
mix-in, multi-agent and reservoir buffers.

    python benchmarks/bench_replay.py [--timesteps 1000000] [--pixels 100000] [--no-rllib]
                                      [--new-only]

``--new-only`` runs only the mix-in / multi-agent / reservoir workloads (which have no RLlib
counterpart here).

Prints one JSON line per measurement: ``name``, ``impl``, ``throughput`` (+ ``unit``), and where
it applies ``peak_mb`` (tracemalloc peak while adding) or ``bytes_per_timestep``. When the RLlib
venv's python exists (``$RLLIB_PYTHON``, else ``bin/python`` of ``$OFFLINE_PRELEARNER_RLLIB_VENV``,
default ``<repo>/.bench/rllib-venv``: ``benchmarks/setup_rllib.sh`` builds it), the same workloads
run on RLlib's EpisodeReplayBuffer in a subprocess (``rllib_replay.py``) and ``ratio`` lines follow.
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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rllib_replay import _rate, synthetic_cartpole, synthetic_pixels

from offline_prelearner.episodes.episode import Episode
from offline_prelearner.replay import (
    EpisodeReplayBuffer,
    MixInReplayBuffer,
    MultiAgentEpisodeReplayBuffer,
    Reservoir,
)
from offline_prelearner.replay.units import FrameStack, NStep, Sequence, Transition

RLLIB_PYTHON = os.environ.get("RLLIB_PYTHON") or str(
    Path(
        os.environ.get("OFFLINE_PRELEARNER_RLLIB_VENV")
        or Path(__file__).resolve().parent.parent / ".bench" / "rllib-venv"
    )
    / "bin"
    / "python"
)
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


def mixin(timesteps: int, new_steps: int = 128, ratio: float = 0.5) -> Rates:
    """Mix-in B=256 from a full buffer: each cycle adds one new episode of ``new_steps`` steps
    and samples (all ``new_steps`` + as many replayed at ratio 0.5). The cycle is timed whole:
    every add changes the table, so the sample after it re-indexes the valid starts."""
    eps = [to_episode(d) for d in synthetic_cartpole(timesteps)]
    buf = MixInReplayBuffer(timesteps + len(eps), replay_ratio=ratio, seed=0)
    buf.add(eps)
    buf.sample()  # everything so far was new
    del eps
    rng = np.random.default_rng(1)
    obs = rng.standard_normal((new_steps + 1, 4)).astype(np.float32)
    act, rew = rng.integers(0, 2, new_steps), np.ones(new_steps)
    count = iter(range(10**9))
    per_call = new_steps + round(new_steps * ratio / (1 - ratio))

    def cycle() -> None:
        ep = Episode(
            id=f"new{next(count)}", observations=obs, actions=act, rewards=rew, terminated=True
        )
        buf.add(ep)
        b = buf.sample()
        assert len(b) == per_call

    wall, cpu = _rate(cycle, per_call, min_seconds=3.0, max_calls=100_000)
    t0 = time.perf_counter()
    for _ in range(200):
        buf.add(Episode(id=f"x{next(count)}", observations=obs, actions=act, rewards=rew))
    add_ms = (time.perf_counter() - t0) / 200 * 1e3
    emit(
        name=f"mixin_add{new_steps}_sample_B{per_call}",
        impl="ours",
        throughput=wall,
        cpu_throughput=cpu,
        unit="samples/s",
        cycle_ms=per_call / wall * 1e3,
        add_ms=add_ms,
        held_timesteps=len(buf),
    )
    return {"mixin_B256": (wall, cpu)}


def multi_agent(timesteps: int) -> Rates:
    """Two modules (one agent each, the same env episodes), ``timesteps`` in total; independent
    and lockstep B=256 (rows per module), and the lockstep index rebuild after an add."""
    half = [to_episode(d) for d in synthetic_cartpole(timesteps // 2)]
    eps = []
    for e in half:
        for agent in ("a0", "a1"):
            eps.append(
                Episode(
                    id=e.id,
                    observations=e.observations,
                    actions=e.actions,
                    rewards=e.rewards,
                    terminated=True,
                    agent_id=agent,
                    module_id=f"module_{agent}",
                )
            )
    got: Rates = {}
    cap = timesteps // 2 + len(half) + 1000
    for sampling in ("independent", "lockstep"):
        buf = MultiAgentEpisodeReplayBuffer(cap, sampling=sampling, seed=0)
        t0 = time.perf_counter()
        buf.add(eps)
        add_s = time.perf_counter() - t0
        rebuild_s = None
        if sampling == "lockstep":
            t0 = time.perf_counter()
            buf.sample(256)  # first call builds the union index
            rebuild_s = time.perf_counter() - t0
        mab = buf.sample(256)
        rows = mab.agent_steps()
        wall, cpu = _rate(lambda b=buf: b.sample(256), rows, min_seconds=3.0, max_calls=100_000)
        got[f"multiagent_2modules_{sampling}_B256"] = (wall, cpu)
        emit(
            name=f"multiagent_2modules_{sampling}_B256",
            impl="ours",
            throughput=wall,
            cpu_throughput=cpu,
            unit="rows/s",
            rows_per_call=rows,
            env_steps_per_s=wall / rows * 256,
            add_timesteps_per_s=timesteps / add_s,
            index_rebuild_ms=None if rebuild_s is None else rebuild_s * 1e3,
        )
    return got


def reservoir(timesteps: int, fraction: float = 0.1) -> Rates:
    """Reservoir add of ``timesteps`` CartPole steps into a buffer holding ``fraction`` of them,
    in batches of 1000 episodes (as a streaming job would)."""
    eps = [to_episode(d) for d in synthetic_cartpole(timesteps)]
    cap = int(timesteps * fraction)
    buf = EpisodeReplayBuffer(cap, eviction=Reservoir(seed=0), seed=0)
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(0, len(eps), 1000):
        buf.add(eps[i : i + 1000])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    s = buf.stats()
    assert s["timesteps_added"] + s["timesteps_rejected"] == timesteps, s
    emit(
        name=f"reservoir_add_{timesteps}_cap{cap}",
        impl="ours",
        throughput=timesteps / wall,
        cpu_throughput=timesteps / max(cpu, 1e-9),
        unit="timesteps/s",
        admitted=s["timesteps_added"],
        held=s["timesteps_held"],
        compactions=s["compactions"],
    )
    return {"reservoir_add": (timesteps / wall, timesteps / max(cpu, 1e-9))}


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
    p.add_argument("--new-only", action="store_true", help="mix-in, multi-agent, reservoir only")
    args = p.parse_args()
    if not args.new_only:
        mine = ours(args.timesteps, args.pixels)
    mixin(args.timesteps)
    multi_agent(args.timesteps)
    reservoir(args.timesteps)
    if args.new_only:
        return
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
