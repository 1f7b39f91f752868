"""Where files live: one path layer over local disks and object stores.

Every path the project takes (inputs, ``--out``, ``--quarantine-dir``, ``--config``, checkpoints)
may be a local path, ``file://...``, ``s3://bucket/key``, ``gs://bucket/key``,
``az://container/path`` or ``abfs[s]://container@account.dfs.core.windows.net/path``.
:func:`locate` turns it into a :class:`Location`: a ``pyarrow.fs`` filesystem and the path in
it. S3, GCS and Azure Blob are pyarrow's native filesystems (what Ray Data reads with); another
scheme that fsspec knows goes through ``pyarrow.fs.PyFileSystem(FSSpecHandler(...))``.

Credentials and endpoints come from each store's standard chain, never from our flags:

* S3: ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, else the AWS
  SDK's own chain (``AWS_PROFILE``, ``~/.aws``, instance roles); ``AWS_ENDPOINT_URL_S3`` or
  ``AWS_ENDPOINT_URL`` for a non-AWS server (MinIO, SeaweedFS); ``AWS_REGION`` or
  ``AWS_DEFAULT_REGION``.
* GCS: application-default credentials; ``STORAGE_EMULATOR_HOST`` for an emulator.
* Azure: ``AZURE_STORAGE_CONNECTION_STRING``, or ``AZURE_STORAGE_ACCOUNT_NAME`` (the account
  of ``az://``) with ``AZURE_STORAGE_ACCOUNT_KEY`` (else Azure's default credential chain).

A store that cannot be reached answers within seconds (``OFFLINE_PRELEARNER_STORE_TIMEOUT``,
default 10 s per request, 3 attempts), and :func:`storage_error` says what failed in one line:
no such bucket, access denied, endpoint down.

Listing is recursive and in name order on every store, as on a local disk; object stores have no
folders, so a "folder" is a prefix and an empty one does not exist.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import socket
import stat
import threading
from dataclasses import dataclass
from typing import Any, BinaryIO, NamedTuple
from urllib.parse import unquote, urlsplit

import pyarrow.fs as pafs

from ..errors import DataError, StorageError, Where, _NotFound

__all__ = [
    "REMOTE_SCHEMES",
    "Location",
    "StorageError",
    "file_stat",
    "forget_listings",
    "input_file",
    "is_remote",
    "join_path",
    "locate",
    "not_regular",
    "open_local",
    "open_random_access",
    "read_file",
    "storage_error",
    "take_listed",
]

#: Schemes served by pyarrow's own filesystems; any other ``scheme://`` goes through fsspec.
REMOTE_SCHEMES = ("s3", "gs", "gcs", "az", "abfs", "abfss")
_AZURE = ("az", "abfs", "abfss")
#: Seconds a store request may take before it counts as failed (env overrides).
TIMEOUT_ENV = "OFFLINE_PRELEARNER_STORE_TIMEOUT"
_URI = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
#: A store's "forbidden" answer; a bare "403" also stands in job ids and ports ("T024032").
_HTTP_403 = re.compile(r"\bforbidden\b|(?:status|code|http)[^0-9a-z]{0,12}403\b")


def is_remote(path: str | os.PathLike[str] | Location) -> bool:
    """Whether ``path`` names an object store (or any non-local scheme), not the local disk.

    Args:
        path: A path as the user wrote it (a plain path or ``file://...`` is local; any other
            ``scheme://`` is not, whether or not the scheme is supported), or a
            :class:`Location`.
    """
    if isinstance(path, Location):
        return not path.local
    m = _URI.match(os.fspath(path))
    return m is not None and m.group(1).lower() != "file"


@dataclass(frozen=True)
class Location:
    """A file or folder on a store: the filesystem, the path in it, and how to write it back.

    Attributes:
        fs: The ``pyarrow.fs`` filesystem (``LocalFileSystem`` for local paths).
        path: The path inside ``fs``: an absolute local path, or ``bucket/key`` on a store.
        scheme: ``""`` for local paths, else the URI's scheme (``s3``, ``gs``, ``az`` ...).
        authority: What the URI carries besides the bucket (an Azure account), else ``""``.
    """

    fs: pafs.FileSystem
    path: str
    scheme: str = ""
    authority: str = ""

    # ------------------------------------------------------------------ names
    @property
    def local(self) -> bool:
        """Whether this is the local disk (where a rename is atomic)."""
        return not self.scheme

    @property
    def uri(self) -> str:
        """The path as a user writes it: a local path, or ``scheme://bucket/key``."""
        if self.local:
            return self.path
        if self.scheme in ("abfs", "abfss") and self.authority:
            container, _, rest = self.path.partition("/")
            return f"{self.scheme}://{container}@{self.authority}/{rest}".rstrip("/")
        return f"{self.scheme}://{self.path}"

    def __str__(self) -> str:
        return self.uri

    def __fspath__(self) -> str:
        """Local paths only: code that opens a store path with ``open()`` is a bug."""
        if not self.local:
            raise TypeError(f"{self.uri} is not a local path; open it through its filesystem")
        return self.path

    @property
    def name(self) -> str:
        """The last component (a file's name, a prefix's last part)."""
        return posixpath.basename(self.path.rstrip("/"))

    @property
    def parent(self) -> Location:
        """The folder (prefix) holding this one."""
        parent = (
            posixpath.dirname(self.path.rstrip("/"))
            if not self.local
            else os.path.dirname(self.path)
        )
        return Location(self.fs, parent, self.scheme, self.authority)

    def join(self, *names: str) -> Location:
        """This location with ``names`` appended (``/`` on stores, ``os.sep`` locally).

        Args:
            *names: Path components, relative (each may hold ``/``); none gives this location.
        """
        join = os.path.join if self.local else posixpath.join
        return Location(self.fs, join(self.path, *names), self.scheme, self.authority)

    def with_path(self, path: str) -> Location:
        """Another path on the same store (a listing's entry).

        Args:
            path: A path inside this filesystem (``bucket/key``, no scheme), as ``pyarrow.fs``
                lists it.
        """
        return Location(self.fs, path, self.scheme, self.authority)

    # ------------------------------------------------------------------ questions
    def info(self) -> pafs.FileInfo:
        """The store's answer for this path (type, size, mtime); errors as :class:`StorageError`."""
        try:
            return self.fs.get_file_info(self.path)
        except OSError as e:
            raise storage_error(e, self) from None

    def exists(self) -> bool:
        """Whether a file or a non-empty prefix (a folder) is here."""
        return bool(self.info().type != pafs.FileType.NotFound)

    def missing(self) -> str:
        """Why nothing is here, in words: ``no such bucket`` (or container) or ``not found``."""
        if self.local:
            return "not found"
        bucket = self.path.split("/", 1)[0]
        if self.with_path(bucket).info().type == pafs.FileType.NotFound:
            return (
                "no such container" if self.scheme in ("az", "abfs", "abfss") else "no such bucket"
            )
        return "not found"

    def is_dir(self) -> bool:
        """Whether this is a folder (on a store: a prefix that holds something, or a bucket)."""
        return bool(self.info().type == pafs.FileType.Directory)

    def is_file(self) -> bool:
        """Whether this is a file (an object)."""
        return bool(self.info().type == pafs.FileType.File)

    def size(self) -> int:
        """The file's size in bytes."""
        return int(self.info().size or 0)

    def walk(self) -> list[Location]:
        """Every file under this folder, recursively, in name order (as ``sorted(os.walk)``)."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.path, recursive=True))
        except FileNotFoundError:
            infos = []
        except OSError as e:
            raise storage_error(e, self) from None
        found = [i for i in infos if i.type == pafs.FileType.File]
        files = sorted(i.path for i in found)
        if not self.local:
            _remember_listing(self, found)
        if not files and not self.local and (why := self.missing()) != "not found":
            # S3 refuses to list a missing bucket; Azure lists a missing container as empty
            raise StorageError(f"{self.uri}: {why}")
        return [self.with_path(p) for p in files]

    def children(self) -> list[tuple[Location, bool]]:
        """The entries directly in this folder, in name order, each with whether it is a folder."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.path, recursive=False))
        except FileNotFoundError:
            return []
        except OSError as e:
            raise storage_error(e, self) from None
        return sorted(
            ((self.with_path(i.path), i.type == pafs.FileType.Directory) for i in infos),
            key=lambda e: e[0].path,
        )

    def glob(self, pattern: str) -> list[Location]:
        """Files under this folder whose path relative to it matches ``pattern`` (``*`` stays in
        one component, ``**`` spans folders), in name order: the same on every store.

        Args:
            pattern: A glob over the path below this folder, ``/``-separated (``*.parquet``,
                ``**/part-*.parquet``).

        Returns:
            The matching files (not folders), walked recursively.
        """
        regex = _glob_regex(pattern)
        base = self.path.rstrip("/") + "/"
        return [f for f in self.walk() if regex.fullmatch(f.path[len(base) :])]

    # ------------------------------------------------------------------ bytes
    def open_input_file(self) -> Any:
        """A random-access file (Parquet footers, HDF5)."""
        try:
            return self.fs.open_input_file(self.path)
        except OSError as e:
            raise storage_error(e, self) from None

    def open_input_stream(self) -> Any:
        """A sequential stream (JSON lines, msgpack)."""
        try:
            return self.fs.open_input_stream(self.path)
        except OSError as e:
            raise storage_error(e, self) from None

    def open_output_stream(self) -> Any:
        """A new file (on a store: an object, visible whole once the stream closes)."""
        if self.local:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        try:
            return self.fs.open_output_stream(self.path)
        except OSError as e:
            raise self._write_error(e) from None

    def read_bytes(self, limit: int | None = None) -> bytes:
        """The file's bytes; at most ``limit + 1`` are read: a caller can refuse a larger file.

        Args:
            limit: The most bytes the caller accepts; None reads the whole file.

        Raises:
            StorageError: The store refused or could not answer, or has no such file.
        """
        with self.open_input_stream() as f:
            return bytes(f.read() if limit is None else f.read(limit + 1))

    def write_bytes(self, data: bytes) -> None:
        """Writes the whole file (an object put on a store: all or nothing).

        Args:
            data: The file's whole content; an existing file is replaced. A local folder
                that is missing is made.

        Raises:
            StorageError: The store (or disk) refused the write, said in words.
        """
        try:
            with self.open_output_stream() as f:
                f.write(data)
        except StorageError:
            raise
        except OSError as e:  # a store may refuse only when the object is put (on close)
            raise self._write_error(e) from None

    def _write_error(self, e: OSError) -> StorageError:
        """A failed write in words; a missing bucket (which some stores call an internal
        error) is named as such."""
        if not self.local:
            with contextlib.suppress(StorageError):
                if (why := self.missing()) != "not found":
                    return StorageError(f"{self.uri}: {why}")
        return storage_error(e, self)

    def delete(self) -> None:
        """Removes this file; a missing file is no error."""
        if self.scheme in _AZURE and self.info().type == pafs.FileType.NotFound:
            return  # Azure retries a missing blob's deletion for seconds before saying so
        try:
            self.fs.delete_file(self.path)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise storage_error(e, self) from None

    def delete_tree(self) -> None:
        """Removes this folder and everything under it; a missing folder is no error."""
        try:
            self.fs.delete_dir(self.path)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise storage_error(e, self) from None

    def makedirs(self) -> None:
        """Creates the folder (a no-op on object stores, where prefixes need no creation)."""
        if self.local:
            os.makedirs(self.path, exist_ok=True)


def join_path(folder: str, *names: str) -> str:
    """``os.path.join`` for a local folder, ``/`` for a store's URI: the path string of a file in
    ``folder``, in the form the folder was given in (a local path stays relative).

    Args:
        folder: A local folder or a store's URI (a trailing ``/`` is dropped on a store).
        *names: The components to append, relative.
    """
    if is_remote(folder):
        return "/".join((folder.rstrip("/"), *names))
    return os.path.join(folder, *names)


def locate(path: str | os.PathLike[str] | Location) -> Location:
    """The :class:`Location` of ``path``: a local path, ``file://``, or a store URI.

    Args:
        path: What the user wrote (a relative local path is made absolute).

    Returns:
        The filesystem and the path in it; filesystems are shared per store and credentials.

    Raises:
        StorageError: An unknown scheme, a URI without a bucket, a store library missing.
    """
    if isinstance(path, Location):
        return path
    text = os.fspath(path)
    m = _URI.match(text)
    if m is None:
        return Location(_local(), os.path.abspath(text))
    scheme = m.group(1).lower()
    parts = urlsplit(text)
    if scheme == "file":
        return Location(_local(), os.path.abspath(unquote(parts.path)))
    bucket, key = parts.netloc, parts.path.lstrip("/")
    authority = ""
    if scheme in ("abfs", "abfss") and "@" in bucket:
        bucket, authority = bucket.split("@", 1)
    if not bucket:
        raise StorageError(f"{text}: no bucket or container in the path")
    full = f"{bucket}/{key}".rstrip("/") if key else bucket
    return Location(_filesystem(scheme, authority), full, scheme, authority)


def input_file(path: str | os.PathLike[str]) -> Any:
    """What a reader opens: a local path as it is (readers open it their own fastest way), a
    store's file (a URI) as a random-access file of its filesystem.

    Args:
        path: A local path, ``file://...`` (given back as the plain local path) or a store's
            URI.

    Returns:
        A path string for a local file; an open ``pyarrow`` random-access file for a store's
        (the caller closes it).

    Raises:
        StorageError: The store refused or could not answer.
    """
    text = os.fspath(path)
    if not is_remote(text):
        return locate(text).path if text.startswith("file://") else text
    return locate(text).open_input_file()


def open_random_access(path: str | os.PathLike[str]) -> Any:
    """A file opened for random access (Arrow IPC, Parquet footers, fingerprints): memory-mapped
    on the local disk, a store's random-access file otherwise.

    Args:
        path: A local path, ``file://...`` or a store's URI.

    Returns:
        A ``pyarrow`` random-access file (``seek``, ``read``, ``size``); close it after use.

    Raises:
        StorageError: The store refused or could not answer.
        FileNotFoundError: No such local file.
    """
    loc = locate(path)
    if loc.local:
        import pyarrow as pa

        return pa.memory_map(loc.path)
    return loc.open_input_file()


_KINDS = (
    (stat.S_ISFIFO, "a FIFO (a named pipe: reading it waits for a writer)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


def not_regular(path: str | os.PathLike[str], mode: int) -> DataError | None:
    """The refusal of a local path that is not a regular file (by its ``st_mode``), or None.

    Reading a FIFO blocks until a writer comes, and a device may never end: no path is opened
    to read data or a config before it is known to be a regular file.

    Args:
        path: The path, as the user named it (the error names it).
        mode: Its ``st_mode`` (from ``os.stat``, through symlinks).

    Returns:
        None for a regular file, else the DataError to raise (``reason="not_regular_file"``).
    """
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), f"of mode {stat.filemode(mode)}")
    return DataError(
        f"not a regular file: it is {kind}; give the path of a file",
        Where(file=os.fspath(path)),
        reason="not_regular_file",
    )


def open_local(path: str | os.PathLike[str]) -> BinaryIO:
    """A local file opened to read bytes, refused unless it is a regular file.

    The open itself cannot block: it is non-blocking (a FIFO opens at once without a writer),
    then ``fstat`` of the opened file decides, so a path swapped for a FIFO after a check is
    refused too. A regular file is handed back in blocking mode.

    Args:
        path: A local path.

    Returns:
        The file, opened ``"rb"`` (the caller closes it).

    Raises:
        FileNotFoundError, PermissionError: As ``open`` raises them.
        DataError: Not a regular file (:func:`not_regular`).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        refused = not_regular(path, os.fstat(fd).st_mode)
        if refused is not None:
            raise refused
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_file(path: str | os.PathLike[str], limit: int | None = None) -> bytes:
    """A small file's bytes (a config), from the local disk or a store, read the same way.

    Args:
        path: A local path, ``file://...`` or a store's URI.
        limit: Read at most ``limit + 1`` bytes (a caller refuses a larger file); None: all.

    Returns:
        The bytes read.

    Raises:
        FileNotFoundError: No such local file (as ``open`` says it, naming the path given).
        StorageError: The store refused or could not answer, or has no such object.
    """
    text = os.fspath(path)
    loc = locate(text)
    if not loc.local:
        return loc.read_bytes(limit)
    with open_local(loc.path if "://" in text else text) as fh:
        return fh.read() if limit is None else fh.read(limit + 1)


class FileStat(NamedTuple):
    """A store's file's size and modification time, named as :func:`os.stat` names them."""

    st_size: int
    st_mtime_ns: int


#: What the latest listings of a store said of each file (URI -> size and mtime), for the
#: plan's scan to take instead of asking the store again (:func:`take_listed`); bounded.
_LISTED: dict[str, FileStat] = {}
_LISTED_MAX = 1 << 18


def _remember_listing(folder: Location, infos: list[pafs.FileInfo]) -> None:
    if len(_LISTED) + len(infos) > _LISTED_MAX:
        _LISTED.clear()
    for i in infos:
        _LISTED[folder.with_path(i.path).uri] = FileStat(int(i.size or 0), int(i.mtime_ns or 0))


def forget_listings() -> None:
    """Drops what earlier listings said (:func:`take_listed`): called when an input is expanded
    anew, so a file named later is never given an old listing's size."""
    _LISTED.clear()


def take_listed(path: str) -> FileStat | None:
    """The size and mtime a store's listing gave for ``path``, taken once (a second call, or a
    path no listing of this process met, gives None): what :func:`file_stat` would ask the store
    for with one more request per file, known already from the listing that named the file.

    A listing's answer is as fresh as the listing: the plan takes it right after the listing
    (the commit's checks of changed inputs ask the store again, they never take it).

    Args:
        path: A store URI as the listing named it (a local path: always None).

    Returns:
        The listing's size and mtime, or None.
    """
    return _LISTED.pop(path, None) if _LISTED else None


def file_stat(path: str | os.PathLike[str]) -> os.stat_result | FileStat:
    """``os.stat`` of a local path; a store's file's size and modification time.

    Args:
        path: A local path, ``file://...`` or a store's URI.

    Returns:
        ``os.stat``'s result locally; on a store, a :class:`FileStat` (size in bytes,
        modification time in nanoseconds, 0 where the store gives none).

    Raises:
        FileNotFoundError: No such file (a store's is also a :class:`StorageError`).
    """
    text = os.fspath(path)
    if not is_remote(text):
        return os.stat(locate(text).path if text.startswith("file://") else text)
    loc = locate(text)
    info = loc.info()
    if info.type != pafs.FileType.File:
        raise _NotFound(f"{loc.uri}: {loc.missing()}")
    return FileStat(int(info.size or 0), int(info.mtime_ns or 0))


def storage_error(e: BaseException, where: Location | str) -> StorageError:
    """One line for a store's failure: which path, and what went wrong in words.

    Args:
        e: The failure the store's library raised (its text is matched for credentials,
            access, missing bucket or container, network and not-found cases).
        where: The location (or URI) the request was for, named in the line.

    Returns:
        The error to raise (the caller raises it, ``from None``).
    """
    uri = where.uri if isinstance(where, Location) else where
    text = " ".join(str(e).split())
    low = text.lower()
    if "signature" in low or "invalidaccesskeyid" in low or "authenticationfailed" in low:
        what = "wrong credentials (the store refused the key or its signature)"
    elif "access_denied" in low or "accessdenied" in low or _HTTP_403.search(low):
        what = "access denied (check the store's credentials)"
    elif "nosuchbucket" in low or "no_such_bucket" in low or "bucket does not exist" in low:
        what = "no such bucket"
    elif "containernotfound" in low or "container does not exist" in low:
        what = "no such container"
    elif "network_connection" in low or "could not connect" in low or "resolve" in low:
        what = "the store cannot be reached (check the endpoint and the network)"
    elif isinstance(e, FileNotFoundError) or "not found" in low or "does not exist" in low:
        what = "not found"
    else:
        what = text.split(". ")[0][:300]
    return StorageError(f"{uri}: {what}")


# ============================================================================================
# Filesystems, one per store and settings, built on first use.
# ============================================================================================
_FILESYSTEMS: dict[tuple[str, ...], pafs.FileSystem] = {}
_LOCK = threading.Lock()


def _local() -> pafs.FileSystem:
    return _cached(("file",), pafs.LocalFileSystem)


def _cached(key: tuple[str, ...], make: Any) -> pafs.FileSystem:
    with _LOCK:
        fs = _FILESYSTEMS.get(key)
        if fs is None:
            fs = _FILESYSTEMS[key] = make()
        return fs


def _timeout() -> float:
    try:
        return max(0.5, float(os.environ.get(TIMEOUT_ENV, "10")))
    except ValueError:
        return 10.0


def _filesystem(scheme: str, authority: str) -> pafs.FileSystem:
    if scheme == "s3":
        return _cached(("s3", *_s3_settings()), _s3)
    if scheme in ("gs", "gcs"):
        return _cached(("gs", os.environ.get("STORAGE_EMULATOR_HOST", "")), _gcs)
    if scheme in ("az", "abfs", "abfss"):
        account = authority.split(".", 1)[0] if authority else ""
        return _cached(("az", account, *_azure_settings()), lambda: _azure(account))
    return _cached((scheme,), lambda: _fsspec(scheme))


def _s3_settings() -> tuple[str, ...]:
    env = os.environ
    return (
        env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or "",
        env.get("AWS_ACCESS_KEY_ID", ""),
        env.get("AWS_SECRET_ACCESS_KEY", ""),
        env.get("AWS_SESSION_TOKEN", ""),
        env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "",
        env.get("AWS_PROFILE", ""),
        str(_timeout()),
    )


def _s3() -> pafs.FileSystem:
    endpoint, key, secret, token, region, _, _ = _s3_settings()
    kw: dict[str, Any] = {
        "connect_timeout": _timeout(),
        "request_timeout": _timeout(),
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=3),
    }
    if endpoint:
        url = urlsplit(endpoint)
        kw["endpoint_override"] = url.netloc or url.path
        kw["scheme"] = url.scheme or "https"
        kw["region"] = region or "us-east-1"  # a custom server takes any region
    elif region:
        kw["region"] = region
    if key and secret:
        kw.update(access_key=key, secret_key=secret)
        if token:
            kw["session_token"] = token
    return pafs.S3FileSystem(**kw)


