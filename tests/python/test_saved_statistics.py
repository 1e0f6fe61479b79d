"""layer_norm's backward takes the forward's statistics (mean and rstd, outputs on
request) where they were made (docs/spec.md, "Outputs on request"): a differentiated
call asks for them itself and hands the caller only what it asked for; a call that
made none (torch.ops.<ns>.layer_norm without the flags) gives the backward None, and
the backward recomputes them. Gradients against float64 torch on fresh random
inputs through every route, with and without the caller asking; the statistics
seen reaching the backward op (torch's dispatcher, JAX's program); and
layer_norm_backward's bodies reading the statistics they are given."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import opgen_ops.jax as jops
import opgen_ops.torch as tops

EPS = 1e-5
SHAPE, D = (3, 5, 48), 48
ASKED = [(), ("mean",), ("mean", "rstd"), ("rstd",)]


def case(rng):
    x, w, b, c = (rng.standard_normal(s).astype(np.float32) for s in [SHAPE, (D,), (D,), SHAPE])
    return x * 2 + 1, w, b, c


def want_gradients(x, w, b, c):
    """d sum(layer_norm(x, w, b) * c) / d (x, w, b), in float64 torch."""
    leaves = [torch.from_numpy(a).double().requires_grad_() for a in (x, w, b)]
    out = torch.nn.functional.layer_norm(leaves[0], [D], leaves[1], leaves[2], EPS)
    return torch.autograd.grad((out * torch.from_numpy(c).double()).sum(), leaves)


def flags(asked):
    return {f"return_{name}": True for name in asked}


def check_statistics(x, mean, rstd, asked):
    """What the caller gets: each statistic it asked for (right), None for the others."""
    x64 = x.astype(np.float64)
    for name, got, want in [("mean", mean, x64.mean(-1)), ("rstd", rstd, 1 / np.sqrt(x64.var(-1) + EPS))]:
        if name in asked:
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
        else:
            assert got is None, name


@pytest.mark.parametrize("asked", ASKED)
@pytest.mark.parametrize("route", ["wrapper", "compiled", "torch.ops"])
def test_torch_gradients_with_and_without_the_statistics(rng, route, asked):
    x, w, b, c = case(rng)
    leaves = [torch.from_numpy(a).requires_grad_() for a in (x, w, b)]
    got_stats = {}

    def loss(x, w, b):
        if route == "torch.ops":  # the bare op: no flag unless asked, so the backward gets None and recomputes
            out, mean, rstd = torch.ops.opgen_ops.layer_norm(x, w, b, eps=EPS, **flags(asked))
        else:
            out, mean, rstd = tops.layer_norm(x, w, b, eps=EPS, **flags(asked))
        got_stats.update(mean=mean, rstd=rstd)
        return (out * torch.from_numpy(c)).sum()

    (torch.compile(loss, fullgraph=True) if route == "compiled" else loss)(*leaves).backward()
    for got, want in zip(leaves, want_gradients(x, w, b, c)):
        torch.testing.assert_close(got.grad.double(), want, rtol=1e-4, atol=1e-4)
    if route == "torch.ops":
        for name in ("mean", "rstd"):  # the schema returns every output; one not asked for has no elements
            assert (got_stats[name].numel() > 0) == (name in asked), name
    else:
        check_statistics(x, *(None if v is None else v.detach() for v in got_stats.values()), asked)


class BackwardSpy(TorchDispatchMode):
    """Records the arguments of each layer_norm_backward the dispatcher runs."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket is torch.ops.opgen_ops.layer_norm_backward:
            # (The dispatcher leaves trailing arguments at their default, None, out.)
            self.calls.append(tuple(args) + (None,) * (6 - len(args)))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("asked", ASKED)
def test_torch_backward_gets_the_statistics_of_a_differentiated_call(rng, asked):
    x, w, b, c = case(rng)
    leaves = [torch.from_numpy(a).requires_grad_() for a in (x, w, b)]
    out, mean, rstd = tops.layer_norm(*leaves, eps=EPS, **flags(asked))
    check_statistics(x, None if mean is None else mean.detach(), None if rstd is None else rstd.detach(), asked)
    _, want_mean, want_rstd = tops.layer_norm(*(a.detach() for a in leaves), eps=EPS, return_mean=True,
                                              return_rstd=True)
    with BackwardSpy() as spy:
        (out * torch.from_numpy(c)).sum().backward()
    (args,), = [spy.calls]
    # grad_out, x, weight, mean, rstd, grad_residual: the forward's own statistics, bit for bit.
    torch.testing.assert_close(args[3], want_mean, rtol=0, atol=0)
    torch.testing.assert_close(args[4], want_rstd, rtol=0, atol=0)


