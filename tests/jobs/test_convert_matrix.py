"""``convert`` between every format read and every format written, on real data.

Sources: the shipped CartPole rows (``datasets/cartpole-v1/rows``: 5 files cutting through
episodes), RLlib 2.60's msgpack episodes and old-stack JSON (``shared_data``), a Minari dataset
that Minari itself writes from the CartPole episodes (``env_spec`` of CartPole-v1, arrow backend),
and a D4RL HDF5 file written with h5py from the same episodes. Targets: rows, episodes, Minari.

Each pair: ``a -> b`` gives the episodes of ``a``; for rows, episodes and Minari sources
``a -> b -> a`` gives them again (ids as strings, lengths, observations, actions, rewards, flags,
``t_started``, extras exactly; dtypes too: RLlib's ``weights_seq_no``, old-stack ``action_logp``
ride through Minari in ``extras/<name>`` datasets Minari ignores). Old-stack and D4RL are input
only. Minari output is opened with Minari itself.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import REPO

from offline_prelearner.cli import main
from offline_prelearner.config import ReadConfig
from offline_prelearner.episodes import observations as O
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.episodes.ledger import EpisodeBatch
from offline_prelearner.episodes.stitch import stitch_fragments
from offline_prelearner.errors import ConfigError, UnsupportedFormatError
from offline_prelearner.io.formats.sample_batches.reader import SampleBatchesReader
from offline_prelearner.io.readers import make_reader
from offline_prelearner.io.sources import detect_format, expand_paths, read_table
from offline_prelearner.jobs.convert import convert_path

pytest.importorskip("h5py")
minari = pytest.importorskip("minari")

ROWS = REPO / "datasets" / "cartpole-v1" / "rows"
TARGETS = ["rows", "episodes", "minari"]
ROUND_TRIP = ["rows", "episodes", "minari"]
ONE_WAY = ["old_stack", "d4rl"]
SHARED = ("episodes", "old_stack")  # RLlib 2.60's files (the rllib_data marker)
SOURCES = [
    pytest.param(s, marks=pytest.mark.rllib_data) if s in SHARED else s
    for s in ROUND_TRIP + ONE_WAY
]


# ------------------------------------------------------------------------------------ reading
def read_episodes(path: str | Path) -> list[Episode]:
    """Every episode under ``path`` with our readers, fragments joined, sorted by id (as str)."""
    files = expand_paths(str(path))
    fmt = detect_format(files)
    reader: Any
    total = EpisodeBatch()
    if fmt == "sample_batches":
        reader = SampleBatchesReader(ReadConfig(format=fmt))
        for f in files:
            total.extend(reader.read_file(f))
    else:
        if fmt in ("rows", "episodes"):
            files = [f for f in files if f.endswith(".parquet")]
        reader = make_reader(ReadConfig(format=fmt))
        for f in files:
            total.extend(reader.read(read_table(f), source=f))
    eps = stitch_fragments(total).episodes
    return sorted(eps, key=lambda e: (str(e.id), e.t_started))


def assert_same(got: list[Episode], want: list[Episode]) -> None:
    assert [str(e.id) for e in got] == [str(e.id) for e in want]
    for g, w in zip(got, want, strict=True):
        where = f"episode {w.id!r}"
        assert len(g) == len(w) and g.t_started == w.t_started, where
        assert (g.terminated, g.truncated) == (w.terminated, w.truncated), where
        go, wo = O.leaves(g.observations), O.leaves(w.observations)
        assert go.keys() == wo.keys(), where
        for k in wo:
            assert go[k].dtype == wo[k].dtype, (where, k)
            np.testing.assert_array_equal(go[k], wo[k], err_msg=where)
        for name in ("actions", "rewards"):
            a, b = getattr(g, name), getattr(w, name)
            assert a.dtype == b.dtype, (where, name, a.dtype, b.dtype)
            np.testing.assert_array_equal(a, b, err_msg=f"{where} {name}")
        assert g.extras.keys() == w.extras.keys(), where
        for k in w.extras:
            assert g.extras[k].dtype == w.extras[k].dtype, (where, k)
            np.testing.assert_array_equal(g.extras[k], w.extras[k], err_msg=f"{where} {k}")


# ------------------------------------------------------------------------------------ sources
def _write_minari_source(root: Path, episodes: list[Episode]) -> Path:
    """The CartPole episodes as a Minari dataset written by Minari (``env_spec`` CartPole-v1)."""
    from minari.data_collector import EpisodeBuffer

    buffers = [
        EpisodeBuffer(
            id=k,
            observations=ep.observations,
            actions=ep.actions,
            rewards=list(ep.rewards),
            terminations=[False] * (len(ep) - 1) + [ep.terminated],
            truncations=[False] * (len(ep) - 1) + [ep.truncated],
        )
        for k, ep in enumerate(episodes)
    ]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINARI_DATASETS_PATH", str(root))
        minari.create_dataset_from_buffers(
            "cartpole/source-v0",
            buffers,
            env="CartPole-v1",
            eval_env="CartPole-v1",
            data_format="arrow",
            algorithm_name="random",
            author="offline_prelearner tests",
            author_email="tests@example.invalid",
            code_permalink="https://example.invalid/tests/jobs/test_convert_matrix.py",
            description="CartPole rows, written by Minari",
        )
    return root / "cartpole" / "source-v0"


def _write_d4rl_source(path: Path, episodes: list[Episode]) -> Path:
    """The CartPole episodes as one D4RL file (h5py; terminals / timeouts, next_observations)."""
    import h5py

    with h5py.File(path, "w") as f:
        f["observations"] = np.concatenate([e.observations[:-1] for e in episodes])
        f["next_observations"] = np.concatenate([e.observations[1:] for e in episodes])
        f["actions"] = np.concatenate([e.actions for e in episodes])
        f["rewards"] = np.concatenate([e.rewards for e in episodes])
        term = [np.r_[np.zeros(len(e) - 1, bool), e.terminated] for e in episodes]
        trunc = [np.r_[np.zeros(len(e) - 1, bool), e.truncated] for e in episodes]
        f["terminals"], f["timeouts"] = np.concatenate(term), np.concatenate(trunc)
    return path


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Any:
    """name -> path, built once; ``shared_data`` ones only when that folder is there."""
    root = tmp_path_factory.mktemp("sources")
    cartpole = read_episodes(ROWS)
    made: dict[str, Path] = {
        "rows": ROWS,
        "minari": _write_minari_source(root / "minari", cartpole),
        "d4rl": _write_d4rl_source(root / "cartpole.hdf5", cartpole),
    }

    def get(name: str) -> Path:
        if name in made:
            return made[name]
        shared: Path = request.getfixturevalue("shared_data")
        if name == "episodes":
            return shared / "cartpole-v1_episodes_msgpack.parquet"
        return shared / "cartpole-v1_old_stack_json_uncompressed.json"

    return get


def _convert(src: Path, to: str, out: Path, **kw: Any) -> dict[str, Any]:
    stats = convert_path(src, to, out, **kw)
    assert stats["balanced"] and stats["rows_in"] == stats["rows_out"], stats
    return stats


# ------------------------------------------------------------------------------------ the matrix
@pytest.mark.parametrize("to", TARGETS)
@pytest.mark.parametrize("source", SOURCES)
def test_convert_pair(
    sources: Any,
    source: str,
    to: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    src = sources(source)
    want = read_episodes(src)
    out = tmp_path / "ns" / "out-v0"
    stats = _convert(src, to, out)
    got = read_episodes(out)
    if to == "minari":
        _check_with_minari(out, got, stats, tmp_path, monkeypatch)
        if source == "minari":  # the source's env specs are kept
            ds = minari.MinariDataset(str(out / "data"))
            assert ds.env_spec is not None and ds.env_spec.id == "CartPole-v1"
            assert ds.recover_environment().spec.id == "CartPole-v1"
            theirs = json.loads((src / "data" / "metadata.json").read_text())
            ours = json.loads((out / "data" / "metadata.json").read_text())
            assert ours["eval_env_spec"] == theirs["eval_env_spec"]
    assert any(e.extras for e in want) == (source in SHARED)  # RLlib's data has extras
    if source == "d4rl":  # D4RL has no episode ids: the reader numbers them "<file>:<k>"
        want, got = _by_order(want), _by_order(got)
    assert_same(got, want)
    if source in ROUND_TRIP:  # and back: a -> b -> a
        back = tmp_path / "ns" / "back-v0"
        _convert(out, source, back)
        assert_same(read_episodes(back), want)


def _check_with_minari(
    out: Path, ours: list[Episode], stats: dict[str, Any], root: Path, mp: pytest.MonkeyPatch
) -> None:
    """Minari's own load_dataset opens what we wrote, with the episodes our reader reads back
    (matched by the source id our writer keeps in an attr Minari ignores)."""
    import h5py

    mp.setenv("MINARI_DATASETS_PATH", str(root))
    ds = minari.load_dataset("ns/out-v0")
    assert ds.total_episodes == len(ours) and ds.total_steps == sum(len(e) for e in ours)
    with h5py.File(out / "data" / "main_data.hdf5", "r") as f:
        ids = [str(f[f"episode_{k}"].attrs.get("source_id", k)) for k in range(len(ours))]
    mine = {str(e.id): e for e in ours}
    for sid, theirs in zip(ids, ds.iterate_episodes(), strict=True):
        m = mine[sid]
        np.testing.assert_array_equal(theirs.observations, m.observations)
        np.testing.assert_array_equal(theirs.actions, m.actions)
        np.testing.assert_array_equal(theirs.rewards, m.rewards)
        assert bool(theirs.terminations[-1]) == m.terminated
        assert bool(theirs.truncations[-1]) == m.truncated


def _by_order(eps: list[Episode]) -> list[Episode]:
    """D4RL episodes in file order, renamed by position (their ids name the file)."""
    ordered = sorted(eps, key=lambda e: int(str(e.id).rsplit(":", 1)[1]))
    return [e._replace(id=str(k)) for k, e in enumerate(ordered)]


# ------------------------------------------------------------------------------------ env spec
def test_minari_env_spec_from_env_id_and_kept_through_rows(
    sources: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rows have no env spec: --env-id gives one (and the env's spaces, which the data fits);
    minari -> rows -> minari keeps the source's spec and spaces (rows' schema metadata)."""
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    stats = _convert(ROWS, "minari", tmp_path / "cart" / "given-v0", env_id="CartPole-v1")
    assert stats["env_spec"] == "CartPole-v1"
    ds = minari.load_dataset("cart/given-v0")
    env = ds.recover_environment()
    assert env.spec is not None and env.spec.id == "CartPole-v1"
    assert ds.observation_space == env.observation_space and ds.action_space == env.action_space
    source = sources("minari")
    _convert(source, "rows", tmp_path / "rows")
    _convert(tmp_path / "rows", "minari", tmp_path / "cart" / "again-v0")
    again, orig = minari.load_dataset("cart/again-v0"), minari.MinariDataset(source / "data")
    assert again.env_spec == orig.env_spec and again.env_spec is not None
    assert again.observation_space == orig.observation_space
    assert again.action_space == orig.action_space
    assert again.recover_environment().spec.id == "CartPole-v1"
    # the spec given once (rows -> episodes) rides along; Minari output then takes the env's
    # spaces (the data fits them)
    _convert(ROWS, "episodes", tmp_path / "eps", env_id="CartPole-v1")
    stats = _convert(tmp_path / "eps", "minari", tmp_path / "cart" / "later-v0")
    later = minari.load_dataset("cart/later-v0")
    assert stats["env_spec"] == "CartPole-v1" and later.observation_space == env.observation_space


