"""Two learners fed from one stream: ``op.split_learner_batches`` (Ray Data's streaming_split).

Run from the repository root::

    python examples/two_learners.py

The learner stream over the shipped CartPole data (every 3-step transition once per epoch,
``sample_all``) is split in two shares; each share goes to its own learner thread, and the two
learners train one linear Q-function (features: obs, obs**2, 1) together: each takes SGD steps
on its own batches and applies them to the shared weights (asynchronous data parallelism, as
in Hogwild). The shares are picklable: a Ray task, actor or Ray Train worker can read one the
same way. The greedy policy then plays CartPole-v1 next to a random policy.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import gymnasium as gym
import numpy as np

import offline_prelearner as op

DATA = Path(__file__).resolve().parents[1] / "datasets" / "cartpole-v1" / "rows"
GAMMA, LR, STEPS_PER_BATCH, MINIBATCH, TARGET_EVERY = 0.95, 0.05, 150, 256, 100


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


def learner(share, q: dict, lock: threading.Lock, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for batch in share:
        b = batch["default_policy"]
        x, x_next, a = features(b["obs"]), features(b["new_obs"]), b["actions"]
        q["rows"][share.index] += len(a)
        for _ in range(STEPS_PER_BATCH):
            i = rng.integers(len(a), size=MINIBATCH)
            bootstrap = (1.0 - b["terminateds"][i]) * (x_next[i] @ q["target"].T).max(axis=1)
            target = b["rewards"][i] + GAMMA ** b["n_step"][i] * bootstrap
            with lock:  # this learner's gradient step, applied to the shared weights
                td = target - (x[i] * q["w"][a[i]]).sum(axis=1)
                q["w"] += LR * np.eye(2)[a[i]].T @ (x[i] * td[:, None]) / len(i)
                q["losses"].append(float(np.mean(td**2)))
                if len(q["losses"]) % TARGET_EVERY == 0:
                    q["target"] = q["w"].copy()


def main() -> int:
    # sample_all: every 3-step transition once; each share yields batches of 256 rows.
    config = op.PreLearnerConfig().with_updates({"n_step": 3, "sample_all": True})
    shares = op.split_learner_batches(DATA, config, num_learners=2, batch_rows=256)
    w = np.zeros((2, 9))  # one weight vector per action, shared by both learners
    q = {"w": w, "target": w.copy(), "losses": [], "rows": [0, 0]}
    lock = threading.Lock()
    threads = [threading.Thread(target=learner, args=(s, q, lock, s.index)) for s in shares]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    losses = q["losses"]
    print(f"rows per learner {q['rows']}  total {sum(q['rows'])}  SGD steps {len(losses)}")
    print(f"loss first 20 steps {np.mean(losses[:20]):.4f}  last 100 {np.mean(losses[-100:]):.4f}")
    rng = np.random.default_rng(0)
    greedy = evaluate(lambda o: int(np.argmax(q["w"] @ features(o[None])[0])))
    random = evaluate(lambda o: int(rng.integers(2)))
    print(f"return greedy {greedy:.1f}  random {random:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
