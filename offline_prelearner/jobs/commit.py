"""A job's output is a commit: staged beside ``--out``, moved into place whole, manifest last.

::

    out/.cartpole.lock                the job's lock on --out (flock), held for its whole life
    out/.cartpole.staging/            while the job runs (hidden; never looks complete)
        job.json                      what this job is: its id, version, config, inputs, units
        units/unit-00003.json         one per finished unit of work: its job id, inputs, files
        samples/part-00003-000.parquet
        quarantine/quarantine-00003-000.parquet   (on_invalid="quarantine")
    out/cartpole/                     after success: the staging folder renamed into place
        samples/...  stats.json  _manifest.json   (the manifest is written last)

The habit of Hadoop's and Spark's output committers: a unit of work writes its files under
temporary names and renames them, then writes its record (the *unit commit*); the job, when
every unit is committed, writes the manifest (every file with its rows and sha256, the inputs
with sizes and mtimes, the config, the version) and renames the folder (the *job commit*). A
reader trusts ``_manifest.json``, never the presence of files. A unit redone by a retry writes
the same names with the same bytes, so a retry cannot duplicate anything; counts are summed from
the unit records, once per unit, never from reports a restarted worker may send twice.

**A job owns its staging** (:mod:`.ownership`: the lock on ``--out``, the job's id): a unit record
of another job is never reused, and a unit that finds the staging folder taken over by another
job writes nothing. The commit moves only the files its own unit records list, each checked
against its record (a regular file, its size, its sha256) before the rename; anything else in the
staging folder (a stray file, a temporary name of a killed attempt, an old record) is removed
first, so it is never committed.

A unit hashes each file as it writes it (never reading it back) and records, with its size and
sha256, its stat right after the rename (size, inode, mtime_ns). The commit re-hashes a staged
file only when its stat differs, and that keeps the exactly-once check: a retry or zombie
attempt of the unit renames a new file over the name (a new inode), and a file rewritten or
appended to in place gets a new mtime (and size), so either is read and hashed again and refused
unless its bytes are the recorded ones; a missing file, a non-regular one or one of another size
is refused by the stat alone. What it would not see is a same-size rewrite in place within the
filesystem's timestamp tick of the rename that also keeps the inode -- not something a unit of
this job does. Records without a stat (older ones) and every record ``resume`` adopts (written by
a process that is gone) are re-hashed in full.

A failed or interrupted job leaves ``--out`` as it was and the staging folder beside it: with
``resume=True`` the next run adopts that staging (and its job id) under the lock, re-plans against
the inputs as they are now, reuses every unit whose record still holds (same job, same plan of
the unit, its inputs of the same size, mtime and content fingerprint -- a Parquet file's footer
-- and its files present with their checksums), removes everything else, and redoes the rest.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..io.manifest import DATASET, MANIFEST_FILE, SAMPLES, Manifest
from ..io.stores import Location, file_stat, locate, open_random_access
from .ownership import (
    JOB_FILE,
    CommitError,
    OutLock,
    check_out_apart,
    check_owner,
    check_same_job,
    file_on_the_way,
    fits_job,
    new_job_id,
    output_storage,
    staging_path,
)
from .records import FileRecord, JobManifest, StagedStat, UnitRecord, file_records
from .session.interrupts import commit_point
from .staged_file import HashedStream

__all__ = [
    "MANIFEST_FILE",
    "QUARANTINE",
    "STAGED_STAT",
    "STATS_FILE",
    "LocalFile",
    "LocalStaging",
    "LocalUnitOutput",
    "file_sha256",
    "input_fingerprint",
    "input_identity",
    "iter_manifest_files",
    "staged_stat",
    "tmp_tag",
    "write_json_atomic",
    "write_parquet_atomic",
]

STATS_FILE = "stats.json"
_JOB_FILE = JOB_FILE
_UNITS = "units"
#: The folder, inside a job's output, of the rows ``on_invalid="quarantine"`` refused.
QUARANTINE = "quarantine"
#: The key, in a unit record's file entry, of the staged file's stat after its rename
#: (:func:`staged_stat`); never written to the manifest.
STAGED_STAT = "stat"


def staged_stat(st: os.stat_result) -> StagedStat:
    """What a unit records of a file it staged, right after the rename: size, inode, mtime.

    Args:
        st: the file's ``os.stat`` after its rename into place.

    Returns:
        The stat (``{"size", "ino", "mtime_ns"}`` in the record): the job commit re-hashes the
        file only when its stat is no longer this.
    """
    return StagedStat(st.st_size, st.st_ino, st.st_mtime_ns)


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file's bytes (read in 1 MiB blocks).

    Args:
        path: A local file (opened with ``open``: not a store's URI).

    Returns:
        The digest, 64 lowercase hex digits.
    """
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


