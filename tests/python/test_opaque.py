"""The Python encoder against the C++ decoder that the legacy shims use."""

import struct

import numpy as np
import pytest

from opgen_ops import _C, _opaque, _ops


def test_round_trip_random(rng):
    for _ in range(200):
        n = int(rng.integers(0, 2**62))
        alpha = float(np.float32(rng.standard_normal() * 10.0 ** rng.integers(-30, 30)))
        blob = _opaque.encode(_ops.simple_add.OP, N=n, alpha=alpha)
        assert len(blob) == _opaque.size(_ops.simple_add.OP)
        decoded = _C.decode_opaque("simple_add", blob)
        assert decoded["N"] == n
        assert decoded["alpha"] == alpha


def test_every_truncation_and_extension_is_rejected():
    blob = _opaque.encode(_ops.simple_add.OP, N=5, alpha=1.5)
    for size in range(len(blob)):
        with pytest.raises(ValueError, match="simple_add: opaque descriptor"):
            _C.decode_opaque("simple_add", blob[:size])
    with pytest.raises(ValueError, match="is 29 bytes; layout 1 of this op is 28 bytes"):
        _C.decode_opaque("simple_add", blob + b"\0")


def test_foreign_blobs_are_rejected():
    blob = bytearray(_opaque.encode(_ops.simple_add.OP, N=5, alpha=1.5))
    magic = bytes(b"XXXX") + bytes(blob[4:])
    with pytest.raises(ValueError, match="magic"):
        _C.decode_opaque("simple_add", magic)
    version = bytes(blob[:4]) + struct.pack("<H", 2) + bytes(blob[6:])
    with pytest.raises(ValueError, match="layout version 2"):
        _C.decode_opaque("simple_add", version)
    fingerprint = bytes(blob[:8]) + struct.pack("<Q", _ops.simple_add.OP.opaque.fingerprint ^ 1) + bytes(blob[16:])
    with pytest.raises(ValueError, match="another op"):
        _C.decode_opaque("simple_add", fingerprint)


def test_encoder_refuses_values_it_cannot_represent():
    with pytest.raises(ValueError, match="simple_add: cannot encode"):
        _opaque.encode(_ops.simple_add.OP, N=2**63, alpha=1.0)
    with pytest.raises(ValueError, match="simple_add: cannot encode"):
        _opaque.encode(_ops.simple_add.OP, N=1, alpha=1e39)
