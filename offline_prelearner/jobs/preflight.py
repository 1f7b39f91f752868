"""What both jobs do before any work starts: the files, the format, the spaces, the class.

:func:`prepare` lists the input files, fills in what depends on them (:func:`resolve_config`:
the detected format, the spaces a ``convert`` declared) and builds the prelearner once, dry
(:func:`prelearner_class`), so that a bad config fails here in one line, not in a Ray worker.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from ..config import PreLearnerConfig
from ..errors import ConfigError
from ..io.sources import check_one_format, detect_format, expand_paths
from ..plugins import import_object
from ..prelearner import OfflinePreLearner

__all__ = ["prelearner_class", "prepare", "resolve_config"]


def resolve_config(config: PreLearnerConfig, files: list[str]) -> PreLearnerConfig:
    """Fills in what depends on the files: the detected format, and the spaces a ``convert``
    wrote into the Parquet metadata (enforced where the config declares none: the config's win).
    Files of several formats are refused whatever the format chosen
    (:func:`~offline_prelearner.io.sources.check_one_format`)."""
    if config.read.format == "auto":
        config = replace(config, read=replace(config.read, format=detect_format(files)))
    elif config.read.format in ("rows", "episodes", "sample_batches"):
        check_one_format(files)
    return _declared_spaces(config, files)


def _declared_spaces(config: PreLearnerConfig, files: list[str]) -> PreLearnerConfig:
    """``config`` with the spaces of the files' :class:`DatasetInfo` where it names none (a
    declaration this package cannot read declares nothing, as before)."""
    from .dataset_info import info_of_files

    v = config.validate
    if v.observation_space is not None and v.action_space is not None:
        return config
    try:
        info = info_of_files(files)
    except Exception:  # an unreadable declaration is no declaration
        return config
    obs = v.observation_space if v.observation_space is not None else info.observation_space
    act = v.action_space if v.action_space is not None else info.action_space
    if obs is v.observation_space and act is v.action_space:
        return config
    return replace(config, validate=replace(v, observation_space=obs, action_space=act))


def prelearner_class(config: PreLearnerConfig, cls: Any = None) -> type[OfflinePreLearner]:
    """``cls`` (a class or ``"package.module:Class"``), else ``config.prelearner``, else base."""
    spec = cls if cls is not None else config.prelearner
    if spec is None:
        return OfflinePreLearner
    obj = import_object(spec, f"prelearner {spec!r}") if isinstance(spec, str) else spec
    if not (isinstance(obj, type) and issubclass(obj, OfflinePreLearner)):
        raise ConfigError(f"prelearner {spec!r} is not a subclass of OfflinePreLearner")
    return obj


def prepare(
    path: str | os.PathLike[str] | list[str], config: PreLearnerConfig, prelearner: Any = None
) -> tuple[list[str], PreLearnerConfig, type[OfflinePreLearner]]:
    """Everything that can fail before Ray starts: files, format, the class, and one dry
    construction of the prelearner (connectors, buffers, reader), so a bad config is an error
    here and not a stack trace from inside an actor."""
    files = expand_paths(path if isinstance(path, list) else os.fspath(path))
    config = resolve_config(config, files)
    cls = prelearner_class(config, prelearner)
    cls(config)
    return files, config, cls
