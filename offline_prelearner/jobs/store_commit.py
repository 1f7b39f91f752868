"""A job's commit on an object store, which has no rename: final names, unit records, manifest last.

::

    s3://bkt/out/_staging/<job>/job.json                 the job (id, config, inputs), written first
    s3://bkt/out/_staging/<job>/units/unit-00003.json    one per finished unit of work
    s3://bkt/out/samples/part-<job>-00003-000.parquet    a unit's files, under their final names
    s3://bkt/out/quarantine/quarantine-<job>-00003-000.parquet
    s3://bkt/out/_manifest.json                          the commit point: one PUT, written last
    s3://bkt/out/stats.json                              after it (the manifest is the truth)

A local disk renames a staging folder into place (:mod:`.commit`); an object store has no atomic
rename (S3 and GCS copy and delete, Azure without a hierarchical namespace has none), so here the
units write their files where they stay, named with the job's id (its *attempt*), and the job
commits by writing ``_manifest.json`` last: an object appears whole or not at all, so before the
manifest lands nothing is output, and after it readers read exactly what it lists
(:class:`~offline_prelearner.io.manifest.Manifest`), never the presence of files. Names that start
with ``_`` are never read as data.

There is no lock on a store. Two jobs into one prefix are still safe without one: each job's
files and records are its own (its id is in every name), the manifest that lands last wins and
lists only its job's files, and a job deletes only (a) its own staging, after its commit, (b) the
files the manifest it replaced listed, and (c) files of a job that has no staging left (one that
committed and was replaced, or was discarded): a live job's staging exists before it writes any
file, so no live job's file is ever deleted. A killed job's staging and files stay for
``--resume`` (which adopts the newest staged job of the same config, as a local resume adopts the
staging folder); they are never read as output.

Failures: a store that cannot be written (no such bucket, denied, unreachable) is found by a
probe write under ``_staging`` before anything is read (:class:`~..io.stores.StorageError`, exit
2); a store failure after that is an ``OSError`` (EIO, exit 3) and nothing is committed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import posixpath
import re
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import CommittedWarning
from ..io.manifest import DATASET, MANIFEST_FILE, SAMPLES
from ..io.stores import Location, StorageError, locate, storage_error
from .ownership import CommitError, check_owner, check_same_job, fits_job, new_job_id
from .records import FileRecord, JobManifest, UnitRecord, file_records
from .session.interrupts import commit_point
from .staged_file import HashedStream

__all__ = [
    "STAGING_DIR",
    "CommittedWarning",
    "StoreFile",
    "StoreStaging",
    "StoreUnitOutput",
    "attempt_name",
    "check_out_apart_on_store",
    "publish",
    "store_failure",
    "write_json",
]

#: The prefix, inside ``--out``, of every job's staging (job file, unit records).
STAGING_DIR = "_staging"
_JOB_FILE = "job.json"
_UNITS = "units"
_STATS_FILE = "stats.json"
_QUARANTINE = "quarantine"
#: A file of some job's attempt: ``part-<job>-<unit>-<k>.parquet`` (or ``quarantine-...``).
_ATTEMPT_FILE = re.compile(r"[^/]*?-(\d{8}T\d{6}-[0-9a-f]{16})(?:[-.][^/]*)?")
#: A folder named by a job's id: the generation of a dataset whose file names are fixed
#: (Minari's ``data/main_data.hdf5``), written as ``<job>/data/main_data.hdf5``.
_JOB_ID = re.compile(r"\d{8}T\d{6}-[0-9a-f]{16}")


def _attempt_of(rel: str) -> str | None:
    """The job whose file ``rel`` (a path inside ``--out``) is, from its name or its first
    folder; None for a file of no job (the user's, ``stats.json``, the manifest)."""
    first, _, _ = rel.partition("/")
    if "/" in rel and _JOB_ID.fullmatch(first):
        return first
    m = _ATTEMPT_FILE.fullmatch(rel.rsplit("/", 1)[-1])
    return m.group(1) if m is not None else None


def write_json(loc: Location, obj: Any) -> None:
    """Writes JSON as one object (a PUT: whole or absent).

    Args:
        loc: Where the object goes.
        obj: What it holds (anything ``json`` writes; other values as their ``str``).
    """
    loc.write_bytes((json.dumps(obj, indent=2, default=str) + "\n").encode())


def _write_job(loc: Location, job: Any) -> None:
    """``job.json`` on one line: ``json``'s C encoder writes a job of 100,000 inputs many times
    faster than the indented form."""
    loc.write_bytes((json.dumps(job, default=str) + "\n").encode())


def _read_json(loc: Location) -> Any:
    """The JSON at ``loc``, or None when it is absent or not JSON."""
    try:
        return json.loads(loc.read_bytes())
    except (FileNotFoundError, ValueError):
        return None
    except StorageError as e:
        if "not found" in str(e).lower():
            return None
        raise


@contextlib.contextmanager
def store_failure(out: str) -> Iterator[None]:
    """A store's failure once the job runs: an ``OSError`` (EIO) naming ``--out`` (exit 3, one
    line at the CLI), not the ``StorageError`` of a bad store at the start (exit 2).

    Args:
        out: ``--out`` as the line names it.
    """
    try:
        yield
    except CommitError:
        raise
    except OSError as e:
        if isinstance(e, FileNotFoundError) and not isinstance(e, StorageError):
            raise
        text = " ".join(str(e).split())
        raise OSError(
            errno.EIO, f"a store failed while the job ran (--out {out}): {text}"
        ) from None


def check_out_apart_on_store(out: str, inputs: str | os.PathLike[str] | list[Any]) -> None:
    """:func:`~.ownership.check_out_apart` for a store's ``out``: not an input, not inside one,
    holding none (compared as URIs on the same store; a local input is never on it).

    Args:
        out: ``--out``, a store's URI.
        inputs: The job's inputs as given (a path, a glob, or a list of them).

    Raises:
        CommitError: One line naming ``out`` and the input.
    """
    where = locate(out)
    for item in inputs if isinstance(inputs, list) else [inputs]:
        text = os.fspath(item)
        loc = locate(text.split("*", 1)[0].rstrip("/"))
        if loc.scheme != where.scheme:
            continue
        a, b = where.path.rstrip("/") + "/", loc.path.rstrip("/") + "/"
        if a.startswith(b) or b.startswith(a):
            raise CommitError(
                f"--out {out!r} is, holds or lies inside the input {text!r}; choose an --out "
                "outside the input"
            )


# ====================================================================== a unit's files
class StoreFile:
    """A unit's file on an object store (:class:`~.staged_file.StagedFile`): uploaded straight
    under its final name (an object appears whole when its upload completes; a worker killed
    mid-upload leaves none), hashed as it is written.

    Args:
        at: Where the object goes.
    """

    def __init__(self, at: Location) -> None:
        self.at = at
        self.name = at.name
        self._hashed = HashedStream(at.open_output_stream())

    @property
    def stream(self) -> Any:
        """What the Parquet writer writes to."""
        return self._hashed.stream

    def finish(self) -> None:
        """Completes the upload: the object is there, whole."""
        self._hashed.close()

    def place(self, rows: int) -> FileRecord:
        """Nothing to move (the object is under its final name); its record.

        Args:
            rows: The rows the file holds.

        Returns:
            The file's record.
        """
        return FileRecord(self.name, rows, self._hashed.sink.bytes, self._hashed.sha256)

    def abort(self) -> None:
        """Closes the upload quietly and deletes the object (never listed by a manifest; removed
        now rather than by a later job's clean-up)."""
        self._hashed.close_quietly()
        with contextlib.suppress(Exception):
            self.at.delete()


@dataclass(frozen=True)
class StoreUnitOutput:
    """Where the units of one job write on an object store (:class:`~.staging.UnitOutput`);
    pickled into every unit's task.

    Args:
        out: ``--out``, the store's URI.
        samples: The URI of the data files' folder.
        staging: The URI of this job's staging (``_staging/<job>``).
        job_id: The job's id, in every file's name (its attempt).
    """

    out: str
    samples: str
    staging: str
    job_id: str

    @property
    def shared_folder(self) -> str | None:
        """None: a store is the same from every node."""
        return None

    def open_file(self, kind: Literal["part", "quarantine"], unit: int, k: int) -> StoreFile:
        """Opens the ``k``-th file of ``unit`` under its final name:
        ``part-<job>-<unit>-<k>.parquet`` in the data folder, ``quarantine-<job>-<unit>-<k>``
        in ``quarantine/``.

        Args:
            kind: ``"part"`` (samples) or ``"quarantine"`` (refused rows).
            unit: The unit's index.
            k: The file's number within the unit.

        Returns:
            The file, its upload begun.
        """
        folder = locate(self.samples) if kind == "part" else locate(self.out).join(_QUARANTINE)
        return StoreFile(folder.join(f"{kind}-{self.job_id}-{unit:05d}-{k:03d}.parquet"))

    def check_owner(self) -> None:
        """Refuses to finish a unit once the job's staging is gone (committed or discarded by
        another job) or names another job.

        Raises:
            CommitError: ``job.json`` is gone or names another job.
        """
        check_owner(locate(self.staging), self.job_id, "its unit wrote nothing")

    def write_record(self, record: UnitRecord) -> None:
        """Writes a unit's record (the unit commit) as one object.

        Args:
            record: The unit's record.
        """
        at = locate(self.staging).join(_UNITS, f"unit-{record.unit:05d}.json")
        write_json(at, record.to_dict())

    def failures(self) -> contextlib.AbstractContextManager[None]:
        """A store's failure while a unit writes: one line, EIO (:func:`store_failure`)."""
        return store_failure(self.out)


# ====================================================================== the staging
class StoreStaging:
    """The staging of one job writing to ``out`` on an object store (see the module's text;
    :class:`~.staging.Staging`).

    Args:
        out: The prefix the job's result goes to (``--out``, a store URI).
        job: What identifies the job (version, config, prelearner, inputs, ``unit_keys``).
        overwrite: Replace a committed output on success (else refused up front).
        resume: Adopt the newest staged job of the same config and keep its units.
        files_dir: The folder, inside ``out``, of the data files (``"samples"``).
    """

    def __init__(
        self,
        out: str,
        job: dict[str, Any],
        overwrite: bool = False,
        resume: bool = False,
        files_dir: str = "samples",
    ) -> None:
        self.root = locate(out)
        self.out = self.root.uri
        self.job = job
        self.overwrite = overwrite
        self.resume = resume
        self.files_dir = files_dir
        self.samples = self.root.join(files_dir) if files_dir else self.root
        self._set_job(new_job_id())
        self._adopted = False
        self._listing: list[Location] | None = None

    def _set_job(self, job_id: str) -> None:
        self.job_id = job_id
        self.path = self.root.join(STAGING_DIR, job_id)
        self.units = self.path.join(_UNITS)

    def __enter__(self) -> StoreStaging:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    # ------------------------------------------------------------------ the start
    def acquire(self) -> None:
        """Probes the store with a small write under ``_staging`` (and its removal): no such
        bucket, wrong credentials, denied or unreachable fail here in one line, before any input
        is read (there is no lock on a store: see the module's text).

        Raises:
            StorageError: the store cannot be written.
        """
        bucket = self.root.with_path(self.root.path.split("/", 1)[0])
        try:
            there = bucket.exists()
        except StorageError as e:
            raise StorageError(f"--out {self.out}: {str(e).split(': ', 1)[-1]}") from None
        if not there:  # some stores make a bucket on the first write
            raise StorageError(f"--out {self.out}: {self.root.missing()}")
        probe = self.root.join(STAGING_DIR, f".probe-{self.job_id}")
        try:
            probe.write_bytes(b"")
            probe.delete()
        except StorageError as e:
            raise StorageError(f"--out {e}") from None
        except OSError as e:
            raise StorageError(f"--out {storage_error(e, probe)} (a test write)") from None

    def release(self) -> None:
        """Nothing to release: a store has no lock."""

    def check_apart(self, inputs: str | os.PathLike[str] | list[Any]) -> None:
        """Refuses an ``out`` that is, holds or lies inside an input
        (:func:`check_out_apart_on_store`).

        Args:
            inputs: The job's inputs as given (a path, a glob, or a list of them).

        Raises:
            CommitError: One line naming ``out`` and the input.
        """
        check_out_apart_on_store(self.out, inputs)

    def guard(self) -> contextlib.AbstractContextManager[None]:
        """Nothing around the whole run: the staging's own writes name a store's failure
        (:func:`store_failure`), and an input's is the input's."""
        return contextlib.nullcontext()

    def unit_output(self) -> StoreUnitOutput:
        """Where this job's units write (their files under final names, records under its
        staging), for every unit's task."""
        return StoreUnitOutput(self.out, self.samples.uri, self.path.uri, self.job_id)

    def data_file(self, name: str) -> Location:
        """A data file of this job, by the name its unit record gives.

        Args:
            name: The name under ``files_dir``.

        Returns:
            Its location.
        """
        return self.samples.join(name)

    def output_file(self, *names: str) -> str:
        """The URI a file of the committed output will have.

        Args:
            names: Its path's components under ``out``.

        Returns:
            The URI.
        """
        return self.root.join(*names).uri

    def staged_seed(self) -> int | None:
        """The seed of the staged job a resume adopts (None: none to adopt)."""
        staged = self._staged_jobs()
        for _, job in staged:
            if isinstance(job.get("seed"), int):
                return int(job["seed"])
        return None

    def _staged_jobs(self) -> list[tuple[str, dict[str, Any]]]:
        """Every staged job's (id, job.json), newest first."""
        found = []
        for entry, is_dir in self.root.join(STAGING_DIR).children():
            if not is_dir:
                continue
            job = _read_json(entry.join(_JOB_FILE))
            if isinstance(job, dict) and job.get("job_id") == entry.name:
                found.append((entry.name, job))
        return sorted(found, key=lambda e: e[0], reverse=True)

    # ------------------------------------------------------------------ opening
    def open(self) -> dict[int, dict[str, Any]]:
        """Checks ``out``, adopts a staged job to resume, writes this job's ``job.json`` (before
        any unit writes a file); returns the reusable unit records.

        Raises:
            CommitError: ``out`` holds a committed output or other files without ``overwrite``;
                ``resume`` finds nothing to resume or a staged job of another config.
        """
        with store_failure(self.out):
            return self._open()

    def check_out(self) -> None:
        """Refuses an ``out`` that holds a committed output or other files (not this project's
        staging or a job's files) unless ``overwrite``.

        Raises:
            CommitError: ``out`` is not empty and ``overwrite`` is not given.
        """
        base = self.root.path.rstrip("/") + "/"
        foreign = [
            f
            for f in self.root.walk()
            if not f.path[len(base) :].startswith(STAGING_DIR + "/")
            and _attempt_of(f.path[len(base) :]) is None
            and f.path[len(base) :] != _STATS_FILE
        ]
        if foreign and not self.overwrite:
            raise CommitError(
                f"--out {self.out!r} is not empty; pass --overwrite to replace it when this job "
                "succeeds, or choose another prefix"
            )

    def begin(self, job_id: str | None = None) -> None:
        """Writes this job's ``job.json`` before it writes any file (``job_id``: its id).

        Args:
            job_id: The id to take (a job committed elsewhere and published here keeps its
                own); None keeps this staging's. ``started_at`` is set only where unset.

        Raises:
            OSError: The store failed (EIO, naming ``out``).
        """
        if job_id is not None:
            self._set_job(job_id)
        self.job["job_id"] = self.job_id
        self.job.setdefault("started_at", time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        with store_failure(self.out):
            _write_job(self.path.join(_JOB_FILE), self.job)

    def _open(self) -> dict[int, dict[str, Any]]:
        self.check_out()
        listing = self.root.walk()
        kept: dict[int, dict[str, Any]] = {}
        if self.resume:
            kept = self._resumable()
        self._listing = listing
        self.begin()
        return kept

    def _resumable(self) -> dict[int, dict[str, Any]]:
        staged = self._staged_jobs()
        if not staged:
            raise CommitError(
                f"--resume: no interrupted job to resume for --out {self.out!r} (nothing under "
                f"{STAGING_DIR}/); run without --resume"
            )
        newest = staged[0][1]
        check_same_job(newest, self.job)
        self._set_job(staged[0][0])
        self.job["started_at"] = newest.get("started_at")
        self._adopted = True
        files = {f.path: f for f in self.root.walk()}
        kept: dict[int, dict[str, Any]] = {}
        for p in self.units.walk():
            rec = _read_json(p)
            if not isinstance(rec, dict) or not isinstance(rec.get("unit"), int):
                continue
            if p.name == f"unit-{rec['unit']:05d}.json" and self._holds(rec, files):
                kept[rec["unit"]] = rec
        return kept

    def _holds(self, rec: dict[str, Any], files: dict[str, Location]) -> bool:
        """Like a local resume: this job's record, the same plan of the unit, its inputs
        unchanged, its files present under their names with their recorded sizes."""
        if not fits_job(rec, self.job, self.job_id):
            return False
        try:
            for loc, entry in self._entries(rec):
                found = files.get(loc.path)
                if found is None or found.size() != entry.bytes:
                    return False
        except (KeyError, TypeError, ValueError, CommitError):
            return False
        return True

    def _entries(self, rec: dict[str, Any]) -> list[tuple[Location, FileRecord]]:
        where = self.units.uri
        return [
            *((self.samples.join(_name(f)), f) for f in file_records(rec.get("files", []), where)),
            *((self.root.join(_name(f)), f) for f in file_records(rec.get(_QUARANTINE, []), where)),
        ]

    # ------------------------------------------------------------------ units
    def record_path(self, unit: int) -> Location:
        """Where unit ``unit``'s record goes.

        Args:
            unit: The unit's index (``unit-<index, 5 digits>.json`` under the staging's units).
        """
        return self.units.join(f"unit-{unit:05d}.json")

    def drop_unit_files(self, unit: int) -> None:
        """Removes what an unfinished attempt of this job at ``unit`` left (a resume only: a new
        job's id is in no file yet).

        Args:
            unit: The unit's index: this job's sample and quarantine files of that unit (by
                their attempt names) in the listing taken at open, and its record, are deleted.

        Raises:
            OSError: The store failed (EIO, naming ``out``).
        """
        if not self._adopted:
            return
        with store_failure(self.out):
            mark = f"-{self.job_id}-{unit:05d}-"
            for f in self._listing or []:
                if mark in f.name and _ATTEMPT_FILE.fullmatch(f.name):
                    f.delete()
            self.record_path(unit).delete()

    # ------------------------------------------------------------------ the job commit
    def commit(
        self,
        stats: Mapping[str, Any],
        files: list[FileRecord] | list[dict[str, Any]],
        extra: Mapping[str, Any] | None = None,
    ) -> str:
        """Checks the listed files, writes ``_manifest.json`` (the commit point), then
        ``stats.json``; then deletes the replaced generation, this job's staging and files of
        finished jobs that no manifest lists.

        Args:
            stats: The job's stats (``stats.json``).
            files: The data files (names under ``files_dir``), from this job's unit records.
            extra: More manifest entries; its ``quarantine`` list (names under ``out``) is
                committed with the data files.

        Returns:
            ``out``.

        Raises:
            CommitError: this job's staging is gone, or a listed file is missing or not of its
                recorded size (nothing is committed).
            OSError: the store failed (EIO; nothing is committed before the manifest).
        """
        content = SAMPLES if self.files_dir == "samples" else DATASET
        data = tuple(file_records(files, self.units.uri))
        manifest = JobManifest(self.job_id, self.job, data, self.files_dir, content, extra or {})
        return self.commit_manifest(manifest.to_dict(), stats)

    def commit_manifest(self, manifest: dict[str, Any], stats: Mapping[str, Any]) -> str:
        """:meth:`commit` of a manifest made elsewhere (its ``files`` under its ``files_dir``,
        its ``quarantine`` under ``out``), this job's id in it.

        Args:
            manifest: The manifest as JSON (:meth:`~.records.JobManifest.to_dict`); its
                ``job_id`` is set to this job's before it is written.
            stats: The job's stats, written to ``stats.json`` after the manifest.

        Returns:
            ``out``.

        Raises:
            CommitError: This job's staging is no longer its own, a listed file is missing or
                of another size, or another job committed to ``out`` meanwhile (without
                ``--overwrite``); nothing is committed.
            OSError: The store failed before the manifest was written (EIO).
        """
        with store_failure(self.out):
            check_owner(self.path, self.job_id, "nothing was committed")
            folder = self.root.join(manifest.get("files_dir") or "")
            where = f"{self.out}/{MANIFEST_FILE}"
            listed = [
                *((folder.join(_name(f)), f) for f in file_records(manifest["files"], where)),
                *(
                    (self.root.join(_name(f)), f)
                    for f in file_records(manifest.get(_QUARANTINE) or [], where)
                ),
            ]
            sizes = {f.path: f for f in self.root.walk()}
            for loc, entry in listed:
                found = sizes.get(loc.path)
                if found is None or found.size() != entry.bytes:
                    what = "is missing" if found is None else "is not the size its unit wrote"
                    raise CommitError(
                        f"the file {loc.uri!r} {what}: something outside this job deleted or "
                        "wrote it; nothing was committed (--resume redoes its unit)"
                    )
            manifest_at = self.root.join(MANIFEST_FILE)
            old = _read_json(manifest_at)
            if isinstance(old, dict) and not self.overwrite and old.get("job_id") != self.job_id:
                self.discard()  # this job lost: its files are its own to remove
                raise CommitError(
                    f"another job committed to --out {self.out!r} while this one ran (job "
                    f"{old.get('job_id')}); nothing was committed (pass --overwrite to replace it)"
                )
            manifest = {**manifest, "job_id": self.job_id}
            with commit_point():  # a signal from here waits for the manifest: committed, exit 0
                write_json(manifest_at, manifest)
        # Committed: what follows cannot change the output, so a store failing here is a warning
        # (exit 0), never an exit 3 over a committed job; the next run cleans what is left.
        self._after_commit(stats, old, {loc.path for loc, _ in listed})
        return self.out

    def write_stats(self, stats: Mapping[str, Any]) -> None:
        """Writes the committed output's ``stats.json`` again, with what was measured after the
        commit point (the commit's and the stop's seconds).

        Args:
            stats: The job's stats, as :meth:`commit` wrote them, completed.

        Raises:
            OSError: the store failed (EIO); the output stays committed.
        """
        with store_failure(self.out):
            write_json(self.root.join(_STATS_FILE), stats)

    def _after_commit(self, stats: Mapping[str, Any], old: Any, ours: set[str]) -> None:
        """``stats.json``, then the replaced generation, this job's staging and strays deleted."""
        steps: list[tuple[str, Any]] = [
            ("writing stats.json", lambda: write_json(self.root.join(_STATS_FILE), stats)),
            ("deleting the replaced generation", lambda: self._replaced(old, ours)),
            ("deleting this job's staging", self.path.delete_tree),
            ("deleting files no manifest lists", self.clean),
        ]
        for what, step in steps:
            try:
                step()
            except OSError as e:
                warnings.warn(
                    f"{self.out}: committed; {what} failed ({e}): the next run into it cleans up",
                    CommittedWarning,
                    stacklevel=2,
                )

    def _replaced(self, old: Any, ours: set[str]) -> None:
        if isinstance(old, dict) and old.get("job_id") != self.job_id:
            self._delete_generation(old, ours)

    def _delete_generation(self, old: dict[str, Any], ours: set[str]) -> None:
        """Deletes the files of the manifest this job's manifest replaced."""
        with contextlib.suppress(KeyError, TypeError, ValueError, CommitError):
            folder = self.root.join(old.get("files_dir", "samples") or "")
            where = f"the replaced {self.out}/{MANIFEST_FILE}"
            gone = [folder.join(_name(f)) for f in file_records(old.get("files", []), where)]
            gone += [
                self.root.join(_name(f)) for f in file_records(old.get(_QUARANTINE, []), where)
            ]
            for loc in gone:
                if loc.path not in ours:
                    loc.delete()

    def clean(self) -> None:
        """Deletes the files of jobs that have no staging left and that the current manifest
        does not list (a replaced generation whose deletion was cut short, a discarded job).
        The listing comes first, the stagings and the manifest after: a job that commits in
        between is seen committed, and a live job's staging exists before its first file."""
        files = self.root.walk()
        live = {job for job, _ in self._staged_jobs()}
        manifest = _read_json(self.root.join(MANIFEST_FILE))
        listed: set[str] = set()
        if isinstance(manifest, dict):
            with contextlib.suppress(KeyError, TypeError, ValueError, CommitError):
                folder = self.root.join(manifest.get("files_dir", "samples") or "")
                where = f"{self.out}/{MANIFEST_FILE}"
                data = file_records(manifest.get("files", []), where)
                refused = file_records(manifest.get(_QUARANTINE, []), where)
                listed = {folder.join(_name(f)).path for f in data}
                listed |= {self.root.join(_name(f)).path for f in refused}
        base = self.root.path.rstrip("/") + "/"
        for f in files:
            rel = f.path[len(base) :]
            if rel.startswith(STAGING_DIR + "/"):
                continue
            job = _attempt_of(rel)
            if job is not None and job not in live and f.path not in listed:
                f.delete()

    def discard(self) -> None:
        """Removes this job's staging and its files (a dry run)."""
        with contextlib.suppress(OSError):
            self.path.delete_tree()
            self.clean()

    def committed_units(self) -> int:
        """Unit records of staged jobs: what a ``--resume`` may reuse."""
        with contextlib.suppress(OSError):
            staged = self._staged_jobs()
            if staged:
                return len(self.root.join(STAGING_DIR, staged[0][0], _UNITS).walk())
        return 0


def _name(entry: FileRecord) -> str:
    name = entry.name
    if not name or name.startswith("/") or ".." in name.split("/"):
        raise ValueError(f"not a file name inside the output: {name!r}")
    return name


def attempt_name(name: str, job_id: str) -> str:
    """``name`` with the job's id in it: ``rows-00000-00001.parquet`` ->
    ``rows-<job>-00000-00001.parquet``, ``quarantine/quarantine.parquet`` ->
    ``quarantine/quarantine-<job>.parquet``.

    Args:
        name: A file's name as its job wrote it, possibly under a folder (``/``-separated);
            the id goes before the base name's first ``-`` or ``.`` (at its end without one).
        job_id: The job's id.
    """
    folder, _, base = name.rpartition("/")
    cut = min((i for i in (base.find("-"), base.find(".")) if i > 0), default=len(base))
    named = f"{base[:cut]}-{job_id}{base[cut:]}"
    return f"{folder}/{named}" if folder else named


def publish(local: str, staging: StoreStaging) -> dict[str, Any]:
    """Commits a job committed in the local folder ``local`` to ``staging``'s store: other files
    of the folder (not data) are uploaded under their names first, then each file its manifest
    lists under :func:`attempt_name` (the same bytes: the same sizes and sha256) -- or, for a
    layout of fixed names in folders (Minari's), under a folder named by the job, the manifest's
    ``files_dir`` -- then the manifest, last (:meth:`StoreStaging.commit_manifest`), with the
    stats naming the store: ``out_dir`` is ``staging.out``, ``quarantine_file`` and
    ``files_written`` the names uploaded.

    Args:
        local: The local folder of a committed job (its ``_manifest.json`` and ``stats.json``
            are read).
        staging: The store output to commit into; its ``job.json`` takes the local job's id.

    Returns:
        The local job's stats (``stats.json``) as committed, naming the store.

    Raises:
        CommitError: As :meth:`StoreStaging.commit_manifest`; nothing is committed.
        OSError: The store failed (EIO, naming the output).
    """
    root = locate(local)
    manifest = json.loads(root.join(MANIFEST_FILE).read_bytes())
    stats: dict[str, Any] = json.loads(root.join(_STATS_FILE).read_bytes())
    job_id = manifest["job_id"]
    staging.begin(job_id)
    folder = manifest.get("files_dir") or ""
    # Names in folders (Minari's data/main_data.hdf5) are the layout's own: the generation goes
    # under a folder named by the job instead of into the names.
    where = f"{local}/{MANIFEST_FILE}"
    listed = {key: file_records(manifest.get(key) or [], where) for key in ("files", _QUARANTINE)}
    nested = not folder and any("/" in _name(f) for f in listed["files"])
    renamed: dict[str, list[dict[str, Any]]] = {"files": [], _QUARANTINE: []}
    uploads: list[tuple[str, str]] = []  # (local name, store name), data in manifest order
    for key, under in (("files", folder), (_QUARANTINE, "")):
        for f in listed[key]:
            keep = nested and key == "files"
            name = _name(f) if keep else attempt_name(_name(f), job_id)
            rel = posixpath.join(under, _name(f)) if under else _name(f)
            uploads.append((rel, posixpath.join(job_id if keep else under, name).strip("/")))
            renamed[key].append(dataclasses.replace(f, name=name).to_dict(with_stat=False))
    base = root.path.rstrip("/") + "/"
    data = {rel for rel, _ in uploads}
    others = [
        (rel, rel)
        for rel in (f.path[len(base) :].replace("\\", "/") for f in root.walk())
        if rel not in data and rel not in (MANIFEST_FILE, _STATS_FILE)
    ]
    with store_failure(staging.out):
        for rel, there in [*others, *uploads]:
            src, dst = root.join(*rel.split("/")), staging.root.join(*there.split("/"))
            with src.open_input_stream() as fin, dst.open_output_stream() as fout:
                while block := fin.read(1 << 22):
                    fout.write(block)
    out = {**manifest, "files": renamed["files"]}
    if nested:
        out["files_dir"] = job_id
    if manifest.get(_QUARANTINE) is not None:
        out[_QUARANTINE] = renamed[_QUARANTINE]
    stats = _stats_on_store(
        stats, root, staging, dict(uploads), renamed["files"], out.get("files_dir")
    )
    staging.commit_manifest(out, stats)
    return stats


def _stats_on_store(
    stats: dict[str, Any],
    root: Location,
    staging: StoreStaging,
    uploaded: dict[str, str],
    files: list[dict[str, Any]],
    files_dir: str | None,
) -> dict[str, Any]:
    """``stats`` of the local job as the store holds it: ``out_dir`` the store's ``out``, the
    quarantine file its URI there, ``files_written`` the files the manifest lists, as paths
    under ``out`` (its ``files_dir`` joined to their names)."""
    stats = dict(stats)
    if "out_dir" in stats:
        stats["out_dir"] = staging.out
    if "files_written" in stats:
        under = files_dir or ""
        stats["files_written"] = [posixpath.join(under, f["name"]) for f in files]
    qfile = stats.get("quarantine_file")
    if isinstance(qfile, str):
        rel = os.path.relpath(qfile, root.path).replace(os.sep, "/")
        stats["quarantine_file"] = staging.root.join(*uploaded.get(rel, rel).split("/")).uri
    return stats
