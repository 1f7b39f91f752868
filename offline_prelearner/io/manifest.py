"""Reading a committed folder: the files its ``_manifest.json`` lists, and nothing else.

A job (``process``, ``convert``, ``record``...) writes its output into a staging folder and commits
it by writing ``_manifest.json`` last (:mod:`offline_prelearner.jobs.commit`). The manifest is the
commit point: a folder that holds one is *committed*, and what it holds is what the manifest lists
(``files``, under ``files_dir``), never what happens to lie there. ``stats.json``, the manifest
itself, a quarantine file, a stray copy or a file a crashed attempt left behind are not data.

Reading checks each listed file against what the manifest recorded, cheaply: present, and of the
recorded size (one ``stat``, which listing costs anyway). The sha256 the manifest records is *not*
recomputed on every read (it would read every byte twice: a 10 GB pixel set costs seconds more
each time); :func:`verify_checksums` does that on demand. A file of the recorded size whose bytes
changed in place is therefore read as it is; a truncated, grown, replaced or missing file is an
error naming it.

What a committed folder *is* comes from the manifest too (:attr:`Manifest.content`): ``"dataset"``
(a ``convert`` or ``record`` output: episodes or rows, read like any input) or ``"samples"`` (a
``process`` output: learner-ready samples, one row per sampled transition with its n-step fields;
reading them again as recorded experience would compound the n-step returns, so readers refuse
them in one line).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..errors import DataError, Where
from .stores import is_remote, join_path, locate, not_regular, open_local

__all__ = [
    "MANIFEST_FILE",
    "Manifest",
    "ManifestFile",
    "verify_checksums",
]

MANIFEST_FILE = "_manifest.json"

#: ``Manifest.content`` of a ``process`` output (the default ``files_dir`` of such a job).
SAMPLES = "samples"
DATASET = "dataset"


class ManifestFile(NamedTuple):
    """One file a manifest lists: its path (the folder's path joined with ``files_dir/name``)
    and what the job recorded (``bytes`` and ``sha256`` may be absent in hand-written ones)."""

    path: str
    rows: int | None
    bytes: int | None
    sha256: str | None


@dataclass(frozen=True)
class Manifest:
    """A committed folder's manifest (see the module docstring).

    Attributes:
        folder: The committed folder (the one holding ``_manifest.json``).
        content: ``"samples"`` (a ``process`` output) or ``"dataset"`` (anything else).
        files: The listed data files, in the manifest's order.
        data: The manifest as JSON.
    """

    folder: str
    content: str
    files: tuple[ManifestFile, ...]
    data: dict[str, Any]

    @property
    def path(self) -> str:
        """Path of the manifest file in ``folder``."""
        return join_path(self.folder, MANIFEST_FILE)

    @classmethod
    def read(cls, folder: str | os.PathLike[str]) -> Manifest:
        """The manifest of ``folder``.

        Args:
            folder: The committed folder, a local path or a store URI (``s3://...``; a trailing
                ``/`` is dropped); its ``_manifest.json`` is read.

        Returns:
            The manifest, its files' paths joined onto ``folder`` (and its ``files_dir``).

        Raises:
            FileNotFoundError: A local folder has no manifest (it was never committed).
            StorageError: The store refused or could not answer, or holds no manifest there.
            DataError: The manifest is not JSON, or not a manifest (no ``files`` list), or names
                a file outside its folder; the error names the manifest.
        """
        folder = os.fspath(folder)
        remote = is_remote(folder)
        if remote:
            folder = folder.rstrip("/")
        path = join_path(folder, MANIFEST_FILE)
        try:
            if remote:
                data = json.loads(locate(path).read_bytes())
            else:
                with open_local(path) as fh:
                    data = json.loads(fh.read())
        except ValueError as e:
            raise _bad(path, f"is not JSON ({str(e).splitlines()[0]})") from None
        if not isinstance(data, dict) or not isinstance(data.get("files"), list):
            raise _bad(path, "is not a job manifest (no 'files' list)")
        files_dir = data.get("files_dir", SAMPLES)
        if not isinstance(files_dir, str) or not _inside(files_dir):
            raise _bad(path, f"names 'files_dir' {files_dir!r}, not a folder inside its own")
        content = data.get("content")
        if content not in (SAMPLES, DATASET):
            content = SAMPLES if files_dir == SAMPLES else DATASET  # manifests before "content"
        base = join_path(folder, files_dir, "") if files_dir else join_path(folder, "")
        sep = "/" if remote else os.sep
        files = []
        for entry in data["files"]:
            name = entry.get("name") if isinstance(entry, dict) else None
            if not isinstance(name, str) or not name or not _inside(name):
                raise _bad(path, f"lists {name!r}, not a file name inside its folder")
            sha = entry.get("sha256")
            files.append(
                ManifestFile(
                    base + (name if sep == "/" else name.replace("/", sep)),
                    _int_or_none(entry.get("rows")),
                    _int_or_none(entry.get("bytes")),
                    sha if isinstance(sha, str) else None,
                )
            )
        return cls(folder, content, tuple(files), data)

    def checked_paths(self) -> list[str]:
        """The listed files' paths, each checked present and of its recorded size.

        Raises:
            FileNotFoundError: A listed file is missing (named, with the manifest).
            DataError: A listed file's size differs from the recorded one (``reason`` =
                ``"manifest_mismatch"``), or it is not a regular file (a FIFO, a device: reading
                it would block; ``reason="not_regular_file"``).
        """
        sizes = _store_sizes(self.folder) if is_remote(self.folder) else None
        for f in self.files:
            try:
                if sizes is None:
                    st = os.stat(f.path)
                    refused = not_regular(f.path, st.st_mode)  # a FIFO of the recorded 0 bytes
                    if refused is not None:
                        raise refused
                size = st.st_size if sizes is None else sizes[f.path]
            except (FileNotFoundError, KeyError):
                raise FileNotFoundError(
                    f"{f.path!r} is listed in {self.path!r} but missing: the folder changed "
                    "after its job committed it; restore the file or run that job again"
                ) from None
            self.check_size(f, size)
        return [f.path for f in self.files]

    def check_size(self, file: ManifestFile, size: int) -> None:
        """Raises a DataError naming ``file`` if ``size`` is not the size the job recorded.

        Args:
            file: One of this manifest's :attr:`files`; one with no recorded size passes.
            size: The file's size now, in bytes.

        Raises:
            DataError: The sizes differ (``reason="manifest_mismatch"``).
        """
        if file.bytes is not None and size != file.bytes:
            raise DataError(
                f"the file is {size} bytes, but {self.path!r} recorded {file.bytes}: it changed "
                "after its job committed it; run that job again",
                Where(file=file.path),
                reason="manifest_mismatch",
            )


def verify_checksums(folder: str | os.PathLike[str]) -> list[str]:
    """Every listed file of a committed folder checked against its recorded size *and* sha256
    (reads every byte: not done on ordinary reads, see the module docstring); returns the paths.

    Args:
        folder: The committed folder, a local path or a store URI. A file whose entry has no
            sha256 (an older manifest) is checked by size only.

    Returns:
        The listed files' paths, in the manifest's order.

    Raises:
        FileNotFoundError / DataError: As :meth:`Manifest.checked_paths`; a sha256 that differs
            is a DataError naming the file (``reason="manifest_mismatch"``).
    """
    import hashlib

    manifest = Manifest.read(folder)
    paths = manifest.checked_paths()
    for f in manifest.files:
        if f.sha256 is None:
            continue
        h = hashlib.sha256()
        with locate(f.path).open_input_stream() if is_remote(f.path) else open_local(f.path) as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        if h.hexdigest() != f.sha256:
            raise DataError(
                f"the file's sha256 differs from the one {manifest.path!r} recorded: it changed "
                "after its job committed it; run that job again",
                Where(file=f.path),
                reason="manifest_mismatch",
            )
    return paths


def _store_sizes(folder: str) -> dict[str, int]:
    """The size of every file under a store's folder, by URI (one listing, not a request per
    file)."""
    import pyarrow.fs as pafs

    from .stores import storage_error

    loc = locate(folder)
    try:
        infos = loc.fs.get_file_info(pafs.FileSelector(loc.path, recursive=True))
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise storage_error(e, loc) from None
    return {
        loc.with_path(i.path).uri: int(i.size or 0) for i in infos if i.type == pafs.FileType.File
    }


def _inside(name: str) -> bool:
    """A relative path that stays inside its folder (``a/b.parquet``, not ``../x`` or ``/x``)."""
    if name.startswith(("/", "\\")) or os.path.isabs(name):
        return False
    return ".." not in name or ".." not in name.replace("\\", "/").split("/")


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bad(path: str, what: str) -> DataError:
    return DataError(f"the folder's {MANIFEST_FILE} {what}", Where(file=path), reason="manifest")
