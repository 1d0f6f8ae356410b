"""The openpi wire format: msgpack with numpy arrays, decoded strictly and within limits.

openpi's client and server exchange msgpack messages in which every numpy
array is a map ``{b"__ndarray__": True, b"data": <raw bytes>, b"dtype": "<f4",
b"shape": [..]}`` and every numpy scalar a map ``{b"__npgeneric__": True,
b"data": <python number>, b"dtype": "<f8"}``. This module writes and reads
exactly that layout (so ``openpi_client.msgpack_numpy`` understands us and we
understand it) but never uses pickle and decodes defensively:

* a message longer than ``max_message_bytes`` is refused before parsing;
* msgpack containers and strings are capped (``max_items`` in total), ext types
  (including msgpack timestamps) are refused;
* an array's dtype must be in ``allowed_dtypes`` (bool, integers, floats; never
  object, void, complex or structured), its shape at most ``max_ndim`` non-negative
  dimensions with at most ``max_array_elements`` elements, and its byte count
  must equal ``prod(shape) * itemsize`` — so a declared shape can never make the
  decoder allocate more than the message itself.

Peak memory of :func:`unpack` is about one copy of the message (msgpack copies
``bin`` payloads; arrays are zero-copy, read-only views of them) plus roughly
100 bytes per decoded container item, i.e. bounded by the limits.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

from vla_edge.core.errors import MessageTooLargeError, ProtocolError

DEFAULT_MAX_MESSAGE_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_ARRAY_ELEMENTS = 4 * 1024 * 1024

DEFAULT_ALLOWED_DTYPES: frozenset[str] = frozenset(
    {"b1", "u1", "i1", "u2", "i2", "u4", "i4", "u8", "i8", "f2", "f4", "f8"}
)
"""Allowed dtypes as ``kind + itemsize`` (byte order is free)."""

_NDARRAY = b"__ndarray__"
_NPGENERIC = b"__npgeneric__"
_DTYPE_TEXT = re.compile(r"^[<>|=]?[biuf][1248]$")


@dataclass(frozen=True)
class ProtocolLimits:
    """Bounds applied while decoding one message.

    Attributes:
        max_message_bytes: largest accepted message.
        max_array_elements: most elements in one array.
        max_ndim: most dimensions of one array.
        max_items: most container entries (map pairs + list items) in one message.
        allowed_dtypes: accepted array dtypes as ``kind + itemsize`` (e.g. ``"u1"``).
    """

    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_array_elements: int = DEFAULT_MAX_ARRAY_ELEMENTS
    max_ndim: int = 8
    max_items: int = 65536
    allowed_dtypes: frozenset[str] = field(default=DEFAULT_ALLOWED_DTYPES)

    def __post_init__(self) -> None:
        for name in ("max_message_bytes", "max_array_elements", "max_ndim", "max_items"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ProtocolError(f"ProtocolLimits.{name} = {value!r}: must be an integer >= 1")


def _dtype_key(dtype: np.dtype) -> str:
    return f"{dtype.kind}{dtype.itemsize}"


def _encode_default(obj: Any) -> Any:
    """Encode hook for msgpack's ``default``: numpy arrays and scalars in openpi's layout."""
    if isinstance(obj, np.ndarray | np.generic):
        if _dtype_key(obj.dtype) not in DEFAULT_ALLOWED_DTYPES:
            raise ProtocolError(
                f"dtype = {obj.dtype.str!r}: cannot be sent; allowed kinds are bool, "
                "integers and floats"
            )
        if isinstance(obj, np.ndarray):
            return {
                _NDARRAY: True,
                b"data": obj.tobytes(),
                b"dtype": obj.dtype.str,
                b"shape": obj.shape,
            }
        return {_NPGENERIC: True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise ProtocolError(f"type = {type(obj).__name__}: cannot be encoded (not msgpack or numpy)")


def pack(obj: Any) -> bytes:
    """Encode ``obj`` (dicts, lists, str, bytes, numbers, numpy arrays/scalars) to msgpack.

    Raises:
        ProtocolError: an object or dtype that the wire format cannot carry.
    """
    try:
        return msgpack.packb(obj, default=_encode_default)
    except ProtocolError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        raise ProtocolError(f"message cannot be encoded: {exc}") from exc


class _Decoder:
    """Object and list hooks that enforce :class:`ProtocolLimits` while msgpack parses."""

    def __init__(self, limits: ProtocolLimits) -> None:
        self.limits = limits
        self.items = 0

    def _count(self, n: int) -> None:
        self.items += n
        if self.items > self.limits.max_items:
            raise ProtocolError(
                f"container items = {self.items}: exceeds max_items = {self.limits.max_items}"
            )

    def list_hook(self, obj: list) -> list:
        self._count(len(obj))
        return obj

    def object_hook(self, obj: dict) -> Any:
        self._count(len(obj))
        if _NDARRAY in obj or "__ndarray__" in obj:
            return self._ndarray(obj)
        if _NPGENERIC in obj or "__npgeneric__" in obj:
            return self._npgeneric(obj)
        return obj

    @staticmethod
    def _field(obj: dict, name: str) -> Any:
        for key in (name.encode(), name):
            if key in obj:
                return obj[key]
        raise ProtocolError(f"array field {name!r} is missing (keys: {sorted(map(str, obj))})")

    def _dtype(self, obj: dict) -> np.dtype:
        text = self._field(obj, "dtype")
        if isinstance(text, bytes):
            text = text.decode("ascii", errors="replace")
        if not isinstance(text, str) or not _DTYPE_TEXT.match(text):
            raise ProtocolError(
                f"array dtype = {text!r}: not a plain numeric dtype "
                f"(allowed: {sorted(self.limits.allowed_dtypes)})"
            )
        dtype = np.dtype(text)
        if _dtype_key(dtype) not in self.limits.allowed_dtypes:
            allowed = sorted(self.limits.allowed_dtypes)
            raise ProtocolError(f"array dtype = {text!r}: not allowed (allowed: {allowed})")
        return dtype

    def _ndarray(self, obj: dict) -> np.ndarray:
        dtype = self._dtype(obj)
        shape = self._field(obj, "shape")
        if not isinstance(shape, list | tuple) or len(shape) > self.limits.max_ndim:
            raise ProtocolError(
                f"array shape = {shape!r}: must be a list of at most "
                f"max_ndim = {self.limits.max_ndim} integers"
            )
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise ProtocolError(f"array shape = {shape!r}: dimensions must be integers >= 0")
        n_elements = math.prod(shape)
        if n_elements > self.limits.max_array_elements:
            raise ProtocolError(
                f"array shape = {list(shape)} has {n_elements} elements: exceeds "
                f"max_array_elements = {self.limits.max_array_elements}"
            )
        data = self._field(obj, "data")
        if not isinstance(data, bytes):
            raise ProtocolError(f"array data is {type(data).__name__}: must be bytes")
        expected = n_elements * dtype.itemsize
        if len(data) != expected:
            raise ProtocolError(
                f"array data = {len(data)} bytes: shape {list(shape)} of dtype {dtype.str} "
                f"needs exactly {expected} bytes"
            )
        return np.frombuffer(data, dtype=dtype).reshape(shape)

    def _npgeneric(self, obj: dict) -> np.generic:
        dtype = self._dtype(obj)
        data = self._field(obj, "data")
        if not isinstance(data, int | float) or (isinstance(data, bool) and dtype.kind != "b"):
            raise ProtocolError(
                f"scalar data = {data!r}: must be a number matching dtype {dtype.str}"
            )
        try:
            return dtype.type(data)
        except (OverflowError, ValueError, TypeError) as exc:
            raise ProtocolError(f"scalar data = {data!r}: does not fit dtype {dtype.str}") from exc


def unpack(data: bytes | bytearray | memoryview, limits: ProtocolLimits | None = None) -> Any:
    """Decode one message, enforcing ``limits`` (defaults: :class:`ProtocolLimits`).

    Arrays come back as read-only numpy views of the message bytes.

    Raises:
        MessageTooLargeError: ``len(data) > limits.max_message_bytes``.
        ProtocolError: anything else that is not a well-formed, in-limits message.
    """
    limits = limits or ProtocolLimits()
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ProtocolError(f"message type = {type(data).__name__}: must be bytes")
    n_bytes = len(data)
    if n_bytes > limits.max_message_bytes:
        raise MessageTooLargeError(
            f"message size = {n_bytes} bytes: exceeds max_message_bytes = "
            f"{limits.max_message_bytes}"
        )
    decoder = _Decoder(limits)
    cap = min(n_bytes, limits.max_items)
    try:
        return msgpack.unpackb(
            data,
            raw=False,
            use_list=True,
            strict_map_key=True,
            object_hook=decoder.object_hook,
            list_hook=decoder.list_hook,
            max_str_len=n_bytes,
            max_bin_len=n_bytes,
            max_array_len=cap,
            max_map_len=cap,
            max_ext_len=0,
        )
    except ProtocolError:
        raise
    except (ValueError, TypeError, OverflowError, RecursionError, msgpack.UnpackException) as exc:
        raise ProtocolError(
            f"message ({n_bytes} bytes) is not valid msgpack: {type(exc).__name__}: {exc}"
        ) from exc
