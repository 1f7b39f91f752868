"""Replay: ring storage of episodes, composed with samplers and units into buffers.

One folder per role:

* :mod:`.storage` -- :class:`~.storage.ring.EpisodeStorage`: columnar ring of timesteps + the
  episode table; its batched adds are a :class:`~.storage.placement.RunPlacement` it owns; what an
  add did comes back as :mod:`.storage.changes` records;
* :mod:`.samplers` -- which steps are drawn (uniform, prioritized on the sum tree, in order);
* :mod:`.units` -- what each drawn step expands into (transition, n-step, sequence, frame stack);
* :mod:`.shards` -- replay shards as Ray actors, each running a :class:`~.shards.shard.ReplayShard`,
  with the routing math in :mod:`.shards.routing`.

The buffers, here: :mod:`.replay_buffer` -- :class:`EpisodeReplayBuffer` = storage + sampler +
unit; and its kinds: :mod:`.prioritized`, :mod:`.mixin`, :mod:`.reservoir` eviction,
:mod:`.multi_agent` (with its :mod:`.agent_index`), the :mod:`.rate_limit`; :mod:`.build` makes the
one a config describes; :mod:`.checkpoint` saves and loads them; :mod:`.batch` --
:class:`~.batch.SampleBatch` / :class:`~.batch.MultiAgentBatch`, what a buffer hands out.
"""

from .build import build_buffer, build_unit
from .mixin import MixInReplayBuffer
from .multi_agent import AGENT_ID, DEFAULT_MODULE_ID, MultiAgentEpisodeReplayBuffer
from .prioritized import PrioritizedEpisodeReplayBuffer
from .rate_limit import RateLimitExceeded, SampleToInsertRatio
from .replay_buffer import INDICES, EpisodeReplayBuffer
from .reservoir import Reservoir, ReservoirStorage
from .samplers.segment_tree import MinTree, SumTree
from .shards.shard import ReplayShard
from .shards.sharded_buffer import ShardedReplayBuffer
from .storage.changes import Change
from .storage.ring import EpisodeStorage

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
