"""MultiAgentEpisodeReplayBuffer: one buffer per module, sampled independently or in lockstep.

::

    buf = MultiAgentEpisodeReplayBuffer(100_000, NStep(3, 0.99), sampling="lockstep", seed=0)
    buf.add(agent_episodes)             # Episode objects carrying agent_id / module_id
    mab = buf.sample(256)               # MultiAgentBatch {module_id: SampleBatch}, env_steps
    mab["policy_a"]["agent_id"]         # which agent each row came from

**Routing.** An episode goes to ``episode.module_id``; without one, to ``mapping_fn(agent_id,
episode)`` when given, else to ``"default_policy"``. Module ids and agent ids are kept as ``int``
or ``str`` (anything else by its ``str``), as episode ids are. Each module's buffer comes from
``make_buffer(module_id, seed)`` on the module's first episode (default: an
:class:`EpisodeReplayBuffer` of ``capacity`` slots with ``unit``, uniform sampling); ``capacity``
is per module. Several agents may share a module: inside it an episode is keyed by ``(episode
id, agent id)``, so agents of one env episode never collide, and every sample carries the real
``eps_id`` and an ``agent_id`` column.

**Sampling.**

* ``"independent"``: each module draws its own ``batch_size`` rows with its own sampler
  (prioritized modules keep their priorities; ``update_priorities(module_id, ...)``).
  ``env_steps`` is ``batch_size``.
* ``"lockstep"``: ``batch_size`` env steps ``(eps_id, t)`` are drawn uniformly, with
  replacement, from the union of every module's sampleable steps; each module then returns
  the row of every one of its agents that has that step (none where it has not), in draw order,
  ``batch.info["draw"]`` giving each row's draw. ``env_steps`` is ``batch_size``. It matches
  steps by ``t``, so it assumes every agent's ``t`` counts env steps (simultaneous-move envs);
  per-module samplers are not consulted and weights are 1.

Modules that cannot sample yet (before their ``learning_starts``, nothing sampleable, rate
limited) are left out of the batch; when no module can sample, :class:`EmptyBufferError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ..episodes import columns as C
from ..episodes.episode import Episode
from ..errors import ConfigError, DataError, EmptyBufferError, Where
from . import checkpoint
from .agent_index import Names, agent_key, decode, encode, episode_code, merge
from .batch import MultiAgentBatch, SampleBatch
from .mixin import MixInReplayBuffer
from .replay_buffer import INDICES, EpisodeReplayBuffer, _batch_size
from .samplers.base import UpdatableSampler, ranges
from .samplers.uniform import Uniform
from .storage.ring import normalize_id
from .units.base import SampleUnit

__all__ = ["AGENT_ID", "DEFAULT_MODULE_ID", "MultiAgentEpisodeReplayBuffer"]

DEFAULT_MODULE_ID = "default_policy"
AGENT_ID = C.AGENT_ID
BufferFactory = Callable[[Any, "int | None"], EpisodeReplayBuffer]
_SAMPLING = ("independent", "lockstep")
_T_LIMIT = 1 << 31  # lockstep packs (group, t) into one int64


class MultiAgentEpisodeReplayBuffer:
    """One buffer per module; see the module docstring.

    Args:
        capacity: Slots per module (with the default buffers); or pass ``make_buffer``.
        unit: What each step expands into (default buffers only).
        make_buffer: ``make_buffer(module_id, seed) -> EpisodeReplayBuffer`` builds each module's
            buffer (e.g. prioritized, mix-in, reservoir); ``seed`` is derived from ``seed`` and
            the module id (``None`` without a seed).
        sampling: ``"independent"`` or ``"lockstep"``.
        mapping_fn: ``mapping_fn(agent_id, episode) -> module_id`` for episodes without one.
        seed: Seeds the lockstep draws and the modules' buffers.
        learning_starts: Per module (default buffers only).
    """

    def __init__(
        self,
        capacity: int | None = None,
        unit: SampleUnit | None = None,
        *,
        make_buffer: BufferFactory | None = None,
        sampling: str = "independent",
        mapping_fn: Callable[[Any, Episode], Any] | None = None,
        seed: int | None = None,
        learning_starts: int = 0,
    ) -> None:
        if (capacity is None) == (make_buffer is None):
            raise ConfigError("pass either capacity (default buffers) or make_buffer, not both")
        if make_buffer is not None and (unit is not None or learning_starts):
            raise ConfigError("unit and learning_starts configure default buffers only")
        if sampling not in _SAMPLING:
            raise ConfigError(f"sampling must be one of {_SAMPLING}, found {sampling!r}")
        if mapping_fn is not None and not callable(mapping_fn):
            raise ConfigError(f"mapping_fn must be callable, found {mapping_fn!r}")
        if make_buffer is None:
            assert capacity is not None
            EpisodeReplayBuffer(capacity, unit=unit, learning_starts=learning_starts)  # checks
            make_buffer = _DefaultBuffers(capacity, unit, learning_starts)
        self.make_buffer: BufferFactory = make_buffer
        self.sampling = sampling
        self.mapping_fn = mapping_fn
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.buffers: dict[int | str, EpisodeReplayBuffer] = {}
        self._names: dict[int | str, Names] = {}
        self._union: tuple[Any, ...] | None = None

    def __repr__(self) -> str:
        mods = ", ".join(f"{m!r}: {len(b)}" for m, b in self.buffers.items())
        return f"MultiAgentEpisodeReplayBuffer(sampling={self.sampling!r}, timesteps={{{mods}}})"

    def __len__(self) -> int:
        """Timesteps held, over all modules."""
        return sum(len(b) for b in self.buffers.values())

    # ------------------------------------------------------------------ adding
    def module_of(self, episode: Episode) -> int | str:
        """The module an episode is stored under (see the module docstring).

        Args:
            episode: An episode; its ``module_id`` wins, else ``mapping_fn(agent_id, episode)``,
                else ``"default_policy"``.

        Returns:
            The module id, normalized to ``int`` or ``str``.

        Raises:
            ConfigError: ``mapping_fn`` returned None.
        """
        mid = episode.module_id
        if mid is None:
            mid = (
                DEFAULT_MODULE_ID
                if self.mapping_fn is None
                else self.mapping_fn(episode.agent_id, episode)
            )
            if mid is None:
                raise ConfigError(f"mapping_fn returned None for agent {episode.agent_id!r}")
        return normalize_id(mid)

    def add(self, episodes: Episode | Iterable[Episode]) -> None:
        """Stores episodes (or fragments) in their modules' buffers, creating buffers as needed.

        Episodes of one module are added in order; an episode that its buffer refuses raises
        after the ones before it (in that module) were added.

        Args:
            episodes: One episode or an iterable of them, each with its ``agent_id`` (and
                ``module_id``, or routed by ``mapping_fn``); fragments continue what the module
                holds under the same ``(episode id, agent id)``.

        Raises:
            TypeError: An item is not an :class:`Episode` (nothing is added then).
            ConfigError: ``mapping_fn`` returned None, or ``make_buffer`` built no
                :class:`EpisodeReplayBuffer`.
            EpisodeValidationError: A module's buffer refused an episode.
        """
        eps = [episodes] if isinstance(episodes, Episode) else episodes
        groups: dict[int | str, list[tuple[Episode, str, Any, Any]]] = {}
        for ep in eps:
            if not isinstance(ep, Episode):
                raise TypeError(f"add() takes Episode objects, found {type(ep).__name__}")
            eid, agent = normalize_id(ep.id), agent_key(ep.agent_id)
            sid = encode(eid, agent)
            inner = Episode._trusted(
                sid,
                ep.observations,
                ep.actions,
                ep.rewards,
                ep.terminated,
                ep.truncated,
                agent,
                None,
                ep.t_started,
                ep.extras,
            )
            groups.setdefault(self.module_of(ep), []).append((inner, sid, eid, agent))
        for mid, items in groups.items():
            buf = self._buffer(mid)
            try:
                buf.add([it[0] for it in items])
            finally:
                self._register(mid, [(sid, eid, agent) for _, sid, eid, agent in items])

    def _buffer(self, mid: int | str) -> EpisodeReplayBuffer:
        buf = self.buffers.get(mid)
        if buf is None:
            buf = self.buffers[mid] = self._new_buffer(mid)
            self._names[mid] = Names()
        return buf

    def _new_buffer(self, mid: int | str) -> EpisodeReplayBuffer:
        buf = self.make_buffer(mid, self._module_seed(mid))
        if not isinstance(buf, EpisodeReplayBuffer):
            raise ConfigError(
                f"make_buffer must return an EpisodeReplayBuffer, found {type(buf).__name__}"
            )
        return buf

    def _module_seed(self, mid: int | str) -> int | None:
        if self.seed is None:
            return None
        seq = np.random.SeedSequence(self.seed, spawn_key=(episode_code(encode(mid, None)),))
        return int(seq.generate_state(1, np.uint64)[0] >> 1)

    def _register(self, mid: int | str, items: list[tuple[str, Any, Any]]) -> None:
        """Records which (episode id, agent id) each new placement stands for."""
        st, names = self.buffers[mid].storage, self._names[mid]
        compactions = st.counters.get("compactions", 0)
        if compactions != names.compactions:  # a reservoir re-placed everything
            names.rebuild(st)
            names.compactions = compactions
            return
        first = st.table.base + st.table.lo
        for sid, eid, agent in items:
            row = st.row_of_id(sid)
            if row is not None:
                names.set(first + row, first, eid, agent, episode_code(encode(eid, None)))

    # ------------------------------------------------------------------ sampling
    def sample(self, batch_size: int | None) -> MultiAgentBatch:
        """A :class:`MultiAgentBatch` drawn as ``sampling`` says (see the module docstring).

        ``batch_size`` may be ``None`` in independent mode only, for module buffers that size
        their own batches (a mix-in buffer with ``replay_ratio < 1``).

        Args:
            batch_size: Rows per module (independent) or env steps drawn over all modules
                (lockstep), 1 to 4,194,304; None as above.

        Returns:
            One :class:`SampleBatch` per module that could sample, each with ``eps_id`` (the real
            episode ids), ``agent_id``, ``weights`` and ``indices``; ``env_steps`` is
            ``batch_size`` (with None, the largest module batch).

        Raises:
            EmptyBufferError: No module can sample (or, in lockstep, every module holding the
                drawn steps is rate limited).
            ConfigError: ``batch_size`` is None for a module buffer that needs one, or is out
                of range.
            DataError: Lockstep sampling met a ``t`` outside ``0 .. 2**31``.
        """
        if self.sampling == "lockstep":
            return self._lockstep(_batch_size(batch_size))
        out: dict[int | str, SampleBatch] = {}
        reasons = []
        for mid, buf in self.buffers.items():
            try:
                if batch_size is not None:
                    batch = buf.sample(batch_size)
                elif isinstance(buf, MixInReplayBuffer):
                    batch = buf.sample()
                else:
                    raise ConfigError(
                        f"module {mid!r} has a {type(buf).__name__}: it needs a batch_size"
                    )
            except EmptyBufferError as e:
                reasons.append(f"{mid!r}: {e}")
                continue
            self._relabel(mid, batch)
            out[mid] = batch
        if not out:
            raise EmptyBufferError("no module can sample: " + ("; ".join(reasons) or "no data"))
        steps = batch_size if batch_size is not None else max(len(b) for b in out.values())
        return MultiAgentBatch(out, env_steps=steps)

    def _relabel(self, mid: int | str, batch: SampleBatch) -> None:
        """Replaces the internal keys in ``eps_id`` by the episode ids; adds ``agent_id``."""
        serials = np.asarray(batch[INDICES], np.int64) >> 32
        eps, agents = self._names[mid].get(serials)
        batch.set_trusted(C.EPS_ID, eps)
        batch.set_trusted(AGENT_ID, agents)

    def _lockstep(self, batch_size: int) -> MultiAgentBatch:
        per_module, merged, total = self._union_index()
        if total == 0:
            raise EmptyBufferError("no module has sampleable steps for lockstep sampling")
        m_code, m_lo, m_size, cum = merged
        u = (self.rng.random(batch_size) * total).astype(np.int64)
        j = np.searchsorted(cum, u, side="right")
        code = m_code.take(j)
        t = m_lo.take(j) + (u - (cum.take(j) - m_size.take(j)))
        draws: dict[int | str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for mid, (m_code, m_rows, m_first, m_t0, m_count) in per_module.items():
            a = np.searchsorted(m_code, code, side="left")
            b = np.searchsorted(m_code, code, side="right")
            pair = ranges(a, b - a)  # candidate positions in the module's sorted rows
            draw = np.repeat(np.arange(batch_size, dtype=np.int64), b - a)
            off = t.take(draw) - m_t0.take(pair)
            ok = (off >= 0) & (off < m_count.take(pair))
            pair, draw, off = pair[ok], draw[ok], off[ok]
            if len(pair):
                draws[mid] = (m_first.take(pair) + off, m_rows.take(pair), draw)
        out = {}
        for mid, (slots, rows, draw) in draws.items():
            try:
                self.buffers[mid]._check_rate(len(slots))
            except EmptyBufferError:  # rate limited: left out, like in independent sampling
                continue
            batch = self.buffers[mid]._emit(slots, rows, None)
            self._relabel(mid, batch)
            batch.info["draw"] = draw
            out[mid] = batch
        if not out:
            raise EmptyBufferError("every module with the drawn steps is rate limited")
        return MultiAgentBatch(out, env_steps=batch_size)

    def _union_index(
        self,
    ) -> tuple[dict[int | str, tuple[np.ndarray, ...]], tuple[np.ndarray, ...], int]:
        """Per module its sampleable rows sorted by episode code; the union of all modules'
        sampleable ``(episode, t)`` as merged intervals ``(code, t_lo, size, cumulative size)``;
        its total. Cached per storage versions."""
        ready = {}
        for mid, buf in self.buffers.items():
            try:
                buf._check_learning_starts()
            except EmptyBufferError:
                continue
            ready[mid] = buf
        key = tuple((mid, b.storage.version) for mid, b in ready.items())
        if self._union is not None and self._union[0] == key:
            return self._union[1], self._union[2], self._union[3]
        per_module: dict[int | str, tuple[np.ndarray, ...]] = {}
        parts = []
        for mid, buf in ready.items():
            st, valid = buf.storage, buf.valid_starts()
            rows = np.flatnonzero(valid.count)
            codes = self._names[mid].codes(rows + st.table.base + st.table.lo)
            order = np.argsort(codes, kind="stable")
            rows, codes = rows[order], codes[order]
            t0 = st.t_started.take(rows)
            count = valid.count.take(rows)
            bad = np.flatnonzero((t0 < 0) | (t0 + count >= _T_LIMIT))
            if len(bad):
                r = int(rows[bad[0]])
                eid, agent = decode(st.ids[r])
                raise DataError(
                    f"lockstep sampling matches steps by t and needs 0 <= t < 2**31; agent "
                    f"{agent!r} of module {mid!r} has t={int(t0[bad[0]])}..",
                    Where(episode_id=eid, timestep=int(t0[bad[0]])),
                    reason="t_range",
                )
            per_module[mid] = (codes, rows, valid.first.take(rows), t0, count)
            parts.append((codes, t0, t0 + count))
        code, lo, size = merge(parts)
        cum = np.cumsum(size)
        merged = (code, lo, size, cum)
        total = int(cum[-1]) if len(cum) else 0
        self._union = (key, per_module, merged, total)
        return per_module, merged, total

    def update_priorities(self, module_id: Any, indices: Any, priorities: Any) -> int:
        """Priority feedback for one module's rows (its buffer must be prioritized).

        Args:
            module_id: The module the rows were sampled from (a key of the batch).
            indices: That module batch's ``indices`` column.
            priorities: One TD error or priority per index, as the module buffer's
                ``update_priorities`` takes them.

        Returns:
            How many priorities were applied (handles of evicted or moved episodes are not).

        Raises:
            TypeError: The module's buffer has no updatable (prioritized) sampler.
            ConfigError: In one line, naming the modules held: no buffer holds ``module_id``.
        """
        buf = self.buffers.get(normalize_id(module_id))
        if buf is None:
            raise ConfigError(f"no buffer for module {module_id!r}; have {list(self.buffers)}")
        fn = getattr(buf, "update_priorities", None)
        if fn is None or not isinstance(buf.sampler, UpdatableSampler):
            raise TypeError(f"module {module_id!r} has no prioritized sampler ({buf.sampler!r})")
        return int(fn(indices, priorities))

    # ------------------------------------------------------------------ stats and state
    def stats(self) -> dict[int | str, dict[str, int]]:
        """Each module's counters (see ``EpisodeReplayBuffer.stats``)."""
        return {mid: buf.stats() for mid, buf in self.buffers.items()}

    def get_state(self) -> dict[str, Any]:
        """``{"meta", "arrays"}`` of every module, prefixed ``m<i>/``; plain numpy, no pickle."""
        metas, arrays = [], {}
        for i, buf in enumerate(self.buffers.values()):
            s = buf.get_state()
            metas.append(s["meta"])
            arrays.update({f"m{i}/{k}": v for k, v in s["arrays"].items()})
        meta = {
            "buffer": type(self).__name__,
            "sampling": self.sampling,
            "modules": [_json_id(m) for m in self.buffers],
            "per_module": metas,
            "rng": self.rng.bit_generator.state,
        }
        return {"meta": meta, "arrays": arrays}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores :meth:`get_state` output; module buffers come from ``make_buffer``.

        Args:
            state: ``{"meta": ..., "arrays": ...}`` of :meth:`get_state`: module ids, each
                module's buffer state (arrays prefixed ``m<i>/``) and the lockstep generator.

        Raises:
            ConfigError: The state is of another buffer type or sampling mode, or a module's
                buffer differs from the one saved (see ``EpisodeReplayBuffer.set_state``).
            DataError: A module's state breaks its buffer's invariants, or the module list or
                the generator state is malformed. On any error this buffer is left as it was.
        """
        meta, arrays = state["meta"], state["arrays"]
        if meta.get("buffer") != type(self).__name__ or meta.get("sampling") != self.sampling:
            raise ConfigError(
                f"state is of a {meta.get('buffer')} with sampling {meta.get('sampling')!r}, "
                f"this is a {type(self).__name__} with sampling {self.sampling!r}"
            )
        mids = _module_ids(meta)
        rng_state = self._checked_rng_state(meta.get("rng"))
        buffers: dict[int | str, EpisodeReplayBuffer] = {}
        all_names: dict[int | str, Names] = {}
        for i, mid in enumerate(mids):  # restored aside; swapped in once every module loads
            pre = f"m{i}/"
            sub = {k[len(pre) :]: v for k, v in arrays.items() if k.startswith(pre)}
            buf = buffers[mid] = self._new_buffer(mid)
            buf.set_state({"meta": meta["per_module"][i], "arrays": sub})
            names = all_names[mid] = Names()
            names.rebuild(buf.storage)
            names.compactions = buf.storage.counters.get("compactions", 0)
        self.buffers, self._names, self._union = buffers, all_names, None
        self.rng.bit_generator.state = rng_state

    def _checked_rng_state(self, rng_state: Any) -> dict[str, Any]:
        """``rng_state`` once a fresh bit generator of this buffer's type took it (checked as
        ``EpisodeReplayBuffer.set_state`` checks its own)."""
        kind = type(self.rng.bit_generator)
        if not isinstance(rng_state, dict):
            raise DataError(
                f"rng must be a generator state, found {rng_state!r}", Where(column="rng")
            )
        if rng_state.get("bit_generator") != kind.__name__:
            raise ConfigError(
                f"state has a {rng_state.get('bit_generator')} generator, this buffer uses "
                f"{kind.__name__}"
            )
        try:
            kind().state = rng_state
        except (TypeError, ValueError, KeyError) as e:
            raise DataError(f"rng state is malformed ({e})", Where(column="rng")) from None
        return rng_state

    def save(self, path: str | Path) -> Path | str:
        """Writes one checkpoint directory for all modules, atomically (see :mod:`.checkpoint`).

        Args:
            path: A local directory or object-store URI; an existing one must be a checkpoint.

        Returns:
            Where the checkpoint was written.

        Raises:
            ConfigError: ``path`` exists and is not a checkpoint directory.
        """
        state = self.get_state()
        return checkpoint.write(path, state["meta"], state["arrays"])

    def load(self, path: str | Path) -> None:
        """Restores :meth:`save` output, checked as ``EpisodeReplayBuffer.load`` checks it.

        Args:
            path: A checkpoint written by :meth:`save`.

        Raises:
            DataError: A file fails its checksum or the state breaks an invariant.
            ConfigError: The checkpoint is of another buffer configuration.
        """
        checkpoint.restore(path, self.get_state, self.set_state)


# ---------------------------------------------------------------------- helpers
class _DefaultBuffers:
    """The default ``make_buffer``: uniform :class:`EpisodeReplayBuffer` per module."""

    def __init__(self, capacity: int, unit: SampleUnit | None, learning_starts: int) -> None:
        self.capacity, self.unit, self.learning_starts = capacity, unit, learning_starts

    def __call__(self, module_id: Any, seed: int | None) -> EpisodeReplayBuffer:
        return EpisodeReplayBuffer(
            self.capacity, Uniform(), self.unit, seed=seed, learning_starts=self.learning_starts
        )


def _json_id(mid: int | str) -> list[Any]:
    return ["i", mid] if isinstance(mid, int) else ["s", mid]


def _module_ids(meta: dict[str, Any]) -> list[int | str]:
    """The module ids a state's meta lists, one per ``per_module`` entry (DataError if not)."""
    modules: Any = meta.get("modules")
    per_module = meta.get("per_module")
    try:
        mids = [_from_json_id(m) for m in modules]
    except (TypeError, ValueError):
        raise DataError(
            f"modules must be a list of [kind, id] pairs, found {modules!r}",
            Where(column="modules"),
        ) from None
    if not isinstance(per_module, list) or len(per_module) != len(mids):
        raise DataError(
            f"per_module must be a list of one state per module ({len(mids)}), found "
            f"{per_module if not isinstance(per_module, list) else len(per_module)!r}",
            Where(column="per_module"),
        )
    return mids


def _from_json_id(v: Any) -> int | str:
    kind, value = v
    return int(value) if kind == "i" else str(value)
