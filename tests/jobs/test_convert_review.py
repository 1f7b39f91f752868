"""``convert``: reviewers' findings -- dtypes kept per rows table, files of two layouts refused
for one Minari dataset, the default Minari id follows Minari's id rules."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from offline_prelearner.cli import main
from offline_prelearner.config import ReadConfig
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.io.formats.episodes.reader import episodes_to_table
from offline_prelearner.io.formats.rows.reader import RowsReader
from offline_prelearner.jobs.convert.tables import rows_tables

BIG = 2**53 + 1  # an int64 that float64 rounds (to 2**53)


def _episode(id: str, obs_dtype: str, action_dtype: str = "int64") -> Episode:
    """Four steps; int observations above what float64 holds exactly, float ones not integral."""
    steps = np.arange(15).reshape(5, 3)
    obs = steps + BIG if obs_dtype == "int64" else steps / 3
    return Episode(
        id=id,
        observations=obs.astype(obs_dtype),
        actions=(np.arange(4) / 4 + (2**53 + 1) * (action_dtype == "int64")).astype(action_dtype),
        rewards=np.linspace(0.0, 1.0, 4),
        terminated=True,
        extras={"action_logp": np.full(4, -0.1, np.float32)},
    )


def _read_rows(files: list[Path]) -> dict[str, Episode]:
    reader = RowsReader(ReadConfig(format="rows"))
    got: dict[str, Episode] = {}
    for f in files:
        batch = reader.read(pq.read_table(f), str(f))
        assert batch.ledger.balanced() and not batch.ledger.rows_rejected
        got.update((str(e.id), e) for e in batch.episodes)
    return got


def _assert_exact(got: Episode, want: Episode) -> None:
    """Same values and same dtypes (``assert_array_equal`` alone passes 0.5 == float64(0.5))."""
    pairs = [(got.observations, want.observations), (got.actions, want.actions)]
    pairs += [(got.extras[k], v) for k, v in want.extras.items()]
    for g, w in pairs:
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_rows_tables_hold_one_dtype_per_column(tmp_path: Path) -> None:
    """Episodes of equal shapes but other observation or action dtypes go to tables of their own:
    one table concatenated them and numpy promoted the values (float32 -> float64, and int64
    above 2**53 with float32 -> rounded float64)."""
    eps = [
        _episode("f32", "float32", "float32"),
        _episode("i64", "int64"),
        _episode("f32-b", "float32", "float32"),
        _episode("i64-f32", "int64", "float32"),
    ]
    files = []
    for k, table in enumerate(rows_tables(eps, rows_per_file=100)):
        files.append(tmp_path / f"rows-{k}.parquet")
        pq.write_table(table, files[-1])
    assert len(files) == 3  # f32 + f32-b, i64, i64-f32: first-episode order
    assert pq.read_table(files[0]).column("eps_id").unique().to_pylist() == ["f32", "f32-b"]
    got = _read_rows(files)
    for ep in eps:
        _assert_exact(got[str(ep.id)], ep)


def test_cli_rows_from_msgpack_episodes_of_two_observation_dtypes(tmp_path: Path) -> None:
    """``convert --to rows`` of msgpack episode files of float32 and int64 observations writes
    each episode's values and dtypes as recorded."""
    src = tmp_path / "in"
    src.mkdir()
    eps = [_episode("f32", "float32"), _episode("i64", "int64")]
    for ep in eps:
        pq.write_table(episodes_to_table([ep]), src / f"{ep.id}.parquet")
    out = tmp_path / "out"
    assert main(["convert", str(src), "--to", "rows", "--out", str(out)]) == 0
    got = _read_rows(sorted((out / "rows").glob("rows-*.parquet")))
    assert sorted(got) == ["f32", "i64"]
    for ep in eps:
        _assert_exact(got[str(ep.id)], ep)


def test_cli_minari_refuses_files_of_two_observation_dtypes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One Minari dataset holds one observation dtype: a second file of another is one line
    naming it (it was a ValueError traceback), nothing is committed."""
    src = tmp_path / "in"
    src.mkdir()
    pq.write_table(episodes_to_table([_episode("a", "float32")]), src / "a.parquet")
    pq.write_table(episodes_to_table([_episode("b", "int64")]), src / "b.parquet")
    out = tmp_path / "ns" / "two-v0"
    assert main(["convert", str(src), "--to", "minari", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress lines
    assert err.startswith("offline-prelearner convert: error: ") and "Traceback" not in err
    assert "observation dtype" in err and "b.parquet" in err
    assert "--on-invalid" not in err  # no policy counts it
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize(
    ("parent", "want"),
    [("ns", "ns/name-v0"), ("a", "name-v0"), ("my.data", "name-v0"), ("x-1_y", "x-1_y/name-v0")],
)
def test_default_minari_id_is_parent_and_folder_where_minari_accepts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parent: str, want: str
) -> None:
    """``<parent>/<folder>`` where the parent is a Minari namespace (two or more of ``[-_\\w]``),
    else ``<folder>``: Minari refuses ``a/name-v0`` and ``my.data/name-v0``, and loads the
    dataset by the id written."""
    import minari
    from minari.dataset.minari_dataset import parse_dataset_id

    src = tmp_path / "in"
    src.mkdir()
    pq.write_table(episodes_to_table([_episode("a", "float32")]), src / "a.parquet")
    out = tmp_path / "root" / parent / "name-v0"
    assert main(["convert", str(src), "--to", "minari", "--out", str(out)]) == 0
    dataset_id = json.loads((out / "data" / "metadata.json").read_text())["dataset_id"]
    assert dataset_id == want
    parse_dataset_id(dataset_id)  # Minari accepts it
    root = out.parent if "/" not in want else out.parent.parent
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    ds = minari.load_dataset(want)
    assert ds.total_episodes == 1 and ds.id == want
