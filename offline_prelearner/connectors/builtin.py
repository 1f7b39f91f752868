"""Built-in batch connectors: observation normalisation, flattening, one-hot actions, dtype casts.

Each works on a whole sampled batch with array operations. Row layouts they understand:

* transitions / n-step: ``[B, ...]`` columns;
* sequences: ``[B, T, ...]`` columns with a ``seq_lens`` column (``[B]``, real steps per row; the
  rest is padding) -- the time axis is kept and padding is excluded from statistics and checks;
* frame stacks: ``obs``/``new_obs`` of ``[B, k, *frame]`` (``[B, T, k, *frame]`` in sequences).

Connectors return a new :class:`SampleBatch` sharing the untouched columns with their input.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from ..config import check_bool, check_float, check_int
from ..episodes import columns as C
from ..errors import ConfigError, DataError, SchemaError, Where
from ..replay.batch import SampleBatch
from ..replay.units.sequence import SEQ_LENS
from .base import Connector, ConnectorContext
from .stats import RunningMeanStd

__all__ = ["CastDtypes", "FlattenObservations", "NormalizeObservations", "OneHotActions"]

OBS_COLUMNS = (C.OBS, C.NEW_OBS)
#: The most actions a one-hot encoding has (each sample gets a row of this many floats).
MAX_ACTIONS = 1 << 20


def _copy(batch: SampleBatch) -> SampleBatch:
    out = SampleBatch._trusted(batch.to_dict())
    out.info = batch.info
    return out


def _real_mask(batch: SampleBatch) -> np.ndarray | None:
    """``[B, T]`` true on real (non-padding) steps of a sequence batch; ``None`` otherwise."""
    seq_lens = batch.get(SEQ_LENS)
    if seq_lens is None:
        return None
    width = batch[C.OBS].shape[1] if C.OBS in batch else batch[C.ACTIONS].shape[1]
    return np.arange(width) < np.asarray(seq_lens)[:, None]


def _column(batch: SampleBatch, name: str, connector: str) -> np.ndarray:
    try:
        col: np.ndarray = batch[name]
        return col
    except KeyError:
        raise SchemaError(
            f"{connector}: the batch has no column {name!r}; it has {sorted(batch.keys())}",
            Where(column=name),
        ) from None


def _scalar(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def _columns_arg(columns: Any) -> tuple[str, ...]:
    if isinstance(columns, str) or not isinstance(columns, Sequence) or not columns:
        raise ConfigError(f"columns must be a non-empty list of names, found {columns!r}")
    if not all(isinstance(c, str) and c for c in columns):
        raise ConfigError(f"columns must be names (strings), found {columns!r}")
    return tuple(columns)


# ---------------------------------------------------------------------------------------------
class NormalizeObservations(Connector):
    """``clip((x - mean) / sqrt(var + eps), -clip, clip)`` as float32, from running statistics.

    Statistics are per feature (each element of one observation) and are updated from the first
    of ``columns`` (``obs``: ``new_obs`` mostly repeats it one step later) on every batch before
    it is normalised, unless ``update=False`` (then they come from :meth:`set_state`). The
    feature shape is the observation space's shape when the context gives one (so frame stacks
    share one statistic per frame element), otherwise everything after the row axis (after the
    row and time axes in sequence batches). Padding steps of sequences do not count and come out
    normalised like any value (``loss_mask``/``seq_lens`` say they are padding).

    Each module keeps its own statistics (keyed by ``str(ctx.module_id)``; ``"None"`` in
    single-agent use), so one pipeline serves several modules.

    Args:
        eps: Added to the variance before the square root.
        clip: Bound on the normalised magnitude; ``None`` for none.
        update: Whether sampled batches update the statistics.
        columns: Columns normalised with the one statistic.
    """

    name = "normalize_obs"

    def __init__(
        self,
        eps: float = 1e-8,
        clip: float | None = 10.0,
        update: bool = True,
        *,
        columns: Sequence[str] = OBS_COLUMNS,
    ) -> None:
        self.eps: float = check_float("eps", eps, 0.0, math.inf)
        self.clip: float | None = check_float(
            "clip", clip, 0.0, math.inf, none_ok=True, lo_open=True
        )
        self.update = check_bool("update", update)
        self.columns = _columns_arg(columns)
        self.stats: dict[str, RunningMeanStd] = {}

    def __repr__(self) -> str:
        counts = {k: v.count for k, v in self.stats.items()}
        return (
            f"NormalizeObservations(eps={self.eps}, clip={self.clip}, update={self.update}, "
            f"counts={counts})"
        )

    def stats_for(self, module_id: Any = None) -> RunningMeanStd:
        """The statistics of one module (created empty on first use).

        Args:
            module_id: The module's id (``ctx.module_id``); keyed by ``str(module_id)``, so
                ``None`` (single-agent use) is the key ``"None"``.

        Returns:
            That module's running statistics, the object this connector keeps (updating it
            updates the connector's state).
        """
        return self.stats.setdefault(str(module_id), RunningMeanStd())

    def _lead(self, x: np.ndarray, batch: SampleBatch, ctx: ConnectorContext) -> int:
        shape = getattr(ctx.observation_space, "shape", None)
        if shape is not None:
            lead = x.ndim - len(shape)
            if lead < 1 or tuple(x.shape[lead:]) != tuple(shape):
                raise SchemaError(
                    f"{self.name}: column of shape {list(x.shape)} does not end in the "
                    f"observation space's shape {list(shape)}",
                    Where(column=self.columns[0]),
                )
            return lead
        return 2 if SEQ_LENS in batch else 1

    def __call__(self, batch: SampleBatch, ctx: ConnectorContext) -> SampleBatch:
        """Updates the module's statistics from the batch's real rows (unless ``update=False``) and
        returns a copy with ``columns`` normalised."""
        x = _column(batch, self.columns[0], self.name)
        lead = self._lead(x, batch, ctx)
        stats = self.stats_for(ctx.module_id)
        if self.update:
            real = _real_mask(batch)
            rows = x[real] if real is not None else x
            stats.update(rows.reshape(-1, *x.shape[lead:]), self.columns[0])
        if stats.mean is None or stats.var is None:
            raise ConfigError(
                f"{self.name}: no statistics for module {ctx.module_id!r} yet (update=False and "
                f"no state was set)"
            )
        if stats.shape != x.shape[lead:]:
            raise SchemaError(
                f"{self.name}: statistics are of shape {list(stats.shape or ())}, the "
                f"column's features of shape {list(x.shape[lead:])}",
                Where(column=self.columns[0]),
            )
        mean = stats.mean.astype(np.float32)
        inv_std = (1.0 / np.sqrt(stats.var + self.eps)).astype(np.float32)
        out = _copy(batch)
        for name in self.columns:
            y = (_column(batch, name, self.name).astype(np.float32) - mean) * inv_std
            if self.clip is not None:
                np.clip(y, -self.clip, self.clip, out=y)
            out.set_trusted(name, y)
        return out

    def get_state(self) -> dict[str, Any]:
        """``{str(module_id): {"count": int, "mean": ndarray, "var": ndarray}}``."""
        return {k: v.get_state() for k, v in self.stats.items() if v.count}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restores per-module statistics from :meth:`get_state`'s ``{module id: statistics}``.

        The restored statistics replace all present ones (a module not in ``state`` starts empty).

        Args:
            state: ``{str(module_id): {"count": int, "mean": ndarray, "var": ndarray}}``, as
                :meth:`get_state` returns it.

        Raises:
            ConfigError: A value of ``state`` is not a mapping, or a module's statistics are
                missing a key or misshapen (see :meth:`RunningMeanStd.set_state`).
        """
        stats = {}
        for key, sub in state.items():
            if not isinstance(sub, Mapping):
                raise ConfigError(
                    f"{self.name}: state must map module ids to statistics, found {key!r}: "
                    f"{type(sub).__name__}"
                )
            stats[str(key)] = RunningMeanStd()
            stats[str(key)].set_state(sub)
        self.stats = stats


