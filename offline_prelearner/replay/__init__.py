"""Replay: ring storage of episodes, composed with samplers and units into buffers.

* :mod:`.storage` -- :class:`EpisodeStorage`: columnar ring of timesteps + the episode table
  (:mod:`.table`); its batched adds are a :class:`~.placement.RunPlacement` it owns; what an add
  did comes back as :mod:`.changes` records;
* :mod:`.samplers` -- which steps are drawn (uniform, prioritized on :mod:`.segment_tree`) x what
  each expands into (transition, n-step, sequence, frame stack);
* :mod:`.replay_buffer` -- :class:`EpisodeReplayBuffer` = storage + sampler + unit; and its
  kinds: :mod:`.prioritized`, :mod:`.mixin`, :mod:`.reservoir` eviction, :mod:`.multi_agent`
  (with its :mod:`.agent_index`), the :mod:`.rate_limit`; :mod:`.build` makes the one a config
  describes; :mod:`.checkpoint` saves and loads them;
* :mod:`.batch` -- :class:`~.batch.SampleBatch` / :class:`~.batch.MultiAgentBatch`, what a buffer
  hands out;
* :mod:`.shards` -- replay shards as Ray actors (the only module here that imports Ray), each
  running a :mod:`.replay_shard`, with the routing math in :mod:`.sharding`.
"""

from .build import build_buffer, build_unit
from .mixin import MixInReplayBuffer
from .multi_agent import AGENT_ID, DEFAULT_MODULE_ID, MultiAgentEpisodeReplayBuffer
from .prioritized import PrioritizedEpisodeReplayBuffer
from .rate_limit import RateLimitExceeded, SampleToInsertRatio
from .replay_buffer import INDICES, EpisodeReplayBuffer
from .reservoir import Reservoir, ReservoirStorage
from .segment_tree import MinTree, SumTree
from .shards import ReplayShard, ShardedReplayBuffer
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
    "ReplayShard",
    "Reservoir",
    "ReservoirStorage",
    "SampleToInsertRatio",
    "ShardedReplayBuffer",
    "SumTree",
    "build_buffer",
    "build_unit",
]
