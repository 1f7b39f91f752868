"""LeRobot datasets written by LeRobot 0.4.4 itself (``tests/fixtures/lerobot/make_datasets.py``),
read with PyAV: frames equal to those LeRobot's own loader decoded (every camera, AV1 and
H.264), every feature mapped through the episode model, detection from ``meta/info.json``,
``inspect`` and ``process`` on the dataset's root, and one-line errors for broken videos and
metadata. Real committed data, real PyAV, nothing mocked."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from offline_prelearner.cli.app import main
from offline_prelearner.config import ReadConfig
from offline_prelearner.errors import DataError, UnsupportedFormatError
from offline_prelearner.io.formats.composite import struct_leaves
from offline_prelearner.io.formats.lerobot import dataset as lerobot_dataset
from offline_prelearner.io.readers import make_reader
from offline_prelearner.io.sources import detect_format, expand_paths, read_table

pytest.importorskip("av")

HERE = Path(__file__).resolve().parent.parent / "fixtures" / "lerobot"
DATASETS = ["v30_av1", "v30_h264", "v21_av1"]
CAMERAS = {
    "v30_av1": ["observation.images.top", "observation.images.wrist"],
    "v21_av1": ["observation.images.top", "observation.images.wrist"],
    "v30_h264": ["observation.images.front"],
}


def reference(name: str) -> dict[str, np.ndarray]:
    with np.load(HERE / f"{name}.frames.npz") as z:
        return {k: z[k] for k in z.files}


def data_file(root: Path) -> Path:
    return root / "data" / "chunk-000" / "file-000.parquet"


@pytest.fixture
def copy(tmp_path: Path):
    def make(name: str) -> Path:
        return Path(shutil.copytree(HERE / name, tmp_path / name))

    return make


@pytest.mark.parametrize("name", DATASETS)
def test_frames_equal_lerobot_loader(name: str) -> None:
    """Every camera's frames, decoded per episode with one seek, are bit-equal to what
    ``LeRobotDataset(..., video_backend="pyav")[i]`` returned for the same index (v3.0: one
    data file and one video a camera for all episodes; v2.1: one of each per episode)."""
    ref = reference(name)
    files = expand_paths(str(HERE / name))
    assert len(files) == (3 if name == "v21_av1" else 1) and detect_format(files) == "lerobot"
    table = pa.concat_tables(read_table(f) for f in files)
    assert table.column("episode_index").to_numpy().tolist() == ref["episode_index"].tolist()
    assert table.column("frame_index").to_numpy().tolist() == ref["frame_index"].tolist()
    leaves = struct_leaves(table.column("obs"), "obs")
    for cam in CAMERAS[name]:
        got = leaves[cam.removeprefix("observation.")]
        assert got.dtype == np.uint8 and got.shape == ref[cam].shape
        np.testing.assert_array_equal(got, ref[cam])


def test_episodes_map_every_feature() -> None:
    """State, cameras, action, next.reward / next.done, the task text: an episode ending in
    next.done is terminated with L steps; one ending without it is truncated with L - 1 steps
    (its last frame the final observation), every frame accounted for."""
    root = HERE / "v30_av1"
    ref = reference("v30_av1")
    raw = pq.read_table(data_file(root))
    reader = make_reader(ReadConfig(format="lerobot"))
    got = reader.read(read_table(str(data_file(root))), source=str(data_file(root)))
    cols, led = got.columns, got.ledger
    assert cols.ids == [0, 1, 2]
    assert cols.length.tolist() == [7, 11, 4]  # frames 7, 12, 4; episode 1 ends not done
    assert cols.terminated.tolist() == [True, False, True]
    assert cols.truncated.tolist() == [False, True, False]
    assert led.rows_in == 23 and led.rows_rejected["next_obs_unknown"] == 1 and led.balanced()
    eid = raw.column("episode_index").to_numpy()
    state = np.stack(raw.column("observation.state").to_numpy(zero_copy_only=False))
    action = np.stack(raw.column("action").to_numpy(zero_copy_only=False))
    reward = raw.column("next.reward").to_numpy()
    tasks = {0: "pick the cube", 1: "push the cube", 2: "pick the cube"}
    for i, ep in enumerate(cols.ids):
        rows = np.flatnonzero(eid == ep)
        e = cols.episode(i)
        n = len(e.actions)
        obs = e.observations
        assert isinstance(obs, dict)
        # observations are the episode's frames (the terminated copy its last frame again)
        frames = np.r_[rows, rows[-1]] if e.terminated else rows
        np.testing.assert_array_equal(obs["state"], state[frames])
        np.testing.assert_array_equal(obs["images.top"], ref["observation.images.top"][frames])
        np.testing.assert_array_equal(obs["images.wrist"], ref["observation.images.wrist"][frames])
        np.testing.assert_array_equal(e.actions, action[rows[:n]])
        np.testing.assert_array_equal(e.rewards, reward[rows[:n]])
        assert set(e.extras["task"].tolist()) == {tasks[ep]}


def test_no_reward_or_done_means_zero_rewards_and_truncated_ends() -> None:
    root = HERE / "v30_h264"
    reader = make_reader(ReadConfig(format="lerobot"))
    cols = reader.read(read_table(str(data_file(root))), source=str(data_file(root))).columns
    assert cols.length.tolist() == [8, 4]
    assert not cols.terminated.any() and cols.truncated.all()
    assert not np.concatenate([cols.episode(i).rewards for i in range(2)]).any()


def test_root_lists_data_files_only_and_detects_lerobot() -> None:
    files = expand_paths(str(HERE / "v30_av1"))
    assert files == [str(data_file(HERE / "v30_av1"))]
    assert detect_format(files) == "lerobot"


def test_inspect_root_shows_cameras_fps_codecs_tasks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(HERE / "v30_av1"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["format"] == "lerobot" and d["files_unreadable"] == []
    assert d["episodes"] == d["dataset"]["total_episodes"] == 3
    assert d["dataset"]["fps"] == 10 and d["dataset"]["lerobot_version"] == "v3.0"
    assert d["dataset"]["cameras"] == {
        "observation.images.top": {"shape": [32, 32, 3], "codec": "av1"},
        "observation.images.wrist": {"shape": [24, 40, 3], "codec": "av1"},
    }
    assert d["dataset"]["tasks"] == ["pick the cube", "push the cube"]
    assert main(["inspect", str(HERE / "v30_h264")]) == 0
    out = capsys.readouterr().out
    assert "observation.images.front 32x32x3 h264" in out
    assert "(matches the 2 episodes read)" in out
    assert main(["inspect", str(HERE / "v21_av1")]) == 0
    out = capsys.readouterr().out
    assert "lerobot     v2.1" in out and "(matches the 3 episodes read)" in out
    assert "tasks       'pick'; 'push'" in out


def test_process_root_stacks_decoded_frames(tmp_path: Path) -> None:
    """n-step and a 4-frame stack through the existing buffer, on decoded frames: each sample's
    stacked obs are the frames LeRobot's loader returns, the first ones of an episode repeated."""
    out = tmp_path / "out"
    argv = ["process", str(HERE / "v30_av1"), "--out", str(out), "--engine", "local", "--json"]
    assert main([*argv, "--set", "n_step=3", "--set", "sample.frame_stack=4"]) == 0
    t = pa.concat_tables(pq.read_table(f) for f in sorted((out / "samples").glob("*.parquet")))
    assert t.num_rows == 22
    ref = reference("v30_av1")
    top = ref["observation.images.top"]
    eid, step = t.column("eps_id").to_numpy(), t.column("t").to_numpy()
    cells = t.column("obs.images.top").to_pylist()
    for k in range(t.num_rows):
        stacked = np.frombuffer(cells[k], np.uint8).reshape(4, 32, 32, 3)
        rows = np.flatnonzero(ref["episode_index"] == eid[k])
        want = rows[np.maximum(np.arange(step[k] - 3, step[k] + 1), 0)]
        np.testing.assert_array_equal(stacked, top[want])


