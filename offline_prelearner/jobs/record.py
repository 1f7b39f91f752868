"""Recording a gymnasium environment into RLlib-compatible offline data.

``record_env`` steps an env with a random or heuristic policy and returns :class:`Episode` objects;
``write_recording`` writes them as new-stack rows Parquet (RLlib's recorder layout, plus ``t``) or
msgpack episodes (RLlib's ``output_write_episodes=True`` layout), split over several files the way
RLlib's recorder does. Stepping an env is inherently one Python call per step; everything after it
is columnar.
"""

from __future__ import annotations

import difflib
import math
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from ..episodes.episode import Episode
from ..errors import ConfigError
from ..io.fast_tensor import Layout

__all__ = ["HEURISTICS", "Recording", "record", "record_env", "write_recording"]

Policy = Callable[[np.ndarray, np.random.Generator], Any]


def _cartpole(obs: np.ndarray, rng: np.random.Generator) -> int:
    # Push toward the side the pole is falling to (angle plus a share of its angular velocity).
    return int(obs[2] + 0.5 * obs[3] > 0)


def _mountain_car(obs: np.ndarray, rng: np.random.Generator) -> int:
    return 2 if obs[1] >= 0 else 0  # accelerate along the current velocity


def _acrobot(obs: np.ndarray, rng: np.random.Generator) -> int:
    return 2 if obs[5] >= 0 else 0  # torque along the second joint's velocity


