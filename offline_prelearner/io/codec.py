"""Safe decoding of untrusted bytes: msgpack(+numpy), lz4, and RLlib's legacy pickled columns.

Three codecs live here:

* **msgpack + msgpack-numpy** (RLlib's episode format). :func:`unpackb` decodes msgpack-numpy's
  array/scalar records itself, so an object-dtype record (which msgpack-numpy would *unpickle*) is
  refused instead of executed. Sizes are checked before any allocation.
* **this project's column codec**: ``lz4.frame(msgpack-numpy(array))``, see :func:`pack_array` /
  :func:`unpack_array`, with a limit on the decompressed size (a 1 KB lz4 frame can claim 4 GB).
* **RLlib's legacy compressed columns**: ``base64(lz4.frame(pickle(array)))``. Only
  :func:`legacy_unpack` reads them, through :class:`RestrictedUnpickler`, which admits numpy array
  reconstruction and plain builtin containers and refuses every other global. Callers enable it
  explicitly (``legacy_pickle=True``); nothing here guesses that a string is a pickle.

Every failure is a :class:`~offline_prelearner.errors.DecodeError`; callers add file/column/row.
"""

from __future__ import annotations

import base64
import binascii
import io
import pickle
from typing import Any

import lz4.frame
import msgpack
import msgpack_numpy
import numpy as np

from ..config import DEFAULT_LIMITS, DecodeLimits
from ..errors import DecodeError

__all__ = [
    "RestrictedUnpickler",
    "legacy_unpack",
    "lz4_decompress",
    "pack_array",
    "packb",
    "unpack_array",
    "unpackb",
]

_LZ4_MAGIC = b"\x04\x22\x4d\x18"


# --------------------------------------------------------------------------------------------
# lz4
# --------------------------------------------------------------------------------------------
def lz4_decompress(data: bytes, limits: DecodeLimits = DEFAULT_LIMITS) -> bytes:
    """Decompresses one lz4 frame, refusing output larger than ``limits.max_decompressed_bytes``.

    Args:
        data: One whole lz4 frame from untrusted input (nothing may follow its end mark).
        limits: ``max_decompressed_bytes`` bounds the output, checked against the frame's
            declared size first and then while decompressing, so a bomb never expands.

    Returns:
        The decompressed bytes.

    Raises:
        DecodeError: Not an lz4 frame, corrupt, truncated, trailing bytes (``corrupt_lz4``), or
            above the limit (``size_limit``).
    """
    if not data.startswith(_LZ4_MAGIC):
        raise DecodeError("not an lz4 frame (bad magic number)", reason="corrupt_lz4")
    limit = limits.max_decompressed_bytes
    try:
        info = lz4.frame.get_frame_info(data)
        declared = info.get("content_size") or 0
        if declared > limit:
            raise DecodeError(
                f"lz4 frame declares {declared} bytes, above the limit of {limit}",
                reason="size_limit",
            )
        dec = lz4.frame.LZ4FrameDecompressor()
        out = dec.decompress(data, max_length=limit + 1)
    except DecodeError:
        raise
    except RuntimeError as e:  # lz4 reports corrupt frames as RuntimeError
        raise DecodeError(f"corrupt lz4 frame: {e}", reason="corrupt_lz4") from None
    if len(out) > limit:
        raise DecodeError(
            f"lz4 frame decompresses to more than the limit of {limit} bytes", reason="size_limit"
        )
    if not dec.eof:
        raise DecodeError("truncated lz4 frame (no end mark)", reason="corrupt_lz4")
    if dec.unused_data:
        raise DecodeError(
            f"{len(dec.unused_data)} bytes after the end of the lz4 frame", reason="corrupt_lz4"
        )
    return bytes(out)


