"""offline_prelearner: recorded RL experience -> episodes -> replay -> learner batches.

The public API, grouped by stage (everything is also importable from its module)::

    read       ReadConfig, ColumnSchema, load_schema, make_reader, register_reader
    episodes   Episode, EpisodeBatch, Ledger
    check      ValidateConfig, Validator, Deduplicator
    replay     EpisodeReplayBuffer, PrioritizedEpisodeReplayBuffer, MixInReplayBuffer,
               MultiAgentEpisodeReplayBuffer, Reservoir, SampleToInsertRatio
    sample     Uniform, Prioritized, Transition, NStep, Sequence, FrameStack
    connect    Connector, ConnectorPipeline, build_pipeline, register_connector
    batches    SampleBatch, MultiAgentBatch
    run        PreLearnerConfig, OfflinePreLearner, run_pipeline, iter_learner_batches, convert_path
    errors     OfflinePrelearnerError and its subclasses
"""

from typing import Any

from .batch import MultiAgentBatch, SampleBatch
from .buffers import (
    EpisodeReplayBuffer,
    MixInReplayBuffer,
    MultiAgentEpisodeReplayBuffer,
    Reservoir,
    SampleToInsertRatio,
)
from .config import PreLearnerConfig, ReadConfig
from .connectors import Connector, ConnectorPipeline, build_pipeline, register_connector
from .convert import convert_path
from .episode import Episode
from .errors import (
    ConfigError,
    DataError,
    DecodeError,
    EmptyBufferError,
    EpisodeValidationError,
    OfflinePrelearnerError,
    SchemaError,
    UnsupportedFormatError,
)
from .prelearner import OfflinePreLearner
from .readers import make_reader, register_reader
from .report import EpisodeBatch, Ledger
from .samplers import FrameStack, NStep, Prioritized, Sequence, Transition, Uniform
from .schema import ColumnSchema, load_schema
from .validate import Deduplicator, ValidateConfig, Validator

__version__ = "0.1.0"

__all__ = [  # noqa: RUF022  (grouped by stage, like the docstring)
    # read
    "ColumnSchema",
    "PreLearnerConfig",
    "ReadConfig",
    "load_schema",
    "make_reader",
    "register_reader",
    # episodes
    "Episode",
    "EpisodeBatch",
    "Ledger",
    # check
    "Deduplicator",
    "ValidateConfig",
    "Validator",
    # replay
    "EpisodeReplayBuffer",
    "MixInReplayBuffer",
    "MultiAgentEpisodeReplayBuffer",
    "PrioritizedEpisodeReplayBuffer",
    "Reservoir",
    "SampleToInsertRatio",
    # sample
    "FrameStack",
    "NStep",
    "Prioritized",
    "Sequence",
    "Transition",
    "Uniform",
    # connect
    "Connector",
    "ConnectorPipeline",
    "build_pipeline",
    "register_connector",
    # batches
    "MultiAgentBatch",
    "SampleBatch",
    # run (run_pipeline and iter_learner_batches import Ray: loaded on first use)
    "OfflinePreLearner",
    "convert_path",
    "iter_learner_batches",
    "run_pipeline",
    # errors
    "ConfigError",
    "DataError",
    "DecodeError",
    "EmptyBufferError",
    "EpisodeValidationError",
    "OfflinePrelearnerError",
    "SchemaError",
    "UnsupportedFormatError",
]


def __getattr__(name: str) -> Any:
    # Ray is imported only by the pipeline; importing the package stays light.
    if name in ("run_pipeline", "iter_learner_batches"):
        from . import pipeline

        return getattr(pipeline, name)
    if name == "PrioritizedEpisodeReplayBuffer":
        from .buffers.prioritized import PrioritizedEpisodeReplayBuffer

        return PrioritizedEpisodeReplayBuffer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
