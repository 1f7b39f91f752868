"""Memory for the buffer's large columns (``replay/storage/memory.py``): zero-filled, writable
arrays in their own anonymous mapping above LARGE, numpy's below; numpy's huge-page advice turned
off in our worker processes unless the user chose."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import threading
from typing import Any

import numpy as np

from offline_prelearner.replay.storage.memory import LARGE, zeroed


def test_large_columns_are_their_own_zeroed_writable_mapping() -> None:
    frames = LARGE // (84 * 84 * 4) + 1
    ring = zeroed((frames, 84, 84, 4), np.uint8)
    assert ring.shape == (frames, 84, 84, 4) and ring.dtype == np.uint8
    base = ring
    while isinstance(base, np.ndarray | memoryview):  # reshape -> frombuffer -> memoryview -> mmap
        base = base.base if isinstance(base, np.ndarray) else base.obj
    assert isinstance(base, mmap.mmap)
    assert not ring.any()  # the kernel's zero pages
    ring[-1] = 7
    ring[0, 0, 0, 0] = 1
    assert ring[-1].sum() == 7 * 84 * 84 * 4 and ring[0, 0, 0, 0] == 1
    floats = zeroed((LARGE // 8 + 3, 2), np.float64)
    assert floats.flags.writeable and floats.flags.c_contiguous and not floats.any()


def test_small_and_object_columns_are_plain_numpy() -> None:
    small = zeroed((100, 4), np.float32)
    assert small.base is None and not small.any()
    ids = zeroed((LARGE // 8 + 1,), object)
    assert ids.dtype == object and ids[0] == 0


def _hugepage_after(env: dict[str, str]) -> str:
    code = (
        "import numpy as np\n"
        "from offline_prelearner.replay.storage.memory import small_pages_for_numpy\n"
        "off = small_pages_for_numpy()\n"
        "print(off, np._core.multiarray._get_madvise_hugepage())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def test_numpy_huge_pages_off_unless_the_user_chose() -> None:
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if sys.platform == "linux":
        assert _hugepage_after(env) == "True False"
    assert _hugepage_after({**env, "NUMPY_MADVISE_HUGEPAGE": "1"}) == "False True"
    assert _hugepage_after({**env, "NUMPY_MADVISE_HUGEPAGE": "0"}) == "True False"


_FAULTS = """
import resource, sys
import numpy as np
from offline_prelearner.replay.storage.memory import reuse_freed_heap
if sys.argv[1] == "1":
    assert reuse_freed_heap()
def faults(n=8):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(n):  # a batch's two 29 MB output columns, filled, then freed
        a = np.empty(29 * 2**20, np.uint8); b = np.empty(29 * 2**20, np.uint8)
        a.fill(1); b.fill(2)
        del a, b
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
faults(1)
print(faults())
"""


def test_freed_heap_is_reused_not_faulted_in_again() -> None:
    """glibc hands a freed 29 MB block back to the kernel (each batch faults its outputs in
    again); after ``reuse_freed_heap`` the next batch's arrays reuse the same pages."""
    if not sys.platform.startswith("linux"):
        return
    per_batch = 2 * 29 * 2**20 // mmap.PAGESIZE

    def faults(on: bool) -> int:
        out = subprocess.run(
            [sys.executable, "-c", _FAULTS, "1" if on else "0"],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "NUMPY_MADVISE_HUGEPAGE": "0"},
        )
        return int(out.stdout.split()[-1])

    assert faults(False) > 4 * per_batch  # glibc's default: most batches fault in anew
    assert faults(True) < per_batch // 4  # reused: a small fraction of one batch


def test_a_users_own_glibc_tuning_is_left_alone(monkeypatch) -> None:
    from offline_prelearner.replay.storage.memory import reuse_freed_heap

    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert reuse_freed_heap() is False


_AHEAD = """
import resource, sys, threading
import numpy as np
from offline_prelearner.replay.storage.memory import _FaultIn, fault_in_ahead, zeroed
ring = zeroed((4000, 84, 84, 4), np.uint8)  # 113 MB
ring[1000:1010] = 9  # written before: the helper must leave these bytes as they are
if sys.argv[1] == "1":
    fault_in_ahead(ring, 0, 3000)
    done = threading.Event()
    class Marker:  # a job of no pages after it: the helper drops it once the range is done
        def __del__(self):
            done.set()
    helper = _FaultIn.get()
    if helper is not None:
        helper.jobs.put((Marker(), 0, 0))
        assert done.wait(60), "the helper thread did not finish"
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
ring[:3000] += 1
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, int(ring[1005, 0, 0, 0]),
      int(ring[2999].max()), int(ring[3000:].max()))
"""


def test_pages_faulted_in_ahead_keep_their_bytes_and_spare_the_writer() -> None:
    """A writer filling a ring faults each page in as it goes; ``fault_in_ahead`` does it on a
    helper thread first (``MADV_POPULATE_WRITE``), leaving data already written untouched and
    the pages beyond the range alone."""
    if not sys.platform.startswith("linux"):
        return
    pages = 3000 * 84 * 84 * 4 // mmap.PAGESIZE

    def run(on: bool) -> list[int]:
        out = subprocess.run(
            [sys.executable, "-c", _AHEAD, "1" if on else "0"],
            capture_output=True,
            text=True,
            check=True,
        )
        return [int(x) for x in out.stdout.split()]

    faults, kept, last, beyond = run(False)
    assert faults > pages * 0.9 and (kept, last, beyond) == (10, 1, 0)
    faults, kept, last, beyond = run(True)
    assert faults < pages // 10 and (kept, last, beyond) == (10, 1, 0)


def _drained(helper: Any, timeout: float = 60) -> bool:
    """Whether ``helper``'s thread finishes the jobs queued so far within ``timeout`` seconds:
    it takes jobs in order and drops each when done, so a marker job of no pages queued last is
    dropped (its ``__del__`` runs) once the jobs before it are done."""
    done = threading.Event()

    class Marker:
        def __del__(self) -> None:
            done.set()

    helper.jobs.put((Marker(), 0, 0))
    return done.wait(timeout)


def test_a_forked_child_faults_in_with_its_own_helper() -> None:
    """After ``fork`` the helper thread exists only in the parent; the child starts its own
    (otherwise its jobs would wait forever, holding their arrays)."""
    if not hasattr(os, "fork"):
        return
    from offline_prelearner.replay.storage.memory import _FaultIn, fault_in_ahead, zeroed

    ring = zeroed((600, 84, 84, 4), np.uint8)
    fault_in_ahead(ring, 0, 10)
    parent = _FaultIn.get()
    import warnings

    with warnings.catch_warnings():  # Python 3.12+ warns on fork() with threads running
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: a helper of its own, which empties its queue
        code = 1
        try:
            fault_in_ahead(ring, 10, 20)
            child = _FaultIn.get()
            code = 0 if child is not parent and _drained(child) else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
