"""V2 (Open Inference Protocol) tensors <-> numpy arrays, and the JSON used on the wire.

One codec for every face: REST JSON ``data``, the binary tensor data extension
(``binary_data_size`` / ``Inference-Header-Content-Length``) and gRPC
``raw_input_contents`` all end up in :func:`decode_tensor` / :func:`encode_tensor`.
A face that has raw bytes for a tensor attaches them to its JSON object under
:data:`RAW`; the codec then reads those instead of ``data``.

Choices callers must know:

- BYTES decode to an ``object`` array: JSON ``data`` keeps its ``str`` elements,
  raw (binary) data yields ``bytes`` elements. Encoding accepts both; JSON output
  decodes ``bytes`` as UTF-8 and refuses bytes that are not (use binary output).
- BF16 is binary-only (per the spec). It decodes to ``float32`` (the upper 16 bits)
  and encodes float32 with round-to-nearest-even; ``DATATYPES["BF16"]`` is float32.
- Decoded arrays are always writable, native byte order, C-contiguous copies.
- JSON data is checked, not coerced: ``"1.5"`` or ``true`` for FP32, ``1.5`` for
  INT32, ``300`` for UINT8 or ``2`` for BOOL are errors. Integral floats (``2.0``)
  are accepted for integer types; BOOL accepts JSON booleans and 0/1 integers.
- Every bad input raises :class:`~mlserve.protocol.errors.InvalidInput` naming the tensor.
"""

from __future__ import annotations

import base64
import json
import math
import struct
import sys
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from mlserve.protocol import nonfinite
from mlserve.protocol.errors import InvalidInput

__all__ = [
    "BINARY_HEADER",
    "DATATYPES",
    "RAW",
    "datatype_of",
    "decode_raw",
    "decode_tensor",
    "plain_output",
    "plain_tensor",
    "dumps",
    "dumps_lossless",
    "dumps_strict",
    "encode_raw",
    "encode_tensor",
    "join_binary_body",
    "loads",
    "split_binary_body",
]

DATATYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BF16": np.dtype(np.float32),  # numpy has no bfloat16: decoded values widen to float32
    "BYTES": np.dtype(object),
}

RAW = "_raw_contents"

# The header of the binary data extension: the length of the JSON part of the body.
BINARY_HEADER = "Inference-Header-Content-Length"

Array = npt.NDArray[Any]

# (dtype kind, itemsize) -> datatype; BF16 is never inferred, float32 is FP32.
_INFERRED: dict[tuple[str, int], str] = {
    (dtype.kind, dtype.itemsize): name
    for name, dtype in DATATYPES.items()
    if name not in ("BF16", "BYTES")
}
_TEXT_KINDS = "OSU"
_LENGTH = struct.Struct("<I")


def _where(name: str, message: str) -> str:
    return f"tensor {name!r}: {message}" if name else message


def _dtype_of(datatype: str, name: str) -> np.dtype[Any]:
    try:
        return DATATYPES[datatype]
    except (KeyError, TypeError):
        known = ", ".join(DATATYPES)
        raise InvalidInput(
            _where(name, f"unknown datatype {datatype!r} (one of {known})")
        ) from None


def _infer(dtype: np.dtype[Any], name: str) -> str:
    if dtype.kind in _TEXT_KINDS:
        return "BYTES"
    try:
        return _INFERRED[(dtype.kind, dtype.itemsize)]
    except KeyError:
        raise InvalidInput(_where(name, f"numpy dtype {dtype} has no V2 datatype")) from None


def datatype_of(array: Array) -> str:
    """V2 datatype name of a numpy array; text and object arrays are BYTES, never BF16."""
    return _infer(array.dtype, "")


# --- shapes -------------------------------------------------------------------------------


def _check_shape(shape: object, name: str) -> list[int]:
    """Shapes come from JSON: a list of non-negative ints, bools excluded."""
    if type(shape) is list:  # as JSON gives it: checked in one pass, kept as is (never mutated)
        for dim in shape:
            if type(dim) is not int or dim < 0:
                break
        else:
            return shape
    if not isinstance(shape, list | tuple):
        raise InvalidInput(_where(name, f"shape must be a list of integers, got {shape!r}"))
    for dim in shape:
        if type(dim) is not int and (isinstance(dim, bool) or not isinstance(dim, np.integer)):
            raise InvalidInput(_where(name, f"shape {shape!r} must hold non-negative integers"))
        if dim < 0:
            raise InvalidInput(_where(name, f"shape {shape!r} must hold non-negative integers"))
    return [int(dim) for dim in shape]


