"""The parts of an .onnx file the native step needs, read without the onnx package.

A minimal reader of the protobuf wire format: ModelProto field 7 (graph) -> GraphProto field 1
(nodes: input 1, output 2, name 3, op_type 4, attribute 5) and field 5 (initializers:
TensorProto dims 1, data_type 2, float_data 4, int32_data 5, int64_data 7, name 8, raw_data 9,
double_data 10, data_location 14). Initializers become numpy arrays; nodes keep their names,
op type and integer/float attributes. Anything else is skipped by its wire type.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from edgeseq.errors import ModelFileError
from edgeseq.runtime.model_bytes import read_model

# TensorProto.DataType -> numpy dtype (the ones an edgeseq graph holds)
DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64,
          9: np.bool_, 11: np.float64, 12: np.uint32, 13: np.uint64}
EXTERNAL = 1                        # TensorProto.DataLocation.EXTERNAL


class WireError(ValueError):
    """Bytes that are not the protobuf message they should be."""


@dataclass
class Node:
    op_type: str
    input: list
    output: list
    name: str = ""
    domain: str = ""
    attrs: dict = field(default_factory=dict)       # name -> int, float, bytes or list of ints


@dataclass
class Graph:
    initializers: dict             # name -> numpy array
    nodes: list                    # Node, in graph order
    inputs: list                   # graph input names
    outputs: list                  # graph output names


def _varint(buf: bytes, i: int) -> tuple:
    shift = result = 0
    while True:
        if i >= len(buf):
            raise WireError("truncated varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise WireError("varint longer than 10 bytes")


def fields(buf: bytes):
    """(field number, wire type, value) for each field of a message: an int (varint, fixed32,
    fixed64, as unsigned) or bytes (length-delimited)."""
    i, n = 0, len(buf)
    while i < n:
        key, i = _varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(buf, i)
        elif wire == 1:
            if i + 8 > n:
                raise WireError("truncated fixed64")
            v, i = int.from_bytes(buf[i:i + 8], "little"), i + 8
        elif wire == 2:
            size, i = _varint(buf, i)
            if i + size > n:
                raise WireError("truncated field")
            v, i = buf[i:i + size], i + size
        elif wire == 5:
            if i + 4 > n:
                raise WireError("truncated fixed32")
            v, i = int.from_bytes(buf[i:i + 4], "little"), i + 4
        else:
            raise WireError(f"wire type {wire} (groups are not used by ONNX)")
        if num == 0:
            raise WireError("field number 0")
        yield num, wire, v


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _packed_varints(buf: bytes) -> list:
    out, i = [], 0
    while i < len(buf):
        v, i = _varint(buf, i)
        out.append(_signed(v))
    return out


def _ints(wire: int, v, acc: list):
    """Append a repeated int64/int32 field's values (packed or not)."""
    if wire == 2:
        acc.extend(_packed_varints(v))
    elif wire == 0:
        acc.append(_signed(v))
    else:
        raise WireError("integer field with the wrong wire type")


def _reals(wire: int, v, dtype: str, out: list) -> None:
    """A float/double field: packed (length-delimited) or one fixed-width value (wire 5 or 1)."""
    if wire == 2:
        out.append(np.frombuffer(v, dtype))
    elif wire == (5 if np.dtype(dtype).itemsize == 4 else 1):
        out.append(np.frombuffer(v.to_bytes(np.dtype(dtype).itemsize, "little"), dtype))


