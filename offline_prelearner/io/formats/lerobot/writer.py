"""Episodes -> a LeRobot dataset, format v3.0 (what LeRobot 0.4 writes and ``LeRobotDataset``
opens), written with pyarrow and PyAV; LeRobot itself is not needed.

:func:`write_lerobot_dataset` writes, under a root folder::

    meta/info.json                            codebase_version "v3.0", fps, features, paths
    meta/tasks.parquet                        task_index, indexed by the task's text
    meta/episodes/chunk-000/file-000.parquet  one row an episode: length, tasks, its data file
                                              and frame range, per camera its video file and
                                              from/to timestamps, its stats (stats/<f>/<s>)
    meta/stats.json                           per feature: min, max, mean, std, count, q01..q99
                                              (exact; a camera's from its pixel histograms)
    data/chunk-CCC/file-FFF.parquet           one row a frame
    videos/<camera>/chunk-CCC/file-FFF.mp4    one video a camera and data file, the episodes'
                                              frames one after the other (pts = frame / fps)

**Frames.** A LeRobot frame is an observation, the action taken from it, ``next.reward`` and
``next.done``. An episode of ``T`` steps (``T + 1`` observations) becomes

* terminated: ``T`` frames, ``next.done`` set on the last; the terminal observation (after the
  last action) has no frame -- LeRobot keeps none, and nothing bootstraps from it; our reader
  gives back a copy of the last frame's observation there;
* truncated, or not done (a fragment): ``T + 1`` frames, the last one the final observation,
  ``next.done`` unset, its reward 0, its action and extras the last step's again (LeRobot's
  own padding past an episode's end repeats the last frame too; an episode of no step: zeros).
  Our reader drops that frame's action, as D4RL's rule says.

So ``rows -> lerobot -> rows`` (with a lossless codec) gives back every observation, action,
reward and flag, except a terminated episode's terminal observation.

**Features** (names in ``info.json``):

* an observation leaf ``k`` of a composite (dict) observation -> ``observation.k`` (a nested
  leaf ``a.b`` -> ``observation.a.b``); a plain observation -> ``observation.state``, or
  ``observation.image`` where it is an image; our reader reads ``observation.k`` as leaf ``k``,
  so a plain observation comes back as the one-leaf dict ``{"state": ...}``;
* an image leaf (``uint8`` ``[H, W, 3]`` per step) -> a camera, ``dtype: "video"``, encoded with
  PyAV (:data:`VIDEO_CODECS`); every other leaf -> a numeric feature of its dtype and step shape
  (a scalar, or a ``[1]`` vector, is LeRobot's shape ``[1]``, one number a frame: it reads back
  as a scalar);
* ``action`` (the same shape rule), ``next.reward`` (float32, LeRobot's type), ``next.done``
  (bool); per-step extras by their own names (numbers and bools), except ``task``: a text extra
  (what our reader gives from a LeRobot dataset) that sets each frame's task; without it every
  frame has the task ``task`` (the env id, else ``"default"``). The extras our reader derives
  from a LeRobot dataset (``timestamp``, ``task_index``...) are written afresh, not copied;
* LeRobot's own columns: ``timestamp`` (``frame_index / fps``, float32), ``frame_index``,
  ``episode_index`` (``0..n-1`` in order: LeRobot indexes episodes by position, so ids, agent /
  module ids, infos and ``t_started`` are not kept), ``index`` (the frame in the dataset) and
  ``task_index``.

**Videos** (:data:`VIDEO_CODECS`): ``"av1"`` (LeRobot's default: libsvtav1, yuv420p, a keyframe
every 2 frames, crf 30, preset 12; lossy, as LeRobot's own datasets), ``"h264"`` (LeRobot's
``vcodec="h264"``: libx264, yuv420p, gop 2, crf 30; lossy), ``"lossless"`` (libx264rgb, rgb24,
qp 0, gop 2: H.264 High 4:4:4 Predictive; the decoded frames are the written ones bit for bit,
and LeRobot's PyAV loader decodes them). libsvtav1 crashes the process (SIGFPE) on frames
narrower than 26 pixels, and 4:2:0 needs even sides: such cameras are refused in one line
before anything is encoded.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ....episodes.episode import Episode
from ....errors import ConfigError, SchemaError, Where
from ...optional import import_av

__all__ = [
    "CODEBASE_VERSION",
    "DEFAULT_FPS",
    "VIDEO_CODECS",
    "VideoCodec",
    "feature_name",
    "write_lerobot_dataset",
]

#: The LeRobot format written.
CODEBASE_VERSION = "v3.0"
#: ``convert --to lerobot``'s frames per second where neither ``--fps`` nor the source says.
DEFAULT_FPS = 30
VideoCodec = Literal["av1", "h264", "lossless"]
#: ``--video-codec`` -> (PyAV encoder, pixel format, encoder options).
VIDEO_CODECS: dict[str, tuple[str, str, dict[str, str]]] = {
    "av1": ("libsvtav1", "yuv420p", {"g": "2", "crf": "30", "preset": "12"}),
    "h264": ("libx264", "yuv420p", {"g": "2", "crf": "30"}),
    "lossless": ("libx264rgb", "rgb24", {"g": "2", "qp": "0"}),
}
#: libsvtav1 (SVT-AV1 3.0) dies with SIGFPE on narrower frames (24 wide crashes, 26 does not).
_SVT_MIN_WIDTH = 26
_CHUNKS_SIZE = 1000  # files per chunk folder, LeRobot's DEFAULT_CHUNK_SIZE
_DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
_VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
_EPISODES_FILE = "meta/episodes/chunk-000/file-000.parquet"
#: Columns our reader derives from a LeRobot dataset: written afresh, never copied as extras.
_DERIVED = ("timestamp", "frame_index", "episode_index", "index", "task_index", "task")
_QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)


@dataclass(frozen=True)
class _Feature:
    """One feature written: where its per-step values come from and how LeRobot declares it."""

    name: str
    source: Literal["obs", "action", "extra"]
    key: str  # the observation leaf ("" for a plain observation) or the extra's name
    dtype: np.dtype[Any]
    shape: tuple[int, ...]  # the step shape

    @property
    def video(self) -> bool:
        return self.source == "obs" and _is_image(self.dtype, self.shape)

    def declared(self, fps: int, codec: str) -> dict[str, Any]:
        """The feature's entry in ``info.json``."""
        if self.video:
            h, w, c = self.shape
            encoder, pix_fmt, _ = VIDEO_CODECS[codec]
            return {
                "dtype": "video",
                "shape": [h, w, c],
                "names": ["height", "width", "channels"],
                "info": {
                    "video.height": h,
                    "video.width": w,
                    "video.codec": "av1" if encoder == "libsvtav1" else "h264",
                    "video.pix_fmt": pix_fmt,
                    "video.is_depth_map": False,
                    "video.fps": fps,
                    "video.channels": c,
                    "has_audio": False,
                },
            }
        return {"dtype": _dtype_name(self.dtype), "shape": list(_lerobot_shape(self.shape)),
                "names": None}  # fmt: skip

    def values(self, ep: Episode) -> np.ndarray:
        """The episode's per-step values: ``[T + 1, ...]`` observations, ``[T, ...]`` others."""
        if self.source == "obs":
            obs = ep.observations
            return np.asarray(obs[self.key] if isinstance(obs, dict) else obs)
        if self.source == "action":
            return np.asarray(ep.actions)
        return np.asarray(ep.extras[self.key])


