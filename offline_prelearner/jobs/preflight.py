"""What both jobs do before any work starts: the config, the files, the format, the spaces, the
class.

:func:`job_config` makes the config an entry point was given (a config, a dict, or a file's path
on the local disk or a store: the config is the leaf and opens no store, so the file is read
here).
:func:`prepare` lists the input files, fills in what depends on them (:func:`resolve_config`:
the detected format, the spaces a ``convert`` declared) and builds the prelearner once, dry
(:func:`prelearner_class`), so that a bad config fails here in one line, not in a Ray worker.
:class:`NodeCheck` asks every other node of a Ray cluster, before any unit starts, whether it
sees the job's local inputs and its staging folder as the driver does (a path on one machine's
disk is refused in one line, naming the path and the node).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from ..config import PreLearnerConfig
from ..errors import ConfigError
from ..io.sources import check_one_format, detect_format, expand_paths
from ..io.stores import is_remote, locate, read_file
from ..plugins import import_object
from ..prelearner import OfflinePreLearner

__all__ = [
    "MIXED_FORMAT_CHECKED",
    "ConfigLike",
    "NodeCheck",
    "job_config",
    "prelearner_class",
    "prepare",
    "resolve_config",
]

#: What the library's entry points take as ``config``.
ConfigLike = PreLearnerConfig | Mapping[str, Any] | str | os.PathLike[str] | None

#: The ``read.format`` values under which a mix of formats among the files is refused (with
#: ``"auto"``, whose detection refuses it); a format read whole (Minari, D4RL) is not checked.
MIXED_FORMAT_CHECKED = ("rows", "episodes", "sample_batches")


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
        from ..config.files import MAX_CONFIG_BYTES

        text = os.fspath(config)
        name = locate(text).path if text.startswith("file://") else text
        return PreLearnerConfig.loads(read_file(text, MAX_CONFIG_BYTES), name)
    if isinstance(config, Mapping):
        sections = {f.name for f in fields(PreLearnerConfig)}
        whole = {k: v for k, v in config.items() if k in sections}
        updates = {k: v for k, v in config.items() if k not in sections}
        base = PreLearnerConfig.from_dict(whole)
        return base.with_updates(updates) if updates else base
    return PreLearnerConfig.coerce(config)


def resolve_config(
    config: PreLearnerConfig, files: list[str], *, check_formats: bool = True
) -> PreLearnerConfig:
    """Fills in what depends on the files: the detected format, and the spaces a ``convert``
    wrote into the Parquet metadata (enforced where the config declares none: the config's win).
    Files of several formats are refused whatever the format chosen
    (:func:`~offline_prelearner.io.sources.check_one_format`).

    Args:
        config: The job's config; ``read.format="auto"`` is replaced by the detected format,
            and ``validate``'s spaces left None may be filled from the files.
        files: The input's data files (:func:`~offline_prelearner.io.sources.expand_paths`).
        check_formats: Open every file to refuse a mix of formats (False: the caller checks
            them, as the batch job does from its planning scan, which reads every footer).

    Returns:
        A new config (or ``config`` itself where nothing was filled in).

    Raises:
        UnsupportedFormatError: The format cannot be detected, or the files mix formats.
    """
    if config.read.format == "auto":
        fmt = detect_format(files, check=check_formats)
        config = replace(config, read=replace(config.read, format=fmt))
    elif check_formats and config.read.format in MIXED_FORMAT_CHECKED:
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
    """``cls`` (a class or ``"package.module:Class"``), else ``config.prelearner``, else base.

    Args:
        config: The job's config; its ``prelearner`` is used where ``cls`` is None.
        cls: An :class:`~offline_prelearner.prelearner.OfflinePreLearner` subclass, or its
            import path ``"package.module:Class"``; None takes the config's, and none there
            gives the base class.

    Returns:
        The class (not an instance).

    Raises:
        ConfigError: The path cannot be imported, or names something that is not a subclass of
            OfflinePreLearner.
    """
    spec = cls if cls is not None else config.prelearner
    if spec is None:
        return OfflinePreLearner
    obj = import_object(spec, f"prelearner {spec!r}") if isinstance(spec, str) else spec
    if not (isinstance(obj, type) and issubclass(obj, OfflinePreLearner)):
        raise ConfigError(f"prelearner {spec!r} is not a subclass of OfflinePreLearner")
    return obj


def prepare(
    path: str | os.PathLike[str] | list[str],
    config: ConfigLike,
    prelearner: Any = None,
    *,
    check_formats: bool = True,
) -> tuple[list[str], PreLearnerConfig, type[OfflinePreLearner]]:
    """Everything that can fail before Ray starts: the config (:func:`job_config`), files,
    format, the class, and one dry construction of the prelearner (connectors, buffers, reader),
    so a bad config is an error here and not a stack trace from inside an actor.

    Args:
        path: The input: a path, glob, store URI or Minari dataset, or a list of them
            (:func:`~offline_prelearner.io.sources.expand_paths`).
        config: The config in any form :func:`job_config` takes.
        prelearner: The prelearner class or its import path, as :func:`prelearner_class`
            takes it; None: the config's.
        check_formats: As :func:`resolve_config` (False: the caller refuses mixed formats).

    Returns:
        ``(files, config, cls)``: the data files, the config resolved against them
        (:func:`resolve_config`) and the prelearner class, built once with that config.

    Raises:
        ConfigError: The config or the class is invalid, or the prelearner refuses the config.
        FileNotFoundError: Nothing matches ``path``.
        DataError: As :func:`~offline_prelearner.io.sources.expand_paths` (a manifest).
        UnsupportedFormatError: The format cannot be told, or the files mix formats.
    """
    config = job_config(config)
    # The prelearner's module is imported before the files are looked at: an input format it
    # registers (``register_format``) is one the detection below knows.
    cls = prelearner_class(config, prelearner)
    files = expand_paths(path if isinstance(path, list) else os.fspath(path))
    config = resolve_config(config, files, check_formats=check_formats)
    cls(config)
    return files, config, cls


# ====================================================================== on a cluster
#: Seconds the nodes of a cluster get, all together, to answer :meth:`NodeCheck.run`; a node
#: that has not answered by then is not judged (the job finds out what it can do).
NODE_CHECK_SECONDS = 30.0
#: Local inputs each node looks at, at most: the first, the last and others evenly between (a
#: folder a node cannot see hides all of its files; 100k stats from every node at once would
#: load a shared filesystem for nothing).
NODE_CHECK_FILES = 64

_ELSEWHERE = (
    "every node of a Ray cluster reads the inputs and writes --out itself: put them on an "
    "object store (s3://, gs://, az://) or a shared filesystem mounted at the same path on "
    "every node"
)


@dataclass(frozen=True)
class NodeCheck:
    """What every node of a cluster must see as the driver does, checked before any unit starts.

    A local path names a file on the disk of the machine it is read on: a job whose inputs or
    ``--out`` lie on the driver's own disk fails on every other node, unit by unit. The check
    runs one tiny task on each other live node (pinned there, no CPU asked, all at once, at most
    :data:`NODE_CHECK_SECONDS` in all) that looks at the local inputs (up to
    :data:`NODE_CHECK_FILES` of them, spread over the list: each there, of the size it has here:
    another file of the same name is not the input) and at the job's staging folder (its
    ``job.json`` names this job: a folder of the same name on the node's own disk is not it).
    Paths on an object store are the same everywhere and are not checked; neither is a
    single-node cluster.

    Args:
        inputs: The job's input files as ``(path or URI, size in bytes)``.
        staging: The job's staging folder on a local or shared disk (None: on an object store).
        job_id: The id the staging folder's ``job.json`` holds.
    """

    inputs: Sequence[tuple[str, int]]
    staging: str | None = None
    job_id: str = ""

    def __post_init__(self) -> None:
        # Only the inputs on a machine's own disk are looked at: a store's object is the same
        # from every node (asked here, by name, so that no node builds a store's client).
        on_disk = tuple((p, s) for p, s in self.inputs if not is_remote(p))
        object.__setattr__(self, "inputs", on_disk)

    def run(self, timeout: float = NODE_CHECK_SECONDS) -> None:
        """Runs the check on the Ray cluster this process is connected to.

        Args:
            timeout: Seconds the nodes get, all together, to answer.

        Raises:
            ConfigError: A node does not see an input or the staging folder as the driver does
                (one line: the path, the node's id and address, what to do).
        """
        local = _spread(list(self.inputs), NODE_CHECK_FILES)
        if not local and self.staging is None:
            return
        from .session.ray_session import import_ray

        ray = import_ray()
        alive = [n for n in ray.nodes() if n.get("Alive")]
        here = ray.get_runtime_context().get_node_id()
        others = [n for n in alive if n.get("NodeID") != here]
        if len(alive) < 2 or not others:
            return
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        check = NodeCheck(local, self.staging, self.job_id)
        task = ray.remote(num_cpus=0, max_retries=0)(_missing_on_node)
        refs = {
            task.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
            ).remote(check): n
            for n in others
        }
        ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        for ref in pending:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        for ref in ready:
            try:
                missing = ray.get(ref)
            except Exception:  # a node lost meanwhile: the job meets it as a lost node
                continue
            if missing is not None:
                node = refs[ref]
                where = f"Ray node {node['NodeID']} ({node.get('NodeManagerAddress', '?')})"
                raise ConfigError(f"{missing} on {where}: {_ELSEWHERE}")

    def missing(self) -> str | None:
        """On a node: what it does not see as the driver does, in words, or None."""
        for path, size in self.inputs:
            try:
                found = os.stat(path).st_size
            except OSError as e:
                return f"the input {path!r} cannot be read ({e.strerror or e})"
            if found != size:
                return (
                    f"the input {path!r} is another file ({found} bytes there, {size} on the "
                    "driver's node)"
                )
        if self.staging is None:
            return None
        try:
            with open(os.path.join(self.staging, "job.json")) as fh:
                staged = json.load(fh).get("job_id")
        except (OSError, ValueError, AttributeError):
            staged = None
        if staged != self.job_id or not os.access(self.staging, os.W_OK):
            return (
                f"the job's staging folder {self.staging!r} (beside --out) is not the one the "
                "driver made"
            )
        return None


def _spread(items: list[tuple[str, int]], n: int) -> tuple[tuple[str, int], ...]:
    """At most ``n`` of ``items``: the first, the last and others evenly between."""
    if len(items) <= n:
        return tuple(items)
    step = (len(items) - 1) / (n - 1)
    return tuple(items[round(k * step)] for k in range(n))


def _missing_on_node(check: NodeCheck) -> str | None:
    """The task :meth:`NodeCheck.run` pins to each node."""
    return check.missing()