def _gcs() -> pafs.FileSystem:
    host = os.environ.get("STORAGE_EMULATOR_HOST", "")
    kw: dict[str, Any] = {"retry_time_limit": _timedelta(_timeout() * 3)}
    if host:
        url = urlsplit(host if "://" in host else f"http://{host}")
        kw.update(endpoint_override=url.netloc, scheme=url.scheme, anonymous=True)
    return pafs.GcsFileSystem(**kw)


def _timedelta(seconds: float) -> Any:
    """A ``datetime.timedelta`` (GCS's retry limit takes one)."""
    import datetime

    return datetime.timedelta(seconds=seconds)


def _azure_settings() -> tuple[str, ...]:
    env = os.environ
    return (
        env.get("AZURE_STORAGE_CONNECTION_STRING", ""),
        env.get("AZURE_STORAGE_ACCOUNT_NAME", ""),
        env.get("AZURE_STORAGE_ACCOUNT_KEY", ""),
    )


def _azure(account: str) -> pafs.FileSystem:
    conn, name, key = _azure_settings()
    fields = dict(
        part.split("=", 1) for part in conn.split(";") if "=" in part
    )  # AccountName=...;AccountKey=...;BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1
    account = account or fields.get("AccountName", "") or name
    if not account:
        raise StorageError(
            "az:// needs an account: set AZURE_STORAGE_ACCOUNT_NAME (or "
            "AZURE_STORAGE_CONNECTION_STRING), or write abfs://container@account.dfs.core.windows.net/"
        )
    kw: dict[str, Any] = {"account_name": account}
    secret = fields.get("AccountKey", "") or key
    if secret:
        kw["account_key"] = secret
    endpoint = fields.get("BlobEndpoint", "")
    if endpoint:  # an emulator (Azurite) or a sovereign cloud
        url = urlsplit(endpoint)
        _reachable(endpoint)
        kw.update(
            blob_storage_authority=url.netloc,
            blob_storage_scheme=url.scheme,
            dfs_storage_authority=url.netloc,
            dfs_storage_scheme=url.scheme,
        )
    return pafs.AzureFileSystem(**kw)


