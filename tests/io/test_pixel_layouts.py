"""Pixel data in RLlib's layout and in the fast layout (written by ``convert --to rows --layout
fast``) give the prelearner the same samples, value for value, with the same seed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from offline_prelearner.cli import main
from offline_prelearner.config import PreLearnerConfig
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.io.fast_tensor import FastTensorType
from offline_prelearner.io.formats.rows.writer import episodes_to_rows
from offline_prelearner.jobs.convert import convert_path
from offline_prelearner.prelearner import OfflinePreLearner

FRAME = (12, 12, 4)


def _pixel_episodes(n_episodes: int, seed: int = 0) -> list[Episode]:
    rng = np.random.default_rng(seed)
    eps = []
    for i in range(n_episodes):
        n = int(rng.integers(1, 30))
        eps.append(
            Episode(
                id=f"ep-{i}",
                observations=rng.integers(0, 256, (n + 1, *FRAME), dtype=np.uint8),
                actions=rng.integers(0, 6, n),
                rewards=rng.normal(size=n),
                terminated=bool(i % 3),
                truncated=not i % 3,
            )
        )
    return eps


def _write_rllib(folder: Path, eps: list[Episode], files: int = 3) -> None:
    """RLlib's layout, no ``t``, episodes cut across files as RLlib's recorder does."""
    table = episodes_to_rows(eps, with_t=False, layout="rllib")
    folder.mkdir(parents=True)
    step = -(-table.num_rows // files)
    for k in range(files):
        pq.write_table(table.slice(k * step, step), folder / f"part-{k:05d}.parquet")


def _samples(folder: Path, updates: dict[str, object]) -> dict[str, np.ndarray]:
    config = PreLearnerConfig().with_updates({"seed": 7, "capacity": 2_000, **updates})
    pre = OfflinePreLearner(config)
    outs: list[dict[str, np.ndarray]] = []
    for f in sorted(folder.glob("*.parquet")):
        for batch in pq.read_table(f).to_batches(max_chunksize=97):
            outs.extend(pre(pa.Table.from_batches([batch])))
    assert outs
    return {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}


@pytest.fixture(scope="module")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("pixels")
    _write_rllib(root / "rllib", _pixel_episodes(40))
    stats = convert_path(root / "rllib", "rows", root / "fast", layout="fast")
    assert stats["rows_out"] == stats["rows_in"] > 0
    return root / "rllib", root / "fast"


def test_convert_writes_the_fast_layout(layouts: tuple[Path, Path]) -> None:
    rllib, fast = layouts
    manifest = json.loads((fast / "_manifest.json").read_text())
    assert manifest["layout"] == "fast"
    for src, out in zip(
        sorted(rllib.glob("*.parquet")), sorted((fast / "rows").glob("*.parquet")), strict=True
    ):
        a, b = pq.read_table(src), pq.read_table(out)
        assert a.num_rows == b.num_rows
        assert isinstance(b.schema.field("obs").type, FastTensorType)  # registered on import
        assert a.column("eps_id").equals(b.column("eps_id"))
        # frames are stored plain (a dictionary of frames never pays); other columns may not be
        meta = pq.ParquetFile(out).metadata.row_group(0)
        names = [meta.column(i).path_in_schema for i in range(meta.num_columns)]
        encodings = {n: meta.column(i).encodings for i, n in enumerate(names)}
        assert not {"RLE_DICTIONARY", "PLAIN_DICTIONARY"} & set(
            encodings["obs"] + encodings["new_obs"]
        )
        assert "RLE_DICTIONARY" in encodings["eps_id"]
    # and back: the fast layout rewritten in RLlib's gives RLlib's columns again
    back = convert_path(fast, "rows", fast.parent / "back", layout="rllib")
    first = pq.read_table(fast.parent / "back" / back["files_written"][0])
    stored = first.schema.field("obs").type  # Ray's extension type once ray.data is imported
    assert getattr(stored, "storage_type", stored) == pa.large_list(pa.field("element", pa.uint8()))
    assert first.column("obs").equals(
        pq.read_table(sorted(rllib.glob("*.parquet"))[0]).column("obs")
    )


@pytest.mark.parametrize(
    "updates",
    [
        {"n_step": 3, "frame_stack": 4},
        {"n_step": 3, "frame_stack": 4, "sample_all": True},
        {"n_step": 1, "frame_stack": 1, "train_batch_size": 64},
    ],
    ids=["replay-nstep3-stack4", "sample_all-nstep3-stack4", "replay-1step"],
)
def test_every_pixel_sample_equal(layouts: tuple[Path, Path], updates: dict[str, object]) -> None:
    rllib, fast = layouts
    a, b = _samples(rllib, updates), _samples(fast / "rows", updates)
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    obs = a.get("obs")
    assert obs is not None and obs.dtype == np.uint8 and len(obs) > 0


def test_cli_layout_flags(tmp_path: Path, layouts: tuple[Path, Path]) -> None:
    rllib, _ = layouts
    assert (
        main(
            [
                "convert",
                str(rllib),
                "--to",
                "rows",
                "--layout",
                "fast",
                "--out",
                str(tmp_path / "f"),
                "--json",
            ]
        )
        == 0
    )
    files = sorted((tmp_path / "f" / "rows").glob("rows-*.parquet"))
    assert files and isinstance(pq.read_schema(files[0]).field("new_obs").type, FastTensorType)


def test_convert_keeps_row_groups_read_in_pieces(tmp_path: Path) -> None:
    """``convert`` decodes RLlib's lists a few hundred rows at a time (``READ_ROWS``) and writes
    each row group back whole: the same rows, values and row-group sizes."""
    from offline_prelearner.jobs.convert.relayout import READ_ROWS

    eps = _pixel_episodes(120, seed=3)
    table = episodes_to_rows(eps, with_t=False, layout="rllib")
    assert table.num_rows > 2 * READ_ROWS + 10
    src = tmp_path / "rllib"
    src.mkdir()
    pq.write_table(table, src / "part-00000.parquet", row_group_size=READ_ROWS * 2 + 7)
    convert_path(src, "rows", tmp_path / "fast", layout="fast")
    out = pq.ParquetFile(tmp_path / "fast" / "rows" / "rows-00000-00000.parquet")
    before = pq.ParquetFile(src / "part-00000.parquet").metadata
    sizes = [before.row_group(g).num_rows for g in range(before.num_row_groups)]
    assert [out.metadata.row_group(g).num_rows for g in range(out.num_row_groups)] == sizes
    got = out.read()
    frames = np.frombuffer(got.column("obs").combine_chunks().buffers()[1], np.uint8)
    want = np.stack(table.column("obs").to_pylist()).astype(np.uint8)
    assert (frames.reshape(want.shape) == want).all()
    assert got.column("eps_id").equals(table.column("eps_id"))
