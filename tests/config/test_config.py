"""The config leaf: one validator per setting, shared by the config and the objects it builds.

``buffer.eps`` and ``sample.n_step`` were each checked twice with different rules: ``buffer.eps=0``
passed :class:`BufferConfig` and failed on the first batch inside a worker, in the prioritized
sampler. Both now follow :func:`check_eps` / :func:`check_n_step`, so the config and the object
agree on every value.

The config is typed: the settings that name a choice are ``Literal`` types with one validator
each; a kind's own settings live in the kind's section (``buffer.prioritized``, ``buffer.mixin``,
``sample.sequence``), present exactly when the kind is chosen; ``on_invalid`` is one field
(``read.on_invalid``); the spellings of earlier versions load, read in one place.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any, get_args

import numpy as np
import pytest

from offline_prelearner.config import (
    BUFFER_KINDS,
    ENGINES,
    LAYOUTS,
    MAX_N_STEP,
    ON_INVALID,
    SAMPLE_UNITS,
    BufferConfig,
    BufferKind,
    Engine,
    Layout,
    MixInConfig,
    OnInvalid,
    PreLearnerConfig,
    PrioritizedConfig,
    RayConfig,
    SampleConfig,
    SampleUnitKind,
    SequenceConfig,
    ValidateConfig,
    check_bool,
    check_buffer_kind,
    check_choice,
    check_engine,
    check_eps,
    check_float,
    check_int,
    check_layout,
    check_n_step,
    check_on_invalid,
    check_sample_unit,
)
from offline_prelearner.episodes.ledger import EpisodeBatch
from offline_prelearner.episodes.validate import Validator
from offline_prelearner.errors import ConfigError
from offline_prelearner.replay.build import build_buffer
from offline_prelearner.replay.samplers import Prioritized
from offline_prelearner.replay.units import NStep


def _accepts(make: Any) -> bool:
    try:
        make()
    except ConfigError:
        return False
    return True


PRIORITIZED = {"buffer.kind": "prioritized"}


@pytest.mark.parametrize(
    "eps", [0, 0.0, -1e-6, 1e-6, 1e-12, 0.5, 1, 1.5, math.nan, math.inf, True, "1e-6", None]
)
def test_buffer_eps_and_the_prioritized_sampler_agree(eps: Any) -> None:
    by_config = _accepts(lambda: PreLearnerConfig().with_updates({**PRIORITIZED, "eps": eps}))
    by_sampler = _accepts(lambda: Prioritized(eps=eps))
    assert by_config == by_sampler, (eps, by_config, by_sampler)


def test_buffer_eps_zero_is_refused_where_it_is_set() -> None:
    # p = (|td| + eps) ** alpha must stay positive: eps = 0 is an error of the config, not of
    # the first batch in a worker.
    with pytest.raises(ConfigError, match=r"buffer\.prioritized\.eps must be a finite number > 0"):
        PreLearnerConfig().with_updates({**PRIORITIZED, "buffer.prioritized.eps": 0})
    with pytest.raises(ConfigError, match="eps must be a finite number > 0"):
        Prioritized(eps=0)


def test_eps_alpha_underflow_is_refused_by_both() -> None:
    with pytest.raises(ConfigError, match="underflows"):
        PreLearnerConfig().with_updates({**PRIORITIZED, "buffer.eps": 1e-300, "alpha": 10.0})
    with pytest.raises(ConfigError, match="underflows"):
        Prioritized(alpha=10.0, eps=1e-300)


def test_a_prioritized_config_builds_its_sampler() -> None:
    config = PreLearnerConfig().with_updates({"buffer.kind": "prioritized", "buffer.eps": 1e-3})
    buf = build_buffer(config, "default_policy")
    assert buf.sampler.eps == pytest.approx(1e-3)


@pytest.mark.parametrize(
    "n",
    [1, 3, MAX_N_STEP, MAX_N_STEP + 1, 0, -1, 1.5, True, "3", [1, 3], (2, 2), [3, 1], [0, 2],
     [1, MAX_N_STEP + 1], [1], [1, 2, 3], [True, 2], np.int64(4)],
)  # fmt: skip
def test_sample_n_step_and_the_n_step_unit_agree(n: Any) -> None:
    by_config = _accepts(lambda: PreLearnerConfig().with_updates({"sample.n_step": n}))
    by_unit = _accepts(lambda: NStep(n, 0.9))
    assert by_config == by_unit, (n, by_config, by_unit)


def test_n_step_is_normalized_the_same_way() -> None:
    assert check_n_step("n", [2, 5]) == (2, 5) == NStep([2, 5], 0.9).n  # type: ignore[arg-type]
    assert PreLearnerConfig().with_updates({"n_step": [2, 5]}).sample.n_step == (2, 5)
    assert type(check_n_step("n", np.int64(3))) is int


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: check_int("a.b", 0, 1, 5), r"a\.b must be an integer in \[1, 5\], found 0"),
        (lambda: check_int("a.b", True, 0, 5), r"a\.b must be an integer"),
        (lambda: check_float("a.b", 2.0, 0, 1), r"a\.b must be a number in \[0, 1\], found 2\.0"),
        (lambda: check_float("a.b", 0, 0, 1, lo_open=True), r"a\.b must be a number in \(0, 1\]"),
        (lambda: check_float("a.b", False, 0, 1), "found False"),
        (lambda: check_bool("a.b", 1), r"a\.b must be true or false, found 1"),
        (lambda: check_choice("a.b", "z", ("x", "y")), r"a\.b must be one of \('x', 'y'\)"),
        (lambda: check_on_invalid("ignore"), "on_invalid must be one of"),
        (lambda: check_eps("e", "x"), "e must be a number, found 'x'"),
        (lambda: check_n_step("n", [3, 1]), r"n range needs 1 <= lo <= hi"),
    ],
)
def test_validators_name_the_setting_the_rule_and_the_value(call: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        call()


def test_validators_return_the_value() -> None:
    assert check_int("a", None, 0, 1, none_ok=True) is None
    assert check_float("a", 1, 0, 2) == 1.0 and isinstance(check_float("a", 1, 0, 2), float)
    assert check_float("a", None, 0, 1, none_ok=True) is None
    assert check_on_invalid("skip") == "skip"


def test_on_invalid_is_one_field_that_the_reader_and_the_validator_take() -> None:
    config = PreLearnerConfig()
    assert isinstance(config.validate, ValidateConfig) and config.validate.require_done is False
    assert "on_invalid" not in {f.name for f in dataclasses.fields(ValidateConfig)}
    assert config.read.on_invalid == "raise"
    # Every spelling lands in read.on_invalid: flat, the field, and validate's old one.
    for key in ("on_invalid", "read.on_invalid", "validate.on_invalid"):
        assert config.with_updates({key: "skip"}).read.on_invalid == "skip"
    assert PreLearnerConfig.from_dict({"read": {"on_invalid": "skip"}}).read.on_invalid == "skip"
    # validate.on_invalid given alone keeps the config's default read section (format auto).
    moved = PreLearnerConfig.from_dict({"validate": {"on_invalid": "skip"}}).read
    assert moved.on_invalid == "skip" and moved.format == "auto"
    same = {"read": {"on_invalid": "skip"}, "validate": {"on_invalid": "skip"}}
    assert PreLearnerConfig.from_dict(same).read.on_invalid == "skip"  # what to_dict once wrote
    with pytest.raises(ConfigError, match=r"validate\.on_invalid='skip' contradicts read\.on_"):
        PreLearnerConfig.from_dict({**same, "read": {"on_invalid": "raise"}})
    # The validator is given the policy beside its checks (the prelearner passes read.on_invalid).
    validator = Validator(
        config.validate, config.with_updates({"on_invalid": "skip"}).read.on_invalid
    )
    assert validator.on_invalid == "skip"
    with pytest.raises(ConfigError, match="on_invalid must be one of"):
        Validator(config.validate, "ignore")  # type: ignore[arg-type]


def test_the_data_carries_no_policy() -> None:
    assert not hasattr(EpisodeBatch(), "on_invalid")
    with pytest.raises(TypeError):
        EpisodeBatch(on_invalid="skip")  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("validate.min_length", -1, r"validate\.min_length must be an integer in \[0, "),
        ("validate.require_done", "yes", r"validate\.require_done must be true or false"),
        ("read.on_invalid", "ignore", r"read\.on_invalid must be one of"),
        ("sample.unit", "step", r"sample\.unit must be one of \('transition', 'sequence'\)"),
        ("buffer.kind", "fifo", r"buffer\.kind must be one of \('uniform', 'prioritized', 'mix"),
        ("ray.batch_size", "big", r"ray\.batch_size must be 'auto', null or an integer in"),
        ("ray.batch_size", 0, r"ray\.batch_size must be an integer in \[1, "),
        ("buffer.mixin.replay_ratio", 2.0, r"buffer\.mixin\.replay_ratio must be a number"),
        ("ray.read", "disk", r"ray\.read must be one of"),
        ("read.limits", {"max_message_bytes": 0}, r"read\.limits\.max_message_bytes must be"),
    ],
)
def test_config_errors_name_the_field(field: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PreLearnerConfig().with_updates({field: value})


# ------------------------------------------------------------------------------------------------
# Literal types: what mypy sees, the run-time choices and one validator each
# ------------------------------------------------------------------------------------------------
LITERALS = [
    (BufferKind, BUFFER_KINDS, check_buffer_kind, "buffer.kind"),
    (SampleUnitKind, SAMPLE_UNITS, check_sample_unit, "sample.unit"),
    (Engine, ENGINES, check_engine, "engine"),
    (Layout, LAYOUTS, check_layout, "layout"),
    (OnInvalid, ON_INVALID, check_on_invalid, "on_invalid"),
]


@pytest.mark.parametrize(
    ("alias", "choices", "check", "label"), LITERALS, ids=lambda x: str(x)[:20]
)
def test_each_literal_has_its_choices_and_one_validator(
    alias: Any, choices: tuple[str, ...], check: Any, label: str
) -> None:
    assert get_args(alias) == choices
    for choice in choices:
        assert check(choice) == choice
    for bad in ("nope", None, 1, choices[0].upper()):
        with pytest.raises(ConfigError, match=rf"^{label} must be one of .*{choices[-1]}.*found"):
            check(bad)


def test_ray_batch_size_is_an_int_auto_or_none() -> None:
    assert RayConfig(batch_size=None).rows_per_batch is None
    assert RayConfig(batch_size=512).rows_per_batch == 512
    assert RayConfig().rows_per_batch == 4096  # "auto"
    for bad in ("AUTO", "4096", True, 1.5):
        with pytest.raises(ConfigError, match=r"ray\.batch_size must be"):
            RayConfig(batch_size=bad)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------
# Tagged sections: a kind's settings live in the kind's section
# ------------------------------------------------------------------------------------------------
def test_a_kind_section_is_present_exactly_when_its_kind_is_chosen() -> None:
    assert BufferConfig().prioritized is None and BufferConfig().mixin is None
    assert BufferConfig(kind="prioritized").prioritized == PrioritizedConfig()
    assert BufferConfig(kind="mixin").mixin == MixInConfig()
    assert BufferConfig(kind="reservoir").prioritized is None
    assert SampleConfig().sequence is None
    assert SampleConfig(unit="sequence").sequence == SequenceConfig()
    built = BufferConfig(kind="prioritized", prioritized={"alpha": 0.7})  # type: ignore[arg-type]
    assert built.prioritized == PrioritizedConfig(alpha=0.7)


@pytest.mark.parametrize(
    ("updates", "names"),
    [
        ({"buffer.prioritized.alpha": 0.7}, ("buffer.prioritized", "buffer.kind is 'uniform'")),
        ({"alpha": 0.7}, ("buffer.prioritized", "buffer.kind is 'uniform'")),
        ({"buffer.alpha": 0.7}, ("buffer.alpha", "buffer.kind is 'uniform'")),
        (
            {"buffer.kind": "mixin", "buffer.prioritized": {"beta": 1.0}},
            ("buffer.prioritized", "buffer.kind is 'mixin'"),
        ),
        ({"buffer.kind": "prioritized", "replay_ratio": 0.9}, ("buffer.mixin", "'prioritized'")),
        ({"sample.sequence.seq_len": 8}, ("sample.sequence", "sample.unit is 'transition'")),
        ({"seq_len": 8}, ("sample.sequence", "sample.unit is 'transition'")),
        ({"sample.burn_in": 4}, ("sample.burn_in", "sample.unit is 'transition'")),
    ],
)
def test_a_kind_setting_for_another_kind_is_one_line_naming_both(
    updates: dict[str, Any], names: tuple[str, str]
) -> None:
    with pytest.raises(ConfigError) as e:
        PreLearnerConfig().with_updates(updates)
    message = str(e.value)
    assert "\n" not in message and all(n in message for n in names), message


def test_every_spelling_of_a_kind_setting_lands_in_its_section() -> None:
    base = PreLearnerConfig()
    spellings = [
        {"buffer.kind": "prioritized", "buffer.prioritized.alpha": 0.7},
        {"buffer.kind": "prioritized", "buffer.prioritized": {"alpha": 0.7}},
        {"buffer.kind": "prioritized", "alpha": 0.7},  # --set alpha=0.7
        {"buffer.kind": "prioritized", "buffer.alpha": 0.7},  # the old field
    ]
    for updates in spellings:
        assert base.with_updates(updates).buffer.prioritized == PrioritizedConfig(alpha=0.7)
    mixin = base.with_updates({"kind": "mixin", "replay_ratio": 0.25}).buffer
    assert mixin.mixin == MixInConfig(replay_ratio=0.25) and mixin.prioritized is None
    seq = base.with_updates({"unit": "sequence", "seq_len": 7, "sample.burn_in": 2}).sample
    assert seq.sequence == SequenceConfig(seq_len=7, burn_in=2)
    # Merged over what is there; switching kind drops the old kind's section.
    prio = base.with_updates(spellings[0])
    assert prio.with_updates({"beta": 0.9}).buffer.prioritized == PrioritizedConfig(0.7, 0.9)
    assert prio.with_updates({"buffer.kind": "uniform"}).buffer.prioritized is None
    with pytest.raises(ConfigError, match=r"buffer\.alpha and buffer\.prioritized\.alpha disagree"):
        base.with_updates({**spellings[0], "buffer.alpha": 0.5})


def test_a_config_an_earlier_version_saved_still_loads(tmp_path: Any) -> None:
    """Earlier versions wrote every kind's fields, flat, into every saved config (and
    ``validate.on_invalid`` beside ``read``'s): at their defaults they say nothing."""
    old = {
        "read": {"format": "rows", "on_invalid": "skip"},
        "validate": {"require_done": False, "on_invalid": "skip"},
        "buffer": {"kind": "prioritized", "capacity": 100, "alpha": 0.7, "beta": 0.4,
                   "eps": 1e-6, "replay_ratio": 0.5, "max_samples_per_insert": None},
        "sample": {"unit": "transition", "n_step": 3, "seq_len": 20, "burn_in": 0,
                   "sample_all": False},
    }  # fmt: skip
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    config = PreLearnerConfig.load(path)
    assert config.buffer.prioritized == PrioritizedConfig(alpha=0.7)
    assert config.buffer.mixin is None and config.sample.sequence is None
    assert config.read.on_invalid == "skip" and config.sample.sample_all is False
    # A value that meant nothing before (alpha with a uniform buffer) is now named.
    old["buffer"] = {"kind": "uniform", "alpha": 0.7}
    path.write_text(json.dumps(old))
    with pytest.raises(ConfigError, match=r"old\.json.*buffer\.alpha .*buffer\.kind is 'uniform'"):
        PreLearnerConfig.load(path)