def test_missing_video_is_one_line(copy) -> None:
    root = copy("v30_av1")
    (root / "videos/observation.images.wrist/chunk-000/file-000.mp4").unlink()
    with pytest.raises(DataError, match="missing") as e:
        read_table(str(data_file(root)))
    assert "file-000.mp4" in str(e.value) and "episode 0" in str(e.value)
    assert "\n" not in str(e.value)


def test_video_shorter_than_timestamps_names_episode_and_frame(copy) -> None:
    """The top camera's video replaced by one of 14 frames: episode 1 (frames 7..18 of the file)
    runs past its end at its frame 7."""
    root = copy("v30_av1")
    shutil.copy(
        HERE / "v30_h264/videos/observation.images.front/chunk-000/file-000.mp4",
        root / "videos/observation.images.top/chunk-000/file-000.mp4",
    )
    with pytest.raises(DataError, match="the video ends") as e:
        read_table(str(data_file(root)))
    msg = str(e.value)
    assert "episode 1" in msg and "frame 7 of the episode" in msg and "\n" not in msg


def test_info_json_too_large_is_refused(copy) -> None:
    root = copy("v30_h264")
    info = json.loads((root / "meta/info.json").read_text())
    info["padding"] = " " * lerobot_dataset.MAX_INFO_BYTES
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(DataError, match="more than the"):
        read_table(str(data_file(root)))


def test_missing_av_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "av", None)  # what an environment without PyAV gives
    with pytest.raises(UnsupportedFormatError, match=r"offline_prelearner\[video\]"):
        read_table(str(data_file(HERE / "v30_h264")))