def _fit(array: Array, shape: list[int], name: str) -> Array:
    expected = math.prod(shape)
    if array.size != expected:
        raise InvalidInput(
            _where(name, f"expected {expected} elements for shape {shape}, got {array.size}")
        )
    return array.reshape(shape)


# --- JSON data -> array ---------------------------------------------------------------------


def _flatten(data: object) -> list[Any]:
    """Leaves of nested lists, row-major; iterative so deep nesting cannot blow the stack."""
    if isinstance(data, np.ndarray):
        return list(data.ravel().tolist())
    if not isinstance(data, list | tuple):
        return [data]
    leaves: list[Any] = []
    stack: list[Iterable[Any]] = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list | tuple):
                stack.append(iter(item))
                break
            leaves.append(item)
        else:
            stack.pop()
    return leaves


def _bad_value(value: object, datatype: str, name: str) -> InvalidInput:
    return InvalidInput(_where(name, f"{value!r} is not a valid {datatype} value"))


def _numbers(data: object, datatype: str, name: str) -> Array:
    """A numeric array of the values as sent, before any cast.

    numpy infers the widest type itself (fast for the common flat list); only
    ragged nesting, non-numbers and ints beyond 64 bits take the slow path.
    """
    try:
        array = np.asarray(data)
    except (ValueError, TypeError):
        array = None
    if array is not None and array.dtype.kind in "biuf":
        return array
    leaves = _flatten(data)
    for value in leaves:
        if not isinstance(value, bool | int | float | np.number | np.bool_):
            raise _bad_value(value, datatype, name)
    array = np.asarray(leaves)
    if array.dtype.kind in "biuf":
        return array
    # Only Python ints wider than 64 bits get here: fine as floats, never as integers.
    if DATATYPES[datatype].kind != "f":
        raise InvalidInput(_where(name, f"values out of range for {datatype}"))
    try:
        return np.array([float(value) for value in leaves])
    except OverflowError:
        raise InvalidInput(_where(name, f"values out of range for {datatype}")) from None


def _to_bool(array: Array, datatype: str, name: str) -> Array:
    if array.dtype.kind == "b":
        return array
    if not array.size:  # an empty JSON list reads as float64
        return array.astype(np.bool_)
    if array.dtype.kind in "iu" and bool(np.isin(array, (0, 1)).all()):
        return array.astype(np.bool_)
    raise InvalidInput(_where(name, "BOOL values must be JSON booleans or 0/1 integers"))


def _to_int(array: Array, datatype: str, name: str) -> Array:
    dtype = DATATYPES[datatype]
    if array.dtype.kind == "b":
        raise InvalidInput(_where(name, f"booleans are not valid {datatype} values"))
    if array.size:
        info = np.iinfo(dtype)
        low, high = int(array.min()), int(array.max())
        if low < info.min or high > info.max:
            bad = low if low < info.min else high
            raise InvalidInput(_where(name, f"{bad} is out of range for {datatype}"))
    return array.astype(dtype)


def _integers(numbers: Array, data: object, datatype: str, name: str) -> Array:
    """Integral floats (``2.0``) as integers, exact even past float64's 53 bits.

    numpy also infers float64 when big unsigned and negative or small ints mix.
    """
    fractional = ~np.isfinite(numbers) | (numbers != np.trunc(numbers))
    if fractional.any():
        raise _bad_value(numbers[fractional][0].item(), datatype, name)
    if not numbers.size or np.abs(numbers).max() < 2**53:
        return numbers.astype(np.int64)
    return np.array([int(value) for value in _flatten(data)], dtype=object)


_SMALL = 64  # arrays up to this size are range-checked in Python before a narrowing cast


_FLOAT_MAX = {np.dtype(t): float(np.finfo(t).max) for t in (np.float16, np.float32)}


def _fits(array: Array, dtype: np.dtype[Any]) -> bool:
    """All values finite-safe for ``dtype``: no overflow warning from the cast."""
    high = _FLOAT_MAX[dtype]
    values = array.ravel().tolist()
    # max and min, not a generator over the values: a NaN that comes first makes the
    # comparison False (the checked cast then runs); one that comes later is skipped.
    return not values or (max(values) <= high and min(values) >= -high)


