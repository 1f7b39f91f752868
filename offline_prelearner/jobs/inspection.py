"""``inspect``: what a dataset holds, and whether it is fit to train on.

Reads every file under a path in name order (no Ray: this is a quick look from a laptop), builds
episodes with the reader for the detected format, joins fragments spread over several files,
validates and de-duplicates them, and summarises: counts, episode lengths and returns, and every
row accounted for (kept, rejected by reason, duplicate).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..config import OnInvalid, ReadConfig, ValidateConfig
from ..episodes import columns as C
from ..episodes import observations as O
from ..episodes.dedupe import Deduplicator
from ..episodes.episode_columns import layout_of
from ..episodes.ledger import EpisodeBatch
from ..episodes.stitch import stitch_fragments
from ..episodes.validate import Validator
from ..errors import DataError, EpisodeValidationError, Where
from ..io.manifest import SAMPLES
from ..io.quarantine import write_quarantine
from ..io.readers import make_reader
from ..io.schema import load_schema
from ..io.sources import detect_format, expand_paths, read_table
from .outputs import committed_output, describe_samples, job_of

__all__ = ["InspectReport", "inspect", "inspect_any", "inspect_path"]

_JSON_EXT = (".json", ".jsonl", ".ndjson")


@dataclass
class InspectReport:
    """The result of :func:`inspect_path`; ``to_dict()`` is what ``inspect --json`` prints."""

    path: str
    format: str
    schema: str
    files: int
    batch: EpisodeBatch
    files_unreadable: list[str] = field(default_factory=list)
    quarantine_file: str | None = None
    seconds: float = 0.0
    per_file: list[dict[str, Any]] = field(default_factory=list)
    #: What the dataset's own metadata declares, where the format has any (a reader's
    #: ``about``: a LeRobot dataset's version, fps, cameras, codecs, tasks, declared counts).
    dataset: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-able dict: the ledger, episode length and return statistics, and the
        files read."""
        cols = self.batch.columns
        led = self.batch.ledger
        lens, rets = cols.length, cols.returns()

        def stats(a: np.ndarray) -> dict[str, float] | None:
            if a.size == 0:
                return None
            return {
                "min": float(a.min()),
                "mean": float(a.mean()),
                "max": float(a.max()),
                "std": float(a.std()),
            }

        first = cols.episode(0) if len(cols) else None
        return {
            "path": self.path,
            "format": self.format,
            "schema": self.schema,
            "files": self.files,
            "files_unreadable": self.files_unreadable,
            "dataset": self.dataset,
            "per_file": self.per_file,
            "rows": led.rows_in,
            "episodes": len(cols),
            "timesteps": int(lens.sum()),
            "terminated": int(cols.terminated.sum()),
            "truncated": int(cols.truncated.sum()),
            "not_done": int((~cols.done).sum()),
            "duplicates": led.episodes_duplicate,
            "duplicate_rows": led.rows_duplicate,
            "rejected": dict(sorted(led.rows_rejected.items())),
            "rejected_episodes": dict(sorted(led.episodes_rejected.items())),
            "rows_balance": led.balanced(),
            "observation": None if first is None else _observation(first.observations),
            "action": None if first is None else _shape_dtype(first.actions),
            "extras": [] if first is None else sorted(first.extras),
            "length": stats(lens),
            "return": stats(rets),
            "quarantine_file": self.quarantine_file,
            "seconds": round(self.seconds, 4),
            "episode_stats": [  # the report lists every episode: one entry each
                {"id": _jsonable_id(i), "len": n, "return": r, "terminated": t, "truncated": u}
                for i, n, r, t, u in zip(
                    cols.ids,
                    lens.tolist(),
                    rets.tolist(),
                    cols.terminated.tolist(),
                    cols.truncated.tolist(),
                    strict=True,
                )
            ],
        }


def _shape_dtype(values: np.ndarray) -> dict[str, Any]:
    return {"shape": list(values.shape[1:]), "dtype": str(values.dtype)}


def _observation(obs: O.Observations) -> dict[str, Any]:
    """Per-step shape and dtype of the observations: of the array, or of each composite leaf."""
    if isinstance(obs, np.ndarray):
        return _shape_dtype(obs)
    return {f"{C.OBS}{O.SEP}{p}": _shape_dtype(obs[p]) for p in sorted(obs)}


def _jsonable_id(x: Any) -> Any:
    return x if isinstance(x, str | int | float | type(None)) else str(x)


