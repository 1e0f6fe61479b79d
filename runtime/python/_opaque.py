"""The encoder of the legacy opaque descriptors (layout version 1, opgen/opaque.h).

It writes, from an op's description (``_ops/<op>.py``), the bytes that the
op's generated C++ decoder checks and reads; both come from one description
of the layout that opgen renders from the spec.
"""

from __future__ import annotations

import struct
from functools import lru_cache

from ._spec import Call, Op

LAYOUT_VERSION = 1
_MAGIC = b"OPGN"
_HEADER = "<4sHHQ"  # magic, layout version, reserved (0), fingerprint


@lru_cache(maxsize=None)
def layout(op: Op) -> struct.Struct:
    """The fixed fields of `op`'s descriptor, header included."""
    return struct.Struct(_HEADER + "".join(code for _, _, code in op.opaque.fields))


def size(op: Op) -> int:
    """The bytes of the fixed fields (array elements follow them)."""
    return layout(op).size


def encode(op: Op, **fields) -> bytes:
    """The descriptor of `op` with the given field values (an array field as
    its elements; the header and the arrays' lengths are filled in)."""
    names = [name for name, _, _ in op.opaque.fields]
    if sorted(fields) != sorted(names):
        raise TypeError(f"{op.name}: the descriptor's fields are {', '.join(names) or 'none'}, "
                        f"not {', '.join(sorted(fields)) or 'none'}")
    arrays = [(name, code) for name, kind, code in op.opaque.fields if kind == "array"]
    values = [len(fields[name]) if kind == "array" else fields[name] for name, kind, _ in op.opaque.fields]
    element = {"i32[]": "i", "i64[]": "q"}
    try:
        out = layout(op).pack(_MAGIC, LAYOUT_VERSION, 0, op.opaque.fingerprint, *values)
        for name, _ in arrays:
            attr = next(a for a in op.attrs if a.name == name)
            items = fields[name]
            out += struct.pack(f"<{len(items)}{element[attr.type]}", *items)
        return out
    except (struct.error, OverflowError, TypeError) as e:
        raise ValueError(f"{op.name}: cannot encode the opaque descriptor: {e}") from None


def fields_of(call: Call) -> dict:
    """The descriptor's field values for a checked call."""
    op = call.op
    out = {}
    for name, kind, _ in op.opaque.fields:
        if kind == "dtype":
            out[name] = op.opaque.codes[call.dtypes[name.removeprefix("dtype_")]]
        elif kind == "present":
            out[name] = call.present
        elif kind == "requested":
            out[name] = call.requested_mask
        elif kind == "batch":
            out[name] = _product(call.batch)
        elif kind == "symbol":
            out[name] = int(call.symbols.get(name, 0))  # 0: bound only by an omitted optional input
        elif kind == "enum":
            out[name] = call.enum_index(name)
        elif name in op.dtype_attrs.values():  # a dtype as its code
            out[name] = op.opaque.codes[call.attrs[name]]
        else:  # attr, array
            out[name] = call.attrs[name]
    return out


def _product(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n
