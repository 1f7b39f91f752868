"""The batch side of LeRobot datasets: a data file cut into units of whole episodes (the same
samples as one unit, the frames LeRobot's loader decodes), validation that ends the CLI with
exit 2 in one line naming the file, the episode and the frame (broken copies of the committed
fixtures), ``read.limits.video_tolerance_s``, and a dataset on a store (SeaweedFS's S3)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from offline_prelearner.cli.app import main
from offline_prelearner.config import DEFAULT_LIMITS, DecodeLimits
from offline_prelearner.errors import ConfigError
from offline_prelearner.io.formats.composite import struct_leaves
from offline_prelearner.io.formats.lerobot.dataset import (
    PIECE_BYTES_ENV,
    read_lerobot_episodes,
    split_lerobot_file,
)
from offline_prelearner.io.stores import locate

pytest.importorskip("av")

HERE = Path(__file__).resolve().parent.parent / "fixtures" / "lerobot"
TOP = "observation.images.top"


def reference(name: str) -> dict[str, np.ndarray]:
    with np.load(HERE / f"{name}.frames.npz") as z:
        return {k: z[k] for k in z.files}


def data_file(root: Path) -> Path:
    return root / "data" / "chunk-000" / "file-000.parquet"


def samples(out: Path) -> pa.Table:
    t = pa.concat_tables(pq.read_table(f) for f in sorted((out / "samples").glob("*.parquet")))
    return t.sort_by([("eps_id", "ascending"), ("t", "ascending")])


@pytest.fixture
def copy(tmp_path: Path) -> Callable[[str], Path]:
    def make(name: str) -> Path:
        return Path(shutil.copytree(HERE / name, tmp_path / name))

    return make


def test_pieces_are_whole_episodes_within_the_bound() -> None:
    """v30_av1: one data file, episodes of 7, 12 and 4 frames, 32x32 + 24x40 cameras (5,952
    bytes a frame): pieces close before the bound is passed; an episode over it is its own."""
    f = str(data_file(HERE / "v30_av1"))
    frame = 32 * 32 * 3 + 24 * 40 * 3
    assert split_lerobot_file(f, DEFAULT_LIMITS, 1) == [("0",), ("1",), ("2",)]
    assert split_lerobot_file(f, DEFAULT_LIMITS, 19 * frame) == [("0", "1"), ("2",)]
    assert split_lerobot_file(f, DEFAULT_LIMITS, 18 * frame) == [("0",), ("1", "2")]
    assert split_lerobot_file(f, DEFAULT_LIMITS, 23 * frame) == [("0", "1", "2")]
    assert split_lerobot_file(f, DEFAULT_LIMITS) == [("0", "1", "2")]


def test_a_piece_decodes_its_episodes_only_bit_equal() -> None:
    """Episode 1 alone: its rows' numbers in the file, its frames those LeRobot's loader
    decoded for the same indices."""
    ref = reference("v30_av1")
    table, rows = read_lerobot_episodes(str(data_file(HERE / "v30_av1")), DEFAULT_LIMITS, ("1",))
    want = np.flatnonzero(ref["episode_index"] == 1)
    assert rows.tolist() == want.tolist()
    assert table.column("episode_index").to_pylist() == [1] * 12
    leaves = struct_leaves(table.column("obs"), "obs")
    for cam in (TOP, "observation.images.wrist"):
        np.testing.assert_array_equal(leaves[cam.removeprefix("observation.")], ref[cam][want])


def test_process_in_pieces_writes_what_one_unit_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Units of one episode each (the piece bound at one byte): three units, every frame
    accounted for, the same samples as the whole file in one unit."""
    argv = ["process", str(HERE / "v30_av1"), "--engine", "local", "--json"]
    assert main([*argv, "--out", str(tmp_path / "one")]) == 0
    one = json.loads(capsys.readouterr().out)
    monkeypatch.setenv(PIECE_BYTES_ENV, "1")
    assert main([*argv, "--out", str(tmp_path / "cut")]) == 0
    cut = json.loads(capsys.readouterr().out)
    assert (one["units"], cut["units"]) == (1, 3)
    assert cut["rows_in"] == one["rows_in"] == 23 and cut["rows_balance"]
    assert cut["samples_written"] == one["samples_written"] == 22
    a, b = samples(tmp_path / "one"), samples(tmp_path / "cut")
    assert a.column_names == b.column_names
    for name in a.column_names:  # a sample's ``indices`` holds its unit's number
        assert name == "indices" or a.column(name).equals(b.column(name)), name


# ---------------------------------------------------------------------- validation
def _shorter_video(root: Path) -> None:
    """The top camera's video replaced by one of 14 frames: episode 1 (frames 7..18 of the
    file) runs past its end at its frame 7."""
    shutil.copy(
        HERE / "v30_h264/videos/observation.images.front/chunk-000/file-000.mp4",
        root / "videos/observation.images.top/chunk-000/file-000.mp4",
    )


def _missing_video(root: Path) -> None:
    (root / "videos/observation.images.wrist/chunk-000/file-000.mp4").unlink()


def _rewrite_data(root: Path, edit: Callable[[pa.Table], pa.Table]) -> None:
    pq.write_table(edit(pq.read_table(data_file(root))), data_file(root))


def _off_grid(root: Path) -> None:
    """Episode 2's frame 2 at 0.23 s (the grid: 0.1 s at 10 fps): 0.03 s from any frame."""

    def edit(t: pa.Table) -> pa.Table:
        ts = t.column("timestamp").to_numpy().copy()
        ts[19 + 2] += np.float32(0.03)
        return t.set_column(t.column_names.index("timestamp"), "timestamp", pa.array(ts))

    _rewrite_data(root, edit)


