"""Sample units: what each drawn step expands into.

* :mod:`.base` -- the :class:`SampleUnit` and :class:`StepTable` protocols, and the gathering
  helpers the units share;
* :mod:`.transition`, :mod:`.n_step`, :mod:`.sequence`, and :mod:`.stack` (frames stacked over
  any unit).

Units read the storage (:mod:`offline_prelearner.replay.storage`) only; they never import a
sampler.
"""

from .base import SampleUnit, StepTable
from .n_step import NStep
from .sequence import LOSS_MASK, SEQ_LENS, Sequence
from .stack import FrameStack
from .transition import Transition

__all__ = [
    "LOSS_MASK",
    "SEQ_LENS",
    "FrameStack",
    "NStep",
    "SampleUnit",
    "Sequence",
    "StepTable",
    "Transition",
]
