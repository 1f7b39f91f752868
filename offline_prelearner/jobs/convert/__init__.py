"""Conversion between formats: every format read -> every format written, through the episodes.

:func:`~.path.convert` (:func:`~.path.convert_path`, its keyword form) dispatches on the source
format and the target: :mod:`.by_file` converts rows, msgpack episodes and old-stack data a unit
per file, :mod:`.relayout` rewrites rows in another tensor layout, :mod:`.dataset` converts whole
Minari / D4RL datasets and writes Minari; :mod:`.tables` builds the output tables and
:mod:`.config` holds the settings (:class:`~.config.ConvertConfig`).
"""

from .config import ConvertConfig
from .path import convert, convert_path

__all__ = ["ConvertConfig", "convert", "convert_path"]
