"""Replay storage and buffers: ring storage of episodes, composed with samplers and units."""

from .replay_buffer import INDICES, EpisodeReplayBuffer
from .storage import Change, EpisodeStorage

__all__ = ["INDICES", "Change", "EpisodeReplayBuffer", "EpisodeStorage"]
