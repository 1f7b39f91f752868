"""Samplers (which steps are drawn) and sample units (what each step expands into)."""

from .base import Sampler, SamplerState, SampleUnit, UpdatableSampler, ValidStarts, ranges
from .n_step import NStep
from .prioritized import Prioritized
from .sequence import LOSS_MASK, SEQ_LENS, Sequence
from .stack import FrameStack
from .transition import Transition
from .uniform import Uniform

__all__ = [
    "LOSS_MASK",
    "SEQ_LENS",
    "FrameStack",
    "NStep",
    "Prioritized",
    "SampleUnit",
    "Sampler",
    "SamplerState",
    "Sequence",
    "Transition",
    "Uniform",
    "UpdatableSampler",
    "ValidStarts",
    "ranges",
]
