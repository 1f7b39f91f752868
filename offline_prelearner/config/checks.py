"""One validator per kind of setting, and the bounds of the integer settings.

The config sections call them on construction and the objects they build (a storage's capacity, a
sampler's ``eps``, an n-step unit's ``n``) call the same ones, so a value is accepted or refused
by one rule wherever it is set. Each raises :class:`~offline_prelearner.errors.ConfigError`
naming the setting, what was expected and what was found (cut, see
:func:`~offline_prelearner.errors.shown`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ConfigError, shown

__all__ = [
    "MAX_BATCH_ROWS",
    "MAX_BLOCK_MB",
    "MAX_CONCURRENCY",
    "MAX_FRAME_STACK",
    "MAX_NUM_SAMPLES",
    "MAX_N_STEP",
    "MAX_SEED",
    "MAX_SEQ_LEN",
    "MAX_STEPS",
    "MAX_THREADS",
    "MAX_TRAIN_BATCH",
    "check_bool",
    "check_choice",
    "check_eps",
    "check_float",
    "check_int",
    "check_n_step",
]

# Upper bounds of the integer settings, checked before anything is allocated by them: far above
# any real job, low enough that a typo (train_batch_size=10**12) is one line, not a MemoryError.
MAX_STEPS = 10**10  # buffer.capacity, learning_starts, max_episode_steps: timesteps
MAX_TRAIN_BATCH = 1 << 22  # sample.train_batch_size: 4,194,304 samples per batch
MAX_NUM_SAMPLES = 10**12  # sample.num_samples
MAX_N_STEP = 10_000  # sample.n_step (each end of a range)
MAX_SEQ_LEN = 100_000  # sample.sequence.seq_len, sample.sequence.burn_in
MAX_FRAME_STACK = 256  # sample.frame_stack (Atari stacks 4)
MAX_BATCH_ROWS = 10**7  # ray.batch_size: rows per map_batches batch
MAX_CONCURRENCY = 10_000  # ray.concurrency, ray.footer_readers
MAX_THREADS = 1024  # ray.read_threads
MAX_BLOCK_MB = 65_536  # ray.block_mb (64 GiB)
MAX_SEED = 2**63 - 1


def check_int(label: str, value: Any, lo: int, hi: int, none_ok: bool = False) -> Any:
    """The validator of an integer setting, used by the config and by the object it builds (the
    storage's capacity, a sample's batch size): an int (not a bool) in ``[lo, hi]``.

    Args:
        label: The setting's name, for the error.
        value: The value to check.
        lo: The smallest value accepted.
        hi: The largest value accepted.
        none_ok: Accept ``None`` too.

    Returns:
        The value (None where ``none_ok`` and it is None).

    Raises:
        ConfigError: Naming ``label``, the range and the value found (cut, see ``shown``).
    """
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(f"{label} must be an integer in [{lo}, {hi}], found {shown(value)}")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(
        value, bool | np.bool_
    )


def check_float(
    label: str,
    value: Any,
    lo: float,
    hi: float,
    *,
    none_ok: bool = False,
    lo_open: bool = False,
) -> Any:
    """The validator of a number setting: an int or float (not a bool) in ``[lo, hi]``, or
    ``(lo, hi]`` with ``lo_open`` (a value that must stay positive, like a priority floor).

    Args:
        label: The setting's name, for the error.
        value: The value to check.
        lo: The lower bound (included unless ``lo_open``).
        hi: The largest value accepted.
        none_ok: Accept ``None`` too.
        lo_open: Exclude ``lo`` itself.

    Returns:
        The value as a float (None where ``none_ok`` and it is None).

    Raises:
        ConfigError: Naming ``label``, the range and the value found.
    """
    if value is None and none_ok:
        return None
    ok = _is_number(value) and ((lo < value) if lo_open else (lo <= value)) and value <= hi
    if not ok:
        interval = f"({lo}, {hi}]" if lo_open else f"[{lo}, {hi}]"
        raise ConfigError(f"{label} must be a number in {interval}, found {shown(value)}")
    return float(value)


def check_bool(label: str, value: Any) -> bool:
    """The validator of a switch: ``True`` or ``False`` (not 1, not ``"yes"``).

    Args:
        label: The setting's name, for the error.
        value: The value to check.

    Returns:
        The value.

    Raises:
        ConfigError: Naming ``label`` and the value found.
    """
    if not isinstance(value, bool):
        raise ConfigError(f"{label} must be true or false, found {shown(value)}")
    return value


def check_choice(label: str, value: Any, choices: tuple[str, ...]) -> Any:
    """The validator of a setting that names one of a few ``choices`` (the named choices of
    :mod:`.choices` have their own validators, typed by their ``Literal``).

    Args:
        label: The setting's name, for the error.
        value: The value to check.
        choices: The names accepted.

    Returns:
        The value.

    Raises:
        ConfigError: Naming ``label``, the choices and the value found.
    """
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(f"{label} must be one of {choices}, found {shown(value)}")
    return value


def check_eps(label: str, value: Any, alpha: float | None = None) -> float:
    """The validator of prioritized replay's priority floor: a finite number in ``(0, 1]``.
    A priority is ``(|td| + eps) ** alpha``, so ``eps`` must keep it positive; with ``alpha``,
    ``eps ** alpha`` must not underflow float64 either (``1e-6 ** 200`` is 0).

    Used by :class:`~offline_prelearner.config.PrioritizedConfig` and by the prioritized sampler it
    builds, so ``buffer.prioritized.eps=0`` is refused where it is set, not on the first batch
    in a worker.

    Args:
        label: The setting's name, for the error.
        value: The floor to check.
        alpha: The priority exponent it is raised to, if known.

    Returns:
        ``eps`` as a float.

    Raises:
        ConfigError: Naming ``label`` and the value found.
    """
    if not _is_number(value):
        raise ConfigError(f"{label} must be a number, found {shown(value)}")
    v = float(value)
    if not math.isfinite(v) or not 0.0 < v <= 1.0:
        raise ConfigError(f"{label} must be a finite number > 0 and <= 1, found {shown(value)}")
    if alpha is not None and (v**alpha == 0.0 or math.isinf(1.0 / v**alpha)):
        raise ConfigError(
            f"{label} ** alpha = {v}**{alpha} underflows float64; raise eps or lower alpha"
        )
    return v


def check_n_step(label: str, value: Any) -> int | tuple[int, int]:
    """The validator of an n-step setting: an int in ``[1, MAX_N_STEP]``, or an inclusive
    ``[lo, hi]`` pair of ints with ``1 <= lo <= hi <= MAX_N_STEP`` (drawn per sample).

    Used by :class:`~offline_prelearner.config.SampleConfig` and by the n-step unit.

    Args:
        label: The setting's name, for the error.
        value: The int or the ``[lo, hi]`` pair to check.

    Returns:
        The int, or the pair as a tuple of ints.

    Raises:
        ConfigError: Naming ``label``, what was expected and the value found.
    """

    def is_int(v: Any) -> bool:
        return isinstance(v, int | np.integer) and not isinstance(v, bool)

    if isinstance(value, list | tuple):
        if len(value) != 2 or not all(is_int(v) for v in value):
            raise ConfigError(f"{label} range must be [lo, hi] integers, found {shown(value)}")
        lo, hi = int(value[0]), int(value[1])
        if not 1 <= lo <= hi <= MAX_N_STEP:
            raise ConfigError(
                f"{label} range needs 1 <= lo <= hi <= {MAX_N_STEP}, found {shown(value)}"
            )
        return (lo, hi)
    if not is_int(value) or not 1 <= value <= MAX_N_STEP:
        raise ConfigError(
            f"{label} must be an integer in [1, {MAX_N_STEP}], found {shown(value)} "
            "(or a [lo, hi] range)"
        )
    return int(value)
