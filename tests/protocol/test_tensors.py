from __future__ import annotations

import datetime
import struct
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from mlserve.protocol.errors import InvalidInput
from mlserve.protocol.tensors import (
    DATATYPES,
    RAW,
    datatype_of,
    decode_raw,
    decode_tensor,
    dumps,
    encode_raw,
    encode_tensor,
    join_binary_body,
    loads,
    split_binary_body,
)

SAMPLES: dict[str, Any] = {
    "BOOL": [[True, False], [False, True]],
    "UINT8": [[0, 255], [1, 2]],
    "UINT16": [[0, 65535], [1, 2]],
    "UINT32": [[0, 2**32 - 1], [1, 2]],
    "UINT64": [[0, 2**64 - 1], [1, 2]],
    "INT8": [[-128, 127], [0, 1]],
    "INT16": [[-(2**15), 2**15 - 1], [0, 1]],
    "INT32": [[-(2**31), 2**31 - 1], [0, 1]],
    "INT64": [[-(2**63), 2**63 - 1], [0, 1]],
    "FP16": [[0.5, -1.25], [65504.0, 0.0]],
    "FP32": [[0.5, -1.25], [3.0e38, 0.0]],
    "FP64": [[0.1, -1.25], [1e300, 0.0]],
    "BF16": [[1.0, -2.5], [0.15625, -0.0]],  # exact in bfloat16
    "BYTES": [["a", "hé"], ["", "x y"]],
}
Array = npt.NDArray[Any]
JSON_TYPES = [datatype for datatype in DATATYPES if datatype != "BF16"]


def sample(datatype: str) -> Array:
    return np.array(SAMPLES[datatype], dtype=DATATYPES[datatype])


def tensor(
    datatype: str = "FP32", shape: Any = (2,), data: Any = (1.0, 2.0), **extra: Any
) -> dict[str, Any]:
    obj = {"name": "t0", "shape": list(shape), "datatype": datatype, "data": data}
    return {**obj, **extra}


def assert_same(actual: Array, expected: Array) -> None:
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert actual.tolist() == expected.tolist()


def rejects(obj: dict[str, Any], *words: str) -> str:
    with pytest.raises(InvalidInput) as info:
        decode_tensor(obj)
    message = str(info.value)
    for word in words:
        assert word in message
    return message


# --- DATATYPES / datatype_of -------------------------------------------------------------


def test_all_fourteen_datatypes() -> None:
    assert sorted(DATATYPES) == sorted(
        "BOOL UINT8 UINT16 UINT32 UINT64 INT8 INT16 INT32 INT64 FP16 FP32 FP64 BF16 BYTES".split()
    )
    assert DATATYPES["BYTES"] == np.dtype(object)
    assert DATATYPES["BF16"] == np.dtype(np.float32)


@pytest.mark.parametrize(
    "dtype, datatype",
    [
        (np.bool_, "BOOL"),
        (np.uint8, "UINT8"),
        (np.uint16, "UINT16"),
        (np.uint32, "UINT32"),
        (np.uint64, "UINT64"),
        (np.int8, "INT8"),
        (np.int16, "INT16"),
        (np.int32, "INT32"),
        (np.int64, "INT64"),
        (np.float16, "FP16"),
        (np.float32, "FP32"),
        (np.float64, "FP64"),
        (">i4", "INT32"),
        (object, "BYTES"),
        ("U3", "BYTES"),
        ("S3", "BYTES"),
    ],
)
def test_datatype_of(dtype: Any, datatype: str) -> None:
    assert datatype_of(np.zeros(2, dtype=dtype)) == datatype


@pytest.mark.parametrize("dtype", [np.complex64, "datetime64[s]", "timedelta64[s]", "V4"])
def test_datatype_of_unsupported(dtype: Any) -> None:
    with pytest.raises(InvalidInput, match="no V2 datatype"):
        datatype_of(np.zeros(2, dtype=dtype))


# --- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize("datatype", JSON_TYPES)
def test_json_round_trip(datatype: str) -> None:
    obj = encode_tensor("t0", sample(datatype), datatype)
    assert obj["shape"] == [2, 2] and obj["datatype"] == datatype
    assert "parameters" not in obj and RAW not in obj
    wire = loads(dumps(obj))  # through real JSON, as a client would send it back
    assert_same(decode_tensor(wire), sample(datatype))


