"""Shared scaffolding for the replay-buffer tests: one episode factory and the loop reference.

Not named ``conftest``: ``tests/conftest.py`` is imported as the module ``conftest`` and other
test files do ``from conftest import ...``; a second ``conftest`` would replace it in
``sys.modules``. The test files here import this module by name (``from buffer_helpers import
...``), which works because pytest's default ``prepend`` import mode puts this folder on
``sys.path`` before it imports a test module from it.

* ``make_episode(...)`` -- a seeded random episode; every option a buffer test needs.
* ``ref`` -- ``reference.py`` (plain-Python-loop reference semantics), loaded once by path under
  the name ``buffers_reference`` so it cannot clash with any other ``reference`` module.
* ``RecordingSampler`` -- a ``Uniform`` sampler that also keeps the set of valid starts it was
  told about through ``on_add``/``on_evict`` (to check those hooks against the buffer).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from offline_prelearner.episodes.episode import Episode
from offline_prelearner.replay.samplers import Uniform

__all__ = ["RecordingSampler", "make_episode", "ref"]


def _load_reference() -> Any:
    spec = importlib.util.spec_from_file_location(
        "buffers_reference", Path(__file__).with_name("reference.py")
    )
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


ref = _load_reference()


def make_episode(
    eid: Any,
    length: int,
    end: str = "terminated",
    seed: int | None = 0,
    t_started: int = 0,
    obs0: np.ndarray | None = None,
    *,
    done: bool | None = None,
    agent: Any = None,
    module: Any = None,
    obs_shape: Sequence[int] = (2,),
    n_actions: int = 3,
    reward_dtype: Any = np.float64,
    logp: Any = None,
) -> Episode:
    """An episode of ``length`` steps drawn from ``np.random.default_rng(seed)``.

    The draws are always, in this order: observations ``[length + 1, *obs_shape]`` (standard
    normal, as float32), actions ``[length]`` (integers in ``[0, n_actions)``), rewards
    ``[length]`` (standard normal, cast to ``reward_dtype``) and, only when ``logp`` is a dtype,
    an extra ``logp`` column ``[length]`` (standard normal, cast to ``logp``). So the same
    arguments always give the same data, and options that add no draw leave the rest unchanged.

    ``seed=None`` seeds with ``hash(eid) % 2**32`` (a non-negative int id is its own seed).
    ``end`` is ``"terminated"``, ``"truncated"`` or anything else for an unfinished episode;
    ``done`` (when given) overrides it: ``True`` terminated, ``False`` unfinished. ``obs0``
    replaces the first observation after the draws (to continue a fragment's last
    observation). ``agent``/``module`` are the episode's ``agent_id``/``module_id``.
    """
    rng = np.random.default_rng(hash(eid) % 2**32 if seed is None else seed)
    obs = rng.standard_normal((length + 1, *obs_shape)).astype(np.float32)
    if obs0 is not None:
        obs[0] = obs0
    actions = rng.integers(0, n_actions, length)
    rewards = rng.standard_normal(length).astype(reward_dtype)
    extras = {"logp": rng.standard_normal(length).astype(logp)} if logp is not None else None
    if done is not None:
        end = "terminated" if done else "open"
    return Episode(
        id=eid,
        observations=obs,
        actions=actions,
        rewards=rewards,
        terminated=end == "terminated",
        truncated=end == "truncated",
        agent_id=agent,
        module_id=module,
        t_started=t_started,
        extras=extras,
    )


class RecordingSampler(Uniform):
    """A Uniform that tracks the set of valid starts through on_add / on_evict only."""

    def __init__(self) -> None:
        super().__init__()
        self.held: set[int] = set()

    def on_add(self, storage: Any, slots: np.ndarray) -> None:
        s = set(slots.tolist())
        assert not s & self.held, "a slot was added twice without an eviction"
        self.held |= s

    def on_evict(self, storage: Any, slots: np.ndarray) -> None:
        self.held -= set(slots.tolist())

    def __repr__(self) -> str:
        return "RecordingSampler()"
