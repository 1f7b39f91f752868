"""Converting whole datasets: Minari / D4RL / LeRobot in, and Minari or LeRobot out
(``convert --to minari``, ``convert --to lerobot``).

:func:`convert_dataset` is what :func:`~.path.convert` hands over
to when the input is read whole (a Minari dataset, a D4RL file, a LeRobot dataset), or the
target is ``"minari"`` or ``"lerobot"``. It reads
every file in order with the format's reader (one reader, so readers that carry state across
files -- old-stack batches -- work too), joins fragments, validates and de-duplicates like
``inspect``, then writes

* ``to="rows"``: ``rows-00000-<k>.parquet`` (RLlib's recorder layout plus ``t``),
* ``to="episodes"``: ``episodes-00000-<k>.parquet`` (msgpack ``SingleAgentEpisode`` records),
* ``to="minari"``: a Minari dataset, ``data/metadata.json`` + ``data/main_data.hdf5``
  (:mod:`~offline_prelearner.io.formats.minari.writer`); ``minari.load_dataset(dataset_id)``
  opens it when ``out_dir`` is ``$MINARI_DATASETS_PATH/<dataset_id>``, and
  ``minari.MinariDataset(out_dir + "/data")`` from anywhere;
* ``to="lerobot"``: a LeRobot v3.0 dataset whose root is ``out_dir`` (``meta/``, ``data/``,
  ``videos/``; :mod:`~offline_prelearner.io.formats.lerobot.writer`), at ``config.fps`` frames a
  second (None: a LeRobot source's, else 30), its robot type a LeRobot source's, cameras
  encoded with ``config.video_codec``; ``LeRobotDataset(repo_id,
  root=out_dir)`` opens it (``stats.json`` and ``_manifest.json`` beside ``meta/`` are not
  LeRobot's and it does not look at them).

**The env spec and the spaces** (:mod:`.dataset_info`) come from the source -- a Minari
dataset's metadata, the spaces in msgpack episode records, or what an earlier ``convert`` put in
the Parquet metadata of its rows / episodes files -- and ``env_id`` (``--env-id``: the spec from
gymnasium's registry, which wins over the source's); where the source has no spaces, Minari
output takes the env's (made from the spec) when the data fits them; what is still unknown is
inferred from the data (spaces) or left out (``env_spec``: the stats say ``env_spec: null`` and
the CLI says so in one line). Every target keeps them: Minari in ``metadata.json``, rows and
episodes in each file's schema metadata.

The output is a commit (:class:`~.commit.LocalStaging`: staged beside ``out_dir``, manifest last).
The whole job is one unit, held in memory (Minari's one hdf5 file, D4RL's one array per key):
``resume`` is refused (there is nothing partial to reuse).
Not-done episodes (the data ends mid-episode) are kept as fragments or refused
(``fragments``), as in the old-stack conversion. Counts: ``rows_in == rows_out +
sum(rows_rejected) + rows_duplicate`` (a row is a step).
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from ..._version import __version__
from ...config import ReadConfig, ValidateConfig
from ...episodes.dedupe import Deduplicator
from ...episodes.episode import Episode
from ...episodes.ledger import EpisodeBatch
from ...episodes.stitch import settle_open_episodes, stitch_fragments
from ...episodes.validate import Validator
from ...errors import ConfigError, SchemaError, Where
from ...io.formats.lerobot.writer import DEFAULT_FPS, write_lerobot_dataset
from ...io.formats.minari.writer import infer_obs_space, infer_space, write_minari_dataset
from ...io.formats.sample_batches.reader import DonesRule, SampleBatchesReader
from ...io.readers import make_reader
from ...io.sources import detect_format, expand_paths, read_table, whole_file_formats
from ..commit import LocalStaging, input_identity, write_parquet_atomic
from ..dataset_info import (
    DatasetInfo,
    env_spaces,
    info_from_env_id,
    info_of_files,
    with_env_spaces,
)
from ..ownership import output_storage
from .config import ConvertConfig
from .tables import episode_tables, rows_tables

__all__ = ["convert_dataset", "default_dataset_id", "wants_dataset_job"]

Progress = Callable[[int, int, str, int], None]


def wants_dataset_job(path: str | os.PathLike[str], to: str, read: ReadConfig | None) -> bool:
    """Whether ``convert`` of ``path`` to ``to`` is this job's (a whole dataset in, or Minari /
    LeRobot out).

    Args:
        path: The input (a file, folder, glob or Minari dataset folder); looked at only when
            the format is not given (its files are listed to detect the format).
        to: The target: ``"rows"``, ``"episodes"``, ``"minari"`` or ``"lerobot"``.
        read: The reader options; its ``format`` decides unless it is ``"auto"`` or
            ``"sample_batches"`` (the old-stack default, which a detected Minari dataset or D4RL
            file overrides); None: as ``"auto"``.

    Returns:
        True for ``to="minari"`` / ``"lerobot"`` or an input read whole (Minari, D4RL,
        LeRobot); False otherwise, also when the
        format cannot be detected (the per-file job reports that).
    """
    if to in ("minari", "lerobot"):
        return True
    return _format(path, read) in whole_file_formats()


def _format(path: str | os.PathLike[str], read: ReadConfig | None) -> str | None:
    """The input's format: as given, else detected (``sample_batches``, the old-stack job's
    default, gives way to a detected Minari dataset or D4RL file)."""
    given = read.format if read is not None else "auto"
    if given not in ("auto", "sample_batches"):
        return given
    try:
        found = detect_format(expand_paths(os.fspath(path)))
    except (FileNotFoundError, ValueError):
        return None if given == "auto" else given  # the old-stack job reports it
    return found if given == "auto" or found in whole_file_formats() else given


def convert_dataset(
    path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    config: ConvertConfig,
    progress: Progress | None = None,
    *,
    overwrite: bool = False,
    resume: bool = False,
) -> dict[str, Any]:
    """Converts the dataset at ``path`` as ``config`` says, in ``out_dir``; returns the stats.

    ``config.dataset_id`` (``to="minari"``): the id written in the metadata; default
    :func:`default_dataset_id` of ``out_dir`` (``--out ROOT/ns/name-v0`` -> ``ns/name-v0``).
    ``config.env_id``: the env spec written, from gymnasium's registry (see the module
    docstring). ``config.layout``: the tensor layout of ``to="rows"``. ``config.dones``: how
    old-stack input's legacy ``dones`` is read (:mod:`~...io.formats.sample_batches.reader`).

    Args:
        path: The input: a Minari dataset (folder), a D4RL HDF5 file, or (for
            ``to="minari"``) any input :func:`~.path.convert` takes.
        out_dir: The folder the result is committed to (staged beside it, manifest last).
        config: The job's settings (target, fragments, reader options and the fields above);
            ``config.read.format`` ``"auto"`` is detected from the files.
        progress: Called after each file is read with (files done, files, file, steps read so
            far); None: not called.
        overwrite: Replace a non-empty ``out_dir`` once this job has succeeded.
        resume: Must be False: the whole job is one unit, nothing partial is kept.

    Returns:
        The job's stats (counts per the ledger, files written, the dataset id and env spec),
        also written to ``out_dir/stats.json`` by the commit.

    Raises:
        ConfigError: ``resume`` is set.
        CommitError: ``out_dir`` is not empty (without ``overwrite``) or another job is
            writing it.
        DataError: Bad data under ``read.on_invalid="raise"``, naming the file, episode and
            row.
    """
    start = time.perf_counter()
    to, fragments, dataset_id, env_id = (
        config.to,
        config.fragments,
        config.dataset_id,
        config.env_id,
    )
    layout, dones = config.layout, config.dones
    if resume:
        raise ConfigError(
            "--resume: a conversion from or to Minari / D4RL / LeRobot is one unit of work, "
            "nothing partial is kept; run without --resume"
        )
    given = info_from_env_id(env_id) if env_id is not None else DatasetInfo()
    read = config.read
    files = expand_paths(os.fspath(path))
    read = replace(read, format=_format(path, read) or detect_format(files))
    if read.format in ("rows", "episodes"):
        files = [f for f in files if f.endswith(".parquet")]  # not a job's stats.json
    out = Path(out_dir)
    if to == "minari" and dataset_id is None:
        dataset_id = default_dataset_id(out.parent.name, out.name)
    inputs = [_stat(f) for f in files]
    job = {
        "version": __version__,
        "format": read.format,
        "prelearner": None,
        "engine": "local",
        "config": {
            "job": "convert",
            "to": to,
            "fragments": fragments,
            "dataset_id": dataset_id,
            **({"env_id": env_id} if env_id is not None else {}),
            **({"layout": layout} if layout != "rllib" and to == "rows" else {}),
            **({"dones": dones} if dones != "auto" else {}),
            **({"video_codec": config.video_codec} if to == "lerobot" else {}),
            **({"fps": config.fps} if to == "lerobot" and config.fps is not None else {}),
        },
        "inputs": inputs,
    }
    # The job owns --out until it is committed or failed (ownership.OutLock).
    # A dataset's own layout at OUT's root (Minari's data/, LeRobot's meta/ data/ videos/), else
    # the data under OUT/rows or OUT/episodes
    files_dir = "" if to in ("minari", "lerobot") else to
    staging = LocalStaging(out, job, overwrite=overwrite, files_dir=files_dir)
    with staging, output_storage(out):
        staging.open()
        try:
            batch, reader = _read_all(files, read, progress, dones)
            n_fragments = settle_open_episodes(batch, fragments, read.on_invalid)
            episodes = list(batch.columns.iter_episodes())  # the writers take one at a time
            info = _info(files, reader, given, episodes)
            source = getattr(reader, "about", None)  # a LeRobot dataset's fps, robot type
            written = _write(staging.samples, config, episodes, info, dataset_id, source)
        except BaseException:
            staging.discard()
            raise
        led = batch.ledger
        seconds = time.perf_counter() - start
        stats = {
            "input": os.fspath(path),
            "format": read.format,
            "files_in": len(files),
            "to": to,
            "out_dir": str(out),
            "files_written": [posixpath.join(files_dir, f["name"]) for f in written],  # under OUT
            "rows_in": led.rows_in,
            "rows_out": int(batch.source_rows.sum()),
            "rows_rejected": dict(sorted(led.rows_rejected.items())),
            "rows_duplicate": led.rows_duplicate,
            "episodes_written": len(episodes),
            "episodes_terminated": int(batch.columns.terminated.sum()),
            "episodes_truncated": int(batch.columns.truncated.sum()),
            "fragments": n_fragments if fragments == "keep" else 0,
            "fragments_rejected": n_fragments if fragments == "reject" else 0,
            "episodes_rejected": dict(sorted(led.episodes_rejected.items())),
            "balanced": led.balanced(),
            "dataset_id": dataset_id,
            **({"layout": layout} if to == "rows" else {}),
            "env_spec": info.env_id,
            "units": 1,
            "units_reused": 0,
            "seconds": round(seconds, 4),
            "steps_per_s": round(int(batch.source_rows.sum()) / seconds, 1) if seconds else None,
        }
        # The layout the rows were written in, as a rows -> rows convert records it.
        staging.commit(stats, written, {"to": to, **({"layout": layout} if to == "rows" else {})})
    return stats


def _stat(path: str) -> dict[str, Any]:
    return input_identity(path)


#: A Minari namespace of one path segment: two or more of ``[-_\w]`` (Minari's ``NAMESPACE_RE``,
#: whose first and last characters are separate terms).
_NAMESPACE = re.compile(r"[-\w]{2,}")


def default_dataset_id(parent: str, name: str) -> str:
    """The Minari id written without ``--dataset-id``: ``<parent folder>/<folder>`` of the
    output where the parent's name is a Minari namespace (two or more letters, digits, ``_`` or
    ``-``), else ``<folder>`` alone: Minari refuses ``a/name-v0`` and ``my.data/name-v0``, and
    a root has no name. ``--out ROOT/ns/name-v0`` -> ``ns/name-v0``; ``--out ROOT/a/name-v0``
    -> ``name-v0``.

    Args:
        parent: The name of the output's parent folder (``""`` for a root).
        name: The name of the output folder.

    Returns:
        The dataset id.
    """
    return f"{parent}/{name}" if _NAMESPACE.fullmatch(parent) else name


def _read_all(
    files: list[str], read: ReadConfig, progress: Progress | None, dones: DonesRule = "auto"
) -> tuple[EpisodeBatch, Any]:
    """Every file with one reader (old-stack: line by line, ``dones`` as given), fragments
    joined, validated and de-duplicated like ``inspect``; a file whose episodes hold another
    observation dtype or step shape than the earlier files' is a :class:`SchemaError`."""
    old_stack = read.format == "sample_batches"
    reader: Any = SampleBatchesReader(read, dones=dones) if old_stack else make_reader(read)
    total = EpisodeBatch()
    for i, f in enumerate(files):
        got = (
            reader.read_file(f)
            if old_stack
            else reader.read(read_table(f, limits=read.limits), source=f)
        )
        try:
            total.extend(got)
        except ValueError:  # another observation dtype or step shape: not one dataset
            raise SchemaError(
                "the episodes' observation dtype or step shapes differ from the earlier files'; "
                "one dataset holds one layout (convert the files apart)",
                Where(file=f),
                reason="schema_drift",  # files of one input disagree: no policy counts that
            ) from None
        if progress is not None:
            progress(i + 1, len(files), f, total.ledger.rows_in)
    batch = stitch_fragments(total, read.on_invalid)
    check = ValidateConfig(require_done=False)  # fragments: below
    batch = Validator(check, read.on_invalid).validate(batch)
    return Deduplicator().dedupe(batch), reader


