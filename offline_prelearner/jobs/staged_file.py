"""A file a unit of work stages: written once through a buffered stream that hashes what passes.

The unit writer (:mod:`.batch.run`) writes every file it makes into a :class:`StagedFile` that its
job's staging opens (:meth:`~.staging.UnitOutput.open_file`), and never asks where the file goes:

* on a local disk (:class:`~.commit.LocalFile`) under a temporary name, flushed to disk, then
  renamed into the staging folder when the unit ends, its stat recorded after the rename;
* on an object store (:class:`~.store_commit.StoreFile`) straight under its final name, the job's
  id in it (an object appears whole when its upload completes).

Either way the bytes are hashed as they are written (:class:`HashingSink`), never read back.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Any, Protocol

import pyarrow as pa

from .records import FileRecord

__all__ = ["BUFFER_BYTES", "HashedStream", "HashingSink", "StagedFile"]

#: The writes a Parquet writer makes are gathered into blocks of this many bytes before they are
#: hashed and passed on (the hashing sink and the store's upload see large writes).
BUFFER_BYTES = 1 << 20


class StagedFile(Protocol):
    """One file a unit writes: the stream its bytes go to, then its place in the staging."""

    name: str

    @property
    def stream(self) -> Any:
        """What the Parquet writer writes to (buffered and hashed)."""
        ...

    def finish(self) -> None:
        """Every byte is written: flushed to disk (a local file) or uploaded (an object)."""
        ...

    def place(self, rows: int) -> FileRecord:
        """Puts the finished file where the commit finds it (a local file's rename) and returns
        its record (a local file's with its stat after the rename).

        Args:
            rows: The rows the file holds.

        Returns:
            The file's record, as its unit's record lists it.
        """
        ...

    def abort(self) -> None:
        """Closes the file quietly and removes what it left (a temporary file, an object)."""
        ...


class HashingSink:
    """A writable file over ``raw`` that hashes (sha256) and counts what passes.

    Args:
        raw: The file the bytes go to (an open local file, a store's output stream).
    """

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.hash = hashlib.sha256()
        self.bytes = 0
        self.closed = False

    def write(self, data: Any) -> int:
        """Hashes and passes on ``data``.

        Args:
            data: Bytes, or any object with the buffer protocol.

        Returns:
            The number of bytes written.
        """
        view = memoryview(data)
        self.hash.update(view)
        self.bytes += view.nbytes
        self.raw.write(data)
        return view.nbytes

    def flush(self) -> None:
        """Nothing: what ends the file is its owner's (:meth:`HashedStream.finish`)."""

    def tell(self) -> int:
        """Bytes written so far."""
        return self.bytes

    def close(self) -> None:
        """Closes ``raw`` once (a store's object completes its upload here)."""
        if not self.closed:
            self.closed = True
            self.raw.close()


class HashedStream:
    """The stream both kinds of :class:`StagedFile` write through: Arrow-buffered
    (:data:`BUFFER_BYTES`), hashed by a :class:`HashingSink` over ``raw``.

    Args:
        raw: Where the bytes go.
    """

    def __init__(self, raw: Any) -> None:
        self.sink = HashingSink(raw)
        self.stream = pa.BufferedOutputStream(pa.PythonFile(self.sink, mode="w"), BUFFER_BYTES)

    def drain(self) -> None:
        """Passes the buffered bytes on to ``raw`` (before a local file is synced)."""
        self.stream.flush()

    def close(self) -> None:
        """Passes the buffered bytes on and closes ``raw``."""
        self.stream.flush()
        self.stream.close()
        self.sink.close()

    def close_quietly(self) -> None:
        """Closes everything, whatever fails (the error that stopped the unit matters)."""
        with contextlib.suppress(Exception):
            self.stream.close()
        with contextlib.suppress(Exception):
            self.sink.close()

    @property
    def sha256(self) -> str:
        """The hex sha256 of every byte written."""
        return self.sink.hash.hexdigest()