#: Made once per process: with the PID, it keeps a temporary name this process's own on every
#: machine (two nodes of a cluster can run the same unit at once -- a retry beside the attempt of a
#: node being lost -- with the same PID, into one shared staging folder).
_TMP_TOKEN = secrets.token_hex(4)


def tmp_tag() -> str:
    """What ends this process's temporary names (``.<name>.tmp-<tag>``): its PID and a token of
    its own, so no process on another machine writes the same temporary file.

    Returns:
        ``"<pid>-<token>"``.
    """
    return f"{os.getpid()}-{_TMP_TOKEN}"


def write_json_atomic(path: str | os.PathLike[str], obj: Any, *, indent: int | None = 2) -> None:
    """Writes JSON under a temporary name, flushes it to disk, then renames it into place.

    Args:
        path: The local file to write; its folder must exist. An existing file is replaced
            whole; a reader sees the old or the new content, never a part.
        obj: What to write, with a final newline; a value JSON cannot hold is written as its
            ``str``.
        indent: Indented by this (None: on one line, which ``json``'s C encoder writes many
            times faster: a job's description of 100,000 inputs).
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{tmp_tag()}")
    try:
        with open(tmp, "w") as fh:
            fh.write(json.dumps(obj, indent=indent, default=str))
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # a write that failed (a full disk) leaves no temporary file


def write_parquet_atomic(root: Path, name: str, table: Any) -> dict[str, Any]:
    """Writes ``table`` as Parquet at ``root/name`` (temporary name, fsync, rename) and returns
    its manifest entry (name, rows, bytes, sha256); the bytes are hashed in memory.

    Args:
        root: The local folder to write into (it must exist).
        name: The file's name in ``root``.
        table: A ``pyarrow.Table``; written whole into memory first (dictionary encoding
            as :func:`~offline_prelearner.io.fast_tensor.parquet_dictionary_columns` chooses).

    Returns:
        ``{"name", "rows", "bytes", "sha256"}``: the file's manifest entry.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..io.fast_tensor import parquet_dictionary_columns

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, use_dictionary=parquet_dictionary_columns(table.schema))
    data = sink.getvalue()
    path = Path(root) / name
    tmp = path.with_name(f".{path.name}.tmp-{tmp_tag()}")
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


# ====================================================================== the inputs' identity
#: Bytes hashed from each end of a file that is not Parquet (JSON lines, HDF5, Arrow IPC).
_ENDS = 1 << 16


def input_fingerprint(path: str | os.PathLike[str]) -> str:
    """A cheap fingerprint of a file's content: the sha256 of a Parquet file's footer (its
    schema, row groups, column chunk offsets and sizes, per-column statistics: the last 8 bytes
    give its length), else of the file's first and last 64 KiB. With the size and the mtime it
    is what a resume compares: a rewrite of the same size (even with its mtime set back) changes
    the footer's statistics or sizes. The footer is hashed in 1 MiB blocks, never loaded whole,
    and a footer length that the file cannot hold is not followed.

    Args:
        path: The input file, a local path or a store's URI.

    Returns:
        ``"footer:<sha256>"`` for a Parquet file, else ``"ends:<sha256>"``.

    Raises:
        StorageError: The store refused or could not answer.
        FileNotFoundError: No such local file.
    """
    h = hashlib.sha256()
    with open_random_access(path) as fh:
        size = fh.size()
        if size >= 12:
            fh.seek(size - 8)
            tail = fh.read(8)
            n = int.from_bytes(tail[:4], "little")
            if tail[4:] == b"PAR1" and n <= size - 12:
                h.update(b"parquet-footer\0")
                fh.seek(size - 8 - n)
                left = n
                while left:
                    block = fh.read(min(left, 1 << 20))
                    if not block:
                        break
                    h.update(block)
                    left -= len(block)
                h.update(tail)
                return "footer:" + h.hexdigest()
        fh.seek(0)
        h.update(b"ends\0")
        h.update(fh.read(_ENDS))
        if size > _ENDS:
            fh.seek(max(_ENDS, size - _ENDS))
            h.update(fh.read(_ENDS))
        return "ends:" + h.hexdigest()


