"""Frames: a batch of rows behind one interface, and the operations that turn its rows into
episodes -- columns, keys, grouping, verdicts.

* :class:`ColumnBatch` -- an Arrow table or a dict of numpy columns behind one interface;
* :func:`factorize` -- dense codes per row for id columns (hash-based, no sort);
* :func:`rows_differ` -- per-row equality of two (gathered) arrays, bytes first;
* :func:`order_rows` / :class:`Groups` -- the permutation and bounds that turn rows into episodes;
* :class:`Verdicts` -- the first error of each bad episode (raised at once under ``raise``);
* :func:`assemble_observations` -- every episode's ``T + 1`` observations in one scatter.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ....errors import DataError, EpisodeValidationError, SchemaError, Where
from ...arrow_numpy import column_to_numpy, from_numpy, to_numpy

__all__ = [
    "ColumnBatch",
    "Groups",
    "Keys",
    "Verdicts",
    "assemble_observations",
    "factorize",
    "order_rows",
    "rows_differ",
]


@dataclass
class Keys:
    """Episode keys of a batch: a dense code per row, and per code the episode and agent id."""

    codes: np.ndarray
    ids: list[Any]
    agents: list[Any]  # None where rows carry no agent id


# ---------------------------------------------------------------------------------------------
class ColumnBatch:
    """One batch as named columns: an Arrow table or a mapping of numpy arrays.

    These are Ray Data's ``"pyarrow"`` and ``"numpy"`` batch formats. Converted columns are
    cached; :meth:`filter` gives a new batch (with an empty cache).

    Args:
        batch: An Arrow table or record batch, or a mapping of column name to values (numpy
            arrays, Arrow arrays or sequences; ragged nested lists are kept as object cells),
            all of one length.
        source: The file the batch came from, named in errors; None when unknown.

    Raises:
        SchemaError: ``batch`` is neither, or its columns differ in length (reason
            ``bad_batch``).
    """

    def __init__(self, batch: Any, source: str | None = None) -> None:
        self.source = source
        self._cache: dict[str, np.ndarray] = {}
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        if isinstance(batch, pa.Table):
            self._table: pa.Table | None = batch
            self._arrays: dict[str, np.ndarray] = {}
            self.names: list[str] = list(batch.column_names)
            self.num_rows: int = batch.num_rows
            return
        if not isinstance(batch, Mapping):
            raise SchemaError(
                f"a batch must be a pyarrow Table or a dict of numpy arrays, found "
                f"{type(batch).__name__}",
                Where(file=source),
                reason="bad_batch",
            )
        self._table = None
        self._arrays = {str(k): _as_array(v) for k, v in batch.items()}
        self.names = list(self._arrays)
        lengths = {k: len(v) for k, v in self._arrays.items()}
        if len(set(lengths.values())) > 1:
            raise SchemaError(
                f"columns of a batch differ in length: {lengths}",
                Where(file=source),
                reason="bad_batch",
            )
        self.num_rows = next(iter(lengths.values()), 0)

    def raw(self, name: str) -> pa.ChunkedArray | np.ndarray:
        """The column as given (Arrow or numpy), unconverted.

        Args:
            name: A column of the batch (:attr:`names`); another name raises ``KeyError``.

        Returns:
            The Arrow chunked array of a table batch, or the numpy array of a dict batch.
        """
        return self._table.column(name) if self._table is not None else self._arrays[name]

    def to_numpy(self, name: str) -> np.ndarray:
        """The column through :func:`to_numpy` (cached).

        Args:
            name: A column of the batch (:attr:`names`).

        Returns:
            ``[rows, *step_shape]`` numpy values (a struct column as a record array of its
            leaves); the same array on every call.

        Raises:
            ColumnValueError: The column cannot be converted (nulls, ragged rows, a bad type),
                naming the column and row.
        """
        if name not in self._cache:
            if self._table is not None:
                self._cache[name] = column_to_numpy(self._table, name, self.source)
            else:
                self._cache[name] = to_numpy(self._arrays[name], name, self.source)
        return self._cache[name]

    def cells(self, name: str) -> np.ndarray:
        """The column's cells as an object array (blobs to decode, Python values).

        Args:
            name: A column of the batch (:attr:`names`).

        Returns:
            ``[rows]`` numpy array of the cells as Arrow hands them over (bytes, str, Python
            values); a dict batch's column as given.
        """
        if self._table is None:
            return self._arrays[name]
        col = self._table.column(name)
        if col.num_chunks == 1:
            return np.asarray(col.chunk(0).to_numpy(zero_copy_only=False))
        return np.asarray(col.to_numpy())

    def pylist(self, name: str) -> list[Any]:
        """The column as Python values (for per-row objects like infos).

        Args:
            name: A column of the batch (:attr:`names`).

        Returns:
            One Python value per row (dicts for struct cells, None for nulls).
        """
        raw = self.raw(name)
        return raw.to_pylist() if isinstance(raw, pa.ChunkedArray) else list(raw)

    def filter(self, mask: np.ndarray) -> ColumnBatch:
        """The rows where ``mask`` is true, as a new batch.

        Args:
            mask: bool ``[num_rows]``.

        Returns:
            A batch of the kept rows in order, with the same ``source`` and an empty cache.
        """
        if self._table is not None:
            return ColumnBatch(self._table.filter(pa.array(mask)), self.source)
        return ColumnBatch({k: v[mask] for k, v in self._arrays.items()}, self.source)

    def take(self, indices: np.ndarray) -> pa.Table:
        """Rows as an Arrow table (payload of rejected rows).

        Args:
            indices: Integer row numbers of the batch, in the order wanted.

        Returns:
            Those rows with every column, as an Arrow table (a dict batch converted).
        """
        if self._table is not None:
            return self._table.take(pa.array(indices, pa.int64()))
        return pa.table({k: from_numpy(v[indices]) for k, v in self._arrays.items()})


def _as_array(values: Any) -> np.ndarray:
    if isinstance(values, np.ndarray):
        return values
    if isinstance(values, pa.ChunkedArray | pa.Array):
        return to_numpy(values, "?")
    try:
        return np.asarray(values)
    except ValueError:  # ragged nested lists: keep the cells, stacking reports the row
        out = np.empty(len(values), dtype=object)
        for i, v in enumerate(values):
            out[i] = v
        return out


def factorize(values: pa.ChunkedArray | pa.Array | np.ndarray) -> tuple[np.ndarray, list[Any]]:
    """Dense int64 codes per row (in order of first appearance) and the distinct values.

    Nulls are a value of their own (``None``); so is NaN in numpy input, which is how Ray's
    ``"numpy"`` batch format hands over an all-null column. Hash-based (Arrow), no sort.

    Args:
        values: One id column, ``[rows]`` of scalars (Arrow or numpy; object ids Arrow cannot
            type are hashed in Python).

    Returns:
        ``(codes, distinct)``: int64 ``[rows]`` codes into ``distinct``, the distinct values
        as Python objects in order of first appearance.

    Raises:
        SchemaError: A numpy column that is not 1-D, or an Arrow type that cannot be
            dictionary-encoded (reason ``bad_type``).
    """
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise SchemaError(
                f"an id column must hold scalars, found shape {values.shape[1:]}", reason="bad_type"
            )
        try:
            values = pa.array(values, from_pandas=True)  # NaN -> null
        except (pa.ArrowException, TypeError, ValueError):
            return _factorize_py(values)
    if isinstance(values, pa.ChunkedArray):
        values = values.chunk(0) if values.num_chunks == 1 else values.combine_chunks()
    if isinstance(values.type, pa.ExtensionType):
        values = values.storage
    if pa.types.is_null(values.type):
        return np.zeros(len(values), np.int64), [None] if len(values) else []
    try:
        enc = pc.dictionary_encode(values, null_encoding="encode")
    except pa.ArrowException as e:
        raise SchemaError(
            f"an id column of type {values.type} cannot be grouped: {e}", reason="bad_type"
        ) from None
    codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return codes, enc.dictionary.to_pylist()


def _factorize_py(values: np.ndarray) -> tuple[np.ndarray, list[Any]]:
    """Fallback for object ids Arrow cannot type (mixed types): one dict lookup per row."""
    table: dict[Any, int] = {}
    codes = np.fromiter(
        (table.setdefault(v, len(table)) for v in values.tolist()), np.int64, count=len(values)
    )
    return codes, list(table)


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def rows_differ(
    a: np.ndarray,
    b: np.ndarray,
    ia: np.ndarray | None = None,
    ib: np.ndarray | None = None,
    where: np.ndarray | None = None,
) -> np.ndarray:
    """Per ``i``: does row ``a[ia[i]]`` differ in value from ``b[ib[i]]`` (NaN == NaN, 0 == -0)?

    ``ia`` / ``ib`` default to all rows in order (then both sides are read as views, no copy).
    Only rows where ``where`` (bool, one per ``i``) is true are compared; the others come out
    False. Rows are compared as bytes first (a wide unsigned integer view, in cache-sized chunks
    into one reused buffer) and only rows whose bytes differ are compared again by value.

    Args:
        a: ``[n_a, *shape]`` values, one row per step.
        b: ``[n_b, *shape_b]`` values; rows of another step shape always differ, rows of
            another dtype are compared by value.
        ia: Integer indices into ``a``, one per comparison (all in range); None compares
            ``a``'s rows in order.
        ib: The same for ``b``; with ``ia`` None, the first ``len(a)`` rows of ``b``.
        where: bool, one per comparison; None compares all.

    Returns:
        bool ``[k]`` (k = ``len(ia)``, or ``len(a)``): True where the rows differ.
    """
    k = len(a) if ia is None else len(ia)
    out = np.zeros(k, dtype=bool)
    if k == 0:
        return out
    if a.shape[1:] != b.shape[1:]:
        out[:] = True  # rows of different shapes differ
        return out if where is None else out & where
    if a.dtype != b.dtype:
        out[:] = True  # left to the value comparison below
    else:
        _bytes_differ_into(out, a, b, ia, ib)
    if where is not None:
        out &= where
    idx = np.flatnonzero(out)
    if len(idx):
        x = a[idx] if ia is None else a[ia[idx]]
        y = b[idx] if ib is None else b[ib[idx]]
        ne = x != y
        if x.dtype.kind in "fc" and y.dtype.kind in "fc":
            ne &= ~(np.isnan(x) & np.isnan(y))
        out[idx] = ne.reshape(len(idx), -1).any(axis=1)
    return out


#: Bytes of each side compared per chunk: small enough that the chunk's comparison result stays
#: in cache, large enough that the per-chunk Python overhead is noise.
_CHUNK_BYTES = 1 << 20


def _bytes_differ_into(
    out: np.ndarray, a: np.ndarray, b: np.ndarray, ia: np.ndarray | None, ib: np.ndarray | None
) -> None:
    """``out[i] = bytes of a[ia[i]] != bytes of b[ib[i]]`` (same dtype and row shape)."""
    k = len(out)
    row_bytes = math.prod(a.shape[1:]) * a.dtype.itemsize
    if row_bytes == 0:
        return  # empty rows are all equal
    width = next(w for w in (8, 4, 2, 1) if row_bytes % w == 0)
    words = row_bytes // width
    if words <= 4 and ia is None and ib is None and k * row_bytes <= _CHUNK_BYTES:
        # Small rows (CartPole's 16 bytes), as views: a word at a time, no chunks, no any().
        x, y = _words(a[:k], k, width), _words(b[:k], k, width)
        np.not_equal(x[:, 0], y[:, 0], out=out)
        for j in range(1, words):
            out |= x[:, j] != y[:, j]
        return
    step = max(1, _CHUNK_BYTES // row_bytes)
    ne = np.empty((min(step, k), words), bool)
    take_a, take_b = _chunk_reader(a, ia, step), _chunk_reader(b, ib, step)
    for s in range(0, k, step):
        m = min(step, k - s)
        x, y = take_a(s, m), take_b(s, m)
        r = np.not_equal(_words(x, m, width), _words(y, m, width), out=ne[:m])
        if words % 8 == 0:  # eight flags at a time
            out[s : s + m] = r.view(np.uint64).any(axis=1)
        else:
            out[s : s + m] = r.any(axis=1)


def _chunk_reader(
    a: np.ndarray, ia: np.ndarray | None, step: int
) -> Callable[[int, int], np.ndarray]:
    """Rows ``s:s + m`` of ``a`` (a view), or of ``a[ia]`` gathered into one reused buffer."""
    if ia is None:
        return lambda s, m: a[s : s + m]
    buf = np.empty((min(step, len(ia)), *a.shape[1:]), a.dtype)
    # mode="clip": indices are in range, and "raise" would buffer the output once more.
    return lambda s, m: np.take(a, ia[s : s + m], axis=0, out=buf[:m], mode="clip")


def _words(x: np.ndarray, m: int, width: int) -> np.ndarray:
    """Rows of ``x`` as ``[m, row_bytes // width]`` unsigned ints (a view when contiguous)."""
    x = np.ascontiguousarray(x)
    return x.reshape(m, -1).view(np.uint8).view(_UINT[width])


def order_rows(codes: np.ndarray, t: np.ndarray | None) -> np.ndarray | None:
    """Row permutation grouping episodes (then ordering by ``t``), or None if already so.

    Args:
        codes: int64 ``[rows]`` dense episode codes (:func:`factorize`), all ``>= 0``.
        t: int ``[rows]`` timesteps, or None to keep each episode's rows in input order.

    Returns:
        int64 ``[rows]`` frame rows in grouped order (episodes in order of their smallest code,
        rows by ascending ``t``, stably), or None when the rows are already grouped (and
        strictly increasing in ``t`` within each episode).
    """
    changes = np.count_nonzero(codes[1:] != codes[:-1])
    grouped = changes + 1 == np.count_nonzero(np.bincount(codes))
    if t is None:
        return None if grouped else np.argsort(codes, kind="stable")
    if grouped and bool(np.all((t[1:] > t[:-1]) | (codes[1:] != codes[:-1]))):
        return None
    # Consecutive t (the contract) places every row directly: episode start + (t - first t).
    # O(n), no sort; any gap or repeat makes the placement collide and falls back to a sort.
    counts = np.bincount(codes)
    tmin = np.full(len(counts), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(tmin, codes, t)
    off = t - tmin[codes]
    if bool(np.all(off < counts[codes])):
        pos = (np.cumsum(counts) - counts)[codes] + off
        hit = np.zeros(len(codes), bool)
        hit[pos] = True
        if hit.all():
            perm = np.empty(len(codes), np.int64)
            perm[pos] = np.arange(len(codes), dtype=np.int64)
            return perm
    return np.lexsort((t, codes))


@dataclass
class Groups:
    """The episodes of one frame: the order that groups them, and their bounds.

    Positions ``p`` index rows in grouped order (``perm[p]`` is the frame row, or ``p`` itself
    when the frame is already grouped); episode ``e`` holds positions ``starts[e]:ends[e]``.
    """

    perm: np.ndarray | None
    starts: np.ndarray
    ends: np.ndarray
    ep_of: np.ndarray  # episode of each position
    same_next: np.ndarray  # positions p and p + 1 belong to one episode
    pos_rows: np.ndarray  # batch row of each position
    ids: list[Any]
    agents: list[Any]

    @classmethod
    def of(cls, codes: np.ndarray, t: np.ndarray | None, rows: np.ndarray, keys: Keys) -> Groups:
        """Groups the rows of a frame by episode ``codes`` (in ``t`` order within an episode when
        ``t`` is given); ``rows`` are their batch rows, ``keys`` their ids.

        Args:
            codes: int64 ``[m]`` episode code of each frame row (indices into ``keys.ids``).
            t: int ``[m]`` timesteps, or None to keep input order within an episode.
            rows: int ``[m]`` batch row of each frame row (negative for rows held over from
                an earlier batch, which have none).
            keys: The batch's episode keys: ``ids`` / ``agents`` per code.

        Returns:
            The grouped order and, per episode, its bounds, id and agent id.
        """
        m = len(codes)
        perm = order_rows(codes, t)
        sc = codes if perm is None else codes[perm]
        brk = np.flatnonzero(sc[1:] != sc[:-1]) + 1
        starts = np.concatenate(([0], brk)).astype(np.int64)
        ends = np.concatenate((brk, [m])).astype(np.int64)
        ep_codes = sc[starts].tolist()
        return cls(
            perm=perm,
            starts=starts,
            ends=ends,
            ep_of=np.repeat(np.arange(len(starts)), ends - starts),
            same_next=sc[1:] == sc[:-1],
            pos_rows=rows if perm is None else rows[perm],
            ids=[keys.ids[k] for k in ep_codes],
            agents=[keys.agents[k] for k in ep_codes],
        )

    def g(self, a: np.ndarray) -> np.ndarray:
        """A frame column in grouped order (the column itself when already grouped).

        Args:
            a: ``[m, ...]``, one entry per frame row.

        Returns:
            ``a`` permuted by :attr:`perm` (a copy), or ``a`` itself when :attr:`perm` is None.
        """
        return a if self.perm is None else a[self.perm]

    @property
    def first(self) -> np.ndarray:
        """Frame row of each episode's first position."""
        return self.starts if self.perm is None else self.perm[self.starts]

    @property
    def last(self) -> np.ndarray:
        """Frame row of each episode's last position."""
        return self.ends - 1 if self.perm is None else self.perm[self.ends - 1]


class Verdicts:
    """The first error of each bad episode; raised at once under ``on_invalid="raise"``.

    Args:
        gr: The frame's episodes, which positions and episode numbers refer to.
        source: The file named in errors; None when unknown.
        raise_now: Raise the first error recorded (``on_invalid="raise"``) instead of keeping
            it in :attr:`bad`.
    """

    def __init__(self, gr: Groups, source: str | None, raise_now: bool) -> None:
        self.gr, self.source, self.raise_now = gr, source, raise_now
        self.bad: dict[int, DataError] = {}

    def record(self, e: int, err: DataError) -> None:
        """Keeps the first error of episode ``e``, or raises it at once under
        ``on_invalid="raise"``.

        Args:
            e: The episode's index in the frame (into ``gr.starts``).
            err: What is wrong with it, naming file, column, episode and row.

        Raises:
            DataError: ``err`` itself, when ``raise_now``.
        """
        if self.raise_now:
            raise err
        self.bad.setdefault(e, err)

    def flag(
        self,
        positions: np.ndarray,
        message: str | Callable[[int], str],
        column: str | None,
        ts: np.ndarray | None = None,
        *,
        reason: str,
    ) -> None:
        """Flags the episodes holding ``positions`` (ascending), each at its first position.

        Args:
            positions: int, ascending positions in grouped order; each episode is flagged
                once, at the first of its positions (an episode already bad is left as is).
            message: The error message, or a function of the position that builds it (called
                only for the positions flagged).
            column: The column named in the error; None names none.
            ts: Timestep per position (``[m]``), named in the error; None names none.
            reason: The error's reason code (``"nan_reward"``, ``"discontinuous"``...).

        Raises:
            EpisodeValidationError: The first one built, when ``raise_now``.
        """
        if len(positions) == 0:
            return
        eps, i = np.unique(self.gr.ep_of[positions], return_index=True)
        for e, p in zip(eps.tolist(), positions[i].tolist(), strict=True):
            if e in self.bad:
                continue
            where = Where(
                file=self.source,
                column=column,
                episode_id=self.gr.ids[e],
                row=int(self.gr.pos_rows[p]) if self.gr.pos_rows[p] >= 0 else None,  # < 0: held
                timestep=None if ts is None else int(ts[p]),
            )
            msg = message if isinstance(message, str) else message(p)
            self.record(e, EpisodeValidationError(msg, where, reason=reason))


def assemble_observations(gr: Groups, obs: np.ndarray, new_obs: np.ndarray) -> np.ndarray:
    """Every episode's observations in one array, built with one scatter.

    Episode ``e`` is rows ``starts[e] + e : ends[e] + e + 1``: its rows' obs, then the new_obs
    of its last row.

    Args:
        gr: The frame's episodes.
        obs: ``[m, *obs_shape]`` observation of each frame row (frame order, not grouped).
        new_obs: ``[m, *obs_shape]`` next observation of each frame row; only each episode's
            last row's is used.

    Returns:
        ``[m + episodes, *obs_shape]`` observations, episode after episode, in the common dtype
        of ``obs`` and ``new_obs``.
    """
    m, n_ep = len(gr.ep_of), len(gr.starts)
    out = np.empty((m + n_ep, *obs.shape[1:]), np.result_type(obs, new_obs))
    dest = np.arange(m, dtype=np.int64) + gr.ep_of
    if gr.perm is None:
        out[dest] = obs
    else:
        inv = np.empty(m, np.int64)
        inv[gr.perm] = dest
        out[inv] = obs
    out[gr.ends + np.arange(n_ep)] = new_obs[gr.last]
    return out
