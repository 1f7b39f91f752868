"""Paths, globs and format detection on real files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from offline_prelearner.errors import DataError, UnsupportedFormatError
from offline_prelearner.io.sources import detect_format, expand_paths, read_table


def _write(path: Path, **cols: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(cols), path)
    return path


def test_directories_are_listed_recursively_in_name_order(tmp_path: Path) -> None:
    for name in ("b/2.parquet", "a/10.parquet", "a/9.parquet", "c.parquet"):
        _write(tmp_path / name, x=[1])
    (tmp_path / "_SUCCESS").write_text("")
    (tmp_path / ".hidden.parquet").write_text("")
    files = expand_paths(tmp_path)
    assert [Path(f).relative_to(tmp_path).as_posix() for f in files] == [
        "a/10.parquet",
        "a/9.parquet",
        "b/2.parquet",
        "c.parquet",
    ]


def test_globs_and_single_files(tmp_path: Path) -> None:
    a = _write(tmp_path / "x-1.parquet", x=[1])
    _write(tmp_path / "y-1.parquet", x=[1])
    assert expand_paths(str(tmp_path / "x-*.parquet")) == [str(a)]
    assert expand_paths(a) == [str(a)]
    with pytest.raises(FileNotFoundError, match="no data files"):
        expand_paths(str(tmp_path / "z-*.parquet"))


def test_detect_format(tmp_path: Path) -> None:
    rows = _write(tmp_path / "r.parquet", obs=[[0.0]], actions=[0])
    eps = _write(tmp_path / "e.parquet", item=pa.array([b"\x80"], pa.binary()))
    sb = tmp_path / "sb.json"
    sb.write_text('{"type": "SampleBatch", "obs": [[0.0]]}\n')
    wrapped = tmp_path / "w.json"
    wrapped.write_text('{"value": {"type": "MultiAgentBatch", "count": 1}}\n')
    assert detect_format([str(rows)]) == "rows"
    assert detect_format([str(eps)]) == "episodes"
    assert detect_format([str(sb)]) == "sample_batches"
    assert detect_format([str(wrapped)]) == "sample_batches"
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(np.arange(10, dtype=np.uint8).tobytes())
    with pytest.raises(UnsupportedFormatError, match=r"junk\.parquet"):
        detect_format([str(junk)])


def test_unreadable_file_error_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match=r"bad\.parquet") as ei:
        read_table(str(bad))
    assert ei.value.reason == "unreadable_file" and ei.value.where.file == str(bad)