def _is_image(dtype: np.dtype[Any], shape: tuple[int, ...]) -> bool:
    return dtype == np.uint8 and len(shape) == 3 and shape[2] == 3


def _lerobot_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (1,) if shape in ((), (1,)) else shape


def _dtype_name(dtype: np.dtype[Any]) -> str:
    return "bool" if dtype.kind == "b" else str(dtype)


def feature_name(leaf: str | None, image: bool) -> str:
    """The LeRobot feature an observation leaf is written as.

    Args:
        leaf: The leaf's path in a composite observation (``"pixels"``, ``"a.b"``); None for a
            plain (non-dict) observation.
        image: Whether the leaf holds images (``uint8 [H, W, 3]`` a step).

    Returns:
        ``observation.<leaf>``; for a plain observation ``observation.image`` (an image) or
        ``observation.state``.
    """
    if leaf is None:
        return "observation.image" if image else "observation.state"
    return f"observation.{leaf}"


def _features(ep: Episode) -> list[_Feature]:
    """The features of the dataset, from its first episode (the others must match)."""
    out: list[_Feature] = []
    obs = ep.observations
    leaves = obs.items() if isinstance(obs, dict) else [(None, obs)]
    for leaf, arr in leaves:
        a = np.asarray(arr)
        step = tuple(a.shape[1:])
        name = feature_name(leaf, _is_image(a.dtype, step))
        out.append(_Feature(name, "obs", leaf or "", a.dtype, step))
    act = np.asarray(ep.actions)
    out.append(_Feature("action", "action", "", act.dtype, tuple(act.shape[1:])))
    for key, arr in ep.extras.items():
        a = np.asarray(arr)
        if key in _DERIVED:
            continue
        if a.dtype.kind not in "biuf":
            raise SchemaError(
                f"extra column {key!r} holds {a.dtype} values; a LeRobot feature holds numbers "
                "or bools (only 'task' may hold text)",
                Where(column=key, episode_id=ep.id),
            )
        out.append(_Feature(key, "extra", key, a.dtype, tuple(a.shape[1:])))
    names = [f.name for f in out]
    clash = sorted({n for n in names if names.count(n) > 1 or "/" in n}
                   | {n for n in names if n in ("next.reward", "next.done")})  # fmt: skip
    if clash:
        raise SchemaError(
            f"feature names {clash} repeat, hold '/' or are LeRobot's own; rename the "
            "observation leaves or extras",
            Where(episode_id=ep.id),
        )
    return out