@pytest.mark.parametrize("datatype", list(DATATYPES))
def test_raw_round_trip(datatype: str) -> None:
    obj = encode_tensor("t0", sample(datatype), datatype, binary=True)
    assert "data" not in obj
    assert obj["parameters"] == {"binary_data_size": len(obj[RAW])}
    decoded = decode_tensor(obj)
    expected = sample(datatype)
    if datatype == "BYTES":  # raw BYTES come back as bytes
        expected = np.vectorize(lambda text: text.encode(), otypes=[object])(expected)
    assert_same(decoded, expected)


@pytest.mark.parametrize("datatype", list(DATATYPES))
def test_decoded_raw_is_writable_native(datatype: str) -> None:
    array = decode_raw(encode_raw(sample(datatype), datatype), datatype, [2, 2])
    assert array.flags.writeable and array.dtype.isnative


def test_nested_and_flat_data_decode_alike() -> None:
    flat = decode_tensor(tensor("INT32", [2, 3], [1, 2, 3, 4, 5, 6]))
    nested = decode_tensor(tensor("INT32", [2, 3], [[1, 2, 3], [4, 5, 6]]))
    other_nesting = decode_tensor(tensor("INT32", [2, 3], [[1, 2], [3, 4], [5, 6]]))
    assert_same(nested, flat)
    assert_same(other_nesting, flat)


def test_ragged_nesting_counts_elements() -> None:
    array = decode_tensor(tensor("FP64", [3], [[1.0], [2.0, 3.0]]))
    assert array.tolist() == [1.0, 2.0, 3.0]


def test_ragged_bytes_nesting() -> None:
    array = decode_tensor(tensor("BYTES", [3], [["a"], ["b", "c"]]))
    assert array.tolist() == ["a", "b", "c"]


@pytest.mark.parametrize("shape", [[], [1], [1, 1]])
def test_scalar_data(shape: list[int]) -> None:
    array = decode_tensor(tensor("FP32", shape, 2.5))
    assert array.shape == tuple(shape) and array.dtype == np.float32
    assert float(array.ravel()[0]) == 2.5


@pytest.mark.parametrize("shape", [[0], [2, 0]])
def test_empty_tensor(shape: list[int]) -> None:
    array = decode_tensor(tensor("INT64", shape, []))
    assert array.shape == tuple(shape) and array.dtype == np.int64


def test_json_bytes_stay_str() -> None:
    array = decode_tensor(tensor("BYTES", [2], ["héllo", "wörld"]))
    assert array.dtype == object and array.tolist() == ["héllo", "wörld"]


def test_raw_bytes_keep_nul_and_non_utf8() -> None:
    values = np.array([b"a\x00", b"\xff\xfe", b""], dtype=object)
    raw = encode_raw(values, "BYTES")
    assert raw == b"\x02\x00\x00\x00a\x00\x02\x00\x00\x00\xff\xfe\x00\x00\x00\x00"
    assert decode_raw(raw, "BYTES", [3]).tolist() == [b"a\x00", b"\xff\xfe", b""]


def test_raw_contents_win_over_data_and_accept_memoryview() -> None:
    raw = memoryview(np.array([1, 2], dtype="<i4").tobytes())
    obj = tensor("INT32", [2], data=[9, 9], **{RAW: raw})
    assert decode_tensor(obj).tolist() == [1, 2]


def test_raw_bool_nonzero_is_true() -> None:
    assert decode_raw(b"\x00\x01\x02", "BOOL", [3]).tolist() == [False, True, True]


def test_raw_is_little_endian() -> None:
    assert encode_raw(np.array([1], dtype=">u4"), "UINT32") == b"\x01\x00\x00\x00"
    assert decode_raw(b"\x01\x00\x00\x00", "UINT32", [1]).tolist() == [1]


def test_raw_is_row_major_for_fortran_arrays() -> None:
    array = np.asfortranarray(np.arange(6, dtype=np.int16).reshape(2, 3))
    assert decode_raw(encode_raw(array, "INT16"), "INT16", [2, 3]).tolist() == array.tolist()