# --------------------------------------------------------------------------------------------
# msgpack + msgpack-numpy, without the pickle path
# --------------------------------------------------------------------------------------------
def _numpy_hook(obj: dict[Any, Any]) -> Any:
    """object_hook: decodes msgpack-numpy records; refuses object dtypes (they would be pickles)."""
    if b"nd" not in obj:
        if b"complex" in obj:
            raw = obj.get(b"data")
            try:
                return complex(raw.decode("ascii") if isinstance(raw, bytes) else str(raw))
            except (ValueError, UnicodeDecodeError):
                raise DecodeError(
                    "msgpack-numpy complex record is corrupt", reason="bad_msgpack"
                ) from None
        return obj
    try:
        kind = obj.get(b"kind", b"")
        type_str = obj[b"type"]
        data = obj[b"data"]
    except KeyError as e:
        raise DecodeError(f"msgpack-numpy record without field {e}", reason="bad_msgpack") from None
    if isinstance(type_str, bytes):  # older writers store the dtype string as bytes
        try:
            type_str = type_str.decode("ascii")
        except UnicodeDecodeError:
            raise DecodeError(
                "msgpack-numpy record with a non-ASCII dtype", reason="bad_msgpack"
            ) from None
    if kind in (b"O", "O") or (isinstance(type_str, str) and "O" in type_str):
        raise DecodeError(
            "msgpack-numpy record holds an object-dtype (pickled) array; refused",
            reason="refused_pickle",
        )
    if not isinstance(data, bytes):
        raise DecodeError(
            f"msgpack-numpy record's data is {type(data).__name__}, not bytes", reason="bad_msgpack"
        )
    try:
        dtype = np.dtype(type_str if isinstance(type_str, str) else [tuple(f) for f in type_str])
    except (TypeError, ValueError) as e:
        raise DecodeError(
            f"msgpack-numpy record with bad dtype {type_str!r}: {e}", reason="bad_msgpack"
        ) from None
    if dtype.hasobject:
        raise DecodeError(
            "msgpack-numpy dtype holds Python objects; refused", reason="refused_pickle"
        )
    if not obj[b"nd"]:  # a numpy scalar
        if len(data) != dtype.itemsize:
            raise DecodeError("msgpack-numpy scalar of the wrong size", reason="bad_msgpack")
        return np.frombuffer(data, dtype=dtype)[0]
    shape = tuple(obj.get(b"shape", ()))
    if any((not isinstance(s, int)) or s < 0 for s in shape):
        raise DecodeError(f"msgpack-numpy array with bad shape {shape!r}", reason="bad_msgpack")
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if expected != len(data):
        raise DecodeError(
            f"msgpack-numpy array of shape {shape} and dtype {dtype} needs {expected} bytes, "
            f"record holds {len(data)}",
            reason="bad_msgpack",
        )
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def unpackb(data: bytes, limits: DecodeLimits = DEFAULT_LIMITS) -> Any:
    """Decodes one msgpack message (msgpack-numpy arrays included) from untrusted bytes.

    Unlike ``msgpack_numpy.decode``, object-dtype records are refused, never unpickled. Arrays come
    back read-only, as views of the message buffer.

    Args:
        data: One msgpack message.
        limits: ``max_message_bytes`` bounds the message, ``max_array_bytes`` each array in it.

    Returns:
        The decoded value: dicts, lists, scalars, bytes, strings and numpy arrays.

    Raises:
        DecodeError: Above a limit (``size_limit``), malformed msgpack or an array record that
            does not fit its dtype and shape (``bad_msgpack``), an object dtype.
    """
    if len(data) > limits.max_message_bytes:
        raise DecodeError(
            f"msgpack message of {len(data)} bytes is above the limit of "
            f"{limits.max_message_bytes}",
            reason="size_limit",
        )
    try:
        return msgpack.unpackb(
            data,
            object_hook=_numpy_hook,
            raw=False,
            max_bin_len=limits.max_array_bytes,
            max_str_len=limits.max_message_bytes,
        )
    except DecodeError:
        raise
    except (
        msgpack.exceptions.ExtraData,
        msgpack.exceptions.FormatError,
        msgpack.exceptions.StackError,
        ValueError,
        TypeError,
        UnicodeDecodeError,
    ) as e:
        detail = f"{type(e).__name__}: {e}" if str(e).strip() else type(e).__name__
        raise DecodeError(f"corrupt msgpack ({detail})", reason="bad_msgpack") from None


