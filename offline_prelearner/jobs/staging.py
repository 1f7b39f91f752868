"""What a job needs from the place it stages and commits its output: one protocol, two places.

::

    staging = staging_for(out, overwrite=..., resume=...)    # where --out lives is decided here
    with staging, staging.guard():
        kept = staging.open()                   # reusable unit records of an interrupted run
        output = staging.unit_output()          # pickled into every unit: files, records
        ...                                     # units: open_file, check_owner, write_record
        staging.commit(stats, files, extra)     # the manifest, written last, is the commit

:class:`Staging` is the job's side (:mod:`.commit`'s :class:`~.commit.LocalStaging` on a local
disk: a staging folder renamed into place under a lock; :mod:`.store_commit`'s
:class:`~.store_commit.StoreStaging` on an object store: final names with the job's id, the
manifest's PUT as the commit). :class:`UnitOutput` is a unit's side: where its files go and how
they are finished (:class:`~.staged_file.StagedFile`), its record, the check that the staging is
still its job's. The batch job, its units and their writer call only these; :func:`staging_for`
is the one place that asks where ``--out`` lives.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from ..io.stores import Location, locate
from .commit import LocalStaging
from .records import FileRecord, UnitRecord
from .staged_file import StagedFile
from .store_commit import StoreStaging

__all__ = ["Staging", "UnitOutput", "staging_for"]


class UnitOutput(Protocol):
    """Where the units of one job write: picklable, the same in every unit's task."""

    @property
    def job_id(self) -> str:
        """The job's id: a unit writes nothing into a staging of another job."""
        ...

    @property
    def shared_folder(self) -> str | None:
        """A folder every node of a cluster must see as the driver does (a local staging
        folder), or None (a store, the same everywhere)."""
        ...

    def open_file(self, kind: Literal["part", "quarantine"], unit: int, k: int) -> StagedFile:
        """Opens the ``k``-th file of ``unit``, samples (``"part"``) or refused rows
        (``"quarantine"``).

        Args:
            kind: ``"part"`` or ``"quarantine"``.
            unit: The unit's index.
            k: The file's number within the unit.

        Returns:
            The file to write.
        """
        ...

    def check_owner(self) -> None:
        """Refuses (:class:`~.ownership.CommitError`) once the staging is no longer this job's;
        called before a unit puts its files in place."""
        ...

    def write_record(self, record: UnitRecord) -> None:
        """Writes a unit's record (the unit commit), after its files are in place.

        Args:
            record: The unit's record.
        """
        ...

    def failures(self) -> contextlib.AbstractContextManager[None]:
        """What a unit's writes go under: how a failure of the place is said in one line."""
        ...


class Staging(Protocol):
    """The staging of one job: opened, written by its units, committed whole or not at all.

    Used as a context manager: the job owns ``out`` inside the block (a lock on a local disk, a
    probe write on a store).
    """

    @property
    def out(self) -> str | os.PathLike[str]:
        """``--out``."""
        ...

    @property
    def job_id(self) -> str:
        """This job's id (a resume adopts the id of the job it resumes)."""
        ...

    @property
    def resume(self) -> bool:
        """Whether an interrupted run's units are kept."""
        ...

    job: dict[str, Any]

    def __enter__(self) -> Staging: ...

    def __exit__(self, *exc: object) -> None: ...

    def check_apart(self, inputs: str | os.PathLike[str] | list[Any]) -> None:
        """Refuses an ``out`` that is, holds or lies inside an input.

        Args:
            inputs: The job's inputs as given.
        """
        ...

    def guard(self) -> contextlib.AbstractContextManager[None]:
        """What the job's whole run goes under (a local disk: a full disk named in one line)."""
        ...

    def staged_seed(self) -> int | None:
        """The seed of the staged job a resume would adopt, or None."""
        ...

    def open(self) -> dict[int, dict[str, Any]]:
        """Prepares the staging and writes the job's ``job.json``; returns the unit records a
        resume keeps."""
        ...

    def drop_unit_files(self, unit: int) -> None:
        """Removes what an unfinished attempt at ``unit`` may have left.

        Args:
            unit: The unit's index.
        """
        ...

    def unit_output(self) -> UnitOutput:
        """Where the units write (after :meth:`open`: a resume adopts the job's id)."""
        ...

    def data_file(self, name: str) -> Location:
        """A staged data file, by the name its unit record gives.

        Args:
            name: Its name under ``files_dir``.
        """
        ...

    def output_file(self, *names: str) -> str:
        """The path or URI a file of the committed output will have.

        Args:
            names: Its path's components under ``out``.
        """
        ...

    def commit(
        self,
        stats: Mapping[str, Any],
        files: list[FileRecord] | list[dict[str, Any]],
        extra: Mapping[str, Any] | None = None,
    ) -> str | Path:
        """Checks the listed files and commits them: the manifest, written last.

        Args:
            stats: The job's stats (``stats.json``).
            files: The data files, from the unit records.
            extra: More manifest entries (``quarantine``: refused rows' files).
        """
        ...

    def write_stats(self, stats: Mapping[str, Any]) -> None:
        """Writes the committed output's ``stats.json`` again (after the commit point).

        Args:
            stats: The job's stats, completed.
        """
        ...

    def discard(self) -> None:
        """Removes the staging (a dry run)."""
        ...

    def committed_units(self) -> int:
        """Unit records a ``--resume`` may reuse."""
        ...


def staging_for(
    out: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    resume: bool = False,
    files_dir: str = "samples",
) -> Staging:
    """The staging of a job writing ``out``: the one place that decides where ``out`` lives.

    Args:
        out: ``--out``: a local folder, or an object store's prefix (``s3://bucket/out``).
        overwrite: Replace a committed output on success (else a non-empty ``out`` is refused).
        resume: Keep the units an interrupted run of the same job committed.
        files_dir: The folder, inside ``out``, of the data files.

    Returns:
        A :class:`~.commit.LocalStaging` (a staging folder beside ``out``, renamed into place) or
        a :class:`~.store_commit.StoreStaging` (no rename: the manifest is the commit).
    """
    where = locate(out)
    if where.local:
        return LocalStaging(Path(out), {}, overwrite=overwrite, resume=resume, files_dir=files_dir)
    return StoreStaging(os.fspath(out), {}, overwrite=overwrite, resume=resume, files_dir=files_dir)
