"""The per-file conversion job: rows, msgpack episodes and old-stack data to rows or episodes,
one unit of work per input file (what a resume reuses).

**Units** (what a resume reuses). Unit ``k`` is input file ``k`` and the episodes it *owns*: an
episode (key ``(eps_id, agent_id)``) belongs to the unit of the first file holding a fragment of it,
and its fragments in later files go to that unit too, until the episode is complete (every chain
of fragments that :func:`~offline_prelearner.episodes.stitch.stitch_fragments` joins ends done).
A unit is committed once every episode it owns is complete and every earlier unit is committed: its
files are written, then its record ``units/unit-<k>.json`` -- its inputs (its file and the later
files its episodes reached into, with sizes and mtimes), its files with checksums, its counts, and
the episodes that reached into later files with the last file they took fragments from. At the end
of the data the remaining units are committed, their open episodes written as fragments. A file's
read counts (records, steps in, steps the reader refused) belong to its unit; steps kept, and
steps refused when stitching or settling fragments, to the unit owning the episode. A fragment
of an episode that is already complete starts a new episode of its own file's unit (the stitcher
keeps such a fragment apart too; only its place in the output differs).

**Resume.** ``resume=True`` reuses the committed units of an interrupted or failed run of the same
job (same config and version, else refused with one line) as long as they run unbroken from the
first file, their inputs are unchanged and their files intact. Reading starts at the file after
them, with a fresh reader, dropping the fragments the reused units already took from later files
(their records say which); every later unit is redone, so the result has the same files with the
same bytes as an uninterrupted run. Old-stack data with ``t`` is read without state across files.
Data without ``t`` is not (the reader carries not-done episodes from file to file, to place and
check their continuation): there a resume falls back to the last reused unit at the end of whose
file the reader held nothing pending, and redoes the units after it, even if they were committed.
A unit committed at the end of the data with episodes still open is reused only if no file
follows it now (a new file could continue them).
Limit: a fragment that *begins* an episode, found in a later file than the steps that end it,
starts an episode of its own (the whole-data stitch of earlier versions joined it; old-stack
writers put an episode's fragments in name order, so this needs reordered files).

**Fragments.** An episode still not terminated or truncated after stitching (its end is not in
the data) is written as a not-done episode with ``fragments="keep"`` (the default; counted under
``fragments``) or refused with reason ``not_done`` under ``fragments="reject"`` -- never cut or
dropped silently.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..._version import __version__
from ...episodes.ledger import EpisodeBatch, Ledger
from ...episodes.stitch import settle_open_episodes, stitch_fragments
from ...errors import DataError, Where
from ...io.formats.rows.reader import RowsReader
from ...io.formats.sample_batches.reader import SampleBatchesReader
from ...io.quarantine import write_quarantine
from ...io.readers import make_reader
from ...io.sources import is_empty_parquet, read_table
from ..batch.index import index_output
from ..commit import LocalStaging, file_sha256, input_identity, write_parquet_atomic
from ..dataset_info import DatasetInfo, info_from_env_id, info_of_files
from ..ownership import output_storage
from .config import ConvertConfig
from .tables import episode_tables, rows_tables

__all__ = ["UNIT_FORMATS", "convert_by_file"]

#: Source formats converted file by file here (to rows / episodes).
UNIT_FORMATS = ("sample_batches", "rows", "episodes")

Progress = Callable[[int, int, str, int], None]  # (files done, files, file, steps so far)
_QUARANTINE = "quarantine"


def convert_by_file(
    path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    config: ConvertConfig,
    files: list[str],
    progress: Progress | None,
    overwrite: bool,
    resume: bool,
    start: float,
) -> dict[str, Any]:
    """Converts ``files`` (``config.read.format``: one of :data:`UNIT_FORMATS`) to rows or
    episodes, a unit per file, committed to ``out_dir``; returns the stats. Called by
    :func:`~.path.convert` once the format is known; ``start`` is when that job started.

    Args:
        path: The input as the user gave it (a file, folder or glob); only recorded in the
            stats (``"input"``), the files to read are ``files``.
        out_dir: The folder the result is committed to (staged beside it, manifest last).
        config: The job's settings; ``config.read.format`` must be resolved already (not
            ``"auto"``) and ``config.to`` is ``"rows"`` or ``"episodes"``.
        files: The input files in the order they are read, one unit each (Parquet files only
            for ``rows`` / ``episodes`` input); their paths, sizes and mtimes identify the job
            for a resume.
        progress: Called after each unit's file is read with (files done, files, file, steps
            read so far), and once up front with the reused units' counts; None: not called.
        overwrite: Replace a non-empty ``out_dir`` once this job has succeeded.
        resume: Reuse the units an interrupted or failed run of the same job committed (see
            the module docstring).
        start: ``time.perf_counter()`` when the job started (the stats' ``seconds`` and
            ``steps_per_s`` count from it).

    Returns:
        The job's stats (counts per the ledger, files written, units and units reused), also
        written to ``out_dir/stats.json`` by the commit.

    Raises:
        CommitError: ``out_dir`` is not empty (without ``overwrite``), another job is writing
            it, or ``resume`` finds nothing to resume or a job with another config.
        DataError: Bad data under ``read.on_invalid="raise"``, naming the file, episode and
            row (open episodes under ``fragments="reject"`` are counted, never raised).
    """
    env_id = config.env_id
    info = info_from_env_id(env_id) if env_id is not None else DatasetInfo()
    info = info.or_else(info_of_files(files))
    out = Path(out_dir)
    inputs = [input_identity(f) for f in files]
    job = _describe(config, inputs)
    # The data goes under OUT/<to>/, apart from stats.json and the manifest: a reader that
    # opens a folder (pandas, polars, Ray Data...) opens OUT/rows (or OUT/episodes) as it is.
    staging = LocalStaging(out, job, overwrite=overwrite, resume=resume, files_dir=config.to)
    # The job owns --out until it is committed or failed (ownership.OutLock).
    with staging, output_storage(out):
        fmt = config.read.format
        return _convert_units(config, staging, path, files, inputs, fmt, info, progress, start)


def _convert_units(
    job: ConvertConfig,
    staging: LocalStaging,
    path: str | os.PathLike[str],
    files: list[str],
    inputs: list[dict[str, Any]],
    fmt: str,
    info: DatasetInfo,
    progress: Progress | None,
    start: float,
) -> dict[str, Any]:
    """The units of a conversion to rows or episodes, under the lock: reuse, run, commit."""
    out, to, fragments = staging.out, job.to, job.fragments
    records = _reusable(staging.open(), files)
    _drop_unused(staging, records)
    reused = len(records)
    if progress is not None and reused:
        steps = sum(r["counts"]["rows_in"] for r in records)
        progress(reused, len(files), files[reused - 1], steps)
    records += _run_units(job, staging, inputs, records, progress, info)

    qfile = _merge_quarantine(staging, records)
    data = [f for r in records for f in r["files"]]
    tot = _sum_counts(r["counts"] for r in records)
    seconds = time.perf_counter() - start
    stats = {
        "input": os.fspath(path),
        "files_in": len(files),
        "files_unreadable": tot["files_unreadable"],
        "per_file": tot["per_file"],
        "format": fmt,
        "to": to,
        "out_dir": str(out),
        "files_written": [f"{staging.files_dir}/{f['name']}" for f in data],  # under OUT
        "records_read": tot["records_read"],
        "records_rejected": dict(sorted(tot["records_rejected"].items())),
        "rows_in": tot["rows_in"],
        "rows_out": tot["rows_kept"],
        "rows_rejected": dict(sorted(tot["rows_rejected"].items())),
        "rows_duplicate": tot["rows_duplicate"],
        "episodes_written": tot["episodes_written"],
        "episodes_terminated": tot["episodes_terminated"],
        "episodes_truncated": tot["episodes_truncated"],
        "fragments": tot["fragments"] if fragments == "keep" else 0,
        "fragments_rejected": tot["fragments"] if fragments == "reject" else 0,
        "episodes_rejected": dict(sorted(tot["episodes_rejected"].items())),
        "balanced": tot["rows_in"]
        == tot["rows_kept"] + sum(tot["rows_rejected"].values()) + tot["rows_duplicate"],
        "quarantine_file": None if qfile is None else str(out / qfile["name"]),
        "units": len(records),
        "units_reused": reused,
        "env_spec": info.env_id,
        **({"layout": job.layout} if to == "rows" else {}),
        "seconds": round(seconds, 4),
        "steps_per_s": round(tot["rows_kept"] / seconds, 1) if seconds > 0 else None,
    }
    extra: dict[str, Any] = {"to": to, "quarantine": [] if qfile is None else [qfile]}
    if to == "rows":  # the layout the rows were written in, as a rows -> rows convert records it
        extra["layout"] = job.layout
    staging.commit(stats, data, extra)
    # after the commit point, as process writes it: a later job over OUT plans from it
    index_output(
        staging.output_file(), [staging.output_file(*w.split("/")) for w in stats["files_written"]]
    )
    return stats


# ====================================================================== the job
def _describe(job: ConvertConfig, inputs: list[dict[str, Any]]) -> dict[str, Any]:
    """The staging's job description (its ``config`` is what a resume must match: the same keys
    as before the settings were a :class:`ConvertConfig`, so a staged run resumes)."""
    read = {f.name: getattr(job.read, f.name) for f in dataclasses.fields(job.read)}
    schema = read["schema"]
    if schema is not None and hasattr(schema, "to_dict"):
        read["schema"] = schema.to_dict()
    read["limits"] = dataclasses.asdict(job.read.limits)
    config = {
        "job": "convert",
        "to": job.to,
        "fragments": job.fragments,
        "dones": job.dones,
        "rows_per_file": job.rows_per_file,
        "episodes_per_file": job.episodes_per_file,
        **({"layout": job.layout} if job.layout != "rllib" else {}),
        **({"env_id": job.env_id} if job.env_id is not None else {}),
        "read": read,
    }
    return {
        "version": __version__,
        "format": job.read.format,
        "prelearner": None,
        "engine": "local",
        "config": json.loads(json.dumps(config, default=str)),  # as a resume reads it back
        "inputs": inputs,
    }


# ====================================================================== resume
_RECORD_KEYS = {"unit", "inputs", "to_end", "files", "counts", "reaches", "idle_after"}


def _reusable(kept: dict[int, dict[str, Any]], files: list[str]) -> list[dict[str, Any]]:
    """The records that still hold, as long as they run unbroken from the first file, cut back
    to the last one after whose file the reader held nothing pending (see the module docstring)."""
    out: list[dict[str, Any]] = []
    while len(out) in kept:
        rec = kept[len(out)]
        if not rec.keys() >= _RECORD_KEYS:
            break  # not a record of this job's layout
        paths = [f["path"] for f in rec["inputs"]]
        if not paths or paths != files[len(out) : len(out) + len(paths)]:
            break
        if rec["to_end"] and len(out) + len(paths) != len(files):
            break  # it wrote open episodes as fragments; a file added since may continue them
        out.append(rec)
    while out and not out[-1]["idle_after"]:
        out.pop()
    return out


def _drop_unused(staging: LocalStaging, kept: list[dict[str, Any]]) -> None:
    """Removes what the staging folder holds beyond the reused units (later units are redone)."""
    data = {f["name"] for r in kept for f in r["files"]}
    quarantined = {f["name"] for r in kept for f in r.get(_QUARANTINE, [])}
    for folder, names, found in (
        (staging.samples, data, [*staging.samples.glob("*.parquet")]),
        (staging.path, quarantined, [*(staging.path / _QUARANTINE).glob("*")]),
    ):
        for p in [*found, *folder.glob(".*.tmp-*")]:
            if p.relative_to(folder).as_posix() not in names:
                p.unlink()
    for p in staging.units.glob("unit-*.json"):
        if int(p.stem.split("-")[1]) >= len(kept):
            p.unlink()


# ====================================================================== units
Key = tuple[Any, Any]  # (episode id, agent id), as the stitcher groups fragments


def _key_text(key: Key) -> str:
    """A key as a unit record stores it (numpy scalars as the Python values they equal)."""
    return repr(tuple(k.item() if isinstance(k, np.generic) else k for k in key))


@dataclass
class _Unit:
    """Input file ``index`` and the episodes it owns, while it waits to be committed.

    ``batch`` holds the fragments of its episodes (from its file and later ones) and the
    rejections it answers for; ``read`` its file's read counts; ``reaches`` the episodes that took
    fragments from later files, with the last such file.
    """

    index: int
    batch: EpisodeBatch
    read: dict[str, Any]
    idle_after: bool
    frags: dict[Key, list[tuple[int, int, bool]]] = dataclasses.field(default_factory=dict)
    open: set[Key] = dataclasses.field(default_factory=set)
    reaches: dict[Key, int] = dataclasses.field(default_factory=dict)


class _Owners:
    """Hands each file's fragments to the units owning their episodes; releases units, in order,
    once every episode they own is complete.

    Args:
        taken: Fragments reused units took from later files: key text -> last such file.
    """

    def __init__(self, taken: dict[str, int]) -> None:
        self.owner: dict[Key, _Unit] = {}
        self.waiting: deque[_Unit] = deque()
        self.taken = taken

    def add(self, unit: _Unit, got: EpisodeBatch | None) -> list[_Unit]:
        """Adds file ``unit.index`` (``got``: what the reader made of it); returns the units
        that can be committed now."""
        f = unit.index
        self.waiting.append(unit)
        touched: dict[Key, _Unit] = {}
        if got is not None:
            unit.batch.rejections.extend(got.rejections)
            cols = got.columns
            takes: dict[int, tuple[_Unit, list[int]]] = {}  # owner unit -> its episodes here
            t0, t1, done = cols.t_started.tolist(), cols.t_end.tolist(), cols.done.tolist()
            spans = zip(t0, t1, done, strict=True)
            for i, (key, span) in enumerate(zip(got.episode_keys(), spans, strict=True)):
                if self.taken and self.taken.get(_key_text(key), -1) >= f:
                    continue  # a reused unit holds this fragment already
                u = touched[key] = self.owner.setdefault(key, unit)  # per key: who owns it
                takes.setdefault(id(u), (u, []))[1].append(i)
                u.frags.setdefault(key, []).append(span)
            for u, idx in takes.values():
                pick = np.asarray(idx, np.int64)
                u.batch.add(cols.select(pick), got.source_rows[pick])
        for key, u in touched.items():
            if u is not unit:
                u.reaches[key] = f
            if _ends_open(u.frags[key]):
                u.open.add(key)
            else:
                u.open.discard(key)
                del self.owner[key]
        ready = []
        while self.waiting and not self.waiting[0].open:
            ready.append(self.waiting.popleft())
        return ready

    def rest(self) -> list[_Unit]:
        """The data ended: every waiting unit, in order (open episodes are fragments now)."""
        ready = list(self.waiting)
        self.waiting.clear()
        return ready


def _ends_open(frags: list[tuple[int, int, bool]]) -> bool:
    """Chains fragments ``(t_started, t_end, done)`` as the stitcher does (by ``t_started``, then
    arrival; a fragment continues a chain whose last one is not done and ends where it starts);
    True if a chain ends not done."""
    ends: list[tuple[int, bool]] = []  # per chain: (t_end, done) of its last fragment
    for start, end, done in sorted(frags, key=lambda f: f[0]):  # stable: arrival order on ties
        for c, (last_end, last_done) in enumerate(ends):
            if not last_done and start == last_end:
                ends[c] = (end, done)
                break
        else:
            ends.append((end, done))
    return not all(done for _, done in ends)


def _run_units(
    job: ConvertConfig,
    staging: LocalStaging,
    inputs: list[dict[str, Any]],
    reused: list[dict[str, Any]],
    progress: Progress | None,
    info: DatasetInfo,
) -> list[dict[str, Any]]:
    """Reads the files after the reused units with one reader; commits units as they complete.

    ``info`` (env spec, spaces) goes into every file written; spaces a msgpack episodes reader
    finds in the records fill what ``info`` lacks."""
    first, n, read = len(reused), len(inputs), job.read
    taken = {k: int(v) for r in reused for k, v in r["reaches"].items() if int(v) >= first}
    owners = _Owners(taken)
    old_stack = read.format == "sample_batches"
    reader: Any = SampleBatchesReader(read, dones=job.dones) if old_stack else make_reader(read)
    records: list[dict[str, Any]] = []
    steps = sum(r["counts"]["rows_in"] for r in reused)
    for j in range(first, n):
        f = inputs[j]["path"]
        seen, refused = _records(reader)
        got: EpisodeBatch | None = None
        try:
            if old_stack:
                got = reader.read_file(f)
                if reader.records_read == seen and not is_empty_parquet(f):
                    raise OSError("the file holds no records")  # an empty partition holds none
            else:  # a Parquet file of rows or msgpack episode records (zero rows: no episodes)
                table = read_table(f, limits=read.limits)
                got = reader.read(table, source=f)
                seen -= table.num_rows
        except (OSError, DataError) as e:  # read_table: DataError(reason="unreadable_file")
            if isinstance(e, DataError) and (
                e.reason != "unreadable_file" or read.on_invalid == "raise"
            ):
                raise
            got = None
            if read.on_invalid == "raise":
                raise DataError(
                    f"cannot read the file: {e}", Where(file=f), reason="unreadable_file"
                ) from None
        led = got.ledger if got is not None else Ledger()
        if got is not None and info.observation_space is None:
            info = info.or_else(_reader_spaces(reader))
        now, refused_now = _records(reader)
        counts = {
            "records_read": now - seen,
            "records_rejected": dict(refused_now - refused),
            "rows_in": led.rows_in,
            "rows_duplicate": led.rows_duplicate,
            "rows_rejected": dict(led.rows_rejected),
            "episodes_rejected": dict(led.episodes_rejected),
            "files_unreadable": [] if got is not None else [f],
            "per_file": [_file_counts(f, job.read.format, led, got is None)],
        }
        unit = _Unit(j, EpisodeBatch(), counts, _reader_idle(reader))
        for done in owners.add(unit, got):
            records.append(_commit_unit(job, staging, done, inputs, info))
        steps += led.rows_in
        if progress is not None:
            progress(j + 1, n, f, steps)
    for done in owners.rest():
        records.append(_commit_unit(job, staging, done, inputs, info))
    return records


def _records(reader: Any) -> tuple[int, Counter[str]]:
    """Records read so far and refused by reason (old-stack lines; other readers count rows as
    they are read, in the file's own count, so 0 here)."""
    if isinstance(reader, SampleBatchesReader):
        return reader.records_read, Counter(reader.records_rejected)
    return 0, Counter()


def _reader_spaces(reader: Any) -> DatasetInfo:
    """The spaces a reader found in the data (msgpack episode records carry them)."""
    return DatasetInfo(
        observation_space=getattr(reader, "observation_space", None),
        action_space=getattr(reader, "action_space", None),
    )


def _file_counts(f: str, fmt: str, led: Ledger, unreadable: bool) -> dict[str, Any]:
    """One ``per_file`` entry: what the reader read, refused and dropped as duplicate in ``f``
    (episodes refused later, after stitching across files, count in the totals only)."""
    rejected = sum(led.rows_rejected.values())
    return {
        "file": f,
        "format": fmt,
        "rows_read": led.rows_in,
        "rows_kept": led.rows_in - rejected - led.rows_duplicate,
        "rows_rejected": rejected,
        "rows_duplicate": led.rows_duplicate,
        "error": "cannot read the file" if unreadable else None,
    }


def _reader_idle(reader: Any) -> bool:
    """The reader holds no episode awaiting its continuation (only rows data without ``t`` leaves
    any: a not-done episode, or the marker of a rejected one whose later steps it refuses;
    msgpack episode records carry their ``t_started`` and leave none)."""
    if isinstance(reader, SampleBatchesReader):
        return not any(rows.pending for rows in reader._rows.values())
    if isinstance(reader, RowsReader):
        return not reader.pending
    return True


def _commit_unit(
    job: ConvertConfig,
    staging: LocalStaging,
    unit: _Unit,
    inputs: list[dict[str, Any]],
    info: DatasetInfo,
) -> dict[str, Any]:
    """Stitches a unit's episodes, writes its files, then its record (the unit commit)."""
    batch = stitch_fragments(unit.batch, job.read.on_invalid)
    n_fragments = settle_open_episodes(batch, job.fragments, job.read.on_invalid)
    cols = batch.columns
    episodes = list(dataclasses.replace(cols, ids=[str(i) for i in cols.ids]).iter_episodes())
    tables = (
        rows_tables(episodes, job.rows_per_file, job.layout, info)
        if job.to == "rows"
        else episode_tables(episodes, job.episodes_per_file, info)
    )
    k = unit.index
    written: list[dict[str, Any]] = []  # data files, under files_dir (OUT/<to>/)
    quarantined: list[dict[str, Any]] = []  # under the output (OUT/quarantine/)
    try:
        for i, table in enumerate(tables):
            written.append(
                write_parquet_atomic(staging.samples, f"{job.to}-{k:05d}-{i:05d}.parquet", table)
            )
        if job.read.on_invalid == "quarantine":
            q = _write_unit_quarantine(staging.path, k, batch)
            if q is not None:
                quarantined.append(q)
    except BaseException:
        for f in written:
            (staging.samples / f["name"]).unlink(missing_ok=True)
        for f in quarantined:
            (staging.path / f["name"]).unlink(missing_ok=True)
        raise
    led = batch.ledger  # what stitching and settling refused; the reader's is in unit.read
    counts = _sum_counts(
        [
            unit.read,
            {
                "rows_kept": int(batch.source_rows.sum()),
                "rows_rejected": dict(led.rows_rejected),
                "episodes_rejected": dict(led.episodes_rejected),
                "episodes_written": len(cols),
                "episodes_terminated": int(cols.terminated.sum()),
                "episodes_truncated": int(cols.truncated.sum()),
                "fragments": n_fragments,
            },
        ]
    )
    # A unit committed with open episodes (at the end of the data) holds as long as no file
    # follows: a later file could continue them.
    last = len(inputs) - 1 if unit.open else max(unit.reaches.values(), default=k)
    record = {
        "unit": k,
        "inputs": inputs[k : last + 1],
        "to_end": bool(unit.open),
        "files": written,
        _QUARANTINE: quarantined,
        "counts": counts,
        "reaches": {_key_text(key): f for key, f in unit.reaches.items()},
        "idle_after": unit.idle_after,
    }
    staging.write_record(k, record)
    return record


_COUNTS = (
    "records_read",
    "rows_in",
    "rows_kept",
    "rows_duplicate",
    "episodes_written",
    "episodes_terminated",
    "episodes_truncated",
    "fragments",
)


def _sum_counts(counts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Counts added up: numbers summed, per-reason dicts summed by key, lists joined."""
    tot: dict[str, Any] = {k: 0 for k in _COUNTS}
    tot.update(
        records_rejected={},
        rows_rejected={},
        episodes_rejected={},
        files_unreadable=[],
        per_file=[],
    )
    for c in counts:
        for k, v in c.items():
            if isinstance(v, dict):
                for reason, n in v.items():
                    tot[k][reason] = tot[k].get(reason, 0) + n
            elif isinstance(v, list):
                tot[k] = tot[k] + v
            else:
                tot[k] += v
    return tot


# ====================================================================== writing
def _write_unit_quarantine(root: Path, unit: int, batch: EpisodeBatch) -> dict[str, Any] | None:
    folder = root / _QUARANTINE
    written = write_quarantine(batch.rejections, folder)
    if written is None:
        return None
    name = f"{_QUARANTINE}/{_QUARANTINE}-{unit:05d}.parquet"
    os.replace(written, root / name)
    return _entry(root, name, kind=_QUARANTINE)


def _merge_quarantine(
    staging: LocalStaging, records: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """The units' quarantine files as one ``quarantine/quarantine.parquet`` (unit order)."""
    parts = [staging.path / f["name"] for r in records for f in r.get(_QUARANTINE, [])]
    if not parts:
        return None
    name = f"{_QUARANTINE}/{_QUARANTINE}.parquet"
    if len(parts) == 1:
        os.replace(parts[0], staging.path / name)
    else:
        table = pa.concat_tables([pq.read_table(p) for p in parts], promote_options="permissive")
        write_parquet_atomic(staging.path, name, table)
        for p in parts:
            p.unlink()
    return _entry(staging.path, name, kind=_QUARANTINE)


def _entry(root: Path, name: str, **extra: Any) -> dict[str, Any]:
    path = root / name
    rows = pq.read_metadata(path).num_rows
    return {
        "name": name,
        "rows": rows,
        "bytes": path.stat().st_size,
        "sha256": file_sha256(path),
        **extra,
    }