def _pendulum(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    _cos, sin, vel = obs
    return np.clip(np.array([-2.0 * sin - 0.5 * vel], dtype=np.float32), -2.0, 2.0)


#: Env id prefix -> a simple deterministic policy that does better than random.
HEURISTICS: dict[str, Policy] = {
    "CartPole": _cartpole,
    "MountainCar-": _mountain_car,
    "Acrobot": _acrobot,
    "Pendulum": _pendulum,
}


@dataclass
class Recording:
    """Episodes recorded from a Gymnasium environment, with its spaces and how they were made."""

    episodes: list[Episode]
    observation_space: gym.Space[Any]
    action_space: gym.Space[Any]
    env_id: str
    policy: str
    seed: int


def _policy(env_id: str, name: str, action_space: gym.Space[Any]) -> Policy:
    if name == "random":
        return lambda obs, rng: action_space.sample()
    if name == "heuristic":
        for prefix, fn in HEURISTICS.items():
            if env_id.startswith(prefix):
                return fn
        raise ConfigError(
            f"no heuristic policy for {env_id!r}; heuristics exist for "
            f"{sorted(HEURISTICS)}; use --policy random"
        )
    raise ConfigError(f"policy must be 'random' or 'heuristic', found {name!r}")


def _make(env_id: str) -> gym.Env[Any, Any]:
    """``gym.make(env_id)``; an id gymnasium cannot make is one line naming it (and, when it is not
    registered, the registered ids closest to it), not gymnasium's traceback."""
    try:
        return gym.make(env_id)
    except gym.error.UnregisteredEnv as e:
        close = _close_env_ids(env_id)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        if isinstance(e, gym.error.NamespaceNotFound):  # "... installed the package for ALE?"
            hint = f" ({e}){hint}"
        raise ConfigError(
            f"unknown gymnasium env {env_id!r}: not in gymnasium's registry{hint} (all ids: "
            "python -c 'import gymnasium; gymnasium.pprint_registry()')"
        ) from None
    except gym.error.Error as e:  # deprecated version, missing dependency ...
        raise ConfigError(f"cannot make gymnasium env {env_id!r}: {e}") from None


def _close_env_ids(env_id: str, n: int = 3) -> list[str]:
    """Registered ids spelled most like ``env_id``, case aside (``cartpole-v1`` -> CartPole-v1)."""
    ids = {i.lower(): i for i in gym.registry}
    return [ids[m] for m in difflib.get_close_matches(env_id.lower(), list(ids), n=n, cutoff=0.6)]


def record_env(env_id: str, steps: int, policy: str = "random", seed: int = 0) -> Recording:
    """Steps ``env_id`` for ``steps`` env steps; the episode cut by the step budget is truncated.

    Episode ids are deterministic in ``seed`` (uuid4-shaped hex strings like RLlib's).

    Args:
        env_id: A gymnasium id (``"CartPole-v1"``), made with ``gym.make``.
        steps: Env steps in all, over every episode (at least 1); the last episode is cut
            there and marked truncated unless it terminated on that step.
        policy: ``"random"`` (the action space's samples) or ``"heuristic"`` (a fixed rule
            from :data:`HEURISTICS`, for CartPole, MountainCar, Acrobot and Pendulum only).
        seed: Seeds the first reset, the action space and the episode ids; the same seed
            records the same episodes.

    Returns:
        The episodes, in the order played, with the env's spaces.

    Raises:
        ConfigError: ``steps`` below 1, an env gymnasium cannot make (naming the closest
            registered ids), or a policy that is unknown or has no heuristic for the env.
    """
    if steps < 1:
        raise ConfigError(f"steps must be >= 1, found {steps}")
    env = _make(env_id)
    try:  # closed however it ends (an unknown policy is refused after the env is made)
        env.action_space.seed(seed)
        act = _policy(env_id, policy, env.action_space)
        rng = np.random.default_rng(seed)
        id_rng = np.random.default_rng([seed, 1])
        episodes: list[Episode] = []
        obs, _ = env.reset(seed=seed)
        o, a, r = [obs], [], []
        done_steps = 0
        while done_steps < steps:
            action = act(obs, rng)
            obs, reward, terminated, truncated, _ = env.step(action)
            o.append(obs)
            a.append(action)
            r.append(reward)
            done_steps += 1
            cut = done_steps == steps
            if terminated or truncated or cut:
                episodes.append(
                    Episode(
                        id=uuid.UUID(bytes=id_rng.bytes(16), version=4).hex,
                        observations=np.stack(o),
                        actions=np.asarray(a),
                        rewards=np.asarray(r, dtype=np.float64),
                        terminated=bool(terminated),
                        truncated=bool(truncated) or (cut and not terminated),
                    )
                )
                if not cut:
                    obs, _ = env.reset()
                    o, a, r = [obs], [], []
    finally:
        env.close()
    return Recording(episodes, env.observation_space, env.action_space, env_id, policy, seed)


def write_recording(
    rec: Recording,
    out_dir: str | os.PathLike[str],
    fmt: str = "rows",
    rows_per_file: int = 0,
    layout: Layout = "rllib",
) -> list[str]:
    """Writes ``rec`` under ``out_dir`` as ``fmt`` ('rows' | 'episodes'); returns the files written.

    ``out_dir`` may be a store's prefix (``s3://bucket/prefix``): each file is one object.

    Args:
        rec: The recording (:func:`record_env`).
        out_dir: The folder (made if missing) or a store's prefix; files are named
            ``<env id, lowercase>-<fmt>-<k, 5 digits>.parquet`` and replace any of that name.
        fmt: ``"rows"`` (new-stack rows with ``t``) or ``"episodes"`` (msgpack episodes, one
            row each).
        rows_per_file: With ``"rows"``, > 0 splits the rows into files of that many rows,
            cutting through episodes as RLlib's recorder does (readers join them again); 0 (or
            below) writes one file. Episodes data is always one file (the value is not used).
        layout: How rows data's array columns are laid out: ``"rllib"`` (the default: a
            recording is a dataset RLlib may read) or ``"fast"`` (our readers only).

    Returns:
        The paths (or URIs) of the files written, in order.

    Raises:
        ConfigError: ``fmt`` is neither ``"rows"`` nor ``"episodes"``.
    """
    from ..io.formats.episodes.reader import episodes_to_table
    from ..io.formats.rows.writer import episodes_to_rows, write_parquet
    from ..io.stores import join_path, locate

    locate(out_dir).makedirs()  # a store's prefix needs none
    if fmt == "rows":
        table = episodes_to_rows(rec.episodes, with_t=True, layout=layout)
    elif fmt == "episodes":
        table = episodes_to_table(rec.episodes, rec.observation_space, rec.action_space)
    else:
        raise ConfigError(f"format must be 'rows' or 'episodes', found {fmt!r}")
    per_file = rows_per_file if fmt == "rows" and rows_per_file > 0 else table.num_rows
    n_files = max(1, math.ceil(table.num_rows / max(per_file, 1)))
    paths = []
    for k in range(n_files):
        name = f"{rec.env_id.lower()}-{fmt}-{k:05d}.parquet"
        path = join_path(os.fspath(out_dir), name)
        paths.append(write_parquet(table.slice(k * per_file, per_file), path))
    return paths


def record(
    env_id: str,
    steps: int,
    out: str | os.PathLike[str],
    *,
    fmt: str = "rows",
    policy: str = "random",
    seed: int = 0,
    rows_per_file: int = 0,
    layout: Layout = "rllib",
) -> dict[str, Any]:
    """Records ``steps`` env steps of ``env_id`` into ``out``: ``offline-prelearner record``.

    Args:
        env_id: A gymnasium id (``"CartPole-v1"``).
        steps: Env steps in all (at least 1); the last episode is cut there, truncated.
        out: The folder (made if missing) or a store's prefix (``s3://bucket/prefix``).
        fmt: ``"rows"`` (RLlib's recorder rows, plus ``t``) or ``"episodes"`` (msgpack
            episodes).
        policy: ``"random"`` or ``"heuristic"`` (see :func:`record_env`).
        seed: Seeds the env, the policy and the episode ids: the same seed records the same
            data.
        rows_per_file: With ``"rows"``, > 0 splits the rows into files of that many rows,
            cutting through episodes as RLlib's recorder does; 0: one file.
        layout: ``"rllib"`` (a dataset RLlib may read) or ``"fast"`` (our readers only).

    Returns:
        What ``record --json`` prints: ``env``, ``format``, ``policy``, ``seed``, ``steps``,
        ``episodes`` and ``files`` (the paths or URIs written).

    Raises:
        ConfigError: As :func:`record_env` and :func:`write_recording`.
    """
    rec = record_env(env_id, steps, policy=policy, seed=seed)
    files = write_recording(rec, out, fmt=fmt, rows_per_file=rows_per_file, layout=layout)
    return {
        "env": env_id,
        "format": fmt,
        "policy": policy,
        "seed": seed,
        "steps": sum(len(e) for e in rec.episodes),
        "episodes": len(rec.episodes),
        "files": files,
    }