def _check_episode(ep: Episode, features: list[_Feature], k: int) -> None:
    for f in features:
        if f.source == "extra" and f.key not in ep.extras:
            raise SchemaError(
                f"episode {k} lacks the extra column {f.key!r} the first episode has",
                Where(column=f.key, episode_id=ep.id),
            )
        try:
            a = f.values(ep)
        except (KeyError, TypeError):
            raise SchemaError(
                f"episode {k}'s observations lack the leaf {f.key!r} the first episode has",
                Where(column=f.name, episode_id=ep.id),
            ) from None
        if a.dtype != f.dtype or tuple(a.shape[1:]) != f.shape:
            raise SchemaError(
                f"feature {f.name!r} is {a.dtype} {list(a.shape[1:])} in episode {k}, "
                f"{f.dtype} {list(f.shape)} in the first; one LeRobot dataset holds one layout "
                "(convert the episodes apart)",
                Where(column=f.name, episode_id=ep.id),
            )


def _check_cameras(features: list[_Feature], codec: str) -> None:
    encoder = VIDEO_CODECS[codec][0]
    for f in features:
        if not f.video:
            continue
        h, w, _ = f.shape
        if encoder == "libsvtav1" and w < _SVT_MIN_WIDTH:
            raise ConfigError(
                f"camera {f.name!r} is {w} pixels wide: libsvtav1 (video codec 'av1') crashes on "
                f"frames under {_SVT_MIN_WIDTH} wide; use video codec 'h264' or 'lossless'"
            )
        if VIDEO_CODECS[codec][1] == "yuv420p" and (h % 2 or w % 2):
            raise ConfigError(
                f"camera {f.name!r} is {h}x{w}: video codec {codec!r} (4:2:0) needs even "
                "sides; use video codec 'lossless'"
            )


def _frames_of(ep: Episode) -> int:
    """Frames an episode is written as (see the module docstring)."""
    return len(ep) if ep.terminated else len(ep) + 1


def _step_column(f: _Feature, eps: Sequence[Episode]) -> np.ndarray:
    """The feature's values of every frame of ``eps``: observations as they are (a terminated
    episode's terminal one dropped), per-step values with the last step's again on a final
    frame (zeros for an episode of no step)."""
    parts = []
    for ep in eps:
        a = f.values(ep)
        n = _frames_of(ep)
        if len(a) >= n:
            parts.append(a[:n])
        else:
            pad = a[-1:] if len(a) else np.zeros((1, *a.shape[1:]), a.dtype)
            parts += [a, pad]
    return np.concatenate(parts) if parts else np.zeros((0, *f.shape), f.dtype)