def _to_float(array: Array, datatype: str, name: str) -> Array:
    dtype = DATATYPES[datatype]
    if array.dtype.kind == "b":
        raise InvalidInput(_where(name, f"booleans are not valid {datatype} values"))
    if array.dtype == dtype:
        return array
    if dtype.itemsize < 8 and array.size <= _SMALL and _fits(array, dtype):
        return array.astype(dtype)  # no overflow possible: skip errstate (2 us, more than the cast)
    with np.errstate(over="ignore"):
        result = array.astype(dtype)
    if dtype.itemsize < 8:
        overflow = np.isinf(result) & np.isfinite(array)
        if overflow.any():
            raise InvalidInput(
                _where(name, f"{array[overflow][0].item()} is out of range for {datatype}")
            )
    return result


def _to_bytes(data: object, datatype: str, name: str) -> Array:
    leaves = _flatten(data)
    for value in leaves:
        if not isinstance(value, str | bytes):
            raise _bad_value(value, datatype, name)
    array = np.empty(len(leaves), dtype=object)
    array[:] = leaves
    return array


_FROM_NUMBERS: dict[str, Callable[[Array, str, str], Array]] = {
    "b": _to_bool,
    "u": _to_int,
    "i": _to_int,
    "f": _to_float,
}


def _from_json(data: object, datatype: str, name: str) -> Array:
    if datatype == "BF16":
        raise InvalidInput(_where(name, "BF16 data must be sent in binary form"))
    if datatype == "BYTES":
        return _to_bytes(data, datatype, name)
    kind = DATATYPES[datatype].kind
    numbers = _numbers(data, datatype, name)
    if kind in "iu" and numbers.dtype.kind == "f":
        numbers = _integers(numbers, data, datatype, name)
    return _FROM_NUMBERS[kind](numbers, datatype, name)


def _fast_bounds(dtype: np.dtype[Any]) -> tuple[float, float]:
    if dtype.kind == "f":  # beyond 2**53 an int would round twice on its way to float32
        high = min(float(np.finfo(dtype).max), 2.0**53)
        return -high, high
    info = np.iinfo(dtype)
    return info.min, info.max


_INT = frozenset({int})

# datatype -> (dtype, lowest, highest, the JSON number types that are its values,
# its little-endian wire dtype, the dtype an ndarray's data may have (floats only, else
# None)), for plain_tensor: numeric datatypes but BOOL and BF16.
_PLAIN: dict[
    str,
    tuple[np.dtype[Any], float, float, frozenset[type], np.dtype[Any], np.dtype[Any] | None],
] = {
    name: (
        dtype,
        *_fast_bounds(dtype),
        frozenset({int, float}) if dtype.kind == "f" else _INT,
        dtype.newbyteorder("<"),
        dtype if dtype.kind == "f" else None,
    )
    for name, dtype in DATATYPES.items()
    if dtype.kind in "iuf" and name != "BF16"
}


def plain_tensor(obj: dict[str, Any]) -> Array | None:
    """The common well-formed tensor in a few C calls, or None for the checked path.

    Common: a numeric datatype (not BOOL, BF16), a shape of plain ints, and either
    raw ``bytes`` of the right length, an ndarray of the datatype's float dtype, or
    a flat JSON list of up to _SMALL plain numbers in range whose count matches.
    ``decode_tensor`` gives the same array for all of these; everything else (and
    every error, with its message) is its business alone.
    """
    try:
        name, shape, spec = obj["name"], obj["shape"], _PLAIN.get(obj["datatype"])
    except (KeyError, TypeError):  # a key missing, an unhashable datatype
        return None
    if spec is None or type(name) is not str or not name or type(shape) is not list:
        return None
    if not set(map(type, shape)) <= _INT or min(shape, default=0) < 0:
        return None
    count = math.prod(shape)
    dtype, low, high, kinds, wire, floats = spec
    if RAW not in obj:
        data = obj.get("data")
        if type(data) is list:
            if not 0 < len(data) == count <= _SMALL or not set(map(type, data)) <= kinds:
                return None  # bools, text, nested lists, a count the shape does not hold
            # A NaN first makes both comparisons False (the checked path takes it); a later
            # one is skipped by min and max, and numpy keeps it as the checked path would.
            if not (low <= min(data) and max(data) <= high):
                return None
            return np.array(data, dtype).reshape(shape)
        # Typed gRPC contents: a float ndarray of the datatype's own (canonical) dtype.
        if type(data) is np.ndarray and data.dtype is floats and data.size == count:
            return data.reshape(shape)
        return None
    raw = obj[RAW]
    if type(raw) is not bytes or len(raw) != count * dtype.itemsize:
        return None
    return np.frombuffer(raw, wire).astype(dtype).reshape(shape)


