"""``ConvertConfig``: a conversion's settings, checked where they are made, and the keyword form
``convert_path`` building the same config (its pinned signature unchanged)."""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

import offline_prelearner as op
from offline_prelearner.config import ReadConfig
from offline_prelearner.errors import ConfigError
from offline_prelearner.jobs.convert import ConvertConfig, convert, convert_path

EPISODES = REPO / "datasets" / "cartpole-v1" / "episodes"


def test_defaults_read_auto_and_write_rllib_rows() -> None:
    c = ConvertConfig("rows")
    assert c.read.format == "auto" and c.layout == "rllib" and c.fragments == "keep"
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.to = "episodes"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("to", "csv"),
        ("fragments", "drop"),
        ("dones", "maybe"),
        ("rows_per_file", 0),
        ("rows_per_file", True),
        ("episodes_per_file", 1.5),
        ("layout", "zip"),
        ("env_id", 3),
        ("dataset_id", ["ns/x"]),
        ("read", {"format": "auto"}),
    ],
)
def test_each_setting_is_checked_naming_it(field: str, value: Any) -> None:
    kwargs: dict[str, Any] = {"to": "rows", field: value}
    with pytest.raises(ConfigError, match=field):
        ConvertConfig(**kwargs)


def test_convert_path_keeps_its_keywords_and_builds_the_config(tmp_path: Path) -> None:
    params = inspect.signature(op.convert_path).parameters
    assert list(params)[:6] == ["path", "to", "out_dir", "read_config", "on_invalid", "progress"]
    assert op.convert_path is convert_path
    by_keywords = convert_path(EPISODES, "rows", tmp_path / "a", on_invalid="skip", layout="fast")
    config = ConvertConfig("rows", ReadConfig(format="auto", on_invalid="skip"), layout="fast")
    by_config = convert(EPISODES, tmp_path / "b", config)
    for stats in (by_keywords, by_config):
        stats.pop("out_dir"), stats.pop("seconds"), stats.pop("steps_per_s")
    assert by_keywords == by_config
    manifests = [json.loads((tmp_path / d / "_manifest.json").read_text()) for d in "ab"]
    assert manifests[0]["files"] == manifests[1]["files"]


def test_convert_path_refuses_a_bad_keyword_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="rows_per_file"):
        convert_path(EPISODES, "rows", tmp_path / "o", rows_per_file=0)
    assert not (tmp_path / "o").exists()
