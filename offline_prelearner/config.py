"""Frozen, validated configuration dataclasses, one per stage.

Every field is documented where it is declared; construction checks values and raises
:class:`~offline_prelearner.errors.ConfigError` naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .codec import DecodeLimits
from .errors import ConfigError
from .report import OnInvalid, check_on_invalid

__all__ = ["ReadConfig"]


@dataclass(frozen=True)
class ReadConfig:
    """How input batches become episodes.

    Attributes:
        format: Reader name: ``"rows"`` (one transition per row), ``"episodes"`` (msgpack
            episodes in an ``item`` column), or any name registered with ``register_reader``.
        schema: A :class:`~offline_prelearner.schema.ColumnSchema`, a preset name (see
            ``schemas/``) or a path to a schema JSON file. ``None`` means RLlib's new-stack names.
        legacy_pickle: Decode RLlib's legacy ``base64(lz4(pickle))`` compressed columns through
            the restricted unpickler. Off by default: data files are untrusted.
        on_invalid: ``"raise"`` | ``"skip"`` | ``"quarantine"`` for rows that cannot be read.
        check_continuity: Without a ``t`` column, check that each row's ``new_obs`` equals the
            next row's ``obs`` within an episode, so a scrambled row order is an error.
        limits: Size limits for decoding untrusted bytes.
    """

    format: str = "rows"
    schema: Any = None
    legacy_pickle: bool = False
    on_invalid: OnInvalid = "raise"
    check_continuity: bool = True
    limits: DecodeLimits = field(default_factory=DecodeLimits)

    def __post_init__(self) -> None:
        if not isinstance(self.format, str) or not self.format:
            raise ConfigError(f"format must be a non-empty string, found {self.format!r}")
        check_on_invalid(self.on_invalid)
        for name in ("legacy_pickle", "check_continuity"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, found {getattr(self, name)!r}")
