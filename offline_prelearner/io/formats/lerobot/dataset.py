"""LeRobot datasets on disk: the root, its ``meta/info.json``, its episodes, its data files.

A LeRobot dataset is a folder (its *root*) holding::

    meta/info.json                       codebase_version, fps, features, data_path, video_path
    meta/episodes/chunk-*/file-*.parquet (v3.0) episode_index, length, tasks, and per camera
                                         videos/<key>/{chunk_index,file_index,from_timestamp}
    meta/episodes.jsonl                  (v2.1) episode_index, tasks, length
    meta/tasks.parquet | tasks.jsonl     task_index -> the task's text
    data/chunk-*/file-*.parquet          (v3.0; v2.1: data/chunk-*/episode_*.parquet) one row a
                                         frame: episode_index, frame_index, timestamp, index,
                                         task_index, observation.*, action, next.reward/done...
    videos/<key>/chunk-*/file-*.mp4      (v3.0: many episodes a file, each from its
                                         from_timestamp; v2.1: videos/chunk-*/<key>/episode_*.mp4,
                                         one episode a file, from 0)

A data file is read (:func:`read_lerobot_file`, or some of its episodes:
:func:`read_lerobot_episodes`) as a *step table* that the rows reader
reads with :data:`STEP_SCHEMA`: one row a frame, every ``observation.*`` feature a leaf of one
struct column ``obs`` (``observation.images.top`` -> leaf ``images.top``), camera features
(``dtype: "video"``) decoded from their videos (:mod:`.video`, frames ``uint8 [H, W, 3]`` in
the fast tensor layout), ``action``, the reward (``next.reward``, else 0) and the flags: an
episode's last frame is *terminated* where ``next.done`` says so, else *truncated* (a recording
stops; nothing says its last state is terminal, so the last frame is the final observation and
its action is not a step, D4RL's rule). ``task`` (the text of ``task_index``), ``timestamp``,
``task_index`` and every other feature are per-step extras; the global ``index`` is dropped.

A batch job reads a data file in pieces of whole episodes (:func:`split_lerobot_file`, at most
:data:`PIECE_BYTES` of decoded frames each, one unit of work each), so that its memory does not
grow with the file: v3.0 packs hundreds of episodes in one data file and one video a camera.

The root may be a local folder or a store's URI (``s3://bucket/prefix``): the metadata and data
files are read through the store's ``pyarrow`` filesystem, the videos too (:mod:`.video`).

Files are untrusted: ``info.json`` and ``episodes.jsonl`` are read with size limits; a missing
video, one shorter than its timestamps, a timestamp with no video frame within
``read.limits.video_tolerance_s``, an episode whose rows disagree with its ``length`` in the
episodes metadata, and totals in ``info.json`` that disagree with the episodes are each one line
naming the file, the episode and, where it applies, the frame.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ....config import DEFAULT_LIMITS, DecodeLimits
from ....errors import DataError, SchemaError, UnsupportedFormatError, Where
from ...fast_tensor import fixed_binary_column
from ...parquet_guard import open_parquet
from ...schema import ColumnSchema
from ...stores import StorageError, file_stat, is_remote, join_path, locate, read_file
from .video import decode_episode

__all__ = [
    "DEFAULT_TOLERANCE_S",
    "INFO_FILE",
    "MAX_INFO_BYTES",
    "MAX_JSONL_BYTES",
    "PIECE_BYTES",
    "PIECE_BYTES_ENV",
    "STEP_SCHEMA",
    "Camera",
    "LeRobotMeta",
    "find_root",
    "is_lerobot_file",
    "lerobot_files",
    "load_meta",
    "read_lerobot_episodes",
    "read_lerobot_file",
    "split_lerobot_file",
]

INFO_FILE = "meta/info.json"
#: ``info.json`` is a few KB (features of a 50-joint robot: tens of KB); more is refused.
MAX_INFO_BYTES = 4 << 20
#: ``meta/episodes.jsonl`` / ``meta/tasks.jsonl`` (v2.1): ~200 bytes an episode.
MAX_JSONL_BYTES = 512 << 20
#: LeRobot's default ``tolerance_s`` (``LeRobotDataset(..., tolerance_s=1e-4)``), the default of
#: ``read.limits.video_tolerance_s``.
DEFAULT_TOLERANCE_S = DEFAULT_LIMITS.video_tolerance_s
_VERSIONS = ("v2.1", "v3.0")
_DEFAULT_FEATURES = ("timestamp", "frame_index", "episode_index", "index", "task_index")

#: How the rows reader reads a step table of :func:`read_lerobot_file`.
STEP_SCHEMA = ColumnSchema(
    name="lerobot",
    columns={
        "eps_id": "episode_index",
        "t": "frame_index",
        "obs": "obs",
        "actions": "action",
        "rewards": "reward",
        "terminateds": "terminated",
        "truncateds": "truncated",
    },
    required=("eps_id", "t", "obs", "actions", "rewards", "terminateds", "truncateds"),
    ignore=("index", "__index_level_0__"),
    description="LeRobot dataset (meta/info.json): frames with their cameras decoded",
    next_obs_from="next_row",
)


@dataclass(frozen=True)
class Camera:
    """A camera feature (``dtype: "video"``) of ``info.json``.

    Attributes:
        key: The feature's name (``observation.images.top``).
        shape: ``(H, W, C)`` of its frames.
        codec: ``video.codec`` (``av1``, ``h264``...), as ``info.json`` says; None if absent.
    """

    key: str
    shape: tuple[int, int, int]
    codec: str | None


@dataclass(frozen=True)
class LeRobotMeta:
    """What a dataset's ``meta`` folder says, read once per root (:func:`load_meta`).

    Attributes:
        root: The dataset's folder.
        info: ``info.json`` as parsed.
        version: ``codebase_version`` (``v3.0`` or ``v2.1``).
        fps: Frames per second.
        cameras: The video features, in ``info.json`` order.
        episodes: Per episode index: ``length``, ``tasks``, ``data`` (its data file relative
            to the root; None where a v3.0 episodes table does not say) and ``videos``, per
            camera key ``(video file relative to the root, from_timestamp)``.
        tasks: ``task_index`` -> the task's text.
    """

    root: str
    info: dict[str, Any]
    version: str
    fps: float
    cameras: tuple[Camera, ...]
    episodes: dict[int, dict[str, Any]]
    tasks: dict[int, str]

    @property
    def features(self) -> dict[str, Any]:
        """``info.json``'s ``features``."""
        return dict(self.info.get("features") or {})

    def describe(self) -> dict[str, Any]:
        """What ``inspect`` shows of the dataset: version, fps, cameras (shape, codec), tasks,
        robot type and the episode and frame counts ``info.json`` declares.

        Returns:
            A JSON-able dict.
        """
        return {
            "lerobot_version": self.version,
            "fps": self.fps,
            "robot_type": self.info.get("robot_type"),
            "cameras": {c.key: {"shape": list(c.shape), "codec": c.codec} for c in self.cameras},
            "tasks": [self.tasks[k] for k in sorted(self.tasks)],
            "total_episodes": self.info.get("total_episodes"),
            "total_frames": self.info.get("total_frames"),
        }


