"""D4RL-style HDF5 files with composite observations (``observations/<key>`` groups, nested, as
goal-conditioned sets store them): episodes with ``{leaf path: array}`` observations equal to a
plain per-episode reference built from the same arrays. Skips without h5py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from offline_prelearner.config import ReadConfig
from offline_prelearner.errors import EpisodeValidationError, SchemaError
from offline_prelearner.io.formats.d4rl.reader import D4RLReader
from offline_prelearner.io.sources import detect_format, read_table

h5py = pytest.importorskip("h5py")

LENGTHS = (4, 1, 6, 3)  # the last one is cut (no flag)
LEAVES = ("achieved_goal", "desired_goal", "observation", "robot.joints")


def episodes(rng: np.random.Generator) -> list[dict[str, Any]]:
    out = []
    for t in LENGTHS:
        obs = {
            "observation": rng.standard_normal((t + 1, 4)).astype(np.float32),
            "desired_goal": rng.standard_normal((t + 1, 2)).astype(np.float32),
            "achieved_goal": rng.standard_normal((t + 1, 2)).astype(np.float32),
            "robot.joints": rng.integers(0, 9, (t + 1, 3)).astype(np.int32),
        }
        out.append({"obs": obs, "act": rng.standard_normal((t, 2)).astype(np.float32)})
    return out


def write(path: Path, eps: list[dict[str, Any]], next_obs: bool = True) -> None:
    def put(group: Any, leaves: dict[str, np.ndarray]) -> None:
        for k, v in leaves.items():
            group[k.replace(".", "/")] = v

    n = sum(LENGTHS)
    with h5py.File(path, "w") as f:
        put(f.create_group("observations"),
            {k: np.concatenate([e["obs"][k][:-1] for e in eps]) for k in LEAVES})  # fmt: skip
        if next_obs:
            put(f.create_group("next_observations"),
                {k: np.concatenate([e["obs"][k][1:] for e in eps]) for k in LEAVES})  # fmt: skip
        f["actions"] = np.concatenate([e["act"] for e in eps])
        f["rewards"] = np.arange(n, dtype=np.float32)
        ends = np.cumsum(LENGTHS) - 1
        term, timeout = np.zeros(n, bool), np.zeros(n, bool)
        term[ends[0]] = timeout[ends[1]] = timeout[ends[2]] = True
        f["terminals"], f["timeouts"] = term, timeout
        f.create_group("infos")["qpos"] = np.zeros((n, 2))


def test_goal_conditioned_groups(tmp_path: Path) -> None:
    eps = episodes(np.random.default_rng(3))
    path = tmp_path / "goal.hdf5"
    write(path, eps)
    assert detect_format([str(path)]) == "d4rl"
    batch = D4RLReader().read(read_table(str(path)), str(path))
    got = batch.episodes
    assert [len(e) for e in got] == list(LENGTHS)
    assert [(e.terminated, e.truncated) for e in got] == [
        (True, False), (False, True), (False, True), (False, False)
    ]  # fmt: skip
    for mine, want in zip(got, eps, strict=True):
        assert isinstance(mine.observations, dict) and sorted(mine.observations) == list(LEAVES)
        for k in LEAVES:
            assert mine.observations[k].dtype == want["obs"][k].dtype
            np.testing.assert_array_equal(mine.observations[k], want["obs"][k], err_msg=k)
        np.testing.assert_array_equal(mine.actions, want["act"])
    assert batch.ledger.rows_in == sum(LENGTHS) and batch.ledger.balanced()


def test_without_next_observations(tmp_path: Path) -> None:
    """The last step of a truncated or open episode has no next obs in the file: dropped."""
    eps = episodes(np.random.default_rng(4))
    path = tmp_path / "goal.hdf5"
    write(path, eps, next_obs=False)
    batch = D4RLReader().read(read_table(str(path)), str(path))
    got = batch.episodes
    assert [len(e) for e in got] == [LENGTHS[0], LENGTHS[2] - 1, LENGTHS[3] - 1]
    for mine, want in zip(got, [eps[0], eps[2], eps[3]], strict=True):
        n = len(mine)
        for k in LEAVES:
            np.testing.assert_array_equal(mine.observations[k][:n], want["obs"][k][:n])
    assert batch.ledger.rows_rejected == {"next_obs_unknown": 3} and batch.ledger.balanced()


def test_one_leaf_discontinuous(tmp_path: Path) -> None:
    """next_observations disagree with the next row in one leaf only: the episode is refused."""
    eps = episodes(np.random.default_rng(5))
    path = tmp_path / "goal.hdf5"
    write(path, eps)
    with h5py.File(path, "a") as f:
        f["next_observations/desired_goal"][LENGTHS[0] + LENGTHS[1] + 2, 0] += 1.0
    table = read_table(str(path))
    with pytest.raises(EpisodeValidationError, match="differ"):
        D4RLReader().read(table, str(path))
    batch = D4RLReader(ReadConfig(format="d4rl", on_invalid="skip")).read(table, str(path))
    assert [len(e) for e in batch.episodes] == [LENGTHS[0], LENGTHS[1], LENGTHS[3]]
    assert batch.ledger.rows_rejected == {"discontinuous": LENGTHS[2]}


def test_leaf_rows_must_match(tmp_path: Path) -> None:
    eps = episodes(np.random.default_rng(6))
    path = tmp_path / "goal.hdf5"
    write(path, eps)
    with h5py.File(path, "a") as f:
        del f["observations/desired_goal"]
        f["observations/desired_goal"] = np.zeros((3, 2), np.float32)
    with pytest.raises(SchemaError, match=r"observations\.desired_goal") as info:
        read_table(str(path))
    assert info.value.where.file == str(path)


def test_a_key_with_a_dot_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "dots.hdf5"
    with h5py.File(path, "w") as f:
        f["observations/pos.x"] = np.zeros((3, 2), np.float32)
        f["actions"] = np.zeros((3, 1), np.float32)
        f["rewards"] = np.zeros(3, np.float32)
        f["terminals"] = np.array([0, 0, 1], bool)
    with pytest.raises(SchemaError, match="leaf path separator") as info:
        read_table(str(path))
    assert info.value.where.file == str(path)
    assert info.value.where.column == "observations.pos.x"
