"""Camera frames decoded where samples need them: by keyframe interval, with a bounded cache.

A replay buffer fed LeRobot episodes read with ``cameras="index"``
(:func:`~.dataset.read_lerobot_file`, :func:`reference_episodes`) holds, in each camera leaf,
each frame's LeRobot ``index`` (8 bytes a frame) instead of its pixels. Sampling gathers and
stacks those references like any leaf (n-step, sequences, ``FrameStack``), and
:class:`VideoFrames` turns the sampled references into the ``uint8 [..., H, W, 3]`` frames
LeRobot's own loader returns for the same index:

* each reference is located in its video (the file of its episode, at the episode's
  ``from_timestamp`` plus the frame's ``timestamp``) and matched to the frame nearest that time
  (LeRobot's rule; farther than ``tolerance_s`` is one line naming the file, episode and frame);
* the requested frames are grouped by *keyframe interval* (GOP: a keyframe and the frames up to
  the next one, in presentation order; a file's packet index, read once by demuxing without
  decoding, says where they are); each GOP missing from the cache is decoded from its keyframe
  forward, only up to the last frame requested in it, adjacent GOPs in one pass (one seek);
* decoded GOP windows stay in an LRU cache bounded in bytes (``cache_bytes``, default
  :data:`DEFAULT_CACHE_BYTES`); a later request for a cached frame decodes nothing. Memory is
  the cache, the frames one call returns, and one decode pass's windows.

Decoding from a keyframe is deterministic, so the frames are those a sequential decode gives
(:func:`~.video.decode_episode`) and those LeRobot returns. The index math (locating, nearest
frame, grouping) is vectorized; Python loops run over files and decoded GOPs, not samples.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ....config import DEFAULT_LIMITS, DecodeLimits, ReadConfig
from ....episodes.episode_columns import EpisodeColumns
from ....errors import ConfigError, DataError, Where
from ...optional import import_av
from ...parquet_guard import open_parquet
from .dataset import DEFAULT_TOLERANCE_S, Camera, lerobot_files, load_meta, read_lerobot_file
from .reader import LeRobotReader
from .video import nearest_frames, off_grid

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_MAX_OPEN_FILES",
    "FrameStats",
    "VideoFrames",
    "reference_episodes",
]

#: Default bound of the decoded-frame cache: 256 MiB (about 9,700 frames of 96x96 RGB).
DEFAULT_CACHE_BYTES = 256 << 20
#: Video files kept open at once (v2.1 has one a camera per episode); more are closed, LRU.
DEFAULT_MAX_OPEN_FILES = 16


@dataclass
class FrameStats:
    """What a :class:`VideoFrames` did: counts, never times.

    Attributes:
        requested: Frames asked for (with repeats).
        decoded: Frames decoded and converted to RGB.
        seeks: Seeks (one per decode pass over adjacent GOPs).
        restarts: Decode passes redone from the file's start, the seek to a keyframe having
            landed elsewhere (0 on the files LeRobot writes).
        hits: GOP windows served from the cache.
        misses: GOP windows decoded (absent, or cached shorter than needed).
        evicted: GOP windows dropped to keep the cache within its bound.
        cached_bytes: Bytes the cache holds now.
        peak_cached_bytes: The most bytes it ever held.
    """

    requested: int = 0
    decoded: int = 0
    seeks: int = 0
    restarts: int = 0
    hits: int = 0
    misses: int = 0
    evicted: int = 0
    cached_bytes: int = 0
    peak_cached_bytes: int = 0


@dataclass(frozen=True)
class _Video:
    """One file's packet index, in presentation order: frame ``i`` shows at ``pts[i]``;
    ``key`` the frame numbers of its keyframes (ascending, ``key[0] == 0``), ``seek`` the
    timestamp to seek to for each (its packet's dts)."""

    path: str
    pts: np.ndarray  # int64, ascending
    seconds: np.ndarray  # float64, pts * time_base
    key: np.ndarray  # int64
    seek: np.ndarray  # int64


class VideoFrames:
    """Decodes the frames of a LeRobot dataset's cameras by LeRobot ``index`` (see the module
    docstring).

    Args:
        root: The dataset's folder (holding ``meta/info.json``).
        cache_bytes: Bound of the decoded-frame cache, in bytes (0: no cache; a GOP window
            larger than the bound is decoded, used and dropped).
        tolerance_s: The largest distance accepted between a frame's timestamp and its video
            frame (LeRobot's ``tolerance_s``).
        max_open_files: Video files kept open at once.
        decoder_threads: Decoder threads per open file: 1 (the default) suits short decodes
            from a keyframe (a GOP of small frames: threads cost more than they bring, about
            half the CPU a frame at 96x96 AV1); 0 lets FFmpeg choose (large frames, long GOPs).
        limits: Bounds for the dataset's Parquet files; None: the defaults.

    Raises:
        ConfigError: ``cache_bytes`` is negative, ``max_open_files`` below 1 or
            ``decoder_threads`` negative.
        DataError: The metadata or a data file is unreadable.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        tolerance_s: float = DEFAULT_TOLERANCE_S,
        max_open_files: int = DEFAULT_MAX_OPEN_FILES,
        decoder_threads: int = 1,
        limits: DecodeLimits | None = None,
    ) -> None:
        if not isinstance(cache_bytes, int) or cache_bytes < 0:
            raise ConfigError(f"cache_bytes must be an int >= 0, found {cache_bytes!r}")
        if not isinstance(max_open_files, int) or max_open_files < 1:
            raise ConfigError(f"max_open_files must be an int >= 1, found {max_open_files!r}")
        if not isinstance(decoder_threads, int) or decoder_threads < 0:
            raise ConfigError(f"decoder_threads must be an int >= 0, found {decoder_threads!r}")
        self.root = str(root)
        self.decoder_threads = decoder_threads
        self.cache_bytes = cache_bytes
        self.tolerance_s = float(tolerance_s)
        self.max_open_files = max_open_files
        self.limits = limits or DEFAULT_LIMITS
        meta = load_meta(self.root, self.limits)
        self.cameras: dict[str, Camera] = {c.key: c for c in meta.cameras}
        index, episode, time = [], [], []
        for f in lerobot_files(self.root):
            t = open_parquet(f, self.limits).read(columns=["index", "episode_index", "timestamp"])
            index.append(t.column("index").to_numpy().astype(np.int64))
            episode.append(t.column("episode_index").to_numpy().astype(np.int64))
            time.append(t.column("timestamp").to_numpy().astype(np.float64))
        idx = np.concatenate(index) if index else np.zeros(0, np.int64)
        order = np.argsort(idx, kind="stable")
        self._index = idx[order]  # every frame's LeRobot index, ascending
        self._episode = (np.concatenate(episode) if episode else idx)[order]
        self._time = (np.concatenate(time) if time else idx.astype(np.float64))[order]
        eps = sorted(meta.episodes)
        self._episodes = np.asarray(eps, np.int64)
        self._files: list[str] = []  # video paths, by file id
        file_ids: dict[str, int] = {}
        self._file_of: dict[str, np.ndarray] = {}  # camera -> file id per episode (eps order)
        self._from: dict[str, np.ndarray] = {}  # camera -> from_timestamp per episode
        for cam in self.cameras:
            fid = np.empty(len(eps), np.int64)
            start = np.empty(len(eps), np.float64)
            for i, ep in enumerate(eps):
                rel, start[i] = meta.episodes[ep]["videos"][cam]
                path = os.path.join(self.root, rel)
                fid[i] = file_ids.setdefault(path, len(file_ids))
            self._file_of[cam], self._from[cam] = fid, start
        self._files = list(file_ids)
        self._videos: dict[int, _Video] = {}
        self._open: OrderedDict[int, Any] = OrderedDict()  # file id -> av container
        self._cache: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        self._pyav: Any = None
        self._reformatter: Any = None
        self.stats = FrameStats()

    # ------------------------------------------------------------------ public
    def frames(self, camera: str, index: np.ndarray) -> np.ndarray:
        """The frames of ``camera`` at LeRobot ``index`` values.

        Args:
            camera: A camera feature of the dataset (``observation.images.top``).
            index: int LeRobot ``index`` values, any shape (a sampled reference column:
                ``[B]``, ``[B, k]``, ``[B, W, k]``).

        Returns:
            ``uint8 [*index.shape, H, W, 3]``: the frame LeRobot returns for each index.

        Raises:
            KeyError: ``camera`` is not a camera of the dataset.
            DataError: An index is not in the dataset, its video is missing or unreadable, or
                no video frame lies within ``tolerance_s`` of its timestamp (one line naming
                the file, episode and frame).
        """
        cam = self.cameras[camera]
        q = np.asarray(index, np.int64)
        self.stats.requested += q.size
        uniq, inv = np.unique(q.ravel(), return_inverse=True)
        out = np.empty((len(uniq), *cam.shape), np.uint8)
        if len(uniq):
            self._fill(camera, uniq, out)
        return out[inv].reshape(*q.shape, *cam.shape)

    def clear(self) -> None:
        """Drops the cached frames and closes the open video files."""
        self._cache.clear()
        self.stats.cached_bytes = 0
        while self._open:
            self._open.popitem(last=False)[1].close()

    def __getstate__(self) -> dict[str, Any]:
        """What pickles (for a Ray actor): everything but the open files and the cache."""
        state = dict(self.__dict__)
        state["_open"], state["_cache"] = OrderedDict(), OrderedDict()
        state["_pyav"] = state["_reformatter"] = None
        state["stats"] = FrameStats()
        return state

    # ------------------------------------------------------------------ locating
    def _fill(self, camera: str, uniq: np.ndarray, out: np.ndarray) -> None:
        """``out[i]`` = the frame of ``uniq[i]`` (sorted, distinct indices)."""
        pos = np.searchsorted(self._index, uniq)
        found = pos < len(self._index)
        found[found] = self._index[pos[found]] == uniq[found]
        bad = np.flatnonzero(~found)
        if len(bad):
            raise DataError(
                f"frame index {int(uniq[bad[0]])} is not in the dataset "
                f"({len(bad)} requested index(es) not found)",
                Where(file=self.root),
                reason="bad_video",
            )
        episode = self._episode[pos]
        at = np.searchsorted(self._episodes, episode)
        known = at < len(self._episodes)
        known[known] = self._episodes[at[known]] == episode[known]
        unknown = np.flatnonzero(~known)
        if len(unknown):
            ep = int(episode[unknown[0]])
            raise DataError(
                f"episode {ep} is not in the dataset's episodes metadata",
                Where(file=self.root, episode_id=ep),
                reason="unreadable_file",
            )
        fid = self._file_of[camera][at]
        t = self._from[camera][at] + self._time[pos]
        order = np.argsort(fid, kind="stable")
        cuts = np.flatnonzero(np.diff(fid[order])) + 1
        for rows in np.split(order, cuts):  # one group per video file
            self._fill_file(int(fid[rows[0]]), rows, t[rows], episode[rows], pos[rows], out)

    def _nearest(
        self, video: _Video, t: np.ndarray, episode: np.ndarray, pos: np.ndarray
    ) -> np.ndarray:
        """Frame numbers nearest times ``t`` (the earlier of two at equal distance), each
        within ``tolerance_s``."""
        at = video.seconds
        if len(at) == 0:
            raise DataError(
                "the video has no frames", Where(file=video.path, episode_id=int(episode[0])),
                reason="bad_video",
            )  # fmt: skip
        pick, bad = nearest_frames(at, t, self.tolerance_s)
        if len(bad):
            i = int(bad[0])
            ep = int(episode[i])
            # the frame's place in its episode (an error path: a pass over the index is fine)
            step = int(np.count_nonzero(self._index[self._episode == ep] < self._index[pos[i]]))
            raise DataError(
                off_grid(at, t, pick, i, step, self.tolerance_s, len(bad)),
                Where(file=video.path, episode_id=ep, timestep=step),
                reason="bad_video",
            )
        return pick

    # ------------------------------------------------------------------ decoding
    def _fill_file(
        self,
        fid: int,
        rows: np.ndarray,
        t: np.ndarray,
        episode: np.ndarray,
        pos: np.ndarray,
        out: np.ndarray,
    ) -> None:
        """Fills ``out[rows]`` from one video file: GOPs from the cache, the rest decoded."""
        video = self._video(fid, int(episode[0]))
        n = self._nearest(video, t, episode, pos)
        g = np.searchsorted(video.key, n, side="right") - 1
        order = np.argsort(g, kind="stable")
        rows, n, g = rows[order], n[order], g[order]
        starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        gops = g[starts]
        need = np.maximum.reduceat(n, starts)  # the last frame requested in each GOP
        bounds = np.r_[starts, len(g)]
        missing = []
        for j, gop in enumerate(gops.tolist()):
            window = self._cache.get((fid, gop))
            if window is not None and len(window) > need[j] - video.key[gop]:
                self._cache.move_to_end((fid, gop))
                self.stats.hits += 1
                s, e = bounds[j], bounds[j + 1]
                out[rows[s:e]] = window[n[s:e] - video.key[gop]]
            else:
                missing.append(j)
        if not missing:
            return
        miss = np.asarray(missing)
        run_cuts = np.flatnonzero(np.diff(gops[miss]) != 1) + 1
        for run in np.split(miss, run_cuts):  # adjacent GOPs: one seek, one pass
            windows = self._decode(fid, video, gops[run], need[run], int(episode[0]))
            for j, window in zip(run.tolist(), windows, strict=True):
                gop = int(gops[j])
                s, e = bounds[j], bounds[j + 1]
                out[rows[s:e]] = window[n[s:e] - video.key[gop]]
                self._put((fid, gop), window)

    def _decode(
        self, fid: int, video: _Video, gops: np.ndarray, need: np.ndarray, episode: int
    ) -> list[np.ndarray]:
        """Decodes adjacent GOPs ``gops`` in one pass from the first one's keyframe, each from
        its keyframe to its ``need`` frame (the last to ``need[-1]``, the others whole)."""
        av = self._av()
        first = int(video.key[gops[0]])
        last = int(need[-1])
        ends = np.append(video.key[gops[1:]], last + 1)  # the frame after each window
        self.stats.misses += len(gops)
        frames: list[np.ndarray] | None = None
        try:
            container = self._container(fid, episode)
            stream = container.streams.video[0]
            for attempt in (int(video.seek[gops[0]]), 0):  # the keyframe, else the start
                container.seek(attempt, stream=stream, backward=True)
                self.stats.seeks += 1
                self.stats.restarts += frames is not None
                frames = []
                expected = first
                for frame in container.decode(stream):
                    if frame.pts is None or frame.pts < video.pts[first]:
                        continue
                    if expected > last or frame.pts != video.pts[expected]:
                        break
                    frames.append(self._rgb(frame))
                    expected += 1
                    if expected > last:
                        break
                self.stats.decoded += len(frames)
                if len(frames) == last - first + 1:
                    break
        except (av.error.FFmpegError, IndexError, ValueError) as e:
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise DataError(
                f"cannot decode the video: {why}",
                Where(file=video.path, episode_id=episode),
                reason="bad_video",
            ) from None
        frames = frames or []
        if len(frames) != last - first + 1:
            raise DataError(
                f"decoding from the keyframe at frame {first} gave {len(frames)} of the "
                f"{last - first + 1} frames up to frame {last}",
                Where(file=video.path, episode_id=episode),
                reason="bad_video",
            )
        block = np.stack(frames)
        if len(gops) == 1:
            return [block]
        starts = video.key[gops].tolist()
        return [block[a - first : b - first] for a, b in zip(starts, ends.tolist(), strict=True)]

    def _put(self, key: tuple[int, int], window: np.ndarray) -> None:
        """Caches a window (a copy of its own), evicting the least recently used past the
        bound; a window larger than the bound is not kept."""
        old = self._cache.pop(key, None)
        if old is not None:
            self.stats.cached_bytes -= old.nbytes
        if window.nbytes > self.cache_bytes:
            return
        while self._cache and self.stats.cached_bytes + window.nbytes > self.cache_bytes:
            self.stats.cached_bytes -= self._cache.popitem(last=False)[1].nbytes
            self.stats.evicted += 1
        self._cache[key] = window.copy() if window.base is not None else window
        self.stats.cached_bytes += window.nbytes
        self.stats.peak_cached_bytes = max(self.stats.peak_cached_bytes, self.stats.cached_bytes)

    def _rgb(self, frame: Any) -> np.ndarray:
        """A decoded frame as ``uint8 [H, W, 3]`` (rgb24, what ``frame.to_ndarray(format=
        "rgb24")`` gives), through one kept reformatter: half the time of a fresh one a frame."""
        if self._reformatter is None:
            self._reformatter = self._av().video.reformatter.VideoReformatter()
        out: np.ndarray = self._reformatter.reformat(frame, format="rgb24").to_ndarray()
        return out

    # ------------------------------------------------------------------ files
    def _av(self) -> Any:
        """PyAV, imported on first use (the ``video`` extra)."""
        if self._pyav is None:
            self._pyav = import_av("decoding the camera videos of a LeRobot dataset")
        return self._pyav

    def _container(self, fid: int, episode: int) -> Any:
        c = self._open.get(fid)
        if c is not None:
            self._open.move_to_end(fid)
            return c
        av = self._av()
        path = self._files[fid]
        if not os.path.isfile(path):
            raise DataError(
                "the episode's video file is missing", Where(file=path, episode_id=episode),
                reason="bad_video",
            )  # fmt: skip
        c = av.open(path)
        c.streams.video[0].thread_count = self.decoder_threads
        self._open[fid] = c
        while len(self._open) > self.max_open_files:
            self._open.popitem(last=False)[1].close()
        return c

    def _video(self, fid: int, episode: int) -> _Video:
        v = self._videos.get(fid)
        if v is not None:
            return v
        av = self._av()
        path = self._files[fid]
        container = self._container(fid, episode)
        try:
            stream = container.streams.video[0]
            pts, seek, key = [], [], []
            for p in container.demux(stream):
                if p.pts is None:
                    continue
                pts.append(p.pts)
                seek.append(p.dts if p.dts is not None else p.pts)
                key.append(p.is_keyframe)
            base = float(stream.time_base)
        except (av.error.FFmpegError, IndexError, ValueError) as e:
            raise DataError(
                f"cannot read the video: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
                Where(file=path, episode_id=episode),
                reason="bad_video",
            ) from None
        p = np.asarray(pts, np.int64)
        order = np.argsort(p, kind="stable")
        is_key = np.asarray(key, bool)[order]
        is_key[:1] = True  # decoding starts at the first packet, a keyframe
        key_at = np.flatnonzero(is_key)
        v = _Video(
            path=path,
            pts=p[order],
            seconds=p[order] * base,
            key=key_at.astype(np.int64),
            seek=np.asarray(seek, np.int64)[order][key_at],
        )
        self._videos[fid] = v
        return v


def reference_episodes(
    root: str | os.PathLike[str], limits: DecodeLimits | None = None
) -> Iterator[EpisodeColumns]:
    """A LeRobot dataset's episodes with each camera leaf holding frame references (LeRobot
    ``index``, int64) instead of pixels: what a replay buffer holds to decode at sample time.

    Args:
        root: The dataset's folder.
        limits: Bounds for its Parquet files; None: the defaults.

    Yields:
        The episodes of one data file at a time (as the ``lerobot`` reader reads them, every
        frame accounted for in its ledger).
    """
    limits = limits or DEFAULT_LIMITS
    reader = LeRobotReader(ReadConfig(format="lerobot"))
    for f in lerobot_files(root):
        table = read_lerobot_file(f, limits, cameras="index")
        yield reader.read(table, source=f).columns
