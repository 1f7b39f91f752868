"""The conversion job: old-stack SampleBatch data -> new-stack rows Parquet or msgpack episodes.

:func:`convert_path` reads every file under a path in name order with the ``sample_batches``
reader (one reader for the whole job, so episodes cut across batches and files continue), joins
the fragments of each episode (:func:`~offline_prelearner.stitch.stitch_fragments`), decides what
happens to episodes that never end within the data, writes the episodes and a ``stats.json``.

Output (``out_dir``):

* ``to="rows"``: ``rows-00000.parquet``, ... in RLlib's recorder row layout plus ``t``
  (:func:`~offline_prelearner.writers.episodes_to_rows`), at most ``rows_per_file`` rows per file,
  never cutting an episode. Episodes whose columns differ (MultiAgentBatch policies with other
  observation shapes or extra columns) go to separate files.
* ``to="episodes"``: ``episodes-00000.parquet``, ... with one binary ``item`` column of msgpack
  ``SingleAgentEpisode`` states (RLlib's ``output_write_episodes=True`` layout).
* Episode ids are written as strings (``str(eps_id)``), as RLlib's new stack uses them.
* ``stats.json``: records read / rejected (by reason), rows (steps) in / out / rejected (by
  reason), episodes written, fragments kept or rejected, files written, seconds. Every step is
  accounted for: ``rows_in == rows_out + sum(rows_rejected)`` (``balanced``).

**Fragments.** An episode still not terminated or truncated after stitching (its end is not in
the data) is written as a not-done episode with ``fragments="keep"`` (the default; counted under
``fragments``) or refused with reason ``not_done`` under ``fragments="reject"`` -- never cut or
dropped silently.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import pyarrow.parquet as pq

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

STATS_FILE = "stats.json"
Target = Literal["rows", "episodes"]
Progress = Callable[[int, int, str, int], None]  # (files done, files, file, steps so far)


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
) -> dict[str, Any]:
    """Converts old-stack data under ``path``; writes to ``out_dir`` and returns the stats.

    Args:
        path: A file, a directory (recursive, name order) or a glob of old-stack JSON lines (or
            Parquet with one SampleBatch per row).
        to: ``"rows"`` or ``"episodes"`` (see the module docstring).
        out_dir: Created if needed; existing ``rows-*``/``episodes-*`` files are an error.
        read_config: Reader options (``legacy_pickle``, ``schema``, ``limits``...). Its
            ``format`` must be ``"sample_batches"`` or ``"auto"``.
        on_invalid: Overrides ``read_config.on_invalid``; with ``"quarantine"`` refused data goes
            to ``out_dir/quarantine/``.
        progress: Called after each file with (files done, files, file, steps read so far).
        fragments: What to do with episodes that never end within the data.
        dones: How a legacy ``dones`` column is read (see :mod:`.readers.sample_batches`).
    """
    start = time.perf_counter()
    if to not in ("rows", "episodes"):
        raise ConfigError(f"to must be 'rows' or 'episodes', found {to!r}")
    if fragments not in ("keep", "reject"):
        raise ConfigError(f"fragments must be 'keep' or 'reject', found {fragments!r}")
    for name, value in (("rows_per_file", rows_per_file), ("episodes_per_file", episodes_per_file)):
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be a positive integer, found {value!r}")
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
    read = replace(read, format="sample_batches")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stale = sorted(
        p.name for p in out.glob("*.parquet") if p.name.startswith(("rows-", "episodes-"))
    )
    if stale:
        raise ConfigError(f"out_dir {str(out)!r} already holds converted files ({stale[0]}, ...)")

    reader = SampleBatchesReader(read, dones=dones)
    total = EpisodeBatch(on_invalid=read.on_invalid)
    unreadable: list[str] = []
    for i, f in enumerate(files):
        try:
            total.extend(reader.read_file(f))
        except OSError as e:
            if read.on_invalid == "raise":
                raise DataError(
                    f"cannot read the file: {e}", Where(file=f), reason="unreadable_file"
                ) from None
            unreadable.append(f)
        if progress is not None:
            progress(i + 1, len(files), f, total.ledger.rows_in)
    batch = stitch_fragments(total)
    n_fragments = _settle_fragments(batch, fragments, read.on_invalid)
    for ep in batch.episodes:
        ep.id = str(ep.id)
    written = (
        _write_rows(batch.episodes, out, rows_per_file)
        if to == "rows"
        else _write_episodes(batch.episodes, out, episodes_per_file)
    )
    qfile = None
    if read.on_invalid == "quarantine":
        qfile = write_quarantine(batch.rejections, out / "quarantine")
    led = batch.ledger
    seconds = time.perf_counter() - start
    stats = {
        "input": os.fspath(path),
        "files_in": len(files),
        "files_unreadable": unreadable,
        "to": to,
        "out_dir": str(out),
        "files_written": [os.path.basename(p) for p in written],
        "records_read": reader.records_read,
        "records_rejected": dict(sorted(reader.records_rejected.items())),
        "rows_in": led.rows_in,
        "rows_out": led.rows_kept,
        "rows_rejected": dict(sorted(led.rows_rejected.items())),
        "episodes_written": len(batch.episodes),
        "episodes_terminated": sum(e.terminated for e in batch.episodes),
        "episodes_truncated": sum(e.truncated for e in batch.episodes),
        "fragments": n_fragments if fragments == "keep" else 0,
        "fragments_rejected": n_fragments if fragments == "reject" else 0,
        "episodes_rejected": dict(sorted(led.episodes_rejected.items())),
        "balanced": led.rows_in == led.rows_kept + sum(led.rows_rejected.values()),
        "quarantine_file": qfile,
        "seconds": round(seconds, 4),
        "steps_per_s": round(led.rows_kept / seconds, 1) if seconds > 0 else None,
    }
    (out / STATS_FILE).write_text(json.dumps(stats, indent=2) + "\n")
    return stats


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


def _signature(ep: Episode) -> tuple[Any, ...]:
    return (ep.observations.shape[1:], ep.actions.shape[1:], tuple(sorted(ep.extras)))


def _write_rows(episodes: list[Episode], out: Path, rows_per_file: int) -> list[str]:
    """Rows Parquet, episodes of one layout per file, at most ``rows_per_file`` rows (or one ep)."""
    groups: dict[tuple[Any, ...], list[Episode]] = {}
    for ep in episodes:
        groups.setdefault(_signature(ep), []).append(ep)
    written: list[str] = []
    for eps in groups.values():
        chunk: list[Episode] = []
        rows = 0
        for nxt in [*eps, None]:
            if chunk and (nxt is None or rows + len(nxt) > rows_per_file):
                p = out / f"rows-{len(written):05d}.parquet"
                pq.write_table(episodes_to_rows(chunk, with_t=True), p)
                written.append(str(p))
                chunk, rows = [], 0
            if nxt is not None:
                chunk.append(nxt)
                rows += len(nxt)
    return written


def _write_episodes(episodes: list[Episode], out: Path, per_file: int) -> list[str]:
    written: list[str] = []
    for s in range(0, len(episodes), per_file):
        p = out / f"episodes-{len(written):05d}.parquet"
        pq.write_table(episodes_to_table(episodes[s : s + per_file]), p)
        written.append(str(p))
    return written
