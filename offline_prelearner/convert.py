"""The conversion job: old-stack SampleBatch data -> new-stack rows Parquet or msgpack episodes.

:func:`convert_path` reads the files under a path in name order with the ``sample_batches``
reader (episodes cut across batches and files continue), joins the fragments of each episode
(:func:`~offline_prelearner.stitch.stitch_fragments`), decides what happens to episodes that never
end within the data, and writes the episodes, ``stats.json`` and ``_manifest.json``.

**A commit** (:mod:`.commit`). Everything is written into a hidden staging folder beside
``out_dir`` and moved into place when the job succeeds; the manifest, written last, lists every
output file (rows, bytes, sha256), the inputs (sizes, mtimes), the config and the version. A
non-empty ``out_dir`` is refused unless ``overwrite=True`` (the old output is replaced only on
success); a failed or interrupted job leaves ``out_dir`` as it was. Output (``out_dir``):

* ``to="rows"``: ``rows-<unit>-<k>.parquet`` in RLlib's recorder row layout plus ``t``
  (:func:`~offline_prelearner.writers.episodes_to_rows`), at most ``rows_per_file`` rows per file,
  never cutting an episode. Episodes whose columns differ (MultiAgentBatch policies with other
  observation shapes or extra columns) go to separate files.
* ``to="episodes"``: ``episodes-<unit>-<k>.parquet`` with one binary ``item`` column of msgpack
  ``SingleAgentEpisode`` states (RLlib's ``output_write_episodes=True`` layout).
* Episode ids are written as strings (``str(eps_id)``), as RLlib's new stack uses them.
* ``quarantine/quarantine.parquet`` under ``on_invalid="quarantine"``, if anything was refused.
* ``stats.json``: records read / rejected (by reason), rows (steps) in / out / rejected (by
  reason), episodes written, fragments kept or rejected, files written, units, seconds. Every
  step is accounted for: ``rows_in == rows_out + sum(rows_rejected) + rows_duplicate``
  (``balanced``). Counts are summed from the unit records, once per unit.

**Units** (what a resume reuses). A unit is a run of consecutive input files read by one fresh
reader; it ends after the first file at which nothing of it can continue: every episode it holds
(each chain of fragments :func:`stitch_fragments` would join) is done, and the reader holds no
pending episode (data without ``t``). A unit therefore never leaves state for the next one: a
later fragment with the id of an episode already done is a separate episode, as the stitcher
makes it within one unit. The last unit ends with the data; only it can hold episodes that never
end (``fragments``). Each unit writes its files and then its record (``units/unit-<u>.json``:
its inputs with sizes and mtimes, its files with checksums, its counts). With ``resume=True``,
the units of an interrupted run of the same job (same config and version, else refused with one
line) are reused as long as they form an unbroken run from the first file, their inputs are
unchanged and their files intact; reading starts at the first file they do not cover, and every
later unit is redone. Units are cut by the data alone, so a resumed run writes the same files
with the same bytes as an uninterrupted one.

Limits of the per-file units, by design: data in which an episode stays open across many files
(a fragment that never ends early in the data, old-stack data without ``eps_id``) makes one long
unit, which a resume redoes whole; and a fragment that *begins* an episode, found in a file after
the unit that holds its later, done steps was committed, stays a separate fragment (old-stack
writers put an episode's fragments in name order, so this needs reordered files).

**Fragments.** An episode still not terminated or truncated after stitching (its end is not in
the data) is written as a not-done episode with ``fragments="keep"`` (the default; counted under
``fragments``) or refused with reason ``not_done`` under ``fragments="reject"`` -- never cut or
dropped silently.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from .commit import STATS_FILE, Staging, file_sha256, write_json_atomic
from .config import ReadConfig
from .episode import Episode
from .errors import ConfigError, DataError, EpisodeValidationError, UnsupportedFormatError, Where
from .readers.episodes import episodes_to_table
from .readers.sample_batches import DonesRule, SampleBatchesReader
from .report import EpisodeBatch, check_on_invalid, write_quarantine
from .sources import detect_format, expand_paths
from .stitch import stitch_fragments
from .writers import episodes_to_rows

__all__ = ["STATS_FILE", "convert_path"]

Target = Literal["rows", "episodes"]
Progress = Callable[[int, int, str, int], None]  # (files done, files, file, steps so far)
_QUARANTINE = "quarantine"


def convert_path(
    path: str | os.PathLike[str],
    to: Target,
    out_dir: str | os.PathLike[str],
    read_config: ReadConfig | None = None,
    on_invalid: str | None = None,
    progress: Progress | None = None,
    *,
    fragments: Literal["keep", "reject"] = "keep",
    dones: DonesRule = "auto",
    rows_per_file: int = 100_000,
    episodes_per_file: int = 1_000,
    overwrite: bool = False,
    resume: bool = False,
) -> dict[str, Any]:
    """Converts old-stack data under ``path``; commits it to ``out_dir`` and returns the stats.

    Args:
        path: A file, a directory (recursive, name order) or a glob of old-stack JSON lines (or
            Parquet with one SampleBatch per row).
        to: ``"rows"`` or ``"episodes"`` (see the module docstring).
        out_dir: Must be absent or empty unless ``overwrite``; the job's output appears there
            whole, or not at all.
        read_config: Reader options (``legacy_pickle``, ``schema``, ``limits``...). Its
            ``format`` must be ``"sample_batches"`` or ``"auto"``.
        on_invalid: Overrides ``read_config.on_invalid``; with ``"quarantine"`` refused data goes
            to ``out_dir/quarantine/quarantine.parquet``.
        progress: Called after each file with (files done, files, file, steps read so far).
        fragments: What to do with episodes that never end within the data.
        dones: How a legacy ``dones`` column is read (see :mod:`.readers.sample_batches`).
        overwrite: Replace a non-empty ``out_dir`` once this job has succeeded.
        resume: Reuse the units an interrupted or failed run of the same job committed (see the
            module docstring); refused with one line if that run had another config.

    Raises:
        CommitError: ``out_dir`` is not empty (without ``overwrite``), or ``resume`` finds
            nothing to resume or a job with another config.
    """
    start = time.perf_counter()
    job = _Job.check(to, fragments, dones, rows_per_file, episodes_per_file)
    read = read_config or ReadConfig(format="sample_batches")
    if on_invalid is not None:
        read = replace(read, on_invalid=check_on_invalid(on_invalid))
    files = expand_paths(os.fspath(path))
    fmt = read.format if read.format != "auto" else detect_format(files)
    if fmt not in ("sample_batches", "auto"):
        raise UnsupportedFormatError(
            f"convert reads old-stack SampleBatch data; {files[0]!r} looks like {fmt!r} data "
            "(pass format 'sample_batches' to force it)"
        )
    job = replace(job, read=replace(read, format="sample_batches"))
    out = Path(out_dir)
    inputs = [_stat(f) for f in files]
    staging = Staging(out, job.describe(inputs), overwrite=overwrite, resume=resume, files_dir="")
    records = _reusable(staging.open(), files)
    _drop_unused(staging, records)
    reused = len(records)
    first = sum(len(r["inputs"]) for r in records)
    steps = sum(r["counts"]["rows_in"] for r in records)
    if progress is not None and first:
        progress(first, len(files), files[first - 1], steps)
    for rec in _run_units(job, staging, inputs, first, reused, steps, progress):
        records.append(rec)

    qfile = _merge_quarantine(staging, records)
    data = [f for r in records for f in r["files"] if f.get("kind") != _QUARANTINE]
    tot = _sum_counts(r["counts"] for r in records)
    seconds = time.perf_counter() - start
    stats = {
        "input": os.fspath(path),
        "files_in": len(files),
        "files_unreadable": tot["files_unreadable"],
        "to": to,
        "out_dir": str(out),
        "files_written": [f["name"] for f in data],
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
        "seconds": round(seconds, 4),
        "steps_per_s": round(tot["rows_kept"] / seconds, 1) if seconds > 0 else None,
    }
    staging.commit(stats, data, {"to": to, "quarantine": [] if qfile is None else [qfile]})
    return stats


# ====================================================================== the job
@dataclass(frozen=True)
class _Job:
    """The settled arguments of one conversion: what a unit needs, and what a resume compares."""

    to: Target
    fragments: Literal["keep", "reject"]
    dones: DonesRule
    rows_per_file: int
    episodes_per_file: int
    read: ReadConfig = dataclasses.field(default_factory=ReadConfig)

    @classmethod
    def check(
        cls, to: Any, fragments: Any, dones: Any, rows_per_file: Any, episodes_per_file: Any
    ) -> _Job:
        if to not in ("rows", "episodes"):
            raise ConfigError(f"to must be 'rows' or 'episodes', found {to!r}")
        if fragments not in ("keep", "reject"):
            raise ConfigError(f"fragments must be 'keep' or 'reject', found {fragments!r}")
        if dones not in ("auto", "terminated", "truncated"):
            raise ConfigError(f"dones must be 'auto', 'terminated' or 'truncated', found {dones!r}")
        for name, value in (
            ("rows_per_file", rows_per_file),
            ("episodes_per_file", episodes_per_file),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, found {value!r}")
        return cls(to, fragments, dones, rows_per_file, episodes_per_file)

    def describe(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """The staging's job description (its ``config`` is what a resume must match)."""
        from . import __version__

        read = {f.name: getattr(self.read, f.name) for f in dataclasses.fields(self.read)}
        schema = read["schema"]
        if schema is not None and hasattr(schema, "to_dict"):
            read["schema"] = schema.to_dict()
        read["limits"] = dataclasses.asdict(self.read.limits)
        config = {
            "job": "convert",
            "to": self.to,
            "fragments": self.fragments,
            "dones": self.dones,
            "rows_per_file": self.rows_per_file,
            "episodes_per_file": self.episodes_per_file,
            "read": read,
        }
        return {
            "version": __version__,
            "format": "sample_batches",
            "prelearner": None,
            "engine": "local",
            "config": json.loads(json.dumps(config, default=str)),  # as a resume reads it back
            "inputs": inputs,
        }


