"""Column schemas: which dataset column holds which canonical field, and how it is encoded.

A :class:`ColumnSchema` maps the canonical fields of :mod:`~offline_prelearner.episodes.columns`
(RLlib's names) to a dataset's own column names. A field mapped to ``None`` is one the dataset
does not have (for example D4RL-style data has no episode id: episodes are then split at the done
flags).

Compression is *declared*, never guessed: ``compression`` names, per dataset column, one of

* ``"lz4_msgpack"``   -- this project's codec, :func:`~offline_prelearner.io.codec.unpack_array`;
* ``"legacy_pickle"`` -- RLlib's ``base64(lz4(pickle))`` cells, :func:`~offline_prelearner.io.codec.
  legacy_unpack`; decoded only when the user turns on ``legacy_pickle`` (see
  :meth:`ColumnSchema.check_codecs`).

Presets live as JSON files in the repository's top-level ``schemas/`` folder (``rllib``,
``rllib_compressed``, ``rllib_old_stack``, ``d4rl``, ``minari_transitions``, and ``lerobot`` and
``rllib_obs_only`` for rows without a next observation, below), shipped as the package
data ``offline_prelearner.schemas`` and read with :mod:`importlib.resources`; :func:`load_schema`
accepts a schema, ``None`` (RLlib's new stack), a preset name or a path to a JSON file.

Columns a schema does not map (and does not ``ignore``) are kept as per-step extra columns.

**Rows with observations only.** Data with one observation per step and no next-observation
column (LeRobot-style Parquet: ``observation.state``, ``action``, ``next.reward``, ``next.done``;
any table with ``obs`` but no ``new_obs``) declares ``"next_obs_from": "next_row"`` and maps no
``new_obs`` column: each step's next observation is the next row's ``obs`` within the same episode
(in ``t`` order, else row order). The last row of an episode follows D4RL's
``qlearning_dataset`` rule:

* **terminated** (its terminated flag set): an episode of ``L`` rows keeps ``L`` steps; the last
  step's next observation is never bootstrapped from, and a *copy of the last row's obs* is stored
  there (D4RL would take the next episode's first observation; Minari has the real one);
* **truncated**: ``L - 1`` steps; the last row's obs is the episode's final observation and its
  action and reward are not used: the row is counted rejected, reason ``next_obs_unknown``
  (never raised; a 1-row truncated episode is then rejected whole, also ``next_obs_unknown``);
* **open** (neither flag: the batch or file ends mid-episode): ``L - 1`` steps and the last row is
  held by the reader until its next observation arrives with the episode's next rows (see
  :mod:`~offline_prelearner.io.formats.rows.reader`).

The default, ``"next_obs_from": null`` (or absent), reads the next observation from the column
mapped to ``new_obs``.
"""

from __future__ import annotations

import difflib
import importlib.resources
import json
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..episodes.columns import CANONICAL_FIELDS, NEW_OBS, TERMINATEDS
from ..errors import ConfigError, DecodeError, SchemaError, Where

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

__all__ = [
    "CODECS",
    "DEFAULT_SCHEMA",
    "NEXT_ROW",
    "ColumnSchema",
    "available_schemas",
    "detect_schema",
    "load_schema",
    "nearest_preset",
    "schemas_dir",
]

#: Codecs a schema may declare for a column.
CODECS: tuple[str, ...] = ("lz4_msgpack", "legacy_pickle")

#: The preset used when no schema is given: RLlib's new-stack row layout.
DEFAULT_SCHEMA = "rllib"

_JSON_KEYS = (
    "name",
    "description",
    "columns",
    "required",
    "compression",
    "ignore",
    "dones",
    "next_obs_from",
)

#: Values of ``next_obs_from``: ``None`` (the ``new_obs`` column) or the next row's ``obs``.
NEXT_ROW = "next_row"


