"""DecodeVideoFrames: sampled frame references -> the camera frames, decoded where needed.

A buffer fed a LeRobot dataset's episodes with frame references in its camera leaves
(:func:`~offline_prelearner.io.formats.lerobot.frames.reference_episodes`) samples them like any
leaf: ``obs.images.top`` is ``int64 [B]``, ``[B, k]`` under ``FrameStack(k)``, ``[B, W, k]`` for
a stacked sequence, and ``new_obs.images.top`` likewise. This connector replaces each such
column with its frames, ``uint8 [..., H, W, 3]``, decoding the ``obs`` and ``new_obs`` columns
of a camera in one request (a frame both need is decoded once) through
:class:`~offline_prelearner.io.formats.lerobot.frames.VideoFrames` (keyframe intervals, one seek
per run of adjacent ones, a cache bounded by ``cache_bytes``).
"""

from __future__ import annotations

import os

import numpy as np

from ..episodes import columns as C
from ..errors import SchemaError
from ..io.formats.lerobot.dataset import DEFAULT_TOLERANCE_S
from ..io.formats.lerobot.frames import DEFAULT_CACHE_BYTES, DEFAULT_MAX_OPEN_FILES, VideoFrames
from ..replay.batch import SampleBatch
from ..replay.units.sequence import SEQ_LENS
from .base import DEFAULT_CONTEXT, Connector, ConnectorContext

__all__ = ["DecodeVideoFrames"]


class DecodeVideoFrames(Connector):
    """Decodes the sampled frame references of a LeRobot dataset's cameras (see the module
    docstring).

    Args:
        root: The dataset's folder (holding ``meta/info.json``).
        cache_bytes: Bound of the decoded-frame cache, in bytes (default 256 MiB).
        tolerance_s: The largest distance accepted between a frame's timestamp and its video
            frame (LeRobot's ``tolerance_s``).
        max_open_files: Video files kept open at once.
        decoder_threads: Decoder threads per open file (1: best for short decodes of small
            frames; 0: FFmpeg's choice).
    """

    name = "decode_video_frames"

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        tolerance_s: float = DEFAULT_TOLERANCE_S,
        max_open_files: int = DEFAULT_MAX_OPEN_FILES,
        decoder_threads: int = 1,
    ) -> None:
        self.frames = VideoFrames(
            root,
            cache_bytes=cache_bytes,
            tolerance_s=tolerance_s,
            max_open_files=max_open_files,
            decoder_threads=decoder_threads,
        )

    def __repr__(self) -> str:
        return f"DecodeVideoFrames({self.frames.root!r}, cache_bytes={self.frames.cache_bytes})"

    def __call__(self, batch: SampleBatch, ctx: ConnectorContext = DEFAULT_CONTEXT) -> SampleBatch:
        """A copy of ``batch`` with every camera's reference columns replaced by frames.

        Args:
            batch: A sampled batch holding ``obs.<camera leaf>`` (and ``new_obs.<camera leaf>``)
                reference columns, the leaf being the camera's key less ``observation.``.
            ctx: Unused.

        Returns:
            The batch with each such column ``uint8 [*refs.shape, H, W, 3]`` (a sequence's
            padding steps, past ``seq_lens``, zero frames: nothing is decoded for them).

        Raises:
            SchemaError: A camera's column is missing from the batch, or does not hold signed
                integers (references).
            DataError: A reference cannot be decoded (see :meth:`VideoFrames.frames`).
        """
        out = SampleBatch._trusted(batch.to_dict())
        out.info = batch.info
        seq_lens = batch.get(SEQ_LENS)
        for camera in self.frames.cameras:
            leaf = camera.removeprefix("observation.")
            names = [n for n in (f"{C.OBS}.{leaf}", f"{C.NEW_OBS}.{leaf}") if n in batch]
            if not names:
                raise SchemaError(
                    f"the batch has no column {C.OBS}.{leaf} for camera {camera!r} (columns: "
                    f"{sorted(batch.keys())})"
                )
            refs = [np.asarray(batch[n]) for n in names]
            for n, r in zip(names, refs, strict=True):
                if r.dtype.kind != "i":  # references are int64; decoded frames uint8
                    raise SchemaError(
                        f"column {n} holds {r.dtype}, not frame references (int): were the "
                        "episodes read with cameras='index'?"
                    )
            real = [_real(r, seq_lens) for r in refs]
            wanted = [r.ravel() if m is None else r[m] for r, m in zip(refs, real, strict=True)]
            flat = self.frames.frames(camera, np.concatenate(wanted))
            at = 0
            for n, r, m, w in zip(names, refs, real, wanted, strict=True):
                got = flat[at : at + w.size]
                at += w.size
                if m is None:
                    out.set_trusted(n, got.reshape(*r.shape, *flat.shape[1:]))
                else:  # a sequence's padding steps: zero frames, as a buffer of frames pads
                    full = np.zeros((*r.shape, *flat.shape[1:]), flat.dtype)
                    full[m] = got
                    out.set_trusted(n, full)
        return out


def _real(refs: np.ndarray, seq_lens: np.ndarray | None) -> np.ndarray | None:
    """Where a sequence batch's references are real steps (``[B, W, ...]``, step ``w`` real
    while ``w < seq_lens``), or None where every reference is (not a sequence, no padding)."""
    if seq_lens is None or refs.ndim < 2:
        return None
    steps = np.arange(refs.shape[1]) < np.asarray(seq_lens)[:, None]
    if steps.all():
        return None
    return np.broadcast_to(steps.reshape(*steps.shape, *(1,) * (refs.ndim - 2)), refs.shape)