def _encode_numpy(obj: Any) -> Any:
    """``default`` hook of :func:`packb`: msgpack-numpy's record layout, written here.

    Arrays become ``{nd: True, type, kind, shape, data}`` (``data`` last: the episodes reader's
    fast path relies on it), numpy scalars ``{nd: False, type, data}``. Object dtypes are refused:
    msgpack-numpy would pickle them.
    """
    if isinstance(obj, np.ndarray | np.generic):
        if obj.dtype.hasobject:
            raise DecodeError(
                "refusing to encode an object-dtype array (it would be a pickle)",
                reason="refused_pickle",
            )
        structured = obj.dtype.fields is not None
        type_ = obj.dtype.descr if structured else obj.dtype.str
        if isinstance(obj, np.generic):
            return {b"nd": False, b"type": type_, b"data": obj.tobytes()}
        return {
            b"nd": True,
            b"type": type_,
            b"kind": b"V" if structured else b"",
            b"shape": list(obj.shape),
            b"data": obj.tobytes(),
        }
    return msgpack_numpy.encode(obj)


def packb(obj: Any) -> bytes:
    """Encodes ``obj`` (numpy arrays included) as msgpack + msgpack-numpy; refuses object arrays.

    Args:
        obj: Any msgpack-able value; numpy arrays and scalars inside it are written as
            msgpack-numpy records (dtype, shape, raw bytes), which :func:`unpackb` reads back.

    Returns:
        One msgpack message.
    """
    packed: bytes = msgpack.packb(obj, default=_encode_numpy, use_bin_type=True)
    return packed


# --------------------------------------------------------------------------------------------
# this project's column codec
# --------------------------------------------------------------------------------------------
def pack_array(array: Any) -> bytes:
    """Compresses one array (or msgpack-able value) as ``lz4.frame(msgpack-numpy(value))``.

    The frame carries its content size and a content checksum, so corruption is detected.

    Args:
        array: A numpy array, or any value :func:`packb` encodes.

    Returns:
        One lz4 frame: a cell of a column of the ``lz4_msgpack`` codec.
    """
    frame: bytes = lz4.frame.compress(packb(array), store_size=True, content_checksum=True)
    return frame


def unpack_array(data: bytes, limits: DecodeLimits = DEFAULT_LIMITS) -> Any:
    """Inverse of :func:`pack_array`, with the size limits of ``limits``.

    Args:
        data: One cell: an lz4 frame of one msgpack message (bytes, bytearray or memoryview).
        limits: The bounds of :func:`lz4_decompress` and :func:`unpackb`.

    Returns:
        The value that was packed; arrays are read-only.
    """
    return unpackb(lz4_decompress(bytes(data), limits), limits)


# --------------------------------------------------------------------------------------------
# RLlib's legacy base64(lz4(pickle)) columns
# --------------------------------------------------------------------------------------------
_ALLOWED_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    [
        (mod, name)
        for mod in ("numpy.core.multiarray", "numpy._core.multiarray")
        for name in ("_reconstruct", "scalar")
    ]
    + [(mod, "_frombuffer") for mod in ("numpy.core.numeric", "numpy._core.numeric")]
    + [("numpy", "ndarray"), ("numpy", "dtype")]
    + [
        ("builtins", name)
        for name in ("complex", "set", "frozenset", "bytes", "bytearray", "slice")
    ]
    + [("collections", "OrderedDict"), ("_codecs", "encode")]
)


class _NdarrayToken:
    """Stands for ``numpy.ndarray`` inside a restricted pickle: an argument, never a callable."""

    def __repr__(self) -> str:
        return "<numpy.ndarray (restricted)>"


