"""The config leaf: one validator per setting, shared by the config and the objects it builds.

``buffer.eps`` and ``sample.n_step`` were each checked twice with different rules: ``buffer.eps=0``
passed :class:`BufferConfig` and failed on the first batch inside a worker, in the prioritized
sampler. Both now follow :func:`check_eps` / :func:`check_n_step`, so the config and the object
agree on every value.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from offline_prelearner.config import (
    MAX_N_STEP,
    PreLearnerConfig,
    ReadConfig,
    ValidateConfig,
    check_bool,
    check_choice,
    check_eps,
    check_float,
    check_int,
    check_n_step,
    check_on_invalid,
)
from offline_prelearner.episodes.ledger import EpisodeBatch
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


@pytest.mark.parametrize(
    "eps", [0, 0.0, -1e-6, 1e-6, 1e-12, 0.5, 1, 1.5, math.nan, math.inf, True, "1e-6", None]
)
def test_buffer_eps_and_the_prioritized_sampler_agree(eps: Any) -> None:
    by_config = _accepts(lambda: PreLearnerConfig().with_updates({"buffer.eps": eps}))
    by_sampler = _accepts(lambda: Prioritized(eps=eps))
    assert by_config == by_sampler, (eps, by_config, by_sampler)


def test_buffer_eps_zero_is_refused_where_it_is_set() -> None:
    # p = (|td| + eps) ** alpha must stay positive: eps = 0 is an error of the config, not of
    # the first batch in a worker.
    with pytest.raises(ConfigError, match=r"buffer\.eps must be a finite number > 0"):
        PreLearnerConfig().with_updates({"buffer.eps": 0})
    with pytest.raises(ConfigError, match="eps must be a finite number > 0"):
        Prioritized(eps=0)


def test_eps_alpha_underflow_is_refused_by_both() -> None:
    with pytest.raises(ConfigError, match="underflows"):
        PreLearnerConfig().with_updates({"buffer.eps": 1e-300, "buffer.alpha": 10.0})
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


def test_the_validate_section_is_typed_and_follows_the_read_policy() -> None:
    config = PreLearnerConfig()
    assert isinstance(config.validate, ValidateConfig)
    assert config.validate.require_done is False and config.validate.on_invalid == "raise"
    skip = PreLearnerConfig(read=ReadConfig(on_invalid="skip"))
    assert skip.validate.on_invalid == "skip"
    mine = ValidateConfig(on_invalid="quarantine")
    assert PreLearnerConfig(read=ReadConfig(on_invalid="skip"), validate=mine).validate is mine
    loaded = PreLearnerConfig.from_dict({"read": {"on_invalid": "skip"}})
    assert loaded.validate.on_invalid == "skip"


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
        ("sample.unit", "step", r"sample\.unit must be one of"),
        ("ray.read", "disk", r"ray\.read must be one of"),
        ("read.limits", {"max_message_bytes": 0}, r"read\.limits\.max_message_bytes must be"),
    ],
)
def test_config_errors_name_the_field(field: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PreLearnerConfig().with_updates({field: value})
