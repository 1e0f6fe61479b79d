"""The rule for an input an op updates in place, on every PyTorch path: its
elements must not overlap one another (an expanded, stride-0 tensor; rows
closer together than their length), and it must share no memory with another
input. Either would make the update write one place twice or read what it
overwrote: a silently wrong answer on the CPU, a data race on the GPU. The
rule is the C++ one (opgen/footprint.h), asked by the torch kernels and, where
the op runs on copies because a gradient is needed, by the Python glue."""

import pytest
import torch

import opgen_ops.torch as tops
from opgen_ops import _C

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and _C.built_with_cuda else [])


def rows(rng, n, d, device, requires_grad=False):
    return torch.tensor(rng.standard_normal((n, d)), dtype=torch.float32, device=device).requires_grad_(requires_grad)


def self_overlapping(rng, kind, n, d, device):
    """An [n, d] tensor whose elements overlap: one row expanded n times, or
    rows half their length apart."""
    if kind == "expanded":
        return rows(rng, 1, d, device).expand(n, d)
    base = rows(rng, 1, (n + 1) * d, device).reshape(-1)
    return base.as_strided((n, d), (d // 2, 1))


def cache(rng, p, r, device):
    return torch.tensor(rng.standard_normal((p, r)), dtype=torch.float32, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["expanded", "rows closer than their length"])
@pytest.mark.parametrize("grad", [False, True], ids=["no grad", "weight requires grad"])
def test_fused_add_rms_norm_refuses_an_x_whose_elements_overlap(rng, device, kind, grad):
    x = self_overlapping(rng, kind, 4, 16, device)
    residual, weight = rows(rng, 4, 16, device), rows(rng, 1, 16, device, grad).reshape(16)
    before = residual.clone()
    with pytest.raises(RuntimeError, match=r"fused_add_rms_norm: input 'x' is updated in place, but its elements "
                                           r"overlap in memory \(sizes \[4, 16\], strides \[\d+, 1\]"):
        tops.fused_add_rms_norm(x, residual, weight)
    assert torch.equal(residual, before), "a refused call wrote into residual"
    if not grad:
        with pytest.raises(RuntimeError, match=r"input 'x' is updated in place, but its elements overlap"):
            torch.ops.opgen_ops.fused_add_rms_norm(x, residual, weight)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("grad", [False, True], ids=["no grad", "cache requires grad"])
def test_rotary_embedding_refuses_a_query_whose_rows_overlap(rng, device, grad):
    positions = torch.arange(4, dtype=torch.int64, device=device)
    query = self_overlapping(rng, "rows closer than their length", 4, 16, device)
    cos_sin = cache(rng, 8, 8, device).requires_grad_(grad)
    with pytest.raises(RuntimeError, match=r"rotary_embedding: input 'query' is updated in place, but its elements "
                                           r"overlap"):
        tops.rotary_embedding(positions, query, cos_sin, head_size=8)


@pytest.mark.parametrize("device", DEVICES)
def test_with_a_gradient_the_same_tensor_twice_is_refused(rng, device):
    # The op runs on copies when a gradient is needed, where the C++ kernel
    # cannot see that x and residual are one tensor: b would end up 2 b.
    b = rows(rng, 4, 16, device)
    weight = rows(rng, 1, 16, device, True).reshape(16)
    before = b.clone()
    with pytest.raises(RuntimeError, match=r"fused_add_rms_norm: input 'residual' shares memory with input 'x', "
                                           r"which the op updates in place"):
        tops.fused_add_rms_norm(b, b, weight)
    assert torch.equal(b, before)


@pytest.mark.parametrize("device", DEVICES)
def test_with_a_gradient_a_key_inside_the_query_is_refused(rng, device):
    positions = torch.arange(4, dtype=torch.int64, device=device)
    query = rows(rng, 4, 32, device)
    key = query[:, 8:24]
    cos_sin = cache(rng, 8, 8, device).requires_grad_(True)
    with pytest.raises(RuntimeError, match=r"rotary_embedding: input '(key|query)' shares memory with input "
                                           r"'(query|key)', which the op updates in place"):
        tops.rotary_embedding(positions, query, cos_sin, key, head_size=8)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("needs_grad", ["projection", "cache"])
def test_with_a_gradient_the_views_of_one_qkv_tensor_still_run(rng, device, needs_grad):
    # The rule refuses what overlaps, not what merely shares a base tensor.
    # Where only the cache needs a gradient, qkv is a leaf that joins the
    # graph with the first view's update, which the second must survive.
    positions = torch.arange(4, dtype=torch.int64, device=device)
    x, w = rows(rng, 4, 16, device, needs_grad == "projection"), rows(rng, 16, 48, device)
    cos_sin = cache(rng, 8, 8, device).requires_grad_(needs_grad == "cache")
    qkv = x @ w
    query, key = qkv[:, :32], qkv[:, 32:48]
    want_q, want_k = tops.rotary_embedding(positions, query.detach().clone(), cos_sin.detach(),
                                           key.detach().clone(), head_size=8)
    got_q, got_k = tops.rotary_embedding(positions, query, cos_sin, key, head_size=8)
    torch.testing.assert_close(got_q.detach(), want_q)
    torch.testing.assert_close(got_k.detach(), want_k)
    torch.testing.assert_close(qkv[:, :32].detach(), want_q)


def test_the_rule_reads_shapes_and_strides_as_the_kernel_does():
    names = ["x", "residual", "weight"]
    dense = (4096, [4, 16], [16, 1], 4)
    assert _C.in_place_conflict("op", names, [dense, (8192, [4, 16], [16, 1], 4), None], 0) is None
    assert "shares memory" in _C.in_place_conflict("op", names, [dense, (4096 + 60, [4, 16], [16, 1], 4), None], 0)
    assert "overlap" in _C.in_place_conflict("op", names, [(4096, [4, 16], [0, 1], 4), None, None], 0)
    assert "overlap" in _C.in_place_conflict("op", names, [(4096, [4, 16], [8, 1], 4), None, None], 0)
    # Interleaved rows that never meet, and an empty tensor, are fine.
    assert _C.in_place_conflict("op", names, [(4096, [4, 16], [32, 1], 4), (4096 + 64, [4, 16], [32, 1], 4),
                                              None], 0) is None
    assert _C.in_place_conflict("op", names, [(4096, [0, 16], [0, 1], 4), None, None], 0) is None


def test_two_row_views_of_one_leaf_are_updated_with_a_gradient(rng):
    buf = rows(rng, 8, 16, "cpu")
    w = torch.tensor(rng.standard_normal(16), dtype=torch.float32, requires_grad=True)
    x_want, r_want = buf[:4].clone(), buf[4:].clone()
    tops.fused_add_rms_norm(x_want, r_want, w.detach())
    x_out, r_out = tops.fused_add_rms_norm(buf[:4], buf[4:], w)
    torch.testing.assert_close(buf[:4].detach(), x_want)
    torch.testing.assert_close(buf[4:].detach(), r_want)
    x_out.sum().backward()
    assert w.grad is not None


def dynamo_refuses_a_tensor_given_twice_to_an_autograd_function() -> bool:
    """Whether Dynamo itself refuses to trace autograd.Function.apply given
    one tensor as two inputs (torch 2.15 does: its "duplicate tensor input"
    graph break), before the op's rule could speak."""
    class Add(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a + b

        @staticmethod
        def backward(ctx, g):
            return g, g

    try:
        torch.compile(lambda a: Add.apply(a, a), fullgraph=True)(torch.ones(2, requires_grad=True))
    except torch._dynamo.exc.Unsupported as e:
        return "duplicate tensor input" in str(e)
    return False


def test_under_torch_compile_with_a_gradient_the_rule_holds(rng):
    # Tracing sees fake tensors: the rule runs on the real ones each time the
    # compiled graph runs. What matters is that the call is refused, not run:
    # where Dynamo refuses it first, its refusal is the one expected.
    f = torch.compile(lambda x, r, w: tops.fused_add_rms_norm(x, r, w), fullgraph=True)
    w = rows(rng, 1, 16, "cpu", True).reshape(16)
    b = rows(rng, 4, 16, "cpu")
    before = b.clone()
    refusal = "input 'residual' shares memory with input 'x'"
    if dynamo_refuses_a_tensor_given_twice_to_an_autograd_function():
        refusal = f"{refusal}|autograd.Function.apply: duplicate tensor input"
    with pytest.raises(Exception, match=refusal):
        f(b, b, w)
    assert torch.equal(b, before)
    # A valid call of the same compiled function runs and is right.
    x, r = rows(rng, 4, 16, "cpu"), rows(rng, 4, 16, "cpu")
    x_want, r_want = x.clone(), r.clone()
    tops.fused_add_rms_norm(x_want, r_want, w.detach())
    f(x, r, w)
    torch.testing.assert_close(x.detach(), x_want)
    torch.testing.assert_close(r.detach(), r_want)


def test_under_torch_compile_an_optional_input_left_out_holds(rng):
    positions = torch.arange(4)
    cos_sin = cache(rng, 8, 4, "cpu")
    f = torch.compile(lambda q: tops.rotary_embedding(positions, q * 1, cos_sin, None, head_size=4)[0].sum(),
                      fullgraph=True)
    q = rows(rng, 4, 8, "cpu", True)
    f(q).backward()
    want_q = q.detach().clone().requires_grad_()
    tops.rotary_embedding(positions, want_q * 1, cos_sin, None, head_size=4)[0].sum().backward()
    torch.testing.assert_close(q.grad, want_q.grad)