# --- BF16 ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, bits",
    [
        (1.0, 0x3F80),
        (-2.5, 0xC020),
        (1 / 3, 0x3EAB),  # 0x3EAAAAAB rounds up
        (1.00390625, 0x3F80),  # exactly half way, 0x3F808000: ties to even (down)
        (1.01171875, 0x3F82),  # half way, 0x3F818000: ties to even (up)
        (float("inf"), 0x7F80),
    ],
)
def test_bf16_encode_rounds_to_nearest_even(value: float, bits: int) -> None:
    raw = encode_raw(np.array([value], dtype=np.float32), "BF16")
    assert raw == struct.pack("<H", bits)


def test_bf16_nan_stays_nan() -> None:
    raw = encode_raw(np.array([np.nan], dtype=np.float32), "BF16")
    assert np.isnan(decode_raw(raw, "BF16", [1])[0])


def test_bf16_decodes_upper_bits_to_float32() -> None:
    array = decode_raw(struct.pack("<2H", 0x3F80, 0xC020), "BF16", [2])
    assert array.dtype == np.float32 and array.tolist() == [1.0, -2.5]


def test_bf16_json_input_rejected() -> None:
    rejects(tensor("BF16", [1], [1.0]), "t0", "binary")


def test_bf16_json_output_rejected() -> None:
    with pytest.raises(InvalidInput, match="'out'.*binary"):
        encode_tensor("out", [1.0], "BF16")


# --- decode_tensor: what is accepted -------------------------------------------------------


@pytest.mark.parametrize(
    "datatype, data, expected",
    [
        ("INT32", [2.0, -3.0], [2, -3]),  # integral floats
        ("BOOL", [0, 1], [False, True]),
        ("FP32", [1, 2], [1.0, 2.0]),  # ints for floats
        ("UINT64", [2**64 - 1, 0], [2**64 - 1, 0]),
        ("FP64", [2**70, 1], [float(2**70), 1.0]),  # wider than 64 bits
        ("INT64", [np.int64(3), 4], [3, 4]),  # in-process numpy scalars
        ("BYTES", ["a", b"b"], ["a", b"b"]),  # in-process bytes
        ("BYTES", np.array(["a", "b"]), ["a", "b"]),  # in-process text array
    ],
)
def test_decode_accepts(datatype: str, data: list[Any], expected: list[Any]) -> None:
    array = decode_tensor(tensor(datatype, [2], data))
    assert array.dtype == DATATYPES[datatype] and array.tolist() == expected


def test_decode_accepts_ndarray_data_in_process() -> None:
    array = decode_tensor(tensor("FP32", [2, 2], np.arange(4.0)))
    assert array.dtype == np.float32 and array.shape == (2, 2)


# --- decode_tensor: errors name the tensor -------------------------------------------------


@pytest.mark.parametrize(
    "datatype, data, word",
    [
        ("FP32", ["abc", 1.0], "'abc'"),
        ("FP32", ["1.5", 1.0], "'1.5'"),
        ("FP32", [True, False], "booleans"),
        ("FP32", [1e39, 1.0], "out of range"),
        ("FP16", [70000, 1], "out of range"),
        ("FP64", [None, 1.0], "None"),
        ("FP64", [{"a": 1}, 1.0], "{'a': 1}"),
        ("FP64", [10**400, 1], "out of range"),
        ("INT32", [1.5, 1], "1.5"),
        ("INT32", [2**31, 1], "out of range"),
        ("INT64", [2**63, 1], "out of range"),
        ("INT64", [True, False], "booleans"),
        ("INT64", [float("nan"), 1], "nan"),
        ("UINT8", [300, 1], "300"),
        ("UINT16", [-1, 1], "-1"),
        ("UINT64", [2**64, 1], "out of range"),
        ("UINT64", [-1, 2**63], "out of range"),
        ("BOOL", [2, 1], "booleans or 0/1"),
        ("BOOL", [1.0, 0.0], "booleans or 0/1"),
        ("BOOL", ["true", "false"], "'true'"),
        ("BYTES", [1, "a"], "1 is not a valid BYTES"),
        ("BYTES", [None, "a"], "None"),
    ],
)
def test_decode_rejects_values(datatype: str, data: list[Any], word: str) -> None:
    rejects(tensor(datatype, [2], data), "'t0'", word)


