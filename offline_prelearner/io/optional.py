"""Optional dependencies, imported when a format needs them, with the line that installs them."""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import UnsupportedFormatError

__all__ = ["MINARI_EXTRA", "VIDEO_EXTRA", "import_av", "import_h5py", "import_pil_image"]

#: What installs everything the Minari / D4RL readers and writer can need.
MINARI_EXTRA = 'pip install "offline_prelearner[minari]"'

#: What installs the video decoder (PyAV) that LeRobot datasets' cameras need.
VIDEO_EXTRA = 'pip install "offline_prelearner[video]"'


def _import(module: str, what: str, package: str, extra: str = MINARI_EXTRA) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UnsupportedFormatError(
            f"{what} needs {package}, which is not installed: {extra} (or pip install {package})"
        ) from None


def import_h5py(what: str) -> Any:
    """h5py, for ``what`` (e.g. "reading 'main_data.hdf5'").

    Args:
        what: What needs it, as the error message begins.

    Returns:
        The ``h5py`` module.

    Raises:
        UnsupportedFormatError: h5py is not installed; the message says how to install it.
    """
    return _import("h5py", what, "h5py")


def import_pil_image(what: str) -> Any:
    """Pillow's ``PIL.Image``, for ``what`` (decoding JPEG observations).

    Args:
        what: What needs it, as the error message begins.

    Returns:
        The ``PIL.Image`` module.

    Raises:
        UnsupportedFormatError: Pillow is not installed; the message says how to install it.
    """
    return _import("PIL.Image", what, "pillow")


def import_av(what: str) -> Any:
    """PyAV (``av``), for ``what`` (decoding a LeRobot dataset's camera video).

    Args:
        what: What needs it, as the error message begins.

    Returns:
        The ``av`` module.

    Raises:
        UnsupportedFormatError: PyAV is not installed; the message names the ``video`` extra.
    """
    return _import("av", what, "av", VIDEO_EXTRA)
