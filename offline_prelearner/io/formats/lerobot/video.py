"""A camera's frames for one episode, decoded in order with PyAV: one seek, then forward.

LeRobot's own loader (``LeRobotDataset.__getitem__``, its ``"pyav"`` backend) decodes each item
on its own: it seeks to the keyframe at or before the item's timestamp, decodes forward to it,
and keeps the decoded frame whose presentation time is nearest the query (the first of equals),
refusing one farther than ``tolerance_s``. A batch job needs every frame of an episode, so
:func:`decode_episode` seeks once, to the keyframe before the episode's first timestamp, decodes
forward to its last, and picks for each query the same frame by the same rule. Decoding from a
keyframe is deterministic, so the pixels are those LeRobot returns (its float ``/ 255`` aside:
we keep the ``uint8`` frames, ``[T, H, W, 3]``, channels last as images are stored here).

A video on a store (``s3://...``) is read through the store's ``pyarrow`` filesystem as a file
object PyAV opens (buffered, :data:`STORE_BUFFER_BYTES`), not copied to a local file first: a
v3.0 video holds many episodes (LeRobot cuts them at 200-500 MB), a batch job reads it in
pieces of whole episodes, and each piece then fetches only the bytes from the keyframe before
its first frame to its last, where a local copy would fetch the whole file once per piece (and
need the disk to hold it). Memory stays one buffer a video.

PyAV is imported on first use (the ``video`` extra).
"""

from __future__ import annotations

import io
import os
from typing import Any

import numpy as np

from ....errors import DataError, Where
from ...optional import import_av
from ...stores import StorageError, is_remote, locate

__all__ = ["STORE_BUFFER_BYTES", "decode_episode"]

#: The read buffer of a video read from a store: one ranged request per this many bytes.
STORE_BUFFER_BYTES = 1 << 20


def _open_video(path: str) -> Any:
    """The video as PyAV opens it: a local path as it is, a store's file as a buffered file
    object of its filesystem; a missing file is None."""
    if not is_remote(path):
        return path if os.path.isfile(path) else None
    loc = locate(path)
    try:
        if not loc.is_file():
            return None
        return io.BufferedReader(loc.open_input_file(), buffer_size=STORE_BUFFER_BYTES)
    except StorageError as e:
        raise DataError(
            f"cannot open the video: {e}", Where(file=path), reason="unreadable_file"
        ) from None


def decode_episode(
    path: str,
    times: np.ndarray,
    tolerance_s: float,
    *,
    episode: int | None = None,
) -> np.ndarray:
    """The frames of one episode of a camera: for each query time, the nearest decoded frame.

    Args:
        path: The mp4 file: a local path or a store's URI.
        times: The episode's frame times in the file, seconds, ascending (LeRobot: its
            ``timestamp`` column plus the episode's ``from_timestamp``).
        tolerance_s: The largest distance accepted between a query time and its frame.
        episode: The episode index, named in errors.

    Returns:
        ``uint8 [len(times), H, W, 3]`` (rgb24), frame ``i`` the one nearest ``times[i]``.

    Raises:
        DataError: The file is missing or not a video, or a query time
            has no frame within ``tolerance_s`` (a video shorter than its timestamps, or a
            timestamp off the frame grid): one line naming the file, the episode and the frame.
        UnsupportedFormatError: PyAV is not installed.
    """
    source = _open_video(path)
    if source is None:
        raise DataError(
            "the episode's video file is missing", Where(file=path, episode_id=episode),
            reason="unreadable_file",
        )  # fmt: skip
    n = len(times)
    if n == 0:
        if not isinstance(source, str):
            source.close()
        return np.zeros((0, 0, 0, 3), np.uint8)
    try:
        return _decode(source, path, np.asarray(times, np.float64), tolerance_s, episode)
    finally:
        if not isinstance(source, str):
            source.close()


