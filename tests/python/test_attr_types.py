"""An attribute of another Python type than its spec type takes (a bool, a
float, a 0-d or 1-element tensor or array, a numpy bool, None, a string for
an int; a tensor for a float; ...) is refused with one message, JAX's
(_spec.check_attr), by the JAX wrapper and by the torch wrapper on each of its
routes: the direct route (with the eager route around the dispatcher, where
torch has it, and without), the full route (under a torch function mode, with
an input that requires grad) and torch.compile. torch's schema parser would
convert it (topk=torch.tensor(2.7) ran with topk = 2, and tensor(-2.5) was
reported as "topk = -2"); torch.ops.<ns>.<op> itself goes through that parser
before any opgen code runs, as torch.ops.aten's ops do."""

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

import opgen_ops.jax as jops
import opgen_ops.torch as tops
from opgen_ops._torch_direct import DIRECT


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def rotary_inputs(rng):
    return (rng.integers(0, 6, 4), f32(rng, 4, 16), f32(rng, 6, 8))


# (op, the inputs from rng as numpy arrays (the first float one is the one that may require grad), attribute, value)
CASES = [
    *[("topk_softmax", lambda r: (f32(r, 4, 8),), "topk", v)
      for v in (True, np.bool_(True), 2.0, torch.tensor(2), torch.tensor(2.7), torch.tensor(-2.5), torch.tensor([2]),
                np.array(2), np.array([2]), None, "2", 2**64)],
    *[("topk_softmax", lambda r: (f32(r, 4, 8),), "renormalize", v)
      for v in (1, 0.0, torch.tensor(True), np.array(True), None, "yes")],
    *[("rms_norm", lambda r: (f32(r, 3, 16),), "eps", v)
      for v in (torch.tensor(1e-3), np.array(1e-3), np.array([1e-3]), True, None, "0.001")],
    ("simple_add", lambda r: (f32(r, 8), f32(r, 8)), "alpha", torch.tensor(2.0, dtype=torch.float64)),
    ("rotary_embedding", rotary_inputs, "head_size", np.array(8)),
    ("rotary_embedding", rotary_inputs, "is_neox", 1),
    *[("glu", lambda r: (f32(r, 2, 8),), "activation", v) for v in (None, 1, torch.tensor(1))],
    *[("flip", lambda r: (f32(r, 2, 3),), "dims", v)
      for v in (torch.tensor([-1]), [torch.tensor(-1)], [True], (-1.0,), "-1", None, -1)],
    *[("dynamic_per_token_scaled_fp8_quant", lambda r: (f32(r, 2, 8),), "out_dtype", v) for v in (3.5, None, 1)],
]
# The required attributes beside the one tried.
OTHER_ATTRS = {("rotary_embedding", "is_neox"): {"head_size": 8}, ("topk_softmax", "renormalize"): {"topk": 2}}
IDS = [f"{op}-{attr}={type(v).__name__}({v!r})".replace(" ", "").replace("\n", "") for op, _, attr, v in CASES]
ROUTES = ["direct", "direct without the eager route", "function mode", "requires grad", "torch.compile"]


class Passing(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def jax_refusal(op, inputs, attrs):
    with pytest.raises((TypeError, ValueError)) as e:
        getattr(jops, op)(*inputs, **attrs)
    return e.value


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("op, make, attr, value", CASES, ids=IDS)
def test_the_torch_wrapper_refuses_as_jax_does(rng, monkeypatch, op, make, attr, value, route):
    inputs = make(rng)
    attrs = {**OTHER_ATTRS.get((op, attr), {}), attr: value}
    want = jax_refusal(op, inputs, attrs)
    assert str(want).startswith(f"{op}: attribute '{attr}'"), want
    tensors = [torch.from_numpy(np.asarray(x)) for x in inputs]
    if route == "requires grad":
        k = next(i for i, x in enumerate(tensors) if x.is_floating_point())
        tensors[k] = tensors[k].clone().requires_grad_()
    if route == "direct without the eager route":
        monkeypatch.setattr(DIRECT[op], "eager", None)
    f = getattr(tops, op)
    with pytest.raises(Exception) as e:
        if route == "function mode":
            with Passing():
                f(*tensors, **attrs)
        elif route == "torch.compile":
            # (Afresh: the lambda's code is the same in every case, and dynamo
            # would trace the values after the first as symbolic.)
            torch._dynamo.reset()
            torch.compile(lambda *ts: f(*ts, **attrs), fullgraph=True)(*tensors)
        else:
            f(*tensors, **attrs)
    if route == "torch.compile":
        # Dynamo reports the refusal inside its own exception, and traces the
        # checks' Python its own way (a 1-d tensor for an array is "not a
        # sequence" there): the refusal names the op and the attribute.
        assert f"{op}: attribute '{attr}'" in str(e.value), str(e.value)
    else:
        assert type(e.value) is type(want) and str(e.value) == str(want)


def test_torch_ops_converts_as_torch_s_schema_parser_does(rng):
    """torch.ops.<ns>.<op> hands its arguments to torch's schema parser before
    any opgen code runs, which converts a 0-d tensor for an int as it does for
    torch.ops.aten.topk: every kernel, C++ or Python, sees the int (README,
    "PyTorch and torch_xla"). The wrapper refuses it."""
    x = torch.from_numpy(f32(rng, 4, 8))
    want = torch.ops.opgen_ops.topk_softmax(x, topk=2)
    for got in (torch.ops.opgen_ops.topk_softmax(x, topk=torch.tensor(2.7)), torch.ops.aten.topk(x, torch.tensor(2.7))):
        assert got[0].shape == want[0].shape == (4, 2)
    with pytest.raises(TypeError, match="topk_softmax: attribute 'topk' must be an int, not Tensor"):
        tops.topk_softmax(x, topk=torch.tensor(2.7))
