"""The learner stream's input: files read where the prelearner runs, in batches of rows.

Ray Data's ``read_parquet -> map_batches`` moves every input byte through the object store: the
read task writes its blocks there, the prelearner's actor maps them back, and batches of
``batch_size`` rows are concatenated from blocks (one more copy). For CartPole rows that costs
little; for pixel rows (56 KB a row) it is most of the job: 7-9k rows/s for the bare
``read_parquet().iter_batches()`` of the 100k-row fast-layout pixel set on 2 cores, against 50-90k
for pyarrow reading the same files in one process. So the learner stream hands each prelearner
actor *file names*: consecutive files in groups of at least a batch (:func:`read_groups`), one
Ray Data task each, dispatched to an actor one at a time and in order; the actor reads them here,
a batch ahead on a thread (:func:`prefetch`: pyarrow decodes without the GIL, so reading the next
batch overlaps the prelearner's work on the current one).

Batches hold about ``batch_size`` rows (:func:`iter_file_batches`): a file of at least half a batch
is cut into equal zero-copy slices nearest that size; smaller files (RLlib's recorder writes many;
a batch each would sample far more often than the data warrants) are gathered into one batch;
whole-file formats (Minari, D4RL: a file is whole episodes) are never cut. Each batch comes with
its file when all its rows are from one file, so the readers' errors name it. A group may name
part of a file (:class:`FilePiece`: runs of its rows), where several actors read rows without
``t`` and an episode's rows are read by the range that owns it
(:mod:`~offline_prelearner.jobs.stream.episode_ranges`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from ..config import DEFAULT_LIMITS, DecodeLimits
from ..errors import ConfigError, DataError, Where
from ..io.formats.minari.dataset import is_minari_file
from ..io.parquet_guard import open_parquet
from ..io.sources import read_table
from ..io.stores import input_file, open_random_access

__all__ = [
    "READ_ROWS",
    "FilePiece",
    "ReadAhead",
    "concat_tables",
    "has_list_cells",
    "iter_file_batches",
    "parquet_chunks",
    "prefetch",
    "read_groups",
]

T = TypeVar("T")

#: No batch size given: a batch per file.
_WHOLE = 1 << 62

#: Rows decoded at a time from a file with list cells (RLlib's ``large_list`` tensors). Parquet
#: decodes those element by element and keeps levels for every element: a whole 5,016-row file of
#: 84x84x4 frames at once (~0.5 GB of levels in new pages) read 4.5-5.8k rows/s, 512 rows at a time
#: 12.1k (in cache). The pieces are joined into the batch (chunks, not copies).
READ_ROWS = 512


@dataclass(frozen=True)
class FilePiece:
    """Part of a file: runs of its rows, read in file order.

    Attributes:
        path: The file.
        runs: ``(start, stop)`` row ranges, sorted and not overlapping.
    """

    path: str
    runs: tuple[tuple[int, int], ...]

    @property
    def rows(self) -> int:
        """How many rows the piece holds."""
        return sum(stop - start for start, stop in self.runs)

    def select(self, chunks: Iterator[pa.Table]) -> Iterator[pa.Table]:
        """The piece's rows out of its file's tables (consecutive, from row 0); stops taking
        tables after its last run, so a piece at a file's head reads only its first tables.

        Args:
            chunks: The file's tables in order, from its row 0 (as :func:`parquet_chunks`
                gives them); their sizes need not match the runs.

        Yields:
            The piece's rows of each table that holds some (runs within one table joined into
            one), in file order.
        """
        runs, i, at = self.runs, 0, 0
        for chunk in chunks:
            if i >= len(runs):
                return
            end = at + chunk.num_rows
            parts = []
            while i < len(runs) and runs[i][0] < end:
                lo, hi = max(runs[i][0], at), min(runs[i][1], end)
                if hi > lo:
                    parts.append(chunk.slice(lo - at, hi - lo))
                if runs[i][1] > end:  # the run goes on in the next table
                    break
                i += 1
            if parts:
                yield parts[0] if len(parts) == 1 else concat_tables(parts)
            at = end


def has_list_cells(schema: pa.Schema) -> bool:
    """Whether any column of ``schema`` holds variable-length lists (Ray's tensor extension
    included, whose storage is ``large_list``).

    Args:
        schema: A file's Arrow schema; only top-level columns are looked at (an extension
            type by its storage type).
    """
    for field in schema:
        t = field.type
        t = t.storage_type if isinstance(t, pa.ExtensionType) else t
        if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
            return True
    return False


def parquet_chunks(
    path: str, step: int, *, use_threads: bool = False, limits: DecodeLimits = DEFAULT_LIMITS
) -> Iterator[pa.Table]:
    """One Parquet file in tables of at most ``step`` rows; an unreadable file, or one whose
    footer claims more than ``limits`` allow (:mod:`~offline_prelearner.io.parquet_guard`), is a
    DataError naming it (``reason="unreadable_file"``). A valid file of zero rows (an empty
    partition, as Spark writes them) gives no tables.

    Args:
        path: The Parquet file's local path or store URI.
        step: The most rows per table (positive; capped at 2**30). A file with list cells is
            decoded :data:`READ_ROWS` at a time and joined into tables of exactly ``step`` rows
            (the last one shorter).
        use_threads: Whether pyarrow decodes a batch's columns on its thread pool.
        limits: The decode bounds the footer is checked against.

    Yields:
        The file's rows in order, in tables of at most ``step`` rows.

    Raises:
        DataError: The file cannot be read, or its footer is over ``limits``.
    """
    try:
        pf = open_parquet(path, limits)
        if pf.metadata.num_rows == 0:
            return
        step = min(step, 1 << 30)
        piece = READ_ROWS if has_list_cells(pf.schema_arrow) else step
        if piece >= step:
            for rb in pf.iter_batches(batch_size=step, use_threads=use_threads):
                yield pa.Table.from_batches([rb])
            return
        held: list[pa.RecordBatch] = []
        n = 0
        for rb in pf.iter_batches(batch_size=piece, use_threads=use_threads):
            held.append(rb)
            n += rb.num_rows
            if n >= step:  # exactly ``step`` rows; the rest starts the next table
                table = pa.Table.from_batches(held)
                yield table.slice(0, step)
                rest = table.slice(step)
                held, n = rest.to_batches(), rest.num_rows
        if n:
            yield pa.Table.from_batches(held)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DataError(
            f"cannot read the file: {msg}", Where(file=path), reason="unreadable_file"
        ) from None


def _file_chunks(
    item: str | FilePiece, step: int, limits: DecodeLimits = DEFAULT_LIMITS
) -> tuple[bool, int, int, Iterator[pa.Table]]:
    """``(whole, rows, size, chunks)``: a file's tables of at most ``size`` rows, where ``size``
    cuts a file of at least half a batch into equal batches nearest ``step`` rows; ``whole`` for
    whole-file formats (one table, never cut). A piece: its rows only, batched as a file of
    that many rows."""
    if isinstance(item, FilePiece):
        path, rows = item.path, item.rows
        size = _batch_rows(rows, step)
        if path.endswith((".parquet", ".pq")) and not is_minari_file(path):
            # Decoded in tables no longer than the piece's reach: a file's head (the rows of an
            # episode handed to the range before) costs its rows, not the file's first batch.
            reach = min(size, item.runs[-1][1]) if item.runs else 1
            chunks = parquet_chunks(path, reach, use_threads=True, limits=limits)
            return False, rows, size, item.select(chunks)
        whole, _, size, chunks = _file_chunks(path, step, limits)
        return whole, rows, size if whole else _batch_rows(rows, step), item.select(chunks)
    path = item
    if path.endswith((".parquet", ".pq")) and not is_minari_file(path):
        try:
            rows = pq.ParquetFile(input_file(path)).metadata.num_rows
        except (pa.ArrowInvalid, OSError):
            rows = 0  # parquet_chunks names the problem
        size = _batch_rows(rows, step)
        return False, rows, size, parquet_chunks(path, size, use_threads=True, limits=limits)
    table = read_table(path, limits=limits)
    if path.endswith((".json", ".jsonl", ".ndjson")):
        size = _batch_rows(table.num_rows, step)
        chunks = (table.slice(s, size) for s in range(0, max(table.num_rows, 1), size))
        return False, table.num_rows, size, chunks
    return True, table.num_rows, step, iter([table])


def _batch_rows(rows: int, step: int) -> int:
    """Rows per batch of a file of ``rows``: equal batches nearest ``step`` (``step`` for a file
    of less than half a batch, which is gathered with its neighbours; no ``step``: the file)."""
    if step == _WHOLE:
        return max(rows, 1)
    if rows < max(1, step // 2):
        return step
    k = max(1, round(rows / step))
    return -(-rows // k)


def iter_file_batches(
    paths: Sequence[str | FilePiece], batch_size: int | None, limits: DecodeLimits = DEFAULT_LIMITS
) -> Iterator[tuple[pa.Table, str | None]]:
    """``(table, file)`` batches of about ``batch_size`` rows over ``paths`` (files, or pieces
    of files) in order; ``file`` is None when a batch's rows come from more than one file. No
    ``batch_size``: a batch a file.

    A file of at least half a batch is cut into batches of equal size nearest ``batch_size``
    (5,016 rows at 4,096: one batch; 10,000: two of 5,000), so a batch is one file's rows, a
    zero-copy slice of what pyarrow decoded; smaller files are gathered until they make half a
    batch (their rows are copied into one table). Whole-file formats are never cut.

    Args:
        paths: Files (local paths or store URIs) or :class:`FilePiece` parts of files, read
            in order.
        batch_size: The target rows per batch; None (or 0): each file is one batch.
        limits: The decode bounds for every file.

    Yields:
        ``(table, file)``: a batch, and the path of its only file, or None.

    Raises:
        DataError: A file cannot be read (``reason="unreadable_file"``) or is over ``limits``.
    """
    step = batch_size or _WHOLE
    held: list[pa.Table] = []
    held_files: list[str] = []
    n_held = 0

    def flush() -> tuple[pa.Table, str | None]:
        nonlocal held, held_files, n_held
        table = held[0] if len(held) == 1 else concat_tables(held)
        source = held_files[0] if len(set(held_files)) == 1 else None
        held, held_files, n_held = [], [], 0
        return table, source

    def hold(chunk: pa.Table, path: str) -> None:
        nonlocal n_held
        held.append(chunk)
        held_files.append(path)
        n_held += chunk.num_rows

    half = 1 if step == _WHOLE else max(1, step // 2)
    for item in paths:
        path = item.path if isinstance(item, FilePiece) else item
        whole, rows, size, chunks = _file_chunks(item, step, limits)
        if whole or rows < half:  # gathered with its neighbours, up to a batch
            for chunk in chunks:
                hold(chunk, path)
                if n_held >= step:
                    yield flush()
            continue
        if held:
            yield flush()
        for chunk in chunks:  # row groups may cut a batch: its pieces are joined
            hold(chunk, path)
            if n_held >= size:
                yield flush()
        if held:
            yield flush()
    if held:
        yield flush()


def read_groups(paths: list[str], batch_size: int | None) -> list[list[str]]:
    """``paths`` in order, cut into groups of consecutive files of at least ``batch_size`` rows,
    each ending where a batch of :func:`iter_file_batches` ends (so a group's last batch is a full
    one). The learner stream makes each group one Ray Data task: a task's small outputs reach the
    learner when it ends, so groups keep the first learner batch close to the start. Rows come
    from Parquet footers and Arrow IPC headers; a file of unknown rows (JSON lines, HDF5, an
    unreadable file) is a group of its own; so is every file without a batch size (a batch a
    file).

    Args:
        paths: The input files, in order (each Parquet footer or IPC header is read).
        batch_size: The learner's batch, in rows, as :func:`iter_file_batches` is given it;
            None or 0: one group per file.

    Returns:
        The groups, covering ``paths`` once each and in order; the last may hold less than
        ``batch_size`` rows.
    """
    if not batch_size:
        return [[p] for p in paths]
    step, half = batch_size, max(1, batch_size // 2)
    groups: list[list[str]] = []
    current: list[str] = []
    group_rows = held = 0  # rows in the current group; rows gathered towards the next batch

    def close_group() -> None:
        nonlocal current, group_rows
        if current:
            groups.append(current)
        current, group_rows = [], 0

    for path in paths:
        n = _file_rows(path)
        if n is None:
            close_group()
            groups.append([path])
            held = 0
            continue
        current.append(path)
        group_rows += n
        if n < half or is_minari_file(path):  # gathered with its neighbours into a batch
            held += n
            if held < step:
                continue
        held = 0  # a batch (or a large file's batches) ended with this file
        if group_rows >= step:
            close_group()
    close_group()
    return groups


def _file_rows(path: str) -> int | None:
    """Rows of a Parquet or Arrow IPC file from its footer or header; None if unknown."""
    try:
        if path.endswith(".arrow"):
            with open_random_access(path) as src:
                return int(pa.ipc.open_file(src).count_rows())
        if path.endswith((".parquet", ".pq")):
            return int(pq.ParquetFile(input_file(path)).metadata.num_rows)
    except (pa.ArrowInvalid, OSError):
        return None
    return None


def concat_tables(tables: list[pa.Table]) -> pa.Table:
    """Tables of one schema as one (types promoted where pyarrow can, e.g. null columns).

    Args:
        tables: The tables, in row order (at least one); their chunks are kept, not copied.

    Returns:
        One table holding every row.

    Raises:
        pyarrow.ArrowTypeError: Column types that permissive promotion cannot unify (a column
            missing from some tables is filled with nulls, not refused).
    """
    try:
        return pa.concat_tables(tables)
    except pa.ArrowInvalid:
        return pa.concat_tables(tables, promote_options="permissive")


_DONE = object()


def prefetch(items: Iterator[T], depth: int = 1) -> Iterator[T]:
    """``items``, produced ``depth`` ahead on a thread; an error there is raised here, in order.
    Closing the returned generator stops the thread at its next item.

    Args:
        items: The iterator to run on the thread (its ``next`` is called there only).
        depth: How many items may wait, produced but not yet taken (at least 1: a queue of
            size 0 would have no bound).

    Returns:
        A generator of the items of ``items``, in order.

    Raises:
        ValueError: ``depth`` is below 1 (raised here, before any thread starts).
        BaseException: Whatever ``items`` raised, once the items before it were taken.
    """
    if depth < 1:
        raise ValueError(f"prefetch: depth must be at least 1, got {depth}")
    return _prefetch(items, depth)


def _prefetch(items: Iterator[T], depth: int) -> Iterator[T]:
    ahead = Prefetcher(items, depth)  # the thread starts at the generator's first next()
    try:
        yield from ahead
    finally:
        ahead.close()


class Prefetcher(Generic[T]):
    """``items`` produced on a thread from construction on, up to ``depth`` ahead: what
    :func:`prefetch` runs once its generator is first asked, for a caller that wants the work
    started now (the epoch stream starts Ray Data's windows while it computes one itself).
    Iterate it once; :meth:`close` stops the thread at its next item (call it in a ``finally``).

    Args:
        items: The iterator to run on the thread (its ``next`` is called there only).
        depth: How many items may wait, produced but not yet taken, at least 1.
    """

    def __init__(self, items: Iterator[T], depth: int) -> None:
        self._queue: queue.Queue[object] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._produce, args=(items,), name="offline-prelearner-read", daemon=True
        )
        self._thread.start()

    def _produce(self, items: Iterator[T]) -> None:
        try:
            for item in items:
                while not self._stop.is_set():
                    try:
                        self._queue.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    return
            self._queue.put(_DONE)
        except BaseException as e:  # handed to the consumer, raised there
            self._queue.put(e)

    def __iter__(self) -> Iterator[T]:
        while True:
            item = self._queue.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]

    def close(self) -> None:
        """Stops the thread at its next item and waits for it (items not taken are dropped)."""
        self._stop.set()
        while self._thread.is_alive():  # unblock a producer waiting on a full queue
            try:
                self._queue.get_nowait()
            except queue.Empty:
                self._thread.join(0.05)


class ReadAhead:
    """The batches of file groups (:func:`read_groups`) read on one thread, a batch ahead *across*
    groups: while the prelearner works on a group's last batch, the next group's first is read.

    Each group is one Ray Data task; a task's own :func:`prefetch` would start cold, so the first
    batch of every task was read while the prelearner waited (a group is often one batch: 20 of
    20 batches on the 100k-row pixel set). With one actor the groups come in order, and this
    reads on from one to the next. ``batches(k)`` continues the stream when it stands at group
    ``k`` and restarts it there otherwise (several actors share the groups, so the one that
    follows is unknown: ``ahead=False`` then reads each group on its own, wasting no read).

    Args:
        groups: The file groups of the stream, as :func:`read_groups` makes them (a group may
            hold :class:`FilePiece` parts); ``batches(k)`` reads ``groups[k]``.
        batch_size: Rows per batch, as :func:`iter_file_batches` takes it (None: a file a
            batch).
        ahead: Whether to read on into group ``k + 1`` after group ``k``; False with several
            actors, where the next group this one gets is unknown.
        limits: The decode bounds for every file.
    """

    def __init__(
        self,
        groups: Sequence[Sequence[str | FilePiece]],
        batch_size: int | None,
        ahead: bool = True,
        limits: DecodeLimits = DEFAULT_LIMITS,
    ):
        self.groups = groups
        self.batch_size = batch_size
        self.ahead = ahead
        self.limits = limits
        self._stream: Iterator[tuple[int, pa.Table | None, str | None]] | None = None
        self._at: int | None = None  # the group whose first batch the stream gives next

    def _read(self, start: int) -> Iterator[tuple[int, pa.Table | None, str | None]]:
        """``(k, table, file)`` for each batch of groups ``start``..., and ``(k, None, None)`` at
        the end of group ``k``: the reader learns that a group ended without taking the next
        one's first batch off the queue, so no more batches are held than :func:`prefetch` holds
        (the one in use, one ready, one being read)."""
        stop = len(self.groups) if self.ahead else start + 1
        for k in range(start, stop):
            for table, source in iter_file_batches(self.groups[k], self.batch_size, self.limits):
                yield k, table, source
            yield k, None, None

    def batches(self, k: int) -> Iterator[tuple[pa.Table, str | None]]:
        """Group ``k``'s batches, ``(table, file)`` as :func:`iter_file_batches` gives them.

        Args:
            k: The group's index into :attr:`groups`. Another group than the one read ahead
                stops that read and starts afresh at ``k``.

        Yields:
            The group's batches, in order.

        Raises:
            ConfigError: ``k`` is not the index of a group (in one line, with how many there
                are).
        """
        if not 0 <= k < len(self.groups):
            raise ConfigError(f"file group {k} does not exist: there are {len(self.groups)}")
        if self._stream is None or self._at != k:
            self.close()
            self._stream = prefetch(self._read(k))
        self._at = None  # unknown until group k is read to its end
        for _, table, source in self._stream:
            if table is None:  # group k ended; the stream reads on into the next group
                self._at = k + 1 if self.ahead and k + 1 < len(self.groups) else None
                if self._at is None:
                    self.close()
                return
            yield table, source
        self.close()

    def close(self) -> None:
        """Stops the reading thread (it ends at its next batch)."""
        stream, self._stream, self._at = self._stream, None, None
        close = getattr(stream, "close", None)
        if close is not None:
            close()
