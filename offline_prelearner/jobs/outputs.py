"""What a folder this package wrote holds, told from its ``_manifest.json`` and its files.

``inspect`` reads a dataset as a job would (:mod:`.inspection`); a ``process`` output is not a
dataset to read again (its rows are learner-ready samples, with their n-step fields), but a user
checks what a job produced all the same. :func:`describe_samples` says what such a folder holds
without reading it as experience: the files and rows, each column's per-row shape and dtype, the
n-step values and gamma, the modules, the episodes the samples come from, and the job that wrote
them (:func:`job_of`, which ``inspect`` also adds for a ``convert`` output). Only the footers and
the small id columns (``n_step``, ``module_id``, ``eps_id``) are read, on the local disk or a
store alike.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import DataError
from ..io.manifest import MANIFEST_FILE, SAMPLES, Manifest
from ..io.parquet_guard import open_parquet
from ..io.samples import to_numpy
from ..io.stores import StorageError, join_path, locate

__all__ = ["committed_output", "describe_samples", "job_of"]

#: The columns whose values are counted (each a few bytes a row).
_N_STEP, _MODULE, _EPISODE = "n_step", "module_id", "eps_id"


def committed_output(path: str | os.PathLike[str]) -> Manifest | None:
    """The manifest of the job output ``path`` names, if it names one.

    Args:
        path: A folder (or store prefix): a committed folder itself, its ``_manifest.json``, or
            the folder of its data files (``out/samples``); anything else gives None.

    Returns:
        The manifest, or None where ``path`` is not a job's output (a glob, a file, a folder
        without a manifest).
    """
    text = os.fspath(path)
    if any(c in text for c in "*?["):
        return None
    try:
        loc = locate(text)
        if loc.name == MANIFEST_FILE:
            text, loc = text[: -len(MANIFEST_FILE)].rstrip("/\\") or ".", loc.parent
        if not loc.is_dir():
            return None
        if loc.join(MANIFEST_FILE).is_file():
            return Manifest.read(text)
        parent = loc.parent
        if parent.path != loc.path and parent.join(MANIFEST_FILE).is_file():
            manifest = Manifest.read(parent.uri)
            if manifest.content == SAMPLES and manifest.data.get("files_dir") == loc.name:
                return manifest
    except (StorageError, DataError, OSError):
        return None  # not ours to describe: the reading that follows says what is wrong
    return None


def job_of(manifest: Manifest) -> dict[str, Any]:
    """The job that wrote a committed folder, from its manifest.

    Args:
        manifest: The folder's manifest.

    Returns:
        ``command`` (``process`` or ``convert``), ``job_id``, ``committed_at``, ``version``,
        ``input_format``, ``inputs`` (files read), ``input_rows`` (where the manifest knows
        them), ``engine``, ``prelearner``, ``to`` and ``layout`` (a conversion's), ``files_dir``
        and ``content``.
    """
    d = manifest.data
    config = d.get("config") or {}
    inputs = d.get("inputs") or []
    rows = [i.get("rows") for i in inputs if isinstance(i, dict)]
    return {
        "command": "process" if manifest.content == SAMPLES else str(config.get("job", "convert")),
        "job_id": d.get("job_id"),
        "committed_at": d.get("committed_at"),
        "version": d.get("version"),
        "input_format": d.get("format"),
        "inputs": len(inputs),
        "input_rows": sum(rows) if rows and None not in rows else None,
        "engine": d.get("engine"),
        "prelearner": d.get("prelearner"),
        "to": d.get("to"),
        "layout": d.get("layout"),
        "files_dir": d.get("files_dir"),
        "content": manifest.content,
    }


def describe_samples(manifest: Manifest, path: str | os.PathLike[str]) -> dict[str, Any]:
    """What a ``process`` output holds (what ``inspect --json`` prints for one).

    Args:
        manifest: The output's manifest (``content == "samples"``).
        path: The path as the user gave it (echoed as ``path``).

    Returns:
        ``kind`` (``"samples"``), ``path``, ``files``, ``rows``, ``bytes``, ``columns``
        (``{name: {shape, dtype}}``, the per-row shape), ``n_step`` (``{value: rows}``),
        ``sample`` (the job's unit, n-step setting, gamma, frame stack, batch size and
        ``sample_all``), ``modules`` (``{module id: rows}``), ``episodes`` (distinct episode ids
        the samples come from), ``job`` (:func:`job_of`) and ``stats`` (the ledger of
        ``stats.json``, where it is there).

    Raises:
        FileNotFoundError / DataError: A listed file is missing or changed size.
    """
    files = manifest.checked_paths()
    rows = 0
    columns: dict[str, Any] = {}
    n_step: Counter[int] = Counter()
    modules: Counter[str] = Counter()
    episodes: set[Any] = set()
    for i, f in enumerate(files):
        pf = open_parquet(f)
        rows += pf.metadata.num_rows
        names = pf.schema_arrow.names
        if i == 0 and pf.metadata.num_rows:
            first = pa.Table.from_batches([next(pf.iter_batches(batch_size=1))])
            for name, a in to_numpy(first).items():
                columns[name] = {"shape": list(a.shape[1:]), "dtype": str(a.dtype)}
        small = [c for c in (_N_STEP, _MODULE, _EPISODE) if c in names]
        if not small:
            continue
        table = pf.read(columns=small)
        if _N_STEP in small:
            n_step.update(_counts(table.column(_N_STEP)))
        if _MODULE in small:
            modules.update(_counts(table.column(_MODULE)))
        if _EPISODE in small:
            episodes.update(pc.unique(table.column(_EPISODE)).to_pylist())
    sample = (manifest.data.get("config") or {}).get("sample") or {}
    keep = ("unit", "n_step", "gamma", "frame_stack", "train_batch_size", "sample_all")
    return {
        "kind": "samples",
        "path": os.fspath(path),
        "files": len(files),
        "rows": rows,
        "bytes": sum(f.bytes or 0 for f in manifest.files),
        "columns": columns,
        "n_step": {str(k): v for k, v in sorted(n_step.items())},
        "sample": {k: sample.get(k) for k in keep},
        "modules": dict(sorted(modules.items())),
        "episodes": len(episodes) if episodes else None,
        "job": job_of(manifest),
        "stats": _stats(manifest.folder),
    }


def _counts(column: pa.ChunkedArray) -> dict[Any, int]:
    """``{value: rows}`` of one column (Arrow's value counts, no Python loop over rows)."""
    vc = pc.value_counts(column)
    return dict(
        zip(
            vc.field("values").to_pylist(),
            vc.field("counts").to_pylist(),
            strict=True,
        )
    )


def _stats(folder: str) -> dict[str, Any] | None:
    """The ledger of the output's ``stats.json`` (None where there is none to read)."""
    try:
        stats = json.loads(locate(join_path(folder, "stats.json")).read_bytes())
    except (OSError, ValueError, StorageError):
        return None
    keep = (
        "rows_in",
        "rows_kept",
        "rows_rejected",
        "rows_duplicate",
        "episodes_kept",
        "samples_written",
        "rows_balance",
        "wall_seconds",
    )
    return {k: stats.get(k) for k in keep}
