"""Plain-Python-loop reference implementations of the replay semantics, one step at a time.

Deliberately naive and independent of the vectorized code: lists, loops, one sample at a time.
The tests compare every vectorized result against these.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from offline_prelearner.episodes.episode import Episode


def nstep(ep: Episode, k: int, n: int, gamma: float) -> dict[str, Any]:
    """The n-step transition starting at step ``k``: the window stops at the episode's end."""
    steps = 0
    ret = 0.0
    discount = 1.0
    j = k
    while steps < n and j < len(ep):
        ret += discount * float(ep.rewards[j])
        discount *= gamma
        steps += 1
        j += 1
    reached_end = j == len(ep)
    return {
        "obs": ep.observations[k],
        "actions": ep.actions[k],
        "rewards": ret,
        "new_obs": ep.observations[j],
        "n_step": steps,
        "terminateds": bool(ep.terminated and reached_end),
        "truncateds": bool(ep.truncated and reached_end),
        "t": ep.t_started + k,
    }


def frames(ep: Episode, step: int, k: int) -> np.ndarray:
    """The ``k`` observations ending at ``step``, oldest first, repeating the first frame."""
    out = []
    for back in range(k - 1, -1, -1):
        i = step - back
        if i < 0:
            i = 0
        out.append(ep.observations[i])
    return np.stack(out)


def valid_count(length: int, done: bool, window: int) -> int:
    """Starts of an episode whose ``window`` forward steps are stored (all, if it is done)."""
    if done:
        return length
    count = 0
    for k in range(length):
        if k + window <= length:
            count += 1
    return count


def sequence(ep: Episode, k: int, length: int, burn_in: int) -> dict[str, Any]:
    """The window sampled at step ``k``: up to ``burn_in`` steps before it, ``length`` from it."""
    width = burn_in + length
    b = 0
    while b < burn_in and k - b - 1 >= 0:
        b += 1
    steps = []
    for p in range(width):
        s = k - b + p
        if p < b or (s < len(ep) and s < k + length):
            steps.append(s)
    obs = np.zeros((width, *ep.observations.shape[1:]), ep.observations.dtype)
    new_obs = np.zeros_like(obs)
    actions = np.zeros((width, *ep.actions.shape[1:]), ep.actions.dtype)
    rewards = np.zeros(width, ep.rewards.dtype)
    term = np.zeros(width, bool)
    trunc = np.zeros(width, bool)
    t = np.zeros(width, np.int64)
    loss = np.zeros(width, bool)
    for p, s in enumerate(steps):
        obs[p] = ep.observations[s]
        new_obs[p] = ep.observations[s + 1]
        actions[p] = ep.actions[s]
        rewards[p] = ep.rewards[s]
        term[p] = ep.terminated and s == len(ep) - 1
        trunc[p] = ep.truncated and s == len(ep) - 1
        t[p] = ep.t_started + s
        loss[p] = p >= b
    return {
        "obs": obs,
        "new_obs": new_obs,
        "actions": actions,
        "rewards": rewards,
        "terminateds": term,
        "truncateds": trunc,
        "t": t,
        "loss_mask": loss,
        "seq_lens": len(steps),
    }


def fifo_held(capacity: int, lengths: list[int]) -> list[int]:
    """Indices of the episodes a FIFO ring of ``capacity`` slots holds after adding episodes of
    these lengths in order (each needs ``length + 1`` contiguous slots; an episode that does not
    fit before the end starts again at slot 0). Simulated slot by slot."""
    owner: list[int | None] = [None] * capacity
    slots_of: dict[int, list[int]] = {}
    head = 0
    for i, n in enumerate(lengths):
        need = n + 1
        if need > capacity:
            raise ValueError("too long")
        if head + need > capacity:
            for s in range(head, capacity):
                _free(owner, slots_of, s)
            head = 0
        for s in range(head, head + need):
            _free(owner, slots_of, s)
            owner[s] = i
        slots_of[i] = list(range(head, head + need))
        head += need
    return sorted(slots_of)


def _free(owner: list[int | None], slots_of: dict[int, list[int]], s: int) -> None:
    o = owner[s]
    if o is not None and o in slots_of:
        for q in slots_of.pop(o):
            owner[q] = None