def tensor(buf: bytes) -> tuple:
    """(name, numpy array) from a TensorProto."""
    dims, dtype, name, raw, location = [], None, "", None, 0
    floats, doubles, ints = [], [], []
    for num, wire, v in fields(buf):
        if num == 1:
            _ints(wire, v, dims)
        elif num == 2:
            dtype = v
        elif num == 4:
            _reals(wire, v, "<f4", floats)
        elif num == 5 or num == 7 or num == 11:
            _ints(wire, v, ints)
        elif num == 8:
            name = v.decode("utf-8", "replace")
        elif num == 9:
            raw = v
        elif num == 10:
            _reals(wire, v, "<f8", doubles)
        elif num == 14:
            location = v
    if location == EXTERNAL:
        raise WireError(f"tensor '{name}' keeps its data in an external file")
    if dtype not in DTYPES:
        raise WireError(f"tensor '{name}' has data type {dtype}")
    dt = np.dtype(DTYPES[dtype])
    count = int(np.prod(dims, dtype=np.int64)) if dims else 1
    if raw is not None:
        a = np.frombuffer(raw, dt.newbyteorder("<")).astype(dt)
    elif dtype == 1:
        a = np.concatenate(floats) if floats else np.zeros(0, dt)
    elif dtype == 11:
        a = np.concatenate(doubles) if doubles else np.zeros(0, dt)
    else:
        a = np.array(ints, np.int64).astype(dt) if ints else np.zeros(0, dt)
    if a.size != count:
        raise WireError(f"tensor '{name}' holds {a.size} values for dims {dims}")
    return name, a.reshape(dims)


def _attribute(buf: bytes) -> tuple:
    name, value, ints = "", None, []
    for num, wire, v in fields(buf):
        if num == 1:
            name = v.decode("utf-8", "replace")
        elif num == 2 and wire == 5:
            value = float(np.frombuffer(v.to_bytes(4, "little"), "<f4")[0])
        elif num == 3 and wire == 0:
            value = _signed(v)
        elif num == 4 and wire == 2:
            value = bytes(v)
        elif num == 8:
            _ints(wire, v, ints)
    return name, (ints if value is None and ints else value)


def node(buf: bytes) -> Node:
    n = Node(op_type="", input=[], output=[])
    for num, wire, v in fields(buf):
        if wire != 2:
            continue
        if num == 1:
            n.input.append(v.decode("utf-8", "replace"))
        elif num == 2:
            n.output.append(v.decode("utf-8", "replace"))
        elif num == 3:
            n.name = v.decode("utf-8", "replace")
        elif num == 4:
            n.op_type = v.decode("utf-8", "replace")
        elif num == 5:
            key, value = _attribute(v)
            n.attrs[key] = value
        elif num == 7:
            n.domain = v.decode("utf-8", "replace")
    return n


def _value_name(buf: bytes) -> str:
    for num, wire, v in fields(buf):
        if num == 1 and wire == 2:
            return v.decode("utf-8", "replace")
    return ""


def parse_graph(data: bytes) -> Graph:
    """The graph of a serialized ModelProto. WireError when the bytes are not one."""
    graph = None
    for num, wire, v in fields(data):
        if num == 7 and wire == 2:
            graph = v
    if graph is None:
        raise WireError("no graph")
    g = Graph(initializers={}, nodes=[], inputs=[], outputs=[])
    for num, wire, v in fields(graph):
        if wire != 2:
            continue
        if num == 1:
            g.nodes.append(node(v))
        elif num == 5:
            name, a = tensor(v)
            g.initializers[name] = a
        elif num == 11:
            g.inputs.append(_value_name(v))
        elif num == 12:
            g.outputs.append(_value_name(v))
    return g


def read_graph(source: str | os.PathLike | bytes, path=None) -> Graph:
    """`parse_graph` of `source`: the bytes of a model file (as `edgeseq.runtime.model_bytes.read_model`
    returns them; `path` names it in messages) or the path of one, read once. ModelFileError
    naming the file when it cannot be read or parsed."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    else:
        path, data = source, read_model(source)
    try:
        return parse_graph(data)
    except (WireError, ValueError, UnicodeDecodeError, OverflowError, RecursionError) as e:
        raise ModelFileError(f"'{path}' is not an ONNX model the native backend can read ({e}); "
                             "export it again") from None