def test_to_dict_nests_the_chosen_kind_and_round_trips(tmp_path: Any) -> None:
    config = PreLearnerConfig().with_updates(
        {
            "kind": "prioritized",
            "alpha": 0.7,
            "unit": "sequence",
            "seq_len": 9,
            "on_invalid": "skip",
        }
    )
    d = config.to_dict()
    assert d["buffer"]["prioritized"] == {"alpha": 0.7, "beta": 0.4, "eps": 1e-6}
    assert "mixin" not in d["buffer"] and "alpha" not in d["buffer"]
    assert d["sample"]["sequence"] == {"seq_len": 9, "burn_in": 0}
    assert "on_invalid" not in d["validate"] and d["read"]["on_invalid"] == "skip"
    assert d["sample"]["sample_all"] is None
    assert PreLearnerConfig.from_dict(json.loads(json.dumps(d))) == config
    for name in ("c.json", "c.yaml"):
        config.save(tmp_path / name)
        assert PreLearnerConfig.load(tmp_path / name) == config
    assert "sequence" not in PreLearnerConfig().to_dict()["sample"]


# ------------------------------------------------------------------------------------------------
# sample_all: one default, the job's rule
# ------------------------------------------------------------------------------------------------
def test_sample_all_unset_is_the_jobs_rule() -> None:
    config = PreLearnerConfig()
    assert config.sample.sample_all is None
    assert config.for_job("batch").sample.sample_all is True
    assert config.for_job("stream").sample.sample_all is False
    for chosen in (True, False):
        mine = config.with_updates({"sample_all": chosen})
        assert mine.for_job("batch").sample.sample_all is chosen
        assert mine.for_job("stream").sample.sample_all is chosen
    with pytest.raises(ConfigError, match=r"sample\.sample_all must be true or false"):
        config.with_updates({"sample_all": "yes"})


