"""Sample frames of an image observation as PNG ``data:`` URIs (zlib and a CRC, no imaging
library: the page must not need Pillow)."""

from __future__ import annotations

import base64
import struct
import zlib

import numpy as np

__all__ = ["png_data_uri", "to_png"]


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _as_uint8(frame: np.ndarray) -> np.ndarray:
    """Any dtype to 0..255: uint8 as it is, else scaled from the frame's own range."""
    if frame.dtype == np.uint8:
        return frame
    f = np.nan_to_num(frame.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    lo, hi = float(f.min()), float(f.max())
    scale = 255.0 / (hi - lo) if hi > lo else 0.0
    return np.round((f - lo) * scale).astype(np.uint8)


def to_png(frame: np.ndarray) -> bytes:
    """One frame (``H x W``, ``H x W x 1``, ``x 3`` or ``x 4``) as PNG bytes.

    Args:
        frame: The frame; non-uint8 values are scaled to 0..255 over the frame's range.

    Returns:
        The PNG file's bytes (8-bit grey, RGB or RGBA).
    """
    f = _as_uint8(np.asarray(frame))
    if f.ndim == 3 and f.shape[2] == 1:
        f = f[:, :, 0]
    h, w = f.shape[:2]
    color = {2: 0, 3: 2}[f.ndim] if f.ndim == 2 or f.shape[2] == 3 else 6
    rows = np.ascontiguousarray(f).reshape(h, -1)
    raw = np.concatenate([np.zeros((h, 1), np.uint8), rows], axis=1).tobytes()  # filter 0
    header = struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(raw, 6))
        + _chunk(b"IEND", b"")
    )


def png_data_uri(frame: np.ndarray) -> str:
    """:func:`to_png` as a ``data:image/png;base64,...`` URI.

    Args:
        frame: The frame.

    Returns:
        The URI.
    """
    return "data:image/png;base64," + base64.b64encode(to_png(frame)).decode("ascii")
