"""Replay sampling from LeRobot video: frames decoded where a sample needs them.

:class:`VideoFrames` against the frames LeRobot's own loader decoded from the committed datasets
(every camera, AV1 and H.264, v3.0 and v2.1) for random index sets; against a plain loop that
decodes every frame of every file and indexes it (hypothesis draws the request sequences and
the cache's bound); the cache's byte bound and what it saves, in counted decodes (never time);
a buffer holding frame references samples the very batches a buffer holding the decoded frames
does. Real committed data, real PyAV, nothing mocked."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offline_prelearner import EpisodeReplayBuffer, FrameStack, NStep, Sequence
from offline_prelearner.config import DEFAULT_LIMITS, ReadConfig
from offline_prelearner.connectors import build_pipeline
from offline_prelearner.connectors.video_frames import DecodeVideoFrames
from offline_prelearner.errors import DataError, SchemaError
from offline_prelearner.io.formats.lerobot.dataset import (
    lerobot_files,
    load_meta,
    read_lerobot_file,
)
from offline_prelearner.io.formats.lerobot.frames import VideoFrames, reference_episodes
from offline_prelearner.io.readers import make_reader
from offline_prelearner.replay.units.base import SampleUnit

av = pytest.importorskip("av")

HERE = Path(__file__).resolve().parent.parent / "fixtures" / "lerobot"
CAMERAS = {
    "v30_av1": ["observation.images.top", "observation.images.wrist"],
    "v30_h264": ["observation.images.front"],
    "v21_av1": ["observation.images.top", "observation.images.wrist"],
}
PAIRS = [(name, cam) for name, cams in CAMERAS.items() for cam in cams]


def reference(name: str) -> dict[str, np.ndarray]:
    with np.load(HERE / f"{name}.frames.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def refs() -> dict[str, dict[str, np.ndarray]]:
    return {name: reference(name) for name in CAMERAS}


@pytest.fixture(scope="module")
def plain() -> dict[tuple[str, str], np.ndarray]:
    """Per (dataset, camera): every frame, by LeRobot index, from a plain loop that decodes each
    video file whole and takes for each frame the decoded frame nearest its time."""
    out = {}
    for name, cams in CAMERAS.items():
        root = HERE / name
        meta = load_meta(root)
        rows = [pq.read_table(f) for f in lerobot_files(root)]
        for cam in cams:
            decoded: dict[str, tuple[np.ndarray, np.ndarray]] = {}
            frames = {}
            for table in rows:
                index = table.column("index").to_pylist()
                eps = table.column("episode_index").to_pylist()
                ts = table.column("timestamp").to_pylist()
                for i, ep, t in zip(index, eps, ts, strict=True):
                    rel, start = meta.episodes[ep]["videos"][cam]
                    if rel not in decoded:
                        with av.open(str(root / rel)) as c:
                            s = c.streams.video[0]
                            got = [(float(f.pts * s.time_base), f.to_ndarray(format="rgb24"))
                                   for f in c.decode(s)]  # fmt: skip
                        got.sort(key=lambda p: p[0])
                        decoded[rel] = (
                            np.array([p[0] for p in got]),
                            np.stack([p[1] for p in got]),
                        )
                    at, pix = decoded[rel]
                    frames[i] = pix[int(np.argmin(np.abs(at - (start + float(t)))))]
            out[(name, cam)] = np.stack([frames[i] for i in range(len(frames))])
    return out


@pytest.mark.parametrize("cache_bytes", [0, 1 << 20])
@pytest.mark.parametrize("name", list(CAMERAS))
def test_random_index_sets_equal_lerobot_loader(
    name: str, cache_bytes: int, refs: dict[str, dict[str, np.ndarray]]
) -> None:
    """Random index sets (repeats, any shape, in any order) give, on every camera, the frames
    ``LeRobotDataset(..., video_backend="pyav")[i]`` returned; each seek lands on its keyframe."""
    ref = refs[name]
    n = len(ref["episode_index"])
    frames = VideoFrames(HERE / name, cache_bytes=cache_bytes)
    rng = np.random.default_rng(7)
    for cam in CAMERAS[name]:
        for shape in [(1,), (5,), (3, 4), (2, 3, 4), (n,)]:
            q = rng.integers(0, n, size=shape)
            got = frames.frames(cam, q)
            assert got.dtype == np.uint8 and got.shape == (*shape, *ref[cam].shape[1:])
            np.testing.assert_array_equal(got, ref[cam][q])
    assert frames.stats.restarts == 0 and frames.stats.seeks > 0
    assert (frames.stats.hits > 0) == (cache_bytes > 0)
    again = pickle.loads(pickle.dumps(frames))  # as a Ray actor gets it: no cache, no files
    assert again.stats.cached_bytes == 0 and not again._open
    np.testing.assert_array_equal(again.frames(cam, q), ref[cam][q])


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_request_sequences_equal_plain_decode_and_cache_stays_bounded(
    data: st.DataObject, plain: dict[tuple[str, str], np.ndarray]
) -> None:
    """Any sequence of requests, under any cache bound, decoder threads and open-file bound,
    gives the plain loop's frames; the cache never holds more bytes than its bound."""
    name, cam = data.draw(st.sampled_from(PAIRS))
    want = plain[(name, cam)]
    frame_bytes = want[0].nbytes
    bound = data.draw(st.sampled_from([0, frame_bytes, 3 * frame_bytes, 8 * frame_bytes, 1 << 30]))
    threads = data.draw(st.sampled_from([0, 1, 2]))
    open_files = data.draw(st.integers(1, 3))  # v2.1: 3 files a camera, closed and reopened
    frames = VideoFrames(
        HERE / name, cache_bytes=bound, decoder_threads=threads, max_open_files=open_files
    )
    for _ in range(data.draw(st.integers(1, 4))):
        q = np.asarray(data.draw(st.lists(st.integers(0, len(want) - 1), min_size=1, max_size=12)))
        np.testing.assert_array_equal(frames.frames(cam, q), want[q])
        assert frames.stats.cached_bytes <= bound and len(frames._open) <= open_files
    assert frames.stats.peak_cached_bytes <= bound and frames.stats.restarts == 0


