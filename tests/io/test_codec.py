"""codec: msgpack(-numpy) and lz4 round trips, corrupt input, size limits, refused pickles."""

from __future__ import annotations

import base64
import builtins
import os
import pickle
from pathlib import Path
from typing import Any

import lz4.frame
import msgpack
import msgpack_numpy
import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from offline_prelearner.errors import DecodeError
from offline_prelearner.io.codec import (
    DecodeLimits,
    RestrictedUnpickler,
    legacy_unpack,
    lz4_decompress,
    pack_array,
    packb,
    unpack_array,
    unpackb,
)

DTYPES = st.one_of(
    hnp.boolean_dtypes(),
    hnp.integer_dtypes(endianness="="),
    hnp.unsigned_integer_dtypes(endianness="="),
    hnp.floating_dtypes(endianness="="),
    hnp.complex_number_dtypes(endianness="="),
    hnp.integer_dtypes(endianness=">"),
    hnp.floating_dtypes(endianness=">"),
    hnp.datetime64_dtypes(),
    hnp.byte_string_dtypes(),
    hnp.unicode_string_dtypes(),
)
ARRAYS = hnp.arrays(DTYPES, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5))


def same_array(a: Any, b: Any) -> bool:
    return (
        isinstance(b, np.ndarray)
        and a.dtype == b.dtype
        and a.shape == b.shape
        and a.tobytes() == b.tobytes()  # bit for bit (NaN payloads, -0.0)
    )


# --------------------------------------------------------------------------------------------
# round trips
# --------------------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(ARRAYS)
def test_pack_array_round_trip(a: np.ndarray) -> None:
    assert same_array(a, unpack_array(pack_array(a)))


@settings(max_examples=300, deadline=None)
@given(ARRAYS)
def test_packb_round_trip_and_agrees_with_msgpack_numpy(a: np.ndarray) -> None:
    packed = packb({"x": a, "nested": [a, {"y": a}]})
    out = unpackb(packed)
    assert same_array(a, out["x"]) and same_array(a, out["nested"][0])
    assert same_array(a, out["nested"][1]["y"])
    # The reference decoder reads our bytes to the same array.
    ref = msgpack.unpackb(packed, object_hook=msgpack_numpy.decode, raw=False)
    assert same_array(a, np.asarray(ref["x"]))


@settings(max_examples=100, deadline=None)
@given(
    hnp.from_dtype(np.dtype(np.float64))
    | hnp.from_dtype(np.dtype(np.int16))
    | hnp.from_dtype(np.dtype(np.bool_))
    | hnp.from_dtype(np.dtype(np.complex64))
)
def test_numpy_scalars_round_trip(x: Any) -> None:
    out = unpackb(packb(x))
    if isinstance(x, float):  # np.float64 is a Python float: msgpack writes it natively
        assert type(out) is float and (out == x or (np.isnan(x) and np.isnan(out)))
    else:
        assert type(out) is type(x) and np.asarray(out).tobytes() == np.asarray(x).tobytes()


@settings(max_examples=100, deadline=None)
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**64 - 1)
        | st.floats(allow_nan=False)
        | st.text()
        | st.binary(),
        lambda kids: st.lists(kids) | st.dictionaries(st.text(), kids),
        max_leaves=20,
    )
)
def test_plain_values_round_trip(value: Any) -> None:
    assert unpackb(packb(value)) == value


def test_structured_arrays_round_trip_both_ways() -> None:
    a = np.zeros(3, dtype=[("x", "<f4"), ("y", "<i8")])
    a["x"] = [1, 2, 3]
    assert same_array(a, unpackb(packb(a)))
    assert same_array(a, unpackb(msgpack.packb(a, default=msgpack_numpy.encode)))
    ref = msgpack.unpackb(packb(a), object_hook=msgpack_numpy.decode)
    assert same_array(a, ref)


def test_arrays_come_back_read_only_views() -> None:
    out = unpackb(packb(np.arange(6.0).reshape(2, 3)))
    assert not out.flags.writeable


def test_packb_refuses_object_arrays() -> None:
    with pytest.raises(DecodeError) as info:
        packb(np.array([{"a": 1}, None], dtype=object))
    assert info.value.reason == "refused_pickle"


