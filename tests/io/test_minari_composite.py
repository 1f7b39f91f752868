"""Nested composite observations (Dict in Dict, Tuple, a JPEG image leaf) in Minari datasets that
Minari itself wrote, every backend: read leaf by leaf against ``minari``'s own
``iterate_episodes()``, written back by ``convert --to minari`` and opened by Minari with the same
episodes, and the dataset's spaces checked per leaf. Skips without minari / h5py / Pillow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fixtures.conftest import require_minari
from fixtures.make_minari import BACKENDS, minari_datasets_path
from fixtures.make_nested_minari import LENGTHS, make_nested, nested_space

from offline_prelearner.config import ReadConfig, ValidateConfig
from offline_prelearner.episodes import observations as O
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.episodes.episode_columns import EpisodeColumns
from offline_prelearner.episodes.ledger import EpisodeBatch
from offline_prelearner.episodes.validate import Validator
from offline_prelearner.errors import EpisodeValidationError
from offline_prelearner.io.readers import make_reader
from offline_prelearner.io.sources import expand_paths, read_table
from offline_prelearner.jobs.convert import convert_path

LEAVES = ["goal.id", "goal.pos", "pair.0", "pair.1", "pixels"]


@pytest.fixture(scope="module")
def nested(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    require_minari()
    root = tmp_path_factory.mktemp("nested")
    return {b: make_nested(root / b, b) for b in BACKENDS}


def read_all(path: str | Path, on_invalid: str = "raise") -> EpisodeBatch:
    reader = make_reader(ReadConfig(format="minari", on_invalid=on_invalid))
    total = EpisodeBatch()
    for f in expand_paths(str(path)):
        total.extend(reader.read(read_table(f), source=f))
    return total


def minari_episodes(data: Path, dataset_id: str = "nested/dict-v0") -> list[Any]:
    """The oracle: ``minari.load_dataset(id).iterate_episodes()`` under the fixture's root."""
    import minari

    root = data.parents[len(dataset_id.split("/"))]  # <root>/<id>/data
    with minari_datasets_path(root):
        return list(minari.load_dataset(dataset_id).iterate_episodes())


def assert_same(ours: list[Episode], theirs: list[Any]) -> None:
    assert len(ours) == len(theirs)
    for mine, want in zip(ours, theirs, strict=True):
        leaves = O.flatten(want.observations)  # Minari: nested dicts, Tuples as tuples
        assert sorted(leaves) == LEAVES
        assert isinstance(mine.observations, dict) and mine.observations.keys() == leaves.keys()
        for path, leaf in leaves.items():
            got = mine.observations[path]
            assert got.dtype == leaf.dtype and got.shape == leaf.shape, path
            np.testing.assert_array_equal(got, leaf, err_msg=path)
        np.testing.assert_array_equal(mine.actions, want.actions)
        np.testing.assert_array_equal(mine.rewards, want.rewards)
        term, trunc = bool(want.terminations[-1]), bool(want.truncations[-1])
        assert (mine.terminated, mine.truncated) == (term, trunc and not term)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nested_leaves_as_minari_gives_them(nested: dict[str, Path], backend: str) -> None:
    batch = read_all(nested[backend])
    assert [e.id for e in batch.episodes] == list(range(len(LENGTHS)))
    assert [len(e) for e in batch.episodes] == list(LENGTHS)
    assert_same(batch.episodes, minari_episodes(nested[backend]))
    assert batch.ledger.rows_in == sum(LENGTHS) and batch.ledger.balanced()


@pytest.mark.parametrize("backend", BACKENDS)
def test_reader_spaces_are_minari_spaces(nested: dict[str, Path], backend: str) -> None:
    reader = make_reader(ReadConfig(format="minari"))
    f = expand_paths(str(nested[backend]))[0]
    reader.read(read_table(f), f)
    assert reader.observation_space == nested_space()


