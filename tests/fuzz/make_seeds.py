"""Writes the seed corpus: a few valid frames in the fuzzer's input layout.
Hand-encoded protobuf, so it needs nothing but Python."""
import os
import struct
import sys


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def field(num, wire, payload):
    key = varint((num << 3) | wire)
    if wire == 2:
        return key + varint(len(payload)) + payload
    return key + payload


def frame(lengths, envelope):
    return bytes([len(lengths)]) + b"".join(struct.pack("<I", n) for n in lengths) + envelope


out = sys.argv[1]
os.makedirs(out, exist_ok=True)
call = field(2, 0, varint(1)) + field(3, 2, b"echo")
int_arg = field(4, 2, field(3, 0, varint(42)))
tensor_meta = field(7, 2, field(1, 0, varint(6)) + field(2, 2, varint(2) + varint(2)))
tensor_arg = field(4, 2, field(6, 0, varint(0)))
nested = field(4, 2, field(7, 2, field(1, 2, field(3, 0, varint(1))) + field(1, 2, field(5, 2, b"s"))))
dict_arg = field(4, 2, field(8, 2, field(1, 2, field(1, 2, b"k") + field(2, 2, field(4, 1, struct.pack("<d", 1.5))))))
seeds = {
    "call_int": frame([], call + int_arg),
    "call_tensor": frame([16], call + tensor_meta + tensor_arg),
    "call_nested": frame([], call + nested + dict_arg),
    # See Note [Small tensors ride in the envelope]: a 2x2 float's 16 bytes inside it.
    "call_tensor_bytes": frame([], call + tensor_meta + tensor_arg + field(13, 2, bytes(range(16)))),
    "response": frame([], field(2, 0, varint(2)) + field(5, 2, field(2, 0, varint(1)))),
}
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
