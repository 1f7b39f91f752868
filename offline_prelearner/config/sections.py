"""The sections of the prelearner's configuration: one frozen dataclass per stage.

Every field is documented where it is declared; construction checks values with the validators of
:mod:`.checks` and raises :class:`~offline_prelearner.errors.ConfigError` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import gymnasium as gym
import numpy as np

from ..errors import ConfigError, shown
from .checks import (
    MAX_BATCH_ROWS,
    MAX_BLOCK_MB,
    MAX_CONCURRENCY,
    MAX_FRAME_STACK,
    MAX_NUM_SAMPLES,
    MAX_SEQ_LEN,
    MAX_STEPS,
    MAX_THREADS,
    MAX_TRAIN_BATCH,
    check_bool,
    check_eps,
    check_float,
    check_int,
    check_n_step,
)
from .choices import (
    BatchSize,
    BufferKind,
    OnInvalid,
    RayRead,
    SampleUnitKind,
    check_batch_size,
    check_buffer_kind,
    check_on_invalid,
    check_ray_read,
    check_sample_unit,
)

__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_MODULE_ID",
    "KIND_SECTIONS",
    "MAX_LIMIT",
    "BufferConfig",
    "DecodeLimits",
    "MixInConfig",
    "ModulesConfig",
    "PrioritizedConfig",
    "RayConfig",
    "ReadConfig",
    "SampleConfig",
    "SequenceConfig",
    "ValidateConfig",
]

DEFAULT_MODULE_ID = "default_policy"  # RLlib's DEFAULT_MODULE_ID
#: The largest value any decode limit takes: 1 TiB (a limit above it limits nothing).
MAX_LIMIT = 1 << 40


@dataclass(frozen=True)
class DecodeLimits:
    """Upper bounds applied while decoding untrusted bytes.

    Attributes:
        max_decompressed_bytes: Largest output one lz4 frame / one cell may decompress to.
        max_message_bytes: Largest msgpack message (one episode, one cell) accepted.
        max_array_bytes: Largest single numpy array one record may describe.
        max_parquet_expansion: Bytes a Parquet file may decode to in memory per byte of the
            file, from its footer (files under 64 MiB decoded are exempt; see
            ``io/parquet_guard.py``). The standard 84x84x4 pixel rows (zstd) decode to at most
            200x their size, CartPole rows to 3-6x; the Parquet bombs of issue 20
            to 20,000-700,000x (so the default, 2,000, is 10x either way).
        max_parquet_row_group_bytes: Bytes one Parquet row group may decode to in memory
            (8 GiB: 130k rows of 84x84x4 frames stacked twice).
        video_tolerance_s: LeRobot datasets: the largest distance, in seconds, accepted between
            a frame's ``timestamp`` and the video frame decoded for it (LeRobot's
            ``tolerance_s``, whose default is 1e-4); farther is an error naming the video,
            the episode and the frame.
    """

    max_decompressed_bytes: int = 1 << 30
    max_message_bytes: int = 1 << 30
    max_array_bytes: int = 1 << 30
    max_parquet_expansion: float = 2000.0
    max_parquet_row_group_bytes: int = 1 << 33
    video_tolerance_s: float = 1e-4

    def __post_init__(self) -> None:
        # A limit is a number, checked before any decoding relies on it: "lots" or true is
        # refused here, naming the field, not compared with a byte count deep in a reader.
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", int):
                check_int(f"read.limits.{f.name}", value, 1, MAX_LIMIT)
            else:
                check_float(f"read.limits.{f.name}", value, 0.0, MAX_LIMIT, lo_open=True)


DEFAULT_LIMITS = DecodeLimits()


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
        on_invalid: ``"raise"`` | ``"skip"`` | ``"quarantine"``: the config's one policy for
            bad data, wherever it is met: rows or files that cannot be read, fragments that do
            not join, and episodes that fail validation (the validator takes it from here).
        check_continuity: Check that each step's ``new_obs`` equals the next step's ``obs``
            within an episode (with a ``t`` column: ``new_obs[t] == obs[t+1]``), so a scrambled
            row order or a contradicting ``t`` is an error.
        limits: Size limits for decoding untrusted bytes.
        max_episode_steps: D4RL files without ``timeouts``: also end an episode (truncated) after
            this many steps since the last end, as D4RL's own ``sequence_dataset`` does with the
            env's time limit (not in the file). None: only terminals end episodes.
    """

    format: str = "rows"
    schema: Any = None  # ColumnSchema | str | None: ColumnSchema lives in io/, above this leaf
    legacy_pickle: bool = False
    on_invalid: OnInvalid = "raise"
    check_continuity: bool = True
    limits: DecodeLimits = field(default_factory=DecodeLimits)
    max_episode_steps: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.format, str) or not self.format:
            raise ConfigError(f"read.format must be a non-empty string, found {shown(self.format)}")
        check_on_invalid(self.on_invalid, "read.on_invalid")
        if not isinstance(self.limits, DecodeLimits):
            raise ConfigError(
                "read.limits must be a mapping of size limits, e.g. "
                f'{{"max_decompressed_bytes": 1048576}}, found {shown(self.limits)}'
            )
        check_bool("read.legacy_pickle", self.legacy_pickle)
        check_bool("read.check_continuity", self.check_continuity)
        check_int("read.max_episode_steps", self.max_episode_steps, 1, MAX_STEPS, none_ok=True)


