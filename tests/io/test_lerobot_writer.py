"""``convert --to lerobot`` (:mod:`offline_prelearner.io.formats.lerobot.writer`) and LeRobot in
to rows: rows, msgpack episodes and Minari with an image observation written as a LeRobot v3.0
dataset and read back, losslessly with ``--video-codec lossless``; LeRobot's own fixtures
converted to rows in the fast tensor layout and to LeRobot again; one-line refusals; the
commit. Real data, real PyAV; LeRobot's own ``LeRobotDataset`` opens the output where its venv
is present (``LEROBOT_PYTHON``, default ``.bench/lerobot-venv``), else that test is skipped."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from offline_prelearner.cli.app import main
from offline_prelearner.config import ReadConfig
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.errors import CommitError, ConfigError, SchemaError
from offline_prelearner.io.fast_tensor import FastTensorType
from offline_prelearner.io.formats.lerobot.writer import write_lerobot_dataset
from offline_prelearner.io.output_schema import output_schema
from offline_prelearner.io.readers import make_reader
from offline_prelearner.io.sources import detect_format, expand_paths, read_table
from offline_prelearner.jobs.convert import ConvertConfig, convert, convert_path
from offline_prelearner.jobs.convert.tables import rows_tables

pytest.importorskip("av")

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "lerobot"
LEROBOT_PYTHON = Path(os.environ.get("LEROBOT_PYTHON", REPO / ".bench/lerobot-venv/bin/python"))
#: (steps, terminated): a truncated, a terminated and a short truncated episode.
SHAPES = [(9, False), (9, True), (5, False)]


def source_episodes(side: int = 16, smooth: bool = False) -> list[Episode]:
    """Episodes with a dict observation: a uint8 camera ``pixels`` (noise, the codec's worst
    case, or smooth gradients) and a float32 ``state``; float32 actions and rewards."""
    rng = np.random.default_rng(7)
    eps = []
    for k, (steps, term) in enumerate(SHAPES):
        if smooth:
            ramp = np.linspace(0, 255, side, dtype=np.float64)
            t = np.arange(steps + 1)[:, None, None, None]
            pixels = ((ramp[None, None, :, None] + 9 * t + 40 * k) % 256).astype(np.uint8)
            pixels = np.broadcast_to(pixels, (steps + 1, side, side, 3)).copy()
        else:
            pixels = rng.integers(0, 256, (steps + 1, side, side, 3), dtype=np.uint8)
        obs = {"pixels": pixels, "state": rng.normal(size=(steps + 1, 3)).astype(np.float32)}
        eps.append(
            Episode(
                id=k,
                observations=obs,
                actions=rng.normal(size=(steps, 2)).astype(np.float32),
                rewards=rng.normal(size=steps).astype(np.float32),
                terminated=term,
                truncated=not term,
            )
        )
    return eps


def read_back(path: Path, fmt: str = "auto") -> list[Episode]:
    files = expand_paths(str(path))
    read = ReadConfig(format=detect_format(files) if fmt == "auto" else fmt)
    reader = make_reader(read)
    out: list[Episode] = []
    for f in files:
        out += list(reader.read(read_table(f), source=f).columns.iter_episodes())
    return out


def plain_image_episodes() -> list[Episode]:
    """The source's camera alone as a plain observation (msgpack records hold no dict)."""
    eps = source_episodes()
    return [
        Episode(id=e.id, observations=e.observations["pixels"], actions=e.actions,
                rewards=e.rewards, terminated=e.terminated, truncated=e.truncated)
        for e in eps
        if isinstance(e.observations, dict)
    ]  # fmt: skip