@dataclass(frozen=True)
class ColumnSchema:
    """Canonical field -> dataset column, plus codecs, required fields and ignored columns.

    Attributes:
        name: A short name, shown in messages (the preset name for presets).
        columns: Canonical field -> dataset column, or ``None`` when the dataset has no such column.
            Fields left out are ``None``. A field mapped to a column may still be absent from a
            dataset unless it is ``required``.
        compression: Dataset column -> codec (one of :data:`CODECS`), for columns whose cells are
            compressed blobs. Applies to mapped and extra columns alike.
        required: Canonical fields whose column must be present; :meth:`check` lists every
            missing one at once.
        ignore: Dataset columns that are neither fields nor extras (e.g. pandas' index column).
        dones: A legacy column holding ``terminated or truncated`` undistinguished (RLlib's old
            ``dones``). Used only when the ``terminateds`` column is absent; it is then read as
            ``terminateds`` (with ``truncateds`` all false), as RLlib's own readers did.
        description: Free text for ``inspect`` and docs.
        next_obs_from: ``None`` (the default): each step's next observation is the column mapped
            to ``new_obs``. ``"next_row"``: the data has no next-observation column; the next
            observation is the next row's ``obs`` within the episode, and an episode's last row
            follows D4RL's rule (see the module docstring). ``new_obs`` must then map no column.
    """

    name: str
    columns: Mapping[str, str | None]
    compression: Mapping[str, str] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ("__index_level_0__",)
    dones: str | None = None
    description: str = ""
    next_obs_from: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"schema name must be a non-empty string, found {self.name!r}")
        where = f"schema {self.name!r}"
        cols = self._checked_columns(where)
        comp = self._checked_compression(where)
        required = self._checked_required(where, cols)
        self._check_next_obs(where, cols)
        object.__setattr__(self, "columns", MappingProxyType(cols))
        object.__setattr__(self, "compression", MappingProxyType(comp))
        object.__setattr__(self, "required", required)
        object.__setattr__(self, "ignore", tuple(self.ignore))

    def _checked_columns(self, where: str) -> dict[str, str | None]:
        """Every canonical field's column (None where unmapped); refuses unknown fields, names
        that are not non-empty strings, and a column mapped to two fields."""
        if not isinstance(self.columns, Mapping):
            raise ConfigError(f"{where}: columns must be a mapping, found {type(self.columns)}")
        unknown = [f for f in self.columns if f not in CANONICAL_FIELDS]
        if unknown:
            raise ConfigError(
                f"{where}: columns maps unknown fields {unknown}; canonical fields are "
                f"{list(CANONICAL_FIELDS)}"
            )
        cols: dict[str, str | None] = {f: None for f in CANONICAL_FIELDS}
        for f, c in self.columns.items():
            if c is not None and (not isinstance(c, str) or not c):
                raise ConfigError(
                    f"{where}: columns[{f!r}] must be a column name or null, found {c!r}"
                )
            cols[f] = c
        seen: dict[str, str] = {}
        for f, c in cols.items():
            if c is None:
                continue
            if c in seen:
                raise ConfigError(f"{where}: column {c!r} is mapped to both {seen[c]!r} and {f!r}")
            seen[c] = f
        return cols

    def _checked_compression(self, where: str) -> dict[str, str]:
        """The compression map as a dict; refuses a codec not in ``CODECS``."""
        comp = dict(self.compression)
        for c, codec in comp.items():
            if codec not in CODECS:
                raise ConfigError(
                    f"{where}: compression[{c!r}] must be one of {list(CODECS)}, found {codec!r}"
                )
        return comp

    def _checked_required(self, where: str, cols: dict[str, str | None]) -> tuple[str, ...]:
        """The required fields as a tuple; refuses one that is not canonical or maps to no
        column (``terminateds`` may come from ``dones``), and a ``dones`` that is not an
        unmapped column name."""
        required = tuple(self.required)
        for f in required:
            if f not in CANONICAL_FIELDS:
                raise ConfigError(f"{where}: required field {f!r} is not a canonical field")
            if cols[f] is None and not (f == TERMINATEDS and self.dones):
                raise ConfigError(f"{where}: field {f!r} is required but mapped to no column")
        mapped = {c for c in cols.values() if c is not None}
        if self.dones is not None and (not isinstance(self.dones, str) or self.dones in mapped):
            raise ConfigError(
                f"{where}: dones must be an unmapped column name, found {self.dones!r}"
            )
        return required

    def _check_next_obs(self, where: str, cols: dict[str, str | None]) -> None:
        """Refuses a ``next_obs_from`` other than null or ``"next_row"``, and ``"next_row"``
        beside a mapped ``new_obs`` column."""
        if self.next_obs_from not in (None, NEXT_ROW):
            raise ConfigError(
                f"{where}: next_obs_from must be null (the new_obs column) or {NEXT_ROW!r} (the "
                f"next row's obs), found {self.next_obs_from!r}"
            )
        if self.next_obs_from == NEXT_ROW and cols[NEW_OBS] is not None:
            raise ConfigError(
                f"{where}: next_obs_from is {NEXT_ROW!r} but new_obs is mapped to column "
                f"{cols[NEW_OBS]!r}; map new_obs to null, or drop next_obs_from"
            )

    def __hash__(self) -> int:
        return hash(self.to_json())

    @property
    def next_obs_from_next_row(self) -> bool:
        """Whether the next observation is the next row's ``obs`` (no ``new_obs`` column)."""
        return self.next_obs_from == NEXT_ROW

    # ------------------------------------------------------------------ lookups
    def column(self, field_name: str) -> str | None:
        """The dataset column of a canonical field, or None when the schema maps none.

        Args:
            field_name: A canonical field (``obs``, ``actions``, ``rewards``, ``new_obs`` ...).

        Returns:
            The column's name in the dataset, or None for a field this schema leaves unmapped.

        Raises:
            KeyError: ``field_name`` is not a canonical field.
        """
        try:
            return self.columns[field_name]
        except KeyError:
            raise KeyError(f"{field_name!r} is not a canonical field") from None

    def present(self, field_name: str, column_names: Iterable[str]) -> str | None:
        """The field's column if it is mapped *and* among ``column_names``, else None.

        Args:
            field_name: A canonical field (see :meth:`column`).
            column_names: The columns a file or batch actually has.

        Returns:
            The dataset column, or None when unmapped or absent from ``column_names``.
        """
        col = self.column(field_name)
        return col if col is not None and col in set(column_names) else None

    def codec(self, column: str) -> str | None:
        """The declared codec of a dataset column, or None for plain columns.

        Args:
            column: A dataset column name (not a canonical field name).

        Returns:
            ``"lz4_msgpack"`` or ``"legacy_pickle"`` (:data:`CODECS`), or None.
        """
        return self.compression.get(column)

    def mapped_columns(self) -> set[str]:
        """Every dataset column the schema gives a meaning to (fields and ``dones``)."""
        out = {c for c in self.columns.values() if c is not None}
        if self.dones is not None:
            out.add(self.dones)
        return out

    def extras(self, column_names: Iterable[str]) -> list[str]:
        """Columns of the dataset that are neither mapped nor ignored, in dataset order.

        They are kept as per-step extra columns of each episode.

        Args:
            column_names: The dataset's columns, in its order.

        Returns:
            The unmapped, unignored columns, in that order.
        """
        mapped = self.mapped_columns()
        ignored = set(self.ignore)
        return [c for c in column_names if c not in mapped and c not in ignored]

    # ------------------------------------------------------------------ checks
    def missing(self, column_names: Iterable[str]) -> list[str]:
        """Required fields whose column is absent (``dones`` stands in for ``terminateds``).

        Args:
            column_names: The columns a file or batch has.

        Returns:
            The canonical names of the required fields the data cannot provide, in the order of
            ``required``; empty when the data fits.
        """
        names = set(column_names)
        out = []
        for f in self.required:
            col = self.columns[f]
            if col is not None and col in names:
                continue
            if f == TERMINATEDS and self.dones is not None and self.dones in names:
                continue
            out.append(f)
        return out

    def check(self, column_names: Iterable[str], source: str | None = None) -> None:
        """Raises one :class:`SchemaError` listing *every* missing required column.

        Each missing column is listed with the closest present names, so a renamed column
        (``observations`` for ``obs``) is spotted at once.

        Args:
            column_names: The columns a file or batch has.
            source: The file they came from, for the error's location.

        Raises:
            SchemaError: Required columns are missing (``reason="missing_columns"``); the message
                names a preset that fits the columns, or the nearest one, when there is one.
        """
        names = list(column_names)
        missing = self.missing(names)
        if not missing:
            return
        parts = []
        for f in missing:
            col = self.columns[f] or f
            close = _closest(col, names)
            hint = (
                f"closest present: {', '.join(repr(c) for c in close)}"
                if close
                else ("no similar column")
            )
            label = repr(col) if col == f else f"{col!r} (field {f!r})"
            parts.append(f"{label}: {hint}")
        cols = [self.columns[f] or f for f in missing]
        hint = "Pass a schema that maps them (a preset name or a JSON file; see schemas/)."
        try:
            fits = detect_schema(names)
            near, lacks = nearest_preset(names)
        except ConfigError:  # presets unreadable: the message goes without the hint
            fits, near, lacks = None, None, []
        if fits is not None and fits.name != self.name:
            hint = (
                f"The columns fit preset {fits.name!r}: pass --schema {fits.name} "
                f"(ReadConfig(schema={fits.name!r}))."
            )
        elif near is not None and near.name != self.name and len(lacks) < len(missing):
            need = ", ".join(f"{near.columns[f] or f!r} (field {f!r})" for f in lacks)
            hint = f"No preset fits; the nearest, {near.name!r}, lacks only {need}. " + hint
        raise SchemaError(
            f"schema {self.name!r} needs {len(missing)} column(s) the data lacks: "
            + "; ".join(parts)
            + f". Present columns: {names}. "
            + hint,
            Where(file=source, column=cols[0] if len(cols) == 1 else None),
            reason="missing_columns",
        )

    def check_codecs(
        self,
        legacy_pickle: bool,
        column_names: Iterable[str] | None = None,
        source: str | None = None,
    ) -> None:
        """Refuses legacy-pickle columns unless the user turned ``legacy_pickle`` on.

        Args:
            legacy_pickle: Whether the user trusts the data's pickles (``--legacy-pickle``,
                ``ReadConfig(legacy_pickle=True)``); when True nothing is refused.
            column_names: The columns the data has; only those are considered (None: every
                column the schema declares ``legacy_pickle`` for).
            source: The file, for the error's location.

        Raises:
            DecodeError: A ``legacy_pickle`` column is present and ``legacy_pickle`` is off
                (``reason="legacy_pickle_disabled"``).
        """
        if legacy_pickle:
            return
        names = None if column_names is None else set(column_names)
        legacy = [
            c
            for c, k in self.compression.items()
            if k == "legacy_pickle" and (names is None or c in names)
        ]
        if legacy:
            raise DecodeError(
                f"column(s) {legacy} hold RLlib's packed cells (base64(lz4(pickle)), what RLlib "
                "records with output_compress_columns); pickles are not decoded unless you ask: "
                "if you trust the data, pass --legacy-pickle (ReadConfig(legacy_pickle=True)), "
                "which decodes them with a restricted unpickler (numpy arrays and builtins only)",
                Where(file=source, column=legacy[0]),
                reason="legacy_pickle_disabled",
            )

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (only mapped fields are listed under ``columns``; ``next_obs_from``
        only when set)."""
        out = {
            "name": self.name,
            "description": self.description,
            "columns": {f: c for f, c in self.columns.items() if c is not None},
            "required": list(self.required),
            "compression": dict(self.compression),
            "ignore": list(self.ignore),
            "dones": self.dones,
        }
        if self.next_obs_from is not None:
            out["next_obs_from"] = self.next_obs_from
        return out

    def to_json(self) -> str:
        """The schema as indented JSON, in the layout :meth:`from_dict` reads."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], origin: str = "schema") -> ColumnSchema:
        """The schema a JSON object describes.

        Args:
            d: The parsed JSON object (``name``, ``columns`` and the optional keys of
                :meth:`to_dict`).
            origin: What error messages call the schema (a file path, a preset's name).

        Returns:
            The validated schema.

        Raises:
            ConfigError: Not an object, unknown keys, a missing ``name`` or ``columns``, or a
                field the constructor refuses.
        """
        if not isinstance(d, Mapping):
            raise ConfigError(f"{origin}: a schema must be a JSON object, found {type(d).__name__}")
        unknown = sorted(set(d) - set(_JSON_KEYS))
        if unknown:
            raise ConfigError(f"{origin}: unknown schema keys {unknown}; known: {list(_JSON_KEYS)}")
        if "name" not in d or "columns" not in d:
            raise ConfigError(f"{origin}: a schema needs 'name' and 'columns'")
        return cls(
            name=d["name"],
            columns=d["columns"],
            compression=d.get("compression") or {},
            required=tuple(d.get("required") or ()),
            ignore=tuple(d.get("ignore", ("__index_level_0__",))),
            dones=d.get("dones"),
            description=d.get("description") or "",
            next_obs_from=d.get("next_obs_from"),
        )

    @classmethod
    def from_json(cls, text: str | Mapping[str, Any], origin: str = "schema") -> ColumnSchema:
        """From a JSON string (or an already parsed dict).

        Args:
            text: JSON text, or a mapping already parsed from it.
            origin: What error messages call the schema (a file path, a preset's name).

        Returns:
            The validated schema (:meth:`from_dict`).

        Raises:
            ConfigError: The text is not JSON, or :meth:`from_dict` refuses it.
        """
        if isinstance(text, Mapping):
            return cls.from_dict(text, origin)
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{origin}: not valid JSON: {e}") from None
        return cls.from_dict(d, origin)


