"""simple_add on CUDA tensors (skipped without a GPU): against the CPU body,
under torch.compile (with CUDA graphs), and on the caller's stream."""

import numpy as np
import pytest
import torch

import opgen_ops.torch as ops

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")

OP = torch.ops.opgen_ops.simple_add


def randn(rng, n):
    return torch.from_numpy(rng.standard_normal(n).astype(np.float32))


@pytest.mark.parametrize("n", [1, 3, 4, 1023, 1 << 20, (1 << 22) + 5])
def test_cuda_matches_cpu_body_and_float64(rng, n):
    a, b = randn(rng, n), randn(rng, n)
    alpha = float(rng.uniform(-3, 3))
    on_gpu = OP(a.cuda(), b.cuda(), alpha=alpha)
    assert on_gpu.device.type == "cuda"
    on_cpu = OP(a, b, alpha=alpha)
    # The same float32 expression; the GPU may contract it into an FMA, which
    # differs from the CPU by an ulp of alpha * b where a + alpha * b cancels.
    torch.testing.assert_close(on_gpu.cpu(), on_cpu, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(on_gpu.cpu().double(), a.double() + alpha * b.double(), rtol=1e-6, atol=1e-6)


def test_empty_and_errors_on_cuda(rng):
    assert OP(torch.empty(0, device="cuda"), torch.empty(0, device="cuda")).shape == (0,)
    a = randn(rng, 8).cuda()
    with pytest.raises(RuntimeError, match="input 'b' is on cpu, but input 'a' is on cuda:0"):
        OP(a, a.cpu())
    with pytest.raises(RuntimeError, match="dimension 0 must be 8"):
        OP(a, a[:3])


def test_opcheck_on_cuda(rng):
    a, b = randn(rng, 129).cuda(), randn(rng, 129).cuda()
    torch.library.opcheck(OP.default, (a, b), {"alpha": -1.5})


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_torch_compile_on_cuda(rng, mode):
    torch._dynamo.reset()

    def f(a, b):
        return ops.simple_add(a.cos(), b, alpha=2.0) * 3

    compiled = torch.compile(f, fullgraph=True, mode=mode)
    a, b = randn(rng, 4096).cuda(), randn(rng, 4096).cuda()
    for _ in range(4):  # reduce-overhead records a CUDA graph, then replays it
        out = compiled(a, b)
        torch.testing.assert_close(out, f(a, b))
        a, b = randn(rng, 4096).cuda(), randn(rng, 4096).cuda()


def test_launches_on_the_callers_stream(rng):
    # On a side stream: sleep, then write x, then the op reads x. Had the op
    # launched on another stream, it would read x before the write lands.
    n = 1 << 22
    a, b = randn(rng, n).cuda(), randn(rng, n).cuda()
    x = torch.full((n,), float("nan"), device="cuda")
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)
        x.copy_(a)
        out = OP(x, b, alpha=0.5)
    side.synchronize()
    torch.testing.assert_close(out, a + 0.5 * b)