@pytest.mark.parametrize(
    "change, words",
    [
        ({"datatype": "FP128"}, ["'t0'", "unknown datatype", "FP128"]),
        ({"datatype": ["FP32"]}, ["'t0'", "unknown datatype"]),
        ({"shape": "2"}, ["'t0'", "shape"]),
        ({"shape": [2, -1]}, ["'t0'", "non-negative"]),
        ({"shape": [2.0]}, ["'t0'", "non-negative"]),
        ({"shape": [True, True]}, ["'t0'", "non-negative"]),
        ({"shape": [2, 2]}, ["'t0'", "expected 4", "got 2"]),
        ({"shape": [3]}, ["'t0'", "expected 3", "got 2"]),
        ({"data": 1.0}, ["'t0'", "expected 2", "got 1"]),
    ],
)
def test_decode_rejects_malformed(change: dict[str, Any], words: list[str]) -> None:
    rejects({**tensor(), **change}, *words)


@pytest.mark.parametrize("key", ["shape", "datatype", "data"])
def test_decode_missing_key(key: str) -> None:
    obj = tensor()
    del obj[key]
    rejects(obj, "'t0'", f"missing '{key}'")


@pytest.mark.parametrize("name", [None, "", 3])
def test_decode_missing_name(name: Any) -> None:
    obj = {**tensor(), "name": name}
    rejects(obj, "'name'")


def test_decode_not_an_object() -> None:
    with pytest.raises(InvalidInput, match="must be an object"):
        decode_tensor([1, 2])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "datatype, raw, shape, word",
    [
        ("FP32", b"\x00" * 7, [2], "7 bytes, expected 8"),
        ("INT64", b"\x00" * 16, [3], "16 bytes, expected 24"),
        ("BF16", b"\x00" * 3, [2], "3 bytes, expected 4"),
        ("BYTES", b"\x05\x00\x00\x00abc", [1], "truncated"),
        ("BYTES", b"\x01\x00", [1], "ends before element 0"),
        ("BYTES", b"\x01\x00\x00\x00a\x01\x00\x00\x00b", [1], "bytes left"),
        ("BYTES", b"\x01\x00\x00\x00a", [2], "ends before element 1"),
        ("FP32", "abcdefgh", [2], "must be bytes"),
        ("UINT8", memoryview(b"abcd")[::2], [2], "contiguous"),
    ],
)
def test_decode_rejects_raw(datatype: str, raw: Any, shape: list[int], word: str) -> None:
    rejects(tensor(datatype, shape, **{RAW: raw}), "'t0'", word)


# --- encode_tensor ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, datatype, shape, data",
    [
        (np.arange(4, dtype=np.int32).reshape(2, 2), "INT32", [2, 2], [0, 1, 2, 3]),
        ([1.5, 2.5], "FP64", [2], [1.5, 2.5]),
        ([[1, 2]], "INT64", [1, 2], [1, 2]),
        (3, "INT64", [], [3]),
        (np.float32(0.5), "FP32", [], [0.5]),
        (np.array([0.5], dtype=np.float16), "FP16", [1], [0.5]),
        ([True, False], "BOOL", [2], [True, False]),
        (["a", "bc"], "BYTES", [2], ["a", "bc"]),
        ([b"a\x00", b"bc"], "BYTES", [2], ["a\x00", "bc"]),
        ([["a"], ["b"]], "BYTES", [2, 1], ["a", "b"]),
        (np.array(["x", "yz"]), "BYTES", [2], ["x", "yz"]),
    ],
)
def test_encode_infers(value: Any, datatype: str, shape: list[int], data: list[Any]) -> None:
    obj = encode_tensor("out", value)
    assert obj == {"name": "out", "datatype": datatype, "shape": shape, "data": data}
    assert all(type(item) in (bool, int, float, str) for item in obj["data"])


@pytest.mark.parametrize(
    "value, datatype, data",
    [
        ([1, 2], "FP32", [1.0, 2.0]),
        ([1.7, 2.2], "INT8", [1, 2]),
        ([0, 3], "BOOL", [False, True]),
        ([1, 2], "BYTES", ["1", "2"]),
        (["1.5"], "FP64", [1.5]),
    ],
)
def test_encode_casts_to_given_datatype(value: Any, datatype: str, data: list[Any]) -> None:
    assert encode_tensor("out", value, datatype)["data"] == data


@pytest.mark.parametrize(
    "value, datatype, word",
    [
        ([b"\xff"], None, "UTF-8"),
        (["abc"], "FP32", "cannot be cast to FP32"),
        ([1], "FP8", "unknown datatype"),
        ([[1, 2], [3]], None, "cannot be made an array"),
        (np.array([1j]), None, "no V2 datatype"),
    ],
)
def test_encode_rejects(value: Any, datatype: str | None, word: str) -> None:
    with pytest.raises(InvalidInput) as info:
        encode_tensor("out", value, datatype)
    assert "'out'" in str(info.value) and word in str(info.value)


