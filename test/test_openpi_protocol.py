"""The msgpack-numpy wire format: openpi-compatible, strict, bounded."""

from __future__ import annotations

import tracemalloc

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openpi_client import msgpack_numpy as openpi_codec

from vla_edge.core.errors import MessageTooLargeError, ProtocolError
from vla_edge.runners.openpi_protocol import ProtocolLimits, pack, unpack


def _sample_message() -> dict:
    return {
        "observation/image": np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3),
        "observation/state": np.linspace(-1.0, 1.0, 7),
        "noise": np.ones((10, 7), dtype=np.float32),
        "flags": np.array([True, False]),
        "ints": np.array([[1, -2], [3, 4]], dtype=np.int16),
        "empty": np.zeros((0, 7), dtype=np.float32),
        "scalar_i": np.int32(-5),
        "scalar_b": np.bool_(True),
        "prompt": "put the red block in the bowl",
        "nested": {"list": [1, 2.5, "x", None], "blob": b"\x00\x01"},
    }


def _assert_same(a: object, b: object) -> None:
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray)
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b)
        for key in a:
            _assert_same(a[key], b[key])
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_same(x, y)
    else:
        assert a == b and type(a) is type(b)


def test_encoding_is_byte_identical_to_openpi_client() -> None:
    message = _sample_message()
    assert pack(message) == openpi_codec.packb(message)


def test_openpi_client_decodes_what_we_encode() -> None:
    message = _sample_message()
    _assert_same(message, openpi_codec.unpackb(pack(message)))


def test_we_decode_what_openpi_client_encodes() -> None:
    message = _sample_message()
    _assert_same(message, unpack(openpi_codec.packb(message)))


def test_decoded_arrays_are_read_only_views() -> None:
    decoded = unpack(pack({"a": np.ones(4, dtype=np.float32)}))
    assert not decoded["a"].flags.writeable


def test_message_over_max_message_bytes_raises_message_too_large() -> None:
    data = pack({"image": np.zeros(2048, dtype=np.uint8)})
    with pytest.raises(MessageTooLargeError, match=r"message size = \d+ bytes.*max_message_bytes"):
        unpack(data, ProtocolLimits(max_message_bytes=1024))


def test_object_and_complex_arrays_cannot_be_encoded() -> None:
    with pytest.raises(ProtocolError, match="dtype = '\\|O'"):
        pack({"a": np.array([object()], dtype=object)})
    with pytest.raises(ProtocolError, match="dtype = '<c16'"):
        pack({"a": np.zeros(2, dtype=np.complex128)})
    with pytest.raises(ProtocolError, match="type = set"):
        pack({"a": {1, 2}})


def _forged_array(dtype: object, shape: object, data: bytes) -> bytes:
    return msgpack.packb(
        {"x": {b"__ndarray__": True, b"data": data, b"dtype": dtype, b"shape": shape}}
    )


@pytest.mark.parametrize(
    "dtype",
    ["|O", "<c16", "|V8", "<M8[s]", "[('a', '<f4')]", "<U4", "|S4", "f4, f4", "<f16", 7, None],
)
def test_disallowed_or_malformed_dtype_is_refused(dtype: object) -> None:
    with pytest.raises(ProtocolError, match="array dtype = "):
        unpack(_forged_array(dtype, [1], b"\x00" * 8))


def test_dtype_outside_configured_allow_list_is_refused() -> None:
    limits = ProtocolLimits(allowed_dtypes=frozenset({"u1"}))
    with pytest.raises(ProtocolError, match=r"array dtype = '<f4': not allowed.*\['u1'\]"):
        unpack(pack({"a": np.zeros(3, dtype=np.float32)}), limits)


def test_huge_declared_shape_is_refused_without_allocating() -> None:
    message = _forged_array("<f8", [100_000, 100_000, 100_000], b"\x00" * 8)
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError, match=r"elements: exceeds max_array_elements = \d+"):
            unpack(message)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak_bytes < 1_000_000


def test_shape_that_does_not_match_data_length_is_refused() -> None:
    with pytest.raises(ProtocolError, match=r"array data = 8 bytes.*needs exactly 80 bytes"):
        unpack(_forged_array("<f8", [10], b"\x00" * 8))