def test_the_readme_config_example_loads(tmp_path: Any) -> None:
    from conftest import REPO

    page = (REPO / "docs" / "config.md").read_text()
    block = re.search(r"^# Configuration.*?^```yaml\n(.*?)^```$", page, re.M | re.S)
    assert block, "no yaml block under '# Configuration' in docs/config.md"
    path = tmp_path / "c.yaml"
    path.write_text(block.group(1))
    config = PreLearnerConfig.load(path)
    assert config.buffer.prioritized == PrioritizedConfig(alpha=0.7, beta=0.5)
    assert config.read.on_invalid == "skip" and config.sample.n_step == 3


def test_set_reaches_a_field_of_read_limits_as_yaml_does() -> None:
    """Issue 36: ``--set read.limits.max_decompressed_bytes=0`` was "unknown config field"
    though the YAML form worked; now the dotted form is the YAML form, refusals included, and
    the limits not named stay as they were."""
    from offline_prelearner.config import PreLearnerConfig

    cfg = PreLearnerConfig().with_updates({"read.limits": {"max_array_bytes": 4096}})
    cfg = cfg.with_updates({"read.limits.max_decompressed_bytes": 1 << 20})
    assert cfg.read.limits.max_decompressed_bytes == 1 << 20
    assert cfg.read.limits.max_array_bytes == 4096
    yaml_form = PreLearnerConfig.coerce({"read": {"limits": {"max_decompressed_bytes": 1 << 20}}})
    dotted = PreLearnerConfig().with_updates({"read.limits.max_decompressed_bytes": 1 << 20})
    assert dotted.read.limits == yaml_form.read.limits
    with pytest.raises(ConfigError, match=r"read\.limits\.max_decompressed_bytes must be"):
        PreLearnerConfig().with_updates({"read.limits.max_decompressed_bytes": 0})
    with pytest.raises(ConfigError, match=r"unknown config field 'read\.limits\.max_bytes'"):
        PreLearnerConfig().with_updates({"read.limits.max_bytes": 1})