@dataclass(frozen=True)
class ValidateConfig:
    """What :class:`Validator` checks (what it does with an episode that fails is the config's
    one policy, ``read.on_invalid``, which the validator is given beside this section).

    Attributes:
        require_done: Every episode must be terminated or truncated. Turn off for streams of
            fragments (an episode cut across batches), where a not-done fragment is kept.
        check_finite_rewards: Reject episodes with a NaN or infinite reward.
        check_finite_obs: Reject episodes with a NaN or infinite observation (reason
            ``nan_obs``). On by default (issue 36): a NaN written into the samples poisons every
            gradient it meets; turn it off for an environment that emits NaN on purpose (a
            missing sensor reading) and a learner that masks it.
        check_finite_actions: Reject episodes with a NaN or infinite float action (reason
            ``nan_action``); on by default, like ``check_finite_obs``. Integer actions cannot be
            NaN and are not looked at.
        observation_space: A gymnasium space every observation must lie in, or None. NaN passes
            a Box's bounds check (``check_finite_obs`` decides about NaN). With None, the space
            the data declares (a msgpack record's ``_observation_space``) is enforced instead,
            with the same checks, reasons and counts; where both exist, this one wins.
        action_space: A gymnasium space every action must lie in, or None (then the data's
            own, as for ``observation_space``; this one wins where both exist).
        min_length: Fewest steps an episode may have (0 admits empty episodes, with a warning).
    """

    require_done: bool = True
    check_finite_rewards: bool = True
    check_finite_obs: bool = True
    check_finite_actions: bool = True
    observation_space: gym.Space[Any] | None = None
    action_space: gym.Space[Any] | None = None
    min_length: int = 1

    def __post_init__(self) -> None:
        for name in (
            "require_done",
            "check_finite_rewards",
            "check_finite_obs",
            "check_finite_actions",
        ):
            check_bool(f"validate.{name}", getattr(self, name))
        for name in ("observation_space", "action_space"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, gym.Space):
                raise ConfigError(
                    f"validate.{name} must be a gymnasium space or None, "
                    f"found {type(value).__name__}"
                )
        n = self.min_length
        if isinstance(n, np.integer) and not isinstance(n, np.bool_):
            object.__setattr__(self, "min_length", n := int(n))
        check_int("validate.min_length", n, 0, MAX_STEPS)


@dataclass(frozen=True)
class PrioritizedConfig:
    """The settings of a prioritized buffer (``buffer.prioritized``, with ``kind="prioritized"``;
    Schaul et al.): a step is drawn with probability ``p ** alpha / sum(p ** alpha)``, where
    ``p = |td| + eps``, and weighted by ``(N * P) ** -beta``.

    Attributes:
        alpha: Priority exponent (0: uniform), in ``[0, 10]``.
        beta: Importance-weight exponent, in ``[0, 10]``.
        eps: Priority floor, in ``(0, 1]``; ``eps ** alpha`` must not underflow.
    """

    alpha: float = 0.6
    beta: float = 0.4
    eps: float = 1e-6

    def __post_init__(self) -> None:
        check_float("buffer.prioritized.alpha", self.alpha, 0.0, 10.0)
        check_float("buffer.prioritized.beta", self.beta, 0.0, 10.0)
        check_eps("buffer.prioritized.eps", self.eps, self.alpha)


