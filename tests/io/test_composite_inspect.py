"""``inspect`` and quarantine on composite observations (gymnasium Dict / Tuple, nested).

Real composite datasets: Parquet rows with struct ``obs`` / ``new_obs`` columns (as
``test_composite_obs`` writes them) and a Minari 0.5.4 dataset with nested Dict observations
(``fixtures/make_nested_minari``), read through the real CLI: each leaf's shape and dtype in
``--json`` and a line per leaf in the text summary; plain observations print as before.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fixtures.conftest import require_minari
from fixtures.make_nested_minari import LENGTHS, make_nested
from test_composite_obs import _episodes, _table
from test_minari_composite import minari_episodes

from offline_prelearner.cli import main
from offline_prelearner.episodes import observations as O
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.io.formats.rows.writer import TENSOR_EXTENSION_NAME, episodes_to_rows

GOAL = {
    "observation": ("float32", (4,)),
    "desired_goal": ("float64", (2,)),
    "achieved_goal": ("float64", (2,)),
}
GOAL_SPACE = gym.spaces.Dict(
    {
        "observation": gym.spaces.Box(-100.0, 100.0, (4,), np.float32),
        "desired_goal": gym.spaces.Box(-100.0, 100.0, (2,), np.float64),
        "achieved_goal": gym.spaces.Box(-100.0, 100.0, (2,), np.float64),
    }
)
LEAF_INFO = {
    "obs.achieved_goal": {"shape": [2], "dtype": "float64"},
    "obs.desired_goal": {"shape": [2], "dtype": "float64"},
    "obs.observation": {"shape": [4], "dtype": "float32"},
}


def write_goal_rows(path: Path, lengths: list[int], seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Goal-conditioned episodes as Parquet rows with struct obs / new_obs; returns the leaves."""
    eps = _episodes(GOAL, lengths, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(_table(GOAL, eps), path)
    return eps


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def inspect_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run(capsys, "inspect", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def leaf_array(table: pa.Table, name: str) -> np.ndarray:
    """A column back as ``[rows, *shape]``: a Ray tensor column by its field metadata's shape."""
    field = table.schema.field(name)
    meta = field.metadata or {}
    values = table.column(name).combine_chunks()
    if meta.get(b"ARROW:extension:name") != TENSOR_EXTENSION_NAME:
        return values.to_numpy(zero_copy_only=False)
    shape = tuple(json.loads(meta[b"ARROW:extension:metadata"]))
    return values.values.to_numpy(zero_copy_only=False).reshape(len(values), *shape)


# inspect ------------------------------------------------------------------------------------------


def test_inspect_reports_each_leaf_of_struct_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_goal_rows(tmp_path / "data" / "part-0.parquet", [3, 5, 2])
    d = inspect_json(capsys, str(tmp_path / "data"))
    assert d["observation"] == LEAF_INFO
    assert list(d["observation"]) == sorted(LEAF_INFO)
    assert d["episodes"] == 3 and d["rows"] == 10 and d["rows_balance"]
    assert d["action"] == {"shape": [], "dtype": "int64"}

    code, out, err = run(capsys, "inspect", str(tmp_path / "data"))
    assert code == 0, err
    lines = out.splitlines()
    for name, info in LEAF_INFO.items():  # a line per leaf: its name, shape and dtype
        (line,) = [ln for ln in lines if name in ln]
        assert f"shape {info['shape']}" in line and f"dtype {info['dtype']}" in line
    assert "3 leaves (composite)" in out
    assert any(ln.strip().startswith("action {") for ln in lines)


def test_plain_observations_are_reported_as_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ep = Episode(
        id="a",
        observations=np.zeros((4, 3), np.float32),
        actions=np.zeros(3, np.int64),
        rewards=np.ones(3),
        terminated=True,
    )
    pq.write_table(episodes_to_rows([ep]), tmp_path / "p.parquet")
    d = inspect_json(capsys, str(tmp_path / "p.parquet"))
    assert d["observation"] == {"shape": [3], "dtype": "float32"}
    code, out, _ = run(capsys, "inspect", str(tmp_path / "p.parquet"))
    assert code == 0
    assert "observation {'shape': [3], 'dtype': 'float32'}   action {" in out


@pytest.mark.parametrize("backend", ["hdf5", "parquet"])
def test_inspect_reports_each_leaf_of_a_minari_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], backend: str
) -> None:
    require_minari()
    data = make_nested(tmp_path, backend)
    d = inspect_json(capsys, str(data), "--format", "minari")
    (first, *_) = minari_episodes(data)  # the oracle: Minari's own episodes
    want = {
        f"obs.{p}": {"shape": list(v.shape[1:]), "dtype": str(v.dtype)}
        for p, v in sorted(O.flatten(first.observations).items())
    }
    assert d["observation"] == want
    assert set(want) == {"obs.goal.id", "obs.goal.pos", "obs.pair.0", "obs.pair.1", "obs.pixels"}
    assert want["obs.pixels"] == {"shape": [32, 32, 3], "dtype": "uint8"}
    assert d["episodes"] == len(LENGTHS) and d["timesteps"] == sum(LENGTHS) and d["rows_balance"]
    code, out, err = run(capsys, "inspect", str(data), "--format", "minari")
    assert code == 0, err
    assert "5 leaves (composite)" in out
    assert any("obs.pixels" in ln and "shape [32, 32, 3]" in ln for ln in out.splitlines())


def test_a_minari_leaf_out_of_its_space_is_quarantined_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Minari reader refuses it (its input rows are quarantined as they came)."""
    require_minari()
    data = make_nested(tmp_path, "parquet", "nested/bad-v0", out_of_space={3: ("goal.pos", 2)})
    qdir = tmp_path / "q"
    d = inspect_json(
        capsys,
        str(data),
        "--format",
        "minari",
        "--on-invalid",
        "quarantine",
        "--quarantine-dir",
        str(qdir),
    )
    assert d["rejected"] == {"out_of_space": LENGTHS[3]} and d["rows_balance"]
    assert d["episodes"] == len(LENGTHS) - 1 and "obs.goal.pos" in d["observation"]
    q = pq.read_table(d["quarantine_file"])
    assert set(q.column("_reject_reason").to_pylist()) == {"out_of_space"}
