"""What the package knows of an input format: one :class:`InputFormat` per format, registered once.

Everything that names a format asks this registry: the reader for a format name
(:func:`~..readers.make_reader`), a file's format (:func:`~..sources.format_of`), a batch's format
(:func:`~..readers.detect_batch_format`), which formats are read file by file as step tables
(:func:`whole_file_formats`, :func:`~..sources.read_table`) and the CLI's ``--format`` choices.

The built-in formats are registered in :mod:`offline_prelearner.io.formats` (its ``__init__``),
each from the ``spec.py`` of its folder; a user's format is one :func:`register_format` call.
Detection tries the formats in the order they were registered; the ``fallback`` format (``rows``:
any Parquet or JSON-lines table) is tried last. Nothing here imports a reader: an
:class:`InputFormat` holds a function that imports it when the format is first read.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.parquet as pq

from ...config import DecodeLimits, ReadConfig
from ..stores import is_remote, locate, open_local
from .base import Reader

__all__ = [
    "JSON_LINES_SUFFIXES",
    "FileProbe",
    "InputFormat",
    "ReaderFactory",
    "input_format",
    "input_formats",
    "open_bytes",
    "register_format",
    "whole_file_formats",
]

#: What a format name stands for: ``factory(config) -> Reader`` (a reader class, usually).
ReaderFactory: TypeAlias = Callable[[ReadConfig], Reader]

#: The file names read as JSON lines (one record per line).
JSON_LINES_SUFFIXES = (".json", ".jsonl", ".ndjson")


class FileProbe:
    """One file as format detection sees it: its path, and (read on first use, then kept) its
    Parquet footer or its first JSON line, so that each format's ``detect_file`` looks at the
    same bytes without opening the file again.

    Args:
        path: The file's local path or store URI.
        footer: Its Parquet footer where the caller has read it already (the planning scan),
            so that detection opens nothing.
        schema: The footer's Arrow schema where the caller has it (else converted once, on
            first use).
    """

    def __init__(
        self, path: str, footer: pq.FileMetaData | None = None, schema: pa.Schema | None = None
    ) -> None:
        self.path = path
        self._footer: pq.FileMetaData | None = footer
        self._footer_error: Exception | None = None
        self._first: tuple[Any] | None = None
        self._schema = schema  # the footer's as Arrow, converted once (each detector asks)

    @property
    def is_json_lines(self) -> bool:
        """Whether the file is named as JSON lines (``.json``, ``.jsonl``, ``.ndjson``)."""
        return self.path.endswith(JSON_LINES_SUFFIXES)

    @property
    def footer(self) -> pq.FileMetaData | None:
        """The Parquet footer; None for JSON lines or a file that is not Parquet
        (:attr:`footer_error` says why)."""
        if self._footer is None and self._footer_error is None and not self.is_json_lines:
            try:
                if is_remote(self.path):
                    loc = locate(self.path)
                    self._footer = pq.read_metadata(loc.path, filesystem=loc.fs)
                else:
                    self._footer = pq.read_metadata(self.path)
            except (pa.ArrowInvalid, OSError) as e:
                self._footer_error = e
        return self._footer

    @property
    def footer_error(self) -> Exception | None:
        """Why the file has no Parquet footer (None: it has one, or it is JSON lines)."""
        _ = self.footer
        return self._footer_error

    @property
    def schema(self) -> pa.Schema | None:
        """The Parquet file's Arrow schema; None where :attr:`footer` is."""
        if self._schema is None:
            footer = self.footer
            self._schema = None if footer is None else footer.schema.to_arrow_schema()
        return self._schema

    @property
    def first_record(self) -> Any:
        """A JSON-lines file's first line, parsed (None: not JSON lines, an empty first line or
        not valid JSON). Raises OSError where the file cannot be opened."""
        if self._first is None:
            rec = None
            if self.is_json_lines:
                with open_bytes(self.path) as fh:
                    first = fh.readline(1 << 20).strip()
                try:
                    rec = json.loads(first) if first else None
                except ValueError:
                    rec = None
            self._first = (rec,)
        return self._first[0]


