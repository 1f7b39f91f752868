"""Buffer checkpoints: a directory of ``.npy`` files and a JSON manifest. No pickle, anywhere.

Layout of ``<dir>/``::

    manifest.json     {"format": ..., "generation": "g-<hex>", "meta": {...},
                       "arrays": {name: {file, sha256, dtype, shape, bytes}}}
    g-<hex>/a0000.npy ...   the generation the manifest names: one array per file,
                            written with allow_pickle=False
    .lock             an empty file that saves and loads lock (``flock``)

**One rename commits.** A save writes a new generation folder beside the current one, flushes
every file and the folder to disk, writes the new manifest to a temporary name, flushes it, and
``os.replace``-s it onto ``manifest.json`` -- the only step that changes what the directory
holds. A death before that rename leaves the old manifest (and the old generation, untouched);
a death after it leaves the new one. Generations not named by the manifest are deleted after the
commit, by this save or, if it died, by the next save or load. Why this and not a directory swap:
``rename`` cannot atomically replace a non-empty directory (it takes two renames, and a death
between them leaves no checkpoint at the path), and a symlink swap is atomic but makes the path
a link (copied as a link, not portable to every file system); a file replace is atomic on every
POSIX file system and keeps ``<dir>`` a plain folder.

**Two processes.** A save holds an exclusive ``flock`` on its generation folder from the moment
it creates it until its commit is done, and takes the directory's ``.lock`` exclusively to create
that folder and to commit; a load holds ``.lock`` shared while it reads. Clean-up runs under the
exclusive ``.lock`` and deletes only generations whose own lock it can take: a live save's
folder is never deleted, and a dead one's lock went with its process. (``flock`` is per open file
and released when a process dies, even by SIGKILL.)

Reading verifies the manifest, every file's size and SHA-256 and every array's dtype and shape
before returning anything: a truncated, missing or altered file is a
:class:`~offline_prelearner.errors.DecodeError` naming it, never a silently smaller buffer.
:func:`restore` hands the arrays to a buffer's ``set_state``, whose checks of the ring's
invariants raise one :class:`~offline_prelearner.errors.DataError` naming the manifest and the
field; a failed restore leaves the buffer as it was.

Version 1 checkpoints (the array files directly in ``<dir>``) are still read, and replaced
cleanly by the next save.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, DataError, DecodeError, Where
from ..io.stores import Location, StorageError, is_remote, locate, storage_error

try:  # POSIX; elsewhere saves and loads do not lock (one process per checkpoint)
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

__all__ = ["FORMAT", "read", "restore", "write"]

FORMAT = "offline_prelearner.replay_checkpoint/2"
_FORMAT_V1 = "offline_prelearner.replay_checkpoint/1"
MANIFEST = "manifest.json"
LOCK = ".lock"
_GEN = re.compile(r"g-[0-9a-f]{32}")
_TMP_MANIFEST = re.compile(r"\.manifest\.json\.(g-[0-9a-f]{32})\.tmp")
_V1_ARRAY = re.compile(r"a\d{4,}\.npy")


def _is_checkpoint_dir(path: Path) -> bool:
    """A directory a save may write into: a committed checkpoint, or holding only what saves
    write (an empty one, or the leftovers of a first save that died)."""
    return path.is_dir() and (
        (path / MANIFEST).is_file() or all(_ours(p.name) for p in path.iterdir())
    )


def _ours(name: str) -> bool:
    """Whether an entry of a folder without a manifest is one a save writes (anything else is
    the user's; version-1 array names are ours only beside a version-1 manifest)."""
    return name == LOCK or bool(_GEN.fullmatch(name)) or bool(_TMP_MANIFEST.fullmatch(name))


def write(path: str | Path, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> Path | str:
    """Writes ``meta`` (JSON-able) and ``arrays`` (numpy, no object dtype) to directory ``path``,
    committing with one atomic rename of the manifest (see the module docstring); on an object
    store (a URI), with one PUT of the manifest (:func:`_write_store`). Returns the path.

    Args:
        path: A local directory (created if missing; an existing one must be a checkpoint) or
            an object-store URI.
        meta: JSON-able metadata, stored in the manifest.
        arrays: Name to numpy array; each is saved as one ``.npy`` file, no pickles.

    Returns:
        The checkpoint's path (a :class:`~pathlib.Path` locally, the URI on a store).

    Raises:
        ConfigError: ``path`` exists and is not a checkpoint directory.
        TypeError: an array has object dtype.
    """
    if is_remote(path):
        return _write_store(locate(path), meta, arrays)
    dest = Path(path)
    if dest.exists() and not _is_checkpoint_dir(dest):
        raise ConfigError(
            f"checkpoint path {str(dest)!r} exists and is not a checkpoint; refusing to replace it"
        )
    dest.mkdir(parents=True, exist_ok=True)
    gen = f"g-{uuid.uuid4().hex}"
    gdir = dest / gen
    tmp = dest / f".manifest.json.{gen}.tmp"
    with _locked(dest, exclusive=True):
        _clean(dest)
        gdir.mkdir()
        gen_fd = _lock_dir(gdir)
    held: int | None = gen_fd  # the lock on this save's generation, until it commits
    committed = False
    try:
        entries = {}
        for i, (name, arr) in enumerate(arrays.items()):
            arr = np.asarray(arr)
            if arr.dtype.hasobject:
                raise TypeError(f"array {name!r} has object dtype; checkpoints hold no pickles")
            fname = f"a{i:04d}.npy"
            with open(gdir / fname, "wb") as f:
                np.save(f, arr, allow_pickle=False)
                f.flush()
                os.fsync(f.fileno())
            entries[name] = {
                "file": f"{gen}/{fname}",
                "sha256": _sha256(gdir / fname),
                "dtype": arr.dtype.str,
                "shape": list(arr.shape),
                "bytes": (gdir / fname).stat().st_size,
            }
        _fsync_dir(gdir)
        manifest = {"format": FORMAT, "generation": gen, "meta": meta, "arrays": entries}
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        with _locked(dest, exclusive=True):
            os.replace(tmp, dest / MANIFEST)  # the commit point
            committed = True
            _fsync_dir(dest)
            os.close(gen_fd)  # now the current generation: nothing of this save is temporary
            held = None
            _clean(dest)
    finally:
        if held is not None:
            _unlock(held)
        if not committed:  # an exception (a kill leaves this to the next save or load)
            with _locked(dest, exclusive=True):
                shutil.rmtree(gdir, ignore_errors=True)
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
    return dest


def read(path: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Reads and verifies a checkpoint directory; returns ``(meta, arrays)``. Leftovers of a
    save that died are deleted first where the directory is writable and no one else holds it.

    Args:
        path: A checkpoint directory or object-store URI that :func:`write` wrote.

    Returns:
        ``(meta, arrays)`` as they were written.

    Raises:
        DecodeError: the manifest or a file is missing, truncated or altered.
    """
    if is_remote(path):
        return _read_store(locate(path))
    root = Path(path)
    mpath = root / MANIFEST
    ours = root.is_dir() and _is_checkpoint_dir(root)
    if ours:
        with contextlib.suppress(OSError), _locked(root, exclusive=True, wait=False) as got:
            if got:
                _clean(root)
    with _locked(root, exclusive=False, create=ours):
        manifest = _manifest(root)
        entries, meta = manifest["arrays"], manifest["meta"]
        gen = manifest.get("generation") if manifest["format"] == FORMAT else None
        if manifest["format"] == FORMAT and not (isinstance(gen, str) and _GEN.fullmatch(gen)):
            raise _bad(f"manifest names generation {gen!r}, expected 'g-<32 hex digits>'", mpath)
        arrays = {}
        for name, entry in entries.items():
            arrays[name] = _read_array(root, gen, name, entry)
    return meta, arrays


def restore(
    path: str | Path,
    get_state: Callable[[], dict[str, Any]],
    set_state: Callable[[dict[str, Any]], None],
    state: tuple[dict[str, Any], dict[str, np.ndarray]] | None = None,
) -> None:
    """Reads checkpoint ``path`` and hands it to ``set_state`` (``{"meta", "arrays"}``).

    A state that breaks an invariant of the buffer is one :class:`DataError` naming the manifest
    file and the field, and the buffer keeps the state ``get_state`` returned before (a
    :class:`ConfigError` -- a checkpoint of another buffer configuration -- likewise).
    ``state`` is :func:`read`'s result where the caller read it already.

    Args:
        path: The checkpoint directory or URI (read unless ``state`` is given; named in
            errors).
        get_state: Returns the buffer's state now, kept to roll back a failed restore.
        set_state: Takes ``{"meta": ..., "arrays": ...}`` and restores the buffer from it.
        state: ``(meta, arrays)`` already read from ``path``, or None to read it here.

    Raises:
        DataError: the state breaks an invariant of the buffer (``corrupt_checkpoint``, naming
            the manifest and the field).
        ConfigError: the checkpoint is of another buffer configuration.
        DecodeError: the checkpoint cannot be read.
    """
    meta, arrays = read(path) if state is None else state
    before = get_state()
    try:
        set_state({"meta": meta, "arrays": arrays})
    except BaseException as exc:
        set_state(before)
        if isinstance(exc, ConfigError):
            raise
        mpath = locate(path).join(MANIFEST).uri if is_remote(path) else Path(path) / MANIFEST
        if isinstance(exc, DataError):
            field = exc.where.column
            raise DataError(
                f"corrupt checkpoint: {exc.message}",
                Where(file=str(mpath), column=field),
                reason="corrupt_checkpoint",
            ) from None
        if isinstance(exc, KeyError):
            field = str(exc.args[0])
            raise _bad(f"manifest lacks field {field!r}", mpath, field=field) from None
        if isinstance(exc, (TypeError, ValueError, OverflowError)):
            raise _bad(f"malformed state ({type(exc).__name__}: {exc})", mpath) from None
        raise


# ---------------------------------------------------------------------- reading
def _manifest(root: Path) -> dict[str, Any]:
    mpath = root / MANIFEST
    if not mpath.is_file():
        raise _bad(f"no {MANIFEST} in {str(root)!r}: not a checkpoint, or an incomplete one", mpath)
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _bad(f"manifest is not valid JSON ({e})", mpath) from None
    if not isinstance(manifest, dict) or manifest.get("format") not in (FORMAT, _FORMAT_V1):
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise _bad(f"manifest format is {found!r}, expected {FORMAT!r}", mpath)
    if not isinstance(manifest.get("arrays"), dict) or not isinstance(manifest.get("meta"), dict):
        raise _bad("manifest lacks its 'arrays' or 'meta' section", mpath)
    return manifest


def _read_array(root: Path, gen: str | None, name: str, entry: Any) -> np.ndarray:
    try:
        fname = str(entry["file"])
        expect = (
            str(entry["sha256"]),
            int(entry["bytes"]),
            str(entry["dtype"]),
            tuple(int(s) for s in entry["shape"]),
        )
    except (KeyError, TypeError, ValueError):
        raise _bad(f"manifest entry of array {name!r} is malformed", root / MANIFEST) from None
    fpath = root / fname
    parts = fname.split("/")
    inside = (
        (len(parts) == 1 if gen is None else len(parts) == 2 and parts[0] == gen)
        and Path(parts[-1]).name == parts[-1]
        and parts[-1] not in ("", ".", "..")
    )
    if not inside or not fpath.is_file():
        raise _bad(f"array {name!r}: file {fname!r} is missing", fpath)
    sha, size, dtype, shape = expect
    found_size = fpath.stat().st_size
    if found_size != size:
        raise _bad(
            f"array {name!r}: file has {found_size} bytes, the manifest says {size} "
            "(truncated or altered)",
            fpath,
        )
    if _sha256(fpath) != sha:
        raise _bad(f"array {name!r}: SHA-256 differs from the manifest (file altered)", fpath)
    try:
        arr = np.load(fpath, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise _bad(f"array {name!r} cannot be read: {e}", fpath) from None
    if arr.dtype.str != dtype or arr.shape != shape:
        raise _bad(
            f"array {name!r} is {arr.dtype.str}{list(arr.shape)}, the manifest says "
            f"{dtype}{list(shape)}",
            fpath,
        )
    out: np.ndarray = arr
    return out


def _bad(message: str, path: Path | str, field: str | None = None) -> DecodeError:
    return DecodeError(
        f"corrupt checkpoint: {message}",
        Where(file=str(path), column=field),
        reason="corrupt_checkpoint",
    )


# ---------------------------------------------------------------------- leftovers and locks
def _clean(root: Path) -> None:
    """Deletes what no committed state needs and no live save holds: generations other than
    the manifest's (and the temporary manifests of dead saves), version-1 array files the
    manifest does not list. Call with ``root``'s lock held exclusively."""
    try:
        manifest = _manifest(root)
    except DecodeError:
        manifest = None
    current = None if manifest is None else manifest.get("generation")
    listed = set()
    if manifest is not None and manifest["format"] == _FORMAT_V1:
        listed = {str(e.get("file")) for e in manifest["arrays"].values() if isinstance(e, dict)}
    entries = sorted(root.iterdir(), key=lambda p: not _GEN.fullmatch(p.name))  # gens first
    for p in entries:
        name = p.name
        if _GEN.fullmatch(name) and name != current:
            fd = _try_lock_dir(p)
            if fd is not None:  # no live save holds it
                shutil.rmtree(p, ignore_errors=True)
                _unlock(fd)
        elif (m := _TMP_MANIFEST.fullmatch(name)) and not (root / m.group(1)).exists():
            p.unlink(missing_ok=True)  # its save died (its generation is gone, or never was)
        elif manifest is not None and _V1_ARRAY.fullmatch(name) and name not in listed:
            p.unlink(missing_ok=True)


@contextlib.contextmanager
def _locked(
    root: Path, *, exclusive: bool, wait: bool = True, create: bool = True
) -> Iterator[bool]:
    """Holds ``root/.lock`` (yields False when ``wait`` is False and someone else holds it; a
    shared lock also yields False, holding nothing, where the lock file cannot be opened: a
    read-only checkpoint, or a folder that is not one)."""
    if fcntl is None:  # pragma: no cover
        yield True
        return
    try:
        mode = os.O_RDWR | os.O_CREAT if create else os.O_RDONLY
        fd = os.open(root / LOCK, mode, 0o644)
    except OSError as e:
        if exclusive or e.errno not in (errno.EROFS, errno.EACCES, errno.ENOENT, errno.ENOTDIR):
            raise
        yield False
        return
    try:
        flags = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        try:
            fcntl.flock(fd, flags if wait else flags | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing releases the lock


def _lock_dir(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY)
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _try_lock_dir(path: Path) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
    return fd


def _unlock(fd: int) -> None:
    os.close(fd)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------- on an object store
def _write_store(dest: Location, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> str:
    """:func:`write` on a store, where nothing renames: the arrays go to a new generation
    ``g-<hex>/`` (objects no manifest names are never read), then ``manifest.json`` is written
    whole in one PUT (the commit point), then the generation the old manifest named is deleted.
    There are no locks on a store: of two saves at once, the manifest written last wins, whole;
    a generation a dead save left stays until you remove it (no manifest names it)."""
    try:
        if (
            dest.exists()
            and not dest.join(MANIFEST).exists()
            and any(not _ours(loc.name) for loc, _ in dest.children())
        ):
            raise ConfigError(
                f"checkpoint path {dest.uri!r} exists and is not a checkpoint; refusing to "
                "replace it"
            )
        try:
            old = json.loads(dest.join(MANIFEST).read_bytes())
        except (StorageError, ValueError):
            old = None
        gen = f"g-{uuid.uuid4().hex}"
        entries = {}
        for i, (name, arr) in enumerate(arrays.items()):
            arr = np.asarray(arr)
            if arr.dtype.hasobject:
                raise TypeError(f"array {name!r} has object dtype; checkpoints hold no pickles")
            buf = io.BytesIO()
            np.save(buf, arr, allow_pickle=False)
            data = buf.getvalue()
            fname = f"a{i:04d}.npy"
            dest.join(gen, fname).write_bytes(data)
            entries[name] = {
                "file": f"{gen}/{fname}",
                "sha256": hashlib.sha256(data).hexdigest(),
                "dtype": arr.dtype.str,
                "shape": list(arr.shape),
                "bytes": len(data),
            }
        manifest = {"format": FORMAT, "generation": gen, "meta": meta, "arrays": entries}
        dest.join(MANIFEST).write_bytes(json.dumps(manifest, indent=1, sort_keys=True).encode())
        before = old.get("generation") if isinstance(old, dict) else None
        if isinstance(before, str) and _GEN.fullmatch(before) and before != gen:
            dest.join(before).delete_tree()
    except StorageError:
        raise
    except OSError as e:
        raise storage_error(e, dest) from None
    return dest.uri


def _read_store(root: Location) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """:func:`read` on a store: the manifest, then every array it names, checked as on disk
    (size, SHA-256, dtype, shape) before anything is returned."""
    mpath = root.join(MANIFEST)
    try:
        raw = mpath.read_bytes()
    except StorageError as e:
        if "not found" not in str(e):
            raise
        raise _bad(f"no {MANIFEST} in {root.uri!r}: not a checkpoint", mpath.uri) from None
    try:
        manifest = json.loads(raw)
    except ValueError as e:
        raise _bad(f"manifest is not valid JSON ({e})", mpath.uri) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise _bad(f"manifest format is {found!r}, expected {FORMAT!r}", mpath.uri)
    entries, meta = manifest.get("arrays"), manifest.get("meta")
    gen = manifest.get("generation")
    if not isinstance(entries, dict) or not isinstance(meta, dict):
        raise _bad("manifest lacks its 'arrays' or 'meta' section", mpath.uri)
    if not (isinstance(gen, str) and _GEN.fullmatch(gen)):
        raise _bad(f"manifest names generation {gen!r}, expected 'g-<32 hex digits>'", mpath.uri)
    arrays = {}
    for name, entry in entries.items():
        try:
            fname = str(entry["file"])
            sha, size = str(entry["sha256"]), int(entry["bytes"])
            dtype, shape = str(entry["dtype"]), tuple(int(s) for s in entry["shape"])
        except (KeyError, TypeError, ValueError):
            raise _bad(f"manifest entry of array {name!r} is malformed", mpath.uri) from None
        parts = fname.split("/")
        at = root.join(*parts)
        if len(parts) != 2 or parts[0] != gen or not _V1_ARRAY.fullmatch(parts[1]):
            raise _bad(f"array {name!r}: file {fname!r} is missing", at.uri)
        try:
            data = at.read_bytes(size)
        except StorageError:
            raise _bad(f"array {name!r}: file {fname!r} is missing", at.uri) from None
        if len(data) != size:
            raise _bad(
                f"array {name!r}: file has {len(data)} bytes or more, the manifest says {size} "
                "(truncated or altered)",
                at.uri,
            )
        if hashlib.sha256(data).hexdigest() != sha:
            raise _bad(f"array {name!r}: SHA-256 differs from the manifest (file altered)", at.uri)
        try:
            arr = np.load(io.BytesIO(data), allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:
            raise _bad(f"array {name!r} cannot be read: {e}", at.uri) from None
        if arr.dtype.str != dtype or arr.shape != shape:
            raise _bad(
                f"array {name!r} is {arr.dtype.str}{list(arr.shape)}, the manifest says "
                f"{dtype}{list(shape)}",
                at.uri,
            )
        arrays[name] = arr
    return meta, arrays
