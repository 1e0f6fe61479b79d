"""The direct route of a plain eager PyTorch call (`_torch_direct.Direct`):
on plain CPU (or CUDA) tensors of which none needs a gradient, with no mode,
subclass, transform, compiler or profiler in the way, `opgen_ops.torch.<op>`
runs the op's rules and body around the dispatcher (the eager route, torch
>= 2.10) or the C++ kernel alone; anything else takes the full route, which
every mode and transform sees as the op itself. All give the same results."""

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import opgen_ops.torch as tops
from opgen_ops._torch_direct import DIRECT

EAGER = DIRECT["simple_add"].eager is not None
requires_eager = pytest.mark.skipif(
    not EAGER, reason="the eager route needs DLPack's exchange API in torch (>= 2.10) when built and run")
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def kernels_run(fn):
    """The opgen_ops operators that the profiler saw `fn` call."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return {e.name for e in prof.events() if e.name.startswith("opgen_ops::")}


class Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def t(rng, *shape, requires_grad=False):
    return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).requires_grad_(requires_grad)


def test_a_plain_eager_call_takes_the_direct_route(rng, monkeypatch):
    # glu's C++ kernel takes its enum lowered; rms_norm's has torch.library's
    # Python autograd kernel in front of it: the direct route skips both, and
    # runs the eager route where it is on, else the kernel's overload itself.
    x, w = t(rng, 2, 16), t(rng, 16)
    for name, call in [("glu", lambda: tops.glu(x, activation="silu")), ("rms_norm", lambda: tops.rms_norm(x, w))]:
        calls = []
        kernel = DIRECT[name].kernel
        monkeypatch.setattr(DIRECT[name], "kernel", lambda *a, _k=kernel, **kw: calls.append(1) or _k(*a, **kw))
        call()
        assert len(calls) == (0 if EAGER else 1), name


def test_under_the_profiler_a_call_takes_the_dispatcher_s_route_which_names_the_op(rng):
    x, w = t(rng, 2, 16), t(rng, 16)
    assert kernels_run(lambda: tops.glu(x, activation="silu")) == {"opgen_ops::glu", "opgen_ops::glu__lowered"}
    assert kernels_run(lambda: tops.rms_norm(x, w)) == {"opgen_ops::rms_norm"}


@pytest.mark.parametrize("route", ["dispatch mode", "requires grad", "vmap"])
def test_everything_else_takes_the_full_route_with_the_same_result(rng, route):
    x = t(rng, 3, 2, 16)
    want = torch.ops.opgen_ops.glu(x, activation="gelu")
    if route == "dispatch mode":
        with Recorder() as mode:
            got = tops.glu(x, activation="gelu")
        assert mode.ops == ["opgen_ops.glu__lowered.default"], mode.ops  # glu itself is composite
    elif route == "requires grad":
        xg = x.clone().requires_grad_()
        got = tops.glu(xg, activation="gelu")
        assert got.grad_fn is not None
        got = got.detach()
    else:
        got = torch.func.vmap(lambda r: tops.glu(r, activation="gelu"))(x)
    torch.testing.assert_close(got, want)


def test_the_direct_route_checks_as_the_full_route_does(rng):
    x = t(rng, 2, 15)
    with pytest.raises(RuntimeError, match=r"glu: output 'out' is declared \[\.\.\., D/2\], but 15 is not divisible"):
        tops.glu(x)
    with pytest.raises(RuntimeError, match=r"'activation' is 'tanh'"):
        tops.glu(t(rng, 2, 16), activation="tanh")
    with pytest.raises(RuntimeError, match=r"input 'b' is required, not None"):
        tops.simple_add(t(rng, 4), None)
    # An attribute value lowered once is not reused for another.
    x = t(rng, 2, 16)
    for activation in ("sigmoid", "silu", "sigmoid", "gelu"):
        torch.testing.assert_close(tops.glu(x, activation=activation),
                                   torch.ops.opgen_ops.glu(x, activation=activation))


def test_a_value_equal_to_a_cached_one_but_of_another_type_is_still_refused(rng):
    # [-1] and [-1.0] are equal to Python; only the first is a valid dims.
    x = t(rng, 2, 3)
    torch.testing.assert_close(tops.flip(x, dims=[-1]), x.flip(-1))
    with pytest.raises(RuntimeError, match="attribute 'dims' element 0 must be an int, not float"):
        tops.flip(x, dims=[-1.0])


# --- the eager route around the dispatcher (torch >= 2.10: _C.torch_eager) ---------------



def kernel_refused(monkeypatch, name):
    """Makes the kernel's route of op `name` fail, so that a call that
    returns took the eager route."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"{name} took the kernel's route")
    monkeypatch.setattr(DIRECT[name], "kernel", refuse)