def _short_episode(root: Path) -> None:
    """Episode 1's last row dropped from the data file; meta/episodes still says 12."""
    _rewrite_data(root, lambda t: t.filter(pc.not_equal(t.column("index"), 18)))


def _totals(root: Path) -> None:
    info = json.loads((root / "meta/info.json").read_text())
    info["total_frames"] = 24
    (root / "meta/info.json").write_text(json.dumps(info))


def _v21_missing_video(root: Path) -> None:
    (root / "videos/chunk-000/observation.images.top/episode_000002.mp4").unlink()


BROKEN: dict[str, tuple[str, Callable[[Path], None], list[str]]] = {
    "shorter_video": (
        "v30_av1",
        _shorter_video,
        [
            "observation.images.top/chunk-000/file-000.mp4",
            "episode 1",
            "frame 7 of the episode",
            "t=7",
            "the video ends",
        ],
    ),
    "missing_video": (
        "v30_av1",
        _missing_video,
        ["observation.images.wrist/chunk-000/file-000.mp4", "episode 0", "missing"],
    ),
    "off_grid": (
        "v30_av1",
        _off_grid,
        [
            "file-000.mp4",
            "episode 2",
            "frame 2 of the episode",
            "t=2",
            "nearest frame is at",
            "read.limits.video_tolerance_s",
        ],
    ),
    "short_episode": (
        "v30_av1",
        _short_episode,
        ["data/chunk-000/file-000.parquet", "episode 1", "11 frames", "length 12"],
    ),
    "info_totals": (
        "v30_av1",
        _totals,
        ["meta/info.json", "total_frames 24", "holds 23"],
    ),
    "v21_missing_video": (
        "v21_av1",
        _v21_missing_video,
        ["observation.images.top/episode_000002.mp4", "episode 2", "missing"],
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_dataset_exits_2_in_one_line(
    case: str, copy: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name, breaks, says = BROKEN[case]
    root = copy(name)
    breaks(root)
    code = main(["process", str(root), "--out", str(tmp_path / "out"), "--engine", "local"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1
    for text in says:
        assert text in err, (text, err)
    assert not (tmp_path / "out" / "samples").exists()


def test_tolerance_is_a_setting(
    copy: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The off-grid timestamp (0.03 s from its frame) passes with a 0.05 s tolerance, and its
    row gets the frame nearest it (the one of the grid), as LeRobot's loader would."""
    root = copy("v30_av1")
    _off_grid(root)
    limits = json.dumps({"video_tolerance_s": 0.05})
    argv = ["process", str(root), "--out", str(tmp_path / "out"), "--engine", "local", "--json"]
    assert main([*argv, "--set", f"read.limits={limits}"]) == 0
    assert json.loads(capsys.readouterr().out)["samples_written"] == 22
    lim = DecodeLimits(video_tolerance_s=0.05)
    table, _ = read_lerobot_episodes(str(data_file(root)), lim, ("2",))
    top = struct_leaves(table.column("obs"), "obs")["images.top"]
    ref = reference("v30_av1")[TOP][19:23]
    np.testing.assert_array_equal(top, ref)
    with pytest.raises(ConfigError, match="video_tolerance_s"):
        DecodeLimits(video_tolerance_s=-1.0)


# ---------------------------------------------------------------------- stores
def _upload(local: Path, uri: str) -> None:
    for f in sorted(local.rglob("*")):
        if f.is_file():
            locate(uri).join(*f.relative_to(local).parts).write_bytes(f.read_bytes())


def test_dataset_on_s3_inspects_and_processes_as_on_disk(
    s3_store: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``s3://bucket/<prefix>`` holding v30_h264: inspect states what info.json declares and
    reads both episodes; process writes the samples it writes from the local copy (the video
    read through the store's filesystem)."""
    uri = f"{s3_store}/v30_h264"
    _upload(HERE / "v30_h264", uri)
    assert main(["inspect", uri, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["format"] == "lerobot" and d["files_unreadable"] == []
    assert d["episodes"] == d["dataset"]["total_episodes"] == 2
    assert d["dataset"]["cameras"] == {
        "observation.images.front": {"shape": [32, 32, 3], "codec": "h264"}
    }
    argv = ["--engine", "local", "--json", "--set", "sample.frame_stack=2"]
    assert main(["process", uri, "--out", str(tmp_path / "s3"), *argv]) == 0
    assert main(["process", str(HERE / "v30_h264"), "--out", str(tmp_path / "disk"), *argv]) == 0
    capsys.readouterr()
    a, b = samples(tmp_path / "s3"), samples(tmp_path / "disk")
    assert a.num_rows == 12
    for name in a.column_names:
        assert a.column(name).equals(b.column(name)), name


def test_missing_video_on_s3_exits_2_naming_it(
    s3_store: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"{s3_store}/v30_h264"
    _upload(HERE / "v30_h264", uri)
    locate(uri).join("videos/observation.images.front/chunk-000/file-000.mp4").delete()
    assert main(["process", uri, "--out", str(tmp_path / "out"), "--engine", "local"]) == 2
    err = capsys.readouterr().err.strip()
    assert "missing" in err and f"{uri}/videos/observation.images.front" in err
    assert "episode 0" in err and len(err.splitlines()) == 1


def test_skip_passes_over_the_piece_with_a_broken_video(
    copy: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under ``--on-invalid skip`` the data file whose video is missing (v2.1: one episode's)
    is counted rejected with its line; the other episodes are processed."""
    root = copy("v21_av1")
    _v21_missing_video(root)
    argv = ["process", str(root), "--out", str(tmp_path / "out"), "--engine", "local", "--json"]
    assert main([*argv, "--on-invalid", "skip"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["files_read"], d["files_rejected"], d["episodes_kept"]) == (3, 1, 2)
    assert d["samples_written"] == 15 and d["rows_balance"]
