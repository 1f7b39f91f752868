"""One exception tree for the whole package: every exception and warning class is defined here.

::

    OfflinePrelearnerError                      root; catch this to catch everything of ours
    ├── DataError (ValueError)                  something about the *data* is wrong; says where
    │   ├── SchemaError                         columns missing / renamed / of the wrong type
    │   │   └── ColumnValueError                a column's values cannot form one array (.rows)
    │   ├── DecodeError                         corrupt lz4, bad msgpack, refused pickle, size limit
    │   └── EpisodeValidationError              an episode breaks a contract (done, t, lengths, NaN)
    ├── UnsupportedFormatError (ValueError)     no reader for this input / cannot detect the format
    ├── ConfigError (ValueError)                a config field has a bad value; names the field
    │   └── CommitError                         --out cannot be used as asked (in use, not empty)
    ├── EmptyBufferError (RuntimeError)         sampling from a buffer that holds nothing sampleable
    │   └── RateLimitExceeded                   sampling now would pass the sample-to-insert ratio
    ├── StorageError (OSError)                  a store refused or could not answer; one line
    │   └── _NotFound (FileNotFoundError)       a store's file that is not there (io.stores)
    └── JobFailed                               the batch job could not finish; nothing committed

    Outside the root, on purpose:
    Interrupted (KeyboardInterrupt)             SIGINT / SIGTERM under the CLI: it must unwind like
                                                Ctrl-C, past every ``except Exception`` and ours
    ContractError (AssertionError)              a check of ``offline_prelearner.testing`` failed: a
                                                failed assertion, which pytest reports as such
    Fallback (Exception)                        control flow inside io/formats/episodes: the fast
                                                msgpack path hands a record to the general one
    _Bad (Exception)                            control flow inside io/arrow_numpy: offending rows,
                                                raised as a ColumnValueError before they leave it
    OddDataWarning (UserWarning)                legal but suspicious data (warned once, not raised)
    CommittedWarning (UserWarning)              the job committed; a step after its commit failed
    StaleIndexWarning (UserWarning)             a dataset index its folder no longer matches

The two internal sentinels do not derive from :class:`OfflinePrelearnerError`, so that a caller's
``except OfflinePrelearnerError`` (a unit that reports our errors, the CLI) never swallows one
that escaped by mistake: it surfaces as the bug it is.

Every :class:`DataError` carries a :class:`Where` (file, column, episode id, row) and renders it
into its message, so a user reading the one line that reaches the terminal knows where to look.
A value that comes from the input (a file name, an episode id, a config value) is shown through
:func:`shown`: its ``repr``, cut to :data:`SHOWN_CHARS` characters with the full length, so a
1 MiB id or a YAML alias bomb costs a short line, never a megabyte or an exponential ``repr``.
Every exception here pickles with its fields, as Ray ships a worker's exception to the driver
(a :class:`ColumnValueError`'s ``rows`` excepted: they are used where it is raised).
"""

from __future__ import annotations

import reprlib
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy only types ColumnValueError.rows: importing this module stays light
    import numpy as np