def _arrow_column(values: np.ndarray) -> pa.Array:
    """One frame per row: a scalar, or nested fixed-size lists of the step shape (LeRobot's
    ``Value`` / ``List(length=n)`` / ``ArrayND``)."""
    arr = values.reshape(len(values)) if values.shape[1:] in ((), (1,)) else values
    out: pa.Array = pa.array(np.ascontiguousarray(arr).reshape(-1))
    for size in reversed(arr.shape[1:]):
        out = pa.FixedSizeListArray.from_arrays(out, size)
    return out


def _stats(values: np.ndarray) -> dict[str, Any]:
    """LeRobot's stats of one numeric feature: per component min, max, mean, std, q01..q99
    (numpy's linear quantiles), and the frame count."""
    count = len(values)
    if not count:
        return {}
    x = values.reshape(count, -1).astype(np.float64)
    out: dict[str, Any] = {
        "min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0),
    }  # fmt: skip
    for q, row in zip(_QUANTILES, np.quantile(x, _QUANTILES, axis=0), strict=True):
        out[f"q{round(q * 100):02d}"] = row
    shape = _lerobot_shape(tuple(values.shape[1:]))
    res: dict[str, Any] = {k: v.reshape(shape).tolist() for k, v in out.items()}
    res["count"] = [count]
    return res


def _histogram(frames: np.ndarray) -> np.ndarray:
    """Per channel, how many pixels of ``frames`` (``uint8 [N, H, W, C]``) hold each value:
    ``int64 [C, 256]``, one ``bincount`` a channel."""
    flat = frames.reshape(-1, frames.shape[-1])
    return np.stack([np.bincount(flat[:, c], minlength=256) for c in range(flat.shape[1])])


def _image_stats(hist: np.ndarray, count: int) -> dict[str, Any]:
    """LeRobot's stats of a camera over ``count`` frames from their :func:`_histogram`: per
    channel (``[C, 1, 1]``, in ``[0, 1]``) min, max, mean, std and q01..q99, exactly what numpy
    gives over every pixel (256 values: the quantiles are read off the cumulative counts)."""
    if not count:
        return {}
    value = np.arange(256, dtype=np.float64) / 255.0
    n = hist.sum(1).astype(np.float64)
    mean = (hist * value).sum(1) / n
    var = np.maximum((hist * value**2).sum(1) / n - mean**2, 0.0)
    seen = hist > 0
    out: dict[str, Any] = {
        "min": value[seen.argmax(1)],
        "max": value[255 - seen[:, ::-1].argmax(1)],
        "mean": mean,
        "std": np.sqrt(var),
    }
    cum = np.cumsum(hist, 1)
    for q in _QUANTILES:
        pos = q * (n - 1)
        lo = np.floor(pos)
        # the value at sorted position k: the first bin whose cumulative count exceeds k
        hi = np.minimum(lo + 1, n - 1)
        low = np.array([value[np.searchsorted(cum[c], lo[c], side="right")] for c in range(len(n))])
        high = np.array(
            [value[np.searchsorted(cum[c], hi[c], side="right")] for c in range(len(n))]
        )
        out[f"q{round(q * 100):02d}"] = low + (pos - lo) * (high - low)
    shape = (len(hist), 1, 1)
    res: dict[str, Any] = {k: np.asarray(v).reshape(shape).tolist() for k, v in out.items()}
    res["count"] = [count]
    return res


def _encode(path: Path, episodes: list[np.ndarray], fps: int, codec: str, name: str) -> str:
    """The episodes' frames (each ``uint8 [n, H, W, 3]``), one after the other, as one mp4:
    frame ``i`` at ``i / fps`` s (no copy of them all is made); returns the pixel format the
    file holds, as LeRobot's ``get_video_info`` reads it (libx264rgb stores ``gbrp``)."""
    av = import_av(f"encoding the camera video of {name!r}")
    encoder, pix_fmt, options = VIDEO_CODECS[codec]
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with av.open(str(path), "w") as container:
            stream = container.add_stream(encoder, rate=fps, options=dict(options))
            stream.width, stream.height = int(episodes[0].shape[2]), int(episodes[0].shape[1])
            stream.pix_fmt = pix_fmt
            for i, frame in enumerate(itertools.chain.from_iterable(episodes)):
                vf = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
                vf.pts = i
                container.mux(stream.encode(vf))
            container.mux(stream.encode(None))
        with av.open(str(path)) as written:
            return str(written.streams.video[0].pix_fmt)
    except av.error.FFmpegError as e:
        raise ConfigError(
            f"{path}: encoding camera {name!r} with {encoder} failed: {str(e).splitlines()[0]}"
        ) from None