@dataclass(frozen=True)
class MixInConfig:
    """The settings of a mix-in buffer (``buffer.mixin``, with ``kind="mixin"``): each sample
    holds all new steps plus replayed ones.

    Attributes:
        replay_ratio: ``replayed / (replayed + new)``, in ``[0, 1]``.
    """

    replay_ratio: float = 0.5

    def __post_init__(self) -> None:
        check_float("buffer.mixin.replay_ratio", self.replay_ratio, 0.0, 1.0)


@dataclass(frozen=True)
class BufferConfig:
    """The replay buffer each module's episodes go into.

    A kind's own settings live in the section named after it, present exactly when that kind is
    chosen: ``buffer.prioritized`` with ``kind="prioritized"``, ``buffer.mixin`` with
    ``kind="mixin"`` (built with its defaults when not given); ``uniform`` and ``reservoir`` have
    none. Giving a kind's section with another kind chosen is a :class:`ConfigError` naming both.

    Attributes:
        kind: ``"uniform"`` (every valid step equally likely), ``"prioritized"`` (Schaul et al.;
            ``update_priorities`` feeds it), ``"mixin"`` (the newest data always, plus old data by
            ``mixin.replay_ratio``) or ``"reservoir"`` (eviction keeps a uniform sample of all
            data).
        capacity: Slots of ring storage per module: timesteps plus one final observation per
            episode. The oldest whole episodes are evicted to make room.
        learning_starts: No samples before this many timesteps were added (per module).
        max_samples_per_insert: Optional rate limit: sampled rows per inserted timestep.
        prioritized: :class:`PrioritizedConfig` (``alpha``, ``beta``, ``eps``): only with
            ``kind="prioritized"``, else None.
        mixin: :class:`MixInConfig` (``replay_ratio``): only with ``kind="mixin"``, else None.
    """

    kind: BufferKind = "uniform"
    capacity: int = 1_000_000
    learning_starts: int = 0
    max_samples_per_insert: float | None = None
    prioritized: PrioritizedConfig | None = None
    mixin: MixInConfig | None = None

    def __post_init__(self) -> None:
        check_buffer_kind(self.kind)
        check_int("buffer.capacity", self.capacity, 2, MAX_STEPS)
        check_int("buffer.learning_starts", self.learning_starts, 0, MAX_STEPS)
        check_float(
            "buffer.max_samples_per_insert", self.max_samples_per_insert, 0, 1e12, none_ok=True
        )
        _tag_sections(self, "buffer", "kind")


@dataclass(frozen=True)
class SequenceConfig:
    """The settings of sequence samples (``sample.sequence``, with ``unit="sequence"``):
    ``[B, burn_in + seq_len]`` windows with ``seq_lens`` and ``loss_mask``.

    Attributes:
        seq_len: Steps of each window the loss sees.
        burn_in: Extra leading steps for RNN burn-in (masked out of the loss).
    """

    seq_len: int = 20
    burn_in: int = 0

    def __post_init__(self) -> None:
        check_int("sample.sequence.seq_len", self.seq_len, 1, MAX_SEQ_LEN)
        check_int("sample.sequence.burn_in", self.burn_in, 0, MAX_SEQ_LEN)