# --------------------------------------------------------------------------------------------
# corrupt lz4, bombs
# --------------------------------------------------------------------------------------------
PAYLOAD = pack_array(np.arange(200, dtype=np.float32).reshape(20, 10))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(PAYLOAD) - 1), st.integers(1, 255))
def test_any_flipped_byte_is_a_decode_error(pos: int, xor: int) -> None:
    bad = bytearray(PAYLOAD)
    bad[pos] ^= xor
    with pytest.raises(DecodeError):
        unpack_array(bytes(bad))


@settings(max_examples=100, deadline=None)
@given(st.integers(0, len(PAYLOAD) - 1))
def test_truncated_frame_is_a_decode_error(cut: int) -> None:
    with pytest.raises(DecodeError) as info:
        unpack_array(PAYLOAD[:cut])
    assert info.value.reason == "corrupt_lz4"


def test_wrong_magic_and_trailing_bytes() -> None:
    with pytest.raises(DecodeError, match="magic") as info:
        lz4_decompress(b"\x00\x01\x02\x03" + PAYLOAD[4:])
    assert info.value.reason == "corrupt_lz4"
    with pytest.raises(DecodeError, match="after the end") as info:
        lz4_decompress(PAYLOAD + b"junk")
    assert info.value.reason == "corrupt_lz4"
    with pytest.raises(DecodeError):
        lz4_decompress(b"")


@pytest.mark.parametrize("store_size", [True, False])
def test_lz4_bomb_is_refused(store_size: bool) -> None:
    limits = DecodeLimits(max_decompressed_bytes=1 << 20)
    bomb = lz4.frame.compress(b"\0" * (64 << 20), store_size=store_size)
    assert len(bomb) < 300_000  # small on disk
    with pytest.raises(DecodeError) as info:
        lz4_decompress(bomb, limits)
    assert info.value.reason == "size_limit"
    just_fits = lz4.frame.compress(b"\0" * (1 << 20), store_size=store_size)
    assert len(lz4_decompress(just_fits, limits)) == 1 << 20


def test_message_and_array_limits() -> None:
    packed = packb(np.zeros(1000, np.uint8))
    with pytest.raises(DecodeError) as info:
        unpackb(packed, DecodeLimits(max_message_bytes=100))
    assert info.value.reason == "size_limit"
    with pytest.raises(DecodeError):
        unpackb(packed, DecodeLimits(max_array_bytes=999))
    assert unpackb(packed, DecodeLimits(max_array_bytes=1000)).shape == (1000,)


@pytest.mark.parametrize(
    "record",
    [
        {b"nd": True, b"type": "<f4", b"kind": b"", b"shape": [3], b"data": b"\0" * 11},
        {b"nd": True, b"type": "<f4", b"kind": b"", b"shape": [-1], b"data": b""},
        {b"nd": True, b"type": "not-a-dtype", b"kind": b"", b"shape": [1], b"data": b"\0"},
        {b"nd": False, b"type": "<f8", b"data": b"\0" * 4},
        {b"nd": True, b"type": "<f4", b"shape": [1]},
        {b"nd": True, b"type": "<f4", b"kind": b"", b"shape": [1], b"data": "text"},
    ],
)
def test_malformed_numpy_records(record: dict[bytes, Any]) -> None:
    with pytest.raises(DecodeError) as info:
        unpackb(msgpack.packb({"x": record}))
    assert info.value.reason == "bad_msgpack"


def test_corrupt_msgpack() -> None:
    for raw in (b"\xc1", b"\x92\x01", b"\x01\x02"):
        with pytest.raises(DecodeError) as info:
            unpackb(raw)
        assert info.value.reason == "bad_msgpack"