def find_root(path: str | os.PathLike[str]) -> str | None:
    """The LeRobot dataset ``path`` is (its root, holding ``meta/info.json``), or None.

    Args:
        path: A folder: a local path or a store's URI (``s3://bucket/prefix``).

    Returns:
        ``path`` (a store's without a trailing ``/``) where it holds ``meta/info.json``; else
        None.
    """
    text = os.fspath(path)
    if is_remote(text):
        text = text.rstrip("/")
        return text if _remote_root(text) else None
    return text if os.path.isfile(os.path.join(text, INFO_FILE)) else None


@functools.lru_cache(maxsize=64)
def _remote_root(root: str) -> bool:
    """Whether a store's folder holds ``meta/info.json`` (asked once per folder and process:
    format detection asks for every input file)."""
    try:
        return locate(join_path(root, INFO_FILE)).is_file()
    except (StorageError, OSError):
        return False


def _root_of_file(path: str) -> str | None:
    """The root of a data file ``<root>/data/chunk-*/<file>.parquet``, or None."""
    parts = path.replace(os.sep, "/").rsplit("/", 3)  # [root, "data", chunk, file]
    if len(parts) < 4 or parts[1] != "data" or not path.endswith(".parquet"):
        return None  # decided on the string: every input file of every job is asked
    root = parts[0] or "/"
    if is_remote(path):
        return root if _remote_root(root) else None
    return find_root(root)


