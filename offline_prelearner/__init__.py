"""offline_prelearner: recorded RL experience -> episodes -> replay -> learner batches.

The public API, grouped by stage (everything is also importable from its module)::

    read       ReadConfig, ColumnSchema, load_schema, make_reader, register_reader,
               InputFormat, register_format (a format detected from its files)
    samples    read_samples, to_numpy, to_torch (any tensor layout -> numpy / torch),
               torch_dataset (a torch Dataset of a samples folder or of the learner stream)
    episodes   Episode, EpisodeColumns, EpisodeBatch, Ledger
    check      ValidateConfig, Validator, Deduplicator
    replay     EpisodeReplayBuffer, PrioritizedEpisodeReplayBuffer, MixInReplayBuffer,
               MultiAgentEpisodeReplayBuffer, Reservoir, SampleToInsertRatio,
               ShardedReplayBuffer, ReplayShard
    sample     Uniform, Prioritized, Transition, NStep, Sequence, FrameStack
    connect    Connector, ConnectorPipeline, build_pipeline, register_connector
    batches    SampleBatch, MultiAgentBatch
    run        PreLearnerConfig, OfflinePreLearner, run_pipeline, iter_learner_batches,
               split_learner_batches, epoch_learner_batches (shuffled epochs that resume),
               convert_path, record (a gymnasium env -> offline data), feed_shards,
               start_feed, FeedStats
    look       inspect (what a dataset or a job's output holds: ``inspect --json``'s dict),
               report (one HTML page about a dataset; the ``report`` extra)
    errors     OfflinePrelearnerError and its subclasses; Interrupted, ContractError and the
               warnings OddDataWarning, CommittedWarning, StaleIndexWarning (the tree:
               offline_prelearner.errors)
"""

# isort: off
# First, so that a Ctrl-C while the CLI imports the rest is one line (jobs/session/interrupts.py).
from .jobs.session import interrupts as _interrupts  # noqa: F401

# isort: on
from typing import TYPE_CHECKING, Any

from ._version import __version__ as __version__
from .config import PreLearnerConfig, ReadConfig, ValidateConfig
from .connectors import Connector, ConnectorPipeline, build_pipeline, register_connector
from .episodes.dedupe import Deduplicator
from .episodes.episode import Episode
from .episodes.episode_columns import EpisodeColumns
from .episodes.ledger import EpisodeBatch, Ledger
from .episodes.validate import Validator
from .errors import (
    ColumnValueError,
    CommitError,
    CommittedWarning,
    ConfigError,
    ContractError,
    DataError,
    DecodeError,
    EmptyBufferError,
    EpisodeValidationError,
    Interrupted,
    JobFailed,
    OddDataWarning,
    OfflinePrelearnerError,
    RateLimitExceeded,
    SchemaError,
    StaleIndexWarning,
    StorageError,
    UnsupportedFormatError,
)
from .io.formats.registry import InputFormat, register_format
from .io.readers import make_reader, register_reader
from .io.samples import read_samples, to_numpy, to_torch
from .io.schema import ColumnSchema, load_schema
from .jobs.convert.path import convert_path
from .jobs.inspection import inspect
from .jobs.record import record
from .jobs.torch_data import torch_dataset
from .prelearner import OfflinePreLearner
from .replay import (
    EpisodeReplayBuffer,
    MixInReplayBuffer,
    MultiAgentEpisodeReplayBuffer,
    PrioritizedEpisodeReplayBuffer,
    ReplayShard,
    Reservoir,
    SampleToInsertRatio,
    ShardedReplayBuffer,
)
from .replay.batch import MultiAgentBatch, SampleBatch
from .replay.samplers import Prioritized, Uniform
from .replay.units import FrameStack, NStep, Sequence, Transition

# Bound here, not on first use: the subpackage of the same name, once anything imports it,
# would be this attribute. It imports its one dependency (vl-convert-python) when it runs.
from .report import report  # isort: skip

if TYPE_CHECKING:  # the Ray jobs: loaded on first use (see __getattr__); typed for checkers
    from .jobs.batch.batch_job import run_pipeline
    from .jobs.stream.apex import FeedStats, feed_shards, start_feed
    from .jobs.stream.epochs import epoch_learner_batches
    from .jobs.stream.learner_stream import iter_learner_batches, split_learner_batches


__all__ = [  # noqa: RUF022  (grouped by stage, like the docstring)
    # read
    "ColumnSchema",
    "PreLearnerConfig",
    "ReadConfig",
    "load_schema",
    "make_reader",
    "register_reader",
    "InputFormat",
    "register_format",
    # samples (importing the package also registers the fast layout's Arrow extension type)
    "read_samples",
    "to_numpy",
    "to_torch",
    "torch_dataset",
    # episodes
    "Episode",
    "EpisodeBatch",
    "EpisodeColumns",
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
    "ReplayShard",
    "Reservoir",
    "SampleToInsertRatio",
    "ShardedReplayBuffer",
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
    # run (the pipeline and apex functions use Ray: loaded on first use)
    "FeedStats",
    "OfflinePreLearner",
    "convert_path",
    "epoch_learner_batches",
    "feed_shards",
    "iter_learner_batches",
    "record",
    "run_pipeline",
    "split_learner_batches",
    "start_feed",
    # look (the page's charts need the report extra, imported when report runs)
    "inspect",
    "report",
    # errors (the tree in offline_prelearner/errors.py)
    "ColumnValueError",
    "CommitError",
    "CommittedWarning",
    "ConfigError",
    "ContractError",
    "DataError",
    "DecodeError",
    "EmptyBufferError",
    "EpisodeValidationError",
    "Interrupted",
    "JobFailed",
    "OddDataWarning",
    "OfflinePrelearnerError",
    "RateLimitExceeded",
    "SchemaError",
    "StaleIndexWarning",
    "StorageError",
    "UnsupportedFormatError",
]


def __getattr__(name: str) -> Any:
    # Ray is imported only by the jobs; importing the package stays light.
    if name == "run_pipeline":
        from .jobs.batch.batch_job import run_pipeline

        return run_pipeline
    if name in ("iter_learner_batches", "split_learner_batches"):
        from .jobs.stream import learner_stream

        return getattr(learner_stream, name)
    if name == "epoch_learner_batches":
        from .jobs.stream.epochs import epoch_learner_batches

        return epoch_learner_batches
    if name in ("feed_shards", "start_feed", "FeedStats"):
        from .jobs.stream import apex

        return getattr(apex, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
