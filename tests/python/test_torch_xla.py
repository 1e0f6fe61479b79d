"""The XLA kernel of simple_add under torch_xla on the CPU (PJRT_DEVICE=CPU):
the custom call in the HLO, and the plain error where the target cannot be
registered. Skipped where torch_xla is not installed."""

import os
import re

os.environ.setdefault("PJRT_DEVICE", "CPU")

import pytest
import torch

torch_xla = pytest.importorskip("torch_xla")

import opgen_ops.torch as ops
from opgen_ops import _opaque, _ops
from opgen_ops import _torch_xla


def xla_device():
    return torch_xla.device()


def c_unescape(text):
    """Bytes of an HLO string literal (absl::CEscape: \\n, \\r, \\t, \\ooo octal, and
    \\", \\' and \\\\)."""
    out, i = bytearray(), 0
    while i < len(text):
        if text[i] == "\\":
            if text[i + 1] in "01234567":
                out.append(int(text[i + 1:i + 4], 8))
                i += 4
                continue
            out.append(ord({"n": "\n", "r": "\r", "t": "\t"}.get(text[i + 1], text[i + 1])))
            i += 2
        else:
            out.extend(text[i].encode())
            i += 1
    return bytes(out)


def test_calling_the_op_says_why_it_cannot_execute(rng):
    a = torch.from_numpy(rng.standard_normal(8).astype("float32")).to(xla_device())
    with pytest.raises(RuntimeError, match=r"simple_add cannot execute on XLA tensors here: torch_xla runs on CPU"):
        ops.simple_add(a, a)


@pytest.mark.parametrize("n", [8, 1000])
def test_hlo_holds_the_custom_call(rng, n):
    dev = xla_device()
    a = torch.from_numpy(rng.standard_normal(n).astype("float32")).to(dev)
    b = torch.from_numpy(rng.standard_normal(n).astype("float32")).to(dev)
    alpha = float(rng.uniform(-2, 2))
    with ops.xla_graph_only():
        out = ops.simple_add(a * 2, b, alpha=alpha)
    assert out.device.type == "xla" and out.shape == (n,) and out.dtype == torch.float32
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([out])
    calls = re.findall(r"custom-call\((.*?)\), custom_call_target=\"(\w+)\", api_version=(\w+), "
                       r"backend_config=\"((?:[^\"\\]|\\.)*)\"", hlo)
    assert len(calls) == 1, hlo
    operands, target, api_version, backend_config = calls[0]
    assert target == "opgen_ops_simple_add_legacy_v3"
    assert api_version == "API_VERSION_STATUS_RETURNING_UNIFIED"
    assert re.fullmatch(rf"f32\[{n}\]\{{0\}} %\S+, f32\[{n}\]\{{0\}} %\S+", operands), operands
    assert c_unescape(backend_config) == _opaque.encode(_ops.simple_add.OP, N=n, alpha=alpha)


def test_shape_errors_are_raised_before_the_graph_is_built(rng):
    dev = xla_device()
    a = torch.from_numpy(rng.standard_normal(8).astype("float32")).to(dev)
    with ops.xla_graph_only(), pytest.raises(RuntimeError, match=r"dimension 0 must be 8 \(N, "):
        ops.simple_add(a, a[:5])


def test_a_scalar_input_of_shape_1_reaches_the_custom_call(rng):
    """scale_ub as [1] (vLLM's): the HLO's custom call takes it as given; [2]
    is refused before the graph is built."""
    dev = xla_device()
    x = torch.from_numpy(rng.standard_normal((3, 16)).astype("float32")).to(dev)
    ub = torch.tensor([0.5], dtype=torch.float32).to(dev)
    with ops.xla_graph_only():
        out, scale = ops.dynamic_per_token_scaled_fp8_quant(x, ub)
    assert out.shape == (3, 16) and out.dtype == torch.float8_e4m3fn and scale.shape == (3,)
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([out, scale])
    calls = re.findall(r"custom-call\((.*?)\), custom_call_target=\"(\w+)\"", hlo)
    assert len(calls) == 1 and re.fullmatch(r"f32\[3,16\]\{1,0\} %\S+, f32\[1\]\{0\} %\S+", calls[0][0]), hlo
    refused = "dynamic_per_token_scaled_fp8_quant: input 'scale_ub' has shape [2]; the spec declares a scalar: [] or " \
        "[1]"
    with ops.xla_graph_only(), pytest.raises(RuntimeError, match=re.escape(refused)):
        ops.dynamic_per_token_scaled_fp8_quant(x, torch.tensor([0.5, 0.5]).to(dev))


@pytest.mark.parametrize("call, match", [
    (lambda x: ops.rms_norm(x, eps=-1.0), r"rms_norm: attribute 'eps' = -1.0 must be > 0.0"),
    (lambda x: ops.simple_add(x, x, alpha=1e39), r"simple_add: attribute 'alpha' = 1e\+39 does not fit f32"),
    (lambda x: ops.glu(x, activation="tanh"), r"glu: attribute 'activation' is 'tanh'"),
    (lambda x: ops.flip(x.view(2, 4), dims=[-1, -1]), r"flip: attribute 'dims' lists -1 twice"),
    (lambda x: torch.ops.opgen_ops.glu__lowered(x, activation=5), r"glu: attribute 'activation' has index 5"),
])
def test_attributes_are_checked_before_the_graph_is_built(rng, call, match):
    # The XLA kernel checks what the CPU and CUDA kernels check, attributes too.
    x = torch.from_numpy(rng.standard_normal(8).astype("float32")).to(xla_device())
    with ops.xla_graph_only(), pytest.raises(RuntimeError, match=match):
        call(x)


def test_torch_xla_2_9_refuses_registration_with_a_plain_reason(monkeypatch):
    # As if torch_xla ran on CUDA: 2.9's registration entry point is a stub
    # that raises, and the op must report that, not crash.
    monkeypatch.setattr(_torch_xla, "_torch_xla_device_type", lambda: "CUDA")
    monkeypatch.setattr(_torch_xla, "_xla_registration", {})
    from opgen_ops import _C

    reason = _torch_xla.register_xla_target("opgen_ops_simple_add_legacy_v3", _C.targets(), 3)
    if not _C.built_with_cuda:
        assert "built without CUDA" in reason
    elif torch_xla.__version__.startswith("2.9"):
        assert "refused to register it" in reason and "not implemented" in reason
