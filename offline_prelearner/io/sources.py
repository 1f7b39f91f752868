"""Finding and opening input files without Ray: paths, globs, format detection, Parquet/JSON tables.

RLlib's recorder spreads one episode over several small files, and row data without a ``t``
column is only trustworthy in the order it was written: files are therefore always listed in
name order (directories recursively, symlinked folders followed), and readers keep their state
from one file to the next.

Every command and library entry point lists its input through :func:`expand_paths`, the one
listing: a folder that holds ``_manifest.json`` (what a job commits, :mod:`.manifest`) gives the
files its manifest lists and nothing else, so each command reads the folder another wrote. The
listing is one on every store (the local disk, ``s3://``, ``gs://``, ``az://``...: paths are
:class:`~.stores.Location` objects): the same rules, globs and name order; a store's files are
given as URIs, and only walking a folder differs (a store has no symlinks).

Minari datasets (a dataset folder, its ``data`` folder, or a dataset id resolved as Minari does)
expand to their data files in episode order, are detected as ``minari`` and read as step tables
(:mod:`.formats.minari.dataset`); ``.hdf5``/``.h5`` files are D4RL files (``d4rl``,
:mod:`.formats.d4rl.dataset`).
Both are read whole (a file is a unit of episodes, never cut into batches).

Which format a file is, and how a file of a format that is not Parquet or JSON lines is read as
a table, is asked of the registered formats (:mod:`.formats.registry`): nothing here names one.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import stat
from collections.abc import Iterator
from typing import NamedTuple, NoReturn, overload

import pyarrow as pa
import pyarrow.fs as pafs

from ..config import DEFAULT_LIMITS, DecodeLimits
from ..errors import DataError, UnsupportedFormatError, Where, shown
from .formats.lerobot.dataset import find_root, lerobot_files
from .formats.minari.dataset import find_data_dir, minari_files
from .formats.registry import (
    JSON_LINES_SUFFIXES,
    FileProbe,
    input_formats,
    open_bytes,
    whole_file_formats,
)
from .manifest import MANIFEST_FILE, SAMPLES, Manifest, ManifestFile
from .parquet_guard import open_parquet
from .stores import (
    Location,
    StorageError,
    forget_listings,
    input_file,
    is_remote,
    join_path,
    locate,
    not_regular,
)

__all__ = [
    "LISTING_REASONS",
    "check_formats_of",
    "check_one_format",
    "detect_format",
    "expand_paths",
    "format_of",
    "is_empty_parquet",
    "iter_tables",
    "read_table",
    "whole_file_formats",
]

_PARQUET_EXT = (".parquet", ".pq")
_JSON_EXT = JSON_LINES_SUFFIXES
_SKIP_NAMES = ("_SUCCESS", "_common_metadata", "_metadata")


#: ``DataError.reason`` of the listing's refusals: they decide which files are the input, so no
#: ``on_invalid`` policy skips or counts them (the CLI offers none). ``schema_drift``: files of
#: one input whose columns disagree (:func:`~.parquet_guard.check_drift`).
LISTING_REASONS = (
    "manifest",
    "manifest_mismatch",
    "not_listed",
    "symlink_loop",
    "file_name",
    "schema_drift",
)


def _is_data_file_name(name: str) -> bool:
    """Hidden (``.``) and metadata (``_``) names are never data, as pyarrow's dataset discovery
    and Spark have it (``_SUCCESS``, ``_metadata``, ``_manifest.json``, ``_temporary/``...)."""
    return not name.startswith((".", "_")) and name not in _SKIP_NAMES


def expand_paths(path: str | os.PathLike[str] | list[str]) -> list[str]:
    """The data files under ``path``: a file, a directory (recursive) or a glob; in name order.
    A Minari dataset (its folder, its ``data`` folder or its id) gives its data files in episode
    order. A list gives each item's files in turn.

    **A committed folder is read by its manifest.** A folder holding ``_manifest.json`` (what a
    job writes last, :mod:`.manifest`) gives exactly the files the manifest lists, checked present
    and of their recorded size, whether it is the path, a folder met inside it, or the folder (or
    an ancestor of the folder) of a file or glob match: ``stats.json``, the manifest, quarantine
    output and stray files beside them are never data. A listed file that is missing or changed
    size is an error naming it; a file named explicitly that its folder's manifest does not list
    is refused; glob matches it does not list are passed over. A ``process`` output (learner-ready
    samples, not recorded experience) is refused in one line.

    Folders are walked as pyarrow and Ray Data walk them: symlinked folders are followed (a link
    that leads back into a folder holding it is refused, naming the link), names starting with
    ``.`` or ``_`` (files and folders) are skipped.

    Args:
        path: A local path or store URI (``file://`` is read as the local path): a file, a
            folder, a glob, a Minari dataset's folder or id, or a list of any of these.

    Returns:
        The data files' paths (URIs for a store), never empty.

    Raises:
        FileNotFoundError: Nothing matches (naming the path), a symlink leads nowhere, or a file
            a manifest lists is missing.
        DataError: A symlink loop, a manifest that cannot be read, a listed file whose size
            differs, an explicitly named file its folder's manifest does not list.
        UnsupportedFormatError: The path is (or holds) a ``process`` output.
    """
    forget_listings()  # sizes a store's listing gives are the plan's for this expansion only
    return _expand(path)


def _expand(path: str | os.PathLike[str] | list[str]) -> list[str]:
    if isinstance(path, list):
        return [f for p in path for f in _expand(p)]
    text = os.fspath(path)
    if text.lower().startswith("file://"):
        text = locate(text).path  # file:///data/x is the local path /data/x
    files = _Listing().expand(text)
    if not files:
        raise FileNotFoundError(f"no data files at {text!r} (a file, directory or glob)")
    _check_names(files)
    return files


def _check_names(files: list[str]) -> None:
    """Refuses a name that is not UTF-8 (Python holds its bytes as surrogates): Arrow opens UTF-8
    paths only, and would fail with a traceback at the first read."""
    for f in files:
        try:
            f.encode("utf-8")
        except UnicodeEncodeError:
            name = os.fsencode(os.path.basename(f))
            raise DataError(
                f"the file name {shown(name)} is not valid UTF-8, and Arrow opens only UTF-8 "
                "paths: rename the file (or move it out of the input)",
                Where(file=f),
                reason="file_name",
            ) from None


class _Committed(NamedTuple):
    manifest: Manifest
    listed: dict[tuple[str, str], ManifestFile]  # (folder's URI, name) -> its entry


_GLOB_CHARS = ("*", "?", "[")


class _Listing:
    """One expansion of a path, on the local disk or a store: the committed folders met (each
    manifest read and checked once).

    Paths keep the form they were given in (relative stays relative; a store's are URIs); they
    are compared as (the folder's :class:`~.stores.Location` URI, name), the folder located once
    per folder (not per file: listing a committed folder of 2,000 files costs about what the stat
    of each does). The rules are the same on every store; only walking a folder differs
    (:meth:`_walk`): the local disk has symlinks, a store lists a prefix in one request.
    """

    def __init__(self) -> None:
        self._cwd = os.getcwd()
        self._locs: dict[str, Location] = {}  # folder as written -> where it is
        self._owner: dict[str, str | None] = {}  # folder URI -> committed folder holding it
        self._given: dict[str, str] = {}  # committed folder URI -> as the input names it
        self._manifests: dict[str, _Committed] = {}  # by folder URI

    def expand(self, text: str) -> list[str]:
        """The data files of one path (a file, a folder, a glob or a Minari dataset)."""
        loc = locate(text)
        data_dir = find_data_dir(text) if loc.local else None  # a local id too
        if data_dir is not None:
            return minari_files(data_dir)
        if find_root(text) is not None:  # a LeRobot dataset (local or on a store): its data files
            return lerobot_files(text)
        kind = _local_kind(text) if loc.local else loc.info().type
        if kind == pafs.FileType.File:
            return self.named_file(text)
        if kind == pafs.FileType.Directory:
            data_dir = None if loc.local else find_data_dir(text)
            return minari_files(data_dir) if data_dir is not None else self.folder(text)
        if loc.local:
            return self.matches([(f, _local_size(f)) for f in glob.glob(text, recursive=True)])
        if any(c in text for c in _GLOB_CHARS):
            return self.matches(_store_glob(loc))
        why = loc.missing()
        if why != "not found":
            raise StorageError(f"{loc.uri}: {why}")
        return []

    def _loc(self, folder: str) -> Location:
        got = self._locs.get(folder)
        if got is None:
            got = self._locs[folder] = locate(folder or ".")
        return got

    def _key(self, file: str) -> tuple[str, str]:
        head, name = os.path.split(file)
        return self._loc(head).uri, name

    # ------------------------------------------------------------------ committed folders
    def _committed(self, folder: str) -> _Committed:
        """A committed folder's manifest (read once; refused if it holds samples)."""
        key = self._loc(folder).uri
        got = self._manifests.get(key)
        if got is None:
            manifest = Manifest.read(folder)
            if manifest.content == SAMPLES:
                raise UnsupportedFormatError(
                    f"{folder!r} holds the samples 'process' wrote (learner-ready rows with their "
                    "n-step fields, not recorded experience), which process, convert, report and "
                    "the learner stream do not read again: train on them as they are (the files "
                    f"its {MANIFEST_FILE} lists; inspect describes them), or give the dataset "
                    "they were made from"
                )
            got = _Committed(manifest, {self._key(f.path): f for f in manifest.files})
            self._manifests[key] = got
        return got

    def _all_files(self, folder: str) -> list[str]:
        """Every file a committed folder lists, each checked (present, recorded size); a
        Minari dataset that a job committed gives its data files in its own order (on a store
        its files lie under the job's ``files_dir``)."""
        manifest = self._committed(folder).manifest
        files_dir = manifest.data.get("files_dir") or ""
        for where in dict.fromkeys((folder, join_path(folder, files_dir) if files_dir else folder)):
            data_dir = find_data_dir(where)
            if data_dir is not None:
                return minari_files(data_dir)
        return manifest.checked_paths()

    def _owner_of(self, folder: str) -> str | None:
        """The nearest committed folder holding ``folder`` (itself or an ancestor; on a store,
        in its bucket), written as ``folder`` is (relative or absolute, or a URI)."""
        d = self._loc(folder)
        chain = []
        owner: str | None = None
        while True:
            if d.uri in self._owner:
                owner = self._owner[d.uri]
                break
            chain.append(d.uri)
            if d.join(MANIFEST_FILE).is_file() and (
                len(chain) == 1 or self._is_job_manifest(d.uri)
            ):
                owner = d.uri
                break
            parent = d.parent
            if parent.path == d.path or (not d.local and "/" not in d.path.strip("/")):
                break  # the root, or the bucket
            d = parent
        for c in chain:
            self._owner[c] = owner
        if owner is None:
            return None
        if owner == self._loc(folder).uri:
            return folder or "."
        given = self._given.get(owner)
        if given is None:
            local = not is_remote(owner)
            given = (
                owner if not local or os.path.isabs(folder) else os.path.relpath(owner, self._cwd)
            )
            self._given[owner] = given
        return given

    def _is_job_manifest(self, folder: str) -> bool:
        """Whether an ancestor's ``_manifest.json`` is a job's (another tool's file of that name
        above the input is not ours to obey; the input's own folder is, and a broken one there is
        an error)."""
        try:
            Manifest.read(folder)
        except (DataError, OSError):
            return False
        return True

    def _listed(self, owner: str, file: str, size: int) -> bool:
        """Whether ``owner``'s manifest lists ``file`` (then checked of its recorded size)."""
        committed = self._committed(owner)
        entry = committed.listed.get(self._key(file))
        if entry is None:
            return False
        committed.manifest.check_size(entry, size)
        return True

    # ------------------------------------------------------------------ the three kinds of path
    def named_file(self, file: str) -> list[str]:
        """A file named as the path: itself, unless a manifest says otherwise."""
        folder, name = os.path.split(file)
        if name == MANIFEST_FILE:
            return self._all_files(folder or ".")
        owner = self._owner_of(folder)
        if owner is None:
            return [file]
        size = os.stat(file).st_size if not is_remote(file) else locate(file).size()
        if not self._listed(owner, file, size):
            raise DataError(
                f"not a data file of the committed folder {owner!r}: its {MANIFEST_FILE} does "
                "not list it (give the folder to read its data files)",
                Where(file=file),
                reason="not_listed",
            )
        return [file]

    def matches(self, found: list[tuple[str, int | None]]) -> list[str]:
        """A glob's matches, each with its size (None: not a file): data files (a manifest's
        files for a matched manifest); matches inside a committed folder only where its
        manifest lists them."""
        out: set[str] = set()
        for f, size in found:
            if size is None:
                continue  # not a file
            head, name = os.path.split(f)
            if name == MANIFEST_FILE:
                out.update(self._all_files(head or "."))
                continue
            if not _is_data_file_name(name):
                continue
            owner = self._owner_of(head)
            if owner is not None and not self._listed(owner, f, size):
                continue  # not data: its committed folder's manifest does not list it
            out.add(f)
        return sorted(out)

    def folder(self, top: str) -> list[str]:
        """A folder: walked in name order, or, inside a committed folder, what that lists."""
        owner = self._owner_of(top)
        if owner is not None:
            listed = self._all_files(owner)
            if self._loc(owner).uri == self._loc(top).uri:
                return sorted(listed)
            under = join_path(self._loc(top).uri, "")
            return sorted(f for f in listed if join_path(self._key(f)[0], "").startswith(under))
        files, committed = _walk(top)
        for c in committed:
            files.extend(self._all_files(c))
        files.sort()
        return files


def _local_kind(path: str) -> pafs.FileType:
    """A local path's kind through symlinks; a FIFO, device or socket is refused (reading one
    blocks or never ends), a path that is not there is NotFound (a glob, perhaps)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP):
            return pafs.FileType.NotFound  # as Path.is_file / is_dir answer it: a glob, perhaps
        raise
    if stat.S_ISDIR(mode):
        return pafs.FileType.Directory
    _refuse_if_not_regular(path, mode)
    return pafs.FileType.File


def _refuse_if_not_regular(path: str, mode: int) -> None:
    refused = not_regular(path, mode)
    if refused is not None:
        raise refused


def _local_size(f: str) -> int | None:
    """A glob's local match's size (through a symlink), None for a folder; a match with a data
    file's name that is a FIFO, device or socket is refused."""
    try:
        st = os.lstat(f)
        if stat.S_ISLNK(st.st_mode):
            st = os.stat(f)
    except FileNotFoundError:
        if _is_data_file_name(os.path.basename(f)):
            _dangling(f)
        return None
    if stat.S_ISDIR(st.st_mode):
        return None
    if _is_data_file_name(os.path.basename(f)):
        _refuse_if_not_regular(f, st.st_mode)
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def _store_glob(loc: Location) -> list[tuple[str, int | None]]:
    """A store's glob's matching files (URIs) with their sizes, as :func:`glob.glob` matches."""
    parts = loc.path.split("/")
    first = next(i for i, p in enumerate(parts) if any(c in p for c in _GLOB_CHARS))
    if first == 0:
        raise StorageError(f"{loc.uri}: a glob in the bucket name is not supported")
    base = loc.with_path("/".join(parts[:first]))
    if base.info().type == pafs.FileType.NotFound:
        why = base.missing()
        if why != "not found":
            raise StorageError(f"{base.uri}: {why}")
        return []
    return [(f.uri, f.size()) for f in base.glob("/".join(parts[first:]))]


def _walk(top: str) -> tuple[list[str], list[str]]:
    """A folder's data files (``.``/``_`` names skipped, files and folders) and the committed
    folders under it (read through their manifests, whatever else lies under them)."""
    if is_remote(top):
        return _walk_store(locate(top))
    return _walk_local(top)


def _walk_store(top: Location) -> tuple[list[str], list[str]]:
    """:func:`_walk` on a store: one listing of the prefix (a store has no symlinks)."""
    files = top.walk()
    base = top.path.rstrip("/") + "/"
    rel = [f.path[len(base) :] for f in files]
    committed = sorted(
        {r[: -len(MANIFEST_FILE)] for r in rel if r.split("/")[-1] == MANIFEST_FILE
         and all(_is_data_file_name(p) for p in r.split("/")[:-1])},
        key=len,
    )  # fmt: skip
    roots: list[str] = []
    for c in committed:
        if not any(c.startswith(r) for r in roots):
            roots.append(c)
    data = [
        f.uri
        for f, r in zip(files, rel, strict=True)
        if not any(r.startswith(root) for root in roots)
        and all(_is_data_file_name(p) for p in r.split("/"))
    ]
    return data, [top.join(r.rstrip("/")).uri for r in roots]


def _walk_local(top: str) -> tuple[list[str], list[str]]:
    """:func:`_walk` on the local disk, as pyarrow and Ray Data walk it: symlinked folders are
    followed (a link leading back into a folder holding it is refused, naming the link)."""
    files: list[str] = []
    committed: list[str] = []
    st = os.stat(top)
    # Each folder to read with the folders above it (by device and inode: a symlinked one
    # counts as its target) and the last symlink on its path (what a loop is blamed on).
    stack: list[tuple[str, dict[tuple[int, int], str], str | None]] = [
        (top, {(st.st_dev, st.st_ino): top}, None)
    ]
    while stack:
        d, above, link = stack.pop()
        with os.scandir(d) as it:
            entries = list(it)
        if any(e.name == MANIFEST_FILE and e.is_file() for e in entries):
            committed.append(d)
            continue
        for e in entries:
            if not _is_data_file_name(e.name):
                continue
            try:
                is_dir, is_file = e.is_dir(), e.is_file()  # follow symlinks, as pyarrow does
            except OSError as err:
                if err.errno != errno.ELOOP:
                    raise
                _loop(e.path, e.path)
            if is_dir:
                st = e.stat()
                key = (st.st_dev, st.st_ino)
                via = e.path if e.is_symlink() else link
                if key in above:
                    _loop(via or e.path, above[key])
                stack.append((e.path, {**above, key: e.path}, via))
            elif is_file:
                files.append(e.path)
            else:
                try:
                    mode = e.stat().st_mode
                except OSError as err:
                    if err.errno == errno.ELOOP:
                        _loop(e.path, e.path)
                    if e.is_symlink():
                        _dangling(e.path)
                    raise
                _refuse_if_not_regular(e.path, mode)  # a FIFO, a device, a socket
    return files, committed


def _dangling(link: str) -> NoReturn:
    raise FileNotFoundError(
        f"{link!r} is a symlink to a missing file ({os.readlink(link)!r}); restore its "
        "target or remove the link"
    )


def _loop(link: str, back_to: str) -> NoReturn:
    raise DataError(
        f"a symlink loop: following it leads back to {back_to!r}, a folder on its own path; "
        "remove the link or point it elsewhere",
        Where(file=link),
        reason="symlink_loop",
    )


def detect_format(files: list[str], *, check: bool = True) -> str:
    """The registered format of the first file (``rows``, ``episodes``, ``sample_batches``,
    ``minari``, ``d4rl`` or a user's), from its name and content; a mix of formats among the
    files is refused (:func:`check_one_format`).

    Args:
        files: The input's data files, as :func:`expand_paths` gives them. The first that holds
            rows says the format (the first file, if all are empty partitions).
        check: Refuse a mix of formats here (False: the caller checks, as the batch job's
            planning scan does from the footers it reads anyway).

    Returns:
        The format's name.

    Raises:
        UnsupportedFormatError: ``files`` is empty, the first file's format cannot be told, or
            the files hold more than one format.
    """
    if not files:
        raise UnsupportedFormatError("no files to detect a format from")
    # An empty partition (a Parquet file of zero rows, as Spark writes) may have no columns at
    # all: the first file holding rows says the format, if any does.
    first = next((f for f in files if not is_empty_parquet(f)), files[0])
    fmt = format_of(first)
    if check:
        check_one_format(files)
    return fmt


def is_empty_parquet(path: str) -> bool:
    """A valid Parquet file of zero rows (an empty partition: read as nothing, never refused).

    Args:
        path: A local path or store URI. JSON-lines, HDF5 and Arrow files are never it (not
            opened); a file that is not Parquet, or cannot be opened, is not either.
    """
    if path.endswith(_JSON_EXT) or path.endswith((".hdf5", ".h5", ".arrow")):
        return False
    footer = FileProbe(path).footer
    return footer is not None and footer.num_rows == 0


def check_one_format(files: list[str]) -> None:
    """Refuses files of more than one format (rows, msgpack episodes, old-stack batches: those
    not read whole) in one input, in one line naming each format and its files: a reader given
    another format's file would read it as nothing, or as rows missing columns. A file whose
    format cannot be told (empty, corrupt) is left to the reader, which refuses or counts it.

    Args:
        files: The input's data files; each is opened for its footer or first lines (fewer
            than two: nothing is checked). Files of a format read whole (Minari, D4RL:
            :func:`whole_file_formats`) are not compared.

    Raises:
        UnsupportedFormatError: Two or more of rows, episodes and sample batches are present.
    """
    if len(files) < 2:
        return
    check_formats_of(files, [_format_or_none(f) for f in files])


def _format_or_none(path: str) -> str | None:
    try:
        return format_of(path, empty=None)
    except (UnsupportedFormatError, OSError):
        return None


def check_formats_of(files: list[str], formats: list[str | None]) -> None:
    """:func:`check_one_format` over formats already told (a planning scan tells each file's
    from the footer it read).

    Args:
        files: The input's data files.
        formats: Each file's :func:`format_of` with ``empty=None`` (None: an empty partition,
            or a format that cannot be told).

    Raises:
        UnsupportedFormatError: Two or more of rows, episodes and sample batches are present.
    """
    by_format: dict[str, list[str]] = {}
    whole = whole_file_formats()
    for f, fmt in zip(files, formats, strict=True):
        if fmt is None:  # an empty partition holds no format's rows
            continue
        if fmt not in whole:
            by_format.setdefault(fmt, []).append(f)
    if len(by_format) < 2:
        return

    def listed(names: list[str]) -> str:
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        return ", ".join(os.path.basename(n) for n in names[:3]) + more

    parts = [f"{fmt!r} ({listed(names)})" for fmt, names in by_format.items()]
    raise UnsupportedFormatError(
        f"mixed formats in one input: {' and '.join(parts)}; run one job per format "
        "(give the files of one format as the path, e.g. a glob such as 'dir/*.parquet')"
    )


@overload
def format_of(first: str, *, probe: FileProbe | None = None) -> str: ...
@overload
def format_of(first: str, *, empty: str | None, probe: FileProbe | None = None) -> str | None: ...
def format_of(
    first: str, *, empty: str | None = "rows", probe: FileProbe | None = None
) -> str | None:
    """The format of one file, from its name and content (see :func:`detect_format`); ``empty``
    for a Parquet file of zero rows (an empty partition), whose columns may say nothing.

    Args:
        first: The file's path or URI (the first data file, for a whole input).
        empty: What a Parquet file of zero rows is: ``"rows"`` (the default) reads its
            columns as any other file; None or another name is returned as it is.
        probe: The file's probe where the caller holds one (its footer read already).

    Returns:
        The first registered format whose ``detect_file`` claims the file, in detection order
        (:func:`~.formats.registry.input_formats`): ``"minari"``, ``"d4rl"``, ``"episodes"``,
        ``"sample_batches"``, a user's format, else ``"rows"``; ``empty`` for an empty Parquet
        file where ``empty`` is not ``"rows"`` (before any Parquet or JSON-lines format is asked).

    Raises:
        UnsupportedFormatError: A JSON-lines file that is not SampleBatch records, or a file
            that is neither Parquet nor JSON lines.
    """
    probe = probe if probe is not None else FileProbe(first)
    for spec in input_formats():
        if spec.detect_file is None:
            continue
        if spec.read_table is None and empty != "rows":  # a table format: an empty partition?
            footer = probe.footer
            if footer is not None and footer.num_rows == 0:
                return empty
        if spec.detect_file(probe):
            return spec.name
    if probe.is_json_lines:
        raise UnsupportedFormatError(
            f"cannot detect the format of {first!r}: not JSON lines of SampleBatch records"
        )
    if _holds_json_lines(first):
        raise UnsupportedFormatError(
            f"cannot detect the format of {first!r}: it holds JSON lines but is not named as "
            f"such; rename it to end in .json (or {', '.join(JSON_LINES_SUFFIXES[1:])})"
        )
    why = " ".join(str(probe.footer_error).split())  # pyarrow's message may span lines
    raise UnsupportedFormatError(
        f"cannot detect the format of {first!r}: not a Parquet or JSON-lines file ({why})"
    )


def _holds_json_lines(path: str) -> bool:
    """Whether a file (not named as JSON lines, and not Parquet) starts with a JSON object on
    its first line: JSON lines under another name."""
    try:
        with open_bytes(path) as fh:
            first = fh.readline(1 << 20).strip()
        return isinstance(json.loads(first), dict)
    except (OSError, ValueError, DataError):
        return False


def read_table(
    path: str, columns: list[str] | None = None, limits: DecodeLimits = DEFAULT_LIMITS
) -> pa.Table:
    """One file as an Arrow table; unreadable files are a DataError naming the file.

    Parquet and JSON lines as they are; a file of a format with its own ``read_table`` (a Minari
    data file, a D4RL file) as that format reads it, a step table. A
    Parquet file whose footer claims more than ``limits`` allow is refused before it is read
    (:mod:`.parquet_guard`).

    Args:
        path: The file's local path or store URI.
        columns: The columns to read from a Parquet file; None reads all. A name the file lacks
            is refused (a DataError). Other formats are read whole.
        limits: The decode bounds; a Parquet file is checked against its expansion and row-group
            bounds before it is read.

    Returns:
        The file's table (a step table for Minari, D4RL and other formats' own files).

    Raises:
        DataError: The file cannot be read or lacks a requested column (``reason=
            "unreadable_file"``); for a JSON-lines file it names the first line that is not an
            object.
    """
    probe = FileProbe(path)
    for spec in input_formats():
        if spec.read_table is not None and spec.detect_file is not None and spec.detect_file(probe):
            return spec.read_table(path, limits)
    try:
        if path.endswith(_JSON_EXT):
            import pyarrow.json as pajson

            return pajson.read_json(input_file(path))
        pf = open_parquet(path, limits)
        missing = [c for c in columns or () if c not in pf.schema_arrow.names]
        if missing:  # as pq.read_table has it (ParquetFile.read would leave them out)
            raise pa.ArrowInvalid(f"no column {missing[0]!r} in the file")
        return pf.read(columns=columns)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        bad = _first_bad_json_line(path) if path.endswith(_JSON_EXT) else None
        if bad is not None:
            msg = f"line {bad[0]} is {bad[1]}, not a JSON object (one record per line)"
        raise DataError(
            f"cannot read the file: {msg}", Where(file=path), reason="unreadable_file"
        ) from None


def _first_bad_json_line(path: str) -> tuple[int, str] | None:
    """The first line of a JSON-lines file that is not an object, and what it is instead (only
    on the error path: pyarrow's reader names no line)."""
    try:
        with open_bytes(path) as fh:
            for n, raw in enumerate(fh, start=1):
                if not raw.strip():
                    continue
                try:
                    value = json.loads(raw)
                except ValueError:
                    return n, "not valid JSON"
                if not isinstance(value, dict):
                    return n, f"a JSON {type(value).__name__}"
    except OSError:
        return None
    return None


def iter_tables(
    files: list[str], columns: list[str] | None = None, limits: DecodeLimits = DEFAULT_LIMITS
) -> Iterator[tuple[str, pa.Table]]:
    """Yields ``(path, table)`` per file, in the given (name) order.

    Args:
        files: The data files to read, one at a time (one table in memory at once).
        columns: As in :func:`read_table`: the Parquet columns to read, None for all.
        limits: As in :func:`read_table`.

    Yields:
        Each file's path and its table, as :func:`read_table` reads it.
    """
    for f in files:
        yield f, read_table(f, columns, limits)