def _info(
    files: list[str], reader: Any, given: DatasetInfo, episodes: list[Episode]
) -> DatasetInfo:
    """The env spec and spaces written: ``--env-id``'s spec, else the source's; the source's
    spaces, else the env's where the data fits them (checked per episode, one vector pass each),
    else none (the Minari writer infers them)."""
    meta = getattr(reader, "metadata", None)  # a Minari dataset's
    source = DatasetInfo(
        getattr(meta, "env_spec", None),
        getattr(meta, "eval_env_spec", None),
        getattr(reader, "observation_space", None),
        getattr(reader, "action_space", None),
    ).or_else(info_of_files(files))
    info = replace(source, env_spec=given.env_spec or source.env_spec)
    if info.observation_space is not None and info.action_space is not None:
        return info
    return with_env_spaces(info, env_spaces(info.env_spec), episodes)


def _write(
    root: Path,
    config: ConvertConfig,
    episodes: list[Episode],
    info: DatasetInfo,
    dataset_id: str | None,
    source: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    to = config.to
    if to == "minari":
        obs_space, act_space = _spaces(info, episodes)
        write_minari_dataset(
            root,
            episodes,
            dataset_id or "converted",
            observation_space=obs_space,
            action_space=act_space,
            env_spec=info.env_spec,
            eval_env_spec=info.eval_env_spec,
        )
        return [_entry(root, name, n) for name, n in _minari_files(root, episodes)]
    if to == "lerobot":
        fps = (source or {}).get("fps")
        files = write_lerobot_dataset(
            root,
            episodes,
            fps=config.fps or (int(fps) if fps and float(fps).is_integer() else DEFAULT_FPS),
            codec=config.video_codec,
            task=info.env_id or "default",
            robot_type=(source or {}).get("robot_type"),
        )
        return [_entry(root, name, n) for name, n in files]
    for ep in episodes:
        ep.id = str(ep.id)
    tables = (
        rows_tables(episodes, config.rows_per_file, config.layout, info)
        if to == "rows"
        else episode_tables(episodes, config.episodes_per_file, info)
    )
    return [
        write_parquet_atomic(root, f"{to}-00000-{k:05d}.parquet", table)
        for k, table in enumerate(tables)
    ]


def _spaces(
    info: DatasetInfo, episodes: list[Episode]
) -> tuple[gym.Space[Any] | None, gym.Space[Any] | None]:
    """The spaces written to Minari: ``info``'s, else inferred from every episode (a Discrete's
    ``n`` from the largest value anywhere, not the first episode's)."""
    obs, act = info.observation_space, info.action_space
    if not episodes:
        return obs, act
    if act is None:
        act = infer_space(np.concatenate([e.actions for e in episodes]), "actions")
    if obs is None:
        first = episodes[0].observations
        scalar_ints = not isinstance(first, dict) and first.ndim == 1 and first.dtype.kind in "iu"
        if scalar_ints:  # a Discrete observation: its n from every episode
            obs = infer_space(np.concatenate([e.observations for e in episodes]), "observations")
        else:
            obs = infer_obs_space(first)
    return obs, act


def _minari_files(root: Path, episodes: list[Episode]) -> list[tuple[str, int]]:
    return [("data/main_data.hdf5", sum(len(e) for e in episodes)), ("data/metadata.json", 0)]


def _entry(root: Path, name: str, rows: int) -> dict[str, Any]:
    data = (root / name).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    return {"name": name, "rows": rows, "bytes": len(data), "sha256": digest}
