"""How a batch job cuts its units into chunks and its output into row groups.

``ray.batch_size="auto"`` reads 4096-row chunks when samples are drawn (``train_batch_size`` per
chunk, RLlib's rule) and, under ``sample_all``, chunks of about 16 MiB of decoded input between
4096 and 65536 rows: every transition is written either way, so only speed and memory change.
A unit's writer holds its outputs until they fill a row group (65536 rows or 64 MiB).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from conftest import REPO
from hypothesis import given
from hypothesis import strategies as st

from offline_prelearner.config import PreLearnerConfig, RayConfig
from offline_prelearner.config.sections import (
    AUTO_BATCH_ROWS,
    SAMPLE_ALL_BATCH_BYTES,
    SAMPLE_ALL_BATCH_ROWS,
)
from offline_prelearner.errors import ConfigError
from offline_prelearner.jobs.batch import run as R
from offline_prelearner.jobs.batch.batch_job import run_pipeline
from offline_prelearner.jobs.batch.plan import plan_units

ROWS = REPO / "datasets" / "cartpole-v1" / "rows"


def _reference_rows(row_bytes: float) -> int:
    """The rule as a plain loop: the most rows, 4096 to 65536, whose bytes fit the budget (4096
    when even those do not)."""
    best = AUTO_BATCH_ROWS
    for n in range(AUTO_BATCH_ROWS, SAMPLE_ALL_BATCH_ROWS + 1, 64):
        if n * row_bytes <= SAMPLE_ALL_BATCH_BYTES:
            best = n
    return best


@given(row_bytes=st.floats(min_value=1.0, max_value=1e8))
def test_auto_sample_all_chunks_fit_the_byte_budget(row_bytes: float) -> None:
    got = RayConfig().batch_rows(True, row_bytes)
    assert got is not None and AUTO_BATCH_ROWS <= got <= SAMPLE_ALL_BATCH_ROWS
    assert got == AUTO_BATCH_ROWS or got * row_bytes <= SAMPLE_ALL_BATCH_BYTES
    assert got - _reference_rows(row_bytes) in range(64)  # the loop steps by 64 rows


def test_batch_rows_honours_what_the_user_set() -> None:
    assert RayConfig().batch_rows(False, 45.0) == 4096  # sampling: RLlib's 4096 rows
    assert RayConfig().batch_rows(True, 45.0) == 65536  # CartPole rows: the row cap
    assert RayConfig().batch_rows(True, 28224.0 * 2) == 4096  # pixel rows: never below 4096
    assert RayConfig().batch_rows(True, None) == 4096  # no footer (JSON lines, msgpack)
    assert RayConfig(batch_size=300).batch_rows(True, 45.0) == 300
    assert RayConfig(batch_size=None).batch_rows(True, 45.0) is None  # a unit at a time
    assert RayConfig().rows_per_batch == 4096 and RayConfig(batch_size=7).rows_per_batch == 7


@pytest.mark.parametrize("value", ["big", "AUTO", ""])
def test_a_batch_size_word_other_than_auto_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match=r"ray\.batch_size must be 'auto', null or an integer"):
        RayConfig(batch_size=value)


def test_the_plan_reads_row_bytes_from_the_footers() -> None:
    files = sorted(str(p) for p in ROWS.glob("*.parquet"))
    config = PreLearnerConfig().with_updates({"format": "rows", "sample_all": True})
    plan = plan_units(files, config)
    want_bytes = want_rows = 0
    for f in files:
        meta = pq.ParquetFile(f).metadata
        want_rows += meta.num_rows
        want_bytes += sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    assert plan.row_bytes == pytest.approx(want_bytes / want_rows)
    assert plan.batch_rows(config) == 65536


def _samples(out: Path) -> Any:
    return pq.read_table(out / "samples")


@pytest.mark.parametrize("n_step", [1, 3])
def test_sample_all_writes_the_same_transitions_whatever_the_chunks(
    tmp_path: Path, n_step: int
) -> None:
    """Chunks of 300 rows (episodes cut at every chunk's edge), 4096 and "auto" (one chunk):
    the same rows, column for column; only ``indices`` (buffer handles) depend on the chunks."""
    tables, fragments = [], []
    for size in (300, 4096, "auto"):
        updates = {"sample_all": True, "n_step": n_step, "batch_size": size, "seed": 3}
        res = run_pipeline(ROWS, updates, out_dir=tmp_path / str(size), engine="local")
        tables.append(_samples(tmp_path / str(size)).drop_columns(["indices"]))
        fragments.append(res.stats["fragments"])
        assert res.stats["batch_rows"] == (65536 if size == "auto" else size)
    assert tables[0].num_rows == 5000  # a transition per row
    assert tables[0].equals(tables[1]) and tables[1].equals(tables[2])
    assert fragments[0] > fragments[1] > fragments[2] == res.stats["episodes_kept"]


def _row_groups(out: Path) -> list[int]:
    sizes = []
    for f in sorted((out / "samples").glob("*.parquet")):
        meta = pq.ParquetFile(f).metadata
        sizes += [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    return sizes


SAMPLING = {"train_batch_size": 64, "batch_size": 500, "seed": 5, "n_step": 1, "sample_all": False}


def test_a_units_samples_fill_row_groups(tmp_path: Path, monkeypatch: Any) -> None:
    """10 chunks of 500 rows, 64 samples each: one row group of 640 rows, not ten of 64; with
    smaller groups, each holds whole batches up to the first past the size; the bytes bound
    cuts too. The rows are the same however they are grouped."""
    run_pipeline(ROWS, SAMPLING, out_dir=tmp_path / "default", engine="local")
    assert _row_groups(tmp_path / "default") == [640]
    monkeypatch.setattr(R, "ROW_GROUP_ROWS", 200)
    run_pipeline(ROWS, SAMPLING, out_dir=tmp_path / "rows", engine="local")
    assert _row_groups(tmp_path / "rows") == [256, 256, 128]
    monkeypatch.setattr(R, "ROW_GROUP_BYTES", 1)
    run_pipeline(ROWS, SAMPLING, out_dir=tmp_path / "bytes", engine="local")
    assert _row_groups(tmp_path / "bytes") == [64] * 10
    want = _samples(tmp_path / "default")
    assert want.equals(_samples(tmp_path / "rows")) and want.equals(_samples(tmp_path / "bytes"))


def test_indices_are_written_without_a_dictionary(tmp_path: Path) -> None:
    """A distinct handle per row: the dictionary page pyarrow would try is always thrown away;
    the ids, actions and flags keep theirs."""
    run_pipeline(ROWS, {"sample_all": True}, out_dir=tmp_path / "out", engine="local")
    for f in sorted((tmp_path / "out" / "samples").glob("*.parquet")):
        group = pq.ParquetFile(f).metadata.row_group(0)
        chunks = {group.column(i).path_in_schema: group.column(i) for i in range(group.num_columns)}
        assert chunks["indices"].dictionary_page_offset is None
        assert "RLE_DICTIONARY" not in chunks["indices"].encodings
        assert chunks["eps_id"].dictionary_page_offset is not None
        assert chunks["actions"].dictionary_page_offset is not None