def _decode(
    source: Any, path: str, times: np.ndarray, tolerance_s: float, episode: int | None
) -> np.ndarray:
    av = import_av(f"decoding the camera video {os.path.basename(path)!r}")
    first, last = float(times[0]), float(times[-1])
    kept_t: list[float] = []
    kept: list[np.ndarray] = []
    try:
        with av.open(source) as container:
            stream = container.streams.video[0]
            base = stream.time_base
            # One seek: the keyframe at or before the first frame (a frame's margin below it).
            container.seek(max(int((first - tolerance_s) / base) - 1, 0), stream=stream)
            for frame in container.decode(stream):
                if frame.pts is None:
                    continue
                t = float(frame.pts * base)
                if t < first - tolerance_s:  # before the episode: never a query's nearest
                    continue
                kept_t.append(t)
                kept.append(frame.to_ndarray(format="rgb24"))
                if t >= last:
                    break
    except (av.error.FFmpegError, IndexError, ValueError, OSError) as e:
        raise DataError(
            f"cannot decode the video: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
            Where(file=path, episode_id=episode),
            reason="unreadable_file",
        ) from None
    return _nearest(kept_t, kept, times, tolerance_s, path, episode)


def _nearest(
    kept_t: list[float],
    kept: list[np.ndarray],
    times: np.ndarray,
    tolerance_s: float,
    path: str,
    episode: int | None,
) -> np.ndarray:
    """Each query's nearest decoded frame (the earlier of two at equal distance, as LeRobot's
    ``argmin`` takes the first), every one within ``tolerance_s``."""
    if not kept:
        raise DataError(
            f"no frame at or after t={float(times[0]):.4f}s: the video ends before the episode",
            Where(file=path, episode_id=episode, timestep=0),
            reason="unreadable_file",
        )
    at = np.asarray(kept_t)
    q = np.asarray(times, np.float64)
    pick, bad = nearest_frames(at, q, tolerance_s)
    if len(bad):
        i = int(bad[0])
        raise DataError(
            off_grid(at, q, pick, i, i, tolerance_s, len(bad)),
            Where(file=path, episode_id=episode, timestep=i),
            reason="unreadable_file",
        )
    frames = np.stack(kept)
    return frames[pick] if not np.array_equal(pick, np.arange(len(kept))) else frames


def nearest_frames(
    at: np.ndarray, q: np.ndarray, tolerance_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """LeRobot's rule for which video frame a timestamp is: the nearest (the earlier of two at
    equal distance, as its ``argmin`` takes the first), accepted strictly within
    ``tolerance_s``.

    Args:
        at: The video's frame times, seconds, ascending (at least one).
        q: The query times, seconds.
        tolerance_s: The largest distance accepted (exclusive, as LeRobot 0.4 compares).

    Returns:
        Per query the index of its frame in ``at``, and the positions of the queries whose
        nearest frame is farther than ``tolerance_s``.
    """
    right = np.clip(np.searchsorted(at, q), 0, len(at) - 1)
    left = np.maximum(right - 1, 0)
    pick = np.where(np.abs(at[left] - q) <= np.abs(at[right] - q), left, right)
    return pick, np.flatnonzero(~(np.abs(at[pick] - q) < tolerance_s))


def off_grid(
    at: np.ndarray, q: np.ndarray, pick: np.ndarray, i: int, frame: int, tolerance_s: float,
    n_bad: int,
) -> str:  # fmt: skip
    """The one line for query ``i`` that has no frame within the tolerance (:func:`nearest_frames`).

    Args:
        at: The video's frame times.
        q: The query times.
        pick: Each query's nearest frame.
        i: The query to name.
        frame: Its frame number in its episode.
        tolerance_s: The tolerance.
        n_bad: How many queries have no frame.

    Returns:
        The message (the caller names file and episode).
    """
    why = (
        f"the video ends at t={at[-1]:.4f}s"
        if q[i] > at[-1]
        else f"the nearest frame is at t={at[pick[i]]:.4f}s"
    )
    return (
        f"frame {frame} of the episode is at t={q[i]:.4f}s in the video, but {why} (tolerance "
        f"{tolerance_s}s, read.limits.video_tolerance_s; {n_bad} frame(s) without a video frame)"
    )
