"""``write_minari_dataset``: what was recorded is what is written (a not-done fragment stays not
done, a scalar bool leaf keeps its shape), and a failed write leaves nothing that blocks a retry.
Skips without h5py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from offline_prelearner.cli import main
from offline_prelearner.config import ReadConfig
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.episodes.ledger import EpisodeBatch
from offline_prelearner.errors import ConfigError, UnsupportedFormatError
from offline_prelearner.io.formats.minari.writer import write_minari_dataset
from offline_prelearner.io.readers import make_reader
from offline_prelearner.io.sources import detect_format, expand_paths, read_table

pytest.importorskip("h5py")


def read_all(path: Path) -> EpisodeBatch:
    files = expand_paths(str(path))
    reader = make_reader(ReadConfig(format=detect_format(files)))
    total = EpisodeBatch()
    for f in files:
        total.extend(reader.read(read_table(f), source=f))
    return total


def episode(
    eid: str, t: int, *, terminated: bool = False, truncated: bool = False, bools: bool = True
) -> Episode:
    rng = np.random.default_rng(len(eid) + t)
    obs = {"pos": rng.normal(size=(t + 1, 2)).astype(np.float32)}
    if bools:
        obs["flag"] = rng.random(t + 1) < 0.5  # a scalar bool leaf
        obs["bits"] = rng.random((t + 1, 3)) < 0.5
    return Episode(
        id=eid,
        observations=obs,
        actions=rng.integers(0, 2, t),
        rewards=rng.normal(size=t).astype(np.float32),
        terminated=terminated,
        truncated=truncated,
    )


EPISODES = [
    ("done", dict(terminated=True)),
    ("cut", dict(truncated=True)),
    ("fragment", {}),  # the data ends mid-episode: neither flag was recorded
]


def test_flags_and_bool_leaves_round_trip(tmp_path: Path) -> None:
    eps = [episode(eid, 4 + i, **kw) for i, (eid, kw) in enumerate(EPISODES)]
    write_minari_dataset(tmp_path / "ds", eps, "test/flags-v0")
    batch = read_all(tmp_path / "ds")
    assert dict(batch.ledger.rows_rejected) == {}
    got = list(batch.columns.iter_episodes())
    assert [(e.terminated, e.truncated) for e in got] == [
        (True, False),
        (False, True),
        (False, False),
    ]
    for want, e in zip(eps, got, strict=True):
        for leaf in ("pos", "flag", "bits"):
            assert e.observations[leaf].shape == want.observations[leaf].shape, leaf
            np.testing.assert_array_equal(e.observations[leaf], want.observations[leaf])


def test_minari_itself_reads_them(tmp_path: Path) -> None:
    minari = pytest.importorskip("minari")
    eps = [episode(eid, 4 + i, **kw) for i, (eid, kw) in enumerate(EPISODES)]
    write_minari_dataset(tmp_path / "ds", eps, "test/flags-v0")
    ds = minari.MinariDataset(str(tmp_path / "ds" / "data"))
    for want, e in zip(eps, ds.iterate_episodes(), strict=True):
        assert bool(e.terminations[-1]) == want.terminated
        assert bool(e.truncations[-1]) == want.truncated
        assert ds.observation_space.contains(
            {k: np.asarray(v[0]) for k, v in e.observations.items()}
        )
        np.testing.assert_array_equal(e.observations["flag"], want.observations["flag"])


def test_convert_to_minari_keeps_a_fragment_not_done(tmp_path: Path) -> None:
    eps = [episode(eid, 4 + i, bools=False, **kw) for i, (eid, kw) in enumerate(EPISODES)]
    write_minari_dataset(tmp_path / "src", eps, "test/flags-v0")
    out = tmp_path / "out" / "flags-v0"
    assert main(["convert", str(tmp_path / "src"), "--to", "minari", "--out", str(out)]) == 0
    stats = json.loads((out / "stats.json").read_text())
    assert (stats["episodes_terminated"], stats["episodes_truncated"]) == (1, 1)
    assert stats["fragments"] == 1
    got = list(read_all(out).columns.iter_episodes())
    assert [(e.terminated, e.truncated) for e in got] == [
        (True, False),
        (False, True),
        (False, False),
    ]


def test_no_episodes_leaves_nothing_behind(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no episodes"):
        write_minari_dataset(tmp_path / "ds", [], "test/empty-v0")
    assert not (tmp_path / "ds").exists()
    write_minari_dataset(tmp_path / "ds", [episode("a", 3, terminated=True)], "test/empty-v0")
    assert len(list(read_all(tmp_path / "ds").columns.iter_episodes())) == 1


def test_a_failure_part_way_leaves_the_given_folder_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "README").write_text("mine")
    bad = episode("b", 3)
    bad.extras = {"x": np.zeros(3)}  # the first episode has none: refused part-way
    with pytest.raises(UnsupportedFormatError, match="extra columns"):
        write_minari_dataset(tmp_path / "ds", [episode("a", 3), bad], "test/part-v0")
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == ["README"]
    write_minari_dataset(tmp_path / "ds", [episode("a", 3)], "test/part-v0")
    assert (tmp_path / "ds" / "data" / "metadata.json").is_file()


_IDS = [
    "cartpole-v0",
    "ns/cartpole-v0",
    "a/b/c-v12",
    "déjà_vu-v1",
    "name",
    "ns/name",
    "x-v0",
    "../../../../evil/x-v0",
    "ns/../x-v0",
    "a/x-v0",
    "/ns/x-v0",
    "ns//x-v0",
    "ns/x-v0/",
    "my.data/x-v0",
    "ns:1/x-v0",
    "x-v0\n",
    "",
    "x v0",
]


@pytest.mark.parametrize("dataset_id", _IDS)
def test_the_id_check_admits_exactly_what_minari_accepts(dataset_id: str) -> None:
    """Issue 36: ``../../../../evil/x-v0`` was admitted and written (exit 0), and then Minari
    refused the dataset ("Malformed dataset ID"). The check is ours, asked of Minari's parser."""
    from minari.dataset.minari_dataset import DATASET_ID_RE

    from offline_prelearner.io.formats.minari.writer import is_minari_id

    assert is_minari_id(dataset_id) == (DATASET_ID_RE.fullmatch(dataset_id) is not None)
