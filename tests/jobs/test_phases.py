"""``stats["phases"]``: where a batch job's time went (plan, engine start, units, commit, stop).

Both engines, run as a library caller runs them (:func:`run_pipeline`): the five phases in
seconds, in ``stats.json`` as in the result, ``stats.json`` rewritten after the commit with the
commit's and the stop's seconds, the first three adding up to ``wall_seconds``; the local engine
starts nothing, the Ray engine's start is its own phase, and a library caller's Ray stays up.
The CLI's side (``--json``, a fresh Ray instance, the exit) is in ``test_fixed_cost.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from offline_prelearner.jobs.batch.batch_job import PHASES, run_pipeline

SHIPPED = REPO / "datasets" / "cartpole-v1-heuristic" / "rows"
CONFIG = {"sample_all": True}


def _check_phases(stats: dict[str, Any], out: Path) -> dict[str, float]:
    phases = stats["phases"]
    assert list(phases) == list(PHASES)
    assert all(isinstance(v, float) and v >= 0.0 for v in phases.values()), phases
    # plan + engine start + units is the job up to its accounting: wall_seconds, as before
    head = phases["plan"] + phases["engine_start"] + phases["units"]
    assert head == pytest.approx(stats["wall_seconds"], abs=0.005)
    assert phases["units"] > 0.0 and phases["commit"] > 0.0
    on_disk = json.loads((out / "stats.json").read_text())
    assert on_disk["phases"] == phases  # rewritten after the commit: commit and stop measured
    assert on_disk["wall_seconds"] == stats["wall_seconds"]  # the other keys as the commit wrote
    return phases


def test_local_engine_starts_nothing(tmp_path: Path) -> None:
    res = run_pipeline(SHIPPED, CONFIG, out_dir=tmp_path / "out", engine="local")
    phases = _check_phases(res.stats, tmp_path / "out")
    assert res.stats["engine"] == "local"
    assert phases["engine_start"] == 0.0 and phases["stop"] < 0.05


def test_dry_run_has_phases_too(tmp_path: Path) -> None:
    res = run_pipeline(SHIPPED, CONFIG, engine="local")
    assert list(res.stats["phases"]) == list(PHASES)
    assert res.stats["phases"]["commit"] is not None and res.stats["phases"]["stop"] is not None


@pytest.mark.ray
@pytest.mark.slow
def test_ray_engine_phases_and_a_library_callers_ray_stays_up(
    ray_local: Any, tmp_path: Path
) -> None:
    res = run_pipeline(SHIPPED, CONFIG, out_dir=tmp_path / "out", engine="ray")
    phases = _check_phases(res.stats, tmp_path / "out")
    assert res.stats["engine"] == "ray"
    # Ray was running (the fixture's): the engine's start is the units' tasks reaching a worker
    assert phases["engine_start"] > 0.0
    assert ray_local.is_initialized()  # a library caller's Ray is not let go of
    assert phases["stop"] < 0.05
    again = run_pipeline(SHIPPED, CONFIG, out_dir=tmp_path / "again", engine="ray")
    assert again.stats["samples_written"] == res.stats["samples_written"]