def _stat(path: str) -> dict[str, Any]:
    st = os.stat(path)
    return {"path": path, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


# ====================================================================== resume
def _reusable(kept: dict[int, dict[str, Any]], files: list[str]) -> list[dict[str, Any]]:
    """The records that still hold, as long as they cover the first files without a gap."""
    out: list[dict[str, Any]] = []
    at = 0
    while len(out) in kept:
        rec = kept[len(out)]
        paths = [f["path"] for f in rec["inputs"]]
        if not paths or paths != files[at : at + len(paths)]:
            break
        out.append(rec)
        at += len(paths)
    return out


def _drop_unused(staging: Staging, kept: list[dict[str, Any]]) -> None:
    """Removes what the staging folder holds beyond the reused units (later units are redone)."""
    root = staging.path
    names = {f["name"] for r in kept for f in r["files"]}
    found = [*root.glob("*.parquet"), *root.glob(".*.tmp-*"), *(root / _QUARANTINE).glob("*")]
    for p in found:
        if p.relative_to(root).as_posix() not in names:
            p.unlink()
    for p in staging.units.glob("unit-*.json"):
        if int(p.stem.split("-")[1]) >= len(kept):
            p.unlink()


# ====================================================================== units
def _run_units(
    job: _Job,
    staging: Staging,
    inputs: list[dict[str, Any]],
    j: int,
    unit: int,
    steps: int,
    progress: Progress | None,
) -> Iterator[dict[str, Any]]:
    """Reads files from ``j`` on, one unit after another; yields each unit's committed record."""
    read = job.read
    n = len(inputs)
    while j < n:
        reader = SampleBatchesReader(read, dones=job.dones)  # fresh: a unit carries no state
        batch = EpisodeBatch(on_invalid=read.on_invalid)
        chains = _OpenChains()
        unreadable: list[str] = []
        begin = j
        while True:
            f = inputs[j]["path"]
            try:
                got = reader.read_file(f)
            except OSError as e:
                if read.on_invalid == "raise":
                    raise DataError(
                        f"cannot read the file: {e}", Where(file=f), reason="unreadable_file"
                    ) from None
                unreadable.append(f)
            else:
                chains.add(got.episodes)
                batch.extend(got)
            j += 1
            if progress is not None:
                progress(j, n, f, steps + batch.ledger.rows_in)
            if j == n or (not chains.open and _reader_idle(reader)):
                break
        rec = _commit_unit(job, staging, unit, inputs[begin:j], batch, reader, unreadable)
        steps += batch.ledger.rows_in
        unit += 1
        yield rec


def _reader_idle(reader: SampleBatchesReader) -> bool:
    """The reader holds no episode awaiting its continuation (only data without ``t`` leaves
    any: a not-done episode, or the marker of a rejected one whose later steps it refuses)."""
    return not any(rows.pending for rows in reader._rows.values())


class _OpenChains:
    """Which episodes of a unit could still continue in a later file.

    Per ``(id, agent_id)``, the fragments seen so far are chained as
    :func:`~offline_prelearner.stitch.stitch_fragments` chains them (by ``t_started``, a fragment
    continuing a chain whose last fragment is not done and ends where it starts); the key is open
    while one of its chains ends not done. Only the keys a new file touches are re-chained.
    """

    def __init__(self) -> None:
        self._frags: dict[tuple[Any, Any], list[tuple[int, int, bool]]] = {}
        self.open: set[tuple[Any, Any]] = set()

    def add(self, episodes: Iterable[Episode]) -> None:
        touched = set()
        for ep in episodes:
            key = (ep.id, ep.agent_id)
            self._frags.setdefault(key, []).append((ep.t_started, ep.t_end, ep.is_done))
            touched.add(key)
        for key in touched:
            if _ends_open(self._frags[key]):
                self.open.add(key)
            else:
                self.open.discard(key)


def _ends_open(frags: list[tuple[int, int, bool]]) -> bool:
    """Chains fragments (start, end, done) as the stitcher does; True if one ends not done."""
    ends: list[tuple[int, bool]] = []  # per chain: (end, done) of its last fragment
    for start, end, done in sorted(frags, key=lambda f: f[0]):  # stable: arrival order on ties
        for c, (last_end, last_done) in enumerate(ends):
            if not last_done and start == last_end:
                ends[c] = (end, done)
                break
        else:
            ends.append((end, done))
    return not all(done for _, done in ends)


def _commit_unit(
    job: _Job,
    staging: Staging,
    unit: int,
    inputs: list[dict[str, Any]],
    batch: EpisodeBatch,
    reader: SampleBatchesReader,
    unreadable: list[str],
) -> dict[str, Any]:
    """Stitches a unit's episodes, writes its files, then its record (the unit commit)."""
    batch = stitch_fragments(batch)
    n_fragments = _settle_fragments(batch, job.fragments, job.read.on_invalid)
    for ep in batch.episodes:
        ep.id = str(ep.id)
    tables = (
        _rows_tables(batch.episodes, job.rows_per_file)
        if job.to == "rows"
        else _episode_tables(batch.episodes, job.episodes_per_file)
    )
    written: list[dict[str, Any]] = []
    try:
        for k, table in enumerate(tables):
            written.append(_write_file(staging.path, f"{job.to}-{unit:05d}-{k:05d}.parquet", table))
        if job.read.on_invalid == "quarantine":
            q = _write_unit_quarantine(staging.path, unit, batch)
            if q is not None:
                written.append(q)
    except BaseException:
        for f in written:
            (staging.path / f["name"]).unlink(missing_ok=True)
        raise
    led = batch.ledger
    counts = {
        "records_read": reader.records_read,
        "records_rejected": dict(sorted(reader.records_rejected.items())),
        "rows_in": led.rows_in,
        "rows_kept": led.rows_kept,
        "rows_duplicate": led.rows_duplicate,
        "rows_rejected": dict(sorted(led.rows_rejected.items())),
        "episodes_rejected": dict(sorted(led.episodes_rejected.items())),
        "episodes_written": len(batch.episodes),
        "episodes_terminated": sum(e.terminated for e in batch.episodes),
        "episodes_truncated": sum(e.truncated for e in batch.episodes),
        "fragments": n_fragments,
        "files_unreadable": unreadable,
    }
    record = {"unit": unit, "inputs": inputs, "files": written, "counts": counts}
    write_json_atomic(staging.record_path(unit), record)
    return record


def _sum_counts(counts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The units' counts added up: numbers summed, per-reason dicts summed by key, lists joined."""
    tot: dict[str, Any] = {}
    for c in counts:
        for k, v in c.items():
            if isinstance(v, dict):
                d = tot.setdefault(k, {})
                for reason, n in v.items():
                    d[reason] = d.get(reason, 0) + n
            elif isinstance(v, list):
                tot.setdefault(k, []).extend(v)
            else:
                tot[k] = tot.get(k, 0) + v
    for k in ("records_rejected", "rows_rejected", "episodes_rejected"):
        tot.setdefault(k, {})
    tot.setdefault("files_unreadable", [])
    for k in (
        "records_read",
        "rows_in",
        "rows_kept",
        "rows_duplicate",
        "episodes_written",
        "episodes_terminated",
        "episodes_truncated",
        "fragments",
    ):
        tot.setdefault(k, 0)
    return tot


def _settle_fragments(batch: EpisodeBatch, policy: str, on_invalid: str) -> int:
    """Counts not-done episodes; under ``"reject"`` refuses them (reason ``not_done``)."""
    open_ = [not e.is_done for e in batch.episodes]
    n = sum(open_)
    if policy == "reject" and n:
        dropped, rows = batch.keep_only([not o for o in open_])
        for ep, r in zip(dropped, rows, strict=True):
            err = EpisodeValidationError(
                f"episode never ends within the data (last step t={ep.t_end - 1}); "
                "fragments='keep' writes it as a not-done episode",
                Where(episode_id=ep.id, timestep=ep.t_end),
                reason="not_done",
            )
            payload = episodes_to_rows([ep]) if on_invalid == "quarantine" else None
            batch.reject(err, r, payload, policy="quarantine" if payload is not None else "skip")
    return n


# ====================================================================== writing
def _signature(ep: Episode) -> tuple[Any, ...]:
    return (ep.observations.shape[1:], ep.actions.shape[1:], tuple(sorted(ep.extras)))


def _rows_tables(episodes: list[Episode], rows_per_file: int) -> Iterator[pa.Table]:
    """Rows tables, episodes of one layout per table, at most ``rows_per_file`` rows (or one ep)."""
    groups: dict[tuple[Any, ...], list[Episode]] = {}
    for ep in episodes:
        groups.setdefault(_signature(ep), []).append(ep)
    for eps in groups.values():
        chunk: list[Episode] = []
        rows = 0
        for nxt in [*eps, None]:
            if chunk and (nxt is None or rows + len(nxt) > rows_per_file):
                yield episodes_to_rows(chunk, with_t=True)
                chunk, rows = [], 0
            if nxt is not None:
                chunk.append(nxt)
                rows += len(nxt)


def _episode_tables(episodes: list[Episode], per_file: int) -> Iterator[pa.Table]:
    for s in range(0, len(episodes), per_file):
        yield episodes_to_table(episodes[s : s + per_file])


def _write_file(root: Path, name: str, table: pa.Table) -> dict[str, Any]:
    """Writes ``table`` as Parquet at ``root/name`` (temporary name, fsync, rename); returns its
    manifest entry. The bytes are hashed in memory, not read back."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    data = sink.getvalue()
    path = root / name
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


def _write_unit_quarantine(root: Path, unit: int, batch: EpisodeBatch) -> dict[str, Any] | None:
    folder = root / _QUARANTINE
    written = write_quarantine(batch.rejections, folder)
    if written is None:
        return None
    name = f"{_QUARANTINE}/{_QUARANTINE}-{unit:05d}.parquet"
    os.replace(written, root / name)
    return _entry(root, name, kind=_QUARANTINE)


def _merge_quarantine(staging: Staging, records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The units' quarantine files as one ``quarantine/quarantine.parquet`` (unit order)."""
    parts = [
        staging.path / f["name"]
        for r in records
        for f in r["files"]
        if f.get("kind") == _QUARANTINE
    ]
    if not parts:
        return None
    name = f"{_QUARANTINE}/{_QUARANTINE}.parquet"
    if len(parts) == 1:
        os.replace(parts[0], staging.path / name)
    else:
        table = pa.concat_tables([pq.read_table(p) for p in parts], promote_options="permissive")
        _write_file(staging.path, name, table)
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