def eager_cases(rng, device):
    """op: (its call through opgen_ops.torch, the same call through torch.ops
    (the kernel's route)), each on fresh copies of one draw of inputs; the
    in-place ones return the inputs they update too."""
    def r(*shape, dtype=torch.float32):
        return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(device=device, dtype=dtype)
    k = torch.ops.opgen_ops
    a, b, x, w, bias, g = r(1000), r(1000), r(3, 2, 16), r(16), r(16), r(5, 8)
    res, h = r(3, 2, 16), r(4, 64)

    def in_place(f):
        def run():  # the inputs it updates
            xc, rc = x.clone(), res.clone()
            f(xc, rc)
            return xc, rc
        return run
    return {
        "simple_add": (lambda: tops.simple_add(a, b, alpha=0.5), lambda: k.simple_add(a, b, alpha=0.5)),
        "simple_add of no elements": (lambda: tops.simple_add(a[:0], b[:0]), lambda: k.simple_add(a[:0], b[:0])),
        "glu (an enum)": (lambda: tops.glu(x, activation="silu"), lambda: k.glu(x, activation="silu")),
        "flip (an i64[])": (lambda: tops.flip(x, dims=[-2, -1]), lambda: k.flip(x, dims=[-2, -1])),
        "rms_norm, no bias": (lambda: tops.rms_norm(x, w, eps=1e-5), lambda: k.rms_norm(x, w, None, eps=1e-5)),
        "rms_norm, a bias": (lambda: tops.rms_norm(x, w, bias), lambda: k.rms_norm(x, w, bias)),
        "layer_norm, mean on request": (
            lambda: tops.layer_norm(x, w, bias, return_mean=True)[:2],
            lambda: k.layer_norm(x, w, bias, return_mean=True, return_rstd=False)[:2]),
        "topk_softmax (two outputs)": (lambda: tops.topk_softmax(g, topk=3, renormalize=True),
                                       lambda: k.topk_softmax(g, topk=3, renormalize=True)),
        "fused_add_rms_norm (in place)": (in_place(lambda xc, rc: tops.fused_add_rms_norm(xc, rc, w)),
                                          in_place(lambda xc, rc: k.fused_add_rms_norm(xc, rc, w))),
        "dynamic_per_token_scaled_fp8_quant (a dtype)": (
            lambda: [t.float() for t in tops.dynamic_per_token_scaled_fp8_quant(h, out_dtype=torch.float8_e5m2)],
            lambda: [t.float() for t in k.dynamic_per_token_scaled_fp8_quant(h, None, out_dtype=torch.float8_e5m2)]),
    }


@requires_eager
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", ["simple_add", "simple_add of no elements", "glu (an enum)", "flip (an i64[])",
                                  "rms_norm, no bias", "rms_norm, a bias", "layer_norm, mean on request",
                                  "topk_softmax (two outputs)", "fused_add_rms_norm (in place)",
                                  "dynamic_per_token_scaled_fp8_quant (a dtype)"])
def test_the_eager_route_gives_the_kernel_s_results(rng, monkeypatch, device, case):
    ours, kernel = eager_cases(rng, device)[case]
    want = kernel()
    kernel_refused(monkeypatch, case.split(" ")[0].rstrip(","))
    got = ours()
    want, got = (list(v) if isinstance(v, (tuple, list)) else [v] for v in (want, got))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.device == w.device and g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=0, atol=0)  # the same body on the same values