def test_cache_bound_counts_decodes() -> None:
    """What the cache saves, counted: a repeat of a request decodes nothing when the windows fit,
    the same frames again without a cache, and a bound of two GOP windows holds two (evicting
    the least recently used), never more bytes."""
    root, cam = HERE / "v30_av1", "observation.images.top"
    q = np.arange(0, 23, 3)  # frames in 8 distinct GOPs (keyframes every 2 frames)

    big = VideoFrames(root)
    big.frames(cam, q)
    first = big.stats.decoded
    assert big.stats.misses == 8 and first >= len(q)
    big.frames(cam, q)
    assert big.stats.decoded == first and big.stats.hits == 8
    assert big.stats.cached_bytes == big.stats.peak_cached_bytes <= first * 32 * 32 * 3

    none = VideoFrames(root, cache_bytes=0)
    none.frames(cam, q)
    none.frames(cam, q)
    assert none.stats.decoded == 2 * first and none.stats.hits == 0
    assert none.stats.peak_cached_bytes == 0

    window = 2 * 32 * 32 * 3  # a whole 2-frame GOP window
    two = VideoFrames(root, cache_bytes=2 * window)
    two.frames(cam, [0, 1])  # GOP 0 whole
    two.frames(cam, [2, 3])  # GOP 1 whole
    before = two.stats.decoded
    two.frames(cam, [1, 3])  # both cached
    assert two.stats.decoded == before and two.stats.hits == 2
    two.frames(cam, [4, 5])  # GOP 2 evicts GOP 0, the least recently used
    assert two.stats.evicted == 1 and two.stats.cached_bytes == 2 * window
    two.frames(cam, [2])
    assert two.stats.decoded == before + 2  # GOP 1 still cached: only GOP 2 was decoded
    two.frames(cam, [0])
    assert two.stats.decoded == before + 3  # GOP 0 was evicted: decoded again (frame 0 only)
    assert two.stats.peak_cached_bytes <= 2 * window


