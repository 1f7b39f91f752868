"""Per-file accounting of the batch job: each input file's rows read, rejected and duplicate.

A unit reads several files and its chunks may span them (:func:`~.run.read_unit`), while the
prelearner's ledger counts per chunk. :class:`FileTally` turns each chunk's outcome into counts
per file: rows read from the chunk's file index of each row; a rejection to the file(s) holding
its episode's rows in the chunk (else the file of its row, else the chunk's first file);
duplicate rows to the chunk's last file (the first copy in read order is the one kept). A file
the reader cannot take is listed with its error. Unit records hold the tally as a dict keyed by
path (:meth:`FileTally.to_record`); the job sums them and lists every input file
(:func:`per_file`), ``rows_kept = rows_read - rows_rejected - rows_duplicate``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...episodes.ledger import Rejection

__all__ = ["FileTally", "per_file"]

_COUNTS = ("rows_read", "rows_rejected", "rows_duplicate")


@dataclass
class FileTally:
    """Counts by input file index for one unit."""

    paths: list[str]
    read: np.ndarray = field(init=False)
    rejected: np.ndarray = field(init=False)
    duplicate: np.ndarray = field(init=False)
    errors: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.paths)
        self.read, self.rejected, self.duplicate = (np.zeros(n, np.int64) for _ in range(3))

    def add_chunk(
        self,
        file_idx: np.ndarray,
        rejections: Iterable[Rejection],
        duplicate_rows: int,
        key_rows: Callable[[], np.ndarray] | None = None,
    ) -> None:
        """One chunk: ``file_idx`` per row; ``key_rows()`` gives each row's episode id (only
        called when the chunk spans files and something was rejected).

        Args:
            file_idx: The index into :attr:`paths` of the file each row of the chunk came from,
                one per row in read order (int array, non-empty, non-decreasing).
            rejections: The ledger's rejections for the chunk; each adds its ``num_rows`` to
                the file(s) as the module docstring says.
            duplicate_rows: Rows the chunk dropped as duplicates; counted on its last file.
            key_rows: Called at most once: each row's episode key (string array aligned with
                ``file_idx``), to place a rejection of a chunk spanning files on the file(s)
                holding its episode. None: such a rejection goes to the file of its row, else
                the chunk's first file.
        """
        n = len(self.paths)
        self.read += np.bincount(file_idx, minlength=n)
        one_file = file_idx[0] == file_idx[-1]
        keys: np.ndarray | None = None
        for rej in rejections:
            if one_file:
                self.rejected[file_idx[0]] += rej.num_rows
                continue
            where = rej.error.where
            if where.episode_id is not None and key_rows is not None:
                keys = key_rows() if keys is None else keys
                on = np.bincount(file_idx[keys == str(where.episode_id)], minlength=n)
                if on.sum() == rej.num_rows:
                    self.rejected += on
                    continue
                if on.any():
                    self.rejected[int(np.argmax(on > 0))] += rej.num_rows
                    continue
            row = where.row
            at = file_idx[row] if row is not None and 0 <= row < len(file_idx) else file_idx[0]
            self.rejected[at] += rej.num_rows
        if duplicate_rows:
            self.duplicate[file_idx[-1]] += duplicate_rows

    def unreadable(self, file: int, error: BaseException) -> None:
        """A file the reader could not take (counted and listed under skip / quarantine).

        Args:
            file: The file's index into :attr:`paths`.
            error: What the reader raised; its text is the file's ``error`` (a later error
                for the same file replaces it).
        """
        self.errors[file] = str(error)

    def to_record(self) -> dict[str, dict[str, Any]]:
        """``{path: {rows_read, rows_rejected, rows_duplicate[, error]}}`` for the files touched."""
        out: dict[str, dict[str, Any]] = {}
        for i, path in enumerate(self.paths):
            counts = (int(self.read[i]), int(self.rejected[i]), int(self.duplicate[i]))
            if any(counts) or i in self.errors:
                out[path] = dict(zip(_COUNTS, counts, strict=True))
                if i in self.errors:
                    out[path]["error"] = self.errors[i]
        return out


def per_file(
    paths: list[str], fmt: str, records: Iterable[Mapping[str, Mapping[str, Any]]]
) -> list[dict[str, Any]]:
    """Every input file, in input order, with its counts summed over the unit records.

    Args:
        paths: The job's input files, in input order; each is listed even where no unit read
            a row of it.
        fmt: The input format, copied into each entry's ``format``.
        records: Each unit's tally, as :meth:`FileTally.to_record` gives it. A path not in
            ``paths`` is added after them; a file's last error wins.

    Returns:
        One dict per file: ``file``, ``format``, ``rows_read``, ``rows_kept``,
        ``rows_rejected``, ``rows_duplicate`` and ``error`` (None where the file was read).
    """
    total: dict[str, dict[str, Any]] = {
        p: {"file": p, "format": fmt, **dict.fromkeys(_COUNTS, 0), "error": None} for p in paths
    }
    for rec in records:
        for path, counts in rec.items():
            entry = total.setdefault(
                path, {"file": path, "format": fmt, **dict.fromkeys(_COUNTS, 0), "error": None}
            )
            for k in _COUNTS:
                entry[k] += counts.get(k, 0)
            if counts.get("error"):
                entry["error"] = counts["error"]
    return [
        {
            "file": e["file"],
            "format": e["format"],
            "rows_read": e["rows_read"],
            "rows_kept": e["rows_read"] - e["rows_rejected"] - e["rows_duplicate"],
            "rows_rejected": e["rows_rejected"],
            "rows_duplicate": e["rows_duplicate"],
            "error": e["error"],
        }
        for e in total.values()
    ]
