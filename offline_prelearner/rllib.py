"""This project's prelearner inside RLlib's own training loop (the ``rllib`` extra).

RLlib 2.60's offline algorithms (BC, MARWIL, CQL, ...) run a prelearner class in
``Dataset.map_batches``: it turns each raw batch into episodes, runs the algorithm's learner
connector pipeline on them (GAE for MARWIL, next observations for CQL, ...) and hands the
flattened batch on to ``Learner.update``. :class:`RLlibPreLearner` is such a class, a subclass of
RLlib's ``OfflinePreLearner`` (BC, MARWIL and CQL refuse any other), whose episodes come from this
project's reader, validation, replay buffer and sample unit instead of RLlib's one-step episodes::

    import gymnasium as gym
    from ray.rllib.algorithms.bc import BCConfig
    from offline_prelearner.rllib import RLlibPreLearner

    env = gym.make("CartPole-v1")
    config = (
        BCConfig()
        .environment(observation_space=env.observation_space, action_space=env.action_space)
        .offline_data(
            input_=["datasets/cartpole-v1-heuristic/rows"],
            prelearner_class=RLlibPreLearner.configure({"read": {"on_invalid": "skip"}}),
        )
    )

What it reads from RLlib's config: ``input_read_episodes`` / ``input_read_sample_batches`` (the
input format; rows otherwise), ``input_read_schema`` (column names, RLlib's keys),
``train_batch_size_per_learner`` (samples per call), the algorithm's ``n_step`` and ``gamma``
where it has them, ``prelearner_buffer_kwargs["capacity"]`` and RLlib's prioritized buffer class
(with its ``alpha``/``beta``). ``input_compress_columns`` is not needed: packed cells are detected
from the data, and RLlib's ``base64(lz4(pickle))`` cells are decoded only with
``read.legacy_pickle=True`` in this project's config (RLlib names ``obs`` and ``new_obs`` there
by default, so that setting cannot stand for the user's consent). Minari and D4RL files come as
``input_read_method="read_binary_files"`` with ``input_read_method_kwargs={"include_paths":
True}`` and ``read.format`` ``"minari"`` or ``"d4rl"``: the prelearner reads the (local) paths.
This project's own config (:class:`~offline_prelearner.config.PreLearnerConfig` fields, flat,
``section.field`` or nested sections) comes from :meth:`RLlibPreLearner.configure` or from
RLlib's free ``learner_config_dict["offline_prelearner"]``, and wins over what RLlib's settings
imply.
(RLlib 2.60 has no ``prelearner_kwargs``: OfflineData builds the class with ``config``,
``spaces``, ``module_spec`` and ``module_state`` only.)

What it hands the learner connector, ``to_learner``:

* ``"samples"`` (default): ``train_batch_size_per_learner`` transitions drawn from the buffer per
  call, each as the one-step episode RLlib's own ``EpisodeReplayBuffer`` samples
  (``observations=[o_t, o_t+n]``, the discounted n-step reward, ``n_step`` and ``weights`` in the
  extra model outputs). With ``sample.sample_all`` every transition of the complete episodes once.
  When the pipeline holds only RLlib's default pieces (single agent, stateless module), the
  samples go into the connector's batch as columns, which those pieces pass through, instead
  of as one episode object each: the same learner batch, 17-30x less time per call
  (benchmarks/README.md, "Inside RLlib").
* ``"episodes"``: the complete episodes of the batch, fragments of one episode that arrived in
  earlier batches (or files) joined, each once: GAE (MARWIL) then runs over the real episode.
  With a ``t`` column, an episode's fragments join by ``t`` whatever order Ray Data delivers
  them in; it is complete when they cover ``t`` from 0 to a done step
  (:mod:`offline_prelearner.episodes.fragment_bank`). With more than one ``map_batches`` actor
  (RLlib's default is 2) the fragments an actor cannot complete go to one named Ray actor per
  configured class, a :class:`~offline_prelearner.episodes.fragment_bank.FragmentBank`, in one
  round trip per call that leaves any open; the call whose fragments complete an episode gets it
  back, once. Without ``t`` fragments are joined in arrival order within one actor: with more
  than one actor an episode cut between two of them stays open (a warning says so once; use
  ``map_batches_kwargs={"concurrency": 1}``).

This is the only module of the package that imports RLlib; ``import offline_prelearner`` does not
import it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import numpy as np
import ray
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.columns import Columns
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.offline.offline_data import OfflineData
from ray.rllib.offline.offline_prelearner import OfflinePreLearner as _RLlibOfflinePreLearner
from ray.rllib.offline.offline_prelearner import _validate_deprecated_map_args
from ray.rllib.utils import flatten_dict

from .config import PreLearnerConfig
from .config.prelearner_config import SECTIONS
from .episodes import columns as C
from .episodes.dedupe import Deduplicator
from .episodes.episode import Episode
from .episodes.episode_columns import EpisodeColumns
from .episodes.fragment_bank import FragmentBank
from .errors import ConfigError
from .io.readers import detect_batch_format, make_reader
from .io.schema import load_schema
from .prelearner import OfflinePreLearner
from .replay.replay_buffer import EpisodeReplayBuffer

__all__ = ["RLlibOfflineData", "RLlibPreLearner", "config_from_rllib"]

_log = logging.getLogger(__name__)
#: The Ray namespace of the fragment banks (named per configured class).
_BANK_NAMESPACE = "offline_prelearner"

ToLearner = Literal["samples", "episodes"]

#: The learner-connector output's columns that are the sample itself; the others a sample unit
#: adds (``n_step``, ``weights``, a dataset's extras) travel as extra model outputs.
_CORE = {C.OBS, C.NEW_OBS, C.ACTIONS, C.REWARDS, C.TERMINATEDS, C.TRUNCATEDS, C.EPS_ID, C.T}
#: ``indices`` (the buffer's handles, for priority feedback) has no reader in RLlib's loop: no
#: path leads from its Learner back to a map_batches actor, so it is not handed over.
_NOT_SAMPLE = {"module_id", "agent_id", "batch_indexes", "infos", "indices"}
#: Our sample columns as RLlib's learner batch names them (``new_obs`` is ``Columns.NEXT_OBS``).
_BULK = {
    C.OBS: Columns.OBS,
    C.NEW_OBS: Columns.NEXT_OBS,
    C.ACTIONS: Columns.ACTIONS,
    C.REWARDS: Columns.REWARDS,
    C.TERMINATEDS: Columns.TERMINATEDS,
    C.TRUNCATEDS: Columns.TRUNCATEDS,
}
#: RLlib's default learner-connector pieces: each passes a column already in the batch through
#: (RLlib's documented way to hand it data) or does nothing for a stateless module, so with only
#: these in the pipeline the samples can go in as columns instead of one episode each.
_PASS_THROUGH = frozenset(
    {
        "AddObservationsFromEpisodesToBatch",
        "AddColumnsFromEpisodesToTrainBatch",
        "AddNextObservationsFromEpisodesToTrainBatch",
        "AddTimeDimToBatchAndZeroPad",
        "AddStatesFromEpisodesToBatch",
        "BatchIndividualItems",
        "NumpyToTensor",
    }
)


class RLlibPreLearner(_RLlibOfflinePreLearner):
    """RLlib's ``prelearner_class`` built on this project's prelearner; see the module docstring.

    RLlib builds it (one per ``map_batches`` actor) with the keywords below; a user passes the
    class, made with :meth:`configure` to carry this project's config.

    Args:
        config: RLlib's ``AlgorithmConfig``.
        spaces: The observation and action spaces (RLlib's ``INPUT_ENV_SPACES``).
        module_state: The RLModule's weights (the GAE connector runs the value function).
        **kwargs: What RLlib passes besides (``module_spec``).
    """

    #: This project's config for the inner prelearner (set by :meth:`configure`).
    prelearner_config: ClassVar[Mapping[str, Any] | None] = None
    #: What the learner connector receives: ``"samples"`` or ``"episodes"`` (module docstring).
    to_learner: ClassVar[ToLearner] = "samples"
    #: ``"episodes"``: the name of the Ray actor where this class's prelearners join fragments
    #: cut between them (minted by :meth:`configure`, one per configured class).
    fragment_bank: ClassVar[str | None] = None

    def __init__(
        self,
        *,
        config: Any,
        spaces: tuple[Any, Any] | None = None,
        module_state: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        # RLlib's constructor, less its episode buffer: this class samples from its own buffer
        # (``episode_buffer``), so RLlib's is never built. Same attributes, same arguments
        # (``module_spec`` as OfflineData passes it, else the config's).
        spec = kwargs.get("module_spec") or config.rl_module_spec
        self.config = config
        self._module = spec.build()
        if module_state:
            self._module.set_state(module_state)
        self.observation_space, self.action_space = spaces or (None, None)
        self._learner_connector = config.build_learner_connector(
            input_observation_space=self.observation_space,
            input_action_space=self.action_space,
        )
        ours = self.prelearner_config
        if ours is None:
            ours = (getattr(config, "learner_config_dict", None) or {}).get("offline_prelearner")
        #: This project's prelearner: reader, validation, buffers and sample unit.
        self.prelearner = OfflinePreLearner(
            config_from_rllib(config, spaces, ours, self.default_prelearner_buffer_class)
        )
        #: RLlib's attribute: here the default module's buffer, this project's
        #: :class:`~offline_prelearner.replay.replay_buffer.EpisodeReplayBuffer` sized and
        #: weighted by ``prelearner_buffer_class`` / ``prelearner_buffer_kwargs``; None in a
        #: multi-agent config (one buffer per module, built on its first episodes).
        self.episode_buffer: EpisodeReplayBuffer | None = None  # type: ignore[assignment]
        if not getattr(config, "is_multi_agent", False):
            default = self.prelearner.config.modules.default_module
            buf = self.prelearner.build_buffer(default)
            self.prelearner.buffers[default] = self.episode_buffer = buf
        n_step = self.prelearner.config.sample.n_step
        if n_step != 1 and type(config).__name__ == "CQLConfig":
            _log.warning(
                "n_step=%s with CQL: RLlib 2.60's CQL learner bootstraps with gamma, not "
                "gamma**n_step (not implemented there), so these n-step rewards are discounted "
                "as one step; use n_step=1 with CQL",
                n_step,
            )
        if self.to_learner == "episodes":
            # Fragments join by t in any order: one is a repeat only where it overlaps.
            self.prelearner.deduplicator = Deduplicator(any_order=True)
        #: map_batches actors RLlib runs this class in (its defaults | map_batches_kwargs);
        #: counted for ``to_learner="episodes"`` only.
        self.concurrency = _map_concurrency(config) if self.to_learner == "episodes" else 1
        self._shares: bool | None = None  # whether open fragments go to the bank (first call)
        self._bank: Any = None

    @classmethod
    def configure(
        cls,
        config: Mapping[str, Any] | None = None,
        *,
        to_learner: ToLearner = "samples",
    ) -> type[RLlibPreLearner]:
        """A subclass that carries this project's config, to pass as ``prelearner_class``.

        Args:
            config: :class:`~offline_prelearner.config.PreLearnerConfig` fields: flat names
                (``"on_invalid"``), ``"section.field"`` or nested sections
                (``{"read": {"on_invalid": "skip"}}``); they override what RLlib's settings
                imply.
            to_learner: ``"samples"`` or ``"episodes"`` (see the module docstring).

        Returns:
            The class (Ray pickles it by value: it is not importable by name).
        """
        if to_learner not in ("samples", "episodes"):
            raise ConfigError(f"to_learner must be 'samples' or 'episodes', found {to_learner!r}")
        if config is not None:
            config_from_rllib(None, None, config)  # an unknown field fails here, not in an actor
        name = f"{cls.__name__}_configured"
        bank = (
            f"offline_prelearner-fragments-{uuid.uuid4().hex}" if to_learner == "episodes" else None
        )
        attrs = {
            "prelearner_config": dict(config or {}),
            "to_learner": to_learner,
            "fragment_bank": bank,
            "__module__": cls.__module__,
            "__qualname__": name,
        }
        return type(name, (cls,), attrs)

    # ------------------------------------------------------------------ the call
    def __call__(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """One raw batch -> the learner connector's batch, flattened (RLlib's own output).

        Args:
            batch: One raw batch as Ray Data hands it (numpy columns).

        Returns:
            ``{"<module_id>/<column>": array}``, as RLlib's ``OfflinePreLearner`` returns it;
            ``{}`` while no sample or episode is ready (``to_learner="episodes"`` with every
            episode of the batch still open, or an empty buffer): Ray Data passes an empty
            batch on as no rows, so no empty batch reaches a Learner.
        """
        episodes: list[Any] = []
        if self.to_learner == "samples" and self._bulk_ok():
            # The sampled columns go into the connector's batch as RLlib's connectors store a
            # run of items (one key, one batched array each): every default piece passes them
            # through, and no per-sample episode object is built (see _bulk_ok).
            data = self._bulk_batch(batch)
            if not data:
                return {}
        else:
            data, episodes = {}, list(self.rllib_episodes(batch))  # one per sample or episode
            if not episodes:
                return {}
        out = self._learner_connector(
            rl_module=self._module,
            batch=data,
            episodes=episodes,
            shared_data={},
            metrics=None,
        )
        for module_id in list(out):
            if not self._should_module_be_updated(module_id, out):
                del out[module_id]
        return dict(flatten_dict(out)) if out else {}

    # ------------------------------------------------------------------ RLlib's mapping hooks
    def _map_to_episodes(
        self, batch: Mapping[str, Any], to_numpy: bool = False, **kwargs: Any
    ) -> dict[str, list[Any]]:
        """RLlib's row mapping, through this project's reader: one one-step episode per row.

        The same contract as RLlib's (``{"episodes": [...]}``, one ``SingleAgentEpisode`` per
        valid row with ``observations=[obs, new_obs]``, the row's flags, its other columns as
        extra model outputs, ``ignore_final_observation`` honoured; the deprecated
        ``is_multi_agent`` / ``schema`` / ``input_compress_columns`` keywords with RLlib's
        warning), with this project's decoding and validation (a bad row is one line naming
        column and row, or a counted skip with ``read.on_invalid="skip"``). ``__call__`` does
        not use it: it maps the batch as columns.

        Args:
            batch: Rows as Ray Data hands them (numpy columns).
            to_numpy: Whether each episode is turned to numpy (``episode.to_numpy()``).
            **kwargs: RLlib's deprecated mapping keywords.

        Returns:
            ``{"episodes": [SingleAgentEpisode, ...]}``.
        """
        multi_agent, schema, compressed = _validate_deprecated_map_args(kwargs, self.config)
        _refuse_multi_agent(multi_agent, "_map_to_episodes")
        read = self._hook_read("rows", schema, compressed)
        columns = make_reader(read).read(_files_read(batch), None).columns
        zero_next = bool(getattr(self.config, "ignore_final_observation", False))
        return {"episodes": _step_episodes(columns, zero_next=zero_next, to_numpy=to_numpy)}

    def _map_sample_batch_to_episode(
        self, batch: Mapping[str, Any], to_numpy: bool = False, **kwargs: Any
    ) -> dict[str, list[Any]]:
        """RLlib's old-stack mapping, through this project's reader: one episode per episode
        fragment of each ``SampleBatch`` row (RLlib's: one per row, whatever episodes it holds).

        ``infos`` (RLlib's own JSON writer records them; RLlib's mapping fails on them) come
        through as the episodes' infos; compressed columns follow ``read.legacy_pickle`` as in
        ``__call__``. Same keywords and return shape as RLlib's.

        Args:
            batch: ``SampleBatch`` rows as Ray Data hands them (``read_json`` of old-stack
                files).
            to_numpy: Whether each episode is turned to numpy (``episode.to_numpy()``).
            **kwargs: RLlib's deprecated mapping keywords.

        Returns:
            ``{"episodes": [SingleAgentEpisode, ...]}``.
        """
        multi_agent, schema, compressed = _validate_deprecated_map_args(kwargs, self.config)
        _refuse_multi_agent(multi_agent, "_map_sample_batch_to_episode")
        read = self._hook_read("sample_batches", schema, compressed)
        columns = make_reader(read).read(_files_read(batch), None).columns
        return {"episodes": [_whole_episode(ep, to_numpy) for ep in columns.iter_episodes()]}

    def _hook_read(self, fmt: str, schema: Mapping[str, str], compressed: list[str]) -> Any:
        """The read section for a mapping hook: format ``fmt``, RLlib's schema mapped."""
        del compressed  # packed cells are found in the data; pickle stays read.legacy_pickle's
        updates: dict[str, Any] = {"read.format": fmt}
        mapped = _column_schema(schema)
        if mapped is not None:
            updates["read.schema"] = mapped
        return self.prelearner.config.with_updates(updates).read

    def _bulk_ok(self) -> bool:
        """Whether the samples can go to the connector as columns (cached per instance).

        Only with RLlib's default pieces (a user's own piece may read the episodes), one
        stateless module and a single-agent config; otherwise one episode per sample, as RLlib.
        """
        ok = getattr(self, "_bulk", None)
        if ok is None:
            names = {type(p).__name__ for p in getattr(self._learner_connector, "connectors", [])}
            module = self._module
            stateful = getattr(module, "is_stateful", lambda: True)()
            ok = names <= _PASS_THROUGH and not self.config.is_multi_agent and not stateful
            #: Whether the pipeline adds next observations (CQL's does, BC's does not).
            self._next_obs = "AddNextObservationsFromEpisodesToTrainBatch" in names
            self._bulk = ok
        return bool(ok)

    def _constant_columns(self) -> tuple[str, ...]:
        """``n_step`` / ``weights`` where they would be all ones over rows: RLlib's own row path
        hands neither (only its buffer's samples of episodes and sample batches carry them), and
        every column costs the Learner's iterator each batch (BC's 6 columns against 8)."""
        cfg = self.prelearner.config
        if cfg.read.format not in ("rows", "auto"):
            return ()
        out = []
        if cfg.sample.n_step == 1:
            out.append(C.N_STEP)
        if cfg.buffer.kind != "prioritized":
            out.append(C.WEIGHTS)
        return tuple(out)

    def _bulk_batch(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """The sampled rows as the connector batch: ``{column: {(key,): [rows]}}``."""
        out: dict[str, Any] = {}
        carrier = SingleAgentEpisode(id_=f"offline_prelearner-{id(self)}")
        for rows in self.prelearner(_files_read(batch)):
            n = len(rows[C.REWARDS])
            if not n:
                continue
            cols = {_BULK.get(k, k): v for k, v in rows.items() if k not in _NOT_SAMPLE}
            for k in (C.EPS_ID, C.T) if self._next_obs else (C.EPS_ID, C.T, Columns.NEXT_OBS):
                cols.pop(k, None)
            drop = self._constant_columns()
            for column in drop:
                cols.pop(column, None)
            if C.N_STEP not in drop:
                cols.setdefault(C.N_STEP, np.ones(n, np.int64))
            if C.WEIGHTS not in drop:
                cols.setdefault(C.WEIGHTS, np.ones(n, np.float32))
            for column, value in cols.items():
                ConnectorV2.add_n_batch_items(
                    out,
                    column,
                    items_to_add=np.asarray(value),
                    num_items=n,
                    single_agent_episode=carrier,
                )
        return out

    def rllib_episodes(self, batch: Mapping[str, Any]) -> list[SingleAgentEpisode]:
        """The episodes this call hands RLlib's learner connector (see ``to_learner``).

        Args:
            batch: One raw batch as Ray Data hands it (numpy columns).

        Returns:
            RLlib ``SingleAgentEpisode``s, numpy-backed. ``"episodes"``: those this batch
            completes here (in table order), then those the fragment bank completed with the
            fragments this call left open (more than one map_batches actor, rows with ``t``).
        """
        inner = self.prelearner
        if self.to_learner == "episodes":
            raw = _files_read(batch)
            kept = inner.validate(inner.map_to_episodes(raw))
            inner._count_episodes(kept)
            parts = [inner._complete(kept.columns)]
            if len(inner._pending) and self._shares_fragments(raw):
                parts += self._deposit()
            out = []
            for part in parts:
                modules = inner.module_of(part)
                out += [
                    _whole_episode(ep)
                    for ep, module_id in zip(part.iter_episodes(), modules, strict=True)
                    if inner._trains(module_id)
                ]
            return out
        episodes: list[SingleAgentEpisode] = []
        for rows in inner(_files_read(batch)):
            episodes.extend(_sample_episodes(rows, self._constant_columns()))
        return episodes

    def _shares_fragments(self, batch: Any) -> bool:
        """Whether open fragments go to the fragment bank: inside a Ray actor, with more than
        one map_batches actor, and rows that carry ``t`` (decided on the first batch; without
        ``t`` a one-line warning, once)."""
        if self._shares is None:
            in_actor = ray.is_initialized() and ray.get_runtime_context().get_actor_id()
            self._shares = (
                bool(in_actor) and self.concurrency > 1 and self.fragment_bank is not None
            )
            if self._shares and not _carries_t(self.prelearner.config.read, batch):
                self._shares = False
                _log.warning(
                    "offline_prelearner.rllib: to_learner='episodes' with %s map_batches actors "
                    "and rows without a t column: an episode cut between two actors' batches "
                    "cannot be joined and stays open; set map_batches_kwargs={'concurrency': 1} "
                    "(or give the rows a t column)",
                    self.concurrency,
                )
        return self._shares

    def _deposit(self) -> list[EpisodeColumns]:
        """Hands the open fragments to the fragment bank (one round trip); returns the episodes
        they completed."""
        if self._bank is None:
            # RLlib's offline evaluation maps its data with the same class (its config says
            # in_evaluation): its own bank, so its fragments never complete training's episodes.
            suffix = "-evaluation" if getattr(self.config, "in_evaluation", False) else ""
            self._bank = (
                ray.remote(FragmentBank)
                .options(
                    name=f"{self.fragment_bank}{suffix}",
                    get_if_exists=True,
                    namespace=_BANK_NAMESPACE,
                    lifetime="detached",  # every actor of the stage needs it, whoever made it
                    num_cpus=0,
                )
                .remote()
            )
        inner = self.prelearner
        parts = inner._pending.drain()
        done, duplicates = ray.get(self._bank.deposit.remote(parts))
        counters = inner.counters
        counters["fragments_banked"] = counters.get("fragments_banked", 0) + len(parts)
        counters["episodes_from_bank"] = counters.get("episodes_from_bank", 0) + len(done)
        counters["bank_duplicates"] = counters.get("bank_duplicates", 0) + duplicates
        return list(done)


class RLlibOfflineData(OfflineData):
    """RLlib's ``OfflineData`` that hands a Learner its mapped batches from memory.

    Pass it as ``offline_data_class`` (with either prelearner class). Where RLlib maps the
    dataset once (``materialize_mapped_data=True``: BC's and CQL's default, MARWIL's with that
    setting) its Learner still pulls every batch through Ray Data's iterator, one execution per
    pass: block fetch, format conversion to torch, and a stats call to Ray Data's stats actor per
    batch, a third or more of a BC iteration on a CPU (benchmarks/README.md, "Training through
    RLlib"). This class hands the Learner an iterator whose ``iter_torch_batches`` cuts the
    mapped dataset into the batches Ray Data would (same size, the last one shorter unless
    ``drop_last``; a pass in the order Ray Data's iterator handed them, which may swap blocks
    between passes where its prefetch threads finish out of order) once, in the Learner's
    process, as torch tensors on the Learner's device, and hands out the same list every pass:
    what the Learner trains on is the batches RLlib's path gives it.

    With :class:`RLlibPreLearner` and ``to_learner="episodes"`` it maps the data once even where
    the algorithm maps it every pass (MARWIL's default): each pass would map the same whole
    episodes with the same module state (OfflineData reads it once, at its first map), so only
    the order of a pass's batches and the restart of the map actors at every pass (seconds each)
    differ.

    It holds the batches only where that is safe, and otherwise does what RLlib's class does:
    one iterator (``num_shards <= 1``: a local Learner or one remote Learner, which builds the
    batches in its own process from the materialized blocks), mapped data materialized, the
    materialized size at most :attr:`max_bytes` (larger sets stay in Ray's object store, with a
    log line saying why), and no ``iter_torch_batches`` option it does not know.

    Args:
        config: RLlib's ``AlgorithmConfig`` (OfflineData's own argument).
    """

    #: The most bytes of mapped data held in a Learner's memory (the materialized dataset's
    #: ``size_bytes()``); a subclass may change it.
    max_bytes: ClassVar[int] = 2 * 1024**3

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self._held: _HeldBatches | None = None
        self._hold_checked = False
        pre = self.prelearner_class
        if (
            not self.materialize_mapped_data
            and isinstance(pre, type)
            and issubclass(pre, RLlibPreLearner)
            and getattr(pre, "to_learner", None) == "episodes"
        ):
            # Every pass maps to the same learner rows: the whole episodes of the data, through
            # the learner connector with the module state OfflineData read once, at its first
            # map. Mapping once instead of once a pass changes nothing a Learner sees but the
            # order of a pass's batches, and removes the restart of the map actors each pass.
            self.materialize_mapped_data = True
            _log.info(
                "RLlibOfflineData maps whole episodes once (as materialize_mapped_data=True): "
                "every pass would map them to the same learner rows"
            )

    def sample(
        self,
        num_samples: int,
        return_iterator: bool = False,
        num_shards: int = 1,
        module_state: dict[str, Any] | None = None,
    ) -> Any:
        """RLlib's ``sample``; where a Learner asks for an iterator over data mapped once, one
        whose batches come from memory (see the class docstring).

        Args:
            num_samples: Rows per batch (RLlib's ``train_batch_size_per_learner``).
            return_iterator: Whether the Learner(s) get iterators (RLlib's offline loop).
            num_shards: How many Learners share the data.
            module_state: The RLModule's state for the prelearners (RLlib's argument).

        Returns:
            What RLlib's ``OfflineData.sample`` returns, its iterator replaced by the held one
            where the class docstring says.
        """
        got = super().sample(
            num_samples,
            return_iterator=return_iterator,
            num_shards=num_shards,
            module_state=module_state,  # type: ignore[arg-type]  # RLlib: None by default
        )
        if not return_iterator or num_shards > 1 or not self.materialize_mapped_data:
            return got
        if not self._hold_checked:
            self._hold_checked = True
            size = self.data.size_bytes()
            if size <= self.max_bytes:
                self._held = _HeldBatches(self.data)
            else:
                _log.info(
                    "the mapped data (%s bytes) is over RLlibOfflineData.max_bytes (%s): the "
                    "Learner reads it through Ray Data's iterator",
                    f"{size:,}",
                    f"{self.max_bytes:,}",
                )
        return [self._held] if self._held is not None else got


class _HeldBatches:
    """A materialized dataset's batches as a Learner asks Ray Data's iterator for them
    (``iter_torch_batches``), made once in the process that asks and handed out again on every
    later call. Pickles as the dataset (block references), never as the tensors."""

    #: iter_torch_batches options the held list honours; any other goes to Ray Data.
    _KNOWN = frozenset({"drop_last", "prefetch_batches"})

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        self._lists: dict[tuple[int, str, bool], list[dict[str, Any]]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"dataset": self.dataset}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.dataset = state["dataset"]
        self._lists = {}

    def iter_torch_batches(self, *, batch_size: int, device: Any = "auto", **kwargs: Any) -> Any:
        """The dataset's batches of ``batch_size`` rows as dicts of torch tensors on ``device``.

        Args:
            batch_size: Rows per batch (the last batch of a pass is shorter unless
                ``drop_last``).
            device: The torch device the Learner trains on (Ray Data's ``"auto"`` by default).
            **kwargs: Ray Data's other ``iter_torch_batches`` options: ``drop_last`` is
                honoured, ``prefetch_batches`` means nothing for batches in memory; with any
                other the call goes to Ray Data as it is.

        Returns:
            A list (each ``iter()`` of it is one pass), or Ray Data's iterable where an option
            asks for what only Ray Data does.
        """
        if set(kwargs) - self._KNOWN:
            return self.dataset.iter_torch_batches(batch_size=batch_size, device=device, **kwargs)
        drop_last = bool(kwargs.get("drop_last", False))
        key = (batch_size, str(device), drop_last)
        if key not in self._lists:
            self._lists[key] = list(
                self.dataset.iter_torch_batches(
                    batch_size=batch_size, device=device, drop_last=drop_last
                )
            )
        return self._lists[key]


def _map_concurrency(config: Any) -> int:
    """The most map_batches actors RLlib runs the prelearner class in: RLlib's
    ``OfflineData.default_map_batches_kwargs | config.map_batches_kwargs`` (OfflineData's
    own merge), an autoscaling ``(min, max)`` counted at its max, None (Ray Data's own
    choice) as more than one."""
    data_class = getattr(config, "offline_data_class", None) or OfflineData
    prop = getattr(data_class, "default_map_batches_kwargs", None)
    read = prop.fget if isinstance(prop, property) else None
    defaults = read(_ConfigOnly(config)) if read is not None else {}
    kwargs = dict(defaults) | dict(getattr(config, "map_batches_kwargs", None) or {})
    c = kwargs.get("concurrency")
    if c is None:
        return 2
    if isinstance(c, tuple | list):
        return int(max(c[:2]))
    return int(c)


class _ConfigOnly:
    """Just enough of an OfflineData for its ``default_map_batches_kwargs`` (it reads
    ``self.config``)."""

    def __init__(self, config: Any) -> None:
        self.config = config


def _carries_t(read: Any, batch: Any) -> bool:
    """Whether a batch's episodes take ``t`` from the data (a ``t`` column of rows or of
    old-stack SampleBatch records; episode records carry ``t_started``) rather than from the
    order batches arrive in."""
    names = list(batch.column_names) if hasattr(batch, "column_names") else list(batch)
    fmt = read.format if read.format != "auto" else detect_batch_format(names)
    if fmt == "rows":
        return load_schema(read.schema).present(C.T, names) is not None
    if fmt == "sample_batches":
        return C.T in names
    return bool(fmt == "episodes")


def config_from_rllib(
    algo_config: Any,
    spaces: tuple[Any, Any] | None,
    ours: Mapping[str, Any] | None,
    default_buffer_class: type | None = None,
) -> PreLearnerConfig:
    """This project's prelearner config from RLlib's offline settings, then ``ours`` on top.

    Args:
        algo_config: RLlib's ``AlgorithmConfig`` (None: this project's defaults only).
        spaces: The spaces OfflineData passes (used only where the config has neither its own
            spaces nor an env: with an env they are the vectorized env's).
        ours: :class:`PreLearnerConfig` fields (flat, ``section.field`` or nested sections).
        default_buffer_class: The prelearner class's ``default_prelearner_buffer_class``, used
            where the config names no ``prelearner_buffer_class`` (None: RLlib's
            ``EpisodeReplayBuffer``, i.e. uniform).

    Returns:
        The config for :class:`~offline_prelearner.prelearner.OfflinePreLearner`.

    Raises:
        ConfigError: A field this project does not know, or a ``prelearner_buffer_class`` it
            has no counterpart for.
    """
    updates: dict[str, Any] = {}
    if algo_config is not None:
        updates.update(_rllib_updates(algo_config, default_buffer_class))
    # The spaces data is checked against: the config's own (one env's spaces). The ``spaces``
    # OfflineData passes are the env runner's vectorized ones (a (1, 3) Box for Pendulum) when
    # the config names an env, so they are used only when they are all there is.
    obs_space = getattr(algo_config, "observation_space", None)
    act_space = getattr(algo_config, "action_space", None)
    if obs_space is None and getattr(algo_config, "env", None) is None and spaces is not None:
        obs_space, act_space = spaces
    if obs_space is not None:
        updates["validate.observation_space"] = obs_space
    if act_space is not None:
        updates["validate.action_space"] = act_space
    for key, value in (ours or {}).items():
        if key in SECTIONS and isinstance(value, Mapping):
            updates.update({f"{key}.{f}": v for f, v in value.items()})
        else:
            updates[key] = value
    return PreLearnerConfig().with_updates(updates)


def _rllib_updates(cfg: Any, default_buffer_class: type | None = None) -> dict[str, Any]:
    """RLlib's offline settings as this project's config fields."""
    up: dict[str, Any] = {}
    if cfg.input_read_episodes:
        up["read.format"] = "episodes"
    elif cfg.input_read_sample_batches:
        up["read.format"] = "sample_batches"
    schema = _column_schema(dict(cfg.input_read_schema or {}))
    if schema is not None:
        up["read.schema"] = schema
    up["sample.train_batch_size"] = int(cfg.train_batch_size_per_learner or 256)
    n_step = getattr(cfg, "n_step", None)
    if isinstance(n_step, int | tuple) and n_step != 1:
        up["sample.n_step"] = n_step
    gamma = getattr(cfg, "gamma", None)
    if isinstance(gamma, float | int):
        up["sample.gamma"] = float(gamma)
    kwargs = dict(cfg.prelearner_buffer_kwargs or {})
    if "capacity" in kwargs:
        up["buffer.capacity"] = int(kwargs["capacity"])
    buffer_class = cfg.prelearner_buffer_class or default_buffer_class
    if buffer_class is not None:
        name = getattr(buffer_class, "__name__", str(buffer_class))
        if "Prioritized" in name:
            up["buffer.kind"] = "prioritized"
            for k in ("alpha", "beta"):
                if k in kwargs:
                    up[f"buffer.prioritized.{k}"] = float(kwargs[k])
        elif name != "EpisodeReplayBuffer":
            raise ConfigError(
                f"prelearner_buffer_class {name} has no counterpart here (EpisodeReplayBuffer "
                "and PrioritizedEpisodeReplayBuffer map to buffer.kind uniform and prioritized); "
                "set buffer.kind in RLlibPreLearner.configure instead"
            )
    seed = getattr(cfg, "seed", None)
    if isinstance(seed, int):
        up["seed"] = seed
    return up


def _column_schema(schema: Mapping[str, str]) -> Any:
    """RLlib's ``input_read_schema`` (its column keys -> the data's names) as this project's
    :class:`~offline_prelearner.io.schema.ColumnSchema` over the default names; None when it
    renames nothing."""
    from .io.schema import ColumnSchema, load_schema

    base = load_schema(None).to_dict()
    columns = dict(base.get("columns", {}))
    renamed = {k: v for k, v in schema.items() if k in columns and columns[k] != v}
    if not renamed:
        return None
    columns.update(renamed)
    return ColumnSchema.from_dict({**base, "name": "rllib input_read_schema", "columns": columns})


def _refuse_multi_agent(multi_agent: bool, hook: str) -> None:
    """RLlib's mapping hooks are single-agent (RLlib's raise too); this project's call is not."""
    if multi_agent:
        raise ConfigError(
            f"RLlibPreLearner.{hook} maps single-agent data (as RLlib's); multi-agent rows go "
            "through the prelearner's call, which routes them to their modules"
        )


def _files_read(batch: Mapping[str, Any]) -> Any:
    """A batch of files from ``ray.data.read_binary_files(..., include_paths=True)`` (RLlib's
    ``input_read_method="read_binary_files"``: the way a Minari or D4RL file reaches the
    prelearner, as no Ray Data reader knows them) as the one table this project's reader reads
    from their paths (``io.sources.read_table``: Minari and D4RL files as step tables); any
    other batch as it is."""
    if "path" not in batch or "bytes" not in batch:
        return batch
    import pyarrow as pa

    from .io.sources import read_table

    tables = [read_table(str(path)) for path in batch["path"]]
    return pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]


def _whole_episode(ep: Episode, to_numpy: bool = True) -> SingleAgentEpisode:
    """One of this project's episodes as RLlib's, with its extras as extra model outputs and
    its infos where it has them."""
    sa = SingleAgentEpisode(
        id_=str(ep.id),
        observations=list(ep.observations),
        actions=list(ep.actions),
        rewards=list(ep.rewards),
        infos=list(ep.infos) if ep.infos is not None else [{} for _ in range(len(ep) + 1)],
        terminated=bool(ep.terminated),
        truncated=bool(ep.truncated),
        extra_model_outputs={k: list(v) for k, v in (ep.extras or {}).items()},
        t_started=int(ep.t_started),
        len_lookback_buffer=0,
    )
    if to_numpy:
        sa.to_numpy()
    return sa


def _sample_episodes(
    rows: Mapping[str, np.ndarray], drop: tuple[str, ...] = ()
) -> list[SingleAgentEpisode]:
    """Sampled rows (one per transition) as the one-step episodes RLlib's buffer samples, less
    the all-ones columns ``drop`` names (``RLlibPreLearner._constant_columns``)."""
    obs, new_obs = rows[C.OBS], rows[C.NEW_OBS]
    actions, rewards = rows[C.ACTIONS], rows[C.REWARDS]
    term, trunc = rows[C.TERMINATEDS], rows[C.TRUNCATEDS]
    ids = rows.get(C.EPS_ID)
    ts = rows.get(C.T)
    n = len(rewards)
    extra = {k: v for k, v in rows.items() if k not in _CORE and k not in _NOT_SAMPLE}
    extra.setdefault(C.N_STEP, np.ones(n, np.int64))
    extra.setdefault(C.WEIGHTS, np.ones(n, np.float32))
    for column in drop:
        extra.pop(column, None)
    out = []
    for i in range(n):
        sa = SingleAgentEpisode(
            id_=str(ids[i]) if ids is not None else None,
            observations=[obs[i], new_obs[i]],
            actions=[actions[i]],
            rewards=[rewards[i]],
            infos=[{}, {}],
            terminated=bool(term[i]),
            truncated=bool(trunc[i]),
            extra_model_outputs={k: [v[i]] for k, v in extra.items()},
            t_started=int(ts[i]) if ts is not None else 0,
            len_lookback_buffer=0,
        )
        sa.to_numpy()
        out.append(sa)
    return out


def _step_episodes(
    columns: EpisodeColumns, *, zero_next: bool, to_numpy: bool
) -> list[SingleAgentEpisode]:
    """Every step of ``columns`` as a one-step RLlib episode (RLlib's row mapping): the
    transitions are gathered as columns, then one episode object is built per step (the
    hook's contract is a list of objects)."""
    n_ep = len(columns)
    length = columns.length
    ep = np.repeat(np.arange(n_ep, dtype=np.int64), length)
    first = np.cumsum(length) - length  # each episode's first position in the enumeration
    k = np.arange(len(ep), dtype=np.int64) - np.repeat(first, length)  # step within its episode
    rows = np.repeat(columns.step_at, length) + k  # its row in actions / rewards / extras
    obs = columns.gather_observations(ep, k)
    nxt = np.zeros_like(obs) if zero_next else columns.gather_observations(ep, k + 1)
    last = k == length.take(ep) - 1
    term = columns.terminated.take(ep) & last
    trunc = columns.truncated.take(ep) & last
    t = columns.t_started.take(ep) + k
    infos = columns.infos
    out = []
    for i in range(len(ep)):
        e, r = int(ep[i]), int(rows[i])
        info = infos[e] if infos is not None else None
        sa = SingleAgentEpisode(
            id_=str(columns.ids[e]),
            observations=[obs[i], nxt[i]],
            actions=[columns.actions[r]],
            rewards=[columns.rewards[r]],
            infos=[{}, info[int(k[i]) + 1] if info is not None else {}],
            terminated=bool(term[i]),
            truncated=bool(trunc[i]),
            extra_model_outputs={name: [v[r]] for name, v in columns.extras.items()},
            t_started=int(t[i]),
            len_lookback_buffer=0,
        )
        if to_numpy:
            sa.to_numpy()
        out.append(sa)
    return out
