"""Episode-level return math: discounted returns-to-go and GAE advantages, as extra columns.

Both connectors act in ``on_episodes``, on the batch's
:class:`~offline_prelearner.episodes.episode_columns.EpisodeColumns`: they gather the rewards (and
values) of every episode in table order (``columns.step_rows()``), run one vectorized segmented
scan over them with the episodes' lengths as segment boundaries (no loop per step, nor per
episode), and add a per-step extra column to a copy of the table that shares every other array.
The buffer stores the column like any extra and every unit gathers it at the sampled ``t``.

Edges, stated once:

* **Not-done fragments.** An episode that is neither terminated nor truncated is a fragment of a
  longer trajectory whose later rewards are not known. Its returns-to-go are *partial* (the sum
  to the fragment's end). :class:`DiscountedReturns` marks them (``<column>_partial`` is true on
  every step of such an episode, false elsewhere) or raises, as configured. For exact values feed
  complete episodes (group rows by episode before the prelearner). Fragments stitched later in
  the buffer keep the values computed for them.
* **Truncated episodes.** Returns-to-go stop at the recorded end (nothing is bootstrapped; there
  is no value estimate). GAE bootstraps from the last value estimate (see :class:`GAE`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar, Literal

import numpy as np

from ..config import check_float
from ..episodes.episode_columns import EpisodeColumns
from ..errors import ConfigError, EpisodeValidationError, SchemaError, Where
from .base import DEFAULT_CONTEXT, Connector, ConnectorContext, Touches

__all__ = ["GAE", "DiscountedReturns", "discounted_cumsum"]


def discounted_cumsum(
    x: np.ndarray, discount: float, lengths: Sequence[int] | np.ndarray
) -> np.ndarray:
    """Reverse discounted cumulative sums within consecutive segments, float64.

    ``x`` is the concatenation of segments of ``lengths`` (summing to ``len(x)``); for each
    position ``i`` of a segment ending at ``e``: ``out[i] = sum_{k=0}^{e-i} discount**k * x[i+k]``
    (the recursion ``out[i] = x[i] + discount * out[i+1]``, cut at segment ends).

    Computed by recursive doubling: after round ``r`` every position holds the sum over its next
    ``2**r`` steps and the discount product over them (zero once the window crosses its segment's
    end), so ``ceil(log2(max(lengths)))`` whole-array rounds suffice. No ``discount**-k`` scaling is
    involved, so long segments and ``discount = 0`` neither overflow nor lose precision.

    Args:
        x: The concatenated per-step values, 1-d.
        discount: The factor per step.
        lengths: The segments' lengths, in order, summing to ``len(x)``.

    Returns:
        The sums, float64, as long as ``x``.
    """
    a = np.array(x, dtype=np.float64)
    lengths = np.asarray(lengths, dtype=np.int64)
    n = len(a)
    if a.ndim != 1:
        raise ValueError(f"discounted_cumsum takes a 1-d array, found shape {a.shape}")
    if int(lengths.sum()) != n or (lengths < 0).any():
        raise ValueError(f"segment lengths {lengths.tolist()[:8]}... must be >= 0 and sum to {n}")
    if n == 0:
        return a
    b = np.full(n, float(discount), dtype=np.float64)
    b[np.cumsum(lengths[lengths > 0]) - 1] = 0.0  # no carry across a segment's end
    longest = int(lengths.max())
    d = 1
    while d < longest:
        a[:-d] += b[:-d] * a[d:]
        b[:-d] = b[:-d] * b[d:]
        b[-d:] = 0.0
        d *= 2
    return a


def _check_unit(name: str, value: Any) -> float:
    unit: float = check_float(name, value, 0.0, 1.0)
    return unit


def _gamma(own: float | None, ctx: ConnectorContext) -> float:
    return own if own is not None else _check_unit("context gamma", ctx.gamma)


def _check_dtype(value: Any) -> np.dtype:
    try:
        dt: np.dtype = np.dtype(value)
    except TypeError:
        raise ConfigError(f"dtype must be a numpy float dtype, found {value!r}") from None
    if dt.kind != "f":
        raise ConfigError(f"dtype must be a float dtype, found {dt}")
    return dt


def _with_columns(columns: EpisodeColumns, new: dict[str, np.ndarray]) -> EpisodeColumns:
    """``columns`` with per-step ``new`` columns added to its extras (replacing one of the same
    name in its place). Each new column holds the steps of every episode in table order
    (``step_rows()``); it is laid out like the table's step arrays (one row per row of
    ``actions``, zero where no episode of the table has a step)."""
    rows = columns.step_rows()
    total = len(columns.actions)
    extras = dict(columns.extras)
    for name, flat in new.items():
        if isinstance(rows, slice) and rows.start == 0 and rows.stop == total:
            extras[name] = flat
        else:
            full = np.zeros((total, *flat.shape[1:]), flat.dtype)
            full[rows] = flat
            extras[name] = full
    return replace(columns, extras=extras)


class DiscountedReturns(Connector):
    """Adds ``column`` (default ``returns_to_go``) ``[T]``: ``sum_k gamma**k * r[t + k]`` to the
    episode's recorded end. See the module docstring for fragments and truncation.

    Args:
        gamma: Discount in ``[0, 1]`` (1: undiscounted, as Decision Transformer uses);
            ``None``: the context's ``gamma`` (the run's discount).
        column: Name of the extra column written (overwritten if present).
        incomplete: For episodes neither terminated nor truncated: ``"mark"`` adds
            ``<column>_partial`` (bool ``[T]``, to *every* episode so the buffer sees one set of
            extras; true on the steps of not-done episodes) -- ``"raise"`` raises
            :class:`EpisodeValidationError` naming the episode.
        dtype: Float dtype of the column (computed in float64).
    """

    name = "returns_to_go"
    touches: ClassVar[frozenset[Touches]] = frozenset({"episodes"})

    def __init__(
        self,
        gamma: float | None = None,
        *,
        column: str = "returns_to_go",
        incomplete: Literal["mark", "raise"] = "mark",
        dtype: Any = "float32",
    ) -> None:
        self.gamma = None if gamma is None else _check_unit("gamma", gamma)
        if not isinstance(column, str) or not column:
            raise ConfigError(f"column must be a non-empty string, found {column!r}")
        if incomplete not in ("mark", "raise"):
            raise ConfigError(f"incomplete must be 'mark' or 'raise', found {incomplete!r}")
        self.column = column
        self.incomplete = incomplete
        self.dtype = _check_dtype(dtype)

    @property
    def partial_column(self) -> str:
        """Name of the bool column that marks the steps of episodes not done
        (``incomplete="mark"``)."""
        return self.column + "_partial"

    def __repr__(self) -> str:
        return (
            f"DiscountedReturns(gamma={self.gamma}, column={self.column!r}, "
            f"incomplete={self.incomplete!r})"
        )

    def on_episodes(
        self, columns: EpisodeColumns, ctx: ConnectorContext = DEFAULT_CONTEXT
    ) -> EpisodeColumns:
        """The episodes with the discounted returns column added.

        Args:
            columns: The batch's episodes.
            ctx: The run's context (its ``gamma`` where this connector's is None).

        Returns:
            The same episodes with ``column`` (and ``<column>_partial`` under
            ``incomplete="mark"``) among their extras.

        Raises:
            EpisodeValidationError: a not-done episode under ``incomplete="raise"``.
        """
        if not len(columns):
            return columns
        open_ = ~columns.done
        if self.incomplete == "raise" and open_.any():
            e = int(np.argmax(open_))
            raise EpisodeValidationError(
                f"{self.name}: episode is neither terminated nor truncated, so its "
                f"returns-to-go would be partial (incomplete='raise')",
                Where(episode_id=columns.ids[e], timestep=int(columns.t_end[e])),
                reason="incomplete_episode",
            )
        lengths = columns.length
        rewards = columns.rewards[columns.step_rows()]
        gamma = _gamma(self.gamma, ctx)
        ret = discounted_cumsum(rewards, gamma, lengths).astype(self.dtype, copy=False)
        cols = {self.column: ret}
        if self.incomplete == "mark":
            cols[self.partial_column] = np.repeat(open_, lengths)
        return _with_columns(columns, cols)


class GAE(Connector):
    """Generalized advantage estimates from a per-step value column.

    For an episode of ``T`` steps with values ``V[t]`` (extra ``value_column``, ``[T]`` or
    ``[T, 1]``)::

        V[T]     = 0          if terminated
                 = V[T - 1]   otherwise (truncated, or a not-done fragment: the value of the
                                          final observation is not recorded, the last estimate
                                          stands in for it)
        delta[t] = r[t] + gamma * V[t + 1] - V[t]
        A[t]     = sum_k (gamma * lambda_)**k * delta[t + k]     (to the episode's end)

    Adds ``advantages`` = ``A`` and ``value_targets`` = ``A + V`` (float ``[T]``).

    Args:
        gamma, lambda_: In ``[0, 1]``; ``gamma=None``: the context's ``gamma``.
        value_column: The extra holding value estimates (RLlib records ``vf_preds``).
        missing: When *no* given episode has ``value_column``: ``"raise"`` (a
            :class:`SchemaError`) or ``"skip"`` (episodes pass unchanged, one warning per call).
            Episodes that have it mixed with ones that do not always raise (the buffer needs one
            set of extras).
        advantages, value_targets: Names of the columns written.
        dtype: Float dtype of the written columns (computed in float64).
    """

    name = "gae"
    touches: ClassVar[frozenset[Touches]] = frozenset({"episodes"})

    def __init__(
        self,
        gamma: float | None = None,
        lambda_: float = 0.95,
        *,
        value_column: str = "vf_preds",
        missing: Literal["raise", "skip"] = "raise",
        advantages: str = "advantages",
        value_targets: str = "value_targets",
        dtype: Any = "float32",
    ) -> None:
        self.gamma = None if gamma is None else _check_unit("gamma", gamma)
        self.lambda_ = _check_unit("lambda_", lambda_)
        if missing not in ("raise", "skip"):
            raise ConfigError(f"missing must be 'raise' or 'skip', found {missing!r}")
        for field, v in (
            ("value_column", value_column),
            ("advantages", advantages),
            ("value_targets", value_targets),
        ):
            if not isinstance(v, str) or not v:
                raise ConfigError(f"{field} must be a non-empty string, found {v!r}")
        self.value_column = value_column
        self.missing = missing
        self.advantages = advantages
        self.value_targets = value_targets
        self.dtype = _check_dtype(dtype)

    def __repr__(self) -> str:
        return (
            f"GAE(gamma={self.gamma}, lambda_={self.lambda_}, "
            f"value_column={self.value_column!r}, missing={self.missing!r})"
        )

    def _values(self, columns: EpisodeColumns) -> np.ndarray:
        """The value column's steps of every episode, in table order, as one number each."""
        v = columns.extras[self.value_column]
        if v.ndim == 2 and v.shape[1] == 1:
            v = v[:, 0]
        if v.ndim != 1 or v.dtype.kind not in "iuf":
            raise SchemaError(
                f"{self.name}: value column must hold one number per step ([T] or [T, 1]), "
                f"found {v.dtype}{list(v.shape)}",
                Where(column=self.value_column, episode_id=columns.ids[0]),
            )
        return v[columns.step_rows()]

    def on_episodes(
        self, columns: EpisodeColumns, ctx: ConnectorContext = DEFAULT_CONTEXT
    ) -> EpisodeColumns:
        """The episodes with ``advantages`` and ``value_targets`` added.

        Args:
            columns: The batch's episodes.
            ctx: The run's context (its ``gamma`` where this connector's is None).

        Returns:
            The same episodes with the two columns among their extras, or unchanged when they
            have no value column and ``missing="skip"``.

        Raises:
            SchemaError: no value column (``missing="raise"``), or one that is not one number
                per step.
        """
        if not len(columns):
            return columns
        if self.value_column not in columns.extras:
            msg = (
                f"{self.name}: episodes have no value column {self.value_column!r} (extras: "
                f"{sorted(columns.extras)}); record value estimates or set value_column"
            )
            if self.missing == "skip":
                warnings.warn(msg + "; advantages are not computed", stacklevel=2)
                return columns
            raise SchemaError(msg, Where(column=self.value_column, episode_id=columns.ids[0]))
        lengths = columns.length
        rewards = columns.rewards[columns.step_rows()].astype(np.float64)
        values = self._values(columns).astype(np.float64)
        nonempty = lengths > 0
        ends = np.cumsum(lengths)[nonempty] - 1
        v_next = np.empty_like(values)
        v_next[:-1] = values[1:]
        v_next[ends] = np.where(columns.terminated[nonempty], 0.0, values[ends])
        gamma = _gamma(self.gamma, ctx)
        delta = rewards + gamma * v_next - values
        adv = discounted_cumsum(delta, gamma * self.lambda_, lengths)
        targets = (adv + values).astype(self.dtype, copy=False)
        adv = adv.astype(self.dtype, copy=False)
        return _with_columns(columns, {self.advantages: adv, self.value_targets: targets})