def decode_tensor(obj: dict[str, Any]) -> Array:
    """One V2 input tensor object -> ndarray of its declared shape and datatype.

    Reads ``obj[RAW]`` (binary form) when a face attached it, else ``obj["data"]``
    (nested or flat; a bare scalar for shape ``[]`` or ``[1]``).
    """
    array = plain_tensor(obj) if type(obj) is dict else None
    return _decode_checked(obj) if array is None else array


def _decode_checked(obj: dict[str, Any]) -> Array:
    """decode_tensor for any object: every check, every error message."""
    if not isinstance(obj, dict):
        kind = type(obj).__name__
        raise InvalidInput(f"a tensor must be an object with name, shape and datatype, not {kind}")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"tensor without a 'name' (keys: {sorted(map(str, obj))})")
    for key in ("shape", "datatype"):
        if key not in obj:
            raise InvalidInput(_where(name, f"missing {key!r}"))
    shape = _check_shape(obj["shape"], name)
    datatype = obj["datatype"]
    _dtype_of(datatype, name)
    if obj.get(RAW) is not None:
        return decode_raw(obj[RAW], datatype, shape, name)
    if "data" not in obj:
        raise InvalidInput(_where(name, "missing 'data'"))
    return _fit(_from_json(obj["data"], datatype, name), shape, name)


# --- raw (binary) codec ---------------------------------------------------------------------


def _decode_bytes_elements(raw: memoryview, count: int, name: str) -> Array:
    """BYTES raw form: each element is a 4-byte little-endian length, then its bytes."""
    array = np.empty(count, dtype=object)
    offset = 0
    for index in range(count):
        if offset + 4 > len(raw):
            raise InvalidInput(_where(name, f"raw BYTES data ends before element {index}"))
        (length,) = _LENGTH.unpack_from(raw, offset)
        offset += 4
        if offset + length > len(raw):
            raise InvalidInput(_where(name, f"raw BYTES element {index} is truncated"))
        array[index] = bytes(raw[offset : offset + length])
        offset += length
    if offset != len(raw):
        extra = len(raw) - offset
        raise InvalidInput(_where(name, f"{extra} bytes left after {count} BYTES elements"))
    return array


def _decode_fixed(raw: memoryview, datatype: str, count: int, name: str) -> Array:
    itemsize = 2 if datatype == "BF16" else DATATYPES[datatype].itemsize
    if len(raw) != count * itemsize:
        raise InvalidInput(
            _where(
                name,
                f"raw data has {len(raw)} bytes, expected {count * itemsize} "
                f"({count} {datatype} elements of {itemsize} bytes)",
            )
        )
    if datatype == "BOOL":
        return np.frombuffer(raw, dtype=np.uint8).astype(np.bool_)
    if datatype == "BF16":
        upper = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return upper.view(np.float32)
    return np.frombuffer(raw, dtype=DATATYPES[datatype].newbyteorder("<")).astype(
        DATATYPES[datatype]
    )


def decode_raw(
    raw: bytes | bytearray | memoryview, datatype: str, shape: list[int], name: str = ""
) -> Array:
    """Raw row-major little-endian bytes (binary extension, gRPC raw contents) -> ndarray."""
    _dtype_of(datatype, name)
    shape = _check_shape(shape, name)
    if not isinstance(raw, bytes | bytearray | memoryview):
        raise InvalidInput(_where(name, f"raw data must be bytes, got {type(raw).__name__}"))
    try:
        view = memoryview(raw).cast("B")
    except TypeError:
        raise InvalidInput(_where(name, "raw data must be contiguous bytes")) from None
    count = math.prod(shape)
    if datatype == "BYTES":
        return _decode_bytes_elements(view, count, name).reshape(shape)
    return _decode_fixed(view, datatype, count, name).reshape(shape)


def _element_bytes(value: object) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return str(value).encode("utf-8")


def _bf16_bits(array: Array) -> Array:
    """float32 -> upper 16 bits, rounded to nearest even; NaN stays a (quiet) NaN."""
    bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = (bits >> 16 | 0x40) & 0xFFFF
    return np.where(np.isnan(array), nan, rounded).astype("<u2")


