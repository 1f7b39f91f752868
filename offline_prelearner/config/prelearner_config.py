"""The prelearner's whole configuration: :class:`PreLearnerConfig`, one section per stage.

The sections are in :mod:`.sections`; :meth:`PreLearnerConfig.with_updates` sets fields by flat
name or ``section.field``; :meth:`~PreLearnerConfig.save` / :meth:`~PreLearnerConfig.load` go
through :mod:`.files`.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, Literal

import gymnasium as gym

from ..errors import ConfigError, shown
from ..spaces import space_from_dict, space_to_dict
from .checks import MAX_SEED, check_int
from .files import dump_text, parse_mapping, read_mapping
from .sections import (
    KIND_SECTIONS,
    BufferConfig,
    DecodeLimits,
    ModulesConfig,
    RayConfig,
    ReadConfig,
    SampleConfig,
    ValidateConfig,
    build_section,
)

__all__ = ["SECTIONS", "ConnectorSpec", "JobKind", "PreLearnerConfig"]

#: A connector as a config names it: a registered name or ``"package.module:Class"``, a
#: ``{"name": ..., **kwargs}`` mapping, or a connector object (a callable).
ConnectorSpec = str | Mapping[str, Any] | Callable[..., Any]

#: Which job a config runs in (:meth:`PreLearnerConfig.for_job`): the batch job
#: (``run_pipeline``, ``process``) or the learner stream.
JobKind = Literal["batch", "stream"]

#: Section name -> its dataclass, in the order a config file lists them.
SECTIONS: dict[str, type] = {
    "read": ReadConfig,
    "validate": ValidateConfig,
    "buffer": BufferConfig,
    "sample": SampleConfig,
    "modules": ModulesConfig,
    "ray": RayConfig,
}

#: Fields that moved to another section: their old ``section.field`` spelling -> the new one.
#: (A kind's own fields, once beside ``kind``/``unit``, are found from :data:`KIND_SECTIONS`.)
MOVED = {"validate.on_invalid": "read.on_invalid"}


@dataclass(frozen=True)
class PreLearnerConfig:
    """Everything an :class:`~offline_prelearner.prelearner.OfflinePreLearner` needs.

    Sections: ``read`` (input format, schema, decoding, and the one invalid-data policy
    ``on_invalid``), ``validate`` (the checks), ``buffer`` (with ``buffer.prioritized`` or
    ``buffer.mixin`` for those kinds), ``sample`` (with ``sample.sequence`` for sequence units),
    ``modules``, ``ray``; plus ``connectors`` (an ordered list of connector specs: names,
    ``{"name": ..., **kwargs}`` or ``"package.module:Class"``), ``seed`` and ``prelearner``
    (``"package.module:Class"`` of a custom subclass, for the batch job).

    The defaults read RLlib-recorded row data with no configuration. ``with_updates({"n_step": 3,
    "buffer.kind": "prioritized", "buffer.prioritized.alpha": 0.7})`` sets fields by flat name
    (``alpha``) or by their path. The spellings of earlier versions still load, read in one place
    (:meth:`with_updates` and the dict sections of a file): ``buffer.alpha`` / ``beta`` / ``eps``
    (now ``buffer.prioritized.*``), ``buffer.replay_ratio`` (``buffer.mixin.replay_ratio``),
    ``sample.seq_len`` / ``burn_in`` (``sample.sequence.*``) and ``validate.on_invalid``
    (``read.on_invalid``). Such an old spelling at its default value with another kind chosen is
    dropped (earlier versions wrote every kind's fields into every saved config); any other
    value of a kind's field with another kind chosen is a :class:`ConfigError` naming both.

    Attributes:
        read: How input batches become episodes (default: the format detected), and
            ``on_invalid``.
        validate: What is checked (default: fragments admitted, ``require_done=False``).
        buffer: The replay buffer each module gets.
        sample: What is sampled from the buffers, and how much.
        modules: How episodes are routed to modules.
        ray: Ray Data settings of the jobs.
        connectors: Connector specs, in the order they run.
        seed: Seeds the buffers' generators; None draws a fresh seed.
        prelearner: ``"package.module:Class"`` of a custom prelearner, for the batch job.

    Raises:
        ConfigError: A section or field is unknown or out of range (each section checks its
            own fields), or a kind's settings are given with another kind chosen.
    """

    read: ReadConfig = field(default_factory=lambda: ReadConfig(format="auto"))
    #: Rows spread over batches arrive as fragments (an episode cut across batches is not done
    #: yet), which the buffer joins.
    validate: ValidateConfig = field(default_factory=lambda: ValidateConfig(require_done=False))
    buffer: BufferConfig = field(default_factory=BufferConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    modules: ModulesConfig = field(default_factory=ModulesConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    connectors: tuple[ConnectorSpec, ...] = ()
    seed: int | None = 0
    prelearner: str | None = None

    def __post_init__(self) -> None:
        if self.validate is None:  # None: the default
            object.__setattr__(self, "validate", ValidateConfig(require_done=False))
        given = {n: v for n in SECTIONS if isinstance(v := getattr(self, n), Mapping)}
        if given:
            current = {n: None if n in given else getattr(self, n) for n in SECTIONS}
            for name, value in _sections(given, current).items():
                object.__setattr__(self, name, value)
        for name, cls in SECTIONS.items():
            value = getattr(self, name)
            if not isinstance(value, cls):
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
        """A copy with fields set by flat name or by path (see the class docstring).

        Args:
            updates: ``{name: value}``: a flat field name (``"n_step"``, ``"alpha"``,
                ``"on_invalid"``), ``"section.field"``, ``"section.kind.field"``
                (``"buffer.prioritized.alpha"``), a field of a nested settings mapping
                (``"read.limits.max_decompressed_bytes"``, as a YAML file nests it; the other
                limits stay as they were), a kind's whole sub-section as a mapping
                (``"buffer.prioritized": {"alpha": 0.7}``), or an earlier version's spelling.

        Returns:
            The updated copy.

        Raises:
            ConfigError: A name is unknown (with the closest known names), or a value is
                refused.
        """
        sections: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
        top: dict[str, Any] = {}
        for key, value in updates.items():
            if "." in key:
                sec, _, rest = key.partition(".")
                if sec not in sections:
                    close = difflib.get_close_matches(sec, sorted(sections), n=3)
                    hint = f"; did you mean {' or '.join(close)}?" if close else ""
                    raise ConfigError(
                        f"unknown config section {sec!r} in {key!r}{hint} "
                        f"(sections: {', '.join(sorted(sections))})"
                    )
                nested = self._nested_field(sec, rest)
                if nested is not None:  # read.limits.max_decompressed_bytes, as YAML nests it
                    name, sub = nested
                    merged = sections[sec].get(name)
                    if not isinstance(merged, dict):
                        merged = dataclasses.asdict(getattr(getattr(self, sec), name))
                    sections[sec][name] = {**merged, sub: value}
                    continue
                if rest not in _spellings(sec):
                    known = sorted(f"{sec}.{n}" for n in _spellings(sec, old=False))
                    close = difflib.get_close_matches(key, known, n=3)
                    hint = f"; did you mean {' or '.join(close)}?" if close else ""
                    raise ConfigError(f"unknown config field {key!r}{hint}")
                sections[sec][rest] = value
            elif key in _field_names(PreLearnerConfig) and key not in sections:
                top[key] = value
            elif places := _flat_places(key):
                for sec, rest in places:
                    sections[sec][rest] = value
            else:
                close = difflib.get_close_matches(key, sorted(_all_fields()), n=3)
                hint = f"; did you mean {' or '.join(close)}?" if close else ""
                raise ConfigError(f"unknown config field {key!r}{hint}")
        given = {sec: vals for sec, vals in sections.items() if vals}
        changes: dict[str, Any] = dict(top)
        changes.update(_sections(given, {n: getattr(self, n) for n in SECTIONS}))
        return replace(self, **changes)

    def _nested_field(self, section: str, rest: str) -> tuple[str, str] | None:
        """``("limits", "max_decompressed_bytes")`` for ``rest`` naming a field of a section's
        field that is itself a settings dataclass (``read.limits``), else None."""
        name, dot, sub = rest.partition(".")
        value = getattr(getattr(self, section), name, None) if dot else None
        if value is None or not dataclasses.is_dataclass(value) or isinstance(value, type):
            return None
        return (name, sub) if sub in {f.name for f in dataclasses.fields(value)} else None

    def for_job(self, job: JobKind) -> PreLearnerConfig:
        """The config as ``job`` runs it: ``sample.sample_all = None`` (the default) made the
        job's rule. The batch job (``run_pipeline``, and the CLI's ``process``, which calls it)
        writes every transition once (``True``: a dataset); the learner stream draws as RLlib
        does (``False``), as does a prelearner called directly (it reads None as False). A
        ``sample_all`` set to true or false is kept.

        Args:
            job: ``"batch"`` or ``"stream"``.

        Returns:
            This config, with ``sample.sample_all`` a bool.
        """
        if self.sample.sample_all is not None:
            return self
        return replace(self, sample=replace(self.sample, sample_all=job == "batch"))

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (spaces in RLlib's space-dict layout, schemas by name or content):
        ``{section: {field: value}}``, with the chosen kind's sub-section as a nested dict
        (``"buffer": {"kind": "prioritized", ..., "prioritized": {"alpha": 0.6, ...}}``) and no
        key for the sub-sections of kinds not chosen.

        Returns:
            The dict; :meth:`from_dict` reads it back to an equal config.
        """
        out: dict[str, Any] = {name: _section_dict(getattr(self, name)) for name in SECTIONS}
        out["connectors"] = [_jsonable(c) for c in self.connectors]
        out["seed"] = self.seed
        out["prelearner"] = self.prelearner
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PreLearnerConfig:
        """The config :meth:`to_dict` wrote, or an earlier version wrote (see the class
        docstring), or a hand-written one: a section given as a dict is built from that
        section's defaults; sections not given keep the config's.

        Args:
            d: ``{section: dict or section object, "connectors": [...], "seed": ...,
                "prelearner": ...}``.

        Returns:
            The config.

        Raises:
            ConfigError: Naming an unknown section, or a field a section does not accept.
        """
        unknown = set(d) - _field_names(cls)
        if unknown:
            raise ConfigError(
                f"unknown config sections {sorted(unknown)}; known: {sorted(_field_names(cls))}"
            )
        return cls(**d)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Writes JSON, or YAML when the path ends in .yaml/.yml.

        Args:
            path: The file to write.
        """
        text = dump_text(self.to_dict(), os.fspath(path))
        with open(path, "w") as fh:
            fh.write(text)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> PreLearnerConfig:
        """Reads a JSON or YAML file written by :meth:`save` (or by hand).

        Args:
            path: The file: YAML where it ends in ``.yaml``/``.yml``, else JSON.

        Returns:
            The config it holds.

        Raises:
            ConfigError: The file does not parse or holds an invalid config (naming the file).
        """
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
        """A PreLearnerConfig from a config, a dict, a file path, or None (defaults).

        Args:
            config: A :class:`PreLearnerConfig`, a dict of sections (:meth:`from_dict`), the
                path of a JSON or YAML file (:meth:`load`), or None.

        Returns:
            The config.

        Raises:
            ConfigError: ``config`` is none of these, or invalid.
        """
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


def _kinds(section: str) -> tuple[str, dict[str, type]] | None:
    """The tag field of ``section`` and its kinds' sub-section classes (None: no kinds)."""
    for (sec, tag), subs in KIND_SECTIONS.items():
        if sec == section:
            return tag, subs
    return None


