"""Which route a call of `opgen_ops.torch.<op>` takes (docs/architecture.md,
"A PyTorch call's route"): a plain eager call the direct one, any other the
one `_torch_runtime.route` names, once, after checking its inputs; each gives
what an independent reference computes. (routes.py holds every route to every
other on drawn calls; here each case says which route it is.)"""

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

import opgen_ops.torch as tops
from opgen_ops import _torch_runtime
from opgen_ops._spec import OpTypeError


class Passthrough(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@pytest.fixture
def taken(monkeypatch):
    """The names of the routes (ROUTES) the calls made in the test took, in order."""
    names = []
    for name, run in list(_torch_runtime.ROUTES.items()):
        monkeypatch.setitem(_torch_runtime.ROUTES, name,
                            lambda *args, _run=run, _name=name: names.append(_name) or _run(*args))
    return names


def t(rng, *shape, requires_grad=False):
    return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).requires_grad_(requires_grad)


def softmax_ref(x: torch.Tensor) -> np.ndarray:
    a = x.detach().numpy().astype(np.float64)
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_a_plain_eager_call_takes_the_direct_route(rng, taken):
    x = t(rng, 3, 16)
    np.testing.assert_allclose(tops.softmax(x).numpy(), softmax_ref(x), rtol=1e-5, atol=1e-6)
    assert taken == []


def test_under_a_mode_a_call_goes_through_the_dispatcher(rng, taken):
    x = t(rng, 3, 16)
    with Passthrough():
        out = tops.softmax(x)
    assert taken == ["dispatcher"]
    np.testing.assert_allclose(out.numpy(), softmax_ref(x), rtol=1e-5, atol=1e-6)


def test_fake_tensors_go_through_the_dispatcher(rng, taken):
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = t(rng, 3, 16)
    with FakeTensorMode() as mode:
        out = tops.layer_norm(mode.from_tensor(x), return_rstd=True)
    assert taken == ["dispatcher"]
    assert out[0].shape == (3, 16) and out[1] is None and out[2].shape == (3,)


def test_a_call_that_needs_a_gradient_takes_the_autograd_route(rng, taken):
    x = t(rng, 3, 16, requires_grad=True)
    g = t(rng, 3, 16)
    out = tops.softmax(x)
    assert taken == ["autograd"]
    np.testing.assert_allclose(out.detach().numpy(), softmax_ref(x), rtol=1e-5, atol=1e-6)
    (grad,) = torch.autograd.grad(out, x, g)
    (want,) = torch.autograd.grad(torch.softmax(x, -1), x, g)  # torch's own softmax
    torch.testing.assert_close(grad, want, rtol=1e-5, atol=1e-6)


def test_an_op_that_updates_inputs_in_place_takes_its_own_autograd_route(rng, taken):
    x0, r0, w = t(rng, 3, 16, requires_grad=True), t(rng, 3, 16, requires_grad=True), t(rng, 16, requires_grad=True)
    x, r = x0.clone(), r0.clone()  # an update in place of a leaf that requires grad is refused
    out, res = tops.fused_add_rms_norm(x, r, w, eps=1e-6)
    assert taken == ["in place under autograd"] and out is x and res is r
    s = x0 + r0
    want = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(res, s)
    g = t(rng, 3, 16)
    torch.testing.assert_close(torch.autograd.grad(out, (x0, r0, w), g), torch.autograd.grad(want, (x0, r0, w), g),
                               rtol=1e-4, atol=1e-4)


def test_inputs_are_checked_before_any_route_in_one_order(rng, taken):
    with pytest.raises(OpTypeError, match=r"^softmax: input 'x' is required, not None$"):
        tops.softmax(None)
    with pytest.raises(OpTypeError, match=r"^softmax: input 'x' must be a torch.Tensor, not ndarray$"):
        tops.softmax(rng.standard_normal((2, 4)).astype(np.float32))
    # A required input left out is named before an input of the wrong type, whatever their places.
    with pytest.raises(OpTypeError, match=r"^rms_norm: input 'x' is required, not None$"):
        tops.rms_norm(None, rng.standard_normal(4).astype(np.float32))
    assert taken == []
