"""Replay storage and buffers: ring storage of episodes, composed with samplers and units."""

from .prioritized import PrioritizedEpisodeReplayBuffer
from .replay_buffer import INDICES, EpisodeReplayBuffer
from .segment_tree import MinTree, SumTree
from .storage import Change, EpisodeStorage

__all__ = [
    "INDICES",
    "Change",
    "EpisodeReplayBuffer",
    "EpisodeStorage",
    "MinTree",
    "PrioritizedEpisodeReplayBuffer",
    "SumTree",
]
