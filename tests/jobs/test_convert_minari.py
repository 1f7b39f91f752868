"""``convert --to minari``: the dataset written is opened by Minari's own ``load_dataset`` with the
same episodes; and Minari / D4RL in, rows / episodes out. Skips without minari / h5py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO
from fixtures import sessions
from fixtures.make_minari import BACKENDS, D4RLCase, MinariCase, load_ground_truth

from offline_prelearner.cli import main
from offline_prelearner.config import ReadConfig
from offline_prelearner.episodes.ledger import EpisodeBatch
from offline_prelearner.io.readers import make_reader
from offline_prelearner.io.sources import detect_format, expand_paths, read_table
from offline_prelearner.jobs.convert import convert_path
from offline_prelearner.jobs.ownership import CommitError


@pytest.fixture(scope="session")
def minari_cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, MinariCase]:
    return sessions.minari_cases(tmp_path_factory)


@pytest.fixture(scope="session")
def d4rl_cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, D4RLCase]:
    pytest.importorskip("minari")
    return sessions.d4rl_cases(tmp_path_factory)


def read_all(path: str | Path, fmt: str = "auto") -> EpisodeBatch:
    files = expand_paths(str(path))
    reader = make_reader(ReadConfig(format=detect_format(files) if fmt == "auto" else fmt))
    total = EpisodeBatch()
    for f in files:
        total.extend(reader.read(read_table(f), source=f))
    return total


def load(root: Path, dataset_id: str, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    import minari

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return minari.load_dataset(dataset_id)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dataset", ["cartpole/random-v0", "pendulum/random-v1", "images/raw-v0"])
def test_minari_round_trip_through_minari(
    minari_cases: dict[str, MinariCase],
    backend: str,
    dataset: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    case = minari_cases[f"{dataset}@{backend}"]
    meta, truth = load_ground_truth(case.truth)
    stats = convert_path(case.path, "minari", tmp_path / "ns" / "copy-v0")
    assert stats["dataset_id"] == "ns/copy-v0" and stats["balanced"]
    ds = load(tmp_path, "ns/copy-v0", monkeypatch)
    assert ds.total_episodes == meta["total_episodes"] and ds.total_steps == meta["total_steps"]
    assert ds.observation_space.shape == tuple(meta["observation_space"]["shape"])
    assert type(ds.action_space).__name__ == meta["action_space"]["type"]
    for got, want in zip(ds.iterate_episodes(), truth, strict=True):
        np.testing.assert_array_equal(got.observations, want["observations"])
        np.testing.assert_array_equal(got.actions, want["actions"])
        np.testing.assert_array_equal(got.rewards, want["rewards"])
        term = bool(want["terminations"][-1])
        assert bool(got.terminations[-1]) == term
        assert bool(got.truncations[-1]) == (not term)  # both set: termination kept
        assert not got.terminations[:-1].any() and not got.truncations[:-1].any()
    again = read_all(tmp_path / "ns" / "copy-v0")  # and our own reader reads it back
    assert [len(e) for e in again.episodes] == meta["episode_lengths"]


def test_d4rl_to_minari(
    d4rl_cases: dict[str, D4RLCase], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = d4rl_cases["d4rl_open_end"]
    ours = read_all(case.path).episodes
    stats = convert_path(case.path, "minari", tmp_path / "d4rl" / "open-v0")
    assert stats["fragments"] == 1 and stats["rows_out"] == stats["rows_in"]
    ds = load(tmp_path, "d4rl/open-v0", monkeypatch)
    for got, want in zip(ds.iterate_episodes(), ours, strict=True):
        np.testing.assert_array_equal(got.observations, want.observations)
        np.testing.assert_array_equal(got.actions, want.actions)
        assert bool(got.terminations[-1]) == want.terminated
        assert bool(got.truncations[-1]) == want.truncated  # a fragment: neither flag


@pytest.mark.parametrize("to", ["rows", "episodes"])
def test_minari_to_rllib_layouts(
    minari_cases: dict[str, MinariCase], to: str, tmp_path: Path
) -> None:
    case = minari_cases["pendulum/random-v1@parquet"]
    stats = convert_path(case.path, to, tmp_path / "out")
    _, truth = load_ground_truth(case.truth)
    assert stats["rows_out"] == stats["rows_in"] == sum(len(e["rewards"]) for e in truth)
    back = read_all(f"{tmp_path}/out/{to}/{to}-*.parquet", to).episodes
    for got, want in zip(sorted(back, key=lambda e: int(e.id)), truth, strict=True):
        np.testing.assert_allclose(got.observations, want["observations"])
        np.testing.assert_allclose(got.actions, want["actions"])


def test_cli_convert_to_minari(
    minari_cases: dict[str, MinariCase], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = minari_cases["cartpole/random-v0@arrow"]
    out = tmp_path / "anywhere"
    code = main(["convert", str(case.path), "--to", "minari", "--out", str(out),
                 "--dataset-id", "cart/pole-v3", "--json"])  # fmt: skip
    assert code == 0
    manifest = json.loads((out / "_manifest.json").read_text())
    assert {f["name"] for f in manifest["files"]} == {"data/main_data.hdf5", "data/metadata.json"}
    import minari

    ds = minari.MinariDataset(str(out / "data"))  # by folder, no env var
    assert (
        ds.id == "cart/pole-v3"
        and ds.total_steps == load_ground_truth(case.truth)[0]["total_steps"]
    )
    with pytest.raises(CommitError, match="not empty"):
        convert_path(case.path, "minari", out)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dataset", ["goal/dict-v0", "goal/tuple-v0", "images/dict-v0"])
def test_composite_round_trip_through_minari(
    minari_cases: dict[str, MinariCase],
    backend: str,
    dataset: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Dict / Tuple observations recorded by DataCollector, written back: Minari opens them with
    the same space (a Tuple stays a Tuple) and the same leaves (JPEG leaves as Minari decoded
    them, now stored raw)."""
    from offline_prelearner.episodes import observations as O

    case = minari_cases[f"{dataset}@{backend}"]
    meta, truth = load_ground_truth(case.truth)
    stats = convert_path(case.path, "minari", tmp_path / "ns" / "copy-v0")
    assert stats["balanced"] and stats["rows_out"] == meta["total_steps"]
    ds = load(tmp_path, "ns/copy-v0", monkeypatch)
    assert type(ds.observation_space).__name__ == meta["observation_space"]["type"]
    for got, want in zip(ds.iterate_episodes(), truth, strict=True):
        mine, theirs = O.flatten(got.observations), O.flatten(want["observations"])
        assert mine.keys() == theirs.keys()
        for k in theirs:
            np.testing.assert_array_equal(mine[k], theirs[k], err_msg=k)
        np.testing.assert_array_equal(got.actions, want["actions"])


