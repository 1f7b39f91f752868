"""Frozen, validated configuration dataclasses, one per stage.

Every field is documented where it is declared; construction checks values and raises
:class:`~offline_prelearner.errors.ConfigError` naming the field.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .episodes.ledger import OnInvalid, check_on_invalid
from .errors import ConfigError, shown
from .io.codec import DecodeLimits

__all__ = [
    "BufferConfig",
    "ModulesConfig",
    "OnInvalid",
    "PreLearnerConfig",
    "RayConfig",
    "ReadConfig",
    "SampleConfig",
    "check_bool",
    "check_choice",
    "check_float",
    "check_int",
    "check_on_invalid",
]


@dataclass(frozen=True)
class ReadConfig:
    """How input batches become episodes.

    Attributes:
        format: Reader name: ``"rows"`` (one transition per row), ``"episodes"`` (msgpack
            episodes in an ``item`` column), ``"sample_batches"`` (old-stack records), ``"auto"``
            (chosen from the files, or from the first batch's columns; the prelearner's
            default), or any name registered with ``register_reader``.
        schema: A :class:`~offline_prelearner.io.schema.ColumnSchema`, a preset name (see
            ``schemas/``) or a path to a schema JSON file. ``None`` means RLlib's new-stack names.
        legacy_pickle: Decode RLlib's legacy ``base64(lz4(pickle))`` compressed columns through
            the restricted unpickler. Off by default: data files are untrusted.
        on_invalid: ``"raise"`` | ``"skip"`` | ``"quarantine"`` for rows that cannot be read.
        check_continuity: Check that each step's ``new_obs`` equals the next step's ``obs``
            within an episode (with a ``t`` column: ``new_obs[t] == obs[t+1]``), so a scrambled
            row order or a contradicting ``t`` is an error.
        limits: Size limits for decoding untrusted bytes.
        max_episode_steps: D4RL files without ``timeouts``: also end an episode (truncated) after
            this many steps since the last end, as D4RL's own ``sequence_dataset`` does with the
            env's time limit (not in the file). None: only terminals end episodes.
    """

    format: str = "rows"
    schema: Any = None
    legacy_pickle: bool = False
    on_invalid: OnInvalid = "raise"
    check_continuity: bool = True
    limits: DecodeLimits = field(default_factory=DecodeLimits)
    max_episode_steps: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.format, str) or not self.format:
            raise ConfigError(f"format must be a non-empty string, found {shown(self.format)}")
        check_on_invalid(self.on_invalid)
        if not isinstance(self.limits, DecodeLimits):
            raise ConfigError(
                "read.limits must be a mapping of size limits, e.g. "
                f'{{"max_decompressed_bytes": 1048576}}, found {shown(self.limits)}'
            )
        for name in ("legacy_pickle", "check_continuity"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(
                    f"{name} must be true or false, found {shown(getattr(self, name))}"
                )
        _check_int("read", "max_episode_steps", self.max_episode_steps, 1, MAX_STEPS, True)


# ============================================================================================
# The prelearner's configuration: one frozen section per stage.
# ============================================================================================
BUFFER_KINDS = ("uniform", "prioritized", "mixin", "reservoir")
DEFAULT_MODULE_ID = "default_policy"  # RLlib's DEFAULT_MODULE_ID


# Upper bounds of the integer settings, checked before anything is allocated by them: far above
# any real job, low enough that a typo (train_batch_size=10**12) is one line, not a MemoryError.
MAX_STEPS = 10**10  # buffer.capacity, learning_starts, max_episode_steps: timesteps
MAX_TRAIN_BATCH = 1 << 22  # sample.train_batch_size: 4,194,304 samples per batch
MAX_NUM_SAMPLES = 10**12  # sample.num_samples
MAX_N_STEP = 10_000  # sample.n_step (each end of a range)
MAX_SEQ_LEN = 100_000  # sample.seq_len, sample.burn_in
MAX_FRAME_STACK = 256  # sample.frame_stack (Atari stacks 4)
MAX_BATCH_ROWS = 10**7  # ray.batch_size: rows per map_batches batch
MAX_CONCURRENCY = 10_000  # ray.concurrency, ray.footer_readers
MAX_THREADS = 1024  # ray.read_threads
MAX_BLOCK_MB = 65_536  # ray.block_mb (64 GiB)
MAX_SEED = 2**63 - 1


def check_int(label: str, value: Any, lo: int, hi: int, none_ok: bool = False) -> Any:
    """The validator of an integer setting, used by the config and by the object it builds (the
    storage's capacity, a sample's batch size): an int (not a bool) in ``[lo, hi]``.

    Returns:
        The value (None where ``none_ok`` and it is None).

    Raises:
        ConfigError: Naming ``label``, the range and the value found (cut, see ``shown``).
    """
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(f"{label} must be an integer in [{lo}, {hi}], found {shown(value)}")
    return value


def check_float(
    label: str,
    value: Any,
    lo: float,
    hi: float,
    *,
    none_ok: bool = False,
    lo_open: bool = False,
) -> Any:
    """The validator of a number setting: an int or float (not a bool) in ``[lo, hi]``, or
    ``(lo, hi]`` with ``lo_open`` (a value that must stay positive, like a priority floor).

    Returns:
        The value as a float (None where ``none_ok`` and it is None).

    Raises:
        ConfigError: Naming ``label``, the range and the value found.
    """
    if value is None and none_ok:
        return None
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not ((lo < value) if lo_open else (lo <= value)) or not value <= hi:
        interval = f"({lo}, {hi}]" if lo_open else f"[{lo}, {hi}]"
        raise ConfigError(f"{label} must be a number in {interval}, found {shown(value)}")
    return float(value)


def check_bool(label: str, value: Any) -> bool:
    """The validator of a switch: ``True`` or ``False`` (not 1, not ``"yes"``).

    Raises:
        ConfigError: Naming ``label`` and the value found.
    """
    if not isinstance(value, bool):
        raise ConfigError(f"{label} must be true or false, found {shown(value)}")
    return value


def check_choice(label: str, value: Any, choices: tuple[str, ...]) -> Any:
    """The validator of a setting that names one of a few ``choices``.

    Raises:
        ConfigError: Naming ``label``, the choices and the value found.
    """
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(f"{label} must be one of {choices}, found {shown(value)}")
    return value


def _check_int(
    section: str, name: str, value: Any, lo: int, hi: int, none_ok: bool = False
) -> None:
    check_int(f"{section}.{name}", value, lo, hi, none_ok)


def _check_float(section: str, name: str, value: Any, lo: float, hi: float) -> None:
    check_float(f"{section}.{name}", value, lo, hi)


@dataclass(frozen=True)
class BufferConfig:
    """The replay buffer each module's episodes go into.

    Attributes:
        kind: ``"uniform"`` (every valid step equally likely), ``"prioritized"`` (Schaul et al.;
            ``update_priorities`` feeds it), ``"mixin"`` (the newest data always, plus old data by
            ``replay_ratio``) or ``"reservoir"`` (eviction keeps a uniform sample of all data).
        capacity: Slots of ring storage per module: timesteps plus one final observation per
            episode. The oldest whole episodes are evicted to make room.
        learning_starts: No samples before this many timesteps were added (per module).
        alpha, beta, eps: Prioritized replay exponents and the priority floor.
        replay_ratio: MixIn: replayed / (replayed + new), in [0, 1].
        max_samples_per_insert: Optional rate limit: sampled rows per inserted timestep.
    """

    kind: str = "uniform"
    capacity: int = 1_000_000
    learning_starts: int = 0
    alpha: float = 0.6
    beta: float = 0.4
    eps: float = 1e-6
    replay_ratio: float = 0.5
    max_samples_per_insert: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in BUFFER_KINDS:
            raise ConfigError(
                f"buffer.kind must be one of {BUFFER_KINDS}, found {shown(self.kind)}"
            )
        _check_int("buffer", "capacity", self.capacity, 2, MAX_STEPS)
        _check_int("buffer", "learning_starts", self.learning_starts, 0, MAX_STEPS)
        _check_float("buffer", "alpha", self.alpha, 0.0, 10.0)
        _check_float("buffer", "beta", self.beta, 0.0, 10.0)
        _check_float("buffer", "eps", self.eps, 0.0, 1.0)
        _check_float("buffer", "replay_ratio", self.replay_ratio, 0.0, 1.0)
        if self.max_samples_per_insert is not None:
            _check_float("buffer", "max_samples_per_insert", self.max_samples_per_insert, 0, 1e12)


@dataclass(frozen=True)
class SampleConfig:
    """What each sample is, and how many are drawn.

    Attributes:
        unit: ``"transition"`` (1-step, or n-step when ``n_step`` is not 1) or ``"sequence"``
            (``[B, seq_len]`` windows with ``seq_lens`` and ``loss_mask``).
        n_step: An int, or an inclusive ``[lo, hi]`` range drawn per sample. Windows stop at
            episode ends; ``rewards`` is the discounted sum over the steps taken.
        gamma: Discount for n-step returns and return connectors.
        seq_len, burn_in: Sequence length (loss steps) and extra leading steps for RNN burn-in.
        frame_stack: Stack the last k observations at sample time (1 = off).
        train_batch_size: Samples drawn per input batch (RLlib's behaviour: each batch that enters
            ``map_batches`` yields one train batch per module).
        num_samples: Cap on the total number of samples the job writes (``None``: no cap).
        sample_all: Instead of random replay, emit every valid transition (or sequence) of each
            complete episode exactly once, in episode order (a BC epoch, an n-step dataset).
    """

    unit: str = "transition"
    n_step: Any = 1
    gamma: float = 0.99
    seq_len: int = 20
    burn_in: int = 0
    frame_stack: int = 1
    train_batch_size: int = 256
    num_samples: int | None = None
    sample_all: bool = False

    def __post_init__(self) -> None:
        if self.unit not in ("transition", "sequence"):
            raise ConfigError(
                f"sample.unit must be 'transition' or 'sequence', found {shown(self.unit)}"
            )
        n = self.n_step
        if isinstance(n, list | tuple):
            if len(n) != 2 or any(isinstance(v, bool) or not isinstance(v, int) for v in n):
                raise ConfigError(
                    f"sample.n_step range must be [lo, hi] integers, found {shown(n)}"
                )
            if not 1 <= n[0] <= n[1] <= MAX_N_STEP:
                raise ConfigError(
                    f"sample.n_step range needs 1 <= lo <= hi <= {MAX_N_STEP}, found {shown(n)}"
                )
            object.__setattr__(self, "n_step", (int(n[0]), int(n[1])))
        else:
            _check_int("sample", "n_step", n, 1, MAX_N_STEP)
        _check_float("sample", "gamma", self.gamma, 0.0, 1.0)
        _check_int("sample", "seq_len", self.seq_len, 1, MAX_SEQ_LEN)
        _check_int("sample", "burn_in", self.burn_in, 0, MAX_SEQ_LEN)
        _check_int("sample", "frame_stack", self.frame_stack, 1, MAX_FRAME_STACK)
        _check_int("sample", "train_batch_size", self.train_batch_size, 1, MAX_TRAIN_BATCH)
        _check_int("sample", "num_samples", self.num_samples, 1, MAX_NUM_SAMPLES, True)
        if not isinstance(self.sample_all, bool):
            raise ConfigError(
                f"sample.sample_all must be true or false, found {shown(self.sample_all)}"
            )


@dataclass(frozen=True)
class ModulesConfig:
    """Which modules are trained, and which module an agent's episodes belong to.

    Attributes:
        modules_to_train: Module ids whose samples are emitted (``None``: all). Samples of other
            modules are dropped before output.
        agent_to_module: ``{agent_id: module_id}``, or ``"package.module:function"`` mapping an
            agent id to a module id. Episodes carrying a ``module_id`` keep it.
        default_module: Module of episodes with neither (single-agent data): RLlib's
            ``"default_policy"``.
    """

    modules_to_train: tuple[str, ...] | None = None
    agent_to_module: Any = None
    default_module: str = DEFAULT_MODULE_ID

    def __post_init__(self) -> None:
        m = self.modules_to_train
        if m is not None:
            if isinstance(m, str) or not all(isinstance(x, str) for x in m):
                raise ConfigError(
                    f"modules.modules_to_train must be a list of ids, found {shown(m)}"
                )
            object.__setattr__(self, "modules_to_train", tuple(m))
        a = self.agent_to_module
        if a is not None and not isinstance(a, dict) and not (isinstance(a, str) and ":" in a):
            raise ConfigError(
                "modules.agent_to_module must be a {agent: module} map or 'package.module:fn', "
                f"found {shown(a)}"
            )


@dataclass(frozen=True)
class RayConfig:
    """How the batch job runs on Ray Data.

    Attributes:
        address: Ray cluster address (``None``: ``RAY_ADDRESS`` or a local instance).
        concurrency: The batch job: units of work run at once (``None``: as many as the
            cluster's CPUs allow; units are self-contained, so any number is safe). The learner
            stream: OfflinePreLearner actors in ``map_batches`` (``None``: 1). Row data without
            a ``t`` column must stay in file order there: use 1, or ``group_by_episode``.
        batch_size: Rows per ``map_batches`` batch (``None``: one block at a time).
        num_cpus: CPUs reserved per prelearner actor.
        group_by_episode: Group rows by ``eps_id`` with Ray Data (``groupby().map_groups``) so
            every batch holds whole episodes, whatever the file layout.
        block_mb: Target size of the Ray Data blocks our datasets read and emit, in MiB (Ray's
            default is 128). Smaller blocks let the prelearner start while the rest is read and
            stream learner batches as they are made: with 128 MiB, 1M CartPole rows are one
            block and a learner sees its first batch only when all of them are done. Where the
            learner stream's actors read their own files (``read``), the only blocks are their
            outputs, and those are cut only past 384 MiB: a train batch stays one block.
        footer_readers: Actors Ray Data starts to read Parquet footers before the read
            (``None``: one per 10 files, at most 32). Ray's own default is 32 whatever the number
            of files; each is a new worker process, which costs a second or more of wall time on
            a small machine while reading 10 files needs one. The environment variable
            ``RAY_DATA_PARQUET_FOOTER_NUM_ACTORS``, when set, wins.
        read: Who reads the learner stream's files. ``"actor"``: each prelearner actor reads
            a contiguous range of the files itself, a batch ahead on a thread, so the input
            never passes through Ray's object store (3-6x the rows/s on pixel rows, see
            ``jobs/file_batches.py``). ``"ray"``: Ray Data's ``read_parquet`` (or ``read_json``)
            feeds the actors, reading on other workers. ``"auto"`` (default): ``"actor"``
            unless ``group_by_episode`` (which needs Ray Data's read and shuffle). The batch
            job's units always read their own files.
        read_threads: Threads pyarrow decodes with in each learner-stream actor that reads its
            own files (Ray limits a worker's pools to its ``num_cpus``; decoding a batch's
            columns in parallel is what the separate read tasks gave before). Default 2: on the
            100k-row pixel set, a fresh worker read 39k rows/s with 1 thread, ~64k with 2.
    """

    address: str | None = None
    concurrency: int | None = None
    batch_size: int | None = 4096
    num_cpus: float = 1.0
    group_by_episode: bool = False
    footer_readers: int | None = None
    block_mb: int = 16
    read: str = "auto"
    read_threads: int = 2

    def __post_init__(self) -> None:
        _check_int("ray", "block_mb", self.block_mb, 1, MAX_BLOCK_MB)
        _check_int("ray", "read_threads", self.read_threads, 1, MAX_THREADS)
        if self.read not in ("auto", "actor", "ray"):
            raise ConfigError(
                f"ray.read must be 'auto', 'actor' or 'ray', found {shown(self.read)}"
            )
        if self.read == "actor" and self.group_by_episode is True:
            raise ConfigError(
                "ray.read='actor' cannot group rows by episode (ray.group_by_episode needs Ray "
                "Data's read and shuffle): use ray.read='auto' or 'ray'"
            )
        _check_int("ray", "concurrency", self.concurrency, 1, MAX_CONCURRENCY, True)
        _check_int("ray", "footer_readers", self.footer_readers, 1, MAX_CONCURRENCY, True)
        _check_int("ray", "batch_size", self.batch_size, 1, MAX_BATCH_ROWS, True)
        _check_float("ray", "num_cpus", self.num_cpus, 0.0, 1024.0)
        if not isinstance(self.group_by_episode, bool):
            raise ConfigError(
                f"ray.group_by_episode must be true or false, found {shown(self.group_by_episode)}"
            )


_SECTIONS: dict[str, type] = {}  # filled below: section name -> dataclass


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
    """

    read: ReadConfig = field(default_factory=lambda: ReadConfig(format="auto"))
    validate: Any = None  # ValidateConfig; None -> built in __post_init__ (import cycle)
    buffer: BufferConfig = field(default_factory=BufferConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    modules: ModulesConfig = field(default_factory=ModulesConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    connectors: tuple[Any, ...] = ()
    seed: int | None = 0
    prelearner: str | None = None

    def __post_init__(self) -> None:
        from .episodes.validate import ValidateConfig

        for name, cls in _section_types().items():
            value = getattr(self, name)
            if name == "validate" and value is None:
                # Rows spread over batches arrive as fragments; the buffer joins them. Built
                # once ``read`` is (a config file's ``read:`` section is still a dict here).
                read = self.read if isinstance(self.read, ReadConfig) else ReadConfig()
                value = ValidateConfig(require_done=False, on_invalid=read.on_invalid)
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
        _check_int("config", "seed", self.seed, 0, MAX_SEED, True)
        if self.prelearner is not None and (
            not isinstance(self.prelearner, str) or ":" not in self.prelearner
        ):
            raise ConfigError(
                f"prelearner must be 'package.module:Class', found {shown(self.prelearner)}"
            )

    # ------------------------------------------------------------------ updates
    def with_updates(self, updates: Mapping[str, Any]) -> PreLearnerConfig:
        """A copy with fields set by flat name or ``section.field`` (see the class docstring)."""
        sections: dict[str, dict[str, Any]] = {name: {} for name in _section_types()}
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
                if fname not in _field_names(_section_types()[sec]):
                    known = sorted(_field_names(_section_types()[sec]))
                    close = difflib.get_close_matches(fname, known, n=3)
                    hint = f"; did you mean {' or '.join(close)}?" if close else ""
                    raise ConfigError(f"unknown config field {key!r}{hint}")
                sections[sec][fname] = value
                continue
            owners = [s for s, cls in _section_types().items() if key in _field_names(cls)]
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
        for name in _section_types():
            out[name] = {k: _jsonable(v) for k, v in _asdict(getattr(self, name)).items()}
        out["connectors"] = [_jsonable(c) for c in self.connectors]
        out["seed"] = self.seed
        out["prelearner"] = self.prelearner
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PreLearnerConfig:
        unknown = set(d) - _field_names(cls)
        if unknown:
            raise ConfigError(
                f"unknown config sections {sorted(unknown)}; known: {sorted(_field_names(cls))}"
            )
        kw = dict(d)
        if isinstance(kw.get("validate"), dict):
            kw["validate"] = _build(_section_types()["validate"], "validate", kw["validate"])
        return cls(**kw)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Writes JSON, or YAML when the path ends in .yaml/.yml."""
        text = _dump(self.to_dict(), os.fspath(path))
        with open(path, "w") as fh:
            fh.write(text)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> PreLearnerConfig:
        """Reads a JSON or YAML file written by :meth:`save` (or by hand)."""
        p = os.fspath(path)
        with open(p, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)  # a config is a few KiB: never read a huge file
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(
                f"config file {shown(p)} is larger than {MAX_CONFIG_BYTES} bytes (1 MiB); "
                "a config is a few KiB"
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(
                f"cannot parse config file {shown(p)}: not UTF-8 (byte {e.start})"
            ) from None
        if p.endswith((".yaml", ".yml")):
            import yaml

            try:
                data = _load_yaml(text)
            except yaml.YAMLError as e:
                raise ConfigError(f"cannot parse config file {p!r}: {_yaml_error(e)}") from None
            except RecursionError:
                raise ConfigError(f"cannot parse config file {p!r}: nested too deeply") from None
        else:
            try:
                data = json.loads(text)
            except ValueError as e:
                raise ConfigError(f"cannot parse config file {p!r}: {e}") from None
            except RecursionError:
                raise ConfigError(f"cannot parse config file {p!r}: nested too deeply") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config file {p!r} must hold a mapping, found {type(data).__name__}")
        try:
            return cls.from_dict(data)
        except ConfigError as e:
            raise ConfigError(f"config file {p!r}: {e}") from None

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


#: The largest config file read (bytes): a real one is a few KiB.
MAX_CONFIG_BYTES = 1 << 20
#: The most YAML nodes that aliases may expand to in one config file (a real config shares a
#: value or two; the "billion laughs" bomb expands 9 aliases per level to 9**9 nodes).
MAX_ALIAS_NODES = 10_000


def _load_yaml(text: str) -> Any:
    """``yaml.safe_load`` that counts what aliases expand to: an alias adds the size of the node
    it repeats; past :data:`MAX_ALIAS_NODES`, or an alias inside the node it names (a cycle), is
    a ``yaml.YAMLError`` at the alias's line and column. Checked while composing, before any
    Python object is built, so a bomb costs what its text does."""
    import yaml
    from yaml.composer import ComposerError
    from yaml.events import AliasEvent, CollectionStartEvent

    class Loader(yaml.SafeLoader):
        expanded = 0
        sizes: dict[int, int]
        open_anchors: list[str]

        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()
            if isinstance(event, AliasEvent):
                if event.anchor in self.open_anchors:
                    raise ComposerError(
                        None, None, f"alias *{event.anchor} repeats itself", event.start_mark
                    )
                if event.anchor in self.anchors:
                    self.expanded += self._size(self.anchors[event.anchor])
                if self.expanded > MAX_ALIAS_NODES:
                    raise ComposerError(
                        None,
                        None,
                        f"aliases expand to more than {MAX_ALIAS_NODES} values (an alias "
                        "bomb?); write the values out",
                        event.start_mark,
                    )
                return super().compose_node(parent, index)
            anchor = event.anchor if isinstance(event, CollectionStartEvent) else None
            if anchor is not None:
                self.open_anchors.append(anchor)
            try:
                return super().compose_node(parent, index)
            finally:
                if anchor is not None:
                    self.open_anchors.pop()

        def _size(self, node: Any) -> int:
            """Nodes in ``node`` with every alias expanded (memoized: a DAG, walked once)."""
            got = self.sizes.get(id(node))
            if got is None:
                if isinstance(node, yaml.SequenceNode):
                    got = 1 + sum(self._size(n) for n in node.value)
                elif isinstance(node, yaml.MappingNode):
                    got = 1 + sum(self._size(k) + self._size(v) for k, v in node.value)
                else:
                    got = 1
                self.sizes[id(node)] = got
            return got

    loader = Loader(text)
    loader.sizes, loader.open_anchors = {}, []
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _yaml_error(e: Exception) -> str:
    """A YAML parse error on one line: ``line L, column C: <problem>``."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    if mark is None:
        return " ".join(str(e).split())
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"


def _section_types() -> dict[str, type]:
    if not _SECTIONS:
        from .episodes.validate import ValidateConfig

        _SECTIONS.update(
            read=ReadConfig,
            validate=ValidateConfig,
            buffer=BufferConfig,
            sample=SampleConfig,
            modules=ModulesConfig,
            ray=RayConfig,
        )
    return _SECTIONS


def _field_names(cls: type) -> set[str]:
    return {f.name for f in fields(cls)}


def _all_fields() -> set[str]:
    out = {"connectors", "seed", "prelearner"}
    for cls in _section_types().values():
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
            from .episodes.spaces import space_from_dict

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
    import gymnasium as gym

    from .episodes.spaces import space_to_dict

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


def _dump(d: dict[str, Any], path: str) -> str:
    if path.endswith((".yaml", ".yml")):
        import yaml

        return str(yaml.safe_dump(d, sort_keys=False))
    return json.dumps(d, indent=2) + "\n"