def is_lerobot_file(path: str) -> bool:
    """A data file of a LeRobot dataset (``<root>/data/chunk-*/*.parquet`` beside
    ``<root>/meta/info.json``), local or on a store.

    Args:
        path: A file's local path or store URI.

    Returns:
        True where ``path`` is one of a LeRobot dataset's data files.
    """
    return _root_of_file(path) is not None


def lerobot_files(root: str | os.PathLike[str]) -> list[str]:
    """A dataset's data files in episode order (chunk, then file name).

    Args:
        root: The dataset's folder (:func:`find_root`): a local path or a store's URI.

    Returns:
        Every ``data/chunk-*/*.parquet``, as paths under ``root`` as written (URIs on a store).
    """
    text = os.fspath(root)
    if is_remote(text):
        data = locate(join_path(text.rstrip("/"), "data"))
        base = data.path.rstrip("/") + "/"
        return [
            f.uri
            for f in data.walk()
            if f.path.endswith(".parquet") and f.path[len(base) :].count("/") == 1
        ]
    local = Path(text) / "data"
    chunks = sorted(c for c in local.iterdir() if c.is_dir()) if local.is_dir() else []
    return [str(f) for c in chunks for f in sorted(c.glob("*.parquet"))]


def _read_bounded(path: str, limit: int) -> bytes:
    try:
        data = read_file(path, limit)
    except (StorageError, OSError) as e:
        raise DataError(
            f"cannot read the dataset's metadata: {e}", Where(file=path), reason="unreadable_file"
        ) from None
    if len(data) > limit:
        raise DataError(
            f"{os.path.basename(path)} is more than the {limit:,} bytes a LeRobot dataset's "
            "metadata may hold",
            Where(file=path),
            reason="unreadable_file",
        )
    return data


def _json_lines(path: str) -> list[dict[str, Any]]:
    out = []
    for i, line in enumerate(_read_bounded(path, MAX_JSONL_BYTES).splitlines()):
        if line.strip():
            try:
                rec = json.loads(line)
            except ValueError:
                rec = None
            if not isinstance(rec, dict):
                raise DataError(
                    f"line {i + 1} is not a JSON object", Where(file=path),
                    reason="unreadable_file",
                )  # fmt: skip
            out.append(rec)
    return out


def load_meta(root: str | os.PathLike[str], limits: DecodeLimits | None = None) -> LeRobotMeta:
    """A dataset's metadata (kept per root while its ``info.json`` is unchanged).

    Args:
        root: The dataset's folder: a local path or a store's URI.
        limits: Bounds for the episodes' Parquet files; None: the defaults.

    Returns:
        The parsed metadata.

    Raises:
        DataError: A metadata file is too large, unreadable or not what LeRobot writes, or
            ``info.json``'s ``total_episodes`` / ``total_frames`` disagree with the episodes
            metadata.
        UnsupportedFormatError: A ``codebase_version`` other than v2.1 / v3.0, or image
            features stored in the data files (``dtype: "image"``).
    """
    text = os.fspath(root)
    text = text.rstrip("/") if is_remote(text) else text
    try:
        st = file_stat(join_path(text, INFO_FILE))
    except (StorageError, OSError) as e:
        raise DataError(
            f"cannot read the dataset's metadata: {e}", Where(file=join_path(text, INFO_FILE)),
            reason="unreadable_file",
        ) from None  # fmt: skip
    limits = limits or DEFAULT_LIMITS
    return _load_meta(text, st.st_mtime_ns, st.st_size, _meta_limits(limits))


def _meta_limits(limits: DecodeLimits) -> DecodeLimits:
    """The Parquet bounds alone (the metadata does not depend on the video tolerance)."""
    return dataclasses.replace(limits, video_tolerance_s=DEFAULT_TOLERANCE_S)


