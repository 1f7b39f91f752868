"""Finding and opening input files without Ray: paths, globs, format detection, Parquet/JSON tables.

RLlib's recorder spreads one episode over several small files, and row data without a ``t``
column is only trustworthy in the order it was written: files are therefore always listed in
name order (directories recursively), and readers keep their state from one file to the next.

Minari datasets (a dataset folder, its ``data`` folder, or a dataset id resolved as Minari does)
expand to their data files in episode order, are detected as ``minari`` and read as step tables
(:mod:`.datasets.minari`); ``.hdf5``/``.h5`` files are D4RL files (``d4rl``, :mod:`.datasets.d4rl`).
Both are read whole (a file is a unit of episodes, never cut into batches).
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import DataError, UnsupportedFormatError, Where
from .datasets.d4rl import is_d4rl_file, read_d4rl_file
from .datasets.minari import (
    data_dir_of,
    find_data_dir,
    is_minari_file,
    minari_files,
    read_minari_file,
)

__all__ = [
    "WHOLE_FILE_FORMATS",
    "check_one_format",
    "detect_format",
    "expand_paths",
    "format_of",
    "iter_tables",
    "read_table",
]

#: Formats whose files are read whole: a file holds whole episodes, never cut into batches.
WHOLE_FILE_FORMATS = ("minari", "d4rl")

_PARQUET_EXT = (".parquet", ".pq")
_JSON_EXT = (".json", ".jsonl", ".ndjson")
_SKIP_NAMES = ("_SUCCESS", "_common_metadata", "_metadata")


def _is_data_file_name(p: Path) -> bool:
    return not p.name.startswith((".", "_")) and p.name not in _SKIP_NAMES


def _is_data_file(p: Path) -> bool:
    return p.is_file() and _is_data_file_name(p)


def expand_paths(path: str | os.PathLike[str] | list[str]) -> list[str]:
    """Files under ``path``: a file, a directory (recursive) or a glob; sorted by name. A Minari
    dataset (its folder, its ``data`` folder or its id) gives its data files in episode order.

    Raises FileNotFoundError naming the path when nothing matches.
    """
    if isinstance(path, list):
        return [f for p in path for f in expand_paths(p)]
    data_dir = find_data_dir(path)
    if data_dir is not None:
        return minari_files(data_dir)
    p = Path(path)
    if p.is_file():
        return [str(p)]
    if p.is_dir():
        found = list(p.rglob("*"))
    else:
        found = [Path(f) for f in glob.glob(str(path), recursive=True)]
    for f in found:
        if f.is_symlink() and not f.exists() and _is_data_file_name(f):
            raise FileNotFoundError(
                f"{str(f)!r} is a symlink to a missing file ({os.readlink(f)!r}); restore its "
                "target or remove the link"
            )
    files = sorted(str(f) for f in found if _is_data_file(f))
    if not files:
        raise FileNotFoundError(f"no data files at {str(path)!r} (a file, directory or glob)")
    return files


def _sniff_json(path: str) -> str | None:
    with open(path, "rb") as fh:
        first = fh.readline(1 << 20).strip()
    if not first:
        return None
    try:
        rec = json.loads(first)
    except ValueError:
        return None
    if isinstance(rec, dict):
        if set(rec) == {"value"} and not isinstance(rec["value"], dict):
            return "sample_batches"  # a broken wrapped record: that reader refuses its line
        rec = rec.get("value", rec)  # some old writers wrapped records as {"value": {...}}
        if isinstance(rec, dict) and rec.get("type") in ("SampleBatch", "MultiAgentBatch"):
            return "sample_batches"
        if isinstance(rec, dict):
            return "rows"
    return None


def detect_format(files: list[str]) -> str:
    """``rows``, ``episodes``, ``sample_batches``, ``minari`` or ``d4rl``, from the first file's
    name and content; a mix of formats among the files is refused (:func:`check_one_format`)."""
    if not files:
        raise UnsupportedFormatError("no files to detect a format from")
    fmt = format_of(files[0])
    check_one_format(files)
    return fmt


#: Formats :func:`check_one_format` tells apart file by file (the others are read whole).
_SNIFFED = ("rows", "episodes", "sample_batches")


def check_one_format(files: list[str]) -> None:
    """Refuses files of more than one format (rows, msgpack episodes, old-stack batches) in one
    input, in one line naming each format and its files: a reader given another format's file
    would read it as nothing, or as rows missing columns. A file whose format cannot be told
    (empty, corrupt) is left to the reader, which refuses or counts it."""
    if len(files) < 2:
        return
    by_format: dict[str, list[str]] = {}
    for f in files:
        try:
            fmt = format_of(f)
        except (UnsupportedFormatError, OSError):
            continue
        if fmt in _SNIFFED:
            by_format.setdefault(fmt, []).append(f)
    if len(by_format) < 2:
        return

    def listed(names: list[str]) -> str:
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        return ", ".join(os.path.basename(n) for n in names[:3]) + more

    parts = [f"{fmt!r} ({listed(names)})" for fmt, names in by_format.items()]
    raise UnsupportedFormatError(
        f"mixed formats in one input: {' and '.join(parts)}; run one job per format "
        "(give the files of one format as the path, e.g. a glob such as 'dir/*.parquet')"
    )


def format_of(first: str) -> str:
    """The format of one file, from its name and content (see :func:`detect_format`)."""
    if data_dir_of(first) is not None:
        return "minari"
    if is_d4rl_file(first):
        return "d4rl"
    if first.endswith(_JSON_EXT):
        fmt = _sniff_json(first)
        if fmt is None:
            raise UnsupportedFormatError(
                f"cannot detect the format of {first!r}: not JSON lines of SampleBatch records"
            )
        return fmt
    try:
        schema = pq.read_schema(first)
    except (pa.ArrowInvalid, OSError) as e:
        raise UnsupportedFormatError(
            f"cannot detect the format of {first!r}: not a Parquet or JSON-lines file ({e})"
        ) from None
    names = set(schema.names)
    if "item" in names:
        item_type = schema.field("item").type
        if pa.types.is_binary(item_type) or pa.types.is_large_binary(item_type):
            return "episodes"
    if "type" in names and ("policy_batches" in names or "count" in names):
        return "sample_batches"
    return "rows"


def read_table(path: str, columns: list[str] | None = None) -> pa.Table:
    """One file as an Arrow table; unreadable files are a DataError naming the file.

    Parquet and JSON lines as they are; a Minari data file or a D4RL file as a step table.
    """
    if path.endswith((".arrow", ".parquet", ".hdf5")) and is_minari_file(path):
        return read_minari_file(path)
    if is_d4rl_file(path):
        return read_d4rl_file(path)
    try:
        if path.endswith(_JSON_EXT):
            import pyarrow.json as pajson

            return pajson.read_json(path)
        return pq.read_table(path, columns=columns)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        bad = _first_bad_json_line(path) if path.endswith(_JSON_EXT) else None
        if bad is not None:
            msg = f"line {bad[0]} is {bad[1]}, not a JSON object (one record per line)"
        raise DataError(
            f"cannot read the file: {msg}", Where(file=path), reason="unreadable_file"
        ) from None


def _first_bad_json_line(path: str) -> tuple[int, str] | None:
    """The first line of a JSON-lines file that is not an object, and what it is instead (only
    on the error path: pyarrow's reader names no line)."""
    try:
        with open(path, "rb") as fh:
            for n, raw in enumerate(fh, start=1):
                if not raw.strip():
                    continue
                try:
                    value = json.loads(raw)
                except ValueError:
                    return n, "not valid JSON"
                if not isinstance(value, dict):
                    return n, f"a JSON {type(value).__name__}"
    except OSError:
        return None
    return None


def iter_tables(
    files: list[str], columns: list[str] | None = None
) -> Iterator[tuple[str, pa.Table]]:
    """Yields ``(path, table)`` per file, in the given (name) order."""
    for f in files:
        yield f, read_table(f, columns)