def test_encode_binary_form() -> None:
    obj = encode_tensor("out", np.array([1.0, 2.0], dtype=np.float32), binary=True)
    assert obj == {
        "name": "out",
        "datatype": "FP32",
        "shape": [2],
        "parameters": {"binary_data_size": 8},
        RAW: np.array([1.0, 2.0], dtype="<f4").tobytes(),
    }


def test_encode_binary_non_utf8_bytes() -> None:
    obj = encode_tensor("out", [b"\xff"], binary=True)
    assert obj[RAW] == b"\x01\x00\x00\x00\xff"


# --- binary tensor data extension ------------------------------------------------------------


def request_body() -> dict[str, Any]:
    return {
        "id": "42",
        "inputs": [
            encode_tensor("a", np.array([[1.0, 2.0]], dtype=np.float32), binary=True),
            encode_tensor("b", ["x", "yz"], binary=True),
        ],
        "outputs": [{"name": "o", "parameters": {"binary_data": True}}],
    }


def test_binary_body_round_trip() -> None:
    body, header_length = join_binary_body(request_body())
    assert loads(body[:header_length])["inputs"][0] == {
        "name": "a",
        "datatype": "FP32",
        "shape": [1, 2],
        "parameters": {"binary_data_size": 8},
    }
    parsed = split_binary_body(body, header_length)
    assert parsed["id"] == "42" and parsed["outputs"] == request_body()["outputs"]
    a, b = (decode_tensor(obj) for obj in parsed["inputs"])
    assert_same(a, np.array([[1.0, 2.0]], dtype=np.float32))
    assert b.tolist() == [b"x", b"yz"]


def test_binary_body_mixed_json_and_binary() -> None:
    body = request_body()
    body["inputs"].insert(1, encode_tensor("j", [7, 8]))
    joined, header_length = join_binary_body(body)
    parsed = split_binary_body(joined, header_length)
    assert RAW not in parsed["inputs"][1]
    decoded = {obj["name"]: decode_tensor(obj).tolist() for obj in parsed["inputs"]}
    assert decoded == {"a": [[1.0, 2.0]], "j": [7, 8], "b": [b"x", b"yz"]}


def test_join_without_binary_is_plain_json() -> None:
    body = {"outputs": [encode_tensor("o", [1])]}
    joined, header_length = join_binary_body(body)
    assert header_length == len(joined) and loads(joined) == body


def test_join_leaves_body_untouched() -> None:
    output = encode_tensor("o", [1, 2], binary=True)
    body: dict[str, Any] = {"model_name": "m", "outputs": [output]}
    before = {"model_name": "m", "outputs": [dict(output)]}
    join_binary_body(body)
    assert body == before


def test_split_response_outputs() -> None:
    response = {"outputs": [encode_tensor("o", np.array([True, False]), binary=True)]}
    parsed = split_binary_body(*join_binary_body(response))
    assert decode_tensor(parsed["outputs"][0]).tolist() == [True, False]


def test_split_accepts_tritonclient_request() -> None:
    httpclient = pytest.importorskip("tritonclient.http")
    first = httpclient.InferInput("a", [2], "FP32")
    first.set_data_from_numpy(np.array([1.0, 2.0], dtype=np.float32))
    second = httpclient.InferInput("b", [2], "BYTES")
    second.set_data_from_numpy(np.array([b"x", b"yz"], dtype=object))
    third = httpclient.InferInput("c", [1], "INT32")
    third.set_data_from_numpy(np.array([7], dtype=np.int32), binary_data=False)
    body, header_length = httpclient.InferenceServerClient.generate_request_body(
        [first, second, third]
    )
    parsed = split_binary_body(body, header_length)
    decoded = [decode_tensor(obj).tolist() for obj in parsed["inputs"]]
    assert decoded == [[1.0, 2.0], [b"x", b"yz"], [7]]


