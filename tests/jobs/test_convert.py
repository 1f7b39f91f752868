"""``convert``: old-stack data -> rows Parquet / msgpack episodes + stats.json, read back."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import rllib_python

from offline_prelearner.cli import main
from offline_prelearner.config import ReadConfig
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.errors import DataError, DecodeError
from offline_prelearner.io.formats.episodes.reader import EpisodesReader
from offline_prelearner.io.formats.rows.reader import RowsReader
from offline_prelearner.io.formats.sample_batches.reader import SampleBatchesReader
from offline_prelearner.jobs.commit import STATS_FILE
from offline_prelearner.jobs.convert import convert_path

COMPRESSED = "cartpole-v1_old_stack_json_compressed.json"
RLLIB_PYTHON = rllib_python()
LEGACY = ReadConfig(format="sample_batches", legacy_pickle=True)


def read_back(out: Path, to: str) -> list[Episode]:
    files = sorted((out / to).glob(f"{to}-*.parquet"))  # the data lies under OUT/<to>/
    if to == "rows":
        r: Any = RowsReader(ReadConfig(format="rows"))
    else:
        r = EpisodesReader(ReadConfig(format="episodes"))
    eps = []
    for f in files:
        b = r.read(pq.read_table(f), str(f))
        assert b.ledger.balanced() and not b.ledger.rows_rejected
        eps.extend(b.episodes)
    return eps


def assert_same_episodes(got: list[Episode], want: list[Episode]) -> None:
    assert [str(e.id) for e in got] == [str(e.id) for e in want]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g.observations, w.observations)
        np.testing.assert_array_equal(g.actions, w.actions)
        np.testing.assert_array_equal(g.rewards, w.rewards)
        assert (g.terminated, g.truncated, g.t_started) == (w.terminated, w.truncated, w.t_started)
        assert sorted(g.extras) == sorted(w.extras)
        for k in w.extras:
            np.testing.assert_array_equal(g.extras[k], w.extras[k])


@pytest.mark.parametrize("to", ["rows", "episodes"])
def test_round_trip_real_file(tmp_path: Path, shared_data: Path, to: str) -> None:
    stats = convert_path(shared_data / COMPRESSED, to, tmp_path, LEGACY)
    want = SampleBatchesReader(LEGACY).read_file(shared_data / COMPRESSED).episodes
    assert_same_episodes(read_back(tmp_path, to), want)
    on_disk = json.loads((tmp_path / STATS_FILE).read_text())
    assert on_disk == stats
    assert stats["records_read"] == 12 and stats["episodes_written"] == 12
    assert stats["rows_in"] == stats["rows_out"] == 295 and stats["balanced"]
    assert stats["fragments"] == 0 and stats["rows_rejected"] == {}


def _stream(tmp_path: Path) -> Path:
    """Two files: an episode cut across them, one never ending, one bad line."""

    def rec(eid: int, ts: list[int], done: bool, base: float) -> dict[str, Any]:
        obs = [[base + t] for t in ts] + [[base + ts[-1] + 1]]
        n = len(ts)
        return {
            "type": "SampleBatch",
            "obs": obs[:-1],
            "new_obs": obs[1:],
            "actions": [1] * n,
            "rewards": [0.5] * n,
            "terminateds": [False] * (n - 1) + [done],
            "truncateds": [False] * n,
            "eps_id": [eid] * n,
            "t": ts,
        }

    d = tmp_path / "in"
    d.mkdir()
    (d / "a.json").write_text(json.dumps(rec(1, [0, 1, 2], False, 0.0)) + "\n" + "{not json\n")
    (d / "b.json").write_text(
        json.dumps(rec(1, [3, 4], True, 0.0))
        + "\n"
        + json.dumps(rec(2, [0, 1], False, 50.0))
        + "\n"
    )
    return d


@pytest.mark.parametrize("fragments", ["keep", "reject"])
def test_stitches_across_files_and_accounts_for_every_step(tmp_path: Path, fragments: str) -> None:
    stats = convert_path(
        _stream(tmp_path), "rows", tmp_path / "out", on_invalid="skip", fragments=fragments
    )
    eps = read_back(tmp_path / "out", "rows")
    assert stats["records_read"] == 4 and stats["records_rejected"] == {"bad_json": 1}
    assert stats["rows_in"] == 7 and stats["balanced"]
    by_id = {e.id: e for e in eps}
    assert len(by_id["1"]) == 5 and by_id["1"].terminated  # stitched across a.json and b.json
    if fragments == "keep":
        assert stats["fragments"] == 1 and not by_id["2"].is_done and stats["rows_out"] == 7
    else:
        assert "2" not in by_id and stats["fragments_rejected"] == 1
        # the malformed line held no countable steps: 0 rows under its reason
        assert stats["rows_rejected"] == {"bad_json": 0, "not_done": 2}
        assert stats["rows_out"] == 5


def test_raise_names_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="line 2") as info:
        convert_path(_stream(tmp_path), "rows", tmp_path / "out")
    assert info.value.where.file.endswith("a.json")


def test_quarantine_writes_refused_records(tmp_path: Path) -> None:
    stats = convert_path(_stream(tmp_path), "episodes", tmp_path / "out", on_invalid="quarantine")
    q = pq.read_table(stats["quarantine_file"])
    assert q.column("_reject_reason").to_pylist() == ["bad_json"]


def test_progress_is_reported_per_file(tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    convert_path(
        _stream(tmp_path),
        "rows",
        tmp_path / "o",
        on_invalid="skip",
        progress=lambda i, n, f, steps: seen.append((i, n)),
    )
    assert seen == [(1, 2), (2, 2)]


def test_cli_convert(tmp_path: Path, shared_data: Path, capsys: Any) -> None:
    out = tmp_path / "out"
    assert main(["convert", str(shared_data / COMPRESSED), "--to", "rows", "--out", str(out)]) == 2
    assert "--legacy-pickle" in capsys.readouterr().err
    argv = ["convert", str(shared_data / COMPRESSED), "--to", "episodes", "--out", str(out)]
    assert main([*argv, "--legacy-pickle", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["episodes_written"] == 12 and (out / STATS_FILE).is_file()


def test_compressed_without_opt_in_is_an_error_under_skip(
    tmp_path: Path, shared_data: Path
) -> None:
    with pytest.raises(DecodeError, match="--legacy-pickle"):
        convert_path(shared_data / COMPRESSED, "rows", tmp_path, on_invalid="skip")


# ---------------------------------------------------------------------------------------------
# RLlib 2.60 reads what we wrote (its own venv, a subprocess; never imported here)
# ---------------------------------------------------------------------------------------------
_RLLIB_READ = textwrap.dedent(
    """
    import json, sys, types
    import msgpack, msgpack_numpy as mnp, pyarrow.parquet as pq
    import ray.data
    from ray.data.block import BlockAccessor
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode
    from ray.rllib.offline.offline_prelearner import OfflinePreLearner
    rows, eps = sys.argv[1], sys.argv[2]
    table = pq.read_table(rows)
    batch = BlockAccessor.for_block(table).to_batch_format("numpy")
    this = types.SimpleNamespace(config=AlgorithmConfig())
    out = OfflinePreLearner._map_to_episodes(this, batch, to_numpy=True)["episodes"]
    row_eps = [[str(e.id_), len(e), float(sum(e.get_rewards()))] for e in out]
    items = pq.read_table(eps).column("item").to_pylist()
    dec = [msgpack.unpackb(i, object_hook=mnp.decode) for i in items]
    full = [SingleAgentEpisode.from_state(s) for s in dec]
    ep_eps = [[str(e.id_), len(e), float(sum(e.get_rewards())), e.is_terminated] for e in full]
    print(json.dumps({"rows": row_eps, "episodes": ep_eps}))
    """
)


@pytest.mark.slow
def test_rllib_reads_converted_output(tmp_path: Path, shared_data: Path) -> None:
    if not RLLIB_PYTHON.is_file():
        pytest.skip(f"no RLlib venv at {RLLIB_PYTHON} (set RLLIB_PYTHON)")
    convert_path(shared_data / COMPRESSED, "rows", tmp_path / "rows", LEGACY)
    convert_path(shared_data / COMPRESSED, "episodes", tmp_path / "eps", LEGACY)
    script = tmp_path / "read.py"
    script.write_text(_RLLIB_READ)
    proc = subprocess.run(
        [
            str(RLLIB_PYTHON),
            str(script),
            str(tmp_path / "rows" / "rows" / "rows-00000-00000.parquet"),
            str(tmp_path / "eps" / "episodes" / "episodes-00000-00000.parquet"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    want = SampleBatchesReader(LEGACY).read_file(shared_data / COMPRESSED).episodes
    assert got["episodes"] == [[str(e.id), len(e), float(e.rewards.sum()), True] for e in want]
    # RLlib maps every row to its own 1-step episode: 295 of them, rewards preserved.
    assert len(got["rows"]) == sum(len(e) for e in want)
    assert sum(r[2] for r in got["rows"]) == pytest.approx(sum(e.rewards.sum() for e in want))