def test_minari_without_env_spec_says_so(tmp_path: Path, capsys: Any) -> None:
    code = main(["convert", str(ROWS), "--to", "minari", "--out", str(tmp_path / "o"), "--json"])
    assert code == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["env_spec"] is None
    lines = [ln for ln in err.splitlines() if "env_spec" in ln]
    assert len(lines) == 1 and "--env-id" in lines[0]
    meta = json.loads((tmp_path / "o" / "data" / "metadata.json").read_text())
    assert "env_spec" not in meta


def test_cli_env_id(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "cart" / "cli-v0"
    code = main(["convert", str(ROWS), "--to", "minari", "--out", str(out),
                 "--env-id", "CartPole-v1", "--json"])  # fmt: skip
    assert code == 0 and json.loads(capsys.readouterr().out)["env_spec"] == "CartPole-v1"
    ds = minari.MinariDataset(str(out / "data"))
    assert ds.recover_environment().spec.id == "CartPole-v1"
    code = main(["convert", str(ROWS), "--to", "minari", "--out", str(tmp_path / "x"),
                 "--env-id", "NoSuchEnv-v9"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "NoSuchEnv-v9" in err and len(err.strip().splitlines()) == 1


def test_env_id_refused_for_a_rows_relayout(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="env_id"):
        convert_path(ROWS, "rows", tmp_path / "o", env_id="CartPole-v1")


def test_rows_to_episodes_resumes_per_file(tmp_path: Path) -> None:
    """rows -> episodes is a per-file job like the old-stack one: --resume reuses the units a
    failed run committed and gives the same bytes as an uninterrupted run."""
    whole = _convert(ROWS, "episodes", tmp_path / "whole")
    import offline_prelearner.jobs.convert.by_file as cv

    real = cv._commit_unit
    calls = {"n": 0}

    def failing(*a: Any, **k: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("disk full")
        return real(*a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cv, "_commit_unit", failing)
        with pytest.raises(OSError):
            convert_path(ROWS, "episodes", tmp_path / "again")
    stats = convert_path(ROWS, "episodes", tmp_path / "again", resume=True)
    assert stats["units_reused"] >= 1 and stats["episodes_written"] == whole["episodes_written"]
    for name in whole["files_written"]:
        assert (tmp_path / "again" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()


def test_converted_files_carry_no_machine_path(tmp_path: Path) -> None:
    """The env spec and spaces ride in the Parquet metadata; nothing else is added there."""
    import pyarrow.parquet as pq

    _convert(ROWS, "episodes", tmp_path / "e", env_id="CartPole-v1")
    f = next(p for p in sorted((tmp_path / "e" / "episodes").glob("*.parquet")))
    meta = pq.read_schema(f).metadata
    got = json.loads(meta[b"offline_prelearner.dataset"])
    assert json.loads(got["env_spec"])["id"] == "CartPole-v1"
    assert os.fspath(tmp_path) not in meta[b"offline_prelearner.dataset"].decode()


# ------------------------------------------------------------------------------------ composite
@pytest.mark.parametrize("dataset", ["goal/tuple-v0", "goal/dict-v0"])
def test_composite_minari_round_trips_through_rows(dataset: str, tmp_path: Path) -> None:
    """Dict / Tuple observations: Minari -> rows (struct obs / new_obs columns, as RLlib records
    Dict spaces) -> Minari gives the same episodes and the same space (a Tuple stays a Tuple);
    msgpack episodes refuse them in one line (the episodes reader does not read them)."""
    from fixtures.make_minari import record_minari_dataset

    case = record_minari_dataset(tmp_path / "src", dataset, "hdf5")
    want = read_episodes(case.path)
    _convert(case.path, "rows", tmp_path / "rows")
    assert_same(read_episodes(tmp_path / "rows"), want)
    _convert(tmp_path / "rows", "minari", tmp_path / "ns" / "back-v0")
    assert_same(read_episodes(tmp_path / "ns" / "back-v0"), want)
    back = minari.MinariDataset(str(tmp_path / "ns" / "back-v0" / "data"))
    assert back.observation_space == minari.MinariDataset(str(case.path / "data")).observation_space
    with pytest.raises(UnsupportedFormatError, match="composite"):
        convert_path(case.path, "episodes", tmp_path / "eps")


# ------------------------------------------------------------------------------------ fragments
def test_fragments_and_t_started(tmp_path: Path) -> None:
    """A fragment that starts mid-episode keeps its ``t_started`` through Minari (an attr Minari
    ignores); a not-done episode stays not done through episodes, rows and Minari (written with
    neither flag, as recorded)."""
    import pyarrow.parquet as pq

    from offline_prelearner.io.formats.rows.writer import episodes_to_rows

    base = read_episodes(ROWS)[:4]
    late = base[0].slice(3)  # steps 3.. of a terminated episode
    open_ = base[1]._replace(terminated=False, truncated=False)
    eps = [late, open_, *base[2:]]
    (tmp_path / "in").mkdir()
    pq.write_table(episodes_to_rows(eps, with_t=True), tmp_path / "in" / "part.parquet")
    want = read_episodes(tmp_path / "in")
    assert [e.t_started for e in want if str(e.id) == str(late.id)] == [3]
    _convert(tmp_path / "in", "episodes", tmp_path / "eps")
    _convert(tmp_path / "eps", "rows", tmp_path / "rows")
    assert_same(read_episodes(tmp_path / "rows"), want)
    stats = _convert(tmp_path / "in", "minari", tmp_path / "ns" / "frag-v0")
    assert stats["fragments"] == 1
    got = read_episodes(tmp_path / "ns" / "frag-v0")
    assert_same(got, want)


def test_minari_output_is_the_same_bytes_each_time(tmp_path: Path) -> None:
    for run in ("a", "b"):
        _convert(ROWS, "minari", tmp_path / run / "ns" / "x-v0", env_id="CartPole-v1")
    files = [
        json.loads((tmp_path / run / "ns" / "x-v0" / "_manifest.json").read_text())["files"]
        for run in ("a", "b")
    ]
    assert [f["sha256"] for f in files[0]] == [f["sha256"] for f in files[1]]


def test_env_spaces_only_where_the_data_fits(tmp_path: Path) -> None:
    """--env-id of an env whose spaces the data does not fit (Pendulum: 3 observations, Box
    actions): the spec is written as asked, the spaces are the data's own."""
    _convert(ROWS, "minari", tmp_path / "ns" / "p-v0", env_id="Pendulum-v1")
    ds = minari.MinariDataset(str(tmp_path / "ns" / "p-v0" / "data"))
    assert ds.env_spec is not None and ds.env_spec.id == "Pendulum-v1"
    assert ds.observation_space.shape == (4,) and ds.action_space.n == 2  # type: ignore[attr-defined]
