"""One exception tree for the whole package.

::

    OfflinePrelearnerError                      root; catch this to catch everything of ours
    ├── DataError (ValueError)                  something about the *data* is wrong; says where
    │   ├── SchemaError                         columns missing / renamed / of the wrong type
    │   ├── DecodeError                         corrupt lz4, bad msgpack, refused pickle, size limit
    │   └── EpisodeValidationError              an episode breaks a contract (done, t, lengths, NaN)
    ├── UnsupportedFormatError (ValueError)     no reader for this input / cannot detect the format
    ├── ConfigError (ValueError)                a config field has a bad value; names the field
    └── EmptyBufferError (RuntimeError)         sampling from a buffer that holds nothing sampleable

Every :class:`DataError` carries a :class:`Where` (file, column, episode id, row) and renders it
into its message, so a user reading the one line that reaches the terminal knows where to look.
A value that comes from the input (a file name, an episode id, a config value) is shown through
:func:`shown`: its ``repr``, cut to :data:`SHOWN_CHARS` characters with the full length, so a
1 MiB id or a YAML alias bomb costs a short line, never a megabyte or an exponential ``repr``.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ConfigError",
    "DataError",
    "DecodeError",
    "EmptyBufferError",
    "EpisodeValidationError",
    "OfflinePrelearnerError",
    "SchemaError",
    "UnsupportedFormatError",
    "Where",
    "cut",
    "error_from_dict",
    "error_to_dict",
    "shown",
]

#: How many characters of a value an error message shows (:func:`shown`).
SHOWN_CHARS = 200
#: The most characters of a message that reaches the user (a long message is cut, with its length).
MESSAGE_CHARS = 2000

_REPR = reprlib.Repr()
_REPR.maxlevel = 4  # nested containers: an alias bomb's exponential repr is never built
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = SHOWN_CHARS + 2
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 10


def cut(text: str, limit: int = MESSAGE_CHARS) -> str:
    """``text``, or its first ``limit`` characters, ``…`` and the full length."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} chars)"


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """A value from the input as an error message shows it: ``repr`` (quotes, escapes: a NUL
    byte, a newline or an undecodable file-name byte is visible and stays on one line), cut to
    ``limit`` characters with an ellipsis and the full length. Containers are walked only a few
    levels and items deep, so the cost is bounded whatever the value."""
    if isinstance(value, str | bytes):
        full = len(value)
        text = repr(value[: limit + 1])
        if full > limit:
            unit = "chars" if isinstance(value, str) else "bytes"
            return f"{text[:limit]}… ({full} {unit})"
        return text
    text = _REPR.repr(value)  # bounded: the full repr of a container is never built
    return text if len(text) <= limit else f"{text[:limit]}…"


@dataclass(frozen=True)
class Where:
    """Where in the input a problem sits. Every field is optional; known ones are printed."""

    file: str | None = None
    column: str | None = None
    episode_id: Any = None
    row: int | None = None
    timestep: int | None = None

    def merged(self, other: Where | None) -> Where:
        """Fields of ``self`` win; holes are filled from ``other``."""
        if other is None:
            return self
        return Where(**{f: _first(getattr(self, f), getattr(other, f)) for f in _WHERE_FIELDS})

    def __str__(self) -> str:
        parts = []
        if self.file is not None:
            parts.append(f"file {shown(self.file)}")
        if self.column is not None:
            parts.append(f"column {shown(self.column)}")
        if self.episode_id is not None:
            parts.append(f"episode {shown(self.episode_id)}")
        if self.row is not None:
            parts.append(f"row {self.row}")
        if self.timestep is not None:
            parts.append(f"t={self.timestep}")
        return ", ".join(parts)


_WHERE_FIELDS = ("file", "column", "episode_id", "row", "timestep")


def _first(a: Any, b: Any) -> Any:
    return a if a is not None else b


class OfflinePrelearnerError(Exception):
    """Root of every exception this package raises on purpose."""


class DataError(OfflinePrelearnerError, ValueError):
    """The input data is wrong. ``where`` says where; ``reason`` is a stable tag for counters.

    Args:
        message: What is wrong, naming the field, what was expected and what was found.
        where: Where in the data (file, column, episode, row, step); default: unknown.
        reason: A stable tag for counters and quarantine rows; default: the class's ``reason``.
    """

    reason = "invalid_data"

    def __init__(self, message: str, where: Where | None = None, *, reason: str | None = None):
        self.message = message
        self.where = where or Where()
        if reason is not None:
            self.reason = reason
        super().__init__(self._render())

    def _render(self) -> str:
        loc = str(self.where)
        message = cut(self.message)
        return f"{message} [{loc}]" if loc else message

    def at(self, **fields: Any) -> DataError:
        """Returns the same error with more location filled in (known fields are kept)."""
        return type(self)(self.message, self.where.merged(Where(**fields)), reason=self.reason)

    def __reduce__(self) -> tuple[Any, ...]:
        # Ray ships exceptions between processes; keep message, location and reason intact.
        return (_rebuild, (type(self), self.message, self.where, self.reason))


def _rebuild(cls: type[DataError], message: str, where: Where, reason: str) -> DataError:
    return cls(message, where, reason=reason)


class SchemaError(DataError):
    """Columns are missing, renamed or of a type the schema does not admit."""

    reason = "schema"


class DecodeError(DataError):
    """Bytes could not be decoded safely: corrupt lz4/base64/msgpack, refused pickle, size limit."""

    reason = "decode"


class EpisodeValidationError(DataError):
    """An episode breaks a contract: not done, `t` out of order, inconsistent lengths, NaNs."""

    reason = "invalid_episode"


class UnsupportedFormatError(OfflinePrelearnerError, ValueError):
    """No reader is registered for the requested format, or a path's format is unknown."""


class ConfigError(OfflinePrelearnerError, ValueError):
    """A configuration value is invalid. The message names the field, expected and found."""


class EmptyBufferError(OfflinePrelearnerError, RuntimeError):
    """A sample was requested from a buffer that holds nothing sampleable (yet)."""


def error_to_dict(error: OfflinePrelearnerError) -> dict[str, Any]:
    """One of our errors as plain data (to cross a process boundary without pickle)."""
    d: dict[str, Any] = {"type": type(error).__name__}
    if isinstance(error, DataError):
        d.update(message=error.message, reason=error.reason, where=vars(error.where).copy())
        d["where"]["episode_id"] = _plain(d["where"]["episode_id"])
    else:
        d["message"] = str(error)
    return d


def _plain(value: Any) -> Any:
    return value if isinstance(value, str | int | float | type(None)) else str(value)


def error_from_dict(d: dict[str, Any]) -> OfflinePrelearnerError:
    """Inverse of :func:`error_to_dict` (an unknown type comes back as the root class)."""
    cls = {c.__name__: c for c in _ALL}.get(d.get("type", ""), OfflinePrelearnerError)
    if issubclass(cls, DataError):
        return cls(d["message"], Where(**d.get("where", {})), reason=d.get("reason"))
    return cls(d["message"])


_ALL: tuple[type[OfflinePrelearnerError], ...] = (
    OfflinePrelearnerError,
    DataError,
    SchemaError,
    DecodeError,
    EpisodeValidationError,
    UnsupportedFormatError,
    ConfigError,
    EmptyBufferError,
)
