"""Replay storage and buffers: ring storage of episodes, composed with samplers and units."""

from typing import Any

from .mixin import MixInReplayBuffer
from .multi_agent import AGENT_ID, DEFAULT_MODULE_ID, MultiAgentEpisodeReplayBuffer
from .rate_limit import RateLimitExceeded, SampleToInsertRatio
from .replay_buffer import INDICES, EpisodeReplayBuffer
from .reservoir import Reservoir, ReservoirStorage
from .segment_tree import MinTree, SumTree
from .storage import Change, EpisodeStorage

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
    "Reservoir",
    "ReservoirStorage",
    "SampleToInsertRatio",
    "SumTree",
]


def __getattr__(name: str) -> Any:
    # Imported on first use: samplers.prioritized imports buffers.segment_tree, which runs this
    # package's __init__; an eager import of buffers.prioritized here would close a cycle.
    if name == "PrioritizedEpisodeReplayBuffer":
        from .prioritized import PrioritizedEpisodeReplayBuffer

        return PrioritizedEpisodeReplayBuffer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
