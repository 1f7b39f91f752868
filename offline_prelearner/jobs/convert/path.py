"""The conversion job: every format read -> every format written, through the episode model.

One dispatch on (source format, target) in :func:`convert` (:func:`convert_path` is its
keyword form):

=========================  ==========================  ==========================================
source                     ``to="rows"``/``"episodes"``  ``to="minari"`` / ``"lerobot"``
=========================  ==========================  ==========================================
``rows`` (RLlib rows)      rows: layout change          :mod:`.dataset` (one unit)
                           (:mod:`.relayout`);
                           episodes: units
``episodes`` (msgpack)     units (:mod:`.by_file`)      :mod:`.dataset`
``sample_batches``         units                        :mod:`.dataset`
(old stack)
``minari``, ``d4rl``,      :mod:`.dataset`      :mod:`.dataset`
``lerobot``
=========================  ==========================  ==========================================

Rows input with ``to="rows"`` is a layout change, file by file, done by
:func:`~.relayout.relayout_rows`: the same rows with their tensor columns
in ``layout`` (``"fast"`` to read them 10-100x faster). Minari and D4RL inputs, and Minari
output, are whole datasets (:mod:`.dataset`). Everything else runs file by file
(:mod:`.by_file`).

**What round-trips.** ``a -> b -> a`` gives the same episodes (ids compared as strings; lengths,
observations, actions, rewards, flags, ``t_started``, extras exactly) for rows, episodes and
Minari, except where a format has no place for a value: Minari keeps no agent / module ids and
no infos; its ids, ``t_started`` and
extras ride in parts of the episode group Minari ignores (:mod:`...io.formats.minari.writer`).
Infos (none in the data the tests use): msgpack records keep them; rows keep the step infos as
JSON text, not the reset info (``infos[0]``), which reads back as ``{}``. Old-stack and D4RL data
are input only (nothing writes them).

:func:`convert_path` reads the files under a path in name order with the source format's reader
(old-stack: episodes cut across batches and files continue), joins the fragments of each episode
(:func:`~offline_prelearner.episodes.stitch.stitch_fragments`), decides what happens to episodes
that never end within the data, and writes the episodes, ``stats.json`` and ``_manifest.json``.

**A commit** (:mod:`..commit`). Everything is written into a hidden staging folder beside
``out_dir`` and moved into place when the job succeeds; the manifest, written last, lists every
output file (rows, bytes, sha256), the inputs (sizes, mtimes), the config and the version. A
non-empty ``out_dir`` is refused unless ``overwrite=True`` (the old output is replaced only on
success); a failed or interrupted job leaves ``out_dir`` as it was. Output (``out_dir``):

* ``to="rows"``: ``rows-<unit>-<k>.parquet`` in RLlib's recorder row layout plus ``t``
  (:func:`~offline_prelearner.io.formats.rows.writer.episodes_to_rows`; tensor columns in
  ``layout``, RLlib's by default so that RLlib reads the result), at most ``rows_per_file`` rows per
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

"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import time
from dataclasses import replace
from typing import Any, Literal

from ...config import ReadConfig, check_on_invalid
from ...errors import ConfigError, UnsupportedFormatError
from ...io.fast_tensor import Layout
from ...io.formats.lerobot.writer import VideoCodec
from ...io.formats.sample_batches.reader import DonesRule
from ...io.sources import check_one_format, detect_format, expand_paths
from ...io.stores import locate
from ..ownership import check_out_apart
from ..store_commit import store_failure
from .by_file import UNIT_FORMATS, Progress, convert_by_file
from .config import ConvertConfig, Target
from .dataset import convert_dataset, default_dataset_id, wants_dataset_job
from .relayout import relayout_rows

__all__ = ["convert", "convert_path"]


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
    fps: int | None = None,
    video_codec: VideoCodec = "av1",
) -> dict[str, Any]:
    """Converts the data under ``path`` to ``to``; commits it to ``out_dir`` and returns the stats.

    The keyword form of :func:`convert`: the settings are checked into a :class:`ConvertConfig`
    (``read_config`` with ``on_invalid`` applied, and the keyword arguments), then converted.

    Args:
        path: A file, a directory (recursive, name order) or a glob of data files: rows or
            msgpack episodes Parquet, old-stack JSON lines (or Parquet with one SampleBatch per
            row), a Minari dataset (folder or id), a D4RL HDF5 file or a LeRobot dataset.
        to: ``"rows"``, ``"episodes"``, ``"minari"`` or ``"lerobot"`` (see the module
            docstring).
        out_dir: Must be absent or empty unless ``overwrite``; the job's output appears there
            whole, or not at all.
        read_config: Reader options (``legacy_pickle``, ``schema``, ``limits``...). Its
            ``format`` is ``"auto"`` by default (detected from the files).
        on_invalid: Overrides ``read_config.on_invalid``; with ``"quarantine"`` refused data goes
            to ``out_dir/quarantine/quarantine.parquet``.
        progress: Called after each file with (files done, files, file, steps read so far).
        fragments: What to do with episodes that never end within the data.
        dones: How a legacy ``dones`` column is read (see
            :mod:`~offline_prelearner.io.formats.sample_batches.reader`).
        rows_per_file: ``to="rows"``: at most this many rows per file (an episode is never cut).
        episodes_per_file: ``to="episodes"``: at most this many episodes per file.
        overwrite: Replace a non-empty ``out_dir`` once this job has succeeded.
        resume: Reuse the units an interrupted or failed run of the same job committed (see the
            module docstring); refused with one line if that run had another config.
        dataset_id: ``to="minari"``: the Minari id written (see
            :func:`~.dataset.convert_dataset`).
        layout: How ``to="rows"`` writes per-step arrays: ``"rllib"`` (Ray's tensor extension,
            which RLlib reads) or ``"fast"`` (:mod:`~offline_prelearner.io.fast_tensor`).
        env_id: A gymnasium env id whose registered spec is written with the data (Minari's
            ``env_spec``; rows / episodes file metadata); without it, the source's, if any.
        fps: ``to="lerobot"``: the dataset's frames per second; None: a LeRobot source's, else
            30.
        video_codec: ``to="lerobot"``: ``"av1"`` (LeRobot's default), ``"h264"`` or
            ``"lossless"`` (see :class:`ConvertConfig`).

    Returns:
        The job's stats (also written to ``out_dir/stats.json``).

    A Minari / LeRobot dataset or D4RL file as input, or ``to="minari"`` / ``"lerobot"``, is
    converted by
    :func:`~.dataset.convert_dataset`.

    Raises:
        CommitError: ``out_dir`` is not empty (without ``overwrite``), is or lies inside an
            input folder, another job is writing it, or ``resume`` finds nothing to resume or a
            job with another config.
        OSError: A write failed for want of room (ENOSPC, EDQUOT, EFBIG), naming ``out_dir``.
    """
    read = read_config or ReadConfig(format="auto")
    if on_invalid is not None:
        read = replace(read, on_invalid=check_on_invalid(on_invalid))
    config = ConvertConfig(
        to, read, fragments=fragments, dones=dones, rows_per_file=rows_per_file,
        episodes_per_file=episodes_per_file, layout=layout, env_id=env_id, dataset_id=dataset_id,
        fps=fps, video_codec=video_codec,
    )  # fmt: skip
    return convert(path, out_dir, config, progress, overwrite=overwrite, resume=resume)


def convert(
    path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    config: ConvertConfig,
    progress: Progress | None = None,
    *,
    overwrite: bool = False,
    resume: bool = False,
) -> dict[str, Any]:
    """Converts the data under ``path`` as ``config`` says; commits it to ``out_dir``.

    Args:
        path: A file, a directory (recursive, name order) or a glob of data files (see
            :func:`convert_path`).
        out_dir: Must be absent or empty unless ``overwrite``; the job's output appears there
            whole, or not at all.
        config: What to write and how to read (:class:`ConvertConfig`).
        progress: Called after each file with (files done, files, file, steps read so far).
        overwrite: Replace a non-empty ``out_dir`` once this job has succeeded.
        resume: Reuse the units an interrupted or failed run of the same job committed.

    Returns:
        The job's stats (also in ``out_dir/stats.json``).

    Raises:
        CommitError: As :func:`convert_path` says.
    """
    if not locate(out_dir).local:  # an object store: converted locally, then published
        return _convert_to_store(path, os.fspath(out_dir), config, progress, overwrite, resume)
    check_out_apart(out_dir, os.fspath(path))  # before anything is read
    start = time.perf_counter()
    if wants_dataset_job(path, config.to, config.read):  # Minari / D4RL in, or Minari out
        return convert_dataset(path, out_dir, config, progress, overwrite=overwrite, resume=resume)
    files = expand_paths(os.fspath(path))
    check_one_format(files)
    read = config.read
    fmt = read.format if read.format != "auto" else detect_format(files)
    if fmt == "rows" and config.to == "rows":
        if config.env_id is not None:
            raise ConfigError(
                "env_id: rows -> rows rewrites the tensor layout of the same files and adds "
                "nothing; give env_id when converting to minari or episodes"
            )

        def rows_progress(i: int, n: int, name: str, rows: int) -> None:
            if progress is not None:
                progress(i, n, name, rows)

        parquet = [f for f in files if f.endswith(".parquet")]  # not a job's stats.json
        return relayout_rows(
            parquet, out_dir, config.layout, rows_progress, overwrite=overwrite, resume=resume
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
    config = replace(config, read=replace(read, format=fmt))
    return convert_by_file(path, out_dir, config, files, progress, overwrite, resume, start)


def _convert_to_store(
    path: str | os.PathLike[str],
    out: str,
    config: ConvertConfig,
    progress: Progress | None,
    overwrite: bool,
    resume: bool,
) -> dict[str, Any]:
    """:func:`convert` into a store's prefix: the store is probed and ``out`` checked first (one
    line, exit 2), the job commits into a local folder of its own (``--resume`` works there as on
    disk), whose files are then uploaded under names with the job's id and committed by
    ``_manifest.json``, written last (:func:`~..store_commit.publish`). The stats returned are the
    ones committed, naming the store (``out_dir``, ``quarantine_file``, ``files_written``)."""
    from ..store_commit import StoreStaging, publish

    staging = StoreStaging(out, {}, overwrite=overwrite)
    if config.to == "minari" and config.dataset_id is None:  # named after --out, as on disk
        parent, name = staging.root.parent.name, staging.root.name
        config = replace(config, dataset_id=default_dataset_id(parent, name))
    staging.acquire()
    with store_failure(out):
        staging.check_out()
    twin = _local_twin(out)
    convert(path, twin, config, progress, overwrite=True, resume=resume)
    stats = publish(twin, staging)  # as committed: naming the store, not the twin
    shutil.rmtree(twin, ignore_errors=True)
    with contextlib.suppress(OSError):  # its folder, if nothing else is in it
        os.rmdir(os.path.dirname(twin))
    return stats


def _local_twin(out: str) -> str:
    """The local folder a conversion into the store's ``out`` commits to first, the same for the
    same ``out`` (so ``--resume`` finds its staging): under the user's cache folder."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    key = hashlib.sha256(out.encode()).hexdigest()[:16]
    return os.path.join(cache, "offline-prelearner", "store-jobs", key, "out")
