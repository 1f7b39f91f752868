"""RLlib's ``OfflinePreLearner`` contract, run by RLlib's own interpreter.

``tests/test_rllib.py`` runs this folder with the pytest of the venv ``benchmarks/setup_rllib.sh``
builds (RLlib 2.60, torch, this checkout editable). Under the project's venv (no RLlib) the folder
collects nothing.

The data is written by RLlib itself, once per session: its offline recorder (a PPO env runner
with ``offline_data(output=...)``, ``output_compress_columns=[]``) writes CartPole-v1 as rows and
as msgpack episodes, and its
old-stack ``JsonWriter`` writes ``SampleBatch`` lines with ``infos``, plain and with ``obs`` /
``new_obs`` compressed.
"""

from __future__ import annotations

import glob
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("torch") is None or importlib.util.find_spec("tree") is None:
    collect_ignore_glob = ["test_*.py"]  # not RLlib's venv: nothing to run here


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """RLlib, torch and gymnasium warn while building algorithms and modules (deprecations,
    dtype notes on RLlib's own data): not this contract's subject, so not errors here."""
    for item in items:
        item.add_marker(pytest.mark.filterwarnings("ignore"))


@dataclass(frozen=True)
class Recordings:
    """What RLlib wrote: folders of Parquet files and old-stack JSON files."""

    rows: Path
    episodes: Path
    json_plain: Path
    json_packed: Path


def _record(out: Path, episodes: bool) -> None:
    from ray.rllib.algorithms.ppo import PPOConfig

    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0, batch_mode="complete_episodes")
        .training(train_batch_size_per_learner=400, minibatch_size=100, num_epochs=1)
        .offline_data(
            output=str(out),
            output_write_episodes=episodes,
            output_max_rows_per_file=10 if episodes else 200,
            output_write_remaining_data=True,
            output_compress_columns=[],  # RLlib packs obs/new_obs by default: plain here
        )
        .debugging(seed=0)
    )
    algo = config.build_algo()
    algo.train()
    algo.stop()


def _write_json(out: Path, compress: list[str]) -> None:
    """Twelve CartPole episodes of a random policy, one SampleBatch line each, through RLlib's
    old-stack JsonWriter (its columns, ``infos`` included, as its rollout workers wrote them)."""
    import gymnasium as gym
    import numpy as np
    from ray.rllib.offline.json_writer import JsonWriter
    from ray.rllib.policy.sample_batch import SampleBatch

    writer = JsonWriter(str(out), compress_columns=compress)
    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(0)
    for e in range(12):
        obs, _ = env.reset(seed=e)
        cols: dict[str, list[Any]] = {k: [] for k in ("obs", "new_obs", "actions", "rewards")}
        cols.update({k: [] for k in ("terminateds", "truncateds", "infos", "t")})
        done = False
        while not done:
            action = int(rng.integers(2))
            nxt, reward, term, trunc, info = env.step(action)
            for k, v in zip(
                ("obs", "new_obs", "actions", "rewards", "terminateds", "truncateds", "infos"),
                (obs, nxt, action, reward, term, trunc, info),
                strict=True,
            ):
                cols[k].append(v)
            cols["t"].append(len(cols["t"]))
            obs, done = nxt, term or trunc
        n = len(cols["t"])
        batch = SampleBatch(
            {
                **{k: np.asarray(v) for k, v in cols.items() if k != "infos"},
                "infos": np.array(cols["infos"], dtype=object),
                "eps_id": np.full(n, 1000 + e),
                "agent_index": np.zeros(n, np.int64),
                "unroll_id": np.full(n, e),
                "action_prob": np.full(n, 0.5, np.float32),
                "action_logp": np.full(n, np.log(0.5), np.float32),
            }
        )
        writer.write(batch)


@pytest.fixture(scope="session")
def ray_session() -> Any:
    """Ray for the session: a 2-CPU instance of its own, or, run inside ``tests/rllib_loop.py``'s
    grouped process (``contract`` case), the Ray that process already runs (left running)."""
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture(scope="session")
def recordings(ray_session: Any, tmp_path_factory: pytest.TempPathFactory) -> Recordings:
    root = tmp_path_factory.mktemp("rllib-written")
    _record(root / "rows", episodes=False)
    _record(root / "episodes", episodes=True)
    _write_json(root / "json-plain", [])
    _write_json(root / "json-packed", ["obs", "new_obs"])
    for name in ("rows", "episodes", "json-plain", "json-packed"):
        assert glob.glob(os.path.join(root / name, "**", "*.*"), recursive=True), name
    return Recordings(root / "rows", root / "episodes", root / "json-plain", root / "json-packed")