def _tasks_table(tasks: list[str]) -> pa.Table:
    """``meta/tasks.parquet`` as pandas writes LeRobot's ``DataFrame({"task_index": ...},
    index=tasks)``: the text is the (pandas) index, so ``pd.read_parquet`` restores it."""
    pandas_meta = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode",
                            "numpy_type": "object", "metadata": {"encoding": "UTF-8"}}],
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
             "numpy_type": "int64", "metadata": None},
            {"name": None, "field_name": "__index_level_0__", "pandas_type": "unicode",
             "numpy_type": "object", "metadata": None},
        ],
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.0",
    }  # fmt: skip
    table = pa.table({
        "task_index": pa.array(np.arange(len(tasks), dtype=np.int64)),
        "__index_level_0__": pa.array(tasks, pa.string()),
    })  # fmt: skip
    return table.replace_schema_metadata({"pandas": json.dumps(pandas_meta)})


def _episode_tasks(ep: Episode, default: str) -> tuple[list[str], np.ndarray]:
    """The episode's tasks in first-seen order, and each frame's position in that list: from
    its ``task`` extra (the last step's for a final frame), else ``default`` for all."""
    n = _frames_of(ep)
    task = ep.extras.get("task")
    if task is None or not len(task):
        return [default], np.zeros(n, np.int64)
    uniq, first, inverse = np.unique(
        np.asarray(task).astype(str), return_index=True, return_inverse=True
    )
    order = np.argsort(first)
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    local = rank[inverse.reshape(-1)]
    local = np.r_[local, np.full(max(n - len(local), 0), local[-1])][:n]
    return [str(t) for t in uniq[order]], local


def write_lerobot_dataset(
    root: str | os.PathLike[str],
    episodes: Sequence[Episode],
    *,
    fps: int,
    codec: VideoCodec = "av1",
    task: str = "default",
    robot_type: str | None = None,
    frames_per_file: int = 100_000,
) -> list[tuple[str, int]]:
    """Writes ``episodes`` as a LeRobot v3.0 dataset under ``root`` (see the module docstring).

    Args:
        root: The dataset's folder (created; its ``meta``, ``data`` and ``videos`` are written).
        episodes: The episodes, written as episodes ``0..n-1`` in this order; all of one layout
            (the observation leaves, actions and extras of the first, same dtypes and shapes).
        fps: Frames per second (``info.json``'s ``fps``; timestamps are ``frame_index / fps``).
        codec: How cameras are encoded: ``"av1"`` (LeRobot's default), ``"h264"`` or
            ``"lossless"`` (:data:`VIDEO_CODECS`).
        task: The task of the frames of an episode without a ``task`` extra.
        robot_type: ``info.json``'s ``robot_type``; None: unknown.
        frames_per_file: At most this many frames per data file (and per video), never cutting
            an episode (a longer episode is a file of its own).

    Returns:
        ``(file relative to root, frames)`` for every file written (the episodes table: its
        episodes; the other metadata files: 0).

    Raises:
        ConfigError: ``fps`` below 1, a camera the codec cannot encode (odd sides for 4:2:0,
            libsvtav1 and frames under 26 wide), or the encoder failed (naming the file).
        SchemaError: An episode whose features differ from the first one's, an extra column
            that is not numeric, or feature names LeRobot refuses.
    """
    if not isinstance(fps, int) or isinstance(fps, bool) or fps < 1:
        raise ConfigError(f"fps must be a positive integer (LeRobot's fps), found {fps!r}")
    if codec not in VIDEO_CODECS:
        raise ConfigError(f"video codec must be one of {sorted(VIDEO_CODECS)}, found {codec!r}")
    eps = list(episodes)
    features = _features(eps[0]) if eps else []
    for k, ep in enumerate(eps):
        _check_episode(ep, features, k)
    _check_cameras(features, codec)
    out = _Out(Path(root), features, fps, codec, [_episode_tasks(ep, task) for ep in eps])
    lengths = [_frames_of(ep) for ep in eps]
    group: list[int] = []
    rows = 0
    for k, n in enumerate(lengths):
        if group and rows + n > frames_per_file:
            out.write_file(eps, group)
            group, rows = [], 0
        group.append(k)
        rows += n
    if group:
        out.write_file(eps, group)
    return out.written + _write_meta(out, robot_type, len(eps))