def _closest(col: str, names: list[str], n: int = 3) -> list[str]:
    """Present names most like ``col``: similar spelling, or one containing the other."""
    low = col.lower()
    cands = set(difflib.get_close_matches(col, names, n=n, cutoff=0.5))
    cands |= {c for c in names if low in c.lower() or (c and c.lower() in low)}
    ratio = {c: difflib.SequenceMatcher(None, low, c.lower()).ratio() for c in cands}
    return sorted(cands, key=lambda c: -ratio[c])[:n]


# ---------------------------------------------------------------------------------------------
# presets and loading
# ---------------------------------------------------------------------------------------------
def schemas_dir() -> Traversable:
    """The preset JSON files: the package data ``offline_prelearner.schemas``.

    That is the repository's top-level ``schemas/`` folder, mapped to the package; a wheel holds
    it as ``offline_prelearner/schemas/``. The result is an :mod:`importlib.resources` traversable
    (a :class:`~pathlib.Path` wherever the package is installed as files).
    """
    try:
        return importlib.resources.files("offline_prelearner.schemas")
    except ModuleNotFoundError:
        raise ConfigError(
            "the schema presets (package data offline_prelearner.schemas) are not installed; "
            "reinstall offline_prelearner, or pass a path to a schema JSON file or a ColumnSchema"
        ) from None