__all__ = [
    "ColumnValueError",
    "CommitError",
    "CommittedWarning",
    "ConfigError",
    "ContractError",
    "DataError",
    "DecodeError",
    "EmptyBufferError",
    "EpisodeValidationError",
    "Interrupted",
    "JobFailed",
    "OddDataWarning",
    "OfflinePrelearnerError",
    "RateLimitExceeded",
    "SchemaError",
    "StaleIndexWarning",
    "StorageError",
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
    """``text``, or its first ``limit`` characters, ``…`` and the full length.

    Args:
        text: A message or a piece of one (already a string: nothing is ``repr``-ed).
        limit: The most characters kept before the ellipsis; default :data:`MESSAGE_CHARS`.

    Returns:
        ``text`` itself when it fits, else its head with ``… (N chars)``.
    """
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} chars)"


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """A value from the input as an error message shows it: ``repr`` (quotes, escapes: a NUL
    byte, a newline or an undecodable file-name byte is visible and stays on one line), cut to
    ``limit`` characters with an ellipsis and the full length. Containers are walked only a few
    levels and items deep, so the cost is bounded whatever the value.

    Args:
        value: Anything read from the input: a file name, an episode id, a config value.
        limit: The most characters of the ``repr`` kept; default :data:`SHOWN_CHARS`.

    Returns:
        One line; for a string or bytes cut short, the full length in ``chars`` or ``bytes``.
    """
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
        """Fields of ``self`` win; holes are filled from ``other``.

        Args:
            other: A less precise location (the file a reader was on); None leaves ``self``.

        Returns:
            A new :class:`Where`; ``self`` when ``other`` is None.
        """
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
        """Returns the same error with more location filled in (known fields are kept).

        Args:
            **fields: :class:`Where` fields (``file``, ``column``, ``episode_id``, ``row``,
                ``timestep``) known where the error is caught; they fill only the holes.

        Returns:
            A new error of the same class, message and reason, to raise in place of this one.
        """
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


class ColumnValueError(SchemaError):
    """A column's values cannot become one numpy array (ragged, null, wrong type, undecodable).

    ``rows`` holds every offending row (sorted, int64) when they are known, or None when the whole
    column is at fault (a string column where numbers are needed). It is not carried through
    :meth:`DataError.at` or pickling; use it where it is raised.

    Args:
        message: What is wrong with the column's values, naming the column.
        where: The file, column and first offending row; default: unknown.
        reason: A stable tag for counters (``ragged``, ``null`` ...); default: ``schema``.
        rows: Every offending row, sorted int64, or None when the whole column is at fault.
    """

    def __init__(
        self,
        message: str,
        where: Where | None = None,
        *,
        reason: str | None = None,
        rows: np.ndarray | None = None,
    ) -> None:
        super().__init__(message, where, reason=reason)
        self.rows = rows


class UnsupportedFormatError(OfflinePrelearnerError, ValueError):
    """No reader is registered for the requested format, or a path's format is unknown."""


class ConfigError(OfflinePrelearnerError, ValueError):
    """A configuration value is invalid. The message names the field, expected and found."""


class CommitError(ConfigError):
    """The output folder cannot be used as asked (not empty, a file, in use by another job, a
    resume that does not fit, staged files that are not what their units wrote)."""


class EmptyBufferError(OfflinePrelearnerError, RuntimeError):
    """A sample was requested from a buffer that holds nothing sampleable (yet)."""


class RateLimitExceeded(EmptyBufferError):
    """Sampling now would exceed the buffer's sample-to-insert ratio. Nothing was drawn.

    Args:
        message: The rule that was crossed, with the counts that crossed it.
        allowed: How many rows may still be drawn now.
        missing: How many more timesteps must be inserted before a batch of the requested size
            is allowed.
    """

    def __init__(self, message: str, *, allowed: int, missing: int) -> None:
        super().__init__(message)
        self.allowed = allowed
        self.missing = missing

    def __reduce__(self) -> tuple[Any, ...]:
        # The counts are keyword-only: the default (cls, args) would rebuild it without them.
        return (_rate_limited, (type(self), str(self), self.allowed, self.missing))


def _rate_limited(
    cls: type[RateLimitExceeded], message: str, allowed: int, missing: int
) -> RateLimitExceeded:
    return cls(message, allowed=allowed, missing=missing)


class StorageError(OfflinePrelearnerError, OSError):
    """A store refused or could not answer: no such bucket, denied, unreachable. One line."""


class _NotFound(StorageError, FileNotFoundError):
    """A store's file that is not there (both a StorageError and a FileNotFoundError)."""


class JobFailed(OfflinePrelearnerError):
    """The job could not finish; nothing was committed to its output folder."""