def inspect_path(
    path: str | os.PathLike[str],
    read: ReadConfig | None = None,
    validate: ValidateConfig | None = None,
    *,
    quarantine_dir: str | os.PathLike[str] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> InspectReport:
    """Reads, stitches, validates and de-duplicates everything under ``path``.

    ``read.format == "auto"`` detects the format from the first file that holds rows. Unreadable
    files are an error under ``on_invalid="raise"``, otherwise listed in ``files_unreadable``.
    ``progress(i, n, file)`` is called after each file.

    Args:
        path: A file, a directory (recursive, name order) or a glob of data files; everything
            is read into memory, one file at a time.
        read: Reader options (format, schema, limits, ``on_invalid``: the one policy for
            reading, stitching and validation); None: ``ReadConfig(format="auto")``.
        validate: The checks episodes must pass; None: the defaults (every check).
        quarantine_dir: Where refused data is written (``quarantine.parquet``) when
            ``read.on_invalid == "quarantine"``; ignored under any other policy; None: refused
            data is only counted.
        progress: Called as ``progress(files done, files, file)`` after each readable file
            (unreadable ones are skipped silently); None: not called.

    Returns:
        The report: the kept episodes (their batch and ledger), per-file counts, unreadable
        files, the quarantine file if one was written, and the time taken.

    Raises:
        FileNotFoundError: Nothing matches ``path``.
        UnsupportedFormatError: The format cannot be told, or the files hold several formats.
        DataError: Bad data or an unreadable file under ``on_invalid="raise"``, naming the
            file, episode and row.
    """
    start = time.perf_counter()
    files = expand_paths(os.fspath(path))
    read = read or ReadConfig(format="auto")
    if read.format == "auto":
        read = replace(read, format=detect_format(files))
    schema = load_schema(read.schema) if read.format == "rows" else None
    if schema is not None:
        read = replace(read, schema=schema)
    validate = validate or ValidateConfig()
    reader = make_reader(read)
    total = EpisodeBatch()
    unreadable: list[str] = []
    tally = _Tally(files, read.format)
    for i, f in enumerate(files):
        by_line = getattr(reader, "read_file", None) if f.endswith(_JSON_EXT) else None
        try:
            table = None if by_line is not None else read_table(f, limits=read.limits)
            if table is not None and table.num_rows == 0 and f.endswith(_JSON_EXT):
                raise DataError("the file holds no rows", Where(file=f), reason="unreadable_file")
        except DataError as e:
            if read.on_invalid == "raise":
                raise
            unreadable.append(f)
            tally.entries[f]["error"] = str(e)
            continue
        if table is not None and table.num_rows == 0:  # an empty partition: read, holds nothing
            if progress is not None:
                progress(i + 1, len(files), f)
            continue
        # Old-stack JSON lines through the reader's own parser: its errors name the line.
        got = by_line(f) if by_line is not None else reader.read(table, source=f)
        tally.read(f, got.ledger.rows_in, got)  # the reader's rows: a Minari step, not a table row
        _extend(total, got, read.on_invalid, f)
        if progress is not None:
            progress(i + 1, len(files), f)
    finish = getattr(reader, "finish", None)  # rows a reader held for a next row that never came
    if finish is not None:
        _extend(total, finish(), read.on_invalid, None)
    batch = stitch_fragments(total, read.on_invalid)
    batch = Validator(validate, read.on_invalid).validate(batch)
    duplicate = batch.ledger.rows_duplicate
    batch = Deduplicator().dedupe(batch)
    tally.settle(batch, batch.ledger.rows_duplicate - duplicate)
    qfile = None
    if quarantine_dir is not None and read.on_invalid == "quarantine":
        qfile = write_quarantine(batch.rejections, quarantine_dir, validate.observation_space)
    name = schema.name if schema is not None else read.format
    packed = getattr(reader, "detected_packed", None)
    if packed:
        name += f" (RLlib packed columns detected: {', '.join(packed)})"
    return InspectReport(
        path=os.fspath(path),
        format=read.format,
        schema=name,
        files=len(files),
        batch=batch,
        files_unreadable=unreadable,
        quarantine_file=qfile,
        seconds=time.perf_counter() - start,
        per_file=tally.to_list(),
        dataset=getattr(reader, "about", None),
    )


def inspect(
    path: str | os.PathLike[str],
    read: ReadConfig | None = None,
    validate: ValidateConfig | None = None,
    *,
    quarantine_dir: str | os.PathLike[str] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> dict[str, Any]:
    """What a dataset, or a folder a job of this package wrote, holds: the dict that
    ``offline-prelearner inspect --json`` prints.

    A dataset (any input format, or a ``convert`` output) is read as a job reads it
    (:func:`inspect_path`): ``kind`` is ``"dataset"``, and a committed folder adds ``job`` (who
    wrote it, from its manifest). A ``process`` output (its folder, its ``samples`` folder or
    its manifest) is described without being read as experience
    (:func:`~.outputs.describe_samples`): ``kind`` is ``"samples"``.

    Args:
        path: A file, a folder, a glob or a Minari dataset; a local path or a store URI
            (``s3://bucket/data``), as the CLI takes it.
        read: Reader options, as :func:`inspect_path` takes them (default: detected format,
            bad rows skipped and counted, as the CLI does).
        validate: The checks episodes must pass (default: every check).
        quarantine_dir: With ``read.on_invalid == "quarantine"``: where refused rows go.
        progress: ``progress(files done, files, file)`` after each file read.

    Returns:
        The JSON-able description (see docs/api.md, "op.inspect").

    Raises:
        FileNotFoundError: Nothing matches ``path``.
        UnsupportedFormatError: The format cannot be told, or the files hold several formats.
        DataError: Bad data under ``on_invalid="raise"``; a listed file of a committed folder
            that is missing or changed size.
    """
    read = read or ReadConfig(format="auto", on_invalid="skip")
    return inspect_any(path, read, validate, quarantine_dir=quarantine_dir, progress=progress)[0]


def inspect_any(
    path: str | os.PathLike[str],
    read: ReadConfig | None = None,
    validate: ValidateConfig | None = None,
    *,
    quarantine_dir: str | os.PathLike[str] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> tuple[dict[str, Any], InspectReport | None]:
    """:func:`inspect`'s dict, with the report it was made from (None for a samples folder,
    which is described, not read): the CLI's first refused row comes from it.

    Args:
        path: As :func:`inspect`.
        read: As :func:`inspect_path` (None: its default).
        validate: As :func:`inspect_path`.
        quarantine_dir: As :func:`inspect_path`.
        progress: As :func:`inspect_path`.

    Returns:
        ``(description, report or None)``.
    """
    manifest = committed_output(path)
    if manifest is not None and manifest.content == SAMPLES:
        return describe_samples(manifest, path), None
    report = inspect_path(path, read, validate, quarantine_dir=quarantine_dir, progress=progress)
    d = {"kind": "dataset", **report.to_dict()}
    if manifest is not None:
        d["job"] = job_of(manifest)
    return d, report


def _extend(total: EpisodeBatch, got: EpisodeBatch, policy: OnInvalid, file: str | None) -> None:
    """``got`` appended to ``total``; a file whose episodes have another layout than those read
    before (one batch holds one layout) has them refused under ``policy`` (reason
    ``obs_shape``, as validation would), each naming its file and episode."""
    try:
        total.extend(got)
        return
    except ValueError:
        pass
    first = total.columns.episode(0)
    for ep, rows in zip(got.columns.iter_episodes(), got.source_rows.tolist(), strict=True):
        err = EpisodeValidationError(  # an error path: one per refused episode
            f"episode layout {layout_of(ep)} differs from {layout_of(first)}, that of episode "
            f"{first.id!r} read before",
            Where(file=file, episode_id=ep.id),
            reason="obs_shape",
        )
        total.reject(err, rows, episode=ep, policy=policy)
    got.keep_only(np.zeros(len(got), bool))
    total.extend(got)


class _Tally:
    """Each file's rows read, rejected and duplicate (``per_file``). Rejections are counted
    against the file their error names, else the first file holding their episode; duplicates
    found across files against the last file holding the episode (the copy dropped)."""

    def __init__(self, files: list[str], fmt: str) -> None:
        self.entries: dict[str, dict[str, Any]] = {
            f: {
                "file": f,
                "format": fmt,
                "rows_read": 0,
                "rows_kept": 0,
                "rows_rejected": 0,
                "rows_duplicate": 0,
                "error": None,
            }
            for f in files
        }
        self.files_of: dict[Any, list[str]] = {}  # episode id -> files holding its rows

    def read(self, f: str, rows: int, got: EpisodeBatch) -> None:
        self.entries[f]["rows_read"] += rows
        self.entries[f]["rows_duplicate"] += got.ledger.rows_duplicate
        for key, _ in got.episode_keys():
            self.files_of.setdefault(key, []).append(f)
        for rej in got.rejections:
            self.files_of.setdefault(rej.error.where.episode_id, []).append(f)

    def settle(self, batch: EpisodeBatch, cross_file_duplicates: int) -> None:
        for rej in batch.rejections:
            where = rej.error.where
            f = where.file if where.file in self.entries else None
            if f is None:
                held = self.files_of.get(where.episode_id)
                f = held[0] if held else next(iter(self.entries))
            self.entries[f]["rows_rejected"] += rej.num_rows
        if cross_file_duplicates:
            last = [fs[-1] for fs in self.files_of.values() if len(set(fs)) > 1]
            f = last[-1] if last else next(reversed(self.entries))
            self.entries[f]["rows_duplicate"] += cross_file_duplicates

    def to_list(self) -> list[dict[str, Any]]:
        for e in self.entries.values():
            e["rows_kept"] = e["rows_read"] - e["rows_rejected"] - e["rows_duplicate"]
        return list(self.entries.values())
