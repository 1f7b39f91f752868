"""What every contract check shares: the error it raises and the comparisons it makes.

:class:`ContractError` is an ``AssertionError`` saying what was expected and what was found;
:func:`require` raises it. The comparisons treat NaN as equal to NaN and a dtype change as a
difference, so "the same output" means the same bytes a learner would see.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ContractError

__all__ = ["ContractError", "diff_columns", "pickle_roundtrip", "require", "same_array", "snapshot"]


def require(ok: Any, msg: str) -> None:
    """Raises :class:`ContractError` with ``msg`` unless ``ok`` is true."""
    if not ok:
        raise ContractError(msg)


def pickle_roundtrip(obj: Any) -> Any:
    """Pickles and unpickles an object this process just built (what Ray does to ship it).

    These bytes never come from a file: the round trip tests picklability, it does not read data.
    """
    return pickle.Unpickler(io.BytesIO(pickle.dumps(obj))).load()


def same_array(a: Any, b: Any) -> bool:
    """Whether two arrays are equal in shape, dtype and values (NaN equal to NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fc":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def diff_columns(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Names of columns that differ (or exist on one side only)."""
    return sorted(
        k for k in set(a) | set(b) if k not in a or k not in b or not same_array(a[k], b[k])
    )


def snapshot(batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A copy of every column, to compare with after a call that must not change them."""
    return {k: np.array(v, copy=True) for k, v in batch.items()}
