"""Quarantine of composite episodes (gymnasium Dict / Tuple, nested) and the rows writer's leaf
columns.

A composite episode refused by validation is quarantined with one column per leaf
(``obs.<path>`` / ``new_obs.<path>``, as the prelearner's output names them, each leaf's space in
its field metadata when the observation space is known) and read back leaf by leaf; the counts in
``inspect`` balance.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_composite_inspect import GOAL, GOAL_SPACE, inspect_json, leaf_array
from test_composite_obs import _episodes, _table

from offline_prelearner.config import ReadConfig, ValidateConfig
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.episodes.ledger import Rejection
from offline_prelearner.errors import EpisodeValidationError, SchemaError, Where
from offline_prelearner.io.formats.rows.writer import episodes_to_rows
from offline_prelearner.io.leaf_spaces import leaf_spaces, read_leaf_space
from offline_prelearner.io.quarantine import write_quarantine
from offline_prelearner.jobs.inspection import inspect_path

# quarantine of composite episodes -----------------------------------------------------------------


def test_a_composite_episode_refused_by_validation_is_quarantined_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """NaN reward in one episode of struct rows: validation refuses the built episode."""
    eps = _episodes(GOAL, [3, 4, 2], seed=5)
    table = _table(GOAL, eps)
    rewards = table.column("rewards").to_numpy().copy()
    rewards[4] = np.nan  # episode e1's second step
    table = table.set_column(table.schema.get_field_index("rewards"), "rewards", pa.array(rewards))
    (tmp_path / "data").mkdir()
    pq.write_table(table, tmp_path / "data" / "part-0.parquet")
    qdir = tmp_path / "q"
    d = inspect_json(
        capsys,
        str(tmp_path / "data"),
        "--on-invalid",
        "quarantine",
        "--quarantine-dir",
        str(qdir),
    )
    assert d["rejected"] == {"nan_reward": 4} and d["rejected_episodes"] == {"nan_reward": 1}
    assert d["episodes"] == 2 and d["rows"] == 9 and d["rows_balance"]
    (f,) = d["per_file"]
    assert (f["rows_read"], f["rows_kept"], f["rows_rejected"]) == (9, 5, 4)
    assert Path(d["quarantine_file"]).parent == qdir
    q = pq.read_table(d["quarantine_file"])
    assert q.num_rows == 4 and set(q.column("eps_id").to_pylist()) == {"e1"}
    assert "obs" not in q.column_names and "new_obs" not in q.column_names
    for path, leaf in eps[1].items():
        np.testing.assert_array_equal(leaf_array(q, f"obs.{path}"), leaf[:-1], err_msg=path)
        np.testing.assert_array_equal(leaf_array(q, f"new_obs.{path}"), leaf[1:], err_msg=path)
        assert leaf_array(q, f"obs.{path}").dtype == leaf.dtype


@pytest.mark.parametrize("kind", ["leaf_out_of_space", "nan_leaf"])
def test_a_composite_episode_refused_by_leaf_checks_is_quarantined_with_its_leaves(
    tmp_path: Path, kind: str
) -> None:
    eps = _episodes(GOAL, [3, 5, 2, 4], seed=11)
    if kind == "leaf_out_of_space":
        eps[1]["desired_goal"][2, 1] = 500.0  # outside Box(-100, 100)
        reason = "out_of_space"
    else:
        eps[1]["observation"][5, 0] = np.nan  # the last observation (new_obs only)
        reason = "nan_obs"
    (tmp_path / "data").mkdir()
    pq.write_table(_table(GOAL, eps), tmp_path / "data" / "part-0.parquet")
    validate = ValidateConfig(check_finite_obs=True, observation_space=GOAL_SPACE)
    report = inspect_path(
        tmp_path / "data",
        ReadConfig(format="auto", on_invalid="quarantine"),  # the policy of both stages
        validate,
        quarantine_dir=tmp_path / "q",
    )
    d = report.to_dict()
    assert d["rejected"] == {reason: 5} and d["episodes"] == 3 and d["rows_balance"]
    assert sum(f["rows_kept"] + f["rows_rejected"] for f in d["per_file"]) == d["rows"] == 14
    assert d["quarantine_file"] is not None
    assert Path(d["quarantine_file"]).parent == tmp_path / "q"
    q = pq.read_table(d["quarantine_file"])
    assert q.num_rows == 5 and set(q.column("_reject_reason").to_pylist()) == {reason}
    spaces = leaf_spaces(GOAL_SPACE)
    for path, leaf in eps[1].items():
        for col, want in ((f"obs.{path}", leaf[:-1]), (f"new_obs.{path}", leaf[1:])):
            got = leaf_array(q, col)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want, err_msg=col)  # NaN equals NaN here
            assert read_leaf_space(q.schema.field(col)) == spaces[path], col
    whole = q.schema.metadata[b"observation_space"]
    assert json.loads(whole)["space"] == "dict"


def test_quarantine_without_a_space_still_writes_the_leaves(tmp_path: Path) -> None:
    leaves = _episodes(GOAL, [3], seed=2)[0]
    ep = Episode(id="x", observations=leaves, actions=np.zeros(3, np.int64), rewards=np.ones(3))
    err = EpisodeValidationError("not done", Where(episode_id="x"), reason="not_done")
    path = write_quarantine([Rejection(err, 3, None, ep)], tmp_path)
    assert path is not None
    q = pq.read_table(path)
    for p, leaf in leaves.items():
        np.testing.assert_array_equal(leaf_array(q, f"obs.{p}"), leaf[:-1])
        assert read_leaf_space(q.schema.field(f"obs.{p}")) is None


# the rows writer --------------------------------------------------------------------------------


def test_episodes_to_rows_writes_a_column_per_leaf_in_order() -> None:
    eps = [
        Episode(
            id=i,
            observations=leaves,
            actions=np.zeros(len(leaves["observation"]) - 1, np.int64),
            rewards=np.ones(len(leaves["observation"]) - 1),
            terminated=True,
        )
        for i, leaves in enumerate(_episodes(GOAL, [1, 4, 0, 2], seed=3))
    ]
    t = episodes_to_rows(eps)
    assert t.column_names[3:6] == ["obs.observation", "obs.desired_goal", "obs.achieved_goal"]
    assert t.num_rows == 7
    for path in GOAL:  # plain-loop reference: each episode's leaf but its last / first step
        want_obs = np.concatenate([e.observations[path][:-1] for e in eps])
        want_new = np.concatenate([e.observations[path][1:] for e in eps])
        np.testing.assert_array_equal(leaf_array(t, f"obs.{path}"), want_obs)
        np.testing.assert_array_equal(leaf_array(t, f"new_obs.{path}"), want_new)


def test_large_leaves_take_the_per_episode_path() -> None:
    rng = np.random.default_rng(0)
    eps = [
        Episode(
            id=k,
            observations={
                "pixels": rng.integers(0, 256, (n + 1, 64, 64, 3)).astype(np.uint8),
                "state": rng.normal(size=(n + 1, 2)),
            },
            actions=np.zeros(n, np.int64),
            rewards=np.ones(n),
            terminated=True,
        )
        for k, n in enumerate([2, 3])
    ]
    t = episodes_to_rows(eps)
    for path in ("pixels", "state"):
        want = np.concatenate([e.observations[path][1:] for e in eps])
        np.testing.assert_array_equal(leaf_array(t, f"new_obs.{path}"), want)


def test_plain_and_composite_episodes_are_refused_together() -> None:
    leaves = _episodes(GOAL, [2], seed=0)[0]
    comp = Episode(id="c", observations=leaves, actions=np.zeros(2, np.int64), rewards=np.ones(2))
    plain = Episode(
        id="p", observations=np.zeros((3, 4)), actions=np.zeros(2, np.int64), rewards=np.ones(2)
    )
    fewer = Episode(
        id="f",
        observations={"observation": leaves["observation"]},
        actions=np.zeros(2, np.int64),
        rewards=np.ones(2),
    )
    with pytest.raises(SchemaError, match="observation leaves") as info:
        episodes_to_rows([comp, plain])
    assert info.value.where.episode_id == "p"
    with pytest.raises(SchemaError, match="observation leaves") as info:
        episodes_to_rows([comp, fewer])
    assert info.value.where.episode_id == "f"
