"""Replay shards (Ray actors, the Ape-X design) against one in-process prioritized buffer.

Workloads (bench names), on the standard CartPole rows (``cartpole_rows``, 1,000,003 steps):

* ``shards.add.S{1,2,4}``        -- ``ShardedReplayBuffer.add`` of every episode, in chunks of
  about 4096 steps held as ``EpisodeColumns`` (what the rows reader gives a feeder), then
  ``flush``; steps/s into 1, 2, 4 prioritized shards (each a Ray actor in its own process);
* ``shards.add.S2.from_objects`` -- the same chunks as Episode objects (the client groups them
  into columns, :func:`~offline_prelearner.replay.replay_buffer.as_columns`);
* ``shards.add.S2.pickled_objects`` -- Episode objects sent as they are (what sending columns
  saves);
* ``inproc.add``                 -- ``PrioritizedEpisodeReplayBuffer.add`` of the same
  column chunks;
* ``inproc.sample_update``       -- ``batch = buf.sample(256)`` then ``buf.update_priorities(
  batch["indices"], td)``, repeated, on a PrioritizedEpisodeReplayBuffer holding all the data
  in this process; samples/s;
* ``shards.sample_update.S2.prefetch{0,1}`` -- the same loop on 2 shards (then ``flush``),
  without and with one sample round prefetched;
* ``*.learner``                  -- the same loops with a simulated learner step between sample
  and update (``--learner-ms``, default 5, a sleep: a GPU step leaves the CPU free), where
  prefetching hides the round trip;
* ``shards.sample.S2``           -- ``sample(256)`` alone.

Lines carry ``maxrss_mb`` (this process) and, for shard runs, ``shard_maxrss_mb`` (each actor's
resident-set high-water mark). RLlib has no equivalent (its Ape-X replay actors serve online
EnvRunners, not offline data), so there is no RLlib side and no ratio; the in-process buffer is the
reference (``vs_inproc``).

Usage: ``python benchmarks/bench_shards.py [--data DIR] [--quick] [--repeats K]``
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _common as C  # noqa: E402

B = 256
CHUNK = 4096  # steps per add call, about one feeder batch


def load_chunks(data: Path, limit: int | None) -> list[list[Any]]:
    """The rows as validated episodes (in-process, untimed), in chunks of about CHUNK steps."""
    from offline_prelearner.prelearner import OfflinePreLearner

    pre = OfflinePreLearner(format="rows", seed=0)
    episodes: list[Any] = []
    for _, table in C.limited_tables(C.parquet_files(data / "cartpole_rows"), limit):
        episodes += pre.validate(pre.map_to_episodes(table)).episodes
    chunks, cur, steps = [], [], 0
    for ep in episodes:
        cur.append(ep)
        steps += len(ep)
        if steps >= CHUNK:
            chunks.append(cur)
            cur, steps = [], 0
    return [*chunks, cur] if cur else chunks


def _actor_rss(actor: Any) -> float:
    import ray

    def rss(_self: Any) -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

    return round(float(ray.get(actor.__ray_call__.remote(rss))), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    C.add_common_args(parser)
    parser.add_argument("--iters", type=int, default=None, help="sample/update rounds (400)")
    parser.add_argument(
        "--learner-ms", type=float, default=5.0, help="simulated learner step (sleep), ms"
    )
    args = parser.parse_args()
    data = C.data_dir(args.data)
    repeats = args.repeats or (1 if args.quick else 3)
    iters = args.iters or (50 if args.quick else 400)
    learner = args.learner_ms / 1000.0

    import ray

    from offline_prelearner.config import PreLearnerConfig
    from offline_prelearner.episodes.episode_columns import EpisodeColumns
    from offline_prelearner.replay.prioritized import PrioritizedEpisodeReplayBuffer
    from offline_prelearner.replay.samplers.prioritized import Prioritized
    from offline_prelearner.replay.shards import ShardedReplayBuffer
    from offline_prelearner.replay.shards.routing import shard_of

    C.log("loading episodes")
    chunks = load_chunks(data, 100_000 if args.quick else None)
    col_chunks = [EpisodeColumns.from_episodes(c) for c in chunks]
    steps = sum(len(e) for c in chunks for e in c)
    n_eps = sum(len(c) for c in chunks)
    capacity = steps + n_eps + 4096
    cfg = PreLearnerConfig().with_updates(
        {"buffer.kind": "prioritized", "buffer.capacity": capacity, "seed": 0}
    )
    common = {"digest": C.dataset_digest(data), "timesteps": steps, "episodes": n_eps}
    ray.init(include_dashboard=False, log_to_driver=False)
    tds = np.random.default_rng(1).standard_t(3, (iters, B))
    C.emit(
        {
            "bench": "shards",
            "impl": "rllib",
            "skipped": "RLlib has no sharded replay for offline data (its Ape-X replay actors "
            "serve online EnvRunners); no ratio. Reference: the in-process buffer (vs_inproc).",
        }
    )

    def inproc() -> PrioritizedEpisodeReplayBuffer:
        return PrioritizedEpisodeReplayBuffer(capacity, Prioritized(0.6, 0.4), seed=0)

    def time_add(add: Any, fresh: Any) -> C.Timing:
        def run() -> tuple[float, float]:
            target = fresh()
            t0, c0 = time.perf_counter(), time.process_time()
            add(target)
            elapsed = time.perf_counter() - t0, time.process_time() - c0
            if isinstance(target, ShardedReplayBuffer):
                target.close()
            return elapsed

        return C.time_repeats(run, repeats, warmup=0)

    def fill(buf: Any, objects: bool = False) -> None:
        for c, cols in zip(chunks, col_chunks, strict=True):
            if objects:
                buf.add(c)
            elif isinstance(buf, ShardedReplayBuffer):
                buf.add(cols)
            else:
                buf.add(cols)
        if isinstance(buf, ShardedReplayBuffer):
            buf.flush()

    C.log(f"in-process add: {steps} steps")
    t_in = time_add(fill, inproc)
    C.emit(C.record("inproc.add", "ours", n=steps, timing=t_in, unit="steps/s", **common))
    for s in (1, 2, 4):
        C.log(f"add into {s} shards")
        t = time_add(fill, lambda s=s: ShardedReplayBuffer(cfg, s))
        vs = round(t_in.median / t.median, 2)
        line = C.record(f"shards.add.S{s}", "ours", n=steps, timing=t, unit="steps/s", **common)
        C.emit({**line, "vs_inproc": vs})

    C.log("add into 2 shards from Episode objects")
    t = time_add(lambda sb: fill(sb, objects=True), lambda: ShardedReplayBuffer(cfg, 2))
    name = "shards.add.S2.from_objects"
    C.emit(C.record(name, "ours", n=steps, timing=t, unit="steps/s", **common))

    def pickled_objects(sb: Any) -> None:  # Episode objects sent as they are
        pending = []
        for c in chunks:
            shard = shard_of([e.id for e in c], sb.num_shards)
            for i, actor in enumerate(sb.actors):
                pending.append(
                    actor.add.remote([e for e, k in zip(c, shard, strict=True) if k == i])
                )
            if len(pending) > 8:
                ray.wait(pending, num_returns=len(pending) - 4)
        ray.get(pending)

    C.log("add into 2 shards as pickled Episode objects")
    t = time_add(pickled_objects, lambda: ShardedReplayBuffer(cfg, 2))
    name = "shards.add.S2.pickled_objects"
    C.emit(C.record(name, "ours", n=steps, timing=t, unit="steps/s", **common))

    def loop(buf: Any, update: bool = True, learner_s: float = 0.0) -> None:
        for i in range(iters):
            batch = buf.sample(B)
            if learner_s:
                time.sleep(learner_s)  # a learner step that leaves the CPU free (a GPU step)
            if update:
                buf.update_priorities(batch["indices"], tds[i])
        if isinstance(buf, ShardedReplayBuffer):
            buf.flush()

    def measure(name: str, buf: Any, **kw: Any) -> C.Timing:
        t = C.time_repeats(lambda: loop(buf, **kw), repeats)
        mem = C.measure_peak(lambda: loop(buf, **kw)) if kw.get("update", True) else None
        line = C.record(
            name, "ours", n=iters * B, timing=t, unit="samples/s", memory=mem, batch_size=B,
            learner_ms=1000 * kw.get("learner_s", 0.0), **common,
        )  # fmt: skip
        if isinstance(buf, ShardedReplayBuffer):
            line["prefetch"] = buf.prefetch
            line["shard_maxrss_mb"] = [_actor_rss(a) for a in buf.actors]
            line["vs_inproc"] = round(base[kw.get("learner_s", 0.0)] / t.median, 3)
        C.emit(line)
        return t

    inproc_buf = inproc()
    fill(inproc_buf)
    C.log(f"in-process sample+update: {iters} x B={B}")
    base = {0.0: measure("inproc.sample_update", inproc_buf).median}
    base[learner] = measure("inproc.sample_update.learner", inproc_buf, learner_s=learner).median
    del inproc_buf
    sb = ShardedReplayBuffer(cfg, 2)
    fill(sb)
    for prefetch in (0, 1):
        sb.prefetch = prefetch
        C.log(f"2 shards, prefetch {prefetch}: sample+update {iters} x B={B}")
        measure(f"shards.sample_update.S2.prefetch{prefetch}", sb)
        measure(f"shards.sample_update.S2.prefetch{prefetch}.learner", sb, learner_s=learner)
    sb.prefetch = 0
    measure("shards.sample.S2", sb, update=False)
    C.log(f"client counters: {sb.counters}")
    sb.close()


if __name__ == "__main__":
    main()
