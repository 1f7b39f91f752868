"""Frozen, validated configuration: the leaf every layer reads (it imports only ``errors`` and
``spaces``).

* :mod:`.checks` -- one validator per kind of setting (``check_int``, ``check_float``,
  ``check_eps``, ``check_n_step``, ...), shared by the config and the objects it builds, and the
  bounds of the integer settings;
* :mod:`.sections` -- one frozen dataclass per stage: :class:`ReadConfig` (with its
  :class:`DecodeLimits`), :class:`ValidateConfig`, :class:`BufferConfig`, :class:`SampleConfig`,
  :class:`ModulesConfig`, :class:`RayConfig`;
* :mod:`.prelearner_config` -- :class:`PreLearnerConfig`, the sections together;
* :mod:`.files` -- config files (JSON, YAML) read with bounded cost.
"""

from .checks import (
    MAX_BATCH_ROWS,
    MAX_BLOCK_MB,
    MAX_CONCURRENCY,
    MAX_FRAME_STACK,
    MAX_N_STEP,
    MAX_NUM_SAMPLES,
    MAX_SEED,
    MAX_SEQ_LEN,
    MAX_STEPS,
    MAX_THREADS,
    MAX_TRAIN_BATCH,
    ON_INVALID,
    OnInvalid,
    check_bool,
    check_choice,
    check_eps,
    check_float,
    check_int,
    check_n_step,
    check_on_invalid,
)
from .files import MAX_ALIAS_NODES, MAX_CONFIG_BYTES
from .prelearner_config import PreLearnerConfig
from .sections import (
    BUFFER_KINDS,
    DEFAULT_LIMITS,
    DEFAULT_MODULE_ID,
    MAX_LIMIT,
    BufferConfig,
    DecodeLimits,
    ModulesConfig,
    RayConfig,
    ReadConfig,
    SampleConfig,
    ValidateConfig,
)

__all__ = [
    "BUFFER_KINDS",
    "DEFAULT_LIMITS",
    "DEFAULT_MODULE_ID",
    "MAX_ALIAS_NODES",
    "MAX_BATCH_ROWS",
    "MAX_BLOCK_MB",
    "MAX_CONCURRENCY",
    "MAX_CONFIG_BYTES",
    "MAX_FRAME_STACK",
    "MAX_LIMIT",
    "MAX_NUM_SAMPLES",
    "MAX_N_STEP",
    "MAX_SEED",
    "MAX_SEQ_LEN",
    "MAX_STEPS",
    "MAX_THREADS",
    "MAX_TRAIN_BATCH",
    "ON_INVALID",
    "BufferConfig",
    "DecodeLimits",
    "ModulesConfig",
    "OnInvalid",
    "PreLearnerConfig",
    "RayConfig",
    "ReadConfig",
    "SampleConfig",
    "ValidateConfig",
    "check_bool",
    "check_choice",
    "check_eps",
    "check_float",
    "check_int",
    "check_n_step",
    "check_on_invalid",
]
