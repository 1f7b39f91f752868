"""A job's output is a commit: staged beside ``--out``, moved into place whole, manifest last.

::

    out/.cartpole.staging/            while the job runs (hidden; never looks complete)
        job.json                      what this job is: version, config, prelearner, inputs
        units/unit-00003.json         one per finished unit of work: its inputs, files, counts
        samples/part-00003-000.parquet
    out/cartpole/                     after success: the staging folder renamed into place
        samples/...  stats.json  _manifest.json   (the manifest is written last)

The habit of Hadoop's and Spark's output committers: a unit of work writes its files under
temporary names and renames them, then writes its record (the *unit commit*); the job, when
every unit is committed, writes the manifest (every file with its rows and sha256, the inputs
with sizes and mtimes, the config, the version) and renames the folder (the *job commit*). A
reader trusts ``_manifest.json``, never the presence of files. A unit redone by a retry writes
the same names with the same bytes, so a retry cannot duplicate anything; counts are summed from
the unit records, once per unit, never from reports a restarted worker may send twice.

A failed or interrupted job leaves ``--out`` as it was and the staging folder beside it: with
``resume=True`` the next run reuses every unit whose record matches (same job, same input sizes
and mtimes, output files present with their checksums) and redoes the rest.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..io.manifest import DATASET, MANIFEST_FILE, SAMPLES, Manifest

__all__ = [
    "MANIFEST_FILE",
    "STATS_FILE",
    "CommitError",
    "Staging",
    "file_sha256",
    "iter_manifest_files",
    "write_json_atomic",
    "write_parquet_atomic",
]

STATS_FILE = "stats.json"
_JOB_FILE = "job.json"
_UNITS = "units"


class CommitError(ConfigError):
    """The output folder cannot be used as asked (not empty, a file, a resume that does not fit)."""


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file's bytes (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    """Writes JSON under a temporary name, flushes it to disk, then renames it into place."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=2, default=str)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def write_parquet_atomic(root: Path, name: str, table: Any) -> dict[str, Any]:
    """Writes ``table`` as Parquet at ``root/name`` (temporary name, fsync, rename) and returns
    its manifest entry (name, rows, bytes, sha256); the bytes are hashed in memory."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..io.fast_tensor import parquet_dictionary_columns

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, use_dictionary=parquet_dictionary_columns(table.schema))
    data = sink.getvalue()
    path = Path(root) / name
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return {
        "name": name,
        "rows": table.num_rows,
        "bytes": data.size,
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be opened
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def staging_path(out: str | os.PathLike[str]) -> Path:
    """Where a job writing ``out`` stages its work: a hidden sibling of ``out``."""
    out = Path(out)
    return out.parent / f".{out.name}.staging"


@dataclass
class Staging:
    """The staging folder of one job writing to ``out``.

    Args:
        out: The folder the job's result goes to (``--out``).
        job: What identifies the job (version, config, prelearner, inputs...): a unit record of
            another job is never reused.
        overwrite: Replace an existing non-empty ``out`` on success (else refused up front).
        resume: Keep the units an earlier run of the same job committed.
        files_dir: The folder, inside ``out``, that unit records' and the manifest's file names
            are relative to (``"samples"``; ``""`` for ``out`` itself, as ``convert`` writes).
    """

    out: Path
    job: dict[str, Any]
    overwrite: bool = False
    resume: bool = False
    files_dir: str = "samples"

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        self.path = staging_path(self.out)
        self.samples = self.path / self.files_dir if self.files_dir else self.path
        self.units = self.path / _UNITS

    # ------------------------------------------------------------------ opening
    def open(self) -> dict[int, dict[str, Any]]:
        """Checks ``out``, prepares the staging folder; returns the reusable unit records.

        Raises:
            CommitError: ``out`` is a file, or a non-empty folder without ``overwrite``; or
                ``resume`` finds a staged job with another config or version.
        """
        if self.out.exists() and not self.out.is_dir():
            raise CommitError(f"--out {str(self.out)!r} is a file; give a folder")
        blocker = _file_on_the_way(self.out.parent)
        if blocker is not None:
            raise CommitError(
                f"--out {str(self.out)!r} cannot be a folder: {str(blocker)!r} is a file; "
                "give a folder path"
            )
        if self.out.is_dir() and any(self.out.iterdir()) and not self.overwrite:
            raise CommitError(
                f"--out {str(self.out)!r} is not empty; pass --overwrite to replace it when "
                "this job succeeds, or choose another folder"
            )
        kept: dict[int, dict[str, Any]] = {}
        if self.path.exists():
            if self.resume:
                kept = self._resumable()
            else:
                shutil.rmtree(self.path)
        elif self.resume:
            raise CommitError(
                f"--resume: no interrupted job to resume for --out {str(self.out)!r} "
                f"(no {self.path.name} beside it); run without --resume"
            )
        if not kept and self.path.exists():
            shutil.rmtree(self.path)
        self.samples.mkdir(parents=True, exist_ok=True)
        self.units.mkdir(exist_ok=True)
        write_json_atomic(self.path / _JOB_FILE, self.job)
        return kept

    def _resumable(self) -> dict[int, dict[str, Any]]:
        """The unit records of the staged job that still hold (same job, inputs, files)."""
        try:
            staged = json.loads((self.path / _JOB_FILE).read_text())
        except (OSError, ValueError):
            return {}  # a staging folder that never got its job file holds nothing of use
        for key in ("version", "config", "prelearner", "format"):
            if staged.get(key) != self.job.get(key):
                raise CommitError(
                    f"--resume: the interrupted job had another {key} "
                    f"({_short(staged.get(key))} vs now {_short(self.job.get(key))}); "
                    "run without --resume to start over"
                )
        kept: dict[int, dict[str, Any]] = {}
        for p in sorted(self.units.glob("unit-*.json")):
            try:
                rec = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            if self._holds(rec):
                kept[int(rec["unit"])] = rec
        return kept

    def _holds(self, rec: dict[str, Any]) -> bool:
        """A unit record is reusable when its inputs are unchanged and its files intact."""
        want = {f["path"]: f for f in self.job.get("inputs", [])}
        for f in rec.get("inputs", []):
            now = want.get(f["path"])
            if now is None or (now["size"], now["mtime_ns"]) != (f["size"], f["mtime_ns"]):
                return False
        for f in rec.get("files", []):
            p = self.samples / f["name"]
            if not p.is_file() or p.stat().st_size != f["bytes"] or file_sha256(p) != f["sha256"]:
                return False
        return True

    # ------------------------------------------------------------------ units
    def record_path(self, unit: int) -> Path:
        return self.units / f"unit-{unit:05d}.json"

    def drop_unit_files(self, unit: int) -> None:
        """Removes what an unfinished attempt at ``unit`` may have left (before it is redone)."""
        for p in self.samples.glob(f"part-{unit:05d}-*"):
            p.unlink()
        with contextlib.suppress(FileNotFoundError):
            self.record_path(unit).unlink()

    def records(self) -> dict[int, dict[str, Any]]:
        """Every committed unit record, by unit index."""
        out = {}
        for p in sorted(self.units.glob("unit-*.json")):
            rec = json.loads(p.read_text())
            out[int(rec["unit"])] = rec
        return out

    # ------------------------------------------------------------------ the job commit
    def commit(
        self,
        stats: dict[str, Any],
        files: list[dict[str, Any]],
        extra: dict[str, Any] | None = None,
    ) -> Path:
        """Writes stats and the manifest (last), then moves the staging folder to ``out``.

        ``extra``: more manifest entries (a job's other outputs, e.g. a quarantine file).
        """
        write_json_atomic(self.path / STATS_FILE, stats)
        for stray in self.samples.glob(".*"):  # temporary names of a killed attempt
            stray.unlink()
        manifest = {
            "complete": True,
            "committed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **{k: self.job[k] for k in ("version", "format", "prelearner", "engine")},
            "inputs": self.job["inputs"],
            "files": files,
            "samples_written": sum(f["rows"] for f in files),
            "config": self.job["config"],
            **(extra or {}),
        }
        # What the folder holds, for its readers (io/manifest.py): a process output's samples
        # are not read again as recorded experience.
        manifest["files_dir"] = self.files_dir
        manifest.setdefault("content", SAMPLES if self.files_dir == "samples" else DATASET)
        shutil.rmtree(self.units)
        (self.path / _JOB_FILE).unlink()
        write_json_atomic(self.path / MANIFEST_FILE, manifest)
        _fsync_dir(self.path)
        self._swap()
        return self.out

    def _swap(self) -> None:
        """Renames staging to ``out``; an old ``out`` (``overwrite``) is removed only after."""
        self.out.parent.mkdir(parents=True, exist_ok=True)
        old = None
        if self.out.exists():
            old = self.out.parent / f".{self.out.name}.replaced-{os.getpid()}"
            os.replace(self.out, old)
        os.replace(self.path, self.out)
        _fsync_dir(self.out.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def discard(self) -> None:
        """Removes the staging folder (a dry run, or a job that must not be resumed)."""
        shutil.rmtree(self.path, ignore_errors=True)

    def committed_units(self) -> int:
        return len(list(self.units.glob("unit-*.json"))) if self.units.exists() else 0


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def iter_manifest_files(out: str | os.PathLike[str]) -> Iterator[Path]:
    """The data files a committed output holds, as its manifest lists them, each checked present
    and of its recorded size (:meth:`~offline_prelearner.io.manifest.Manifest.checked_paths`)."""
    for path in Manifest.read(out).checked_paths():
        yield Path(path)


def _file_on_the_way(path: Path) -> Path | None:
    """The nearest existing ancestor of ``path`` (or ``path`` itself) if it is not a folder."""
    for p in (path, *path.parents):
        if p.exists():
            return None if p.is_dir() else p
    return None