class _Out:
    """The dataset being written: its features, tasks, the files written so far, the episodes'
    rows of ``meta/episodes`` and the frames each feature's stats are taken over."""

    def __init__(
        self,
        base: Path,
        features: list[_Feature],
        fps: int,
        codec: str,
        tasks: list[tuple[list[str], np.ndarray]],
    ) -> None:
        self.base, self.features, self.fps, self.codec = base, features, fps, codec
        self.cameras = [f for f in features if f.video]
        self.task_ids: dict[str, int] = {}  # first-seen order
        self.episode_tasks = [texts for texts, _ in tasks]
        #: each episode's frames' task_index
        self.task_index: list[np.ndarray] = []
        for texts, local in tasks:
            ids = [self.task_ids.setdefault(t, len(self.task_ids)) for t in texts]
            self.task_index.append(np.asarray(ids, np.int64)[local])
        self.written: list[tuple[str, int]] = []
        self.ep_rows: dict[str, list[Any]] = {}
        self.stat_parts: dict[str, list[np.ndarray]] = {}  # a numeric feature's values
        self.histograms: dict[str, np.ndarray] = {}  # a camera's, over the episodes so far
        self.pix_fmts: dict[str, str] = {}
        self.frames = 0  # written so far: the next frame's global index
        self.files = 0

    def write_file(self, eps: list[Episode], group: list[int]) -> None:
        """One data file (and a video a camera) of the episodes ``group``, and their rows of
        the episodes table."""
        chunk, fidx = divmod(self.files, _CHUNKS_SIZE)
        members = [eps[k] for k in group]
        n_frames = np.array([_frames_of(e) for e in members], np.int64)
        starts = np.r_[0, np.cumsum(n_frames)[:-1]].astype(np.int64)
        total = int(n_frames.sum())
        # cameras are not concatenated: each episode's frames are encoded (and counted) as held
        values = {f.name: _step_column(f, members) for f in self.features if not f.video}
        frames = {c.name: [c.values(e)[: _frames_of(e)] for e in members] for c in self.cameras}
        padded = [np.zeros(_frames_of(e) - len(e), np.float32) for e in members]
        values["next.reward"] = np.concatenate(
            [np.r_[np.asarray(e.rewards, np.float32), pad] for e, pad in zip(members, padded,
                                                                              strict=True)]
        )  # fmt: skip
        done = np.zeros(total, bool)
        done[starts + n_frames - 1] = [e.terminated for e in members]
        values["next.done"] = done
        frame_index = np.arange(total, dtype=np.int64) - np.repeat(starts, n_frames)
        values["timestamp"] = (frame_index / self.fps).astype(np.float32)
        values["frame_index"] = frame_index
        values["episode_index"] = np.repeat(np.asarray(group, np.int64), n_frames)
        values["index"] = np.arange(self.frames, self.frames + total, dtype=np.int64)
        values["task_index"] = np.concatenate([self.task_index[k] for k in group])
        data_name = _DATA_PATH.format(chunk_index=chunk, file_index=fidx)
        (self.base / data_name).parent.mkdir(parents=True, exist_ok=True)
        table = pa.table({k: _arrow_column(v) for k, v in values.items()})
        pq.write_table(table, self.base / data_name, compression="snappy")
        self.written.append((data_name, total))
        for cam in self.cameras:
            name = _VIDEO_PATH.format(video_key=cam.name, chunk_index=chunk, file_index=fidx)
            self.pix_fmts[cam.name] = _encode(
                self.base / name, frames[cam.name], self.fps, self.codec, cam.name
            )
            self.written.append((name, total))
        for j, k in enumerate(group):
            s, n = int(starts[j]), int(n_frames[j])
            own = {name: v[s : s + n] for name, v in values.items()}
            own.update({name: parts[j] for name, parts in frames.items()})
            self._episode_row(k, chunk, fidx, s, n, own)
        self.frames += total
        self.files += 1

    def _episode_row(
        self, k: int, chunk: int, fidx: int, start: int, n: int, own: dict[str, np.ndarray]
    ) -> None:
        """Episode ``k``'s row of the episodes table: its frames ``start..start + n`` of the
        data file ``(chunk, fidx)``, its videos' time span, its stats (``own``: its values)."""
        row: dict[str, Any] = {
            "episode_index": k,
            "tasks": self.episode_tasks[k],
            "length": n,
            "data/chunk_index": chunk,
            "data/file_index": fidx,
            "dataset_from_index": self.frames + start,
            "dataset_to_index": self.frames + start + n,
        }
        for cam in self.cameras:
            row[f"videos/{cam.name}/chunk_index"] = chunk
            row[f"videos/{cam.name}/file_index"] = fidx
            row[f"videos/{cam.name}/from_timestamp"] = start / self.fps
            row[f"videos/{cam.name}/to_timestamp"] = (start + n) / self.fps
        for name, v in own.items():
            if name in self.pix_fmts:  # a camera: its histogram, summed over the episodes
                hist = _histogram(v)
                stats = _image_stats(hist, len(v))
                total = self.histograms.get(name)
                self.histograms[name] = hist if total is None else total + hist
            else:
                stats = _stats(v)
                self.stat_parts.setdefault(name, []).append(v)
            for stat, value in stats.items():
                row[f"stats/{name}/{stat}"] = value
        row["meta/episodes/chunk_index"] = 0
        row["meta/episodes/file_index"] = 0
        for key, value in row.items():
            self.ep_rows.setdefault(key, []).append(value)