@dataclass(frozen=True)
class SampleConfig:
    """What each sample is, and how many are drawn.

    Attributes:
        unit: ``"transition"`` (1-step, or n-step when ``n_step`` is not 1) or ``"sequence"``
            (windows as ``sequence`` describes).
        n_step: An int, or an inclusive ``[lo, hi]`` range drawn per sample. Windows stop at
            episode ends; ``rewards`` is the discounted sum over the steps taken. Transitions
            only: a sequence unit ignores it.
        gamma: Discount for n-step returns and return connectors.
        frame_stack: Stack the last k observations at sample time (1 = off).
        train_batch_size: Samples drawn per input batch (RLlib's behaviour: each batch that enters
            ``map_batches`` yields one train batch per module).
        num_samples: Cap on the total number of samples the job writes (``None``: no cap).
        sample_all: ``True``: instead of random replay, emit every valid transition (or
            sequence) of each complete episode exactly once, in episode order (a BC epoch, an
            n-step dataset). ``False``: replay sampling as RLlib does. ``None`` (the default):
            the job's rule, :meth:`~offline_prelearner.config.PreLearnerConfig.for_job`: every
            transition once in the batch job (``run_pipeline``, ``process``), replay sampling
            in the learner stream and in a prelearner called directly.
        sequence: :class:`SequenceConfig` (``seq_len``, ``burn_in``): only with
            ``unit="sequence"``, else None.
    """

    unit: SampleUnitKind = "transition"
    n_step: int | tuple[int, int] = 1
    gamma: float = 0.99
    frame_stack: int = 1
    train_batch_size: int = 256
    num_samples: int | None = None
    sample_all: bool | None = None
    sequence: SequenceConfig | None = None

    def __post_init__(self) -> None:
        check_sample_unit(self.unit)
        object.__setattr__(self, "n_step", check_n_step("sample.n_step", self.n_step))
        check_float("sample.gamma", self.gamma, 0.0, 1.0)
        check_int("sample.frame_stack", self.frame_stack, 1, MAX_FRAME_STACK)
        check_int("sample.train_batch_size", self.train_batch_size, 1, MAX_TRAIN_BATCH)
        check_int("sample.num_samples", self.num_samples, 1, MAX_NUM_SAMPLES, none_ok=True)
        if self.sample_all is not None:
            check_bool("sample.sample_all", self.sample_all)
        _tag_sections(self, "sample", "unit")


#: The sections a kind owns: ``{(section, tag field): {kind: (sub-section, class)}}``. A sub-section
#: is named after its kind; it is present exactly when its kind is chosen.
KIND_SECTIONS: dict[tuple[str, str], dict[str, type]] = {
    ("buffer", "kind"): {"prioritized": PrioritizedConfig, "mixin": MixInConfig},
    ("sample", "unit"): {"sequence": SequenceConfig},
}


def _tag_sections(obj: Any, section: str, tag: str) -> None:
    """Builds the chosen kind's sub-section of ``obj`` (from a mapping, or its defaults when
    absent) and refuses another kind's, naming both."""
    chosen = getattr(obj, tag)
    for kind, cls in KIND_SECTIONS[section, tag].items():
        label = f"{section}.{kind}"
        value = getattr(obj, kind)
        if isinstance(value, Mapping):
            value = build_section(cls, label, value)
        elif value is not None and not isinstance(value, cls):
            raise ConfigError(
                f"{label} must be a {cls.__name__} or a mapping, found {shown(value)}"
            )
        if kind == chosen:
            value = cls() if value is None else value
        elif value is not None:
            raise ConfigError(
                f"{label} is set but {section}.{tag} is {chosen!r}: its settings apply only "
                f"with {section}.{tag}={kind!r}"
            )
        object.__setattr__(obj, kind, value)


def build_section(cls: type, label: str, values: Mapping[str, Any]) -> Any:
    """``cls(**values)``, with an unknown field a :class:`ConfigError` naming the section.

    Args:
        cls: The section's dataclass.
        label: The section's name (``"buffer.prioritized"``), for the errors.
        values: Its fields.

    Returns:
        The section.

    Raises:
        ConfigError: A field is unknown, or a value is refused by the section's checks.
    """
    known = {f.name for f in fields(cls)}
    unknown = set(values) - known
    if unknown:
        raise ConfigError(
            f"unknown field(s) {sorted(unknown)} in section {label!r}; known: {sorted(known)}"
        )
    return cls(**values)


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
    agent_to_module: dict[str, str] | str | None = None
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


#: Rows per batch under ``ray.batch_size="auto"`` when samples are drawn: ``train_batch_size``
#: samples per 4096 rows read, as RLlib's offline reader draws them.
AUTO_BATCH_ROWS = 4096
#: Under ``"auto"`` in a batch job with ``sample_all``: at most this many rows per chunk ...
SAMPLE_ALL_BATCH_ROWS = 1 << 16
#: ... and about this many bytes of decoded input (never fewer than :data:`AUTO_BATCH_ROWS` rows).
SAMPLE_ALL_BATCH_BYTES = 16 << 20