@pytest.mark.parametrize(
    ("name", "unit"),
    [
        ("v30_av1", FrameStack(4, NStep(3))),
        ("v21_av1", FrameStack(4, NStep(3))),
        ("v30_h264", FrameStack(4, NStep(3))),
        ("v30_av1", FrameStack(2, Sequence(3))),  # [B, W, k] references
    ],
)
def test_buffer_of_references_samples_the_decoded_buffers_batches(
    name: str, unit: SampleUnit
) -> None:
    """Samples (n-step with 4-frame stacks; stacked sequences) from a buffer holding frame
    references, decoded by the connector, equal the samples of the same buffer filled with
    decoded frames: every column, row for row (the same seed draws the same steps)."""
    refs_buf = EpisodeReplayBuffer(1000, unit=unit, seed=3)
    for cols in reference_episodes(HERE / name):
        refs_buf.add(cols)
    frames_buf = EpisodeReplayBuffer(1000, unit=unit, seed=3)
    reader = make_reader(ReadConfig(format="lerobot"))
    for f in lerobot_files(HERE / name):
        frames_buf.add(reader.read(read_lerobot_file(f, DEFAULT_LIMITS), source=f).columns)
    # by its registered name, as a config's connector list names it
    decode = build_pipeline([{"name": "decode_video_frames", "root": str(HERE / name)}])
    assert decode.names == ["decode_video_frames"]
    for _ in range(3):
        got = decode(refs_buf.sample(32))
        want = frames_buf.sample(32)
        assert sorted(got.keys()) == sorted(want.keys())
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
        leaf = CAMERAS[name][0].removeprefix("observation.")
        assert got[f"obs.{leaf}"].dtype == np.uint8 and got[f"obs.{leaf}"].shape[0] == 32
        assert got[f"obs.{leaf}"].shape[-4] == unit.k  # type: ignore[attr-defined]


def test_errors_name_the_file_episode_and_frame(tmp_path: Path) -> None:
    root = Path(shutil.copytree(HERE / "v30_av1", tmp_path / "v30_av1"))
    cam = "observation.images.top"
    with pytest.raises(DataError, match="frame index 23 is not in the dataset"):
        VideoFrames(root).frames(cam, [0, 23])
    video = root / "videos" / cam / "chunk-000" / "file-000.mp4"
    video.unlink()
    with pytest.raises(DataError, match="missing") as e:
        VideoFrames(root).frames(cam, [8])
    assert "file-000.mp4" in str(e.value) and "episode 1" in str(e.value)
    assert "\n" not in str(e.value)
    shutil.copy(HERE / "v30_av1" / "videos" / cam / "chunk-000" / "file-000.mp4", video)
    data = root / "data" / "chunk-000" / "file-000.parquet"
    table = pq.read_table(data)
    ts = table.column("timestamp").to_numpy().copy()
    ts[20] += 0.05  # a timestamp off the frame grid (row 20: episode 2, frame 1)
    i = table.column_names.index("timestamp")
    pq.write_table(table.set_column(i, "timestamp", pa.array(ts)), data)
    with pytest.raises(DataError, match=r"frame 1 of the episode .* nearest frame") as e:
        VideoFrames(root).frames(cam, [19, 20])
    assert "episode 2" in str(e.value)


def test_connector_refuses_decoded_or_missing_camera_columns() -> None:
    """A batch whose camera columns hold pixels (episodes read without references) or lack a
    camera is refused in one line naming the column."""
    reader = make_reader(ReadConfig(format="lerobot"))
    f = lerobot_files(HERE / "v30_h264")[0]
    buf = EpisodeReplayBuffer(100, seed=0)
    buf.add(reader.read(read_lerobot_file(f, DEFAULT_LIMITS), source=f).columns)
    decode = DecodeVideoFrames(HERE / "v30_h264")
    batch = buf.sample(4)
    with pytest.raises(SchemaError, match=r"obs\.images\.front holds uint8.*cameras=.index."):
        decode(batch)
    del batch["obs.images.front"], batch["new_obs.images.front"]
    with pytest.raises(SchemaError, match=r"no column obs\.images\.front"):
        decode(batch)
