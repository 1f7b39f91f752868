"""Samplers (which steps are drawn) and sample units (what each step expands into)."""

from .base import Sampler, SamplerState, SampleUnit, UpdatableSampler, ValidStarts, ranges

__all__ = ["SampleUnit", "Sampler", "SamplerState", "UpdatableSampler", "ValidStarts", "ranges"]
