"""Samplers: which valid start slots a batch draws.

* :mod:`.base` -- the :class:`Sampler` protocol and its vocabulary (slots, rows, valid starts);
* :mod:`.uniform`, :mod:`.prioritized` (on the :mod:`.segment_tree` sum and min trees, whose
  compiled loops are :mod:`.kernels`), :mod:`.in_order`.

What each drawn slot expands into is a sample unit: :mod:`offline_prelearner.replay.units`.
"""

from .base import Sampler, SamplerState, UpdatableSampler, ValidStarts, ranges
from .in_order import InOrder
from .prioritized import Prioritized
from .segment_tree import MinTree, SumTree
from .uniform import Uniform

__all__ = [
    "InOrder",
    "MinTree",
    "Prioritized",
    "Sampler",
    "SamplerState",
    "SumTree",
    "Uniform",
    "UpdatableSampler",
    "ValidStarts",
    "ranges",
]
