"""A learner loop in one process: prioritized n-step replay feeding a tiny numpy Q-learner.

Run from the repository root::

    python examples/learner_loop.py

The shipped CartPole data was recorded by a *random* policy, so behaviour cloning would only
copy it. Instead a linear Q-function (features: obs, obs**2, 1) learns from 3-step transitions
with importance weights, and sends its TD errors back with ``update_priorities``. Priority
feedback needs the buffer in the learner's process; that is why this loop calls the prelearner
directly instead of ``iter_learner_batches`` (whose prelearners live in Ray actors). Afterwards
the greedy policy plays CartPole-v1 in gymnasium next to a random policy.
"""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pyarrow.parquet as pq

import offline_prelearner as op

DATA = Path(__file__).resolve().parents[1] / "datasets" / "cartpole-v1" / "rows"
GAMMA, LR, STEPS, TARGET_EVERY = 0.95, 0.05, 3000, 100


def features(obs: np.ndarray) -> np.ndarray:
    return np.concatenate([obs, obs**2, np.ones((len(obs), 1), obs.dtype)], axis=1)


def evaluate(policy, episodes: int = 20) -> float:
    env, total = gym.make("CartPole-v1"), 0.0
    for seed in range(episodes):
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy(obs))
            total += float(reward)
            done = terminated or truncated
    return total / episodes


def main() -> int:
    prelearner = op.OfflinePreLearner(
        n_step=3, gamma=GAMMA, train_batch_size=256, seed=0, **{"buffer.kind": "prioritized"}
    )
    for path in sorted(DATA.glob("*.parquet")):  # fill the buffer; each batch also yields samples
        for _ in prelearner(pq.read_table(path)):
            pass
    module = prelearner.config.modules.default_module
    w = np.zeros((2, 9))  # one weight vector per action
    w_target = w.copy()
    losses = []
    for step in range(STEPS):
        batch = prelearner.run_connectors(prelearner.sample())[module]
        x, x_next, a = features(batch["obs"]), features(batch["new_obs"]), batch["actions"]
        bootstrap = (1.0 - batch["terminateds"]) * (x_next @ w_target.T).max(axis=1)
        target = batch["rewards"] + GAMMA ** batch["n_step"] * bootstrap
        td = target - (x * w[a]).sum(axis=1)
        weighted = batch["weights"] * td
        w += LR * np.eye(2)[a].T @ (x * weighted[:, None]) / len(td)  # one SGD step
        prelearner.update_priorities(batch["indices"], td, module_id=module)
        losses.append(float(np.mean(weighted * td)))
        if step % TARGET_EVERY == TARGET_EVERY - 1:
            w_target = w.copy()
        if step % 500 == 0 or step == STEPS - 1:
            print(f"step {step:5d}  weighted TD loss {losses[-1]:.4f}")
    rng = np.random.default_rng(0)
    greedy = evaluate(lambda o: int(np.argmax(w @ features(o[None])[0])))
    random = evaluate(lambda o: int(rng.integers(2)))
    sampler = prelearner.buffers[module].sampler
    print(f"loss first 20 steps {np.mean(losses[:20]):.4f}  last 100 {np.mean(losses[-100:]):.4f}")
    print(f"priority updates applied {sampler.updates_applied}  stale {sampler.updates_stale}")
    print(f"return greedy {greedy:.1f}  random {random:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