def encode_raw(array: Array, datatype: str) -> bytes:
    """ndarray -> raw row-major little-endian bytes; BYTES elements length-prefixed."""
    array = _cast(_as_array(array, ""), datatype, "")
    if datatype == "BYTES":
        parts = [_element_bytes(value) for value in array.ravel()]
        return b"".join(_LENGTH.pack(len(part)) + part for part in parts)
    if datatype == "BF16":
        return _bf16_bits(array).tobytes()
    return np.ascontiguousarray(array, dtype=DATATYPES[datatype].newbyteorder("<")).tobytes()


# --- array -> tensor object -----------------------------------------------------------------


def _as_array(value: object, name: str) -> Array:
    """Array-likes -> ndarray; text stays as Python objects (numpy 'S' would drop NULs)."""
    if isinstance(value, np.ndarray):
        array = value
    else:
        try:
            array = np.asarray(value)
            if array.dtype.kind in "SU":
                array = np.array(value, dtype=object)
        except (ValueError, TypeError) as exc:
            raise InvalidInput(_where(name, f"cannot be made an array: {exc}")) from None
    if array.dtype.kind in "SU":
        return array.astype(object)
    return array


def _cast(array: Array, datatype: str, name: str) -> Array:
    dtype = _dtype_of(datatype, name)
    if array.dtype == dtype:
        return array
    try:
        with np.errstate(all="ignore"):
            return array.astype(dtype, copy=False)
    except (ValueError, TypeError) as exc:
        raise InvalidInput(_where(name, f"cannot be cast to {datatype}: {exc}")) from None


def _text(value: object, name: str) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInput(
                _where(name, "BYTES element is not valid UTF-8; request binary output instead")
            ) from None
    return str(value)


# Outputs with at least this many elements keep their data as a numpy array, which
# ``dumps`` writes without making a Python number per element.
NUMPY_OUTPUT_SIZE = 1 << 16


def _json_data(array: Array, datatype: str, name: str) -> list[Any]:
    if datatype == "BF16":
        raise InvalidInput(_where(name, "BF16 can only be sent in binary form"))
    if datatype == "BYTES":
        return [_text(value, name) for value in array.ravel()]
    if array.size >= NUMPY_OUTPUT_SIZE and array.dtype.isnative:
        # orjson writes a numpy array itself: no Python object per element.
        return np.ascontiguousarray(array.ravel())  # type: ignore[return-value]
    return array.ravel().tolist()  # NaN and infinities too: dumps writes them by the rule


# Native numeric dtype -> datatype, for plain_output; empty on a big-endian host, where
# an array's own bytes are not the wire's.
_NATIVE: dict[np.dtype[Any], str] = (
    {dtype: name for name, dtype in DATATYPES.items() if name not in ("BF16", "BYTES")}
    if sys.byteorder == "little"
    else {}
)


def plain_output(name: str, array: Array, binary: bool | None) -> dict[str, Any] | None:
    """The common output (a native numeric ndarray: its bytes, or up to _SMALL
    values) without the general casts and checks; None for encode_tensor's general path,
    which builds the same object for what this accepts."""
    datatype = _NATIVE.get(array.dtype)
    if datatype is None:
        return None
    if binary:
        raw = array.tobytes()
        return {
            "name": name,
            "datatype": datatype,
            "shape": list(array.shape),
            "parameters": {"binary_data_size": len(raw)},
            RAW: raw,
        }
    if array.size > _SMALL:
        return None
    return {
        "name": name,
        "datatype": datatype,
        "shape": list(array.shape),
        "data": array.ravel().tolist(),
    }


# The keys of an output as plain_output writes it in binary form, in its order.
_PLAIN_BINARY_KEYS = ("name", "datatype", "shape", "parameters", RAW)


def plain_binary(obj: object) -> bytes | None:
    """The bytes of an output exactly as ``plain_output`` writes it in binary form (its
    keys in that order, ``binary_data_size`` its only parameter): the model's usual
    answer, which the faces write in fewer steps; None for any other object."""
    if type(obj) is dict and tuple(obj) == _PLAIN_BINARY_KEYS:
        raw = obj[RAW]
        if type(raw) is bytes and obj["parameters"] == {"binary_data_size": len(raw)}:
            return raw
    return None


