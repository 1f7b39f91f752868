"""What both jobs do before any work starts: the config, the files, the format, the spaces, the
class.

:func:`job_config` makes the config an entry point was given (a config, a dict, or a file's path
on the local disk or a store: the config is the leaf and opens no store, so the file is read
here).
:func:`prepare` lists the input files, fills in what depends on them (:func:`resolve_config`:
the detected format, the spaces a ``convert`` declared) and builds the prelearner once, dry
(:func:`prelearner_class`), so that a bad config fails here in one line, not in a Ray worker.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any

from ..config import PreLearnerConfig
from ..errors import ConfigError
from ..io.sources import check_one_format, detect_format, expand_paths
from ..io.stores import is_remote, locate
from ..plugins import import_object
from ..prelearner import OfflinePreLearner

__all__ = ["ConfigLike", "job_config", "prelearner_class", "prepare", "resolve_config"]

#: What the library's entry points take as ``config``.
ConfigLike = PreLearnerConfig | Mapping[str, Any] | str | os.PathLike[str] | None


def job_config(config: ConfigLike) -> PreLearnerConfig:
    """The config an entry point (``run_pipeline``, ``iter_learner_batches``,
    ``split_learner_batches``) was given, as a :class:`PreLearnerConfig`.

    Args:
        config: A config; None (the defaults); a dict, of sections (as
            :meth:`~PreLearnerConfig.to_dict` writes) and/or fields by flat name or
            ``section.field`` (``{"n_step": 3}``, as ``--set`` takes them); or the path of a JSON
            or YAML file: local, ``file://`` or on a store (``s3://bucket/c.yaml``), read through
            :mod:`~offline_prelearner.io.stores` (as the CLI's ``--config``).

    Raises:
        ConfigError: The config, the dict or the file is invalid (naming the file).
        StorageError: The store refused or could not answer.
    """
    if isinstance(config, str | os.PathLike):
        text = os.fspath(config)
        if not is_remote(text):
            return PreLearnerConfig.load(locate(text).path if "://" in text else text)
        from ..config.files import MAX_CONFIG_BYTES

        return PreLearnerConfig.loads(locate(text).read_bytes(MAX_CONFIG_BYTES), text)
    if isinstance(config, Mapping):
        sections = {f.name for f in fields(PreLearnerConfig)}
        whole = {k: v for k, v in config.items() if k in sections}
        updates = {k: v for k, v in config.items() if k not in sections}
        base = PreLearnerConfig.from_dict(whole)
        return base.with_updates(updates) if updates else base
    return PreLearnerConfig.coerce(config)


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
    path: str | os.PathLike[str] | list[str], config: ConfigLike, prelearner: Any = None
) -> tuple[list[str], PreLearnerConfig, type[OfflinePreLearner]]:
    """Everything that can fail before Ray starts: the config (:func:`job_config`), files,
    format, the class, and one dry construction of the prelearner (connectors, buffers, reader),
    so a bad config is an error here and not a stack trace from inside an actor."""
    files = expand_paths(path if isinstance(path, list) else os.fspath(path))
    config = resolve_config(job_config(config), files)
    cls = prelearner_class(config, prelearner)
    cls(config)
    return files, config, cls
