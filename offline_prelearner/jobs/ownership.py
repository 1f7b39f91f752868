"""A job's claim on ``--out``: the lock, the job's id, where ``--out`` may be, a full disk.

::

    out/.cartpole.lock                the job's lock on --out (flock), held for its whole life
    out/.cartpole.staging/            the job's staging folder (:mod:`.commit`)

**A job owns its staging.** Before it reads anything a job takes an OS lock (``flock``) on
``.<out>.lock`` beside ``--out`` (:class:`OutLock`) and holds it until its output is in place or
it failed; a second job into the same ``--out`` is refused in one line naming the job that holds
it (pid, start time). The kernel drops the lock when its process dies, so a killed job never
leaves a stale lock. Each job has an id (:func:`new_job_id`; in ``job.json``, every unit record
and the manifest): the commit (:mod:`.commit`) never reuses a unit record of another job.

Before that, :func:`check_out_apart` refuses an ``--out`` that is, lies in or holds an input;
while the job writes, :func:`output_storage` turns a full disk into one line naming ``--out``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import socket
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..errors import CommitError
from ..io.stores import Location

try:  # POSIX; elsewhere a job does not lock its --out (one job per --out is then the user's)
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "FULL",
    "JOB_FILE",
    "CommitError",
    "OutLock",
    "check_out_apart",
    "check_owner",
    "file_on_the_way",
    "fits_job",
    "lock_path",
    "new_job_id",
    "output_storage",
    "staging_path",
]


#: The staging's job file: what the job is, its id first among it (``job.json``).
JOB_FILE = "job.json"


def check_owner(staging: Location, job_id: str, then: str) -> None:
    """The one ownership check of a job's staging, on a disk or a store: its ``job.json`` still
    names this job (not gone with a commit or a discard, not taken over by another job).

    Args:
        staging: The staging folder (or a store's staging prefix) holding ``job.json``.
        job_id: This job's id (an empty id checks nothing: a job of no id owns nothing).
        then: What the refusal's line ends with: what was (not) done (``"nothing was
            committed"``).

    Raises:
        CommitError: ``job.json`` is gone, unreadable or names another job.
    """
    if not job_id:
        return
    try:
        staged = json.loads(staging.join(JOB_FILE).read_bytes()).get("job_id")
    except (ValueError, AttributeError):
        staged = None
    except OSError as e:  # gone; a store that fails to answer is the store's failure (EIO)
        if not staging.local and "not found" not in str(e).lower():
            raise
        staged = None
    if staged != job_id:
        what = "staging folder" if staging.local else "staging"
        raise CommitError(
            f"the {what} {staging.uri!r} no longer belongs to this job ({job_id}); {then}"
        )


#: What a resume must find unchanged in the staged job (else it is another job).
SAME_JOB_KEYS = ("version", "config", "prelearner", "format", "layout", "seed")


def check_same_job(staged: Mapping[str, Any], job: Mapping[str, Any]) -> None:
    """Refuses to resume a staged job of another version, config, prelearner, format, layout or
    seed (:data:`SAME_JOB_KEYS`), on a disk or a store.

    Args:
        staged: The staged job's ``job.json``.
        job: The job as described now.

    Raises:
        CommitError: One line naming the first key that differs, both values shortened.
    """
    for key in SAME_JOB_KEYS:
        if staged.get(key) != job.get(key):
            raise CommitError(
                f"--resume: the interrupted job had another {key} "
                f"({_short(staged.get(key))} vs now {_short(job.get(key))}); "
                "run without --resume to start over"
            )


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def fits_job(record: Mapping[str, Any], job: Mapping[str, Any], job_id: str) -> bool:
    """Whether a staged unit record (a batch job's or a ``convert``'s) may be reused by the job
    as planned now: it is this job's, of the same plan of its unit (``job["unit_keys"]``), and
    every input it read is unchanged (size, mtime and, where recorded, content fingerprint).
    Its files are the staging's to check.

    Args:
        record: The staged record's JSON.
        job: The job as planned now (its ``inputs`` and optional ``unit_keys``).
        job_id: The job's id (a resume's: the staged job's).

    Returns:
        False for a record of another job, plan or input, and for a malformed one.
    """
    if record.get("job_id") != job_id:
        return False
    try:
        want = {f["path"]: f for f in job.get("inputs", [])}
        keys = job.get("unit_keys")
        if keys is not None:
            unit = record["unit"]
            if not isinstance(unit, int) or not 0 <= unit < len(keys):
                return False
            if record.get("plan") != keys[unit]:
                return False
        for f in record.get("inputs", []):
            now = want.get(f["path"])
            if now is None or (now["size"], now["mtime_ns"]) != (f["size"], f["mtime_ns"]):
                return False
            if "fingerprint" in f and now.get("fingerprint") != f["fingerprint"]:
                return False
    except (KeyError, TypeError, ValueError):
        return False
    return True


def staging_path(out: str | os.PathLike[str]) -> Path:
    """Where a job writing ``out`` stages its work: a hidden sibling of ``out``.

    Args:
        out: The job's local output folder (``--out``); it need not exist.

    Returns:
        ``<parent of out>/.<name of out>.staging``.
    """
    out = Path(out)
    return out.parent / f".{out.name}.staging"


def lock_path(out: str | os.PathLike[str]) -> Path:
    """The lock file of ``out``: a hidden sibling (``.<name>.lock``) that the listing skips.

    Args:
        out: The job's local output folder (``--out``); it need not exist.
    """
    out = Path(out)
    return out.parent / f".{out.name}.lock"


# ====================================================================== where --out may be
_GLOB_CHARS = ("*", "?", "[")


def _input_root(item: str) -> str | None:
    """The existing path an input names: itself, or a glob's folder before its first pattern."""
    if not any(c in item for c in _GLOB_CHARS):
        return item if os.path.lexists(item) else None
    parts = Path(item).parts
    static = []
    for part in parts:
        if any(c in part for c in _GLOB_CHARS):
            break
        static.append(part)
    root = os.path.join(*static) if static else "."
    return root if os.path.isdir(root) else None


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def check_out_apart(
    out: str | os.PathLike[str], inputs: str | os.PathLike[str] | list[Any]
) -> None:
    """Refuses an ``out`` that is an input folder, lies inside one, or holds an input, before
    anything is read: the next run over that folder would read this job's output (a ``convert``
    output is data, so it would be read twice), and ``--overwrite`` would delete the input.

    An input is a file, a folder or a glob (its folder is the part before the first pattern);
    paths are compared with symlinks resolved. A name that is not a path (a Minari dataset id)
    is left to the reader.

    Args:
        out: The job's output folder (``--out``), compared with its symlinks resolved; it need
            not exist.
        inputs: The job's input as given: a path, a glob, or a list of them; an item that
            names nothing on the local disk is passed over.

    Raises:
        CommitError: one line naming ``out`` and the input.
    """
    items = inputs if isinstance(inputs, list) else [inputs]
    where = os.path.realpath(out)
    for item in items:
        text = os.fspath(item)
        root = _input_root(text)
        if root is None:
            continue
        real = os.path.realpath(root)
        if where == real:
            raise CommitError(
                f"--out {str(out)!r} is the input {text!r} itself; choose an --out outside the "
                "input"
            )
        if os.path.isdir(real) and _within(where, real):
            raise CommitError(
                f"--out {str(out)!r} is inside the input folder {text!r}: the next run over it "
                "would read this job's output; choose an --out outside the input"
            )
        if _within(real, where):
            raise CommitError(
                f"--out {str(out)!r} holds the input {text!r} (--overwrite would delete it); "
                "choose an --out outside the input"
            )


# ====================================================================== a full disk
#: What a full disk, a quota or a file size limit makes a write fail with.
FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


@contextlib.contextmanager
def output_storage(out: str | os.PathLike[str]) -> Iterator[None]:
    """Turns a write that failed for want of room (ENOSPC, EDQUOT, EFBIG) into one OSError of the
    same errno naming the output (the CLI prints it in one line and exits 3); other errors pass.

    Args:
        out: The job's output, named in the error with its staging folder.

    Raises:
        OSError: For want of room, with the same errno and a message naming ``out``.
    """
    try:
        yield
    except OSError as e:
        if e.errno not in FULL:
            raise
        code = e.errno
        raise OSError(
            code,
            f"{os.strerror(code)} writing the job's output {str(out)!r} "
            f"(staged in {str(staging_path(out))!r})",
        ) from None


# ====================================================================== the lock
class OutLock:
    """An OS lock (``flock``) on ``--out``: one job writes an ``out`` at a time.

    The lock file ``.<out>.lock`` holds the holder's pid, host and start time (for the refusal's
    one line). The kernel releases the lock when the holding process dies: a killed job never
    leaves a stale lock, only the file, which the next job locks and reuses. A job that ends
    removes the file while it still holds the lock; a job that opened the old file meanwhile
    finds it gone once it gets the lock and opens the new one (the open, lock, check-the-path
    loop), so two jobs never hold locks on two different files of one ``out``.

    Args:
        out: The local output folder to lock; the lock file is its sibling
            (:func:`lock_path`), made with its folder on :meth:`acquire`.
    """

    def __init__(self, out: str | os.PathLike[str]) -> None:
        self.out = Path(out)
        self.path = lock_path(self.out)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this process holds the lock."""
        return self._fd is not None

    def acquire(self) -> None:
        """Takes the lock, or raises :class:`CommitError` naming the job that holds it."""
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(1000):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            if fcntl is None:  # pragma: no cover
                break
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise CommitError(
                    f"another job is writing {str(self.out)!r} ({holder}); wait for it to end, "
                    "or choose another --out"
                ) from None
            except OSError as e:
                os.close(fd)
                raise CommitError(
                    f"cannot lock {str(self.path)!r} ({e.strerror}): the folder of --out must "
                    "allow file locks (flock)"
                ) from None
            if _same_file(fd, self.path):
                break
            os.close(fd)  # the job that held it ended and removed it: lock the current file
        else:  # pragma: no cover - a thousand jobs ending in between
            raise CommitError(f"cannot lock {str(self.path)!r}: it keeps being replaced")
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        with contextlib.suppress(OSError):  # the lock holds without its note
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Removes the lock file (still holding the lock) and releases it; idempotent."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if _same_file(fd, self.path):
                self.path.unlink()
        except OSError:
            pass
        finally:
            os.close(fd)

    def other_holder(self) -> bool:
        """Whether a live process other than this one holds the lock (from the lock file's note,
        without touching the lock: a probe could make a starting job believe it is taken)."""
        if self._fd is not None:
            return False
        try:
            info = json.loads(self.path.read_text())
            pid = int(info["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return False
        if pid == os.getpid() or info.get("host") != socket.gethostname():
            return pid != os.getpid()
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except OSError:
            return True
        return True


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    fst = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (fst.st_dev, fst.st_ino)


def _holder(fd: int) -> str:
    """The holder's note (pid, start time; the host when it is another), read from the lock
    file; the holder writes it just after it got the lock, so an empty note is read again."""
    deadline = time.monotonic() + 0.5
    while True:
        try:
            info = json.loads(os.pread(fd, 4096, 0) or b"null")
            pid, started = int(info["pid"]), str(info["started_at"])
        except (OSError, ValueError, KeyError, TypeError):
            if time.monotonic() < deadline:
                time.sleep(0.02)
                continue
            return "pid unknown"
        host = info.get("host")
        on = f" on {host}" if isinstance(host, str) and host != socket.gethostname() else ""
        return f"pid {pid}{on}, started at {started}"


def new_job_id() -> str:
    """A job's id: its start time and 64 random bits (``20260101T120000-1f2e...``)."""
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(8)}"


def file_on_the_way(path: Path) -> Path | None:
    """The nearest existing ancestor of ``path`` (or ``path`` itself) if it is not a folder.

    Args:
        path: A path about to be made (an output folder); a relative path is looked up from
            the working directory.

    Returns:
        The file (or other non-folder) that stands where a folder must be, or None where the
        nearest existing path is a folder (or none exists).
    """
    for p in (path, *path.parents):
        if p.exists():
            return None if p.is_dir() else p
    return None
