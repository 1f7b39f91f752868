"""The ``d4rl`` reader against D4RL-style HDF5 files (every quirk) and their ground truth.
Skips without h5py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fixtures import sessions
from fixtures.make_minari import D4RL_VARIANTS, D4RLCase, load_ground_truth

from offline_prelearner.config import ReadConfig, ValidateConfig
from offline_prelearner.episodes.ledger import EpisodeBatch
from offline_prelearner.errors import ConfigError, EpisodeValidationError, SchemaError
from offline_prelearner.io.formats.d4rl.reader import D4RLReader
from offline_prelearner.io.readers import make_reader
from offline_prelearner.io.sources import detect_format, read_table
from offline_prelearner.jobs.inspection import inspect_path


@pytest.fixture(scope="session")
def d4rl_cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, D4RLCase]:
    return sessions.d4rl_cases(tmp_path_factory)


def read(path: Path, **kw: object) -> EpisodeBatch:
    reader = make_reader(ReadConfig(format="d4rl", **kw))  # type: ignore[arg-type]
    return reader.read(read_table(str(path)), str(path))


def check_against_truth(batch: EpisodeBatch, truth_path: Path) -> None:
    meta, truth = load_ground_truth(truth_path)
    eps = batch.episodes
    assert len(eps) == len(truth)
    for k, (ours, want) in enumerate(zip(eps, truth, strict=True)):
        stem = Path(meta["file"]).stem
        assert ours.id == f"{stem}:{k}"
        t = len(want["rewards"])
        term = bool(want["terminations"][-1])
        known = bool(want["next_observations_known"][-1])
        n = t if known or term else t - 1  # no next obs for a truncation: its step is dropped
        assert len(ours) == n
        np.testing.assert_array_equal(ours.observations[:n], want["observations"][:n])
        np.testing.assert_array_equal(ours.actions, want["actions"][:n])
        np.testing.assert_array_equal(ours.rewards, want["rewards"][:n])
        if known:
            np.testing.assert_array_equal(ours.observations[-1], want["next_observations"][-1])
        open_end = meta["open_end"] and k == len(truth) - 1
        assert ours.terminated == term
        assert ours.truncated == (bool(want["truncations"][-1]) and not term and not open_end)
        assert ours.is_done != open_end  # the final unflagged episode: a not-done fragment
    assert batch.ledger.rows_in == meta["rows"] and batch.ledger.balanced()


@pytest.mark.parametrize("name", sorted(D4RL_VARIANTS))
def test_episodes_match_the_truth(d4rl_cases: dict[str, D4RLCase], name: str) -> None:
    case = d4rl_cases[name]
    limit = case.variant.get("max_episode_steps")
    check_against_truth(read(case.path, max_episode_steps=limit), case.truth)


def test_no_timeouts_without_the_limit_uses_next_observation_gaps(
    d4rl_cases: dict[str, D4RLCase],
) -> None:
    case = d4rl_cases["d4rl_no_timeouts"]
    reader = D4RLReader(ReadConfig(format="d4rl"))
    batch = reader.read(read_table(str(case.path)))
    check_against_truth(batch, case.truth)
    meta, _ = load_ground_truth(case.truth)
    assert reader.ends_from_next_obs == len(meta["hidden_boundaries"]) == 2


def test_no_next_observations_drops_only_truncated_last_steps(
    d4rl_cases: dict[str, D4RLCase],
) -> None:
    batch = read(d4rl_cases["d4rl_no_next_obs"].path)
    _, truth = load_ground_truth(d4rl_cases["d4rl_no_next_obs"].truth)
    n_trunc = sum(not e["terminations"][-1] for e in truth)
    assert batch.ledger.rows_rejected["next_obs_unknown"] == n_trunc == 2
    for ep in batch.episodes:
        if ep.terminated:  # a terminal's final observation is a placeholder: its last one
            np.testing.assert_array_equal(ep.observations[-1], ep.observations[-2])


def test_both_flags_is_terminated(d4rl_cases: dict[str, D4RLCase]) -> None:
    first = read(d4rl_cases["d4rl_both_flags"].path).episodes[0]
    assert first.terminated and not first.truncated


def test_detected_and_inspected(d4rl_cases: dict[str, D4RLCase]) -> None:
    case = d4rl_cases["d4rl_open_end"]
    assert detect_format([str(case.path)]) == "d4rl"
    d = inspect_path(case.path, validate=ValidateConfig(require_done=False)).to_dict()
    assert d["format"] == "d4rl" and d["not_done"] == 1 and d["rows_balance"]
    skip = ReadConfig(format="auto", on_invalid="skip")
    d = inspect_path(case.path, skip).to_dict()  # fragments refused by default, and counted
    assert d["rejected"] == {"not_done": 5} and d["rows_balance"]


def test_a_gap_inside_an_episode_is_refused(tmp_path: Path) -> None:
    h5py = pytest.importorskip("h5py")
    path = tmp_path / "gap.hdf5"
    obs = np.arange(12, dtype=np.float32).reshape(6, 2)
    nxt = obs + 2
    nxt[1] += 100  # row 1's next observation is not row 2's observation
    with h5py.File(path, "w") as f:
        f["observations"], f["next_observations"] = obs, nxt
        f["actions"] = np.zeros((6, 1), np.float32)
        f["rewards"] = np.ones(6, np.float32)
        f["terminals"] = np.array([0, 0, 1, 0, 0, 1], bool)
        f["timeouts"] = np.zeros(6, bool)
    with pytest.raises(EpisodeValidationError, match="row 1"):
        read(path)
    batch = read(path, on_invalid="skip")
    assert batch.ledger.rows_rejected["discontinuous"] == 3 and len(batch) == 1
    assert len(read(path, check_continuity=False)) == 2


def test_missing_keys_named(tmp_path: Path) -> None:
    h5py = pytest.importorskip("h5py")
    path = tmp_path / "bad.hdf5"
    with h5py.File(path, "w") as f:
        f["observations"] = np.zeros((3, 2), np.float32)
        f["actions"] = np.zeros((3, 1), np.float32)
    with pytest.raises(SchemaError, match=r"missing \['rewards', 'terminals'\]"):
        read_table(str(path))


def test_max_episode_steps_checked() -> None:
    with pytest.raises(ConfigError, match="max_episode_steps"):
        ReadConfig(format="d4rl", max_episode_steps=0)
