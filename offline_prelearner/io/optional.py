"""Optional dependencies, imported when a format needs them, with the line that installs them."""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import UnsupportedFormatError

__all__ = ["MINARI_EXTRA", "import_h5py", "import_pil_image"]

#: What installs everything the Minari / D4RL readers and writer can need.
MINARI_EXTRA = 'pip install "offline_prelearner[minari]"'


def _import(module: str, what: str, package: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UnsupportedFormatError(
            f"{what} needs {package}, which is not installed: {MINARI_EXTRA} (or pip install "
            f"{package})"
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
