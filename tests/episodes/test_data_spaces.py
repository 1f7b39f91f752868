"""Spaces declared inside the data are enforced like the config's.

Msgpack episode records (RLlib's ``output_write_episodes``) carry their observation and action
spaces. With no space in the config, those are checked with the same vectorized checks, reasons
(``out_of_space``) and counts as a configured space: refused under ``raise`` in one line naming
the file, episode and step, counted under ``skip``. Where the config declares a space, the
config's wins.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from offline_prelearner.cli import main
from offline_prelearner.config import ValidateConfig
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.episodes.validate import Validator
from offline_prelearner.errors import EpisodeValidationError
from offline_prelearner.io.codec import packb, unpackb
from offline_prelearner.io.formats.episodes.reader import EpisodesReader, episodes_to_table

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(2)


def _episodes(bad_action=None, bad_obs=None):
    rng = np.random.default_rng(0)
    eps = [
        Episode(
            id=f"ep{i}",
            observations=rng.uniform(-1, 1, (11, 4)).astype(np.float32),
            actions=rng.integers(0, 2, 10),
            rewards=np.ones(10),
            terminated=True,
        )
        for i in range(5)
    ]
    if bad_action is not None:
        eps[2].actions[3] = bad_action
    if bad_obs is not None:
        eps[1].observations[6, 2] = bad_obs
    return eps


def _write(tmp_path: Path, table: pa.Table) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(table, data / "part-000.parquet")
    return data


def _process(data: Path, out: Path, *extra: str, capsys) -> tuple[int, str, str]:
    try:
        rc = main(["process", str(data), "--out", str(out), "--json", *extra])
    except SystemExit as e:  # argparse-style exits carry the code
        rc = int(e.code or 0)
    got = capsys.readouterr()
    return rc, got.out, got.err


def test_action_outside_the_records_discrete_space_is_refused_then_counted(tmp_path, capsys):
    data = _write(tmp_path, episodes_to_table(_episodes(bad_action=5), OBS, ACT))
    rc, _, err = _process(data, tmp_path / "out", capsys=capsys)
    assert rc == 2, err
    line = err.strip()
    assert "\n" not in line and "Traceback" not in line
    for part in ("not in Discrete(2)", "part-000.parquet", "'actions'", "episode 'ep2'", "t=3"):
        assert part in line, (part, line)
    assert not (tmp_path / "out" / "_manifest.json").exists()
    rc, out, err = _process(data, tmp_path / "skip", "--on-invalid", "skip", capsys=capsys)
    assert rc == 0, err
    summary = json.loads(out)
    assert summary["rows_rejected"] == {"out_of_space": 1}
    assert (summary["rows_in"], summary["episodes_kept"], summary["samples_written"]) == (5, 4, 40)


def test_observation_outside_the_records_box_is_counted_like_a_configured_one(tmp_path):
    """The data's space and the same space in the config give the same ledger, reason and
    error (what the vectorized pass and the per-episode check decide)."""
    table = episodes_to_table(_episodes(bad_obs=3.5, bad_action=1), OBS, ACT)
    ledgers, errors = [], []
    configured = ValidateConfig(observation_space=OBS, action_space=ACT)
    for cfg in (ValidateConfig(), configured):
        batch = Validator(cfg, "skip").validate(EpisodesReader().read(table, "f.parquet"))
        ledgers.append(batch.ledger)
        errors.append([(r.error.reason, r.error.where) for r in batch.rejections])
    assert ledgers[0] == ledgers[1] and errors[0] == errors[1]
    assert ledgers[0].rows_rejected == {"out_of_space": 1}
    ((_reason, where),) = errors[0]
    assert (where.episode_id, where.column, where.timestep) == ("ep1", "obs", 6)


def test_the_configs_space_wins_where_both_exist(tmp_path):
    table = episodes_to_table(_episodes(bad_action=5), OBS, ACT)
    wide = ValidateConfig(action_space=gym.spaces.Discrete(6))
    batch = Validator(wide).validate(EpisodesReader().read(table))
    assert batch.ledger.rows_rejected == {} and len(batch.episodes) == 5
    narrow = ValidateConfig(action_space=gym.spaces.Discrete(2, start=0))
    with pytest.raises(EpisodeValidationError, match=r"not in Discrete\(2\)"):
        Validator(narrow).validate(EpisodesReader().read(table))
    # records without spaces: nothing is declared, nothing is checked
    plain = episodes_to_table(_episodes(bad_action=5))
    batch = Validator().validate(EpisodesReader().read(plain))
    assert batch.ledger.rows_rejected == {} and len(batch.episodes) == 5


def test_records_on_the_general_path_declare_their_spaces_too():
    """A record the fast decoder declines (here: a layout it learns nothing from, a list of
    actions) still declares its spaces."""
    eps = _episodes(bad_action=5)
    items = []
    for ep in eps:
        state = ep.get_state(OBS, ACT)
        state["actions"]["data"] = [int(a) for a in state["actions"]["data"]]
        state["actions"]["finalized"] = False
        items.append(packb(state))
    table = pa.table({"item": pa.array(items, pa.binary())})
    reader = EpisodesReader()
    batch = reader.read(table)
    assert batch.declared_spaces == (OBS, ACT)
    with pytest.raises(EpisodeValidationError, match="episode 'ep2', t=3"):
        Validator().validate(batch)


def test_rllib_records_with_an_action_outside_their_space(tmp_path, shared_data, capsys):
    """RLlib 2.60's own msgpack file: as written, every episode passes (no warning); with one
    action changed to 7, the record's Discrete(2) refuses it, or counts it under skip."""
    table = pq.read_table(shared_data / "cartpole-v1_episodes_msgpack.parquet")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batch = Validator().validate(EpisodesReader().read(table))
    assert batch.ledger.rows_rejected == {} and batch.declared_spaces[1] == gym.spaces.Discrete(2)
    items = [cell.as_py() for cell in table.column("item")]
    state = unpackb(items[4])
    state["actions"]["data"][2] = 7
    items[4] = packb(state)
    data = _write(tmp_path, pa.table({"item": pa.array(items, pa.binary())}))
    rc, _, err = _process(data, tmp_path / "out", capsys=capsys)
    assert rc == 2 and f"episode {state['id_']!r}" in err and "Discrete(2)" in err, err
    t = state["t_started"] + 2
    assert f"t={t}" in err and "part-000.parquet" in err
    rc, out, err = _process(data, tmp_path / "skip", "--on-invalid", "skip", capsys=capsys)
    assert rc == 0 and json.loads(out)["rows_rejected"] == {"out_of_space": 1}, err