def test_torch_ops_without_the_flags_leave_the_backward_none(rng):
    x, w, b, c = case(rng)
    leaves = [torch.from_numpy(a).requires_grad_() for a in (x, w, b)]
    out = torch.ops.opgen_ops.layer_norm(*leaves, eps=EPS)[0]
    with BackwardSpy() as spy:
        (out * torch.from_numpy(c)).sum().backward()
    (args,), = [spy.calls]
    assert args[3] is None and args[4] is None


def jax_loss(asked, c):
    def loss(x, w, b):
        out, mean, rstd = jops.layer_norm(x, w, b, eps=EPS, **flags(asked))
        return jnp.sum(out * c), (mean, rstd)
    return loss


@pytest.mark.parametrize("asked", ASKED)
@pytest.mark.parametrize("route", ["eager", "jit", "vmap"])
def test_jax_gradients_with_and_without_the_statistics(rng, route, asked):
    x, w, b, c = case(rng)
    loss = jax_loss(asked, c)
    if route == "vmap":  # each slice of the leading axis a call of its own
        def loss(x, w, b):
            values, stats = jax.vmap(lambda xi, ci: jax_loss(asked, ci)(xi, w, b))(x, c)
            return values.sum(), stats
    grad = jax.grad(loss, argnums=(0, 1, 2), has_aux=True)
    got, (mean, rstd) = (jax.jit(grad) if route == "jit" else grad)(x, w, b)
    for g, want in zip(got, want_gradients(x, w, b, c)):
        np.testing.assert_allclose(np.asarray(g, np.float64), want.numpy(), rtol=1e-4, atol=1e-4)
    check_statistics(x, mean, rstd, asked)


def ffi_calls(jaxpr, target):
    """The custom calls of `target` in a jaxpr and the jaxprs inside it."""
    found = []
    for eqn in jaxpr.eqns:
        if target in str(eqn.params.get("target_name", "")):
            found.append(eqn)
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else [value]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    found += ffi_calls(inner, target)
    return found


@pytest.mark.parametrize("asked", [(), ("mean", "rstd")])
def test_jax_backward_gets_the_statistics_and_the_primal_call_only_what_was_asked(rng, asked):
    x, w, b, c = case(rng)
    loss = jax_loss(asked, c)
    program = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2), has_aux=True))(x, w, b).jaxpr
    (back,) = ffi_calls(program, "layer_norm_backward")
    # grad_out, x, weight, mean, rstd: the statistics are operands, of the forward's shape.
    assert [v.aval.shape for v in back.invars] == [SHAPE, SHAPE, (D,), SHAPE[:-1], SHAPE[:-1]]
    (forward,) = ffi_calls(program, "layer_norm_ffi")
    assert len(forward.outvars) == 3
    # Not differentiated, the call makes what the caller asked for alone.
    (primal,) = ffi_calls(jax.make_jaxpr(loss)(x, w, b).jaxpr, "layer_norm_ffi")
    assert len(primal.outvars) == 1 + len(asked)


@pytest.mark.parametrize("given", ["mean", "rstd", "mean, rstd"])
def test_backward_bodies_read_the_statistics_given(rng, given):
    """Given statistics other than x's own, the gradients follow the formula with those
    (float64 numpy): the body reads them rather than recomputing."""
    x, w, _, g = (rng.standard_normal(s) for s in [(6, D), (D,), (D,), (6, D)])
    mean = x.mean(-1) + rng.uniform(0.1, 0.5, 6) * (1 if "mean" in given else 0)
    var = ((x - x.mean(-1, keepdims=True)) ** 2).mean(-1)
    # rstd recomputed from x is centred on x's mean, whatever mean is given.
    rstd = 1 / np.sqrt(((x - mean[:, None]) ** 2).mean(-1) + EPS) if "mean" in given else 1 / np.sqrt(var + EPS)
    rstd = rstd * rng.uniform(1.5, 2.0, 6) if "rstd" in given else rstd
    n = (x - mean[:, None]) * rstd[:, None]
    gw = g * w
    want_x = rstd[:, None] * (gw - gw.mean(-1, keepdims=True) - n * (gw * n).mean(-1, keepdims=True))
    stats = {name: torch.from_numpy(v) for name, v in [("mean", mean), ("rstd", rstd)] if name in given}
    got_x, got_w, got_b = tops.layer_norm_backward(*(torch.from_numpy(a) for a in (g, x, w)), eps=EPS, **stats)
    np.testing.assert_allclose(got_x.numpy(), want_x, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(got_w.numpy(), (g * n).sum(0), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(got_b.numpy(), g.sum(0), rtol=1e-10, atol=1e-10)
    with jax.enable_x64(True):
        jstats = {name: jnp.asarray(v.numpy()) for name, v in stats.items()}
        jx = jops.layer_norm_backward(*(jnp.asarray(a) for a in (g, x, w)), eps=EPS, **jstats)[0]
    np.testing.assert_allclose(np.asarray(jx), want_x, rtol=1e-10, atol=1e-10)
