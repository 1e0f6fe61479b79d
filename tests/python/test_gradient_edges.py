"""Gradients at their edges: second derivatives, which no backward op in this
package has, are an error that names the op in both frameworks (never torch's
warning and a wrong answer), and so are forward-mode derivatives in torch
(torch.func.jvp, jacfwd, forward_ad dual tensors: torch would carry a zero
or no tangent on), and a gradient that reaches a backward op in
strides its layout does not take (the loss reads an output through a
transpose) is made contiguous and gives the right answer, not a refusal."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import opgen_ops.jax as jops
import opgen_ops.torch as tops
from conftest import gpu_devices

EPS = 1e-5
TORCH_DEVICES = ["cpu"] + (["cuda"] if gpu_devices() else [])


def t64(rng, *shape, device="cpu"):
    return torch.from_numpy(rng.standard_normal(shape)).to(device).requires_grad_()


def rms_norm_reference(x, weight):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + EPS) * weight


@pytest.mark.parametrize("device", TORCH_DEVICES)
def test_torch_gradient_penalty_through_rms_norm_raises_naming_the_op(rng, device):
    x, w = t64(rng, 3, 8, device=device), t64(rng, 8, device=device)
    out, _ = tops.rms_norm(x, w, eps=EPS)
    (gx,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    # First derivatives are still right with create_graph=True.
    (want,) = torch.autograd.grad(rms_norm_reference(x, w).sum(), x)
    torch.testing.assert_close(gx.detach(), want)
    with pytest.raises(RuntimeError, match=r"rms_norm: second derivatives .* its gradients come from "
                                           r"rms_norm_backward, whose spec declares no backward"):
        (gx * gx).sum().backward()


def test_torch_gradgradcheck_raises_for_rms_norm_and_rotary(rng):
    x, w = t64(rng, 2, 8), t64(rng, 8)
    with pytest.raises(RuntimeError, match="rms_norm: second derivatives"):
        torch.autograd.gradgradcheck(lambda x, w: tops.rms_norm(x, w, eps=EPS)[0], (x, w))
    positions = torch.arange(3)
    query, cos_sin = t64(rng, 3, 16), t64(rng, 4, 8)
    with pytest.raises(RuntimeError, match="rotary_embedding: second derivatives"):
        torch.autograd.gradgradcheck(
            lambda q, c: tops.rotary_embedding(positions, q * 1, c, head_size=8)[0], (query, cos_sin))


def test_torch_create_graph_without_a_second_derivative_still_works(rng):
    # create_graph=True alone, the gradients used as values: no error.
    x, w = t64(rng, 3, 8), t64(rng, 8)
    (gx,) = torch.autograd.grad(tops.rms_norm(x, w, eps=EPS)[0].sum(), x, create_graph=True)
    (want,) = torch.autograd.grad(rms_norm_reference(x, w).sum(), x)
    torch.testing.assert_close(gx.detach(), want)


@pytest.mark.parametrize("device", TORCH_DEVICES)
def test_torch_forward_mode_raises_naming_the_op(rng, device):
    x = torch.from_numpy(rng.standard_normal((3, 4))).to(device)
    with pytest.raises(RuntimeError, match=r"softmax: forward-mode derivatives .* use torch.func.vjp"):
        torch.func.jacfwd(tops.softmax)(x)
    with pytest.raises(RuntimeError, match=r"rms_norm: forward-mode derivatives"):
        torch.func.jvp(lambda x: tops.rms_norm(x)[0], (x,), (torch.ones_like(x),))
    with pytest.raises(RuntimeError, match=r"rms_norm: forward-mode derivatives"):  # jvp outside a vmap
        torch.func.jvp(torch.func.vmap(lambda x: tops.rms_norm(x)[0]), (x,), (torch.ones_like(x),))
    with pytest.raises(RuntimeError, match=r"gemm: forward-mode derivatives .* declares no backward"):
        b = torch.from_numpy(rng.standard_normal((4, 2))).to(device)
        torch.func.jvp(tops.gemm, (x, b), (torch.ones_like(x), torch.zeros_like(b)))
    with torch.autograd.forward_ad.dual_level():
        dual = torch.autograd.forward_ad.make_dual(x, torch.ones_like(x))
        with pytest.raises(RuntimeError, match=r"rms_norm: forward-mode derivatives"):
            tops.rms_norm(dual)
        # Inside a dual level, a call on plain tensors runs, and so does reverse mode.
        torch.testing.assert_close(tops.softmax(x), torch.softmax(x, -1))
        xr = x.clone().requires_grad_()
        g = torch.from_numpy(rng.standard_normal((3, 4))).to(device)
        (got,) = torch.autograd.grad((tops.softmax(xr) * g).sum(), xr)
        (want,) = torch.autograd.grad((torch.softmax(xr, -1) * g).sum(), xr)
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_second_derivative_raises_naming_the_op(rng, api_version):
    x = rng.standard_normal((3, 8))
    first = lambda x: jops.rms_norm(x, eps=EPS, api_version=api_version)[0].sum()  # noqa: E731
    jax.grad(first)(x)  # once is fine
    with pytest.raises(TypeError, match=r"rms_norm: JAX differentiates it once; second derivatives"):
        jax.grad(lambda x: jax.grad(first)(x).sum())(x)
    with pytest.raises(TypeError, match=r"rms_norm"):
        jax.hessian(first)(x)


@pytest.mark.parametrize("device", TORCH_DEVICES)
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_gradient_through_a_transpose_reaches_every_backward(rng, device, compiled):
    # The loss reads each output through a transpose of its leading
    # dimensions, so autograd hands the backward op a gradient whose
    # leading dimensions do not fold into one stride.
    def ours(x, w, r, weight):
        out, _ = tops.rms_norm(x, w, eps=EPS)
        gated = tops.glu(x, activation="silu")
        x2, r2 = x * 1, r * 1  # fused_add_rms_norm updates in place: copies of the leaves
        tops.fused_add_rms_norm(x2, r2, weight, eps=EPS)
        return sum((o.transpose(0, 1) * c).sum() for o, c in zip((out, gated, x2, r2), cotangents))

    def reference(x, w, r, weight):
        a, b = x.chunk(2, -1)
        s = x + r
        outs = (rms_norm_reference(x, w), a * torch.nn.functional.silu(b), rms_norm_reference(s, weight), s)
        return sum((o.transpose(0, 1) * c).sum() for o, c in zip(outs, cotangents))

    x, w, r, weight = (t64(rng, *s, device=device) for s in [(3, 5, 8), (8,), (3, 5, 8), (8,)])
    cotangents = [torch.from_numpy(rng.standard_normal(s)).to(device) for s in [(5, 3, 8), (5, 3, 4), (5, 3, 8),
                                                                                 (5, 3, 8)]]
    f = torch.compile(ours, fullgraph=True) if compiled else ours
    got = torch.autograd.grad(f(x, w, r, weight), (x, w, r, weight))
    want = torch.autograd.grad(reference(x, w, r, weight), (x, w, r, weight))
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e)