# ---------------------------------------------------------------------------------------------
def _flatten(x: np.ndarray, lead: int) -> np.ndarray:
    """``[*lead_shape, ...] -> [*lead_shape, n]``; structured dtypes become their fields,
    flattened and concatenated in field order, cast to their common dtype."""
    head = x.shape[:lead]
    if x.dtype.names is None:
        return x.reshape(*head, -1)
    parts = [_flatten(x[f], lead) for f in x.dtype.names]
    common = np.result_type(*(p.dtype for p in parts))
    return np.concatenate([p.astype(common, copy=False) for p in parts], axis=-1)


class FlattenObservations(Connector):
    """``[B, ...] -> [B, n]`` (``[B, T, ...] -> [B, T, n]`` when ``seq_lens`` is present).

    Composite observations stored as numpy structured arrays (one field per sub-space) become
    their fields flattened and concatenated in field order, in the fields' common dtype. Frame
    stacks flatten with their stack axis (``[B, k, *frame] -> [B, k * prod(frame)]``).

    Args:
        columns: Names of the batch columns to flatten (default ``obs`` and ``new_obs``); a
            non-empty sequence of strings. A column missing from a batch raises
            :class:`SchemaError`.
    """

    name = "flatten_obs"

    def __init__(self, *, columns: Sequence[str] = OBS_COLUMNS) -> None:
        self.columns = _columns_arg(columns)

    def __call__(self, batch: SampleBatch, ctx: ConnectorContext) -> SampleBatch:
        """A copy of ``batch`` with each of ``columns`` flattened after its row axis (after the row
        and time axes in sequence batches)."""
        lead = 2 if SEQ_LENS in batch else 1
        out = _copy(batch)
        for name in self.columns:
            out.set_trusted(name, _flatten(_column(batch, name, self.name), lead))
        return out