def _reachable(endpoint: str) -> None:
    """Fails fast where nothing listens at ``endpoint``: Azure's client retries a refused
    connection for seconds (no setting shortens it), S3's answers within the timeout."""
    url = urlsplit(endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=min(_timeout(), 3)).close()
    except OSError:
        raise StorageError(
            f"{endpoint}: the store cannot be reached (check the endpoint and the network)"
        ) from None


def _fsspec(scheme: str) -> pafs.FileSystem:
    try:
        import fsspec
    except ImportError:
        raise StorageError(
            f"{scheme}:// needs fsspec and its {scheme} filesystem: pip install fsspec"
        ) from None
    try:
        fs = fsspec.filesystem(scheme)
    except (ImportError, ValueError) as e:
        raise StorageError(f"{scheme}:// is not a store this install can open: {e}") from None
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs))


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """A regex for ``pattern`` over ``/``-separated relative paths: ``**`` spans folders,
    ``*``, ``?`` and ``[...]`` stay within one (as :func:`glob.glob` with ``recursive=True``)."""
    parts = pattern.split("/")
    regex = ""
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            regex += ".*" if last else "(?:[^/]+/)*"
        else:
            regex += _component_regex(part) + ("" if last else "/")
    return re.compile(regex)


def _component_regex(part: str) -> str:
    out, i = [], 0
    while i < len(part):
        c = part[i]
        close = part.find("]", i + 2) if c == "[" else -1
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif close != -1:
            body = part[i + 1 : close]
            body = "^" + body[1:] if body.startswith("!") else body
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = close
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)