@dataclass(frozen=True)
class RayConfig:
    """How the batch job runs on Ray Data.

    Attributes:
        address: Ray cluster address (``None``: ``RAY_ADDRESS`` or a local instance).
        concurrency: The batch job: units of work run at once (``None``: as many as the
            cluster's CPUs allow; units are self-contained, so any number is safe). The learner
            stream: OfflinePreLearner actors in ``map_batches`` (``None``: 1). Row data without
            a ``t`` column keeps its episodes whole on any number of actors that read their own
            files (each range of files reads the episodes it owns); with ``read="ray"`` use 1,
            or ``group_by_episode``.
        batch_size: Rows per input batch: each batch goes through the prelearner in one call
            (``map_batches`` in the learner stream, a unit's chunk in the batch job), and with
            sampling ``train_batch_size`` samples are drawn per batch (RLlib's rule). ``"auto"``
            (default): :data:`AUTO_BATCH_ROWS` (4096) rows, except in a batch job with
            ``sample.sample_all``, where every transition is written whatever the batches are,
            so they only set speed and memory: there a batch holds
            :data:`SAMPLE_ALL_BATCH_BYTES` of decoded input (the Parquet footers' sizes), between
            4096 and :data:`SAMPLE_ALL_BATCH_ROWS` (65536) rows (:meth:`batch_rows`). An int:
            that many rows; ``None``: one block (learner stream) or one unit (batch job) at a time.
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
    batch_size: BatchSize = "auto"
    num_cpus: float = 1.0
    group_by_episode: bool = False
    footer_readers: int | None = None
    block_mb: int = 16
    read: RayRead = "auto"
    read_threads: int = 2

    def __post_init__(self) -> None:
        check_int("ray.block_mb", self.block_mb, 1, MAX_BLOCK_MB)
        check_int("ray.read_threads", self.read_threads, 1, MAX_THREADS)
        check_ray_read(self.read)
        if self.read == "actor" and self.group_by_episode is True:
            raise ConfigError(
                "ray.read='actor' cannot group rows by episode (ray.group_by_episode needs Ray "
                "Data's read and shuffle): use ray.read='auto' or 'ray'"
            )
        check_int("ray.concurrency", self.concurrency, 1, MAX_CONCURRENCY, none_ok=True)
        check_int("ray.footer_readers", self.footer_readers, 1, MAX_CONCURRENCY, none_ok=True)
        check_batch_size(self.batch_size, MAX_BATCH_ROWS)
        check_float("ray.num_cpus", self.num_cpus, 0.0, 1024.0)
        check_bool("ray.group_by_episode", self.group_by_episode)

    @property
    def rows_per_batch(self) -> int | None:
        """``batch_size`` in rows (``"auto"``: :data:`AUTO_BATCH_ROWS`; ``None``: no cut)."""
        size = self.batch_size
        return AUTO_BATCH_ROWS if isinstance(size, str) else size  # "auto": the one word allowed

    def batch_rows(self, sample_all: bool | None, row_bytes: float | None) -> int | None:
        """Rows per chunk of a batch job's unit: :attr:`rows_per_batch`, except under
        ``"auto"`` with ``sample_all``, where as many rows as decode to about
        :data:`SAMPLE_ALL_BATCH_BYTES` (``row_bytes``: decoded bytes per input row, from the
        Parquet footers; None when unknown: :data:`AUTO_BATCH_ROWS`), between
        :data:`AUTO_BATCH_ROWS` and :data:`SAMPLE_ALL_BATCH_ROWS`. A chunk costs about a
        millisecond of fixed work (a pass of each stage over it): 65536-row chunks of CartPole
        rows take 0.65-0.75x the CPU of 4096-row ones.

        Args:
            sample_all: The job's resolved ``sample.sample_all``.
            row_bytes: Decoded bytes per input row, or None when unknown.

        Returns:
            Rows per chunk, or None for no cut.
        """
        if self.batch_size != "auto" or not sample_all or not row_bytes or row_bytes <= 0:
            return self.rows_per_batch
        fits = int(SAMPLE_ALL_BATCH_BYTES // row_bytes)
        return max(AUTO_BATCH_ROWS, min(SAMPLE_ALL_BATCH_ROWS, fits))