def _kind_fields(section: str) -> dict[str, str]:
    """A kind's field -> its kind, for the kinds of ``section`` (``alpha`` -> ``prioritized``)."""
    kinds = _kinds(section)
    if kinds is None:
        return {}
    return {f: kind for kind, cls in kinds[1].items() for f in _field_names(cls)}


def _spellings(section: str, old: bool = True) -> set[str]:
    """What may follow ``section.`` in an update: its fields, ``kind.field`` of its kinds, and
    (``old``) the spellings of earlier versions (a kind's field beside ``kind``, a moved field)."""
    names = _field_names(SECTIONS[section])
    names |= {f"{kind}.{f}" for f, kind in _kind_fields(section).items()}
    if not old:
        return names
    names |= set(_kind_fields(section))
    return names | {was.partition(".")[2] for was in MOVED if was.startswith(section + ".")}


def _flat_places(name: str) -> list[tuple[str, str]]:
    """Where a flat name goes: ``(section, field)`` for every section that has the field (all
    of them), else ``(section, "kind.field")`` for a kind's field."""
    owners = [(s, name) for s, cls in SECTIONS.items() if name in _field_names(cls)]
    if owners:
        return owners
    return [(s, f"{k}.{name}") for s in SECTIONS if (k := _kind_fields(s).get(name)) is not None]


