"""The prelearner's whole configuration: :class:`PreLearnerConfig`, one section per stage.

The sections are in :mod:`.sections`; :meth:`PreLearnerConfig.with_updates` sets fields by flat
name or ``section.field``; :meth:`~PreLearnerConfig.save` / :meth:`~PreLearnerConfig.load` go
through :mod:`.files`.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import gymnasium as gym

from ..errors import ConfigError, shown
from ..spaces import space_from_dict, space_to_dict
from .checks import MAX_SEED, check_int
from .files import dump_text, parse_mapping, read_mapping
from .sections import (
    BufferConfig,
    DecodeLimits,
    ModulesConfig,
    RayConfig,
    ReadConfig,
    SampleConfig,
    ValidateConfig,
)

__all__ = ["FRAGMENTS", "SECTIONS", "ConnectorSpec", "PreLearnerConfig"]

#: A connector as a config names it: a registered name or ``"package.module:Class"``, a
#: ``{"name": ..., **kwargs}`` mapping, or a connector object (a callable).
ConnectorSpec = str | Mapping[str, Any] | Callable[..., Any]

#: The default validation: rows spread over batches arrive as fragments (an episode cut across
#: batches is not done yet), which the buffer joins; its ``on_invalid`` follows ``read``'s.
FRAGMENTS = ValidateConfig(require_done=False)

#: Section name -> its dataclass, in the order a config file lists them.
SECTIONS: dict[str, type] = {
    "read": ReadConfig,
    "validate": ValidateConfig,
    "buffer": BufferConfig,
    "sample": SampleConfig,
    "modules": ModulesConfig,
    "ray": RayConfig,
}


@dataclass(frozen=True)
class PreLearnerConfig:
    """Everything an :class:`~offline_prelearner.prelearner.OfflinePreLearner` needs.

    Sections: ``read`` (input format, schema, decoding), ``validate`` (checks and the invalid-data
    policy), ``buffer``, ``sample``, ``modules``, ``ray``; plus ``connectors`` (an ordered list of
    connector specs: names, ``{"name": ..., **kwargs}`` or ``"package.module:Class"``), ``seed``
    and ``prelearner`` (``"package.module:Class"`` of a custom subclass, for the batch job).

    The defaults read RLlib-recorded row data with no configuration. ``with_updates({"n_step": 3,
    "buffer.kind": "prioritized"})`` sets fields by flat name (a name found in several sections,
    like ``on_invalid``, is set in all of them) or by ``section.field``.

    Attributes:
        read: How input batches become episodes (default: the format detected).
        validate: What is checked, and the invalid-data policy (default: fragments admitted,
            ``on_invalid`` as ``read``'s).
        buffer: The replay buffer each module gets.
        sample: What is sampled from the buffers, and how much.
        modules: How episodes are routed to modules.
        ray: Ray Data settings of the jobs.
        connectors: Connector specs, in the order they run.
        seed: Seeds the buffers' generators; None draws a fresh seed.
        prelearner: ``"package.module:Class"`` of a custom prelearner, for the batch job.

    Raises:
        ConfigError: A section or field is unknown or out of range (each section checks its
            own fields).
    """

    read: ReadConfig = field(default_factory=lambda: ReadConfig(format="auto"))
    validate: ValidateConfig = FRAGMENTS  # this default follows ``read.on_invalid``
    buffer: BufferConfig = field(default_factory=BufferConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    modules: ModulesConfig = field(default_factory=ModulesConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    connectors: tuple[ConnectorSpec, ...] = ()
    seed: int | None = 0
    prelearner: str | None = None

    def __post_init__(self) -> None:
        for name, cls in SECTIONS.items():
            value = getattr(self, name)
            if name == "validate" and (value is None or value is FRAGMENTS):
                # The default keeps the read's policy (``read`` is built: it comes first).
                value = replace(FRAGMENTS, on_invalid=self.read.on_invalid)
                object.__setattr__(self, "validate", value)
            if isinstance(value, dict):
                object.__setattr__(self, name, _build(cls, name, value))
            elif not isinstance(value, cls):
                raise ConfigError(
                    f"{name} must be a {cls.__name__} or a dict, found {shown(value)}"
                )
        if isinstance(self.connectors, list | tuple):
            object.__setattr__(self, "connectors", tuple(self.connectors))
        else:
            raise ConfigError(f"connectors must be a list, found {shown(self.connectors)}")
        check_int("config.seed", self.seed, 0, MAX_SEED, none_ok=True)
        if self.prelearner is not None and (
            not isinstance(self.prelearner, str) or ":" not in self.prelearner
        ):
            raise ConfigError(
                f"prelearner must be 'package.module:Class', found {shown(self.prelearner)}"
            )

    # ------------------------------------------------------------------ updates
    def with_updates(self, updates: Mapping[str, Any]) -> PreLearnerConfig:
        """A copy with fields set by flat name or ``section.field`` (see the class docstring)."""
        sections: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
        top: dict[str, Any] = {}
        for key, value in updates.items():
            if "." in key:
                sec, _, fname = key.partition(".")
                if sec not in sections:
                    close = difflib.get_close_matches(sec, sorted(sections), n=3)
                    hint = f"; did you mean {' or '.join(close)}?" if close else ""
                    raise ConfigError(
                        f"unknown config section {sec!r} in {key!r}{hint} "
                        f"(sections: {', '.join(sorted(sections))})"
                    )
                if fname not in _field_names(SECTIONS[sec]):
                    known = sorted(_field_names(SECTIONS[sec]))
                    close = difflib.get_close_matches(fname, known, n=3)
                    hint = f"; did you mean {' or '.join(close)}?" if close else ""
                    raise ConfigError(f"unknown config field {key!r}{hint}")
                sections[sec][fname] = value
                continue
            owners = [s for s, cls in SECTIONS.items() if key in _field_names(cls)]
            if key in _field_names(PreLearnerConfig) and key not in sections:
                top[key] = value
            elif owners:
                for s in owners:
                    sections[s][key] = value
            else:
                close = difflib.get_close_matches(key, sorted(_all_fields()), n=3)
                hint = f"; did you mean {' or '.join(close)}?" if close else ""
                raise ConfigError(f"unknown config field {key!r}{hint}")
        changes: dict[str, Any] = dict(top)
        for sec, vals in sections.items():
            if vals:
                changes[sec] = _build(
                    type(getattr(self, sec)), sec, {**_asdict(getattr(self, sec)), **vals}
                )
        return replace(self, **changes)

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (spaces in RLlib's space-dict layout, schemas by name or content)."""
        out: dict[str, Any] = {}
        for name in SECTIONS:
            out[name] = {k: _jsonable(v) for k, v in _asdict(getattr(self, name)).items()}
        out["connectors"] = [_jsonable(c) for c in self.connectors]
        out["seed"] = self.seed
        out["prelearner"] = self.prelearner
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PreLearnerConfig:
        """The config :meth:`to_dict` wrote (sections as dicts or section objects). Raises
        :class:`ConfigError` naming any unknown section, or a field a section does not accept."""
        unknown = set(d) - _field_names(cls)
        if unknown:
            raise ConfigError(
                f"unknown config sections {sorted(unknown)}; known: {sorted(_field_names(cls))}"
            )
        kw = dict(d)
        if isinstance(kw.get("validate"), dict):
            kw["validate"] = _build(SECTIONS["validate"], "validate", kw["validate"])
        return cls(**kw)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Writes JSON, or YAML when the path ends in .yaml/.yml."""
        text = dump_text(self.to_dict(), os.fspath(path))
        with open(path, "w") as fh:
            fh.write(text)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> PreLearnerConfig:
        """Reads a JSON or YAML file written by :meth:`save` (or by hand)."""
        data = read_mapping(path)
        try:
            return cls.from_dict(data)
        except ConfigError as e:
            raise ConfigError(f"config file {os.fspath(path)!r}: {e}") from None

    @classmethod
    def loads(cls, text: str | bytes, name: str) -> PreLearnerConfig:
        """A config from the text of a JSON or YAML file that the caller read (from a store,
        say: the config does not open stores), ``name`` its path (``.yaml``/``.yml``: YAML).

        Args:
            text: The file's content (at most ``MAX_CONFIG_BYTES``).
            name: Where it came from, for the format and the errors.

        Returns:
            The config the text holds.

        Raises:
            ConfigError: The text does not parse, or holds an invalid config.
        """
        data = parse_mapping(text, name)
        try:
            return cls.from_dict(data)
        except ConfigError as e:
            raise ConfigError(f"config file {name!r}: {e}") from None

    @classmethod
    def coerce(cls, config: Any) -> PreLearnerConfig:
        """A PreLearnerConfig from a config, a dict, a file path, or None (defaults)."""
        if config is None:
            return cls()
        if isinstance(config, cls):
            return config
        if isinstance(config, Mapping):
            return cls.from_dict(config)
        if isinstance(config, str | os.PathLike):
            return cls.load(config)
        raise ConfigError(f"config must be a PreLearnerConfig, dict or path, found {shown(config)}")


def _field_names(cls: type) -> set[str]:
    return {f.name for f in fields(cls)}


def _all_fields() -> set[str]:
    out = {"connectors", "seed", "prelearner"}
    for cls in SECTIONS.values():
        out |= _field_names(cls)
    return out


def _asdict(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def _build(cls: type, section: str, values: Mapping[str, Any]) -> Any:
    unknown = set(values) - _field_names(cls)
    if unknown:
        raise ConfigError(
            f"unknown field(s) {sorted(unknown)} in section {section!r}; known: "
            f"{sorted(_field_names(cls))}"
        )
    vals = dict(values)
    for name in ("observation_space", "action_space"):
        if isinstance(vals.get(name), dict):
            vals[name] = space_from_dict(vals[name])
    if cls is ReadConfig and isinstance(vals.get("limits"), dict):
        vals["limits"] = DecodeLimits(**vals["limits"])
    try:
        return cls(**vals)
    except ConfigError as e:
        msg = str(e)
        raise ConfigError(msg if msg.startswith(section) else f"{section}: {msg}") from None
    except TypeError as e:
        raise ConfigError(f"section {section!r}: {e}") from None


def _jsonable(v: Any) -> Any:
    if isinstance(v, gym.Space):
        return space_to_dict(v)
    if isinstance(v, DecodeLimits):
        return _asdict(v)
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    if hasattr(v, "to_dict") and hasattr(v, "name") and hasattr(v, "columns"):  # ColumnSchema
        return v.to_dict()
    if isinstance(v, str | int | float | bool | type(None) | list | dict):
        return v
    return repr(v)
