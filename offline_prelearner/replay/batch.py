"""SampleBatch and MultiAgentBatch: what a buffer hands to a learner.

A :class:`SampleBatch` is a small dict-like of numpy columns that share their first axis (the
rows: one per sampled transition or sequence). ``batch["obs"]`` is a column, ``len(batch)`` is the
number of rows (not of columns -- iterate ``batch.keys()`` for those), ``batch[2:5]`` is a row slice
whose columns are views. A :class:`MultiAgentBatch` maps module ids to SampleBatches and counts
the env steps they came from.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView
from typing import Any

import numpy as np

from ..episodes.observations import nest

__all__ = ["MODULE_ID", "MultiAgentBatch", "SampleBatch"]

MODULE_ID = "module_id"


def _numpy_columns(rows: Any) -> dict[str, np.ndarray]:
    """A dict of numpy columns from a dict, an Arrow table or a pandas DataFrame."""
    if isinstance(rows, Mapping):
        return {k: np.asarray(v) for k, v in rows.items()}
    if hasattr(rows, "column_names") and hasattr(rows, "column"):  # pyarrow.Table
        from ..io.arrow_numpy import column_to_numpy

        return {name: column_to_numpy(rows, name) for name in rows.column_names}
    if hasattr(rows, "columns") and hasattr(rows, "to_numpy"):  # pandas.DataFrame
        return {
            str(c): np.stack(rows[c].to_numpy())
            if rows[c].dtype == object and len(rows) and isinstance(rows[c].iloc[0], np.ndarray)
            else rows[c].to_numpy()
            for c in rows.columns
        }
    raise TypeError(
        f"rows must be a dict of arrays, an Arrow table or a DataFrame, not {type(rows)}"
    )


class SampleBatch:
    """Numpy columns with a common number of rows.

    Columns are checked to agree on their row count when set. Everything that is not a column
    (e.g. the sampler's info) lives in ``info``.

    Args:
        columns: Columns by name (array-likes, converted with ``np.asarray``).
        **kw: More columns, by keyword.

    Raises:
        ValueError: A column is a scalar, or its row count differs from the others'.
    """

    __slots__ = ("_cols", "info")

    def __init__(self, columns: Mapping[str, Any] | None = None, **kw: Any) -> None:
        self._cols: dict[str, np.ndarray] = {}
        self.info: dict[str, Any] = {}
        for k, v in {**(columns or {}), **kw}.items():
            self[k] = v

    @classmethod
    def _trusted(cls, columns: dict[str, np.ndarray]) -> SampleBatch:
        """Wraps columns already known to be numpy arrays of one row count (hot path, no checks)."""
        out = cls.__new__(cls)
        out._cols = columns
        out.info = {}
        return out

    def set_trusted(self, key: str, value: np.ndarray) -> None:
        """Sets a column known to be a numpy array with the right row count (hot path).

        Args:
            key: The column name.
            value: A numpy array with the batch's row count on axis 0 (not checked).
        """
        self._cols[key] = value

    # ------------------------------------------------------------------ dict-like
    def __getitem__(self, key: str | slice) -> Any:
        if isinstance(key, slice):
            return SampleBatch._trusted({k: v[key] for k, v in self._cols.items()})
        return self._cols[key]

    def __setitem__(self, key: str, value: Any) -> None:
        arr = np.asarray(value)
        if arr.ndim == 0:
            raise ValueError(f"column {key!r} must have a row axis, got a scalar")
        if self._cols:
            n = len(self)
            if len(arr) != n:
                raise ValueError(f"column {key!r} has {len(arr)} rows, the batch has {n}")
        self._cols[key] = arr

    def __delitem__(self, key: str) -> None:
        del self._cols[key]

    def __contains__(self, key: object) -> bool:
        return key in self._cols

    def __iter__(self) -> Iterator[str]:
        return iter(self._cols)

    def __len__(self) -> int:
        """Number of rows (0 for a batch without columns)."""
        for v in self._cols.values():
            return len(v)
        return 0

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SampleBatch):
            return NotImplemented
        return self._cols.keys() == other._cols.keys() and all(
            np.array_equal(v, other._cols[k]) for k, v in self._cols.items()
        )

    __hash__ = None  # type: ignore[assignment]

    def keys(self) -> KeysView[str]:
        """The column names."""
        return self._cols.keys()

    def values(self) -> ValuesView[np.ndarray]:
        """The column arrays."""
        return self._cols.values()

    def items(self) -> ItemsView[str, np.ndarray]:
        """``(name, array)`` pairs of the columns."""
        return self._cols.items()

    def get(self, key: str, default: Any = None) -> Any:
        """Column ``key``, or ``default`` when there is none.

        Args:
            key: The column name.
            default: What to return when the batch has no such column.

        Returns:
            The column array (not a copy), or ``default``.
        """
        return self._cols.get(key, default)

    def to_dict(self) -> dict[str, np.ndarray]:
        """The columns as a plain dict (the arrays themselves, not copies)."""
        return dict(self._cols)

    @property
    def num_rows(self) -> int:
        """Number of rows (as ``len``)."""
        return len(self)

    def __repr__(self) -> str:
        cols = ", ".join(f"{k}={v.dtype}{list(v.shape)}" for k, v in self._cols.items())
        return f"SampleBatch({len(self)} rows: {cols})"

    def to_rows(self, module_id: Any) -> dict[str, np.ndarray]:
        """The columns plus a ``module_id`` column: one Ray Data / Arrow row per sample.

        Args:
            module_id: The module the rows train; stored as its ``str`` in every row.

        Returns:
            A new dict of the column arrays (not copies) plus an object ``module_id`` column.
        """
        out = dict(self._cols)
        ids = np.empty(len(self), dtype=object)
        ids.fill(str(module_id))  # one str object shared (np.full makes one per row)
        out[MODULE_ID] = ids
        return out

    def nested(self, name: str = "obs") -> dict[str, Any]:
        """A composite observation column rebuilt as nested dicts of arrays (the learner side).

        Composite observations travel as one column per leaf, ``obs.desired_goal``,
        ``obs.a.b`` (see :mod:`offline_prelearner.episodes.observations`);
        ``batch.nested("new_obs")`` gives ``{"desired_goal": ..., "a": {"b": ...}}``, each leaf
        ``[rows, ...]`` (views, no copy; Tuple positions come back as keys ``"0"``, ``"1"``).
        A plain ``name`` column comes back as is.

        Args:
            name: The observation column: ``"obs"`` (default), ``"new_obs"``, or another
                prefix of ``<name>.<leaf>`` columns.

        Returns:
            The nested dict of leaf arrays, or the plain column's array.

        Raises:
            KeyError: neither a ``name`` column nor ``name.<leaf>`` columns exist.
        """
        if name in self._cols:
            return self._cols[name]  # type: ignore[return-value]
        prefix = name + "."
        flat = {k[len(prefix) :]: v for k, v in self._cols.items() if k.startswith(prefix)}
        if not flat:
            raise KeyError(
                f"no column {name!r} and no {prefix}<leaf> columns: {sorted(self._cols)}"
            )
        return nest(flat)

    # ------------------------------------------------------------------ joining
    @staticmethod
    def concat(batches: Iterable[SampleBatch]) -> SampleBatch:
        """Rows of several batches with the same columns, in order (one copy per column).

        Args:
            batches: Batches with the same column names (any order of them).

        Returns:
            One batch of all their rows (columns in the first batch's order); an empty batch
            when there are none. ``info`` is not carried over.

        Raises:
            ValueError: two batches have different columns.
        """
        bs = list(batches)
        if not bs:
            return SampleBatch()
        keys = list(bs[0].keys())
        for b in bs[1:]:
            if list(b.keys()) != keys and set(b.keys()) != set(keys):
                raise ValueError(
                    f"cannot concat batches with columns {sorted(keys)} and {sorted(b.keys())}"
                )
        return SampleBatch._trusted({k: np.concatenate([b[k] for b in bs]) for k in keys})


class MultiAgentBatch:
    """``{module_id: SampleBatch}`` plus the number of env steps the samples came from.

    Args:
        policy_batches: ``{module_id: SampleBatch}`` (copied into a new dict).
        env_steps: Env steps the samples came from.
    """

    __slots__ = ("env_steps", "policy_batches")

    def __init__(self, policy_batches: Mapping[Any, SampleBatch], env_steps: int) -> None:
        self.policy_batches = dict(policy_batches)
        self.env_steps = int(env_steps)

    def __getitem__(self, module_id: Any) -> SampleBatch:
        batch: SampleBatch = self.policy_batches[module_id]
        return batch

    def __contains__(self, module_id: object) -> bool:
        return module_id in self.policy_batches

    def __iter__(self) -> Iterator[Any]:
        return iter(self.policy_batches)

    def __len__(self) -> int:
        """Number of modules."""
        return len(self.policy_batches)

    @classmethod
    def from_rows(cls, rows: Any) -> MultiAgentBatch:
        """Rebuilds ``{module_id: SampleBatch}`` from output rows (the learner side).

        ``rows``: a dict of numpy columns (Ray Data's ``batch_format="numpy"``), an Arrow table, or
        a pandas DataFrame, with a ``module_id`` column. ``env_steps`` is the number of rows.

        Args:
            rows: The output rows, in one of the formats above.

        Returns:
            One :class:`SampleBatch` per module id (as str), ``env_steps`` the number of rows.

        Raises:
            KeyError: the rows have no ``module_id`` column.
        """
        cols = _numpy_columns(rows)
        if MODULE_ID not in cols:
            raise KeyError(f"rows have no {MODULE_ID!r} column; columns: {sorted(cols)}")
        mids = np.asarray(cols.pop(MODULE_ID))
        n = len(mids)
        if n == 0:
            return cls({}, env_steps=0)
        uniq, inverse = np.unique(mids.astype(str), return_inverse=True)
        if len(uniq) == 1:
            return cls({str(uniq[0]): SampleBatch(cols)}, env_steps=n)
        out = {}
        for k, m in enumerate(uniq):
            sel = np.flatnonzero(inverse == k)
            out[str(m)] = SampleBatch({c: v[sel] for c, v in cols.items()})
        return cls(out, env_steps=n)

    def agent_steps(self) -> int:
        """Rows summed over modules."""
        return sum(len(b) for b in self.policy_batches.values())

    def __repr__(self) -> str:
        mods = ", ".join(f"{m!r}: {len(b)} rows" for m, b in self.policy_batches.items())
        return f"MultiAgentBatch(env_steps={self.env_steps}, {{{mods}}})"