def encode_tensor(
    name: str, value: object, datatype: str | None = None, binary: bool = False
) -> dict[str, Any]:
    """Array-like -> V2 output tensor object ``{"name", "datatype", "shape", "data"}``.

    The datatype is inferred from numpy unless given (then the value is cast).
    With ``binary=True`` there is no ``data``: the raw bytes sit under :data:`RAW`
    and ``parameters.binary_data_size`` says how many there are.
    """
    if datatype is None and type(value) is np.ndarray:  # a model's usual answer
        obj = plain_output(name, value, binary)
        if obj is not None:
            return obj
    return encode_checked(name, value, datatype, binary)


def encode_checked(
    name: str, value: object, datatype: str | None, binary: bool | None
) -> dict[str, Any]:
    """encode_tensor for any value: every cast, every check, every error message."""
    array = _as_array(value, name)
    if datatype is None:
        datatype = _infer(array.dtype, name)
    array = _cast(array, datatype, name)
    obj: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
    if not binary:
        obj["data"] = _json_data(array, datatype, name)
        return obj
    raw = encode_raw(array, datatype)
    obj["parameters"] = {"binary_data_size": len(raw)}
    obj[RAW] = raw
    return obj


# --- binary tensor data extension (REST) ----------------------------------------------------


def _binary_size(obj: Any) -> int | None:
    parameters = obj.get("parameters") if isinstance(obj, dict) else None
    if not isinstance(parameters, dict) or "binary_data_size" not in parameters:
        return None
    size = parameters["binary_data_size"]
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise InvalidInput(_where(str(obj.get("name", "")), f"bad binary_data_size {size!r}"))
    return size


def _tensor_lists(body: dict[str, Any]) -> list[list[Any]]:
    return [body[key] for key in ("inputs", "outputs") if isinstance(body.get(key), list)]


def split_binary_body(body: bytes, header_length: int) -> dict[str, Any]:
    """JSON header + concatenated raw tensors -> the header with each tensor's bytes under RAW.

    Tensors (``inputs``, then ``outputs`` for responses) claim their bytes in order,
    by ``parameters.binary_data_size``; the sizes must account for every byte.
    """
    if isinstance(header_length, bool) or not isinstance(header_length, int):
        raise InvalidInput(f"bad JSON header length {header_length!r}")
    if not 0 <= header_length <= len(body):
        raise InvalidInput(
            f"JSON header length {header_length} is beyond the {len(body)}-byte body"
        )
    header = loads(memoryview(body)[:header_length])
    if not isinstance(header, dict):
        raise InvalidInput("the JSON header must be an object")
    offset = header_length
    for tensors in _tensor_lists(header):
        for obj in tensors:
            size = _binary_size(obj)
            if size is None:
                continue
            name = str(obj.get("name", ""))
            if "data" in obj:
                raise InvalidInput(_where(name, "has both 'data' and binary_data_size"))
            if offset + size > len(body):
                raise InvalidInput(_where(name, f"binary_data_size {size} runs past the body"))
            obj[RAW] = bytes(body[offset : offset + size])
            offset += size
    if offset != len(body):
        raise InvalidInput(
            f"binary data sizes add up to {offset - header_length} bytes, "
            f"but {len(body) - header_length} follow the JSON header"
        )
    return header


def _detach_raw(obj: object, chunks: list[bytes]) -> Any:
    if not isinstance(obj, dict) or obj.get(RAW) is None:
        return obj
    raw = plain_binary(obj)
    if raw is not None:  # the usual answer: what the code below gives, key for key
        chunks.append(raw)
        return {
            "name": obj["name"],
            "datatype": obj["datatype"],
            "shape": obj["shape"],
            "parameters": obj["parameters"],
        }
    raw = bytes(obj[RAW])
    chunks.append(raw)
    detached = {key: value for key, value in obj.items() if key != RAW}
    detached["parameters"] = {**(obj.get("parameters") or {}), "binary_data_size": len(raw)}
    return detached


def join_binary_body(body: dict[str, Any]) -> tuple[bytes, int]:
    """Inverse of :func:`split_binary_body`: ``(JSON header + raw tensors, header length)``.

    Tensors under RAW (``inputs``, then ``outputs``) lose it in the JSON and have
    their bytes appended in order; ``body`` itself is left untouched.
    """
    chunks: list[bytes] = []
    header = dict(body)
    for key in ("inputs", "outputs"):
        if isinstance(body.get(key), list):
            header[key] = [_detach_raw(obj, chunks) for obj in body[key]]
    text = dumps(header)
    return text + b"".join(chunks), len(text)


