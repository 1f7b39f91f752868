"""Replay storage and buffers: ring storage of episodes, composed with samplers and units."""

from typing import TYPE_CHECKING, Any

from .mixin import MixInReplayBuffer
from .multi_agent import AGENT_ID, DEFAULT_MODULE_ID, MultiAgentEpisodeReplayBuffer
from .rate_limit import RateLimitExceeded, SampleToInsertRatio
from .replay_buffer import INDICES, EpisodeReplayBuffer
from .reservoir import Reservoir, ReservoirStorage
from .segment_tree import MinTree, SumTree
from .storage import Change, EpisodeStorage

if TYPE_CHECKING:  # loaded on first use at run time (see __getattr__); typed for checkers
    from .build import build_buffer, build_unit
    from .prioritized import PrioritizedEpisodeReplayBuffer
    from .shards import ReplayShard, ShardedReplayBuffer

__all__ = [
    "AGENT_ID",
    "DEFAULT_MODULE_ID",
    "INDICES",
    "Change",
    "EpisodeReplayBuffer",
    "EpisodeStorage",
    "MinTree",
    "MixInReplayBuffer",
    "MultiAgentEpisodeReplayBuffer",
    "PrioritizedEpisodeReplayBuffer",
    "RateLimitExceeded",
    "ReplayShard",
    "Reservoir",
    "ReservoirStorage",
    "SampleToInsertRatio",
    "ShardedReplayBuffer",
    "SumTree",
    "build_buffer",
    "build_unit",
]


def __getattr__(name: str) -> Any:
    # Imported on first use: samplers.prioritized imports .segment_tree, which runs this
    # package's __init__; an eager import of a module that imports samplers.prioritized
    # (prioritized, build, shards) here would close a cycle.
    if name == "PrioritizedEpisodeReplayBuffer":
        from .prioritized import PrioritizedEpisodeReplayBuffer

        return PrioritizedEpisodeReplayBuffer
    if name in ("build_buffer", "build_unit"):
        from . import build

        return getattr(build, name)
    if name in ("ReplayShard", "ShardedReplayBuffer"):
        from . import shards

        return getattr(shards, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
