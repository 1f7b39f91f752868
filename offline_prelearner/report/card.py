"""The dataset card: what the dataset says about itself, at the top of the page.

A Minari dataset's metadata leads (what ``minari show`` leads with: the dataset id, the
environment, the algorithm that collected it, its authors, its description, then the env spec's
entry point, step limit and reward threshold, the counts it declares and Minari's version); a
LeRobot dataset's ``meta/info.json`` as its reader describes it (``LeRobotReader.about``: version,
robot type, fps, cameras, tasks, declared counts); any format: the observation and action spaces
(declared ones as gymnasium writes them, else the shape and dtype read).
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from ..io.formats.minari.dataset import data_dir_of
from ..io.stores import join_path, locate
from .numbers import human

__all__ = ["LABELS", "card", "card_text"]

#: The card's keys, in the order shown, with their labels (keys not here are shown after
#: them, by their own name).
LABELS = {
    "dataset_id": "dataset id",
    "env_id": "environment",
    "algorithm": "algorithm",
    "author": "author",
    "author_email": "author email",
    "description": "description",
    "code_permalink": "code",
    "env_entry_point": "entry point",
    "max_episode_steps": "step limit",
    "reward_threshold": "reward threshold",
    "eval_env_id": "evaluation environment",
    "lerobot_version": "LeRobot version",
    "robot_type": "robot type",
    "fps": "frames per second",
    "cameras": "cameras",
    "tasks": "tasks",
    "total_episodes": "episodes declared",
    "total_steps": "steps declared",
    "total_frames": "frames declared",
    "data_format": "storage",
    "minari_version": "Minari version",
    "observation_space": "observation space",
    "action_space": "action space",
}

#: The longest space description shown (a wide Box's bounds are long).
SPACE_CHARS = 300


def _minari(files: list[str]) -> dict[str, Any]:
    """The card's Minari part from ``data/metadata.json`` (empty: not a Minari dataset)."""
    data_dir = data_dir_of(files[0]) if files else None
    if data_dir is None:
        return {}
    try:  # Python's json reads Minari's Infinity tokens
        meta = json.loads(locate(join_path(str(data_dir), "metadata.json")).read_bytes())
    except (OSError, ValueError):
        return {}
    if not isinstance(meta, dict):
        return {}

    def spec(key: str) -> dict[str, Any]:
        v = meta.get(key)
        try:
            out = json.loads(v) if isinstance(v, str) else v
        except ValueError:
            return {}
        return out if isinstance(out, dict) else {}

    env, eval_env = spec("env_spec"), spec("eval_env_spec")
    out = {
        "dataset_id": meta.get("dataset_id"),
        "env_id": env.get("id"),
        "algorithm": meta.get("algorithm_name"),
        "author": meta.get("author"),
        "author_email": meta.get("author_email"),
        "description": meta.get("description"),
        "code_permalink": meta.get("code_permalink"),
        "env_entry_point": env.get("entry_point"),
        "max_episode_steps": env.get("max_episode_steps"),
        "reward_threshold": env.get("reward_threshold"),
        "eval_env_id": eval_env.get("id") if eval_env.get("id") != env.get("id") else None,
        "total_episodes": meta.get("total_episodes"),
        "total_steps": meta.get("total_steps"),
        "data_format": meta.get("data_format"),
        "minari_version": meta.get("minari_version"),
    }
    return {k: v for k, v in out.items() if v not in (None, "", [])}


def _space(declared: Any, read: Any) -> str | None:
    """A declared space as gymnasium writes it, else the shape and dtype read (``inspect``'s
    ``{"shape", "dtype"}``, or one per leaf)."""
    if declared is not None:
        with np.printoptions(precision=4):  # a Box's bounds rounded as the page's numbers
            text = re.sub(r"\s+", " ", str(declared))  # and without numpy's padding
        return text if len(text) <= SPACE_CHARS else text[: SPACE_CHARS - 3] + "..."
    if not isinstance(read, dict):
        return None
    if "shape" in read:
        return f"{_shape(read)} (read; none declared)"
    leaves = ", ".join(f"{k}: {_shape(v)}" for k, v in read.items())
    return f"{leaves} (read; none declared)"


def _shape(leaf: dict[str, Any]) -> str:
    shape = tuple(leaf["shape"])
    return f"{leaf['dtype']} {'scalar' if shape == () else shape}"


def card(
    d: dict[str, Any], files: list[str], observation_space: Any, action_space: Any
) -> dict[str, Any]:
    """The dataset card.

    Args:
        d: ``inspect --json``'s dict (its ``dataset``: what a reader's metadata declares; its
            ``observation`` and ``action``: the shapes read).
        files: The data files read (a Minari dataset's metadata sits beside them).
        observation_space: The declared observation space, or None.
        action_space: The declared action space, or None.

    Returns:
        ``{key: value}`` in :data:`LABELS` order (JSON-able values; absent keys left out).
    """
    out = _minari(files)
    about = d.get("dataset")
    if isinstance(about, dict):
        out.update({k: v for k, v in about.items() if v not in (None, "", [], {})})
    spaces = {
        "observation_space": _space(observation_space, d.get("observation")),
        "action_space": _space(action_space, d.get("action")),
    }
    out.update({k: v for k, v in spaces.items() if v is not None})
    order = {k: i for i, k in enumerate(LABELS)}
    return dict(sorted(out.items(), key=lambda kv: order.get(kv[0], len(order))))


def card_text(key: str, value: Any) -> str:
    """A card value as the page shows it: numbers rounded, lists joined, cameras one by one
    (``observation.images.top (32x32x3, av1)``).

    Args:
        key: The card key.
        value: Its value.

    Returns:
        The text.
    """
    if key == "cameras" and isinstance(value, dict):
        parts = []
        for name, cam in value.items():
            cam = cam if isinstance(cam, dict) else {}
            shape = "x".join(map(str, cam.get("shape") or []))
            extra = ", ".join(str(x) for x in (shape, cam.get("codec")) if x)
            parts.append(f"{name} ({extra})" if extra else str(name))
        return "; ".join(parts)
    if isinstance(value, list | tuple):
        return ", ".join(card_text(key, v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {card_text(key, v)}" for k, v in value.items())
    return human(value)
