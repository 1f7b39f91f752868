"""Running mean and variance over batches, merged with Chan et al.'s parallel formula.

Each batch contributes its count, mean and (population) variance computed by numpy in float64;
merging two sets of moments is exact up to rounding, so the statistics after any split of the
data into batches equal those of the whole data at once, and statistics gathered by several
workers merge into the statistics of the union (:meth:`RunningMeanStd.merge`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ConfigError, SchemaError, Where

__all__ = ["RunningMeanStd"]


class RunningMeanStd:
    """Per-feature count, mean and population variance; float64 accumulators.

    The feature shape is fixed by the first update (or state); rows of another shape raise
    :class:`SchemaError`.
    """

    __slots__ = ("count", "mean", "var")

    def __init__(self) -> None:
        self.count = 0
        self.mean: np.ndarray | None = None
        self.var: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, ...] | None:
        """Shape of one feature vector, or None before the first update."""
        return None if self.mean is None else self.mean.shape

    def update(self, x: np.ndarray, column: str = "obs") -> None:
        """Adds rows ``x`` to the statistics.

        Args:
            x: Rows of shape ``[N, *feature_shape]``, any numeric dtype (accumulated as float64);
                ``N == 0`` changes nothing. ``feature_shape`` must match earlier updates.
            column: The column the rows come from, named in the error only.

        Raises:
            SchemaError: The rows' feature shape differs from the statistics' shape.
        """
        x = np.asarray(x)
        if len(x) == 0:
            return
        if self.mean is not None and x.shape[1:] != self.mean.shape:
            raise SchemaError(
                f"rows of shape {list(x.shape[1:])} cannot update statistics of shape "
                f"{list(self.mean.shape)}",
                Where(column=column),
            )
        x64 = x.astype(np.float64, copy=False)
        mean = x64.mean(axis=0)
        var = np.square(x64 - mean).mean(axis=0)
        self.merge_moments(len(x), mean, var)

    def merge_moments(self, count: int, mean: np.ndarray, var: np.ndarray) -> None:
        """Merges the moments of another set of ``count`` rows into these (Chan's update).

        Args:
            count: Number of rows the moments summarise; ``<= 0`` changes nothing.
            mean: Their per-feature mean, of the feature shape (cast to float64).
            var: Their per-feature population variance (divided by ``count``), same shape.

        Raises:
            SchemaError: ``mean``'s shape differs from the statistics' shape.
        """
        if count <= 0:
            return
        mean = np.asarray(mean, dtype=np.float64)
        var = np.asarray(var, dtype=np.float64)
        if self.mean is None or self.var is None or self.count == 0:
            self.count, self.mean, self.var = int(count), mean.copy(), var.copy()
            return
        if mean.shape != self.mean.shape:
            raise SchemaError(
                f"cannot merge statistics of shape {list(mean.shape)} into {list(self.mean.shape)}"
            )
        total = self.count + count
        delta = mean - self.mean
        frac = count / total
        m2 = self.var * self.count + var * count + np.square(delta) * (self.count * frac)
        self.mean = self.mean + delta * frac
        self.var = m2 / total
        self.count = total

    def merge(self, other: RunningMeanStd) -> None:
        """Merges another instance's statistics into this one.

        Args:
            other: The statistics to add (left unchanged); an empty one changes nothing.

        Raises:
            SchemaError: ``other``'s feature shape differs from this one's.
        """
        if other.count and other.mean is not None and other.var is not None:
            self.merge_moments(other.count, other.mean, other.var)

    def get_state(self) -> dict[str, Any]:
        """``{"count", "mean", "var"}`` as copies (only ``count`` while empty), for
        :meth:`set_state`."""
        if self.mean is None or self.var is None:
            return {"count": 0}
        return {"count": int(self.count), "mean": self.mean.copy(), "var": self.var.copy()}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restores what :meth:`get_state` returned, replacing the present statistics.

        Args:
            state: ``{"count": int}`` (empty statistics when 0), or ``{"count", "mean", "var"}``
                with ``mean`` and ``var`` array-likes of one shape and ``var >= 0``.

        Raises:
            ConfigError: A key is missing, a value does not convert, ``count < 0``, the shapes
                differ or a variance is negative.
        """
        try:
            count = int(state["count"])
            if count == 0:
                self.count, self.mean, self.var = 0, None, None
                return
            mean = np.array(state["mean"], dtype=np.float64)
            var = np.array(state["var"], dtype=np.float64)
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"bad running-statistics state: {type(e).__name__}: {e}") from None
        if count < 0 or mean.shape != var.shape or (var < 0).any():
            raise ConfigError(
                f"bad running-statistics state: count={count}, mean shape {list(mean.shape)}, "
                f"var shape {list(var.shape)} (must match, var >= 0)"
            )
        self.count, self.mean, self.var = count, mean, var
