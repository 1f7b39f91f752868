"""The settings that name one of a few choices, as ``Literal`` types, each with its validator.

A type here is what mypy sees (``kind: BufferKind``); its tuple (``BUFFER_KINDS``) is the same
choices at run time, taken from the type (``typing.get_args``), so the two cannot drift; its
validator is what every place that accepts the setting calls (a config section on construction,
a job's argument, the CLI's ``choices=``). Each validator raises
:class:`~offline_prelearner.errors.ConfigError` naming the setting, the choices and the value.
"""

from __future__ import annotations

from typing import Any, Literal, cast, get_args

from ..errors import ConfigError, shown
from .checks import check_int

__all__ = [
    "BUFFER_KINDS",
    "ENGINES",
    "LAYOUTS",
    "ON_INVALID",
    "RAY_READS",
    "SAMPLE_UNITS",
    "BatchSize",
    "BufferKind",
    "Engine",
    "Layout",
    "OnInvalid",
    "RayRead",
    "SampleUnitKind",
    "check_batch_size",
    "check_buffer_kind",
    "check_engine",
    "check_layout",
    "check_on_invalid",
    "check_ray_read",
    "check_sample_unit",
]

#: The replay buffer (``buffer.kind``): ``"uniform"``, ``"prioritized"`` (its settings in
#: ``buffer.prioritized``), ``"mixin"`` (``buffer.mixin``) or ``"reservoir"``.
BufferKind = Literal["uniform", "prioritized", "mixin", "reservoir"]
BUFFER_KINDS: tuple[BufferKind, ...] = get_args(BufferKind)

#: What one sample is (``sample.unit``): ``"transition"`` (1-step or n-step) or ``"sequence"``
#: (its settings in ``sample.sequence``).
SampleUnitKind = Literal["transition", "sequence"]
SAMPLE_UNITS: tuple[SampleUnitKind, ...] = get_args(SampleUnitKind)

#: Where a batch job's units run (``run_pipeline(engine=...)``, ``process --engine``):
#: ``"local"`` (in this process), ``"ray"`` (Ray tasks) or ``"auto"`` (local for small inputs
#: without a cluster).
Engine = Literal["auto", "local", "ray"]
ENGINES: tuple[Engine, ...] = get_args(Engine)

#: How written sample files hold array columns (``layout=``, ``--layout``); see
#: :mod:`~offline_prelearner.io.fast_tensor`.
Layout = Literal["auto", "lists", "fast", "rllib"]
LAYOUTS: tuple[Layout, ...] = get_args(Layout)

#: What happens to bad data (``read.on_invalid``, the one policy of a config): ``"raise"`` (the
#: default) raises the :class:`~offline_prelearner.errors.DataError`; ``"skip"`` counts it;
#: ``"quarantine"`` counts it and keeps what was refused. Set by the config, never carried by
#: the data.
OnInvalid = Literal["raise", "skip", "quarantine"]
ON_INVALID: tuple[OnInvalid, ...] = get_args(OnInvalid)

#: Who reads the learner stream's files (``ray.read``).
RayRead = Literal["auto", "actor", "ray"]
RAY_READS: tuple[RayRead, ...] = get_args(RayRead)

#: Rows per input batch (``ray.batch_size``): a count, ``"auto"`` or ``None`` (no cut).
BatchSize = int | Literal["auto"] | None


def _choice(label: str, value: Any, choices: tuple[str, ...]) -> Any:
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(f"{label} must be one of {choices}, found {shown(value)}")
    return value


def check_buffer_kind(value: Any, label: str = "buffer.kind") -> BufferKind:
    """The validator of a buffer kind: one of :data:`BUFFER_KINDS`.

    Args:
        value: The kind to check.
        label: The setting's name, for the error.

    Returns:
        The kind.

    Raises:
        ConfigError: Naming ``label``, the kinds and the value found.
    """
    kind: BufferKind = _choice(label, value, BUFFER_KINDS)
    return kind


def check_sample_unit(value: Any, label: str = "sample.unit") -> SampleUnitKind:
    """The validator of a sample unit: one of :data:`SAMPLE_UNITS`.

    Args:
        value: The unit to check.
        label: The setting's name, for the error.

    Returns:
        The unit.

    Raises:
        ConfigError: Naming ``label``, the units and the value found.
    """
    unit: SampleUnitKind = _choice(label, value, SAMPLE_UNITS)
    return unit


def check_engine(value: Any, label: str = "engine") -> Engine:
    """The validator of a batch job's engine: one of :data:`ENGINES`.

    Args:
        value: The engine to check.
        label: The setting's name, for the error.

    Returns:
        The engine.

    Raises:
        ConfigError: Naming ``label``, the engines and the value found.
    """
    engine: Engine = _choice(label, value, ENGINES)
    return engine


def check_layout(value: Any, label: str = "layout") -> Layout:
    """The validator of a sample file layout: one of :data:`LAYOUTS`.

    Args:
        value: The layout to check.
        label: The setting's name, for the error.

    Returns:
        The layout.

    Raises:
        ConfigError: Naming ``label``, the layouts and the value found (as
            ``layout must be one of 'auto', 'lists', 'fast', 'rllib', found 'x'``).
    """
    if not isinstance(value, str) or value not in LAYOUTS:
        raise ConfigError(
            f"{label} must be one of {', '.join(map(repr, LAYOUTS))}, found {shown(value)}"
        )
    return value  # narrowed to Layout by the test against LAYOUTS


def check_on_invalid(value: Any, label: str = "on_invalid") -> OnInvalid:
    """The validator of an invalid-data policy: one of :data:`ON_INVALID`.

    Args:
        value: The policy to check.
        label: The setting's name, for the error.

    Returns:
        The policy.

    Raises:
        ConfigError: Naming ``label``, the policies and the value found.
    """
    policy: OnInvalid = _choice(label, value, ON_INVALID)
    return policy


def check_ray_read(value: Any, label: str = "ray.read") -> RayRead:
    """The validator of who reads the learner stream's files: one of :data:`RAY_READS`.

    Args:
        value: The setting to check.
        label: The setting's name, for the error.

    Returns:
        The setting.

    Raises:
        ConfigError: Naming ``label``, the choices and the value found.
    """
    read: RayRead = _choice(label, value, RAY_READS)
    return read


def check_batch_size(value: Any, hi: int, label: str = "ray.batch_size") -> BatchSize:
    """The validator of rows per input batch: an int in ``[1, hi]``, ``"auto"`` or ``None``.

    Args:
        value: The batch size to check.
        hi: The largest count accepted.
        label: The setting's name, for the error.

    Returns:
        The batch size.

    Raises:
        ConfigError: Naming ``label``, what is accepted and the value found.
    """
    if value is None or value == "auto":
        return cast(BatchSize, value)
    if isinstance(value, str):
        raise ConfigError(
            f"{label} must be 'auto', null or an integer in [1, {hi}], found {shown(value)}"
        )
    return cast(int, check_int(label, value, 1, hi))
