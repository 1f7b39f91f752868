"""Column schemas: presets, JSON round trips, loading, checks with one complete error, detection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO

from offline_prelearner.episodes.columns import CANONICAL_FIELDS
from offline_prelearner.errors import ConfigError, DecodeError, SchemaError
from offline_prelearner.io.schema import (
    ColumnSchema,
    available_schemas,
    detect_schema,
    load_schema,
    schemas_dir,
)

RLLIB_ROW_COLUMNS = [
    "eps_id",
    "agent_id",
    "module_id",
    "obs",
    "actions",
    "rewards",
    "new_obs",
    "terminateds",
    "truncateds",
    "weights_seq_no",
]


def test_presets_exist_and_load() -> None:
    # The presets are the package data offline_prelearner.schemas: the repository's schemas/
    # folder (mapped in pyproject.toml), file for file; the wheel test checks an installed wheel.
    repo = REPO / "schemas"
    assert sorted(available_schemas()) == sorted(p.stem for p in repo.glob("*.json"))
    for p in repo.glob("*.json"):
        assert (schemas_dir() / p.name).read_text(encoding="utf-8") == p.read_text("utf-8")
    assert set(available_schemas()) >= {
        "rllib",
        "rllib_compressed",
        "rllib_old_stack",
        "d4rl",
        "minari_transitions",
    }
    for name in available_schemas():
        s = load_schema(name)
        assert s.name == name and set(s.columns) == set(CANONICAL_FIELDS)


@pytest.mark.parametrize(
    "name", ["rllib", "rllib_compressed", "rllib_old_stack", "d4rl", "minari_transitions"]
)
def test_json_round_trip(name: str) -> None:
    s = load_schema(name)
    again = ColumnSchema.from_json(s.to_json())
    assert again == s and hash(again) == hash(s)
    assert ColumnSchema.from_json(json.loads(s.to_json())) == s


def test_preset_contents() -> None:
    rllib = load_schema(None)
    assert rllib == load_schema("rllib")
    assert rllib.column("t") == "t" and "t" not in rllib.required and not rllib.compression
    comp = load_schema("rllib_compressed")
    assert dict(comp.compression) == {"obs": "legacy_pickle", "new_obs": "legacy_pickle"}
    old = load_schema("rllib_old_stack")
    assert old.column("agent_id") == "agent_index" and old.dones == "dones"
    d4rl = load_schema("d4rl")
    assert d4rl.column("eps_id") is None and d4rl.column("terminateds") == "terminals"
    assert d4rl.column("truncateds") == "timeouts" and d4rl.column("new_obs") == "next_observations"
    minari = load_schema("minari_transitions")
    assert (
        minari.column("eps_id") == "episode_id" and minari.column("terminateds") == "terminations"
    )


def test_load_from_path_and_instance(tmp_path: Path) -> None:
    custom = ColumnSchema(
        name="mine",
        columns={"eps_id": "episode", "obs": "o", "new_obs": "o2", "actions": "a", "rewards": "r"},
        required=("eps_id", "obs"),
        compression={"o": "lz4_msgpack"},
    )
    path = tmp_path / "mine.json"
    path.write_text(custom.to_json())
    assert load_schema(path) == custom == load_schema(str(path)) == load_schema(custom)
    assert load_schema(custom.to_dict()) == custom


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown schema preset 'nope'.*rllib"):
        load_schema("nope")
    with pytest.raises(ConfigError, match="does not exist"):
        load_schema(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_schema(bad)
    bad.write_text(json.dumps({"name": "x", "columns": {"obs": "o"}, "colums": {}}))
    with pytest.raises(ConfigError, match="unknown schema keys"):
        load_schema(bad)
    with pytest.raises(ConfigError, match="ColumnSchema"):
        load_schema(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"columns": {"observation": "o"}}, "unknown fields"),
        ({"columns": {"obs": "x", "new_obs": "x"}}, "mapped to both"),
        ({"columns": {"obs": "o"}, "compression": {"o": "zip"}}, "compression"),
        ({"columns": {"obs": "o"}, "required": ("rewards",)}, "mapped to no column"),
        ({"columns": {"obs": 3}}, "column name or null"),
        ({"columns": {"obs": "o"}, "dones": "o"}, "dones"),
    ],
)
def test_invalid_schemas(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ColumnSchema(name="bad", **kwargs)


def test_check_lists_every_missing_column_with_closest_names() -> None:
    s = load_schema("rllib")
    names = ["eps_id", "observations", "action", "rewards", "next_obs", "terminateds"]
    with pytest.raises(SchemaError) as exc:
        s.check(names, source="f.parquet")
    msg = str(exc.value)
    assert exc.value.reason == "missing_columns" and exc.value.where.file == "f.parquet"
    for missing, close in (("obs", "observations"), ("actions", "action"), ("new_obs", "next_obs")):
        assert f"'{missing}'" in msg and f"'{close}'" in msg
    assert "'truncateds'" in msg
    assert "4 column(s)" in msg
    s.check(RLLIB_ROW_COLUMNS)  # complete: no error


def test_check_without_similar_names() -> None:
    s = ColumnSchema(name="s", columns={"obs": "pixels"}, required=("obs",))
    with pytest.raises(SchemaError, match="'pixels' \\(field 'obs'\\): no similar column"):
        s.check(["a", "b"])


def test_check_names_renamed_dataset_column() -> None:
    with pytest.raises(SchemaError, match="'terminals' \\(field 'terminateds'\\)"):
        load_schema("d4rl").check(["observations", "actions", "rewards", "next_observations"])


def test_dones_stand_in_for_terminateds() -> None:
    old = load_schema("rllib_old_stack")
    base = ["eps_id", "obs", "new_obs", "actions", "rewards"]
    assert old.missing([*base, "dones"]) == []
    assert old.missing(base) == ["terminateds"]


def test_extras_keep_unmapped_and_skip_ignored() -> None:
    s = load_schema("rllib")
    assert s.extras([*RLLIB_ROW_COLUMNS, "__index_level_0__", "logp"]) == ["weights_seq_no", "logp"]
    assert load_schema("rllib_old_stack").extras(["dones", "obs", "action_logp", "unroll_id"]) == [
        "action_logp",
        "unroll_id",
    ]


def test_legacy_pickle_needs_consent() -> None:
    comp = load_schema("rllib_compressed")
    with pytest.raises(DecodeError, match="--legacy-pickle") as exc:
        comp.check_codecs(False, RLLIB_ROW_COLUMNS, source="c.parquet")
    assert exc.value.reason == "legacy_pickle_disabled" and "legacy_pickle=True" in str(exc.value)
    comp.check_codecs(True, RLLIB_ROW_COLUMNS)
    comp.check_codecs(False, ["eps_id", "rewards"])  # the compressed columns are absent
    load_schema("rllib").check_codecs(False)


def test_detect_schema_by_names() -> None:
    assert detect_schema(RLLIB_ROW_COLUMNS).name == "rllib"
    d4rl = ["observations", "actions", "rewards", "terminals", "timeouts", "next_observations"]
    assert detect_schema(d4rl).name == "d4rl"
    minari = [
        "episode_id",
        "observations",
        "next_observations",
        "actions",
        "rewards",
        "terminations",
        "truncations",
    ]
    assert detect_schema(minari).name == "minari_transitions"
    old = [
        "eps_id",
        "agent_index",
        "obs",
        "new_obs",
        "actions",
        "rewards",
        "dones",
        "t",
        "unroll_id",
    ]
    assert detect_schema(old).name == "rllib_old_stack"
    assert detect_schema(["a", "b"]) is None


def test_detect_schema_by_arrow_types() -> None:
    plain = pa.schema(
        [
            (n, pa.list_(pa.float32()) if n in ("obs", "new_obs") else pa.int64())
            for n in RLLIB_ROW_COLUMNS
        ]
    )
    text = pa.schema(
        [(n, pa.string() if n in ("obs", "new_obs") else pa.int64()) for n in RLLIB_ROW_COLUMNS]
    )
    assert detect_schema(plain).name == "rllib"
    assert detect_schema(text).name == "rllib_compressed"


def test_detect_schema_on_rllib_files(shared_data: Path) -> None:
    un = pq.read_schema(shared_data / "cartpole-v1_rows_uncompressed.parquet")
    comp = pq.read_schema(shared_data / "cartpole-v1_rows_compressed.parquet")
    assert detect_schema(un).name == "rllib"
    assert detect_schema(comp).name == "rllib_compressed"