@pytest.mark.parametrize("source", ["minari", "d4rl"])
def test_rows_fast_layout_from_whole_datasets_is_written_and_recorded(
    minari_cases: dict[str, MinariCase],
    d4rl_cases: dict[str, D4RLCase],
    source: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``convert --to rows --layout fast`` of Minari / D4RL input (the dataset job) writes the
    fast layout and says so where a reader of the output looks: the manifest and the stats, as a
    rows -> rows convert does (they said nothing, so the output read as RLlib's default)."""
    import pyarrow.parquet as pq

    from offline_prelearner.io.fast_tensor import FastTensorType

    path = (
        minari_cases[f"images/raw-v0@{BACKENDS[0]}"].path
        if source == "minari"
        else d4rl_cases["d4rl_full"].path
    )
    out = tmp_path / "fast"
    argv = ["convert", str(path), "--to", "rows", "--layout", "fast", "--out", str(out), "--json"]
    assert main(argv) == 0
    stats = json.loads(capsys.readouterr().out)
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["layout"] == "fast" and stats["layout"] == "fast"
    schema = pq.read_schema(out / stats["files_written"][0])
    assert isinstance(schema.field("obs").type, FastTensorType)
    assert isinstance(schema.field("new_obs").type, FastTensorType)


def test_per_file_rows_record_their_layout(tmp_path: Path) -> None:
    """The per-file job (msgpack episodes -> rows) records the layout it wrote too."""
    from offline_prelearner.jobs.convert import ConvertConfig, convert

    episodes = REPO / "datasets" / "cartpole-v1" / "episodes"
    stats = convert(episodes, tmp_path / "o", ConvertConfig("rows", layout="fast"))
    assert stats["format"] == "episodes" and stats["layout"] == "fast"
    assert json.loads((tmp_path / "o" / "_manifest.json").read_text())["layout"] == "fast"