def available_schemas() -> list[str]:
    """Names of the preset schemas."""
    return sorted(p.name[: -len(".json")] for p in schemas_dir().iterdir() if _is_preset(p))


def _is_preset(p: Traversable) -> bool:
    return p.name.endswith(".json") and p.is_file()


def _load_file(path: Path | Traversable) -> ColumnSchema:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read schema file {str(path)!r}: {e}") from None
    return ColumnSchema.from_json(text, origin=str(path))


def load_schema(spec: ColumnSchema | str | os.PathLike[str] | None = None) -> ColumnSchema:
    """A schema from a :class:`ColumnSchema`, ``None`` (RLlib new stack), a preset name or a path.

    A string naming an existing file, or ending in ``.json``, is read as a path; any other string
    is a preset name.

    Args:
        spec: A :class:`ColumnSchema` (returned as is), ``None`` for RLlib's new-stack names, a
            preset name (see ``schemas/``) or the path of a schema JSON file.

    Returns:
        The schema.

    Raises:
        ConfigError: An unknown preset, a path that does not exist, or a file that is not a
            valid schema.
    """
    if isinstance(spec, ColumnSchema):
        return spec
    if spec is None:
        spec = DEFAULT_SCHEMA
    if isinstance(spec, Mapping):
        return ColumnSchema.from_dict(spec)
    if not isinstance(spec, str | os.PathLike):
        raise ConfigError(
            f"schema must be a ColumnSchema, a preset name or a path, found {type(spec).__name__}"
        )
    text = os.fspath(spec)
    path = Path(text)
    if not isinstance(spec, str) or path.suffix == ".json" or path.is_file():
        if not path.is_file():
            raise ConfigError(f"schema file {text!r} does not exist")
        return _load_file(path)
    preset = schemas_dir() / f"{text}.json"
    if not preset.is_file():
        raise ConfigError(
            f"unknown schema preset {text!r}; presets: {available_schemas()} "
            "(or pass a path to a schema JSON file)"
        )
    return _load_file(preset)