@functools.lru_cache(maxsize=8)
def _load_meta(root: str, _mtime: int, _size: int, limits: DecodeLimits) -> LeRobotMeta:
    info_path = join_path(root, INFO_FILE)
    try:
        info = json.loads(_read_bounded(info_path, MAX_INFO_BYTES))
    except ValueError as e:
        if isinstance(e, DataError):
            raise
        raise DataError(f"not JSON: {e}", Where(file=info_path), reason="unreadable_file") from None
    if not isinstance(info, dict) or not isinstance(info.get("features"), dict):
        raise DataError(
            "info.json must be an object with 'features'", Where(file=info_path),
            reason="unreadable_file",
        )  # fmt: skip
    version = info.get("codebase_version")
    if version not in _VERSIONS:
        raise UnsupportedFormatError(
            f"{info_path}: LeRobot codebase_version {version!r}; this reader reads "
            f"{' and '.join(_VERSIONS)}"
        )
    cameras = []
    for key, feat in info["features"].items():
        dtype = feat.get("dtype") if isinstance(feat, dict) else None
        if dtype == "image":
            raise UnsupportedFormatError(
                f"{info_path}: feature {key!r} holds images in the data files (dtype 'image'); "
                "this reader reads cameras stored as video (dtype 'video')"
            )
        if dtype == "video":
            shape = tuple(int(s) for s in feat.get("shape", ()))
            if len(shape) != 3 or shape[2] != 3:
                raise DataError(
                    f"camera {key!r} has shape {list(shape)}; expected [height, width, 3]",
                    Where(file=info_path),
                    reason="unreadable_file",
                )
            codec = (feat.get("info") or {}).get("video.codec")
            cameras.append(Camera(key, (shape[0], shape[1], shape[2]), codec))
    meta_dir = join_path(root, "meta")
    if version == "v3.0":
        episodes = _episodes_v3(meta_dir, info, cameras, limits)
        tasks = _tasks_v3(join_path(meta_dir, "tasks.parquet"), limits)
    else:
        episodes = _episodes_v21(meta_dir, info, cameras)
        tasks = {
            int(r["task_index"]): str(r["task"])
            for r in _json_lines(join_path(meta_dir, "tasks.jsonl"))
        }
    _check_totals(info, info_path, episodes)
    return LeRobotMeta(
        root=root,
        info=info,
        version=version,
        fps=float(info.get("fps", 0)),
        cameras=tuple(cameras),
        episodes=episodes,
        tasks=tasks,
    )


def _check_totals(info: dict[str, Any], info_path: str, episodes: dict[int, Any]) -> None:
    """``info.json``'s ``total_episodes`` and ``total_frames`` against the episodes metadata
    (LeRobot writes both from the same episodes; a disagreement is a dataset edited by hand or
    cut short)."""
    frames = sum(int(e["length"]) for e in episodes.values())
    for name, found in (("total_episodes", len(episodes)), ("total_frames", frames)):
        said = info.get(name)
        if said is not None and said != found:
            raise DataError(
                f"info.json says {name} {said!r}, the episodes metadata holds {found} "
                f"({'episodes' if name == 'total_episodes' else 'frames in its episode lengths'})",
                Where(file=info_path),
                reason="unreadable_file",
            )


def _episodes_v3(
    meta_dir: str, info: dict[str, Any], cameras: list[Camera], limits: DecodeLimits
) -> dict[int, dict[str, Any]]:
    where = join_path(meta_dir, "episodes")
    loc = locate(where)
    files = (
        [f.uri for f in loc.glob("chunk-*/*.parquet")]
        if not loc.local
        else [str(f) for f in sorted(Path(loc.path).glob("chunk-*/*.parquet"))]
    )
    if not files:
        raise DataError(
            "no meta/episodes/chunk-*/*.parquet", Where(file=where), reason="unreadable_file"
        )
    video_path = info.get("video_path") or ""
    data_path = info.get("data_path") or ""
    out: dict[int, dict[str, Any]] = {}
    for f in files:
        pf = open_parquet(f, limits)
        cols = ["episode_index", "length", "tasks"]
        for c in cameras:
            cols += [f"videos/{c.key}/{n}" for n in ("chunk_index", "file_index", "from_timestamp")]
        missing = [c for c in cols if c not in pf.schema_arrow.names]
        if missing:
            raise DataError(
                f"the episodes table lacks {missing}", Where(file=f), reason="unreadable_file"
            )
        located = [c for c in ("data/chunk_index", "data/file_index") if c in pf.schema_arrow.names]
        for rec in pf.read(columns=cols + located).to_pylist():
            videos = {
                c.key: (
                    video_path.format(
                        video_key=c.key,
                        chunk_index=rec[f"videos/{c.key}/chunk_index"],
                        file_index=rec[f"videos/{c.key}/file_index"],
                    ),
                    float(rec[f"videos/{c.key}/from_timestamp"]),
                )
                for c in cameras
            }
            data = (
                data_path.format(
                    chunk_index=rec["data/chunk_index"], file_index=rec["data/file_index"]
                )
                if len(located) == 2
                else None
            )
            out[int(rec["episode_index"])] = {
                "length": int(rec["length"]),
                "tasks": list(rec["tasks"] or []),
                "videos": videos,
                "data": data,
            }
    return out