@pytest.mark.parametrize(
    ("shape", "words"),
    [
        ([-1], "integers >= 0"),
        ([1.5], "integers >= 0"),
        ([True], "integers >= 0"),
        ("12", "max_ndim"),
        ([1] * 9, "max_ndim = 8"),
    ],
)
def test_malformed_shape_is_refused(shape: object, words: str) -> None:
    with pytest.raises(ProtocolError, match=words):
        unpack(_forged_array("<f8", shape, b"\x00" * 8))


def test_array_with_non_bytes_data_or_missing_field_is_refused() -> None:
    with pytest.raises(ProtocolError, match="array data is str: must be bytes"):
        unpack(_forged_array("|u1", [1], "a"))  # type: ignore[arg-type]
    missing = msgpack.packb({b"__ndarray__": True, b"dtype": "<f8", b"shape": [1]})
    with pytest.raises(ProtocolError, match="array field 'data' is missing"):
        unpack(missing)


def test_scalar_that_does_not_fit_its_dtype_is_refused() -> None:
    forged = msgpack.packb({b"__npgeneric__": True, b"data": 300, b"dtype": "|u1"})
    with pytest.raises(ProtocolError, match=r"scalar data = 300: does not fit dtype \|u1"):
        unpack(forged)
    forged = msgpack.packb({b"__npgeneric__": True, b"data": "1", b"dtype": "<f8"})
    with pytest.raises(ProtocolError, match="scalar data = '1': must be a number"):
        unpack(forged)


def test_truncated_message_is_refused() -> None:
    data = pack(_sample_message())
    for cut in (1, len(data) // 3, len(data) // 2, len(data) - 1):
        with pytest.raises(ProtocolError, match="not valid msgpack"):
            unpack(data[:cut])


def test_trailing_bytes_are_refused() -> None:
    with pytest.raises(ProtocolError, match="ExtraData"):
        unpack(pack({"a": 1}) + b"\x00")


def test_ext_types_and_timestamps_are_refused() -> None:
    with pytest.raises(ProtocolError, match="ext"):
        unpack(msgpack.packb({"t": msgpack.ExtType(5, b"abcd")}))
    with pytest.raises(ProtocolError, match="ext"):
        unpack(msgpack.packb({"t": msgpack.Timestamp(1, 0)}))


def test_too_many_container_items_are_refused() -> None:
    data = msgpack.packb([[0] * 100 for _ in range(100)])
    with pytest.raises(ProtocolError, match=r"container items = \d+: exceeds max_items = 1000"):
        unpack(data, ProtocolLimits(max_items=1000))


def test_declared_container_length_beyond_message_is_refused() -> None:
    # array32 header claiming 2**32 - 1 items, with nothing behind it
    with pytest.raises(ProtocolError, match="max_array_len"):
        unpack(b"\xdd\xff\xff\xff\xff")


def test_deep_nesting_is_refused() -> None:
    with pytest.raises(ProtocolError, match="not valid msgpack"):
        unpack(b"\x91" * 5000 + b"\x00")


def test_non_bytes_input_is_refused() -> None:
    with pytest.raises(ProtocolError, match="message type = str: must be bytes"):
        unpack("hello")  # type: ignore[arg-type]


def test_non_positive_limit_is_refused() -> None:
    with pytest.raises(ProtocolError, match=r"ProtocolLimits.max_message_bytes = 0: must be"):
        ProtocolLimits(max_message_bytes=0)


def test_decoding_memory_is_bounded_by_the_message_size() -> None:
    limits = ProtocolLimits(max_message_bytes=2_000_000)
    message = pack({"image": np.zeros(1_500_000, dtype=np.uint8), "state": np.zeros(7)})
    tracemalloc.start()
    try:
        decoded = unpack(message, limits)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert decoded["image"].shape == (1_500_000,)
    assert peak_bytes < 2 * len(message) + 100_000


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_arbitrary_bytes_decode_or_raise_protocol_error(data: bytes) -> None:
    try:
        unpack(data, ProtocolLimits(max_message_bytes=4096, max_items=256))
    except ProtocolError:
        pass


_VALID = pack(_sample_message())


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, len(_VALID) - 1), st.integers(0, 255)), max_size=8),
    st.integers(1, len(_VALID)),
)
def test_corrupted_valid_messages_decode_or_raise_protocol_error(
    flips: list[tuple[int, int]], keep: int
) -> None:
    data = bytearray(_VALID[:keep])
    for position, value in flips:
        if position < len(data):
            data[position] = value
    tracemalloc.start()
    try:
        unpack(bytes(data))
    except ProtocolError:
        pass
    finally:
        _, peak_bytes = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak_bytes < 20 * len(_VALID) + 200_000
