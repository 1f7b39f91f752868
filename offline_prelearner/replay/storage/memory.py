"""Memory for the buffer's large columns: anonymous pages, filled at the speed of a copy.

A ring of pixel frames is large (50k slots of 84x84x4 frames: 1.4 GB) and written once through
before it wraps, so the first write to each page is part of filling the buffer. numpy asks the
kernel for transparent huge pages (``MADV_HUGEPAGE``) on every array of 4 MiB or more; on the
virtual machines we measured (Firecracker, ``defrag=madvise``), a first write into such memory
ran at 0.45-0.7 GB/s, against 2.4-2.9 GB/s into the same amount of plain 4 KiB pages (a fresh
process each, 1.4 GB, ``.ci``-sized 2-core VM). That was a third of the pixel job's wall time. So
columns of :data:`LARGE` bytes or more are anonymous ``mmap`` memory advised ``MADV_NOHUGEPAGE``:
zero-filled by the kernel, touched lazily (a buffer that never fills never commits its capacity).
The price is on random gathers from a huge ring (TLB misses): 10-20% slower in a micro-benchmark
of 128-frame gathers, a few milliseconds per learner batch, against seconds saved per fill.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import queue
import threading
from typing import Any

import numpy as np

__all__ = [
    "LARGE",
    "fault_in_ahead",
    "for_worker_process",
    "reuse_freed_heap",
    "small_pages_for_numpy",
    "zeroed",
]

#: Columns at least this large get their own anonymous mapping (below it, numpy's allocator).
LARGE = 32 * 2**20


def zeroed(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A writable zero-filled array; large ones in 4 KiB anonymous pages (module docstring).

    Args:
        shape: The array's shape.
        dtype: Anything ``np.dtype`` takes; object dtypes always come from ``np.zeros``.

    Returns:
        The array: from ``np.zeros`` below :data:`LARGE` bytes, else a view of a private
        anonymous mapping (kernel-zeroed, pages faulted in on first write).

    Raises:
        MemoryError: the mapping could not be made (as ``np.zeros`` would raise).
    """
    dt = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    if nbytes < LARGE or dt.hasobject or not hasattr(mmap, "MAP_ANONYMOUS"):
        return np.zeros(shape, dt)
    try:
        mem = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except OSError as e:  # ENOMEM: what np.zeros would raise
        raise MemoryError(str(e)) from None
    advice = getattr(mmap, "MADV_NOHUGEPAGE", None)
    if advice is not None:
        with contextlib.suppress(OSError):  # a kernel without THP: plain pages already
            mem.madvise(advice)
    return np.frombuffer(mem, dt).reshape(shape)


def small_pages_for_numpy() -> bool:
    """Turns numpy's huge-page advice off in this process, unless the user chose with
    ``NUMPY_MADVISE_HUGEPAGE``; returns whether it is off.

    For the processes that run our prelearners (Ray actors, unit workers, the CLI): the arrays
    they allocate per batch (decoded frames, sampled frame stacks, output columns) are written
    once and freed, so first-touch cost is what counts, and on the VMs we measured huge pages cost
    2-4x there (module docstring). The 100k-row pixel job in one process: 28-52k rows/s with
    numpy's default, 58-63k without (3 runs each, alternated). A library user's own process is
    left alone.
    """
    if os.environ.get("NUMPY_MADVISE_HUGEPAGE") is not None:
        return os.environ["NUMPY_MADVISE_HUGEPAGE"] == "0"
    core = getattr(np, "_core", None) or getattr(np, "core", None)  # numpy 2 / numpy 1
    switch = getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)
    if switch is None:
        return False
    switch(False)
    return True