def test_rows_parquet_convert_wrote_carries_its_spaces(tmp_path, capsys):
    """``convert`` writes the spaces into the Parquet metadata of the rows it writes; processing
    those rows enforces them (an action changed to 5 after the conversion is refused in one
    line naming file, episode and step, and counted under skip)."""
    data = _write(tmp_path, episodes_to_table(_episodes(), OBS, ACT))
    try:
        main(["convert", str(data), "--to", "rows", "--out", str(tmp_path / "rows")])
    except SystemExit as e:
        assert not e.code
    capsys.readouterr()
    (path,) = (tmp_path / "rows" / "rows").glob("*.parquet")  # OUT/rows: the data folder
    table = pq.read_table(path)
    assert table.schema.metadata and b"offline_prelearner.dataset" in table.schema.metadata
    ids = table.column("eps_id").to_pylist()
    actions = table.column("actions").to_numpy().copy()
    row = ids.index("ep3") + 4
    actions[row] = 5
    i = table.schema.get_field_index("actions")
    table = table.set_column(i, table.schema.field(i), pa.array(actions))
    edited = tmp_path / "edited"  # beside the committed output (its manifest lists sizes)
    edited.mkdir()
    pq.write_table(table, edited / path.name)  # the schema metadata goes with it
    rc, _, err = _process(edited, tmp_path / "out", capsys=capsys)
    assert rc == 2, err
    for part in ("not in Discrete(2)", path.name, "episode 'ep3'", "t=4"):
        assert part in err, (part, err)
    rc, out, err = _process(edited, tmp_path / "skip", "--on-invalid", "skip", capsys=capsys)
    assert rc == 0, err
    assert json.loads(out)["rows_rejected"] == {"out_of_space": 10}  # a row is a step here