@pytest.mark.parametrize("backend", BACKENDS)
def test_convert_to_minari_round_trip(
    nested: dict[str, Path], backend: str, tmp_path: Path
) -> None:
    """Written back (raw, lossless: the JPEG leaf as Minari decoded it) and opened by Minari."""
    out = tmp_path / "ns" / "copy-v0"
    stats = convert_path(nested[backend], "minari", out)
    assert stats["balanced"] and stats["rows_out"] == sum(LENGTHS)
    import minari

    ds = minari.MinariDataset(str(out / "data"))
    assert ds.observation_space == nested_space()
    assert_same(read_all(nested[backend]).episodes, list(ds.iterate_episodes()))
    assert_same(read_all(out).episodes, list(ds.iterate_episodes()))  # and ours reads it back


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("leaf", "episode", "step"), [("goal.pos", 3, 2), ("pair.1", 4, 0)])
def test_a_leaf_outside_its_space(
    tmp_path: Path, backend: str, leaf: str, episode: int, step: int
) -> None:
    require_minari()
    data = make_nested(tmp_path, backend, "nested/bad-v0", out_of_space={episode: (leaf, step)})
    with pytest.raises(EpisodeValidationError) as info:
        read_all(data)
    err = info.value
    assert err.reason == "out_of_space"
    assert err.where.column == f"obs.{leaf}" and err.where.episode_id == episode
    assert err.where.timestep == step and err.where.file is not None
    assert f"obs.{leaf}" in str(err) and f"episode {episode}" in str(err)
    first_row = sum(n + 1 for n in LENGTHS[:episode]) if backend == "hdf5" else 0
    assert err.where.row == first_row + step  # the row of the step table / episode file
    skipped = read_all(data, on_invalid="skip")
    assert [e.id for e in skipped.episodes] == [k for k in range(len(LENGTHS)) if k != episode]
    led = skipped.ledger
    assert led.rows_rejected == {"out_of_space": LENGTHS[episode]} and led.balanced()
    assert led.rows_in == sum(LENGTHS)


def test_validator_checks_each_leaf(nested: dict[str, Path]) -> None:
    """``validate.observation_space`` set to a composite space: each leaf against its space."""
    eps = read_all(nested["parquet"]).episodes
    ok = EpisodeBatch(EpisodeColumns.from_episodes(eps))
    Validator(ValidateConfig(observation_space=nested_space())).validate(ok)
    assert len(ok) == len(eps)

    bad_ep = eps[2]
    obs = {k: v.copy() for k, v in bad_ep.observations.items()}
    obs["pair.0"][4, 2] = 11.0  # Box(0, 10)
    broken = Episode(
        id=bad_ep.id,
        observations=obs,
        actions=bad_ep.actions,
        rewards=bad_ep.rewards,
        terminated=bad_ep.terminated,
        truncated=bad_ep.truncated,
    )
    batch = EpisodeBatch(EpisodeColumns.from_episodes([eps[0], broken]))
    v = Validator(ValidateConfig(observation_space=nested_space()))
    with pytest.raises(EpisodeValidationError, match=r"obs\.pair\.0 at t=4") as info:
        v.validate(batch)
    assert info.value.where.column == "obs.pair.0" and info.value.reason == "out_of_space"

    short = dict(obs)
    del short["pixels"]
    missing = Episode(id="m", observations=short, actions=bad_ep.actions, rewards=bad_ep.rewards,
                      terminated=True)  # fmt: skip
    batch = EpisodeBatch(EpisodeColumns.from_episodes([missing]))
    Validator(ValidateConfig(observation_space=nested_space()), "skip").validate(batch)
    assert len(batch) == 0 and batch.ledger.rows_rejected == {"obs_shape": len(missing)}


def test_writer_infers_a_dict_space_from_leaves(tmp_path: Path) -> None:
    """Composite episodes with no space given (e.g. from rows): a nested Dict of the leaves."""
    require_minari()
    import minari
    from gymnasium import spaces

    from offline_prelearner.io.formats.minari.writer import write_minari_dataset

    rng = np.random.default_rng(0)
    eps = [
        Episode(
            id=f"e{k}",
            observations={
                "a.b": rng.standard_normal((t + 1, 2)).astype(np.float32),
                "c": rng.integers(0, 5, t + 1).astype(np.int64),
            },
            actions=rng.integers(0, 2, t).astype(np.int64),
            rewards=np.ones(t),
            terminated=k == 0,
            truncated=k == 1,
        )
        for k, t in enumerate((3, 1))
    ]
    write_minari_dataset(tmp_path / "ns" / "inferred-v0", eps, "ns/inferred-v0")
    ds = minari.MinariDataset(str(tmp_path / "ns" / "inferred-v0" / "data"))
    space = ds.observation_space
    assert isinstance(space, spaces.Dict) and isinstance(space["a"], spaces.Dict)
    assert space["c"] == spaces.Discrete(5)
    for got, want in zip(ds.iterate_episodes(), eps, strict=True):
        flat = O.flatten(got.observations)
        assert flat.keys() == want.observations.keys()
        for k in flat:
            np.testing.assert_array_equal(flat[k], want.observations[k])