#: glibc ``mallopt`` parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def reuse_freed_heap(keep_mb: int = 512) -> bool:
    """Lets glibc's malloc keep up to ``keep_mb`` MiB of freed heap for reuse in this process,
    instead of handing it back to the kernel; returns whether it could (glibc only).

    For the same processes as :func:`small_pages_for_numpy`: their per-batch arrays of tens of
    MB (a 256-row train batch of 4 stacked 84x84x4 frames is 29 MB a column) are freed after
    each batch. glibc serves a block over its mmap threshold (dynamic, at most 32 MiB) with a
    fresh ``mmap`` and trims free heap beyond twice that, so each batch's outputs are new pages:
    60 MB faulted in per batch on the pixel job, ~20 ms at this VM's 3 GB/s first touch. Blocks up
    to 32 MiB now come from the heap, which keeps ``keep_mb`` free before trimming. A user who
    tuned glibc with ``MALLOC_TRIM_THRESHOLD_`` or ``MALLOC_MMAP_THRESHOLD_`` is left alone.

    Args:
        keep_mb: MiB of freed heap malloc keeps before trimming (its trim threshold).

    Returns:
        True when both ``mallopt`` settings took; False on another libc or when the user's
        environment sets them.
    """
    import ctypes

    if any(os.environ.get(v) for v in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")):
        return False

    mallopt = _libc_function("mallopt", ctypes.c_int, ctypes.c_int)
    if mallopt is None:  # not glibc
        return False
    ok = mallopt(_M_MMAP_THRESHOLD, 32 * 2**20) == 1
    return ok and bool(mallopt(_M_TRIM_THRESHOLD, keep_mb * 2**20) == 1)


def for_worker_process() -> None:
    """The memory policy of a process that runs our prelearners per batch (a Ray actor, a unit
    worker, the CLI): small pages for numpy, freed heap kept for the next batch."""
    small_pages_for_numpy()
    reuse_freed_heap()


#: ``madvise`` advice that faults pages in writable without touching their bytes (Linux 5.14).
_MADV_POPULATE_WRITE = 23
#: Pages are faulted in this many bytes at a time, so the writer and the helper interleave.
_FAULT_STEP = 8 * 2**20


class _FaultIn:
    """One daemon thread per process that faults pages in ahead of a writer (see
    :func:`fault_in_ahead`). ``madvise`` is called through ctypes, which releases the GIL."""

    _instance: _FaultIn | None = None

    def __init__(self, madvise: Any) -> None:
        self.madvise = madvise
        self.pid = os.getpid()  # a forked child has no thread: it starts its own
        self.jobs: queue.Queue[tuple[np.ndarray, int, int]] = queue.Queue()
        threading.Thread(target=self._run, name="offline-prelearner-fault-in", daemon=True).start()

    @classmethod
    def get(cls) -> _FaultIn | None:
        if cls._instance is None or cls._instance.pid != os.getpid():
            import ctypes

            madvise = _libc_function("madvise", ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
            if madvise is None:
                return None
            cls._instance = cls(madvise)
        return cls._instance

    def _run(self) -> None:
        while True:
            arr, start, stop = self.jobs.get()  # ``arr`` keeps the mapping alive meanwhile
            for at in range(start, stop, _FAULT_STEP):
                n = min(_FAULT_STEP, stop - at)
                if self.madvise(at, n, _MADV_POPULATE_WRITE) != 0:
                    break  # an old kernel (EINVAL): the writer faults its pages in itself
            del arr


def fault_in_ahead(arr: np.ndarray, lo: int, hi: int) -> None:
    """Faults the pages of ``arr[lo:hi]`` in on a helper thread, for a writer about to fill
    them: a buffer's ring is written once through before it wraps, and on the VMs we measured
    the first write into a page costs a fault and a zeroing (~3 GB/s), most of the time the
    pixel job spent filling its buffer. Done ahead, on another core, the write runs at the speed
    of a copy. The bytes are left as they are (``MADV_POPULATE_WRITE``): a page written
    meanwhile keeps its data. Only columns from :func:`zeroed` of :data:`LARGE` bytes or more;
    elsewhere (no Linux, an old kernel) nothing happens.

    Args:
        arr: The array about to be written (C-contiguous, :data:`LARGE` bytes or more, else
            ignored); it is kept alive until its pages are in.
        lo: First row to fault in (clipped to 0).
        hi: End row (exclusive, clipped to ``len(arr)``).
    """
    lo, hi = max(lo, 0), min(hi, len(arr))
    if hi <= lo or arr.nbytes < LARGE or not arr.flags.c_contiguous:
        return
    helper = _FaultIn.get()
    if helper is None:
        return
    row = arr.strides[0]
    start = arr.ctypes.data + lo * row
    stop = arr.ctypes.data + hi * row
    page = mmap.PAGESIZE
    start -= start % page
    stop += -stop % page
    helper.jobs.put((arr, start, stop))


def _libc_function(name: str, *argtypes: Any) -> Any:
    """``name`` from the C library, taking ``argtypes`` and returning an int, or None where
    there is none (not Linux, not glibc). ctypes releases the GIL while it runs."""
    import ctypes
    import ctypes.util

    lib = ctypes.util.find_library("c")
    if lib is None or not hasattr(mmap, "MAP_ANONYMOUS"):
        return None
    try:
        fn = getattr(ctypes.CDLL(lib), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = list(argtypes)
    fn.restype = ctypes.c_int
    return fn