def input_identity(path: str) -> dict[str, Any]:
    """An input file as a job records it: path, size, mtime and :func:`input_fingerprint`.

    Args:
        path: The input file, a local path or a store's URI, recorded as given.

    Returns:
        ``{"path", "size", "mtime_ns", "fingerprint"}`` (size in bytes, mtime in nanoseconds).
    """
    st = file_stat(path)
    return {
        "path": path,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "fingerprint": input_fingerprint(path),
    }


# ====================================================================== a unit's files
class LocalFile:
    """A unit's file on a local disk (:class:`~.staged_file.StagedFile`): written under a
    temporary name of this process (``.<name>.tmp-<tag>``), flushed to disk when it ends, renamed
    into ``folder`` when its unit ends, its stat recorded after the rename.

    Args:
        folder: The staging folder's folder the file goes to (made if absent).
        name: The file's final name.
    """

    def __init__(self, folder: Path, name: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.final = folder / name
        self.tmp = folder / f".{name}.tmp-{tmp_tag()}"
        self._raw = open(self.tmp, "wb")  # noqa: SIM115 -- closed by finish / abort
        self._hashed = HashedStream(self._raw)

    @property
    def stream(self) -> Any:
        """What the Parquet writer writes to."""
        return self._hashed.stream

    def finish(self) -> None:
        """Flushes the file to disk (fsync) and closes it."""
        self._hashed.drain()
        self._raw.flush()
        os.fsync(self._raw.fileno())
        self._hashed.close()

    def place(self, rows: int) -> FileRecord:
        """Renames the file into place; its record, with its stat after the rename.

        Args:
            rows: The rows the file holds.

        Returns:
            The file's record.
        """
        os.replace(self.tmp, self.final)
        st = self.final.stat()
        return FileRecord(self.name, rows, st.st_size, self._hashed.sha256, staged_stat(st))

    def abort(self) -> None:
        """Closes the file quietly and removes its temporary name (a renamed file stays: its
        unit's record is never written, so it is never committed)."""
        self._hashed.close_quietly()
        self.tmp.unlink(missing_ok=True)


@dataclass(frozen=True)
class LocalUnitOutput:
    """Where the units of one job write on a local disk (:class:`~.staging.UnitOutput`); pickled
    into every unit's task.

    Args:
        staging: The staging folder.
        samples: The folder of the data files in it.
        job_id: The job's id: a unit writes nothing into a staging folder of another job.
    """

    staging: str
    samples: str
    job_id: str

    @property
    def shared_folder(self) -> str | None:
        """The staging folder: every node of a cluster must see it as the driver does."""
        return self.staging

    def open_file(self, kind: Literal["part", "quarantine"], unit: int, k: int) -> LocalFile:
        """Opens the ``k``-th file of ``unit``: ``part-<unit>-<k>.parquet`` in the data folder,
        ``quarantine-<unit>-<k>.parquet`` in ``quarantine/``.

        Args:
            kind: ``"part"`` (samples) or ``"quarantine"`` (refused rows).
            unit: The unit's index.
            k: The file's number within the unit.

        Returns:
            The file, under its temporary name.
        """
        folder = Path(self.samples) if kind == "part" else Path(self.staging) / QUARANTINE
        return LocalFile(folder, f"{kind}-{unit:05d}-{k:03d}.parquet")

    def check_owner(self) -> None:
        """Refuses to put a unit's files in place once the staging folder belongs to another
        job (a worker that outlived its job, a second job that did not take the lock).

        Raises:
            CommitError: ``job.json`` is gone or names another job.
        """
        check_owner(locate(self.staging), self.job_id, "its unit wrote nothing")

    def write_record(self, record: UnitRecord) -> None:
        """Writes a unit's record (the unit commit): a temporary name, fsync, rename.

        Args:
            record: The unit's record.
        """
        path = Path(self.staging) / _UNITS / f"unit-{record.unit:05d}.json"
        write_json_atomic(path, record.to_dict())

    def failures(self) -> contextlib.AbstractContextManager[None]:
        """Nothing to translate: a full disk is named by the job's guard
        (:meth:`LocalStaging.guard`)."""
        return contextlib.nullcontext()


# ====================================================================== the staging folder
@dataclass
class LocalStaging:
    """The staging folder of one job writing to ``out`` on a local disk
    (:class:`~.staging.Staging`).

    Use it as a context manager (``with LocalStaging(...) as staging:``): the job holds the lock
    on ``out`` inside the block (see :class:`OutLock`); :meth:`open` takes it too if needed.

    Args:
        out: The folder the job's result goes to (``--out``).
        job: What identifies the job (version, config, prelearner, inputs...): a unit record of
            another job is never reused. ``job["unit_keys"]`` (optional, one per unit): a record
            is reused only by the unit of the same key (the same plan of the same inputs).
        overwrite: Replace an existing non-empty ``out`` on success (else refused up front).
        resume: Keep the units an earlier run of the same job committed.
        files_dir: The folder, inside ``out``, that unit records' and the manifest's file names
            are relative to (``"samples"``; ``""`` for ``out`` itself, as ``convert`` writes).
            A record's (and the manifest's) ``quarantine`` entries are relative to ``out``.
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
        self.lock = OutLock(self.out)
        #: This job's id; a resume adopts the id of the job it resumes.
        self.job_id = new_job_id()

    def __enter__(self) -> LocalStaging:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    # ------------------------------------------------------------------ the lock
    def acquire(self) -> None:
        """Checks that ``out`` can be a folder, then takes the lock on it.

        Raises:
            CommitError: ``out`` is a file or lies under one; another job holds the lock.
        """
        if self.lock.held:
            return
        if self.out.exists() and not self.out.is_dir():
            raise CommitError(f"--out {str(self.out)!r} is a file; give a folder")
        blocker = file_on_the_way(self.out.parent)
        if blocker is not None:
            raise CommitError(
                f"--out {str(self.out)!r} cannot be a folder: {str(blocker)!r} is a file; "
                "give a folder path"
            )
        self.lock.acquire()

    def release(self) -> None:
        """Releases the lock on ``out`` (the staging folder stays, for a resume)."""
        self.lock.release()

    def check_apart(self, inputs: str | os.PathLike[str] | list[Any]) -> None:
        """Refuses an ``out`` that is, holds or lies inside an input (:func:`check_out_apart`).

        Args:
            inputs: The job's inputs as given (a path, a glob, or a list of them).

        Raises:
            CommitError: One line naming ``out`` and the input.
        """
        check_out_apart(self.out, inputs)

    def guard(self) -> contextlib.AbstractContextManager[None]:
        """What the job's whole run goes under: a write that fails for want of room, anywhere
        (a unit, the commit), is one line naming ``out`` (:func:`output_storage`)."""
        return output_storage(self.out)

    def staged_seed(self) -> int | None:
        """The seed of the staged job a resume adopts (None: none staged, or none readable);
        read under the job's lock on ``out``, so no other job changes it."""
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            return int(json.loads((self.path / _JOB_FILE).read_text())["seed"])
        return None

    def unit_output(self) -> LocalUnitOutput:
        """Where this job's units write (the staging folder), for every unit's task."""
        return LocalUnitOutput(str(self.path), str(self.samples), self.job_id)

    def data_file(self, name: str) -> Location:
        """A data file of the staging, by the name its unit record gives.

        Args:
            name: The name under ``files_dir``.

        Returns:
            Its location.
        """
        return locate(self.samples / name)

    def output_file(self, *names: str) -> str:
        """The path a file of the committed output will have.

        Args:
            names: Its path's components under ``out``.

        Returns:
            The path, as ``out`` was given (relative stays relative).
        """
        return str(self.out.joinpath(*names))

    # ------------------------------------------------------------------ opening
    def open(self) -> dict[int, dict[str, Any]]:
        """Takes the lock, checks ``out``, prepares the staging folder; returns the reusable
        unit records (a resume) and removes everything else the staging folder held.

        Raises:
            CommitError: ``out`` is a file, or a non-empty folder without ``overwrite``; another
                job holds the lock; or ``resume`` finds a staged job with another config or
                version.
        """
        self.acquire()
        if self.path.is_symlink():  # never walked into (a resume removes what it does not keep)
            raise CommitError(
                f"the staging folder {str(self.path)!r} is a symbolic link, not a folder a job "
                "made; remove it"
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
                _remove(self.path)
        elif self.resume:
            raise CommitError(
                f"--resume: no interrupted job to resume for --out {str(self.out)!r} "
                f"(no {self.path.name} beside it); run without --resume"
            )
        if kept:
            keep = {p for rec in kept.values() for p, _ in self._record_entries(rec)}
            keep |= {self.record_path(k) for k in kept}
            _remove_all_but(self.path, keep)
        elif self.path.exists():
            _remove(self.path)
        self.samples.mkdir(parents=True, exist_ok=True)
        self.units.mkdir(exist_ok=True)
        self.job["job_id"] = self.job_id
        write_json_atomic(self.path / _JOB_FILE, self.job, indent=None)  # 100k inputs: fast
        return kept

    def _resumable(self) -> dict[int, dict[str, Any]]:
        """The unit records of the staged job that still hold (same job, plan, inputs, files);
        the job's id is adopted from the staged job."""
        try:
            staged = json.loads((self.path / _JOB_FILE).read_text())
        except (OSError, ValueError):
            return {}  # a staging folder that never got its job file holds nothing of use
        if not isinstance(staged, dict):
            return {}
        check_same_job(staged, self.job)
        if not isinstance(staged.get("job_id"), str):
            return {}  # staged before jobs had ids: nothing in it can be told to be its own
        self.job_id = staged["job_id"]
        kept: dict[int, dict[str, Any]] = {}
        for p in sorted(self.units.glob("unit-*.json")):
            try:
                rec = json.loads(p.read_text())
                unit = int(rec["unit"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if p == self.record_path(unit) and self._holds(rec):
                kept[unit] = rec
        return kept

    def _holds(self, rec: dict[str, Any]) -> bool:
        """A unit record is reusable when it is this job's, of the same plan (``unit_keys``), its
        inputs unchanged (size, mtime, fingerprint) and its files intact."""
        if not fits_job(rec, self.job, self.job_id):
            return False
        try:
            entries = self._record_entries(rec)
        except (KeyError, TypeError, ValueError, CommitError):
            return False
        # A resumed job's files were left by another process: each is read and hashed again.
        return all(_matches(p, entry, full=True) is None for p, entry in entries)

    def _entries(
        self,
        files: list[FileRecord] | list[dict[str, Any]],
        quarantine: list[FileRecord] | list[dict[str, Any]],
    ) -> list[tuple[Path, FileRecord]]:
        """The files a unit record (or a commit) lists, with their paths in the staging folder:
        ``files`` under ``files_dir``, ``quarantine`` under the staging folder (ValueError: a
        name that leaves its folder; CommitError: a malformed entry)."""
        where = str(self.units)
        return [
            *((self.samples / _name(f), f) for f in file_records(files, where)),
            *((self.path / _name(f), f) for f in file_records(quarantine, where)),
        ]

    def _record_entries(self, rec: dict[str, Any]) -> list[tuple[Path, FileRecord]]:
        return self._entries(rec.get("files", []), rec.get(QUARANTINE, []))

    # ------------------------------------------------------------------ units
    def record_path(self, unit: int) -> Path:
        """Path of unit ``unit``'s record in the staging folder.

        Args:
            unit: The unit's index (``units/unit-<index, 5 digits>.json``).
        """
        return self.units / f"unit-{unit:05d}.json"

    def write_record(self, unit: int, record: dict[str, Any]) -> None:
        """Writes a unit's record (the unit commit), stamped with this job's id.

        Args:
            unit: The unit's index.
            record: The record as JSON (:meth:`~.records.UnitRecord.to_json`); its
                ``job_id`` is set to this staging's, and it is written atomically.
        """
        write_json_atomic(self.record_path(unit), {**record, "job_id": self.job_id})

    def drop_unit_files(self, unit: int) -> None:
        """Removes what an unfinished attempt at ``unit`` may have left (before it is redone).

        Args:
            unit: The unit's index: its ``part-<unit>-*`` sample files, its quarantine files and
                its record are removed (whichever exist).
        """
        for p in self.samples.glob(f"part-{unit:05d}-*"):
            p.unlink()
        for p in (self.path / QUARANTINE).glob(f"{QUARANTINE}-{unit:05d}-*"):
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
        stats: Mapping[str, Any],
        files: list[FileRecord] | list[dict[str, Any]],
        extra: Mapping[str, Any] | None = None,
    ) -> Path:
        """Checks the staged files, writes stats and the manifest (last), then moves the staging
        folder to ``out``. Each listed file must be a regular file of its recorded size and
        sha256; everything else in the staging folder is removed before the rename.

        Args:
            stats: The job's stats (``stats.json``).
            files: The data files (names under ``files_dir``), from this job's unit records.
            extra: More manifest entries; its ``quarantine`` list (names under ``out``) is
                committed with the data files.

        Returns:
            ``out``.

        Raises:
            CommitError: the staging folder belongs to another job now, or a listed file is
                missing or not what its unit wrote (nothing is committed).
        """
        extra = dict(extra or {})
        self._check_owner()
        listed = self._entries(files, extra.get(QUARANTINE, []))
        for path, entry in listed:
            why = _matches(path, entry)
            if why is not None:
                raise CommitError(
                    f"the staged file {str(path)!r} {why}: something outside this job wrote "
                    f"into {str(self.path)!r}; nothing was committed (--resume redoes its unit)"
                )
        content = SAMPLES if self.files_dir == "samples" else DATASET
        data = [f for _, f in listed[: len(files)]]
        manifest = JobManifest(self.job_id, self.job, tuple(data), self.files_dir, content, extra)
        with commit_point():  # a signal from here waits for the move: a committed job exits 0
            self._write_and_move(stats, manifest, listed)
        return self.out

    def write_stats(self, stats: Mapping[str, Any]) -> None:
        """Writes the committed output's ``stats.json`` again, with what was measured after the
        commit point (the commit's and the stop's seconds); not part of the commit: the
        manifest does not list it.

        Args:
            stats: The job's stats, as :meth:`commit` wrote them, completed.
        """
        write_json_atomic(self.out / STATS_FILE, stats)

    def _write_and_move(
        self,
        stats: Mapping[str, Any],
        manifest: JobManifest,
        listed: list[tuple[Path, FileRecord]],
    ) -> None:
        write_json_atomic(self.path / STATS_FILE, stats)
        # Only the listed files go into place: unit records, job.json, temporary names of a
        # killed attempt and anything else that lies in the staging folder are removed.
        _remove_all_but(self.path, {p for p, _ in listed} | {self.path / STATS_FILE})
        self.samples.mkdir(exist_ok=True)
        # What the folder holds, for its readers (io/manifest.py): a process output's samples
        # are not read again as recorded experience.
        write_json_atomic(self.path / MANIFEST_FILE, manifest.to_dict())
        _fsync_dir(self.path)
        self._swap()

    def _check_owner(self) -> None:
        check_owner(locate(self.path), self.job_id, "nothing was committed")

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
        """Unit records in the staging folder: what a ``--resume`` may reuse (0 while another
        live job holds the lock: those are its units, not a failed job's)."""
        if self.lock.other_holder():
            return 0
        return len(list(self.units.glob("unit-*.json"))) if self.units.exists() else 0


def _name(entry: FileRecord) -> str:
    name = entry.name
    if not name or os.path.isabs(name) or ".." in Path(name).parts:
        raise ValueError(f"not a file name inside the staging folder: {name!r}")
    return name


def _matches(path: Path, entry: FileRecord, full: bool = False) -> str | None:
    """None if ``path`` is a regular file of the entry's size and sha256, else what differs.

    The sha256 is checked by reading the file, unless the entry has the file's stat after its
    unit renamed it (:data:`STAGED_STAT`), the file's stat is still that and ``full`` is false.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "is missing"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_size != entry.bytes:
        return f"is {st.st_size} bytes, its unit wrote {entry.bytes}"
    if not full and entry.stat == staged_stat(st):
        return None  # the very file its unit hashed as it wrote it, untouched since
    if entry.sha256 is not None and file_sha256(path) != entry.sha256:
        return "has another sha256 than its unit wrote"
    return None


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _remove_all_but(root: Path, keep: set[Path]) -> None:
    """Removes everything under ``root`` except the paths in ``keep`` (and their folders)."""
    folders = {parent for p in keep for parent in p.parents}
    for entry in list(os.scandir(root)):
        p = Path(entry.path)
        if p in keep and entry.is_file(follow_symlinks=False):
            continue
        if p in folders and entry.is_dir(follow_symlinks=False):
            _remove_all_but(p, keep)
            continue
        _remove(p)


def iter_manifest_files(out: str | os.PathLike[str]) -> Iterator[str]:
    """The data files a committed output holds, as its manifest lists them, each checked present
    and of its recorded size (:meth:`~offline_prelearner.io.manifest.Manifest.checked_paths`).

    Args:
        out: The committed output (the folder holding ``_manifest.json``): a local path or a
            store URI (``s3://bucket/prefix``).

    Yields:
        Each listed file, in the manifest's order: a local path, or on a store its URI
        (``s3://bucket/prefix/samples/...``), as :func:`~offline_prelearner.io.sources.expand_paths`
        names it.

    Raises:
        FileNotFoundError: No local manifest, or a listed file is missing.
        StorageError: The store refused or could not answer, or holds no manifest there.
        DataError: The manifest cannot be read, or a file's size differs from the recorded one.
    """
    yield from Manifest.read(out).checked_paths()
