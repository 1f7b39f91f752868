"""Replay shards: prioritized replay across processes (the Ape-X design).

* :mod:`.sharded_buffer` -- :class:`ShardedReplayBuffer`, shards as Ray actors (the only module of
  replay/ that imports Ray, and only when a buffer starts);
* :mod:`.shard` -- :class:`ReplayShard`, the plain class each shard actor runs;
* :mod:`.routing` -- the routing math: which shard an episode goes to, global handles, the split
  of a batch over shards.
"""

from .shard import ReplayShard
from .sharded_buffer import ShardedReplayBuffer

__all__ = ["ReplayShard", "ShardedReplayBuffer"]