# --- JSON ------------------------------------------------------------------------------------


def _default(value: object) -> Any:
    """What orjson cannot write natively: numpy leftovers, bytes, sets, dates."""
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    if isinstance(value, complex):
        return [value.real, value.imag]
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(raw).decode("ascii")
    if isinstance(value, set | frozenset):
        return list(value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


_DUMPS_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def dumps(obj: object) -> bytes:
    """JSON bytes of a response; numpy values anywhere in it are written, never a 500.

    Bytes that are not UTF-8 are written as base64 text. NaN and infinities are
    written by the process's rule (:mod:`mlserve.protocol.nonfinite`).
    """
    try:
        data = orjson.dumps(obj, default=_default, option=_DUMPS_OPTIONS)
    except orjson.JSONEncodeError:
        # orjson refuses some arrays (non-native byte order) without asking `default`.
        data = orjson.dumps(obj, default=_default, option=orjson.OPT_NON_STR_KEYS)
    # orjson wrote any NaN or infinity as null: JSON without a null is final. (partition, not
    # find or `in`: find parses an argument tuple, and on Python 3.11 a bytes `in` raises and
    # clears a TypeError before it scans.)
    if len(data) > _SHORT:
        if not _holds_null(data):
            return data
    elif not data.partition(b"null")[1]:
        return data
    return data if nonfinite.json_nonfinite() == "null" else _by_the_rule(obj)


# JSON longer than this is searched for null by memchr (_holds_null): a substring search
# costs some 3 instructions a byte of numbers, more than memchr's calls past this length.
_SHORT = 2048
_U = ord("u")


def _holds_null(data: bytes) -> bool:
    """Whether long JSON holds a null: memchr to each "u" (numbers have none, V2's keys
    one: "outputs"), and find's byte-by-byte search only past the fourth."""
    at = data.find(_U)
    for _ in range(4):
        if at == -1:
            return False
        if data[at - 1 : at + 3] == b"null":
            return True
        at = data.find(_U, at + 1)
    return at != -1 and data.find(b"null", at - 1) != -1


def _by_the_rule(obj: object, form: str = "") -> bytes:
    """``dumps(obj)`` with NaN and infinities written as the rule (or ``form``) says,
    not as null."""

    def default(value: object) -> Any:
        return nonfinite.marked(_default(value), form)

    marked = nonfinite.marked(obj, form)
    try:
        data = orjson.dumps(marked, default=default, option=_DUMPS_OPTIONS)
    except orjson.JSONEncodeError:
        data = orjson.dumps(marked, default=default, option=orjson.OPT_NON_STR_KEYS)
    return nonfinite.unmarked(data, form)


def dumps_lossless(obj: object) -> bytes:
    """``dumps`` for mlserve's own hops between graph steps (queues, remote steps): NaN
    and infinities stay bare tokens whatever the clients' rule, so the next step reads
    the numbers the last one wrote (``loads`` takes them)."""
    data = dumps_strict(obj)
    return data if not data.partition(b"null")[1] else _by_the_rule(obj, "literal")


def dumps_strict(obj: object) -> bytes:
    """``dumps`` for JSON that every parser reads, whatever the process's rule: NaN and
    infinities are null (the model-log stream, docs/monitoring.md#records)."""
    try:
        return orjson.dumps(obj, default=_default, option=_DUMPS_OPTIONS)
    except orjson.JSONEncodeError:
        return orjson.dumps(obj, default=_default, option=orjson.OPT_NON_STR_KEYS)


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse request JSON; bad JSON is the client's error (400), not ours."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        error = exc
    if _at_non_finite(data, error.pos):
        try:
            value = json.loads(data if isinstance(data, str) else bytes(data))
            orjson.dumps(value)  # what orjson refuses besides NaN (lone surrogates) stays refused
            return value
        except (ValueError, RecursionError, TypeError):
            pass
    raise InvalidInput(f"invalid JSON: {error}") from None


def _at_non_finite(data: bytes | bytearray | memoryview | str, pos: int) -> bool:
    """orjson stopped at NaN or Infinity (as Triton and TF Serving write them)."""
    text = data if isinstance(data, str) else bytes(data).decode("utf-8", "replace")
    return text.startswith(("NaN", "Infinity"), pos)
