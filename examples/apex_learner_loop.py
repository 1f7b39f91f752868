"""Ape-X style replay across processes: a Ray Data job feeds two prioritized replay shards (Ray
actors) while a numpy learner samples from them and sends its TD errors back.

Run from the repository root::

    python examples/apex_learner_loop.py

Compare ``learner_loop.py``, where the buffer lives in the learner's process. Here the feed
(reading, validation, de-duplication) runs in Ray Data actors and the replay in shard actors;
the learner holds only a client. It starts as soon as ``learning_starts`` timesteps have arrived
and keeps sampling while the feed goes on. Importance weights are global: what one buffer
holding both shards' data would give.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import ray

import offline_prelearner as op

DATA = Path(__file__).resolve().parents[1] / "datasets" / "cartpole-v1" / "rows"
GAMMA, LR, STEPS, TARGET_EVERY, B = 0.95, 0.05, 1000, 100, 256


def features(obs: np.ndarray) -> np.ndarray:
    return np.concatenate([obs, obs**2, np.ones((len(obs), 1), obs.dtype)], axis=1)


def main() -> int:
    ray.init(include_dashboard=False, log_to_driver=False)
    config = op.PreLearnerConfig().with_updates(
        {"n_step": 3, "gamma": GAMMA, "seed": 0, "buffer.kind": "prioritized"}
        | {"learning_starts": 1000, "batch_size": 1000}
    )
    shards = op.ShardedReplayBuffer(config, num_shards=2)
    feed = op.start_feed(DATA, config, shards)  # Ray Data job, in the background
    w = np.zeros((2, 9))  # a linear Q: one weight vector per action
    w_target, losses, waits = w.copy(), [], 0
    while len(losses) < STEPS:
        try:
            batch = shards.sample(B)
        except op.EmptyBufferError:  # fewer than learning_starts timesteps in the shards yet
            waits += 1
            time.sleep(0.05)
            continue
        if not losses:
            learn_start = time.perf_counter()
            during_feed = not feed.done()
        x, x_next, a = features(batch["obs"]), features(batch["new_obs"]), batch["actions"]
        bootstrap = (1.0 - batch["terminateds"]) * (x_next @ w_target.T).max(axis=1)
        target = batch["rewards"] + GAMMA ** batch["n_step"] * bootstrap
        td = target - (x * w[a]).sum(axis=1)
        weighted = batch["weights"] * td
        w += LR * np.eye(2)[a].T @ (x * weighted[:, None]) / len(td)  # one SGD step
        shards.update_priorities(batch["indices"], td)  # asynchronous
        losses.append(float(np.mean(weighted * td)))
        if len(losses) % TARGET_EVERY == 0:
            w_target = w.copy()
    seconds = time.perf_counter() - learn_start
    fed = feed.result()
    shards.flush()
    stats = shards.stats()
    led = fed.ledger
    print(f"rows read {led.rows_in}  kept {led.rows_kept}  balanced {fed.balanced()}")
    print(
        f"feed seconds {fed.wall_seconds}  learner waited {waits} times, then started "
        f"{'during' if during_feed else 'after'} the feed"
    )
    held = [s["timesteps_held"] for s in stats["shards"]]
    print(f"timesteps per shard {held}  total {stats['timesteps_held']}")
    print(f"samples per second {STEPS * B / seconds:,.0f}  ({STEPS} batches of {B})")
    print(f"loss first 20 steps {np.mean(losses[:20]):.4f}  last 100 {np.mean(losses[-100:]):.4f}")
    print(
        f"priority updates applied {stats['priority_updates']}  "
        f"stale {stats['priority_updates_stale']}"
    )
    shards.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
