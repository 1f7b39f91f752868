"""The batch job on a real local Ray instance: stats.json, sample_all, caps, CLI, grouping."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from offline_prelearner.batch import MultiAgentBatch
from offline_prelearner.cli import main
from offline_prelearner.config import PreLearnerConfig
from offline_prelearner.pipeline import iter_learner_batches, run_pipeline

pytestmark = [pytest.mark.ray, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
ROWS = REPO / "datasets/cartpole-v1/rows"
EPISODES = REPO / "datasets/cartpole-v1/episodes"


def _samples(out: Path) -> dict[str, np.ndarray]:
    table = pq.read_table(out / "samples")
    return {c: table.column(c).to_numpy() for c in ("eps_id", "t", "rewards", "n_step")}


def test_batch_job_writes_samples_and_balanced_stats(ray_local: Any, tmp_path: Path) -> None:
    cfg = PreLearnerConfig().with_updates(
        {"n_step": 3, "train_batch_size": 100, "batch_size": 1000}
    )
    res = run_pipeline(ROWS, cfg, out_dir=tmp_path)
    st = json.loads((tmp_path / "stats.json").read_text())
    assert st == json.loads(json.dumps(res.stats))
    assert st["rows_in"] == 5000 and st["rows_balance"] and st["rows_rejected"] == {}
    assert st["files_read"] == 5 and st["format"] == "rows"
    assert st["samples_written"] == 100 * st["batches"] and st["batches"] >= 5
    table = pq.read_table(tmp_path / "samples")
    ma = MultiAgentBatch.from_rows(table)
    sb = ma["default_policy"]
    assert len(sb) == st["samples_written"] and sb["obs"].shape[1:] == (4,)
    assert (sb["n_step"] <= 3).all()


def test_sample_all_writes_each_transition_once(ray_local: Any, tmp_path: Path) -> None:
    cfg = PreLearnerConfig().with_updates({"sample_all": True, "batch_size": 700})
    res = run_pipeline(ROWS, cfg, out_dir=tmp_path)
    s = _samples(tmp_path)
    assert res.stats["samples_written"] == 5000 == len(s["eps_id"])
    assert len(set(zip(s["eps_id"], s["t"], strict=True))) == 5000
    assert res.stats["pending_fragments"] == 0


def test_num_samples_caps_the_output(ray_local: Any, tmp_path: Path) -> None:
    cfg = PreLearnerConfig().with_updates({"num_samples": 300, "train_batch_size": 256})
    res = run_pipeline(ROWS, cfg, out_dir=tmp_path)
    assert res.stats["samples_written"] == 300


def test_grouped_by_episode_with_several_actors(ray_local: Any, tmp_path: Path) -> None:
    cfg = PreLearnerConfig().with_updates(
        {"group_by_episode": True, "concurrency": 1, "sample_all": True, "n_step": 2}
    )
    res = run_pipeline(ROWS, cfg, out_dir=tmp_path)
    s = _samples(tmp_path)
    assert len(set(zip(s["eps_id"], s["t"], strict=True))) == 5000
    assert res.stats["rows_in"] == 5000 and res.stats["rows_balance"]


def test_learner_iterates_batches_from_msgpack_episodes(ray_local: Any) -> None:
    cfg = PreLearnerConfig().with_updates({"format": "episodes", "train_batch_size": 64})
    batches = list(iter_learner_batches(EPISODES, cfg))
    assert batches and all(isinstance(b, MultiAgentBatch) for b in batches)
    assert sum(len(b["default_policy"]) for b in batches) % 64 == 0


def test_cli_process_with_set_values(ray_local: Any, tmp_path: Path, capsys) -> None:
    code = main(
        [
            "process",
            str(ROWS),
            "--out",
            str(tmp_path),
            "--set",
            "n_step=[1,3]",
            "--set",
            "gamma=0.5",
            "--set",
            "train_batch_size=50",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["rows_in"] == 5000 and out["rows_balance"]
    st = json.loads((tmp_path / "stats.json").read_text())
    assert st["config"]["sample"]["n_step"] == [1, 3] and st["config"]["sample"]["gamma"] == 0.5
    assert set(np.unique(_samples(tmp_path)["n_step"])) <= {1, 2, 3}


def test_cli_process_bad_set_is_a_clear_error(tmp_path: Path, capsys) -> None:
    code = main(["process", str(ROWS), "--out", str(tmp_path), "--set", "n_stepp=3"])
    assert code == 2 and "did you mean n_step" in capsys.readouterr().err