# ---------------------------------------------------------------------------------------------
class OneHotActions(Connector):
    """One-hot encodings of discrete actions, ``[B, n]`` (``[B, T, n]`` in sequences).

    Args:
        n: Number of actions; ``None`` takes ``n`` (and ``start``) from the context's
            ``Discrete`` action space.
        replace: Write the encoding into ``actions`` instead of a new column.
        output: Name of the new column (when not replacing).
        dtype: dtype of the encoding.

    An action outside ``[start, start + n)`` (or not integral) raises :class:`DataError`
    naming the value, the episode and ``t``. Padding steps of sequences encode as zeros.
    """

    name = "one_hot_actions"

    def __init__(
        self,
        n: int | None = None,
        *,
        replace: bool = False,
        output: str = "actions_one_hot",
        dtype: Any = "float32",
    ) -> None:
        if isinstance(n, np.integer):
            n = int(n)
        check_int("n", n, 1, MAX_ACTIONS, none_ok=True)
        check_bool("replace", replace)
        if not isinstance(output, str) or not output:
            raise ConfigError(f"output must be a non-empty string, found {output!r}")
        try:
            self.dtype = np.dtype(dtype)
        except TypeError:
            raise ConfigError(f"dtype must be a numpy dtype, found {dtype!r}") from None
        self.n = None if n is None else int(n)
        self.replace = replace
        self.output = output

    def __repr__(self) -> str:
        return f"OneHotActions(n={self.n}, replace={self.replace}, output={self.output!r})"

    def _range(self, ctx: ConnectorContext) -> tuple[int, int]:
        if self.n is not None:
            return self.n, 0
        space = ctx.action_space
        if not isinstance(space, gym.spaces.Discrete):
            raise ConfigError(
                f"{self.name}: n is not set and the action space is not Discrete (found "
                f"{space!r}); give n"
            )
        return int(space.n), int(space.start)

    def __call__(self, batch: SampleBatch, ctx: ConnectorContext) -> SampleBatch:
        """A copy of ``batch`` with the one-hot actions added (or written over ``actions``); raises
        :class:`DataError` for an action out of range."""
        n, start = self._range(ctx)
        a = _column(batch, C.ACTIONS, self.name)
        real = _real_mask(batch)
        if real is not None and a.shape[:2] != real.shape:
            real = None
        if a.dtype.kind in "iub":
            idx = a.astype(np.int64) - start
            integral = None
        elif a.dtype.kind == "f":
            idx = np.floor(a).astype(np.int64) - start
            integral = a == np.floor(a)
        else:
            raise SchemaError(
                f"{self.name}: actions must be integers, found dtype {a.dtype}",
                Where(column=C.ACTIONS),
            )
        bad = (idx < 0) | (idx >= n)
        if integral is not None:
            bad |= ~integral
        if real is not None:
            bad &= real.reshape(real.shape + (1,) * (bad.ndim - 2))
            idx = np.where(real.reshape(real.shape + (1,) * (idx.ndim - 2)), idx, -1)
        if bad.any():
            raise self._out_of_range(batch, a, bad, n, start)
        enc = (idx[..., None] == np.arange(n)).astype(self.dtype)
        out = _copy(batch)
        out.set_trusted(C.ACTIONS if self.replace else self.output, enc)
        return out

    def _out_of_range(
        self, batch: SampleBatch, a: np.ndarray, bad: np.ndarray, n: int, start: int
    ) -> DataError:
        pos = tuple(int(i) for i in np.argwhere(bad)[0])
        value = a[pos].item()
        eps_id = batch.get(C.EPS_ID)
        t = batch.get(C.T)
        t_at = None
        if t is not None:
            t_at = int(t[pos[: t.ndim]]) if t.ndim <= len(pos) else None
        return DataError(
            f"{self.name}: action {value!r} is outside [{start}, {start + n}) or not integral "
            f"({int(bad.sum())} such values in the batch)",
            Where(
                column=C.ACTIONS,
                episode_id=None if eps_id is None else _scalar(eps_id[pos[0]]),
                row=pos[0],
                timestep=t_at,
            ),
            reason="action_out_of_range",
        )