def _episodes_v21(
    meta_dir: str, info: dict[str, Any], cameras: list[Camera]
) -> dict[int, dict[str, Any]]:
    video_path = info.get("video_path") or ""
    data_path = info.get("data_path") or ""
    chunks = int(info.get("chunks_size") or 1000)
    out: dict[int, dict[str, Any]] = {}
    for rec in _json_lines(join_path(meta_dir, "episodes.jsonl")):
        ep = int(rec["episode_index"])
        videos = {
            c.key: (
                video_path.format(episode_chunk=ep // chunks, video_key=c.key, episode_index=ep),
                0.0,
            )
            for c in cameras
        }
        out[ep] = {
            "length": int(rec["length"]),
            "tasks": list(rec.get("tasks") or []),
            "videos": videos,
            "data": data_path.format(episode_chunk=ep // chunks, episode_index=ep),
        }
    return out


def _tasks_v3(path: str, limits: DecodeLimits) -> dict[int, str]:
    try:
        table = open_parquet(path, limits).read()
    except FileNotFoundError:
        return {}
    text = next((n for n in ("task", "__index_level_0__") if n in table.column_names), None)
    if text is None or "task_index" not in table.column_names:
        raise DataError(
            f"tasks.parquet has columns {table.column_names}; expected task_index and task",
            Where(file=path),
            reason="unreadable_file",
        )
    return dict(
        zip(
            (int(i) for i in table.column("task_index").to_pylist()),
            (str(t) for t in table.column(text).to_pylist()),
            strict=True,
        )
    )


#: Decoded camera bytes a piece of a data file holds at most (:func:`split_lerobot_file`),
#: unless one episode alone is larger: about 2,400 frames of a 96x96 camera.
PIECE_BYTES = 64 << 20
#: Overrides :data:`PIECE_BYTES` (smaller pieces: more units, tests of the cut).
PIECE_BYTES_ENV = "OFFLINE_PRELEARNER_LEROBOT_PIECE_BYTES"


def _frame_bytes(meta: LeRobotMeta) -> int:
    return sum(int(np.prod(c.shape)) for c in meta.cameras)


def _data_root(path: str) -> str:
    root = _root_of_file(path)
    if root is None:
        raise DataError(
            "not a data file of a LeRobot dataset", Where(file=path), reason="unreadable_file"
        )
    return root


def _open_data(path: str, limits: DecodeLimits, columns: list[str] | None = None) -> pa.Table:
    try:
        return open_parquet(path, limits).read(columns=columns)
    except (pa.ArrowInvalid, OSError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DataError(
            f"cannot read the file: {msg}", Where(file=path), reason="unreadable_file"
        ) from None


def split_lerobot_file(
    path: str, limits: DecodeLimits, piece_bytes: int | None = None
) -> list[tuple[str, ...]]:
    """A data file cut into pieces of whole episodes, each decoding to at most ``piece_bytes``
    of camera frames (an episode larger than that is a piece of its own): the units of a batch
    job, so that it holds a bounded number of frames whatever the file holds (v3.0 packs many
    episodes in one file). Reads only the file's ``episode_index`` column.

    Args:
        path: A data file (``<root>/data/chunk-*/*.parquet``), local or on a store.
        limits: Bounds for the Parquet files.
        piece_bytes: The decoded camera bytes a piece holds at most; None:
            ``$OFFLINE_PRELEARNER_LEROBOT_PIECE_BYTES``, else :data:`PIECE_BYTES`.

    Returns:
        Each piece's episode indexes (as strings, the episode keys of a plan), in file order.

    Raises:
        DataError: The file or the dataset's metadata cannot be read.
    """
    if piece_bytes is None:
        piece_bytes = int(os.environ.get(PIECE_BYTES_ENV, PIECE_BYTES))
    meta = load_meta(_data_root(path), limits)
    eid = _open_data(path, limits, ["episode_index"]).column("episode_index").to_numpy()
    if not len(eid):
        return []
    starts = np.flatnonzero(np.r_[True, eid[1:] != eid[:-1]])
    sizes = np.diff(np.r_[starts, len(eid)]) * max(_frame_bytes(meta), 1)
    pieces: list[tuple[str, ...]] = []
    held: list[str] = []
    held_bytes = 0
    for ep, size in zip(eid[starts].tolist(), sizes.tolist(), strict=True):
        if held and held_bytes + size > piece_bytes:
            pieces.append(tuple(held))
            held, held_bytes = [], 0
        held.append(str(ep))
        held_bytes += size
    pieces.append(tuple(held))
    return pieces


def read_lerobot_file(
    path: str, limits: DecodeLimits, *, cameras: Literal["decode", "index"] = "decode"
) -> pa.Table:
    """One data file of a LeRobot dataset as a step table (see the module docstring): its
    columns, the observations as one struct column ``obs`` with every camera decoded.

    Args:
        path: A data file (``<root>/data/chunk-*/*.parquet``), local or on a store.
        limits: Bounds for the Parquet files; ``video_tolerance_s``, the largest distance
            accepted between a frame's timestamp and its video frame (LeRobot's
            ``tolerance_s``).
        cameras: ``"decode"``: each camera leaf holds the decoded frames; ``"index"``: it holds
            each frame's LeRobot ``index`` (int64), a reference that
            :class:`~.frames.VideoFrames` decodes where a sample needs it.

    Returns:
        The step table, one row a frame, in the file's order.

    Raises:
        DataError: The file or its metadata is unreadable, an episode is not in the episodes
            metadata or has another length there, or a camera's video is missing, shorter than
            the episode's timestamps or has no frame within the tolerance of one.
        SchemaError: The file lacks a column the step table needs.
    """
    return read_lerobot_episodes(path, limits, cameras=cameras)[0]


def read_lerobot_episodes(
    path: str,
    limits: DecodeLimits,
    episodes: tuple[str, ...] | None = None,
    *,
    cameras: Literal["decode", "index"] = "decode",
) -> tuple[pa.Table, np.ndarray]:
    """Some episodes of a data file as a step table (:func:`read_lerobot_file`), only their
    frames decoded: a piece of :func:`split_lerobot_file`.

    Args:
        path: A data file, local or on a store.
        limits: As :func:`read_lerobot_file`.
        episodes: The episode indexes to read (as strings); None: every episode of the file.
        cameras: As :func:`read_lerobot_file`.

    Returns:
        The step table and, per row, its row number in the file (int64).

    Raises:
        DataError, SchemaError: As :func:`read_lerobot_file`.
    """
    root = _data_root(path)
    meta = load_meta(root, limits)
    table = _open_data(path, limits)
    need = ["episode_index", "frame_index", "timestamp", "action"]
    need += ["index"] if cameras == "index" and meta.cameras else []
    missing = [c for c in need if c not in table.column_names]
    if missing:
        raise SchemaError(f"a LeRobot data file without {missing}", Where(file=path))
    rows = np.arange(table.num_rows, dtype=np.int64)
    if episodes is not None:
        want = pa.array([int(e) for e in episodes], table.column("episode_index").type)
        mask = pc.is_in(table.column("episode_index"), value_set=want)
        rows = rows[mask.to_numpy(zero_copy_only=False)]
        table = table.take(pa.array(rows))
    return _step_table(path, root, meta, table, limits.video_tolerance_s, cameras), rows


def _step_table(
    path: str,
    root: str,
    meta: LeRobotMeta,
    table: pa.Table,
    tolerance_s: float,
    cameras: Literal["decode", "index"] = "decode",
) -> pa.Table:
    eid = table.column("episode_index").to_numpy()
    n = len(eid)
    starts = np.flatnonzero(np.r_[True, eid[1:] != eid[:-1]]) if n else np.zeros(0, np.int64)
    ends = np.r_[starts[1:], n].astype(np.int64)
    _check_lengths(path, meta, eid, starts, ends)
    leaves: dict[str, Any] = {}  # a feature's array, or a camera's (field, array)
    for key, feat in meta.features.items():
        if key.startswith("observation.") and (feat or {}).get("dtype") != "video":
            leaves[key] = table.column(key).combine_chunks()
    ts = table.column("timestamp").to_numpy().astype(np.float64)
    for cam in meta.cameras if cameras == "decode" else ():
        frames = np.empty((n, *cam.shape), np.uint8)
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            ep = int(eid[s])
            video, from_ts = meta.episodes[ep]["videos"][cam.key]
            video = join_path(root, video)
            decoded = decode_episode(video, from_ts + ts[s:e], tolerance_s, episode=ep)
            if decoded.shape[1:] != cam.shape:
                raise DataError(
                    f"camera {cam.key!r} frames are {list(decoded.shape[1:])}, info.json says "
                    f"{list(cam.shape)}",
                    Where(file=video, episode_id=ep),
                    reason="unreadable_file",
                )
            frames[s:e] = decoded
        fld, arr = fixed_binary_column(cam.key, frames)
        leaves[cam.key] = (fld, arr)
    if cameras == "index":
        for cam in meta.cameras:
            leaves[cam.key] = table.column("index").combine_chunks().cast(pa.int64())
    if not leaves:
        raise SchemaError("a LeRobot dataset without observation.* features", Where(file=path))
    cols: dict[str, Any] = {"obs": _struct(leaves)}
    cols["episode_index"] = table.column("episode_index")
    cols["frame_index"] = table.column("frame_index")
    cols["action"] = table.column("action")
    reward = (
        table.column("next.reward").cast(pa.float32())
        if "next.reward" in table.column_names
        else pa.array(np.zeros(n, np.float32))
    )
    done = (
        np.asarray(table.column("next.done").to_numpy(zero_copy_only=False), bool)
        if "next.done" in table.column_names
        else np.zeros(n, bool)
    )
    last = np.zeros(n, bool)
    last[ends - 1] = True
    cols["reward"] = reward
    cols["terminated"] = pa.array(done)
    cols["truncated"] = pa.array(last & ~done)
    if "task_index" in table.column_names:
        idx = table.column("task_index")
        cols["task"] = pa.array([meta.tasks.get(int(i)) for i in pc.unique(idx).to_pylist()])
        cols["task"] = pc.take(cols["task"], pc.index_in(idx, pc.unique(idx)))
    skip = set(cols) | {"next.reward", "next.done", "index"} | set(leaves)
    for name in table.column_names:
        if name not in skip:
            cols[name] = table.column(name)
    return pa.table(cols)


def _check_lengths(
    path: str, meta: LeRobotMeta, eid: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> None:
    """Each episode of the file is in the episodes metadata with as many frames as it has rows
    here (an episode's rows are consecutive: one seen twice is a file LeRobot did not write)."""
    ids = eid[starts]
    if len(np.unique(ids)) != len(ids):
        seen: set[int] = set()
        for i, ep in enumerate(ids.tolist()):
            if ep in seen:
                raise DataError(
                    f"episode {ep}'s rows are not consecutive in the data file",
                    Where(file=path, episode_id=int(ep), row=int(starts[i])),
                    reason="unreadable_file",
                )
            seen.add(ep)
    for s, e, ep in zip(starts.tolist(), ends.tolist(), ids.tolist(), strict=True):
        got = meta.episodes.get(int(ep))
        if got is None:
            raise DataError(
                f"episode {ep} is not in the dataset's episodes metadata",
                Where(file=path, episode_id=int(ep), row=s),
                reason="unreadable_file",
            )
        if got["length"] != e - s:
            raise DataError(
                f"episode {ep} has {e - s} frames in the data file, the episodes metadata says "
                f"length {got['length']}",
                Where(file=path, episode_id=int(ep), row=s),
                reason="unreadable_file",
            )


def _struct(leaves: dict[str, Any]) -> pa.StructArray:
    """``{"observation.a.b": array or (field, array)}`` as one struct column of nested structs
    (``{"a": {"b": ...}}``)."""
    tree: dict[str, Any] = {}
    for key, value in leaves.items():
        path = key.split(".")[1:]
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise SchemaError(f"feature {key!r} is under another feature's name")
        node[path[-1]] = value
    return _build(tree)


def _build(tree: dict[str, Any]) -> pa.StructArray:
    arrays, fields = [], []
    for name, value in tree.items():
        if isinstance(value, dict):
            arr = _build(value)
            fld = pa.field(name, arr.type, nullable=False)
        elif isinstance(value, tuple):
            fld, arr = value
            fld = fld.with_name(name)
        else:
            arr = value
            fld = pa.field(name, arr.type)
        arrays.append(arr)
        fields.append(fld)
    return pa.StructArray.from_arrays(arrays, fields=fields)