def nearest_preset(columns: Iterable[str]) -> tuple[ColumnSchema | None, list[str]]:
    """The preset missing the fewest required columns (then mapping the most present ones), and
    the fields it misses: why :func:`detect_schema` found none, or what a near miss needs.

    Args:
        columns: The dataset's column names.

    Returns:
        The nearest preset and its missing required fields; ``(None, [])`` with no presets.
    """
    names = list(columns)
    present = set(names)
    best: tuple[tuple[int, int], ColumnSchema, list[str]] | None = None
    for preset in available_schemas():
        schema = load_schema(preset)
        missing = schema.missing(names)
        key = (-len(missing), len(schema.mapped_columns() & present))
        if best is None or key > best[0]:
            best = (key, schema, missing)
    return (None, []) if best is None else (best[1], best[2])


def detect_schema(columns: Iterable[str] | pa.Schema) -> ColumnSchema | None:
    """The preset that fits a dataset's columns best, or None when none has its required columns.

    Among fitting presets, the one mapping the most present columns wins. Given an Arrow schema,
    a preset declaring compression for a column wins only where that column holds strings or
    bytes (and a preset without compression only where it does not).

    Args:
        columns: The dataset's column names, or its Arrow schema (whose types then break ties
            between compressed and plain presets).

    Returns:
        The best fitting preset, or None.
    """
    types: dict[str, pa.DataType] | None = None
    if isinstance(columns, pa.Schema):
        types = {f.name: f.type for f in columns}
        names = list(columns.names)
    else:
        names = list(columns)
    present = set(names)
    best: tuple[tuple[int, int], ColumnSchema] | None = None
    for preset in available_schemas():
        schema = load_schema(preset)
        if schema.missing(names):
            continue
        score = len(schema.mapped_columns() & present)
        fit = 0
        if types is not None:
            for field_name in ("obs", "new_obs"):
                col = schema.present(field_name, names)
                if col is None:
                    continue
                blob = (
                    pa.types.is_string(types[col])
                    or pa.types.is_binary(types[col])
                    or (
                        pa.types.is_large_string(types[col]) or pa.types.is_large_binary(types[col])
                    )
                )
                fit += 1 if blob == (schema.codec(col) is not None) else -1
        key = (fit, score)
        if best is None or key > best[0]:
            best = (key, schema)
    return None if best is None else best[1]
