"""What the RLlib benchmarks share (the RLlib venv runs them: ``benchmarks/setup_rllib.sh``)."""

from __future__ import annotations

from typing import Any

import numpy as np


def greedy_return(algo: Any, episodes: int = 5) -> float:
    """The mean return of the greedy policy of ``algo``'s local learner module on CartPole-v1,
    one episode per seed 100, 101, ...

    Args:
        algo: A built RLlib ``Algorithm`` with ``num_learners=0`` (its learner in the driver).
        episodes: How many episodes to average.

    Returns:
        The mean undiscounted return.
    """
    import gymnasium as gym
    import torch
    from ray.rllib.core.columns import Columns

    module = algo.learner_group._learner.module["default_policy"]
    env = gym.make("CartPole-v1")
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=100 + i)
        done, total = False, 0.0
        while not done:
            with torch.no_grad():
                out = module.forward_inference({Columns.OBS: torch.as_tensor(obs[None])})
            action = int(torch.argmax(out[Columns.ACTION_DIST_INPUTS][0]))
            obs, reward, term, trunc, _ = env.step(action)
            total += float(reward)
            done = term or trunc
        returns.append(total)
    return float(np.mean(returns))