# ---------------------------------------------------------------------------------------------
class CastDtypes(Connector):
    """Casts columns: ``CastDtypes({"obs": "float32", "actions": "int32"})``.

    Casts follow numpy's ``astype`` (float -> int truncates). A column missing from the batch
    raises :class:`SchemaError`.

    Args:
        mapping: ``{column name: dtype}``, non-empty; each dtype is anything ``np.dtype``
            accepts (``"float32"``, ``np.int32``) except an object dtype, else
            :class:`ConfigError`.
    """

    name = "cast"

    def __init__(self, mapping: Mapping[str, Any]) -> None:
        if not isinstance(mapping, Mapping) or not mapping:
            raise ConfigError(
                f"mapping must be a non-empty {{column: dtype}} map, found {mapping!r}"
            )
        self.mapping: dict[str, np.dtype] = {}
        for col, dt in mapping.items():
            try:
                dtype = np.dtype(dt)
            except TypeError:
                raise ConfigError(f"mapping[{col!r}]: {dt!r} is not a numpy dtype") from None
            if dtype.hasobject:
                raise ConfigError(f"mapping[{col!r}]: cannot cast to object dtype")
            self.mapping[str(col)] = dtype

    def __repr__(self) -> str:
        return f"CastDtypes({ {k: str(v) for k, v in self.mapping.items()} })"

    def __call__(self, batch: SampleBatch, ctx: ConnectorContext) -> SampleBatch:
        """A copy of ``batch`` with each mapped column cast to its dtype (no copy where the dtype
        already matches)."""
        out = _copy(batch)
        for col, dtype in self.mapping.items():
            out.set_trusted(col, _column(batch, col, self.name).astype(dtype, copy=False))
        return out
