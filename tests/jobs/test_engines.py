"""The in-process engine and the Ray engine write the same output, row for row, on every dataset
the repo ships and every file RLlib 2.60 wrote (``../shared/data``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from conftest import REPO

from offline_prelearner.config import PreLearnerConfig
from offline_prelearner.jobs.batch.batch_job import choose_engine, run_pipeline
from offline_prelearner.jobs.batch.plan import plan_units

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SHIPPED = [
    "datasets/cartpole-v1/rows",
    "datasets/cartpole-v1/episodes",
    "datasets/cartpole-v1-heuristic/rows",
]
SHARED = [
    ("cartpole-v1_rows_uncompressed.parquet", {}),
    ("cartpole-v1_rows_compressed.parquet", {"legacy_pickle": True}),
    ("cartpole-v1_episodes_msgpack.parquet", {}),
    ("cartpole-v1_old_stack_json_uncompressed.json", {}),
    ("cartpole-v1_old_stack_json_compressed.json", {"legacy_pickle": True}),
]
MODES = {
    "sample_all_n3": {"sample_all": True, "n_step": 3},
    "replay": {"n_step": [1, 3], "train_batch_size": 64, "batch_size": 700, "seed": 7},
}


def _both(path: Path, updates: dict[str, Any], tmp: Path) -> list[dict[str, Any]]:
    cfg = PreLearnerConfig().with_updates(updates)
    outs = []
    for engine in ("local", "ray"):
        res = run_pipeline(path, cfg, out_dir=tmp / engine, engine=engine)
        assert res.stats["engine"] == engine and res.stats["rows_balance"]
        outs.append(json.loads((tmp / engine / "_manifest.json").read_text()))
    local, ray = (pq.read_table(tmp / e / "samples") for e in ("local", "ray"))
    assert local.num_rows > 0 and local.equals(ray)  # row for row, column for column
    return outs


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("dataset", SHIPPED)
def test_engines_agree_on_the_shipped_datasets(
    ray_local: Any, tmp_path: Path, dataset: str, mode: str
) -> None:
    local, ray = _both(REPO / dataset, MODES[mode], tmp_path)
    assert local["files"] == ray["files"]  # names, rows, bytes and sha256


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize(("name", "extra"), SHARED, ids=[n for n, _ in SHARED])
def test_engines_agree_on_rllib_recorded_files(
    ray_local: Any, shared_data: Path, tmp_path: Path, name: str, extra: dict[str, Any], mode: str
) -> None:
    local, ray = _both(shared_data / name, {**MODES[mode], **extra}, tmp_path)
    assert local["files"] == ray["files"]


def test_auto_is_local_for_small_inputs_and_ray_for_big_or_clustered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = PreLearnerConfig()
    files = sorted(str(p) for p in (REPO / SHIPPED[0]).glob("*.parquet"))
    plan = plan_units(files, cfg.with_updates({"format": "rows"}))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert choose_engine("auto", cfg, plan) == "local"
    assert choose_engine("auto", cfg.with_updates({"address": "auto"}), plan) == "ray"
    monkeypatch.setattr("offline_prelearner.jobs.batch.batch_job.LOCAL_ENGINE_MAX_BYTES", 1000)
    assert choose_engine("auto", cfg, plan) == "ray"
    assert choose_engine("local", cfg.with_updates({"address": "auto"}), plan) == "local"
