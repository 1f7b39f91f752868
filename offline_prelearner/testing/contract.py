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
    """Raises :class:`ContractError` with ``msg`` unless ``ok`` is true.

    Args:
        ok: The condition, taken by its truth value (an empty list fails).
        msg: What was expected and what was found, naming the output, column or module.

    Raises:
        ContractError: ``ok`` is false.
    """
    if not ok:
        raise ContractError(msg)


def pickle_roundtrip(obj: Any) -> Any:
    """Pickles and unpickles an object this process just built (what Ray does to ship it).

    These bytes never come from a file: the round trip tests picklability, it does not read data.

    Args:
        obj: Any object (a class pickles by reference: its module must be importable).

    Returns:
        The unpickled copy (for a class, the class itself).

    Raises:
        pickle.PicklingError: ``obj`` does not pickle (other errors pass through too, e.g.
            ``AttributeError`` for a local class or lambda).
    """
    return pickle.Unpickler(io.BytesIO(pickle.dumps(obj))).load()


def same_array(a: Any, b: Any) -> bool:
    """Whether two arrays are equal in shape, dtype and values (NaN equal to NaN).

    Args:
        a: An array or anything :func:`numpy.asarray` takes.
        b: The same for the other side.

    Returns:
        True when shapes, dtypes and every value match; NaN counts as equal only in float and
        complex arrays.
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fc":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def diff_columns(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Names of columns that differ (or exist on one side only).

    Args:
        a: Column name to array, e.g. one output batch.
        b: The batch to compare with.

    Returns:
        The sorted names whose arrays are not :func:`same_array`, or that only one side has;
        empty when the batches are the same.
    """
    return sorted(
        k for k in set(a) | set(b) if k not in a or k not in b or not same_array(a[k], b[k])
    )


def snapshot(batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A copy of every column, to compare with after a call that must not change them.

    Args:
        batch: Column name to array (or anything :func:`numpy.array` copies).

    Returns:
        A new dict of independent numpy copies, in the same order.
    """
    return {k: np.array(v, copy=True) for k, v in batch.items()}
