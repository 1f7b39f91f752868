"""The conversion job: every format read -> every format written, through the episode model.

One dispatch on (source format, target) in :func:`convert_path`:

=========================  ==========================  ==========================================
source                     ``to="rows"``/``"episodes"``  ``to="minari"``
=========================  ==========================  ==========================================
``rows`` (RLlib rows)      rows: layout change          :mod:`.convert_dataset` (one unit)
                           (:mod:`.relayout`);
                           episodes: units (below)
``episodes`` (msgpack)     units (below)                :mod:`.convert_dataset`
``sample_batches``         units (below)                :mod:`.convert_dataset`
(old stack)
``minari``, ``d4rl``       :mod:`.convert_dataset`      :mod:`.convert_dataset`
=========================  ==========================  ==========================================

Rows input with ``to="rows"`` is a layout change, file by file, done by
:func:`~offline_prelearner.jobs.relayout.relayout_rows`: the same rows with their tensor columns
in ``layout`` (``"fast"`` to read them 10-100x faster). Minari and D4RL inputs, and Minari
output, are whole datasets (:mod:`.convert_dataset`). Everything else runs here.

**What round-trips.** ``a -> b -> a`` gives the same episodes (ids compared as strings; lengths,
observations, actions, rewards, flags, ``t_started``, extras exactly) for rows, episodes and
Minari, except where a format has no place for a value: Minari keeps no agent / module ids and
no infos, and has no "not done" (a fragment comes back truncated); its ids, ``t_started`` and
extras ride in parts of the episode group Minari ignores (:mod:`..io.datasets.minari_write`).
Infos (none in the data the tests use): msgpack records keep them; rows keep the step infos as
JSON text, not the reset info (``infos[0]``), which reads back as ``{}``. Old-stack and D4RL data
are input only (nothing writes them).

:func:`convert_path` reads the files under a path in name order with the source format's reader
(old-stack: episodes cut across batches and files continue), joins the fragments of each episode
(:func:`~offline_prelearner.episodes.stitch.stitch_fragments`), decides what happens to episodes
that never end within the data, and writes the episodes, ``stats.json`` and ``_manifest.json``.

**A commit** (:mod:`.commit`). Everything is written into a hidden staging folder beside
``out_dir`` and moved into place when the job succeeds; the manifest, written last, lists every
output file (rows, bytes, sha256), the inputs (sizes, mtimes), the config and the version. A
non-empty ``out_dir`` is refused unless ``overwrite=True`` (the old output is replaced only on
success); a failed or interrupted job leaves ``out_dir`` as it was. Output (``out_dir``):

* ``to="rows"``: ``rows-<unit>-<k>.parquet`` in RLlib's recorder row layout plus ``t``
  (:func:`~offline_prelearner.io.writers.episodes_to_rows`; tensor columns in ``layout``, RLlib's
  by default so that RLlib reads the result), at most ``rows_per_file`` rows per
  file, never cutting an episode. Episodes whose columns differ (MultiAgentBatch policies with other
  observation shapes or extra columns) go to separate files.
* ``to="episodes"``: ``episodes-<unit>-<k>.parquet`` with one binary ``item`` column of msgpack
  ``SingleAgentEpisode`` states (RLlib's ``output_write_episodes=True`` layout).
* Episode ids are written as strings (``str(eps_id)``), as RLlib's new stack uses them.
* Each file's schema metadata carries the source's env spec and spaces, or ``env_id``'s
  (:mod:`.dataset_info`), for a later ``convert --to minari``; msgpack records carry the spaces.
* ``quarantine/quarantine.parquet`` under ``on_invalid="quarantine"``, if anything was refused.
* ``stats.json``: records read / rejected (by reason), rows (steps) in / out / rejected (by
  reason), episodes written, fragments kept or rejected, files written, units, seconds. Every
  step is accounted for: ``rows_in == rows_out + sum(rows_rejected) + rows_duplicate``
  (``balanced``). Counts are summed from the unit records, once per unit.

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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .._version import __version__
from ..config import ReadConfig, check_on_invalid
from ..episodes.ledger import EpisodeBatch, Ledger
from ..episodes.stitch import settle_open_episodes, stitch_fragments
from ..errors import ConfigError, DataError, UnsupportedFormatError, Where
from ..io.fast_tensor import Layout, check_layout
from ..io.quarantine import write_quarantine
from ..io.readers import make_reader
from ..io.readers.rows import RowsReader
from ..io.readers.sample_batches import DonesRule, SampleBatchesReader
from ..io.sources import (
    check_one_format,
    detect_format,
    expand_paths,
    is_empty_parquet,
    read_table,
)
from .commit import (
    STATS_FILE,
    Staging,
    check_out_apart,
    file_sha256,
    input_identity,
    output_storage,
    write_parquet_atomic,
)
from .convert_tables import episode_tables, rows_tables
from .dataset_info import DatasetInfo, info_from_env_id, info_of_files

__all__ = ["STATS_FILE", "UNIT_FORMATS", "convert_path"]

#: Source formats converted file by file here (to rows / episodes).
UNIT_FORMATS = ("sample_batches", "rows", "episodes")

Target = Literal["rows", "episodes", "minari"]
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
    dataset_id: str | None = None,
    layout: Layout = "rllib",
    env_id: str | None = None,
) -> dict[str, Any]:
    """Converts the data under ``path`` to ``to``; commits it to ``out_dir`` and returns the stats.

    Args:
        path: A file, a directory (recursive, name order) or a glob of data files: rows or
            msgpack episodes Parquet, old-stack JSON lines (or Parquet with one SampleBatch per
            row), a Minari dataset (folder or id) or a D4RL HDF5 file.
        to: ``"rows"``, ``"episodes"`` or ``"minari"`` (see the module docstring).
        out_dir: Must be absent or empty unless ``overwrite``; the job's output appears there
            whole, or not at all.
        read_config: Reader options (``legacy_pickle``, ``schema``, ``limits``...). Its
            ``format`` is ``"auto"`` by default (detected from the files).
        on_invalid: Overrides ``read_config.on_invalid``; with ``"quarantine"`` refused data goes
            to ``out_dir/quarantine/quarantine.parquet``.
        progress: Called after each file with (files done, files, file, steps read so far).
        fragments: What to do with episodes that never end within the data.
        dones: How a legacy ``dones`` column is read (see
            :mod:`~offline_prelearner.io.readers.sample_batches`).
        overwrite: Replace a non-empty ``out_dir`` once this job has succeeded.
        resume: Reuse the units an interrupted or failed run of the same job committed (see the
            module docstring); refused with one line if that run had another config.
        dataset_id: ``to="minari"``: the Minari id written (see
            :func:`~offline_prelearner.jobs.convert_dataset.convert_dataset`).
        layout: How ``to="rows"`` writes per-step arrays: ``"rllib"`` (Ray's tensor extension,
            which RLlib reads) or ``"fast"`` (:mod:`~offline_prelearner.io.fast_tensor`).
        env_id: A gymnasium env id whose registered spec is written with the data (Minari's
            ``env_spec``; rows / episodes file metadata); without it, the source's, if any.

    A Minari dataset or D4RL file as input, or ``to="minari"``, is converted by
    :func:`~offline_prelearner.jobs.convert_dataset.convert_dataset`.

    Raises:
        CommitError: ``out_dir`` is not empty (without ``overwrite``), is or lies inside an
            input folder, another job is writing it, or ``resume`` finds nothing to resume or a
            job with another config.
        OSError: A write failed for want of room (ENOSPC, EDQUOT, EFBIG), naming ``out_dir``.
    """
    check_out_apart(out_dir, os.fspath(path))  # before anything is read
    start = time.perf_counter()
    from .convert_dataset import convert_dataset, wants_dataset_job

    if wants_dataset_job(path, to, read_config):  # Minari / D4RL in, or Minari out
        return convert_dataset(
            path, to, out_dir, read_config, on_invalid, progress, fragments=fragments,
            rows_per_file=rows_per_file, episodes_per_file=episodes_per_file,
            dataset_id=dataset_id, overwrite=overwrite, resume=resume, env_id=env_id,
            layout=layout, dones=dones,
        )  # fmt: skip
    job = _Job.check(to, fragments, dones, rows_per_file, episodes_per_file, layout, env_id)
    read = read_config or ReadConfig(format="auto")
    if on_invalid is not None:
        read = replace(read, on_invalid=check_on_invalid(on_invalid))
    files = expand_paths(os.fspath(path))
    check_one_format(files)
    fmt = read.format if read.format != "auto" else detect_format(files)
    if fmt == "rows" and to == "rows":
        if env_id is not None:
            raise ConfigError(
                "env_id: rows -> rows rewrites the tensor layout of the same files and adds "
                "nothing; give env_id when converting to minari or episodes"
            )
        from .relayout import relayout_rows

        def rows_progress(i: int, n: int, name: str, rows: int) -> None:
            if progress is not None:
                progress(i, n, name, rows)

        parquet = [f for f in files if f.endswith(".parquet")]  # not a job's stats.json
        return relayout_rows(
            parquet, out_dir, job.layout, rows_progress, overwrite=overwrite, resume=resume
        )
    if fmt == "auto":
        fmt = "sample_batches"
    if fmt not in UNIT_FORMATS:
        raise UnsupportedFormatError(
            f"convert reads {', '.join(UNIT_FORMATS)}, minari and d4rl data; {files[0]!r} is "
            f"{fmt!r} data"
        )
    if fmt != "sample_batches":
        files = [f for f in files if f.endswith(".parquet")]  # not a job's stats.json
    job = replace(job, read=replace(read, format=fmt))
    info = info_from_env_id(env_id) if env_id is not None else DatasetInfo()
    info = info.or_else(info_of_files(files))
    out = Path(out_dir)
    inputs = [input_identity(f) for f in files]
    staging = Staging(out, job.describe(inputs), overwrite=overwrite, resume=resume, files_dir="")
    # The job owns --out until it is committed or failed (commit.OutLock).
    with staging, output_storage(out):
        return _convert_units(job, staging, path, files, inputs, fmt, info, progress, start)


def _convert_units(
    job: _Job,
    staging: Staging,
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
    data = [f for r in records for f in r["files"] if f.get("kind") != _QUARANTINE]
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
        "env_spec": info.env_id,
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
    layout: Layout = "rllib"
    env_id: str | None = None
    read: ReadConfig = dataclasses.field(default_factory=ReadConfig)

    @classmethod
    def check(
        cls,
        to: Any,
        fragments: Any,
        dones: Any,
        rows_per_file: Any,
        episodes_per_file: Any,
        layout: Any = "rllib",
        env_id: Any = None,
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
        try:
            layout = check_layout(layout)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if env_id is not None and not isinstance(env_id, str):
            raise ConfigError(f"env_id must be a gymnasium env id, found {env_id!r}")
        return cls(to, fragments, dones, rows_per_file, episodes_per_file, layout, env_id)

    def describe(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """The staging's job description (its ``config`` is what a resume must match)."""
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
            **({"layout": self.layout} if self.layout != "rllib" else {}),
            **({"env_id": self.env_id} if self.env_id is not None else {}),
            "read": read,
        }
        return {
            "version": __version__,
            "format": self.read.format,
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
            for ep, rows in zip(got.episodes, got.source_rows, strict=True):
                key = (ep.id, ep.agent_id)
                if self.taken and self.taken.get(_key_text(key), -1) >= f:
                    continue  # a reused unit holds this fragment already
                u = touched[key] = self.owner.setdefault(key, unit)
                u.batch.add(ep, rows)
                u.frags.setdefault(key, []).append((ep.t_started, ep.t_end, ep.is_done))
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
    job: _Job,
    staging: Staging,
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
        except OSError as e:
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
    job: _Job, staging: Staging, unit: _Unit, inputs: list[dict[str, Any]], info: DatasetInfo
) -> dict[str, Any]:
    """Stitches a unit's episodes, writes its files, then its record (the unit commit)."""
    batch = stitch_fragments(unit.batch, job.read.on_invalid)
    n_fragments = settle_open_episodes(batch, job.fragments, job.read.on_invalid)
    for ep in batch.episodes:
        ep.id = str(ep.id)
    tables = (
        rows_tables(batch.episodes, job.rows_per_file, job.layout, info)
        if job.to == "rows"
        else episode_tables(batch.episodes, job.episodes_per_file, info)
    )
    k = unit.index
    written: list[dict[str, Any]] = []
    try:
        for i, table in enumerate(tables):
            written.append(
                write_parquet_atomic(staging.path, f"{job.to}-{k:05d}-{i:05d}.parquet", table)
            )
        if job.read.on_invalid == "quarantine":
            q = _write_unit_quarantine(staging.path, k, batch)
            if q is not None:
                written.append(q)
    except BaseException:
        for f in written:
            (staging.path / f["name"]).unlink(missing_ok=True)
        raise
    led = batch.ledger  # what stitching and settling refused; the reader's is in unit.read
    counts = _sum_counts(
        [
            unit.read,
            {
                "rows_kept": sum(batch.source_rows),
                "rows_rejected": dict(led.rows_rejected),
                "episodes_rejected": dict(led.episodes_rejected),
                "episodes_written": len(batch.episodes),
                "episodes_terminated": sum(e.terminated for e in batch.episodes),
                "episodes_truncated": sum(e.truncated for e in batch.episodes),
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