def assert_same_episodes(got: list[Episode], want: list[Episode]) -> None:
    """Every observation (frames bit for bit), action, reward and flag; a terminated episode's
    terminal observation is the last frame's again (LeRobot keeps none). A plain observation
    comes back as the one leaf ``image`` (an image) or ``state``."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert (len(g), g.terminated, g.truncated) == (len(w), w.terminated, w.truncated)
        assert isinstance(g.observations, dict)
        plain = w.observations
        wanted: dict[str, Any] = (
            dict(plain)
            if isinstance(plain, dict)
            else {"image" if plain.dtype == np.uint8 else "state": plain}
        )
        assert sorted(g.observations) == sorted(wanted)
        for leaf, want_obs in wanted.items():
            expect = np.asarray(want_obs).copy()
            if w.terminated:
                expect[-1] = expect[-2]
            assert g.observations[leaf].dtype == expect.dtype
            np.testing.assert_array_equal(g.observations[leaf], expect)
        np.testing.assert_array_equal(g.actions, w.actions)
        np.testing.assert_array_equal(g.rewards, w.rewards)


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The source as rows and its Minari conversion, its camera alone as msgpack episodes;
    each -> LeRobot (lossless, 10 fps; rows through the CLI) -> rows in the fast layout."""
    base = tmp_path_factory.mktemp("lerobot_out")
    eps, plain = source_episodes(), plain_image_episodes()
    for name, source in (("rows", eps), ("rows_plain", plain)):
        (base / name).mkdir()
        for i, table in enumerate(rows_tables(source, 10_000, "fast")):
            pq.write_table(table, base / name / f"rows-{i}.parquet")
    convert_path(base / "rows_plain", "episodes", base / "episodes")
    convert_path(base / "rows", "minari", base / "minari")
    code = main(["convert", str(base / "rows"), "--to", "lerobot", "--out", str(base / "lr_rows"),
                 "--video-codec", "lossless", "--fps", "10", "--json"])  # fmt: skip
    assert code == 0
    for src in ("episodes", "minari"):
        convert_path(base / src, "lerobot", base / f"lr_{src}", fps=10, video_codec="lossless")
    for src in ("rows", "episodes", "minari"):
        convert_path(base / f"lr_{src}", "rows", base / f"back_{src}", layout="fast")
    return {"base": base, "eps": eps, "plain": plain}


@pytest.mark.parametrize("source", ["rows", "episodes", "minari"])
def test_lossless_round_trip_gives_the_same_episodes(
    converted: dict[str, Any], source: str
) -> None:
    """rows / msgpack episodes / Minari -> lerobot -> rows: the same episodes, frames included."""
    back = converted["base"] / f"back_{source}"
    assert_same_episodes(read_back(back), converted["plain" if source == "episodes" else "eps"])
    # the frames are in the fast tensor layout
    schema = pq.read_schema(next((back / "rows").glob("rows-*.parquet")))
    leaf = "image" if source == "episodes" else "pixels"
    assert isinstance(schema.field("obs").type.field(leaf).type, FastTensorType)


def test_layout_on_disk_is_lerobot_v30(converted: dict[str, Any]) -> None:
    """info.json, the episodes table, tasks and stats as LeRobot 0.4 writes them; the job's
    manifest lists every file written, and the stats balance."""
    root = converted["base"] / "lr_rows"
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == 10
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (3, 25, 1)
    feats = info["features"]
    assert feats["observation.pixels"]["dtype"] == "video"
    assert feats["observation.pixels"]["shape"] == [16, 16, 3]
    cam = feats["observation.pixels"]["info"]
    assert (cam["video.codec"], cam["video.pix_fmt"]) == ("h264", "gbrp")  # as the file holds
    assert feats["observation.state"] == {"dtype": "float32", "shape": [3], "names": None}
    assert feats["action"]["shape"] == [2] and feats["next.done"]["dtype"] == "bool"
    episodes = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [e["length"] for e in episodes] == [10, 9, 6]  # truncated: T + 1; terminated: T
    assert [e["dataset_from_index"] for e in episodes] == [0, 10, 19]
    assert [e["videos/observation.pixels/from_timestamp"] for e in episodes] == [0.0, 1.0, 1.9]
    assert episodes[0]["stats/observation.pixels/mean"][0] == [[pytest.approx(0.5, abs=0.05)]]
    data = pq.read_table(root / "data/chunk-000/file-000.parquet")
    assert data.column("next.done").to_pylist()[10:19] == [False] * 8 + [True]
    assert data.column("index").to_pylist() == list(range(25))
    # a truncated episode's final frame: reward 0, the last action again (LeRobot's padding)
    first = converted["eps"][0]
    assert data.column("next.reward")[9].as_py() == 0.0
    np.testing.assert_array_equal(data.column("action")[9].as_py(), first.actions[-1])
    tasks = pq.read_table(root / "meta/tasks.parquet")
    assert json.loads(tasks.schema.metadata[b"pandas"])["index_columns"] == ["__index_level_0__"]
    stats = json.loads((root / "meta/stats.json").read_text())
    assert stats["observation.state"]["count"] == [25] and len(stats["action"]["q50"]) == 2
    eps = converted["eps"]
    pixels = np.concatenate(
        [e.observations["pixels"][: len(e) + (0 if e.terminated else 1)] for e in eps]
    ).reshape(-1, 3) / 255.0  # fmt: skip
    for stat, want in (("std", pixels.std(0)), ("q10", np.quantile(pixels, 0.1, axis=0))):
        np.testing.assert_allclose(np.ravel(stats["observation.pixels"][stat]), want)
    manifest = json.loads((root / "_manifest.json").read_text())
    listed = {f["name"] for f in manifest["files"]}
    assert "videos/observation.pixels/chunk-000/file-000.mp4" in listed
    assert "meta/info.json" in listed and manifest["config"]["video_codec"] == "lossless"
    job = json.loads((root / "stats.json").read_text())
    assert job["to"] == "lerobot" and job["balanced"] and job["episodes_written"] == 3
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator(output_schema("manifest")).validate(manifest)
    jsonschema.Draft202012Validator(output_schema("convert-stats")).validate(job)


