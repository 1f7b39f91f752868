"""Behaviour cloning from the batch job's stream, evaluated in gymnasium.

Streams every transition of the shipped heuristic CartPole dataset once (``sample_all``) from
``iter_learner_batches`` (Ray Data underneath), fits a logistic-regression policy in numpy, then
plays CartPole-v1 with it and with a random policy. Run from the repo root:

    python examples/behaviour_cloning.py
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np

import offline_prelearner as op

DATA = Path(__file__).resolve().parents[1] / "datasets/cartpole-v1-heuristic/rows"


def fit(obs: np.ndarray, actions: np.ndarray, epochs: int = 2000, lr: float = 2.0) -> np.ndarray:
    """Logistic regression (full-batch gradient descent) on standardised [obs, 1] -> P(action=1).

    Returns weights for the raw observation (the standardisation folded in).
    """
    mean, std = obs.mean(axis=0), obs.std(axis=0) + 1e-8
    x = np.hstack([(obs - mean) / std, np.ones((len(obs), 1))]).astype(np.float64)
    w = np.zeros(x.shape[1])
    for _ in range(epochs):
        p = 1.0 / (1.0 + np.exp(-x @ w))
        w -= lr * x.T @ (p - actions) / len(x)
    return np.append(w[:-1] / std, w[-1] - (w[:-1] * mean / std).sum())


def play(policy, episodes: int = 10, seed: int = 100) -> float:
    env = gym.make("CartPole-v1")
    returns = []
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        done, total = False, 0.0
        while not done:
            obs, r, term, trunc, _ = env.step(policy(obs))
            total += float(r)
            done = term or trunc
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def main() -> int:
    config = op.PreLearnerConfig().with_updates({"sample_all": True, "batch_size": 1000})
    obs, actions = [], []
    for batch in op.iter_learner_batches(DATA, config):
        sb = batch["default_policy"]
        obs.append(sb["obs"])
        actions.append(sb["actions"])
    x, y = np.concatenate(obs), np.concatenate(actions).astype(np.float64)
    w = fit(x, y)
    accuracy = float(((np.hstack([x, np.ones((len(x), 1))]) @ w > 0) == (y > 0.5)).mean())
    rng = np.random.default_rng(0)
    cloned = play(lambda o: int(np.append(o, 1.0) @ w > 0))
    random = play(lambda o: int(rng.integers(2)))
    print(f"transitions     {len(x)} (each once, from iter_learner_batches)")
    print(f"train accuracy  {accuracy:.3f}")
    print(f"return cloned   {cloned:.1f}")
    print(f"return random   {random:.1f}")
    return 0 if cloned > 3 * random else 1


if __name__ == "__main__":
    raise SystemExit(main())
