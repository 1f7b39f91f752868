"""``convert --to rows`` of rows data: the same rows, their tensor columns in another layout.

:func:`relayout_rows` rewrites new-stack rows Parquet (RLlib's recorder layout, ours, with or
without ``t``) file by file: every column holding per-row arrays -- Ray's tensor extension
(``large_list<element>``, what RLlib writes) or the fast layout
(:mod:`~offline_prelearner.io.fast_tensor`) -- is rewritten in ``layout``; every other column is
copied as it is, in the same order, with the same row order and row groups. Nothing is validated
or regrouped: values are moved, not interpreted (``inspect`` and ``process`` check episodes), so
``rows_out == rows_in`` and the cost is the read of the input layout. RLlib's layout is slow to
read (Parquet decodes its lists element by element); files are rewritten by ``workers`` processes
at once (default: up to 2), which is what reading RLlib's layout at full speed takes.

Output (``out_dir``, a commit like every job: :mod:`.commit`): ``rows-<k>-00000.parquet`` for
input file ``k``, ``stats.json``, ``_manifest.json``. Each file is a unit: ``resume=True`` reuses
the files an interrupted run finished (same inputs, same layout) and rewrites the rest.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..._version import __version__
from ...io.arrow_numpy import TENSOR_EXTENSIONS, column_to_numpy, is_tensor_field
from ...io.fast_tensor import FAST_TENSOR_NAME, Layout, check_layout
from ...io.fast_tensor import parquet_dictionary_columns as dictionary
from ...io.formats.rows.writer import columns_to_table
from ...io.parquet_guard import open_parquet
from ..batch.index import index_output
from ..commit import LocalStaging, file_sha256, input_identity
from ..file_batches import READ_ROWS, has_list_cells
from ..ownership import output_storage

__all__ = ["relayout_rows", "relayout_table"]

Progress = Callable[[int, int, str, int], None]  # (files done, files, file, rows so far)
_TENSOR_NAMES = {n.encode() for n in TENSOR_EXTENSIONS} | {FAST_TENSOR_NAME}


def _is_tensor(field: pa.Field) -> bool:
    meta = field.metadata or {}
    if meta.get(b"ARROW:extension:name") in _TENSOR_NAMES:
        return True
    return is_tensor_field(field)  # also fast / arrow.*_shape_tensor types, fixed_size_list


def relayout_table(table: pa.Table, layout: Layout) -> pa.Table:
    """``table`` with every tensor column in ``layout`` (others untouched, same order).

    Args:
        table: A rows table; its tensor columns (Ray's tensor extensions, fast tensors, Arrow's
            shape tensors, fixed-size lists) are decoded to numpy and re-encoded, one at a time.
        layout: The target layout: ``"rllib"`` (Ray's tensor extension, which RLlib reads) or
            ``"fast"`` (:mod:`~offline_prelearner.io.fast_tensor`).

    Returns:
        A new table with the same column names, order and schema metadata.
    """
    fields, arrays = [], []
    for i, field in enumerate(table.schema):
        if _is_tensor(field):
            values = column_to_numpy(table, field.name)
            one = columns_to_table({field.name: values}, layout=layout)
            fields.append(one.schema.field(0))
            arrays.append(one.column(0))
        else:
            fields.append(field)
            arrays.append(table.column(i))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=table.schema.metadata))


def _relayout_file(src: str, root: str, name: str, layout: Layout) -> dict[str, Any]:
    """Rewrites one file, row group by row group, under a temporary name; its manifest entry."""
    path = Path(root) / name
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    pf = open_parquet(src)
    rows = 0
    try:
        writer: pq.ParquetWriter | None = None
        for g in range(pf.num_row_groups):
            table = _read_row_group(pf, g, layout)
            if writer is None:
                writer = pq.ParquetWriter(
                    tmp, table.schema, compression="zstd", use_dictionary=dictionary(table.schema)
                )
            writer.write_table(table)
            rows += table.num_rows
        if writer is None:  # no row groups: an empty file of the same columns
            empty = relayout_table(pf.schema_arrow.empty_table(), layout)
            writer = pq.ParquetWriter(
                tmp, empty.schema, compression="zstd", use_dictionary=dictionary(empty.schema)
            )
        writer.close()
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return {"name": name, "rows": rows, "bytes": path.stat().st_size, "sha256": file_sha256(path)}


def _read_row_group(pf: pq.ParquetFile, g: int, layout: Layout) -> pa.Table:
    """Row group ``g`` with its tensor columns in ``layout``, decoded
    :data:`~.file_batches.READ_ROWS` at a time where it holds list cells (RLlib's lists read 2x
    faster so) and joined back into one table (written as one row group, as it was)."""
    if not has_list_cells(pf.schema_arrow):
        return relayout_table(pf.read_row_group(g), layout)
    parts = [
        relayout_table(pa.Table.from_batches([rb]), layout)
        for rb in pf.iter_batches(batch_size=READ_ROWS, row_groups=[g], use_threads=True)
    ]
    if not parts:
        return relayout_table(pf.read_row_group(g), layout)
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


def relayout_rows(
    files: list[str],
    out_dir: str | os.PathLike[str],
    layout: Layout,
    progress: Progress | None = None,
    *,
    overwrite: bool = False,
    resume: bool = False,
    workers: int | None = None,
) -> dict[str, Any]:
    """Rewrites the rows files ``files`` into ``out_dir`` with tensor columns in ``layout``.

    Args:
        files: Rows Parquet files, in the order their outputs are numbered.
        out_dir: Must be absent or empty unless ``overwrite`` (see :mod:`.commit`).
        layout: ``"fast"`` or ``"rllib"``.
        progress: Called as each file is done with (files done, files, file, rows so far).
        overwrite: Replace a non-empty ``out_dir`` once this job has succeeded.
        resume: Reuse the files an interrupted or failed run of the same job committed.
        workers: Processes rewriting files at once (default ``min(2, cpus, files)``; 1 runs in
            this process).

    Returns:
        The job's stats (also written to ``stats.json``).
    """
    start = time.perf_counter()
    layout = check_layout(layout)
    for f in files:  # a Parquet bomb is refused here, before any worker opens it
        open_parquet(f)
    inputs = [input_identity(f) for f in files]
    config = {"job": "convert", "to": "rows", "from": "rows", "layout": layout}
    job = {
        "version": __version__,
        "format": "rows",
        "prelearner": None,
        "engine": "local",
        "config": config,
        "inputs": inputs,
    }
    out = Path(out_dir)
    staging = LocalStaging(out, job, overwrite=overwrite, resume=resume, files_dir="rows")
    # The job owns --out until it is committed or failed (ownership.OutLock).
    with staging, output_storage(out):
        return _relayout_all(staging, files, inputs, layout, progress, workers, start)


def _relayout_all(
    staging: LocalStaging,
    files: list[str],
    inputs: list[dict[str, Any]],
    layout: Layout,
    progress: Progress | None,
    workers: int | None,
    start: float,
) -> dict[str, Any]:
    out = staging.out
    kept = staging.open()
    records: dict[int, dict[str, Any]] = {k: r for k, r in kept.items() if k < len(files)}
    todo = [k for k in range(len(files)) if k not in records]
    n_workers = workers or min(2, os.cpu_count() or 1, max(len(todo), 1))
    rows_done = sum(r["files"][0]["rows"] for r in records.values())

    def finish(k: int, entry: dict[str, Any]) -> None:
        nonlocal rows_done
        rec = {"unit": k, "inputs": [inputs[k]], "files": [entry]}
        staging.write_record(k, rec)
        records[k] = rec
        rows_done += entry["rows"]
        if progress is not None:
            progress(len(records), len(files), files[k], rows_done)

    names = {k: f"rows-{k:05d}-00000.parquet" for k in todo}
    root = str(staging.samples)
    if n_workers <= 1:
        for k in todo:
            finish(k, _relayout_file(files[k], root, names[k], layout))
    else:
        ctx = multiprocessing.get_context("spawn")
        pool: Executor
        with ProcessPoolExecutor(n_workers, mp_context=ctx) as pool:
            futures = {
                k: pool.submit(_relayout_file, files[k], root, names[k], layout) for k in todo
            }
            for k in todo:
                finish(k, futures[k].result())

    data = [records[k]["files"][0] for k in range(len(files))]
    seconds = time.perf_counter() - start
    rows = sum(f["rows"] for f in data)
    stats = {
        "input_files": files,
        "files_in": len(files),
        "to": "rows",
        "layout": layout,
        "out_dir": str(out),
        "files_written": [f"{staging.files_dir}/{f['name']}" for f in data],  # under OUT
        "rows_in": rows,
        "rows_out": rows,
        "balanced": True,
        "units": len(files),
        "units_reused": len(kept),
        "seconds": round(seconds, 4),
        "rows_per_s": round(rows / seconds, 1) if seconds > 0 else None,
    }
    staging.commit(stats, data, {"to": "rows", "layout": layout})
    # after the commit point, as process writes it: a later job over OUT plans from it
    index_output(
        staging.output_file(), [staging.output_file(*w.split("/")) for w in stats["files_written"]]
    )
    return stats