def test_lerobot_fixture_to_rows_and_to_lerobot_again(tmp_path: Path) -> None:
    """LeRobot's own dataset (two cameras, AV1, two tasks) -> rows (fast): its decoded frames;
    -> lerobot (lossless): the same frames, each episode's task, its fps and robot type (v2.1
    too); cut into several data files."""
    ref = np.load(FIXTURES / "v30_av1.frames.npz")
    convert_path(FIXTURES / "v30_av1", "rows", tmp_path / "rows", layout="fast")
    rows = read_back(tmp_path / "rows")
    first = rows[0].observations
    assert isinstance(first, dict)
    np.testing.assert_array_equal(first["images.top"][:7], ref["observation.images.top"][:7])
    for name in ("v30_av1", "v21_av1"):  # v2.1 in, v3.0 out
        source = read_back(FIXTURES / name)
        convert(FIXTURES / name, tmp_path / f"lr_{name}",
                ConvertConfig("lerobot", video_codec="lossless"))  # fmt: skip
        info = json.loads((tmp_path / f"lr_{name}/meta/info.json").read_text())
        was = json.loads((FIXTURES / name / "meta/info.json").read_text())
        assert (info["fps"], info["robot_type"]) == (was["fps"], was["robot_type"])
        again = read_back(tmp_path / f"lr_{name}")
        assert_same_episodes(again, source)
        for g, w in zip(again, source, strict=True):
            assert g.extras["task"].tolist() == w.extras["task"].tolist()
    source = read_back(FIXTURES / "v30_av1")
    # several data files: the writer cuts between episodes, never inside one
    written = write_lerobot_dataset(tmp_path / "cut", source, fps=10, codec="lossless",
                                    frames_per_file=12)  # fmt: skip
    data = [name for name, _ in written if name.startswith("data/")]
    assert data == [f"data/chunk-000/file-{i:03d}.parquet" for i in range(3)]
    assert_same_episodes(read_back(tmp_path / "cut", "lerobot"), source)


def test_default_codec_is_lerobots_av1(tmp_path: Path) -> None:
    """The default codec is LeRobot's (libsvtav1, yuv420p): lossy, the frames near the source."""
    eps = source_episodes(side=32, smooth=True)
    write_lerobot_dataset(tmp_path / "av1", eps, fps=10)
    info = json.loads((tmp_path / "av1/meta/info.json").read_text())
    cam = info["features"]["observation.pixels"]["info"]
    assert (cam["video.codec"], cam["video.pix_fmt"]) == ("av1", "yuv420p")
    back = read_back(tmp_path / "av1", "lerobot")
    for g, w in zip(back, eps, strict=True):
        n = len(w) + (0 if w.terminated else 1)
        diff = np.abs(g.observations["pixels"][:n].astype(int) - w.observations["pixels"][:n])
        assert diff.mean() < 8


def test_refusals_are_one_line_and_commit_nothing(tmp_path: Path) -> None:
    """A camera libsvtav1 would crash on, odd sides for 4:2:0, a text extra: one line, and the
    job leaves --out as it was; a non-empty --out is refused; --resume is refused."""
    rows = tmp_path / "rows"
    rows.mkdir()
    for i, table in enumerate(rows_tables(source_episodes(), 10_000, "fast")):
        pq.write_table(table, rows / f"rows-{i}.parquet")
    with pytest.raises(ConfigError, match=r"camera 'observation.pixels' is 16 pixels wide") as e:
        convert_path(rows, "lerobot", tmp_path / "out")
    assert "\n" not in str(e.value) and not (tmp_path / "out").exists()
    odd = [Episode(id=0, observations=np.zeros((3, 6, 5, 3), np.uint8),
                   actions=np.zeros(2, np.int64), rewards=np.zeros(2))]  # fmt: skip
    with pytest.raises(ConfigError, match=r"'observation.image' is 6x5.*even sides"):
        write_lerobot_dataset(tmp_path / "odd", odd, fps=10, codec="h264")
    text = [Episode(id=0, observations=np.zeros((3, 2), np.float32), actions=np.zeros(2),
                    rewards=np.zeros(2), extras={"note": np.array(["a", "b"])})]  # fmt: skip
    with pytest.raises(SchemaError, match=r"extra column 'note'"):
        write_lerobot_dataset(tmp_path / "text", text, fps=10)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(CommitError):
        convert_path(rows, "lerobot", tmp_path / "full", video_codec="lossless")
    with pytest.raises(ConfigError, match="--resume"):
        convert_path(rows, "lerobot", tmp_path / "r", video_codec="lossless", resume=True)


