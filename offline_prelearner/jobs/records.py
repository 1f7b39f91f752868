"""What a job writes about itself, as types: a staged file, a unit's record, the job's stats, the
manifest. Each is a frozen dataclass whose ``to_dict`` / ``from_dict`` are the only places its
JSON keys are spelled.

::

    units/unit-00003.json   UnitRecord    one per finished unit (its files: FileRecord)
    stats.json              JobStats      the job's counters, summed once per unit
    _manifest.json          JobManifest     the commit point: every file with its rows and sha256

The JSON is what earlier versions wrote, key for key (a resume reads the unit records an older
version staged; readers of ``stats.json`` and ``_manifest.json`` find the keys they knew).
``from_dict`` refuses a malformed record in one line naming the file and the key
(:class:`~.ownership.CommitError`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..episodes.ledger import Ledger
from .ownership import CommitError

__all__ = [
    "COUNTERS",
    "FileRecord",
    "JobManifest",
    "JobStats",
    "StagedStat",
    "UnitRecord",
]

_T = TypeVar("_T")

#: The prelearner's counters a unit's stats carry, summed into the job's (0 where absent).
COUNTERS = (
    "batches",
    "samples",
    "fragments_added",
    "not_ready",
    "pending_fragments",
    "samples_nonfinite",
)


def _take(data: Mapping[str, Any], key: str, kind: type[_T] | tuple[type, ...], where: str) -> Any:
    """``data[key]`` if it is of ``kind``, else the one-line refusal naming ``where``, ``key``."""
    value = data.get(key) if isinstance(data, Mapping) else None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise CommitError(
            f"{where}: not a record this package wrote: {key!r} is {_shown(value)}; remove it "
            "(--resume redoes its unit)"
        )
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return "missing" if value is None else text if len(text) <= 40 else text[:37] + "..."


def _mapping(data: Any, what: str, where: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise CommitError(f"{where}: {what} is not a JSON object ({_shown(data)})")
    return data


# ====================================================================== a staged file
@dataclass(frozen=True)
class StagedStat:
    """What a unit records of a local file it staged, right after its rename: a commit re-hashes
    the file only when its stat is no longer this (:mod:`.commit`)."""

    size: int
    ino: int
    mtime_ns: int

    def to_dict(self) -> dict[str, int]:
        """The JSON object (``{"size", "ino", "mtime_ns"}``)."""
        return {"size": self.size, "ino": self.ino, "mtime_ns": self.mtime_ns}

    @classmethod
    def from_dict(cls, data: Any, where: str) -> StagedStat:
        """The stat a record holds.

        Args:
            data: The JSON object.
            where: The record's file, for the error.

        Returns:
            The stat.

        Raises:
            CommitError: A key is missing or not an integer.
        """
        d = _mapping(data, "a file's stat", where)
        return cls(_take(d, "size", int, where), _take(d, "ino", int, where),
                   _take(d, "mtime_ns", int, where))  # fmt: skip


@dataclass(frozen=True)
class FileRecord:
    """A file a job wrote, as a unit record and the manifest list it.

    Attributes:
        name: Its name under the output's ``files_dir`` (a quarantine file's: under the output).
        rows: The rows it holds.
        bytes: Its size.
        sha256: The hex sha256 of its bytes (None in hand-written manifests).
        stat: A local file's stat after its unit renamed it (unit records only, never the
            manifest).
        more: Other keys a job records of its files (``convert``'s), kept as they are.
    """

    name: str
    rows: int
    bytes: int
    sha256: str | None
    stat: StagedStat | None = None
    more: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self, *, with_stat: bool = True) -> dict[str, Any]:
        """The JSON object.

        Args:
            with_stat: Write the staged stat (a unit record), or not (the manifest).

        Returns:
            ``{"name", "rows", "bytes", "sha256", ...more, "stat"}``.
        """
        out = {"name": self.name, "rows": self.rows, "bytes": self.bytes, "sha256": self.sha256}
        out.update(self.more)
        if with_stat and self.stat is not None:
            out["stat"] = self.stat.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str) -> FileRecord:
        """The file a record lists.

        Args:
            data: The JSON object.
            where: The record's file, for the error.

        Returns:
            The file's record.

        Raises:
            CommitError: ``name``, ``rows`` or ``bytes`` is missing or of another type.
        """
        d = _mapping(data, "a file's entry", where)
        sha = d.get("sha256")
        return cls(
            name=_take(d, "name", str, where),
            rows=_take(d, "rows", int, where),
            bytes=_take(d, "bytes", int, where),
            sha256=sha if isinstance(sha, str) else None,
            stat=StagedStat.from_dict(d["stat"], where) if d.get("stat") is not None else None,
            more={k: v for k, v in d.items() if k not in _FILE_KEYS},
        )


_FILE_KEYS = frozenset({"name", "rows", "bytes", "sha256", "stat"})


def file_records(entries: Iterable[FileRecord | Mapping[str, Any]], where: str) -> list[FileRecord]:
    """``entries`` as :class:`FileRecord` (a caller's JSON objects read, records kept).

    Args:
        entries: Records or their JSON objects.
        where: Where they came from, for the error.

    Returns:
        The records, in order.
    """
    return [e if isinstance(e, FileRecord) else FileRecord.from_dict(e, where) for e in entries]


# ====================================================================== a unit
@dataclass(frozen=True)
class UnitRecord:
    """A finished unit of the batch job: what it read, wrote and counted (its *unit commit*).

    Attributes:
        unit: Its index in the plan.
        job_id: The job that ran it.
        plan: Its key (:func:`~.batch.plan.unit_key`): what a resume compares.
        inputs: The input files it read, as planned (path, size, mtime...).
        files: Its sample files.
        samples: The samples in them.
        quarantine: Its refused rows' files (names under the output).
        stats: The prelearner's counters (its ``ledger``, :data:`COUNTERS`, ``buffers``).
        per_file: Rows read, rejected and duplicate per input file it touched.
        node: Where it ran (host; Ray node id and IP); None in older records.
        cpu_seconds: Its process's CPU time on it; None in older records.
    """

    unit: int
    job_id: str
    plan: str | None
    inputs: tuple[Mapping[str, Any], ...]
    files: tuple[FileRecord, ...]
    samples: int
    quarantine: tuple[FileRecord, ...]
    stats: Mapping[str, Any]
    per_file: Mapping[str, Mapping[str, Any]]
    node: Mapping[str, str] | None = None
    cpu_seconds: float | None = None

    @property
    def ledger(self) -> Ledger:
        """The unit's rows and episodes, accounted."""
        return Ledger.from_dict(self.stats["ledger"])

    def counter(self, name: str) -> int:
        """One of the prelearner's :data:`COUNTERS` (0 where the unit has none).

        Args:
            name: The counter's name.

        Returns:
            Its value.
        """
        return int(self.stats.get(name, 0))

    def held(self) -> tuple[int, int]:
        """Episodes and timesteps its replay buffers held at its end, summed over modules."""
        buffers = self.stats.get("buffers", {}).values()
        return sum(b["episodes_held"] for b in buffers), sum(b["timesteps_held"] for b in buffers)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object (``units/unit-<unit>.json``)."""
        out: dict[str, Any] = {
            "unit": self.unit,
            "job_id": self.job_id,
            "plan": self.plan,
            "inputs": [dict(f) for f in self.inputs],
            "files": [f.to_dict() for f in self.files],
            "samples": self.samples,
            "quarantine": [f.to_dict() for f in self.quarantine],
            "stats": dict(self.stats),
            "per_file": {k: dict(v) for k, v in self.per_file.items()},
        }
        if self.node is not None:
            out["node"] = dict(self.node)
        if self.cpu_seconds is not None:
            out["cpu_seconds"] = self.cpu_seconds
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str) -> UnitRecord:
        """A unit record as JSON read it (this version's, or an older one's).

        Args:
            data: The JSON object.
            where: The record's file (or the unit's task), for the error.

        Returns:
            The record.

        Raises:
            CommitError: A key is missing or of another type (one line naming it and ``where``).
        """
        d = _mapping(data, "a unit record", where)
        stats = _take(d, "stats", Mapping, where)
        _take(stats, "ledger", Mapping, where)
        node = d.get("node")
        cpu = d.get("cpu_seconds")
        return cls(
            unit=_take(d, "unit", int, where),
            job_id=_take(d, "job_id", str, where),
            plan=d.get("plan"),
            inputs=tuple(_take(d, "inputs", list, where)),
            files=tuple(file_records(_take(d, "files", list, where), where)),
            samples=_take(d, "samples", int, where),
            quarantine=tuple(file_records(d.get("quarantine") or [], where)),
            stats=stats,
            per_file=d.get("per_file") or {},
            node=node if isinstance(node, Mapping) else None,
            cpu_seconds=float(cpu) if isinstance(cpu, int | float) else None,
        )


# ====================================================================== the job
@dataclass(frozen=True)
class JobStats:
    """The batch job's ``stats.json``: counters summed once per unit record, then what the job
    measured (see the README's "What stats.json says").

    The ledger's keys (``rows_in``, ``rows_kept``, ... ``rows_balance``) come from
    :meth:`~offline_prelearner.episodes.ledger.Ledger.to_dict` (``balanced`` named
    ``rows_balance``); ``ray_cluster`` only where the job ran on Ray.
    """

    units: int
    ledger: Mapping[str, Any]
    counters: Mapping[str, int]
    episodes_held: int
    timesteps_held: int
    input: tuple[str, ...] = ()
    files_read: int = 0
    files_rejected: int = 0
    per_file: tuple[Mapping[str, Any], ...] = ()
    format: str = ""
    engine: str = ""
    units_reused: int = 0
    samples_written: int = 0
    samples_rule: str = ""
    batch_rows: int | None = None
    quarantine_files: tuple[str, ...] = ()
    rows_quarantined: int = 0
    wall_seconds: float = 0.0
    rows_per_second: float | None = None
    samples_per_second: float | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    phases: Mapping[str, float | None] = field(default_factory=dict)
    nodes: tuple[Mapping[str, Any], ...] = ()
    ray_cluster: Mapping[str, Any] | None = None

    @classmethod
    def summed(cls, records: Iterable[UnitRecord]) -> JobStats:
        """The job's counters: every unit's record counted once (ledgers, counters, buffers).

        Args:
            records: The unit records, each once.

        Returns:
            Stats with the counters only (the rest :func:`dataclasses.replace` fills in).
        """
        ledger = Ledger()
        counters = dict.fromkeys(COUNTERS, 0)
        episodes = timesteps = units = 0
        for rec in records:
            units += 1
            ledger += rec.ledger
            for k in COUNTERS:
                counters[k] += rec.counter(k)
            e, t = rec.held()
            episodes, timesteps = episodes + e, timesteps + t
        return cls(units, ledger.to_dict(), counters, episodes, timesteps)

    @property
    def rows_in(self) -> int:
        """Input rows read, by every unit."""
        return int(self.ledger["rows_in"])

    @property
    def rows_balance(self) -> bool:
        """Whether every row read is kept, duplicate or rejected (the ledger balances)."""
        return bool(self.ledger["balanced"])

    @property
    def pending_fragments(self) -> int:
        """Episodes that never ended (their steps are not written under ``sample_all``)."""
        return self.counters["pending_fragments"]

    def to_dict(self) -> dict[str, Any]:
        """The JSON object (``stats.json``; :class:`~.batch.batch_job.PipelineResult`'s stats)."""
        ledger = dict(self.ledger)
        balanced = ledger.pop("balanced")
        out: dict[str, Any] = {"units": self.units, **ledger, "rows_balance": balanced}
        out.update(self.counters)
        out["episodes_held"] = self.episodes_held
        out["timesteps_held"] = self.timesteps_held
        out.update(
            {
                "input": list(self.input),
                "files_read": self.files_read,
                "files_rejected": self.files_rejected,
                "per_file": [dict(f) for f in self.per_file],
                "format": self.format,
                "engine": self.engine,
                "units_reused": self.units_reused,
                "samples_written": self.samples_written,
                "samples_rule": self.samples_rule,
                "batch_rows": self.batch_rows,
                "quarantine_files": list(self.quarantine_files),
                "rows_quarantined": self.rows_quarantined,
                "wall_seconds": self.wall_seconds,
                "rows_per_second": self.rows_per_second,
                "samples_per_second": self.samples_per_second,
                "config": dict(self.config),
                "phases": dict(self.phases),
                "nodes": [dict(n) for n in self.nodes],
            }
        )
        if self.ray_cluster is not None:
            out["ray_cluster"] = dict(self.ray_cluster)
        return out

    #: What the CLI's ``process`` prints of the stats, in order (besides ``out``).
    SUMMARY = (
        "files_read",
        "files_rejected",
        "format",
        "rows_in",
        "episodes_kept",
        "fragments",
        "pending_fragments",
        "rows_rejected",
        "episodes_duplicate",
        "samples_written",
        "samples_rule",
        "engine",
        "units",
        "units_reused",
        "wall_seconds",
        "rows_per_second",
        "rows_balance",
        "phases",
    )

    def summary(self) -> dict[str, Any]:
        """What the CLI's ``process`` prints: :data:`SUMMARY`'s keys of :meth:`to_dict`."""
        full = self.to_dict()
        return {k: full[k] for k in self.SUMMARY}


# ====================================================================== the commit
@dataclass(frozen=True)
class JobManifest:
    """A job's ``_manifest.json``, written last: its commit point.

    Readers read it with :class:`offline_prelearner.io.manifest.Manifest` (which also takes
    hand-written ones); this is the writing side, the one place a job spells its keys.

    Attributes:
        job_id: The committing job.
        job: The staging's job description (``version``, ``format``, ``prelearner``, ``engine``,
            ``inputs``, ``config``).
        files: The data files, under ``files_dir``.
        files_dir: The folder, inside the output, of the data files (``""``: the output).
        content: ``"samples"`` or ``"dataset"``.
        extra: More entries (``to``, ``layout``; ``quarantine``: refused rows' files, named
            under the output).
        committed_at: When (local time, ISO 8601).
    """

    job_id: str
    job: Mapping[str, Any]
    files: tuple[FileRecord, ...]
    files_dir: str
    content: str
    extra: Mapping[str, Any] = field(default_factory=dict)
    committed_at: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))

    @property
    def quarantine(self) -> list[FileRecord]:
        """The refused rows' files it commits (names under the output)."""
        return file_records(self.extra.get("quarantine") or [], "the manifest")

    def to_dict(self) -> dict[str, Any]:
        """The JSON object (``_manifest.json``); files without their staged stat."""
        extra = dict(self.extra)
        if "quarantine" in extra and extra["quarantine"] is not None:
            extra["quarantine"] = [f.to_dict(with_stat=False) for f in self.quarantine]
        out: dict[str, Any] = {
            "complete": True,
            "committed_at": self.committed_at,
            "job_id": self.job_id,
            **{k: self.job[k] for k in ("version", "format", "prelearner", "engine")},
            "inputs": self.job["inputs"],
            "files": [f.to_dict(with_stat=False) for f in self.files],
            "samples_written": sum(f.rows for f in self.files),
            "config": self.job["config"],
            **extra,
            "files_dir": self.files_dir,
        }
        out.setdefault("content", self.content)
        return out
