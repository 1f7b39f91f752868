"""The one definition of "the buffer a config describes": its sample unit and its buffer.

:class:`~offline_prelearner.prelearner.OfflinePreLearner` (whose ``build_unit`` /
``build_buffer`` hooks call these) and :class:`~offline_prelearner.replay.shards.shard.ReplayShard`
both build their buffers here, so a prelearner's buffer and a shard's buffer for the same config
are the same kind, with the same unit, rate limit and eviction.

Seeds at the edges: with ``config.seed = None`` every generator is seeded from the OS; otherwise a
module's buffer draws from ``seed + _stable_hash(module_id)`` (modules of one run draw different
streams, reproducibly across processes), and reservoir eviction from ``seed`` itself.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ..config import PreLearnerConfig, SampleConfig
from .mixin import MixInReplayBuffer
from .rate_limit import SampleToInsertRatio
from .replay_buffer import EpisodeReplayBuffer
from .reservoir import Reservoir
from .samplers.prioritized import Prioritized
from .samplers.uniform import Uniform
from .units.base import SampleUnit
from .units.n_step import NStep
from .units.sequence import Sequence
from .units.stack import FrameStack
from .units.transition import Transition

__all__ = ["build_buffer", "build_unit"]


def build_unit(sample: SampleConfig) -> SampleUnit:
    """What each drawn step becomes: Transition, NStep, Sequence, optionally frame-stacked.

    ``unit="sequence"`` gives a :class:`Sequence` as ``sample.sequence`` describes (``seq_len``,
    ``burn_in``); otherwise ``n_step == 1`` gives a :class:`Transition` and larger ``n_step`` an
    :class:`NStep` discounted by ``gamma``. ``frame_stack > 1`` wraps the result in a
    :class:`FrameStack`.

    Args:
        sample: The config's ``sample`` section.

    Returns:
        The unit.
    """
    unit: SampleUnit
    seq = sample.sequence  # present exactly when unit == "sequence"
    if seq is not None:
        unit = Sequence(seq.seq_len, burn_in=seq.burn_in)
    elif sample.n_step == 1:
        unit = Transition()
    else:
        unit = NStep(sample.n_step, sample.gamma)
    return FrameStack(sample.frame_stack, unit) if sample.frame_stack > 1 else unit


def build_buffer(
    config: PreLearnerConfig, module_id: str, unit: SampleUnit | None = None
) -> EpisodeReplayBuffer:
    """A fresh buffer for one module, as ``config.buffer`` describes.

    Args:
        config: The ``buffer``, ``sample`` and ``seed`` sections are used.
        module_id: The module whose buffer this is (offsets the seed, see the module docstring).
        unit: The sample unit; ``None`` builds it from ``config.sample`` (:func:`build_unit`).

    Returns:
        The buffer.

    ``buffer.kind`` picks the buffer: ``"prioritized"`` (a :class:`Prioritized` sampler with
    ``buffer.prioritized``'s ``alpha``, ``beta``, ``eps``), ``"mixin"`` (:class:`MixInReplayBuffer`
    with ``buffer.mixin.replay_ratio``), ``"reservoir"`` (uniform sampling, reservoir eviction) or
    ``"uniform"``. ``max_samples_per_insert`` adds a :class:`SampleToInsertRatio` rate limit.
    """
    b, seed = config.buffer, config.seed
    kw: dict[str, Any] = {
        "unit": build_unit(config.sample) if unit is None else unit,
        "seed": None if seed is None else seed + _stable_hash(module_id),
        "learning_starts": b.learning_starts,
    }
    if b.max_samples_per_insert is not None:
        kw["rate_limit"] = SampleToInsertRatio(b.max_samples_per_insert)
    # A kind's sub-section is present exactly when the kind is chosen (config/sections.py).
    if b.prioritized is not None:
        p = b.prioritized
        return EpisodeReplayBuffer(b.capacity, Prioritized(p.alpha, p.beta, p.eps), **kw)
    if b.mixin is not None:
        return MixInReplayBuffer(b.capacity, Uniform(), replay_ratio=b.mixin.replay_ratio, **kw)
    if b.kind == "reservoir":
        kw["eviction"] = Reservoir(seed=0 if seed is None else seed)
    return EpisodeReplayBuffer(b.capacity, Uniform(), **kw)


def _stable_hash(s: str) -> int:
    """A process-independent hash of the whole of ``s`` (Python's str hash is salted per
    process), below 2**62 so that ``seed + hash`` stays an int64."""
    digest = hashlib.blake2b(s.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 2