def test_tritonclient_reads_joined_response() -> None:
    httpclient = pytest.importorskip("tritonclient.http")
    response = {
        "model_name": "m",
        "outputs": [
            encode_tensor("f", np.array([[1.5, 2.5]], dtype=np.float32), binary=True),
            encode_tensor("s", [b"x", b"yz"], binary=True),
            encode_tensor("i", [1, 2]),
        ],
    }
    body, header_length = join_binary_body(response)
    result = httpclient.InferResult.from_response_body(body, header_length=header_length)
    assert result.as_numpy("f").tolist() == [[1.5, 2.5]]
    assert result.as_numpy("s").tolist() == [b"x", b"yz"]
    assert result.as_numpy("i").tolist() == [1, 2]


@pytest.mark.parametrize(
    "body, header_length, word",
    [
        (b'{"inputs": []}', 100, "beyond"),
        (b'{"inputs": []}', -1, "beyond"),
        (b'{"inputs": []}', "14", "bad JSON header length"),
        (b'{"inputs": [}', 13, "invalid JSON"),
        (b"[1, 2]", 6, "must be an object"),
        (b'{"inputs": []}xyz', 14, "add up to 0 bytes, but 3 follow"),
    ],
)
def test_split_rejects_malformed(body: bytes, header_length: Any, word: str) -> None:
    with pytest.raises(InvalidInput, match=word):
        split_binary_body(body, header_length)


def binary_request(size: Any, extra: dict[str, Any] | None = None) -> tuple[bytes, int]:
    parameters = {"binary_data_size": size}
    obj = {"name": "a", "shape": [1], "datatype": "FP32", "parameters": parameters}
    header = dumps({"inputs": [{**obj, **(extra or {})}]})
    return header + b"\x00\x00\x80?", len(header)


@pytest.mark.parametrize(
    "size, extra, word",
    [
        (8, None, "runs past the body"),
        (2, None, "add up to 2 bytes, but 4 follow"),
        (-4, None, "bad binary_data_size"),
        ("4", None, "bad binary_data_size"),
        (4, {"data": [1.0]}, "both 'data' and binary_data_size"),
    ],
)
def test_split_rejects_bad_sizes(size: Any, extra: dict[str, Any] | None, word: str) -> None:
    with pytest.raises(InvalidInput, match=word) as info:
        split_binary_body(*binary_request(size, extra))
    assert "'a'" in str(info.value) or "follow" in str(info.value)


def test_split_sizes_that_fit() -> None:
    parsed = split_binary_body(*binary_request(4))
    assert decode_tensor(parsed["inputs"][0]).tolist() == [1.0]


# --- dumps / loads ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        (np.int64(3), 3),
        (np.float32(0.5), 0.5),
        (np.bool_(True), True),
        (np.float16(1.5), 1.5),
        (np.str_("a"), "a"),
        (np.array([[1, 2]], dtype=np.uint8), [[1, 2]]),
        (np.array([0.5], dtype=np.float16), [0.5]),
        (np.array(["a", b"b", 1], dtype=object), ["a", "b", 1]),
        (np.arange(6).reshape(2, 3)[:, ::2], [[0, 2], [3, 5]]),  # not contiguous
        (np.array([1.0, 2.0], dtype=">f8"), [1.0, 2.0]),  # big-endian
        (b"abc", "abc"),
        (b"\xff\x00", "/wA="),  # not UTF-8: base64
        (datetime.datetime(2024, 1, 2, 3, 4, 5, 6), "2024-01-02T03:04:05.000006"),
        (datetime.date(2024, 1, 2), "2024-01-02"),
        ({3}, [3]),
        (np.complex64(1 + 2j), [1.0, 2.0]),
        ({"nested": [np.int8(1), {"deep": np.array([True])}]}, {"nested": [1, {"deep": [True]}]}),
        ({1: "int key"}, {"1": "int key"}),
    ],
)
def test_dumps_numpy_and_friends(value: Any, expected: Any) -> None:
    assert loads(dumps(value)) == expected


def test_dumps_rejects_unknown_objects() -> None:
    with pytest.raises(TypeError):
        dumps(object())


@pytest.mark.parametrize("data", [b'{"a": 1}', '{"a": 1}', memoryview(b'{"a": 1}')])
def test_loads(data: Any) -> None:
    assert loads(data) == {"a": 1}


@pytest.mark.parametrize("data", [b"{", b"", "nan", b"\xff"])
def test_loads_invalid(data: Any) -> None:
    with pytest.raises(InvalidInput, match="invalid JSON"):
        loads(data)
