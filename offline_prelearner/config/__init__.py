"""Frozen, validated configuration: the leaf every layer reads (it imports only ``errors`` and
``spaces``).

* :mod:`.checks` -- one validator per kind of setting (``check_int``, ``check_float``,
  ``check_eps``, ``check_n_step``, ...), shared by the config and the objects it builds, and the
  bounds of the integer settings;
* :mod:`.choices` -- the settings that name one of a few choices, as ``Literal`` types for mypy
  (``BufferKind``, ``SampleUnitKind``, ``Engine``, ``Layout``, ``OnInvalid``, ``RayRead``,
  ``BatchSize``), the same choices as tuples at run time, and one validator each;
* :mod:`.sections` -- one frozen dataclass per stage: :class:`ReadConfig` (with its
  :class:`DecodeLimits`), :class:`ValidateConfig`, :class:`BufferConfig` (with
  :class:`PrioritizedConfig` / :class:`MixInConfig` for those kinds), :class:`SampleConfig`
  (with :class:`SequenceConfig`), :class:`ModulesConfig`, :class:`RayConfig`;
* :mod:`.prelearner_config` -- :class:`PreLearnerConfig`, the sections together, and the one
  place where spellings are read (flat names, paths, earlier versions' fields);
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
    check_bool,
    check_choice,
    check_eps,
    check_float,
    check_int,
    check_n_step,
)
from .choices import (
    BUFFER_KINDS,
    ENGINES,
    LAYOUTS,
    ON_INVALID,
    RAY_READS,
    SAMPLE_UNITS,
    BatchSize,
    BufferKind,
    Engine,
    Layout,
    OnInvalid,
    RayRead,
    SampleUnitKind,
    check_batch_size,
    check_buffer_kind,
    check_engine,
    check_layout,
    check_on_invalid,
    check_ray_read,
    check_sample_unit,
)
from .files import MAX_ALIAS_NODES, MAX_CONFIG_BYTES
from .prelearner_config import JobKind, PreLearnerConfig
from .sections import (
    DEFAULT_LIMITS,
    DEFAULT_MODULE_ID,
    MAX_LIMIT,
    BufferConfig,
    DecodeLimits,
    MixInConfig,
    ModulesConfig,
    PrioritizedConfig,
    RayConfig,
    ReadConfig,
    SampleConfig,
    SequenceConfig,
    ValidateConfig,
)

__all__ = [
    "BUFFER_KINDS",
    "DEFAULT_LIMITS",
    "DEFAULT_MODULE_ID",
    "ENGINES",
    "LAYOUTS",
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
    "RAY_READS",
    "SAMPLE_UNITS",
    "BatchSize",
    "BufferConfig",
    "BufferKind",
    "DecodeLimits",
    "Engine",
    "JobKind",
    "Layout",
    "MixInConfig",
    "ModulesConfig",
    "OnInvalid",
    "PreLearnerConfig",
    "PrioritizedConfig",
    "RayConfig",
    "RayRead",
    "ReadConfig",
    "SampleConfig",
    "SampleUnitKind",
    "SequenceConfig",
    "ValidateConfig",
    "check_batch_size",
    "check_bool",
    "check_buffer_kind",
    "check_choice",
    "check_engine",
    "check_eps",
    "check_float",
    "check_int",
    "check_layout",
    "check_n_step",
    "check_on_invalid",
    "check_ray_read",
    "check_sample_unit",
]