_NDARRAY = _NdarrayToken()


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that can rebuild numpy arrays and plain builtins, and nothing else.

    Any other global (``os.system``, ``builtins.eval``, a user class, ...) raises
    :class:`DecodeError` with ``reason="refused_pickle"`` before it is looked up. The admitted
    callables that could allocate (``_reconstruct``, ``scalar``, ``bytearray``, ``ndarray``) are
    wrapped so that a small pickle cannot ask for more than ``limits.max_array_bytes``.

    Args:
        file: A binary file holding the pickle (``io.BytesIO`` of untrusted bytes).
        limits: ``max_array_bytes`` bounds every array, scalar and bytearray the pickle builds.
    """

    def __init__(self, file: Any, limits: DecodeLimits = DEFAULT_LIMITS) -> None:
        super().__init__(file)
        self._limit = limits.max_array_bytes

    def find_class(self, module: str, name: str) -> Any:
        """The class a pickle names, if it is on the allow-list (numpy arrays and plain builtins);
        any other raises :class:`DecodeError` (reason ``refused_pickle``).

        Args:
            module: The module the pickle names (``__builtin__`` is read as ``builtins``).
            name: The global in that module.

        Returns:
            The global, or a size-checking stand-in for one that allocates.
        """
        if module == "__builtin__":  # protocol 2 names builtins the Python 2 way
            module = "builtins"
        if (module, name) not in _ALLOWED_GLOBALS:
            raise DecodeError(
                f"pickle refers to {module}.{name}; only numpy arrays and plain builtins are "
                "admitted from legacy columns",
                reason="refused_pickle",
            )
        if name == "ndarray":
            return _NDARRAY
        if name == "_reconstruct":
            return self._reconstruct
        if name == "scalar":
            real_scalar = super().find_class(module, name)

            def scalar(dtype: Any, *args: Any) -> Any:
                dt = np.dtype(dtype)
                self._check_size(dt.itemsize)
                return real_scalar(dt, *args)

            return scalar
        if name == "bytearray":
            return self._bytearray
        if name == "bytes":
            return lambda *args: bytes(self._bytearray(*args))
        if name == "encode":  # protocol 2 writes bytes as _codecs.encode(text, "latin1")
            return _latin1_encode
        return super().find_class(module, name)

    def _check_size(self, nbytes: int) -> None:
        if nbytes > self._limit:
            raise DecodeError(
                f"pickle asks for an array of {nbytes} bytes, above the limit of {self._limit}",
                reason="size_limit",
            )

    def _reconstruct(self, subtype: Any, shape: Any, dtype: Any) -> Any:
        if subtype is not _NDARRAY:
            raise DecodeError(
                "pickle reconstructs something other than numpy.ndarray", reason="refused_pickle"
            )
        dt = np.dtype(dtype)
        self._check_size(int(np.prod(shape, dtype=np.int64)) * dt.itemsize)
        return np.ndarray.__new__(np.ndarray, shape, dt)

    def _bytearray(self, *args: Any) -> bytearray:
        if args and not isinstance(args[0], bytes | bytearray):
            raise DecodeError(
                "pickle builds a bytearray from something other than bytes", reason="refused_pickle"
            )
        return bytearray(*args)


def _latin1_encode(text: Any, encoding: Any = "utf-8") -> bytes:
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise DecodeError(
            f"pickle calls _codecs.encode with encoding {encoding!r}; only latin1 "
            "(protocol 2 bytes) is admitted",
            reason="refused_pickle",
        )
    return text.encode("latin1")


def _restricted_loads(raw: bytes, limits: DecodeLimits = DEFAULT_LIMITS) -> Any:
    try:
        return RestrictedUnpickler(io.BytesIO(raw), limits).load()
    except DecodeError:
        raise
    except Exception as e:  # a malformed pickle can fail in many ways; all mean "corrupt"
        raise DecodeError(f"corrupt pickle: {type(e).__name__}: {e}", reason="bad_pickle") from None


def legacy_unpack(value: str | bytes, limits: DecodeLimits = DEFAULT_LIMITS) -> Any:
    """Decodes one RLlib legacy compressed value: ``base64(lz4.frame(pickle(x)))``.

    Uncompressed legacy values (``base64(pickle(x))``, written where lz4 was missing) are read too.

    Args:
        value: One cell of a legacy column: base64 text (or its bytes).
        limits: Bounds on the decompressed size and on every array the pickle builds; the
            pickle is read by :class:`RestrictedUnpickler`, never ``pickle.loads``.

    Returns:
        The unpickled value (numpy arrays and plain builtins only).

    Raises:
        DecodeError: Not base64, corrupt lz4 or pickle, a global off the allow-list
            (``refused_pickle``), above a limit (``size_limit``).
    """
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError, TypeError) as e:
        raise DecodeError(
            f"legacy compressed value is not base64: {e}", reason="bad_base64"
        ) from None
    if raw.startswith(_LZ4_MAGIC):
        raw = lz4_decompress(raw, limits)
    elif len(raw) > limits.max_decompressed_bytes:
        raise DecodeError("legacy pickle above the size limit", reason="size_limit")
    if not raw.startswith(b"\x80"):
        raise DecodeError(
            "legacy compressed value is neither lz4 nor a pickle", reason="corrupt_lz4"
        )
    return _restricted_loads(raw, limits)