def _all_fields() -> set[str]:
    out = {"connectors", "seed", "prelearner"}
    for name, cls in SECTIONS.items():
        out |= _field_names(cls) | set(_kind_fields(name))
    return out


def _asdict(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def _sections(given: Mapping[str, Mapping[str, Any]], current: Mapping[str, Any]) -> dict[str, Any]:
    """The sections ``given`` (``{section: {field: value}}``, fields in any spelling) make, each
    over ``current[section]`` (None: that section's defaults). The one place where the
    spellings of earlier versions are read: ``validate.on_invalid`` moves to ``read``, a kind's
    field beside ``kind`` moves into the kind's sub-section (:func:`_nest`)."""
    updates = {sec: dict(vals) for sec, vals in given.items()}
    for old, new in MOVED.items():
        sec, _, name = old.partition(".")
        if name in updates.get(sec, {}):
            value = updates[sec].pop(name)
            to_sec, _, to_name = new.partition(".")
            target = updates.setdefault(to_sec, {})
            if to_name in target and target[to_name] != value:
                raise ConfigError(
                    f"{old}={value!r} contradicts {new}={target[to_name]!r}: {old} is the old "
                    f"spelling of {new}; give one"
                )
            target[to_name] = value
    out: dict[str, Any] = {}
    for sec, vals in updates.items():
        if not vals and current.get(sec) is not None:
            continue
        base = current.get(sec)
        if base is None and sec not in given:  # moved into a section not given: its default
            base = getattr(_DEFAULT, sec)
        out[sec] = _build(SECTIONS[sec], sec, _nest(sec, vals, base))
    return out


def _nest(section: str, values: Mapping[str, Any], current: Any) -> dict[str, Any]:
    """``values`` over ``current``'s fields (None: none, the section's defaults), with a kind's
    settings in the kind's sub-section: ``kind.field`` and ``kind: {...}`` spellings merged into
    it, and the old spelling (the field beside ``kind``) too where that kind is chosen. An old
    spelling for a kind not chosen is dropped at its default value, else refused."""
    out = _asdict(current) if current is not None else {}
    kinds = _kinds(section)
    if kinds is None:
        return {**out, **values}
    tag, subs = kinds
    by_kind = _kind_fields(section)
    new: dict[str, dict[str, Any]] = {}
    old: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        head, dot, rest = key.partition(".")
        if dot and head in subs:
            new.setdefault(head, {})[rest] = value
        elif key in subs and value is not None:
            if isinstance(value, subs[key]):
                value = _asdict(value)
            if not isinstance(value, Mapping):
                raise ConfigError(
                    f"{section}.{key} must be a mapping of its settings, found {shown(value)}"
                )
            new.setdefault(key, {}).update(value)
        elif key in by_kind:
            old.setdefault(by_kind[key], {})[key] = value
        elif key not in subs:
            out[key] = value
    chosen = out.get(tag, _default(SECTIONS[section], tag))
    for kind, cls in subs.items():
        given, stale = new.get(kind), old.get(kind, {})
        if kind != chosen:
            for name, value in stale.items():
                if not _same(value, _default(cls, name)):
                    raise ConfigError(
                        f"{section}.{name} (now {section}.{kind}.{name}) is set but "
                        f"{section}.{tag} is {chosen!r}: it applies only with "
                        f"{section}.{tag}={kind!r}"
                    )
            out[kind] = given  # None drops it; a mapping is refused by the section, naming both
            continue
        both = sorted(n for n in set(stale) & set(given or {}) if stale[n] != (given or {})[n])
        if both:
            raise ConfigError(
                f"{section}.{both[0]} and {section}.{kind}.{both[0]} disagree: "
                f"{section}.{both[0]} is the old spelling; give one"
            )
        held = out.get(kind)
        out[kind] = {**(_asdict(held) if held is not None else {}), **stale, **(given or {})}
    return out


def _default(cls: type, name: str) -> Any:
    f = cls.__dataclass_fields__[name]  # type: ignore[attr-defined]
    return f.default if f.default is not MISSING else f.default_factory()


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is not bool and bool(a == b)
    except (TypeError, ValueError):
        return False


def _build(cls: type, section: str, values: Mapping[str, Any]) -> Any:
    vals = dict(values)
    for name in ("observation_space", "action_space"):
        if isinstance(vals.get(name), dict):
            vals[name] = space_from_dict(vals[name])
    if cls is ReadConfig and isinstance(vals.get("limits"), dict):
        vals["limits"] = DecodeLimits(**vals["limits"])
    try:
        return build_section(cls, section, vals)
    except ConfigError as e:
        msg = str(e)
        raise ConfigError(msg if msg.startswith(section) else f"{section}: {msg}") from None
    except TypeError as e:
        raise ConfigError(f"section {section!r}: {e}") from None


def _section_dict(section: Any) -> dict[str, Any]:
    """A section as JSON: the chosen kind's sub-section nested, none for the kinds not chosen."""
    subs = {kind for kinds in KIND_SECTIONS.values() for kind in kinds}
    out: dict[str, Any] = {}
    for name, value in _asdict(section).items():
        if name in subs and value is None:
            continue
        out[name] = _section_dict(value) if name in subs else _jsonable(value)
    return out


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


_DEFAULT = PreLearnerConfig()
