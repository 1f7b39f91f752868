"""The public surface is deliberate: this test pins it (httpx's habit)."""

from __future__ import annotations

import subprocess
import sys

import offline_prelearner as op

EXPECTED = {
    "ColumnSchema",
    "PreLearnerConfig",
    "ReadConfig",
    "load_schema",
    "make_reader",
    "register_reader",
    "InputFormat",
    "register_format",
    "read_samples",
    "to_numpy",
    "to_torch",
    "torch_dataset",
    "Episode",
    "EpisodeBatch",
    "EpisodeColumns",
    "Ledger",
    "Deduplicator",
    "ValidateConfig",
    "Validator",
    "EpisodeReplayBuffer",
    "MixInReplayBuffer",
    "MultiAgentEpisodeReplayBuffer",
    "PrioritizedEpisodeReplayBuffer",
    "Reservoir",
    "SampleToInsertRatio",
    "ShardedReplayBuffer",
    "ReplayShard",
    "FrameStack",
    "NStep",
    "Prioritized",
    "Sequence",
    "Transition",
    "Uniform",
    "Connector",
    "ConnectorPipeline",
    "build_pipeline",
    "register_connector",
    "MultiAgentBatch",
    "SampleBatch",
    "OfflinePreLearner",
    "convert_path",
    "iter_learner_batches",
    "split_learner_batches",
    "epoch_learner_batches",
    "run_pipeline",
    "feed_shards",
    "start_feed",
    "FeedStats",
    "report",
    "inspect",
    "record",
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
}


def test_all_is_pinned_and_every_name_resolves() -> None:
    assert set(op.__all__) == EXPECTED and len(op.__all__) == len(EXPECTED)
    for name in op.__all__:
        assert getattr(op, name) is not None, name


def test_errors_are_also_natural_builtins() -> None:
    assert issubclass(op.DataError, ValueError) and issubclass(op.ConfigError, ValueError)
    assert issubclass(op.EmptyBufferError, RuntimeError)
    for cls in (op.SchemaError, op.DecodeError, op.EpisodeValidationError):
        assert issubclass(cls, op.DataError) and issubclass(cls, op.OfflinePrelearnerError)
    assert issubclass(op.ColumnValueError, op.SchemaError)
    assert issubclass(op.CommitError, op.ConfigError)
    assert issubclass(op.RateLimitExceeded, op.EmptyBufferError)
    assert issubclass(op.StorageError, OSError) and issubclass(
        op.JobFailed, op.OfflinePrelearnerError
    )
    # Outside the root on purpose (errors.py says why): Ctrl-C, a failed contract, warnings.
    assert issubclass(op.Interrupted, KeyboardInterrupt)
    assert issubclass(op.ContractError, AssertionError)
    for cls in (op.Interrupted, op.ContractError, op.OddDataWarning, op.CommittedWarning):
        assert not issubclass(cls, op.OfflinePrelearnerError)
    assert issubclass(op.OddDataWarning, UserWarning) and issubclass(
        op.CommittedWarning, UserWarning
    )


def test_every_public_class_of_the_error_tree_is_exported() -> None:
    from offline_prelearner import errors

    classes = {n for n in errors.__all__ if isinstance(getattr(errors, n), type)} - {"Where"}
    assert classes <= set(op.__all__), sorted(classes - set(op.__all__))
    for name in classes:
        assert getattr(op, name) is getattr(errors, name)


def test_importing_the_package_does_not_import_ray() -> None:
    code = "import sys, offline_prelearner; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_report_is_the_function_and_its_library_loads_when_it_runs() -> None:
    code = "import sys, offline_prelearner; print('vl_convert' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    from offline_prelearner.report import build

    assert op.report is build.report and callable(op.report)


def test_lazy_exports_are_the_defining_modules_objects() -> None:
    from offline_prelearner import replay
    from offline_prelearner.jobs import apex, batch_job, learner_stream
    from offline_prelearner.replay import build, prioritized, shards

    assert op.ShardedReplayBuffer is shards.ShardedReplayBuffer
    assert op.ReplayShard is shards.ReplayShard
    assert (op.feed_shards, op.start_feed, op.FeedStats) == (
        apex.feed_shards,
        apex.start_feed,
        apex.FeedStats,
    )
    assert (op.run_pipeline, op.iter_learner_batches, op.split_learner_batches) == (
        batch_job.run_pipeline,
        learner_stream.iter_learner_batches,
        learner_stream.split_learner_batches,
    )
    from offline_prelearner.jobs.stream import epochs

    assert op.epoch_learner_batches is epochs.epoch_learner_batches
    assert op.PrioritizedEpisodeReplayBuffer is prioritized.PrioritizedEpisodeReplayBuffer
    assert (replay.build_buffer, replay.build_unit) == (build.build_buffer, build.build_unit)
    assert replay.ReplayShard is shards.ReplayShard
    assert replay.ShardedReplayBuffer is shards.ShardedReplayBuffer
    for name in replay.__all__:
        assert getattr(replay, name) is not None, name