# ------------------------------------------------------------------ outside the root, on purpose
class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM reached the CLI while its job ran.

    A ``KeyboardInterrupt``, so code that already unwinds cleanly on Ctrl-C (Ray's own waits
    among it) does the same here; :func:`~offline_prelearner.jobs.session.interrupts.received`
    keeps which signal it was.

    Args:
        signum: The signal's number (``signal.SIGINT`` or ``signal.SIGTERM``); the message is its
            name.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    def __reduce__(self) -> tuple[Any, ...]:
        # args holds the name, which the constructor does not take: rebuild it from the number.
        return (type(self), (self.signum,))


class ContractError(AssertionError):
    """An implementation breaks a contract of :mod:`offline_prelearner.testing`; the message says
    which and how."""


class Fallback(Exception):
    """The fast msgpack path does not handle this record; decode it with the general path.

    Internal to ``io/formats/episodes``: every raise is caught there.

    Args:
        episode_id: The id read before giving up (None if not reached), for error messages.
    """

    def __init__(self, episode_id: Any = None) -> None:
        super().__init__()
        self.episode_id = episode_id


class _Bad(Exception):
    """Internal to ``io/arrow_numpy``: offending rows at the current nesting level (mapped to outer
    rows going up), raised as a :class:`ColumnValueError` before it leaves that module."""

    def __init__(self, message: str, reason: str, rows: np.ndarray | None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.rows = rows

    def shifted(self, fn: Callable[[np.ndarray], np.ndarray]) -> _Bad:
        import numpy as np  # here, not at the top: the CLI imports this module before numpy

        rows = None if self.rows is None else np.unique(fn(self.rows))
        return _Bad(self.message, self.reason, rows)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message, self.reason, self.rows))


class OddDataWarning(UserWarning):
    """Legal but suspicious data (float64 observations for a float32 space, empty episodes)."""


class StaleIndexWarning(UserWarning):
    """A dataset index that no longer matches its folder (files changed, added or gone since
    it was written): those files are read afresh, the index is not trusted for them."""


class CommittedWarning(UserWarning):
    """The job committed, and a step after its commit point (stats, deletions) failed."""


def error_to_dict(error: OfflinePrelearnerError) -> dict[str, Any]:
    """One of our errors as plain data (to cross a process boundary without pickle).

    Args:
        error: The error a Ray unit caught; a :class:`DataError` keeps its message, reason and
            location (an episode id that is not a plain scalar becomes its ``str``), any other
            its message.

    Returns:
        A JSON-able dict with ``type``, ``message`` and, for a :class:`DataError`, ``reason`` and
        ``where``; :func:`error_from_dict` turns it back into the error.
    """
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
    """Inverse of :func:`error_to_dict` (an unknown type comes back as the root class).

    Args:
        d: What :func:`error_to_dict` returned, after it crossed the process boundary.

    Returns:
        An error of the same class, message, reason and location, not raised; a class this side
        does not rebuild from a message (:class:`RateLimitExceeded`, :class:`StorageError`) comes
        back as :class:`OfflinePrelearnerError` with the message.
    """
    cls = {c.__name__: c for c in _ALL}.get(d.get("type", ""), OfflinePrelearnerError)
    if issubclass(cls, DataError):
        return cls(d["message"], Where(**d.get("where", {})), reason=d.get("reason"))
    return cls(d["message"])


#: The classes :func:`error_from_dict` rebuilds by name. Not :class:`RateLimitExceeded` (its
#: counts are not in the dict; no unit samples a rate-limited buffer) and not :class:`StorageError`
#: (an OSError: a unit's store failure on Ray reaches the CLI as our error, exit 2, as it did).
_ALL: tuple[type[OfflinePrelearnerError], ...] = (
    OfflinePrelearnerError,
    DataError,
    SchemaError,
    ColumnValueError,
    DecodeError,
    EpisodeValidationError,
    UnsupportedFormatError,
    ConfigError,
    CommitError,
    EmptyBufferError,
    JobFailed,
)