# --------------------------------------------------------------------------------------------
# pickles that would run code
# --------------------------------------------------------------------------------------------
class MkdirOnLoad:
    """Unpickling this creates a directory: evidence that code ran."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> Any:
        return (os.mkdir, (str(self.path),))


class EvalOnLoad:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> Any:
        return (builtins.eval, (f"__import__('os').mkdir({str(self.path)!r})",))


class SystemOnLoad:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> Any:
        return (os.system, (f"mkdir {self.path}",))


def test_object_array_record_is_refused_without_running_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    record = {
        b"nd": True,
        b"type": "|O",
        b"kind": b"O",
        b"shape": [1],
        b"data": pickle.dumps(MkdirOnLoad(marker)),
    }
    packed = msgpack.packb({"obs": record})
    with pytest.raises(DecodeError) as info:
        unpackb(packed)
    assert info.value.reason == "refused_pickle"
    assert not marker.exists()
    # Control: msgpack-numpy's own decoder unpickles the record, and the payload runs.
    msgpack.unpackb(packed, object_hook=msgpack_numpy.decode)
    assert marker.exists()


def test_object_dtype_spelled_differently_is_refused() -> None:
    for type_str in ("object", [["a", "|O"]], "(2,)O"):
        record = {b"nd": True, b"type": type_str, b"kind": b"", b"shape": [1], b"data": b"x" * 8}
        with pytest.raises(DecodeError) as info:
            unpackb(msgpack.packb(record))
        assert info.value.reason == "refused_pickle", type_str


@pytest.fixture(scope="module")
def legacy_obs(shared_data: Path) -> list[str]:
    table = pq.read_table(shared_data / "cartpole-v1_rows_compressed.parquet")
    return table.column("obs").to_pylist()


@pytest.mark.rllib_data
def test_legacy_unpack_reads_rllib_strings(legacy_obs: list[str]) -> None:
    assert len(legacy_obs) == 234
    for value in legacy_obs:
        arr = legacy_unpack(value)
        assert isinstance(arr, np.ndarray) and arr.dtype == np.float32 and arr.shape == (4,)
        assert np.all(np.isfinite(arr))
        # the plain-pickle reference decodes the same array (safe here: our own trusted file)
        ref = pickle.loads(lz4.frame.decompress(base64.b64decode(value)))
        assert same_array(ref, arr)


@pytest.mark.parametrize("payload_cls", [MkdirOnLoad, EvalOnLoad, SystemOnLoad])
@pytest.mark.parametrize("compressed", [True, False])
def test_legacy_pickle_with_code_is_refused(
    tmp_path: Path, payload_cls: Any, compressed: bool
) -> None:
    marker = tmp_path / "ran"
    raw = pickle.dumps({"obs": payload_cls(marker)})
    value = base64.b64encode(lz4.frame.compress(raw) if compressed else raw).decode()
    with pytest.raises(DecodeError) as info:
        legacy_unpack(value)
    assert info.value.reason == "refused_pickle"
    assert not marker.exists()


@settings(max_examples=100, deadline=None)
@given(
    hnp.arrays(
        st.one_of(hnp.floating_dtypes(), hnp.integer_dtypes(), hnp.boolean_dtypes()),
        hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
    ),
    st.integers(2, 5),
)
def test_restricted_unpickler_reads_numpy_pickles(a: np.ndarray, protocol: int) -> None:
    raw = pickle.dumps(a, protocol=protocol)
    value = base64.b64encode(lz4.frame.compress(raw)).decode()
    # The reference is the plain unpickler (numpy itself drops '>' on some dtypes in protocols < 5).
    assert same_array(pickle.loads(raw), legacy_unpack(value))


def test_restricted_unpickler_refuses_oversized_allocations() -> None:
    import io

    import numpy._core.multiarray as multiarray  # what numpy's pickles name

    class HugeArray:
        def __reduce__(self) -> Any:
            return (multiarray._reconstruct, (np.ndarray, (1 << 40,), b"b"))

    class HugeBytearray:
        def __reduce__(self) -> Any:
            return (bytearray, (1 << 40,))

    with pytest.raises(DecodeError) as info:
        RestrictedUnpickler(io.BytesIO(pickle.dumps(HugeArray()))).load()
    assert info.value.reason == "size_limit"
    with pytest.raises(DecodeError) as info:
        RestrictedUnpickler(io.BytesIO(pickle.dumps(HugeBytearray()))).load()
    assert info.value.reason == "refused_pickle"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("not base64 at all!", "bad_base64"),
        ("Zm9v\n", "bad_base64"),
        ("é", "bad_base64"),
        (12345, "bad_base64"),
        (base64.b64encode(b"garbage, not lz4 nor pickle").decode(), "corrupt_lz4"),
        (base64.b64encode(lz4.frame.compress(b"\x80\x05garbage")).decode(), "bad_pickle"),
        (base64.b64encode(lz4.frame.compress(b"garbage")).decode(), "corrupt_lz4"),
        (base64.b64encode(lz4.frame.compress(b"x" * 100)[:-8]).decode(), "corrupt_lz4"),
    ],
)
def test_legacy_unpack_garbage(value: Any, reason: str) -> None:
    with pytest.raises(DecodeError) as info:
        legacy_unpack(value)
    assert info.value.reason == reason