def _write_meta(out: _Out, robot_type: str | None, n_episodes: int) -> list[tuple[str, int]]:
    """``meta/``: the episodes table, ``tasks.parquet``, ``stats.json`` and ``info.json``."""
    base = out.base
    meta = base / "meta"
    (base / _EPISODES_FILE).parent.mkdir(parents=True, exist_ok=True)
    empty = {"episode_index": pa.array([], pa.int64())}
    pq.write_table(pa.table(out.ep_rows or empty), base / _EPISODES_FILE)
    pq.write_table(_tasks_table(list(out.task_ids)), meta / "tasks.parquet")
    stats = {name: _stats(np.concatenate(parts)) for name, parts in out.stat_parts.items()}
    for name, hist in out.histograms.items():
        stats[name] = _image_stats(hist, out.frames)
    (meta / "stats.json").write_text(json.dumps(stats, indent=4))
    declared: dict[str, Any] = {}
    for f in out.features:
        declared[f.name] = f.declared(out.fps, out.codec)
        if f.name in out.pix_fmts:
            declared[f.name]["info"]["video.pix_fmt"] = out.pix_fmts[f.name]
    declared["next.reward"] = {"dtype": "float32", "shape": [1], "names": None}
    declared["next.done"] = {"dtype": "bool", "shape": [1], "names": None}
    declared["timestamp"] = {"dtype": "float32", "shape": [1], "names": None}
    for name in ("frame_index", "episode_index", "index", "task_index"):
        declared[name] = {"dtype": "int64", "shape": [1], "names": None}
    info = {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": robot_type,
        "total_episodes": n_episodes,
        "total_frames": out.frames,
        "total_tasks": len(out.task_ids),
        "chunks_size": _CHUNKS_SIZE,
        "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 200,
        "fps": out.fps,
        "splits": {"train": f"0:{n_episodes}"},
        "data_path": _DATA_PATH,
        "video_path": _VIDEO_PATH if out.cameras else None,
        "features": declared,
    }
    (meta / "info.json").write_text(json.dumps(info, indent=4))
    return [(_EPISODES_FILE, n_episodes), ("meta/tasks.parquet", 0),
            ("meta/stats.json", 0), ("meta/info.json", 0)]  # fmt: skip
