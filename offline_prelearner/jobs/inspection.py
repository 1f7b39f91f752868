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

from ..config import ReadConfig
from ..episodes.ledger import EpisodeBatch
from ..episodes.stitch import stitch_fragments
from ..episodes.validate import Deduplicator, ValidateConfig, Validator
from ..errors import DataError
from ..io.quarantine import write_quarantine
from ..io.readers import make_reader
from ..io.schema import load_schema
from ..io.sources import detect_format, expand_paths, read_table

__all__ = ["InspectReport", "inspect_path"]


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

    def to_dict(self) -> dict[str, Any]:
        eps = self.batch.episodes
        led = self.batch.ledger
        lens = np.array([len(e) for e in eps], dtype=np.int64)
        rets = np.array([e.total_reward for e in eps], dtype=np.float64)

        def stats(a: np.ndarray) -> dict[str, float] | None:
            if a.size == 0:
                return None
            return {
                "min": float(a.min()),
                "mean": float(a.mean()),
                "max": float(a.max()),
                "std": float(a.std()),
            }

        first = eps[0] if eps else None
        return {
            "path": self.path,
            "format": self.format,
            "schema": self.schema,
            "files": self.files,
            "files_unreadable": self.files_unreadable,
            "rows": led.rows_in,
            "episodes": len(eps),
            "timesteps": int(lens.sum()),
            "terminated": sum(e.terminated for e in eps),
            "truncated": sum(e.truncated for e in eps),
            "not_done": sum(not e.is_done for e in eps),
            "duplicates": led.episodes_duplicate,
            "duplicate_rows": led.rows_duplicate,
            "rejected": dict(sorted(led.rows_rejected.items())),
            "rejected_episodes": dict(sorted(led.episodes_rejected.items())),
            "rows_balance": led.balanced(),
            "observation": None
            if first is None
            else {
                "shape": list(first.observations.shape[1:]),
                "dtype": str(first.observations.dtype),
            },
            "action": None
            if first is None
            else {"shape": list(first.actions.shape[1:]), "dtype": str(first.actions.dtype)},
            "extras": [] if first is None else sorted(first.extras),
            "length": stats(lens),
            "return": stats(rets),
            "quarantine_file": self.quarantine_file,
            "seconds": round(self.seconds, 4),
            "episode_stats": [
                {
                    "id": _jsonable_id(e.id),
                    "len": len(e),
                    "return": e.total_reward,
                    "terminated": e.terminated,
                    "truncated": e.truncated,
                }
                for e in eps
            ],
        }


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

    ``read.format == "auto"`` detects the format from the first file. Unreadable files are an error
    under ``on_invalid="raise"``, otherwise listed in ``files_unreadable``. ``progress(i, n, file)``
    is called after each file.
    """
    start = time.perf_counter()
    files = expand_paths(os.fspath(path))
    read = read or ReadConfig(format="auto")
    if read.format == "auto":
        read = replace(read, format=detect_format(files))
    schema = load_schema(read.schema) if read.format == "rows" else None
    if schema is not None:
        read = replace(read, schema=schema)
    validate = validate or ValidateConfig(on_invalid=read.on_invalid)
    reader = make_reader(read)
    total = EpisodeBatch(on_invalid=read.on_invalid)
    unreadable: list[str] = []
    for i, f in enumerate(files):
        try:
            table = read_table(f)
        except DataError:
            if read.on_invalid == "raise":
                raise
            unreadable.append(f)
            continue
        total.extend(reader.read(table, source=f))
        if progress is not None:
            progress(i + 1, len(files), f)
    batch = stitch_fragments(total)
    batch = Validator(validate).validate(batch)
    batch = Deduplicator().dedupe(batch)
    qfile = None
    if quarantine_dir is not None and read.on_invalid == "quarantine":
        qfile = write_quarantine(batch.rejections, quarantine_dir)
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
    )
