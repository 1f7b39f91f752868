"""Duplicate rows inside one batch of the rows reader.

Both copies of an episode can land in one batch: two files holding the same episode merged by
Ray Data into one batch, a file written (or listed) twice. The rows reader drops the extra copies
before it builds episodes and counts them as duplicates, as the
:class:`~offline_prelearner.episodes.dedupe.Deduplicator` counts copies that arrive in separate
batches. Two rows are *copies* when every column the episode is built from is equal: obs, new_obs,
actions, rewards, both flags, every extra column, module id and infos (columns the schema ignores
do not count). Values compare as in :func:`~.frame.rows_differ` (bytes first; NaN equals NaN).

* **With a ``t`` column**, a step is ``(key, t)``. Rows of one step are compared with the step's
  first row in batch order: copies are dropped, the first row is kept. A row that differs from it
  stays, and the episode is rejected later for its repeated ``t`` (a real conflict).
* **Without ``t``** (row order is step order) a copy is recognised only as a whole repetition:
  the first row of a key (in batch order) that carries a done flag but is not the key's last row
  ends the *first copy* (``b`` rows); the key's rows are copies when every row ``i >= b`` equals
  row ``i mod b`` (one or more full copies back to back, possibly ending in a partial one, e.g.
  a file appended twice). Anything else -- a copy of a not-done fragment (no done flag marks
  where it repeats), a copy that differs anywhere, rows of another episode between a done flag
  and the key's end -- is kept and fails the reader's checks as before (``done_mid_episode``,
  ``discontinuous``).

``episodes_duplicate`` counts copies: per key, the largest number of dropped copies of any one
of its steps (a whole episode written three times: 2; one repeated row: 1), which is how many
episodes the Deduplicator would have dropped had each copy arrived on its own.

Cost on clean data: with ``t``, one gather and compare of ``t`` in grouped order (no repeats:
done); without ``t``, one pass over the done flags (no done flag before a key's last row: done).
Content is compared only for the candidate rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .frame import Groups, rows_differ

__all__ = ["Duplicates", "find_duplicates"]


@dataclass(frozen=True)
class Duplicates:
    """Rows to drop (frame rows, ascending) and the number of episode copies they make up."""

    rows: np.ndarray
    episodes: int


def find_duplicates(
    gr: Groups,
    content: Sequence[np.ndarray],
    done: np.ndarray | None,
    t: np.ndarray | None,
    infos: Sequence[Any] | None = None,
) -> Duplicates | None:
    """The duplicate rows of one grouped frame (see the module docstring), or None if none.

    ``content`` holds the frame columns (frame row order) that make two rows copies; ``t`` the
    step per frame row, or None; ``done`` (needed without ``t``) is ``terminated | truncated``
    per frame row; ``infos`` the per-row Python values, if mapped.

    Args:
        gr: The frame's episodes (grouped order and bounds).
        content: Frame columns (frame row order) whose values make two rows copies: obs,
            actions, rewards...
        done: bool ``[m]`` ``terminated | truncated`` per frame row; may be None only when
            ``t`` is given.
        t: int ``[m]`` step per frame row; None detects copies by repeated runs of rows.
        infos: One Python value per frame row, compared too; None when infos are not mapped.

    Returns:
        The frame rows to drop and how many episode copies they make up, or None when there
        are none (or fewer than two rows).

    Raises:
        ValueError: Neither ``t`` nor ``done`` is given.
    """
    if len(gr.ep_of) < 2:
        return None
    if t is not None:
        return _with_t(gr, content, gr.g(t), infos)
    if done is None:
        raise ValueError("find_duplicates without t needs the done flags")
    return _without_t(gr, content, gr.g(done), infos)


def _with_t(
    gr: Groups, content: Sequence[np.ndarray], ts: np.ndarray, infos: Sequence[Any] | None
) -> Duplicates | None:
    repeat = gr.same_next & (ts[1:] == ts[:-1])  # positions p + 1 repeat p's step
    if not repeat.any():
        return None
    m = len(ts)
    # A stable order (order_rows sorts stably by (key, t)): each step's rows are in batch order.
    pos = np.flatnonzero(repeat) + 1
    new_step = np.ones(m, bool)
    new_step[1:] = ~repeat
    step_first = np.maximum.accumulate(np.where(new_step, np.arange(m), 0))
    src = step_first[pos]
    copy = ~_differ(content, infos, _frame(gr, pos), _frame(gr, src))
    pos, src = pos[copy], src[copy]
    if len(pos) == 0:
        return None
    # copies per episode: the most dropped rows of any one step of it
    steps, per_step = np.unique(src, return_counts=True)
    most = np.zeros(len(gr.starts), np.int64)
    np.maximum.at(most, gr.ep_of[steps], per_step)
    return Duplicates(np.sort(_frame(gr, pos)), int(most.sum()))


def _without_t(
    gr: Groups, content: Sequence[np.ndarray], dn: np.ndarray, infos: Sequence[Any] | None
) -> Duplicates | None:
    early = dn.copy()
    early[gr.ends - 1] = False  # a done flag before its key's last row
    mid = np.flatnonzero(early)
    if len(mid) == 0:
        return None
    eps, first = np.unique(gr.ep_of[mid], return_index=True)
    period = mid[first] - gr.starts[eps] + 1  # rows of the first copy
    # Candidates: every row after the first copy of those keys, each against its original.
    n_after = gr.ends[eps] - gr.starts[eps] - period
    ep_of = np.repeat(np.arange(len(eps)), n_after)
    offset = np.arange(len(ep_of)) - np.repeat(np.cumsum(n_after) - n_after, n_after)
    pos = gr.starts[eps][ep_of] + period[ep_of] + offset
    src = gr.starts[eps][ep_of] + offset % period[ep_of]
    differs = _differ(content, infos, _frame(gr, pos), _frame(gr, src))
    bad = np.zeros(len(eps), bool)
    bad[ep_of[differs]] = True  # one differing row: not a copy, the key is left alone
    keep = ~bad[ep_of]
    if not keep.any():
        return None
    copies = -(-n_after[~bad] // period[~bad])  # ceil: a partial copy counts as one
    return Duplicates(np.sort(_frame(gr, pos[keep])), int(copies.sum()))


def _frame(gr: Groups, positions: np.ndarray) -> np.ndarray:
    """Frame rows of grouped positions."""
    return positions if gr.perm is None else gr.perm[positions]


def _differ(
    content: Sequence[np.ndarray], infos: Sequence[Any] | None, ia: np.ndarray, ib: np.ndarray
) -> np.ndarray:
    """Per pair: does frame row ``ia[i]`` differ from row ``ib[i]`` in any content column?"""
    out = np.zeros(len(ia), bool)
    for col in content:
        if col.dtype == object:
            out |= _cells_differ(col[ia], col[ib])
        else:
            out |= rows_differ(col, col, ia, ib)
    if infos is not None:  # Python objects: compared per candidate row by nature
        out |= np.fromiter(
            (not _same(infos[i], infos[j]) for i, j in zip(ia.tolist(), ib.tolist(), strict=True)),
            bool,
            count=len(ia),
        )
    return out


def _cells_differ(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Object cells (strings, ids, nested values) compared pairwise: ``!=`` on the whole column,
    then the cells it calls different (or cannot compare) once more, one by one (NaN, arrays)."""
    ne = None
    if x.ndim == 1:
        try:
            ne = np.asarray(x != y)
        except (ValueError, TypeError):
            ne = None
    if ne is None or ne.dtype != bool or ne.shape != (len(x),):
        ne = np.ones(len(x), bool)
    idx = np.flatnonzero(ne)
    ne[idx] = [not _same(x[i], y[i]) for i in idx.tolist()]  # differing cells only
    return ne


def _same(a: Any, b: Any) -> bool:
    """Deep equality of Python values that may hold numpy arrays (NaN equals NaN)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype.kind != b.dtype.kind:
            return False
        if a.dtype == object:
            return all(_same(u, v) for u, v in zip(a.ravel(), b.ravel(), strict=True))
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    try:
        return bool(a == b)
    except (ValueError, TypeError):
        return False