def test_plain_observations_become_observation_state(tmp_path: Path) -> None:
    """A plain (non-dict) observation is ``observation.state`` (an image: ``observation.image``),
    read back as that one leaf; scalar discrete actions are LeRobot's shape [1]."""
    obs = np.arange(8, dtype=np.float32).reshape(4, 2)
    eps = [Episode(id=0, observations=obs, actions=np.array([0, 1, 1]),
                   rewards=np.ones(3, np.float32), truncated=True)]  # fmt: skip
    write_lerobot_dataset(tmp_path / "plain", eps, fps=5)
    info = json.loads((tmp_path / "plain/meta/info.json").read_text())
    assert info["features"]["action"] == {"dtype": "int64", "shape": [1], "names": None}
    assert info["video_path"] is None
    (back,) = read_back(tmp_path / "plain", "lerobot")
    assert isinstance(back.observations, dict)
    np.testing.assert_array_equal(back.observations["state"], eps[0].observations)
    np.testing.assert_array_equal(back.actions, [0, 1, 1])


LEROBOT_SCRIPT = """
import json, sys
import numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset
out = {}
for name in sys.argv[2:]:
    ds = LeRobotDataset("local/" + name, root=sys.argv[1] + "/" + name, video_backend="pyav")
    items = [ds[i] for i in range(len(ds))]
    out[name] = {
        "len": len(ds), "episodes": ds.num_episodes, "fps": ds.fps,
        "frames": {k: [(it[k].numpy().transpose(1, 2, 0) * 255).round().astype(np.uint8)
                       .tolist() for it in items] for k in ds.meta.video_keys},
        "action": [it["action"].tolist() for it in items],
        "done": [bool(it["next.done"]) for it in items],
        "task": sorted({it["task"] for it in items}),
    }
json.dump(out, sys.stdout)
"""


@pytest.mark.skipif(
    not LEROBOT_PYTHON.exists(),
    reason=f"LeRobot's venv is not built ({LEROBOT_PYTHON}; bash benchmarks/setup_lerobot.sh, "
    "or set LEROBOT_PYTHON)",
)
def test_lerobot_opens_what_we_write(converted: dict[str, Any], tmp_path: Path) -> None:
    """LeRobot 0.4.4's ``LeRobotDataset`` (PyAV backend) opens the lossless and the default
    (AV1) output; its frames of the lossless one are the source's bit for bit; LeRobot's own
    two-camera dataset converted to LeRobot again (lossless) gives LeRobot the frames it
    decoded from the original."""
    root = converted["base"]
    shutil.copytree(root / "lr_rows", tmp_path / "lossless")
    write_lerobot_dataset(tmp_path / "av1", source_episodes(32, smooth=True), fps=10)
    convert_path(FIXTURES / "v30_av1", "lerobot", tmp_path / "again", fps=10,
                 video_codec="lossless")  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_LEROBOT_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [str(LEROBOT_PYTHON), "-c", LEROBOT_SCRIPT, str(tmp_path), "lossless", "av1", "again"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    eps = converted["eps"]
    frames = np.concatenate(
        [e.observations["pixels"][: len(e) + (0 if e.terminated else 1)] for e in eps]
    )
    lossless = got["lossless"]
    assert (lossless["len"], lossless["episodes"], lossless["fps"]) == (25, 3, 10)
    pixels = lossless["frames"]["observation.pixels"]
    np.testing.assert_array_equal(np.asarray(pixels, np.uint8), frames)
    assert lossless["done"].count(True) == 1 and lossless["task"] == ["default"]
    np.testing.assert_array_equal(np.asarray(lossless["action"], np.float32)[:9], eps[0].actions)
    assert got["av1"]["len"] == 25 and got["av1"]["episodes"] == 3
    ref = np.load(FIXTURES / "v30_av1.frames.npz")
    assert sorted(got["again"]["frames"]) == ["observation.images.top", "observation.images.wrist"]
    for cam, decoded in got["again"]["frames"].items():
        np.testing.assert_array_equal(np.asarray(decoded, np.uint8), ref[cam])
