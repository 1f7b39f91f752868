"""Buffer checkpoints: a directory of ``.npy`` files and a JSON manifest. No pickle, anywhere.

Layout of ``<dir>/``::

    manifest.json     {"format": ..., "meta": {...}, "arrays": {name: {file, sha256, dtype,
                       shape, bytes}}}
    a0000.npy ...     one array each, written with allow_pickle=False

Writing is atomic: everything goes to a hidden temporary directory beside the target, is flushed
to disk, and the directory is renamed into place (an existing checkpoint there is replaced only
after the new one is complete). Reading verifies the manifest, every file's size and SHA-256 and
every array's dtype and shape before returning anything: a truncated, missing or altered file is a
:class:`~offline_prelearner.errors.DecodeError` naming it, never a silently smaller buffer.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, DecodeError, Where

__all__ = ["FORMAT", "read", "write"]

FORMAT = "offline_prelearner.replay_checkpoint/1"
MANIFEST = "manifest.json"


def write(path: str | Path, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> Path:
    """Writes ``meta`` (JSON-able) and ``arrays`` (numpy, no object dtype) to directory ``path``."""
    dest = Path(path)
    if dest.exists() and (
        not dest.is_dir() or (any(dest.iterdir()) and not (dest / MANIFEST).exists())
    ):
        raise ConfigError(
            f"checkpoint path {str(dest)!r} exists and is not a checkpoint; refusing to replace it"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.tmp-{uuid.uuid4().hex}"
    tmp.mkdir()
    try:
        entries = {}
        for i, (name, arr) in enumerate(arrays.items()):
            arr = np.asarray(arr)
            if arr.dtype.hasobject:
                raise TypeError(f"array {name!r} has object dtype; checkpoints hold no pickles")
            fname = f"a{i:04d}.npy"
            with open(tmp / fname, "wb") as f:
                np.save(f, arr, allow_pickle=False)
                f.flush()
                os.fsync(f.fileno())
            entries[name] = {
                "file": fname,
                "sha256": _sha256(tmp / fname),
                "dtype": arr.dtype.str,
                "shape": list(arr.shape),
                "bytes": (tmp / fname).stat().st_size,
            }
        manifest = {"format": FORMAT, "meta": meta, "arrays": entries}
        with open(tmp / MANIFEST, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(tmp)
        old = None
        if dest.exists():
            old = dest.parent / f".{dest.name}.old-{uuid.uuid4().hex}"
            dest.rename(old)
        tmp.rename(dest)
        _fsync_dir(dest.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def read(path: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Reads and verifies a checkpoint directory; returns ``(meta, arrays)``."""
    root = Path(path)
    mpath = root / MANIFEST
    if not mpath.is_file():
        raise _bad(f"no {MANIFEST} in {str(root)!r}: not a checkpoint, or an incomplete one", mpath)
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _bad(f"manifest is not valid JSON ({e})", mpath) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise _bad(f"manifest format is {found!r}, expected {FORMAT!r}", mpath)
    entries = manifest.get("arrays")
    meta = manifest.get("meta")
    if not isinstance(entries, dict) or not isinstance(meta, dict):
        raise _bad("manifest lacks its 'arrays' or 'meta' section", mpath)
    arrays = {}
    for name, entry in entries.items():
        arrays[name] = _read_array(root, name, entry)
    return meta, arrays


def _read_array(root: Path, name: str, entry: Any) -> np.ndarray:
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
    if Path(fname).name != fname or not fpath.is_file():
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
    return arr


def _bad(message: str, path: Path) -> DecodeError:
    return DecodeError(
        f"corrupt checkpoint: {message}", Where(file=str(path)), reason="corrupt_checkpoint"
    )


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
