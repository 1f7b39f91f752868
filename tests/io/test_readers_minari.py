"""The ``minari`` reader against real Minari 0.5.4 datasets (every backend) and their ground truth
(what Minari's own ``iterate_episodes()`` returns). Skips without minari / h5py / Pillow."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from fixtures import sessions
from fixtures.make_minari import BACKENDS, MinariCase, load_ground_truth

from offline_prelearner.cli import main
from offline_prelearner.config import PreLearnerConfig, ReadConfig
from offline_prelearner.episodes import observations as O
from offline_prelearner.episodes.ledger import EpisodeBatch
from offline_prelearner.errors import (
    EpisodeValidationError,
    SchemaError,
    UnsupportedFormatError,
)
from offline_prelearner.io.formats.minari.dataset import METADATA_KEY, datasets_root, find_data_dir
from offline_prelearner.io.formats.minari.reader import MinariReader
from offline_prelearner.io.readers import available_formats, make_reader
from offline_prelearner.io.sources import detect_format, expand_paths, read_table
from offline_prelearner.jobs.batch.plan import plan_units
from offline_prelearner.jobs.inspection import inspect_path

LEAF_DATASETS = [
    "cartpole/random-v0",
    "pendulum/random-v1",
    "images/jpeg-v0",
    "images/raw-v0",
    "images/small-v0",
]
CASES = [f"{d}@{b}" for b in BACKENDS for d in LEAF_DATASETS]


@pytest.fixture(scope="session")
def minari_cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, MinariCase]:
    return sessions.minari_cases(tmp_path_factory)


def read_all(path: str | Path, config: ReadConfig | None = None) -> EpisodeBatch:
    reader = make_reader(config or ReadConfig(format="minari"))
    total = EpisodeBatch()
    for f in expand_paths(str(path)):
        total.extend(reader.read(read_table(f), source=f))
    return total


@pytest.mark.parametrize("name", CASES)
def test_episodes_as_minari_gives_them(minari_cases: dict[str, MinariCase], name: str) -> None:
    case = minari_cases[name]
    meta, truth = load_ground_truth(case.truth)
    batch = read_all(case.path)
    eps = batch.episodes
    assert [e.id for e in eps] == meta["episode_ids"]
    assert [len(e) for e in eps] == meta["episode_lengths"]
    for ours, want in zip(eps, truth, strict=True):
        assert ours.observations.dtype == want["observations"].dtype
        assert ours.actions.dtype == want["actions"].dtype
        np.testing.assert_array_equal(ours.observations, want["observations"])  # incl. the last
        np.testing.assert_array_equal(ours.actions, want["actions"])
        np.testing.assert_array_equal(ours.rewards, want["rewards"])
        term, trunc = bool(want["terminations"][-1]), bool(want["truncations"][-1])
        assert ours.terminated == term  # both set in Minari: terminated (bootstrapping)
        assert ours.truncated == (trunc and not term)
        assert not (want["terminations"][:-1].any() or want["truncations"][:-1].any())
    led = batch.ledger
    assert led.rows_in == meta["total_steps"] == sum(batch.source_rows)  # a row is a step
    assert led.balanced()


def test_fixture_has_both_flags_and_cut_episodes(minari_cases: dict[str, MinariCase]) -> None:
    """The CartPole set ends in termination, in TimeLimit truncation and in DataCollector cuts."""
    _, truth = load_ground_truth(minari_cases["cartpole/random-v0@hdf5"].truth)
    ends = {(bool(e["terminations"][-1]), bool(e["truncations"][-1])) for e in truth}
    assert (True, False) in ends and (False, True) in ends


def test_jpeg_decoded_close_to_the_source(minari_cases: dict[str, MinariCase]) -> None:
    for backend in BACKENDS:
        case = minari_cases[f"images/jpeg-v0@{backend}"]
        _, truth = load_ground_truth(case.truth)
        for ours, want in zip(read_all(case.path).episodes, truth, strict=True):
            err = np.abs(ours.observations.astype(int) - want["source"]["observations"].astype(int))
            assert ours.observations.shape[1:] == (32, 32, 3) and err.mean() < 12


@pytest.mark.parametrize("backend", BACKENDS)
def test_by_id_and_by_folder(
    minari_cases: dict[str, MinariCase], backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = minari_cases[f"cartpole/random-v0@{backend}"]
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(case.root))
    by_id = expand_paths("cartpole/random-v0")
    assert by_id == expand_paths(str(case.path)) == expand_paths(str(case.data_path))
    assert detect_format(by_id) == "minari"
    if backend != "hdf5":  # episode folders in id order, not string order (10, 11 after 9)
        assert [int(Path(f).parent.name) for f in by_id] == list(range(12))
    monkeypatch.delenv("MINARI_DATASETS_PATH")
    monkeypatch.setenv("HOME", str(case.root.parent / "home"))
    assert datasets_root() == case.root.parent / "home" / ".minari" / "datasets"
    assert find_data_dir("cartpole/random-v0") is None  # nothing under ~/.minari here
    with pytest.raises(FileNotFoundError):
        expand_paths("cartpole/random-v0")


COMPOSITE = ["goal/dict-v0", "images/dict-v0", "goal/tuple-v0"]


@pytest.mark.parametrize("name", [f"{d}@{b}" for b in BACKENDS for d in COMPOSITE])
def test_composite_episodes_as_minari_gives_them(
    minari_cases: dict[str, MinariCase], name: str
) -> None:
    """Dict / Tuple observations: one leaf array per path, equal to what Minari returns (its
    Tuple as positions "0", "1"; JPEG leaves decoded the same way), the last obs included."""
    case = minari_cases[name]
    meta, truth = load_ground_truth(case.truth)
    batch = read_all(case.path)
    eps = batch.episodes
    assert [e.id for e in eps] == meta["episode_ids"]
    assert [len(e) for e in eps] == meta["episode_lengths"]
    for ours, want in zip(eps, truth, strict=True):
        leaves = O.flatten(want["observations"])
        assert isinstance(ours.observations, dict) and ours.observations.keys() == leaves.keys()
        for path, leaf in leaves.items():
            assert ours.observations[path].dtype == leaf.dtype, path
            np.testing.assert_array_equal(ours.observations[path], leaf, err_msg=path)
        np.testing.assert_array_equal(ours.actions, want["actions"])
        np.testing.assert_array_equal(ours.rewards, want["rewards"])
        term, trunc = bool(want["terminations"][-1]), bool(want["truncations"][-1])
        assert (ours.terminated, ours.truncated) == (term, trunc and not term)
    assert batch.ledger.rows_in == meta["total_steps"] and batch.ledger.balanced()


def test_composite_through_process(minari_cases: dict[str, MinariCase], tmp_path: Path) -> None:
    case = minari_cases["goal/dict-v0@parquet"]
    meta, _ = load_ground_truth(case.truth)
    out = tmp_path / "out"
    assert main(["process", str(case.path), "--out", str(out), "--engine", "local"]) == 0
    stats = json.loads((out / "stats.json").read_text())
    assert stats["rows_in"] == meta["total_steps"] and stats["rows_balance"]


def test_registered_and_detected(minari_cases: dict[str, MinariCase]) -> None:
    assert {"minari", "d4rl"} <= set(available_formats())
    assert isinstance(make_reader(ReadConfig(format="minari")), MinariReader)
    for backend in BACKENDS:
        case = minari_cases[f"pendulum/random-v1@{backend}"]
        files = expand_paths(str(case.path))
        assert detect_format(files) == "minari"
        reader = make_reader(ReadConfig(format="minari"))
        reader.read(read_table(files[0]), files[0])
        assert reader.action_space.shape == (1,)


def test_inspect_counts(minari_cases: dict[str, MinariCase]) -> None:
    case = minari_cases["cartpole/random-v0@parquet"]
    meta, truth = load_ground_truth(case.truth)
    d = inspect_path(case.path).to_dict()
    assert d["format"] == "minari" and d["rows"] == meta["total_steps"]
    assert d["episodes"] == len(truth) and d["rows_balance"]
    assert d["terminated"] == sum(bool(e["terminations"][-1]) for e in truth)


def test_a_flag_before_the_end_is_refused(minari_cases: dict[str, MinariCase]) -> None:
    case = minari_cases["cartpole/random-v0@arrow"]
    f = expand_paths(str(case.path))[0]
    table = read_table(f)
    term = table.column("terminations").to_numpy(zero_copy_only=False).copy()
    term[1] = True
    bad = table.set_column(
        table.schema.get_field_index("terminations"), "terminations", pa.array(term)
    )
    with pytest.raises(EpisodeValidationError, match="at step 1"):
        MinariReader().read(bad, f)
    out = MinariReader(ReadConfig(format="minari", on_invalid="skip")).read(bad, f)
    assert len(out) == 0 and out.ledger.rows_rejected["inconsistent"] == table.num_rows - 1
    assert out.ledger.balanced()


def test_needs_a_step_table() -> None:
    with pytest.raises(SchemaError, match="step tables"):
        MinariReader().read(pa.table({"observations": [1.0]}))


def test_step_table_metadata(minari_cases: dict[str, MinariCase]) -> None:
    case = minari_cases["cartpole/random-v0@hdf5"]
    table = read_table(expand_paths(str(case.path))[0])
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    assert meta["dataset_id"] == "cartpole/random-v0" and meta["data_format"] == "hdf5"
    eid = table.column("episode_id").to_numpy()
    assert table.num_rows == load_ground_truth(case.truth)[0]["total_steps"] + 12
    assert list(dict.fromkeys(eid.tolist())) == list(range(12))  # numeric order, not 0,1,10,..


def test_units_group_episode_files(minari_cases: dict[str, MinariCase]) -> None:
    case = minari_cases["cartpole/random-v0@arrow"]
    files = expand_paths(str(case.path))
    config = PreLearnerConfig(read=ReadConfig(format="minari"))
    plan = plan_units(files, config, min_rows=40)
    assert plan.whole_files and len(plan.units) > 1
    covered = sorted(p.file for u in plan.units for p in u.parts)
    assert covered == list(range(len(files)))
    hdf5 = expand_paths(str(minari_cases["cartpole/random-v0@hdf5"].path))
    assert len(plan_units(hdf5, config, min_rows=40).units) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_process_reads_every_step(
    minari_cases: dict[str, MinariCase], backend: str, tmp_path: Path
) -> None:
    case = minari_cases[f"cartpole/random-v0@{backend}"]
    out = tmp_path / "out"
    code = main(["process", str(case.path), "--out", str(out), "--engine", "local", "--json"])
    assert code == 0
    stats = json.loads((out / "stats.json").read_text())
    total = load_ground_truth(case.truth)[0]["total_steps"]
    assert stats["format"] == "minari" and stats["rows_in"] == total and stats["rows_balance"]
    assert stats["samples_written"] == total  # sample_all: every transition once


def test_composite_actions_refused_in_one_line(
    minari_cases: dict[str, MinariCase], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    src = minari_cases["cartpole/random-v0@parquet"].data_path
    data = tmp_path / "data"
    shutil.copytree(src, data)
    meta = json.loads((data / "metadata.json").read_text())
    meta["action_space"] = json.dumps({"type": "Dict", "subspaces": {
        "a": {"type": "Discrete", "dtype": "int64", "start": 0, "n": 2}}})  # fmt: skip
    (data / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(UnsupportedFormatError, match="has a Dict action space"):
        read_all(data)
    assert main(["inspect", str(data)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Dict action space" in err[0]


def test_hdf5_inconsistent_episode_named(
    minari_cases: dict[str, MinariCase], tmp_path: Path
) -> None:
    import shutil

    import h5py

    from offline_prelearner.errors import DataError

    data = tmp_path / "data"
    shutil.copytree(minari_cases["goal/dict-v0@hdf5"].data_path, data)
    with h5py.File(data / "main_data.hdf5", "a") as f:
        g = f["episode_3"]
        short = g["rewards"][:-1]
        del g["rewards"]
        g["rewards"] = short
        del f["episode_5/observations/desired_goal"]
    with pytest.raises(DataError, match="rewards has") as info:
        read_all(data)
    where = info.value.where
    assert (where.column, where.episode_id) == ("rewards", 3)
    assert where.file == str(data / "main_data.hdf5")
    with h5py.File(data / "main_data.hdf5", "a") as f:
        g = f["episode_3"]
        del g["rewards"]
        g["rewards"] = np.zeros(len(g["actions"]))
    with pytest.raises(DataError, match="no dataset 'observations/desired_goal'") as info:
        read_all(data)
    assert (info.value.where.column, info.value.where.episode_id) == ("obs.desired_goal", 5)


def test_a_dict_key_with_a_dot_is_refused(
    minari_cases: dict[str, MinariCase], tmp_path: Path
) -> None:
    import shutil

    data = tmp_path / "data"
    shutil.copytree(minari_cases["goal/dict-v0@arrow"].data_path, data)
    meta = json.loads((data / "metadata.json").read_text())
    space = json.loads(meta["observation_space"])
    space["subspaces"]["goal.xy"] = space["subspaces"].pop("desired_goal")
    meta["observation_space"] = json.dumps(space)
    (data / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(UnsupportedFormatError, match=r"keys with '\.'.*goal\.xy"):
        read_all(data)


@pytest.mark.ray
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_learner_stream_reads_minari_in_its_actor(
    ray_local: object, minari_cases: dict[str, MinariCase], backend: str
) -> None:
    """``iter_learner_batches`` on a Minari folder: every step once (``sample_all``), the actors
    reading the episode files themselves (gathered into batches, never cut)."""
    from offline_prelearner.jobs.stream.learner_stream import iter_learner_batches

    case = minari_cases[f"{LEAF_DATASETS[0]}@{backend}"]
    meta, _ = load_ground_truth(case.truth)
    cfg = PreLearnerConfig().with_updates({"sample_all": True, "batch_size": 64})
    seen = []
    for batch in iter_learner_batches(case.path, cfg):
        sb = batch["default_policy"]
        seen += list(zip(sb["eps_id"].tolist(), sb["t"].tolist(), strict=True))
    assert len(seen) == len(set(seen)) == meta["total_steps"]