@requires_eager
def test_what_the_eager_route_does_not_read_takes_the_kernel_s_route(rng, monkeypatch):
    a, b = t(rng, 8), t(rng, 8)
    calls = []
    kernel = DIRECT["simple_add"].kernel
    monkeypatch.setattr(DIRECT["simple_add"], "kernel", lambda *args, **kw: calls.append(1) or kernel(*args, **kw))
    # An int where the spec has f32 arrives as a float (the wrapper converts
    # it as JAX does: _torch_values.kernel_attrs), which the eager route
    # takes; a shape the rules refuse goes to the kernel, which says why not;
    # a plain call after it takes the eager route again.
    torch.testing.assert_close(tops.simple_add(a, b, alpha=2), a + 2 * b)
    assert len(calls) == 0
    with pytest.raises(RuntimeError, match=r"simple_add: input 'b' has shape \[7\]"):
        tops.simple_add(a, t(rng, 7))
    assert len(calls) == 1
    tops.simple_add(a, b)
    assert len(calls) == 1


@requires_eager
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device for torch")
def test_the_eager_route_runs_on_the_current_stream_of_the_tensors_device(rng):
    a, b = t(rng, 1 << 20).cuda(), t(rng, 1 << 20).cuda()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(20_000_000)  # the side stream is busy; a launch elsewhere would run first
        out = tops.simple_add(a, b)
        out.mul_(2)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, 2 * (a + b))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("route", ["plain", "dispatch mode"])
def test_an_input_updated_in_place_tells_autograd(rng, device, route):
    # A tensor saved for a gradient and then updated in place makes backward
    # raise, as after a native in-place op; before, the gradient silently read
    # the updated values.
    x, residual, weight = (t(rng, 4, 32).to(device), t(rng, 4, 32).to(device), t(rng, 32).to(device))
    g = t(rng, 32, requires_grad=True).to(device)
    loss = (residual * g).sum()  # saves residual
    version = residual._version
    if route == "plain":
        tops.fused_add_rms_norm(x, residual, weight)
    else:
        with Recorder():
            tops.fused_add_rms_norm(x, residual, weight)
    assert residual._version > version
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_an_update_in_place_bumps_the_version_once(rng):
    # Once per call, as a native in-place op does (torch iterates over a
    # tensor handed to it alone: one bump per row, and a call that costs as
    # much as the tensor's rows).
    x, residual, weight = t(rng, 64, 32), t(rng, 64, 32), t(rng, 32)
    before = residual._version
    tops.fused_add_rms_norm(x, residual, weight)
    assert residual._version == before + 1


@pytest.mark.parametrize("kind", ["negative-bit view", "zero tensor", "functional tensor", "named tensor"])
def test_a_tensor_whose_memory_is_not_what_it_means_takes_the_kernel_s_route(rng, kind):
    # Each is a torch.Tensor whose memory DLPack would hand over as it is: the
    # eager route read a negative-bit view's values unnegated, and crashed on
    # a zero tensor's and a functional tensor's (a hostile review's findings).
    b = t(rng, 4)
    if kind == "negative-bit view":
        a = torch.from_numpy(rng.standard_normal(4).astype(np.complex64)).conj().imag
        assert a.is_neg()
        torch.testing.assert_close(tops.simple_add(a, b), a.resolve_neg() + b, rtol=0, atol=0)
    elif kind == "zero tensor":
        z = torch._efficientzerotensor(4)
        with pytest.raises(RuntimeError):  # the kernel's refusal, not a crash
            tops.simple_add(z, b)
    elif kind == "functional tensor":
        a = t(rng, 4)
        got = tops.simple_add(torch._to_functional_tensor(a), b)
        torch.testing.assert_close(torch._from_functional_tensor(got) if torch._is_functional_tensor(got) else got,
                                   a + b, rtol=0, atol=0)
    else:
        if not hasattr(torch.Tensor, "refine_names"):
            pytest.skip(f"torch {torch.__version__} has no named tensors")
        with pytest.warns(UserWarning), pytest.raises(RuntimeError, match="Named tensors"):
            tops.simple_add(t(rng, 4).refine_names("N"), b)


def test_torch_jit_trace_records_the_op(rng):
    x = t(rng, 2, 16)
    traced = torch.jit.trace(lambda v: tops.softmax(v), x)
    assert "opgen_ops::softmax" in str(traced.graph)
    y = t(rng, 2, 16)
    torch.testing.assert_close(traced(y), torch.softmax(y, -1))