def open_bytes(path: str) -> Any:
    """A file opened for reading bytes: a local file, or a store's as a buffered stream.

    Args:
        path: A local path or store URI.

    Returns:
        A binary file object (a context manager; the caller closes it).
    """
    if is_remote(path):
        return io.BufferedReader(locate(path).open_input_file())
    return open_local(path)


@dataclass(frozen=True)
class InputFormat:
    """One input format, as every part of the package that names formats sees it.

    Args:
        name: The ``format`` name (``ReadConfig.format``, ``--format``).
        reader: A function that imports the format's reader and returns its factory
            (``factory(config) -> Reader``, a reader class usually); called when the format is
            first read, so registering a format imports nothing of its reader.
        detect_file: Whether a file is of this format, from a :class:`FileProbe` (cheap: a name
            check, the Parquet footer or the first JSON line); None: never detected from files.
        detect_batch: Whether a batch is of this format, from its column names (a frozenset);
            None: never detected from batches (``format="auto"`` in the prelearner).
        whole_file: Its files are read whole, one step table a file (never cut into batches)
            and planned file by file, as Minari's and D4RL's are.
        read_table: ``read_table(path, limits) -> pa.Table``: one of its files as a step table,
            for a format whose files are not Parquet or JSON-lines tables; None: they are.
        fallback: Detection tries this format after every other one (``rows``: any Parquet or
            JSON-lines table).
        split_file: For a ``whole_file`` format whose files hold many episodes:
            ``split_file(path, limits) -> pieces``, each piece the episode keys (strings) of
            consecutive whole episodes that one unit of a batch job reads together, so that a
            unit's memory is bounded whatever the file holds (LeRobot v3.0's data files); None:
            a file is one unit.
        read_episodes: With ``split_file``: ``read_episodes(path, limits, keys) -> (table,
            rows)``, the step table of those episodes of a file and each of its rows' number
            in the file.
    """

    name: str
    reader: Callable[[], ReaderFactory]
    detect_file: Callable[[FileProbe], bool] | None = None
    detect_batch: Callable[[frozenset[str]], bool] | None = None
    whole_file: bool = False
    read_table: Callable[[str, DecodeLimits], pa.Table] | None = None
    fallback: bool = False
    split_file: Callable[[str, DecodeLimits], list[tuple[str, ...]]] | None = None
    read_episodes: Callable[[str, DecodeLimits, tuple[str, ...]], tuple[pa.Table, Any]] | None = (
        None
    )


_FORMATS: dict[str, InputFormat] = {}


def register_format(spec: InputFormat) -> InputFormat:
    """Makes ``spec`` a format every command and entry point knows: read by name, detected from
    files and batches (in registration order, after those registered before it), listed in the
    CLI's ``--format`` choices. A name registered again is replaced (in its first place).

    Args:
        spec: The format's description.

    Returns:
        ``spec``, unchanged.
    """
    _FORMATS[spec.name] = spec
    return spec


def input_formats() -> list[InputFormat]:
    """The registered formats in detection order: registration order, the fallback last.

    Returns:
        Every registered format, the ``fallback`` ones after the others.
    """
    specs = list(_FORMATS.values())
    return [s for s in specs if not s.fallback] + [s for s in specs if s.fallback]


def input_format(name: str) -> InputFormat | None:
    """The format registered under ``name``, or None.

    Args:
        name: A format name.

    Returns:
        Its :class:`InputFormat`, or None when no format has that name.
    """
    return _FORMATS.get(name)


def whole_file_formats() -> tuple[str, ...]:
    """The names of the formats whose files are read whole (:attr:`InputFormat.whole_file`).

    Returns:
        Their names, in registration order.
    """
    return tuple(s.name for s in _FORMATS.values() if s.whole_file)
