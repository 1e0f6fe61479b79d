"""The direct route of a plain eager PyTorch call (`_torch_direct.Direct`):
on plain CPU (or CUDA) tensors of which none needs a gradient, with no mode,
subclass, transform or compiler in the way, `opgen_ops.torch.<op>` runs the
C++ kernel alone; anything else takes the full route, which every mode and
transform sees as the op itself. Both give the same results."""

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import opgen_ops.torch as tops


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


def test_a_plain_eager_call_runs_the_kernel_alone(rng):
    x, w = t(rng, 2, 16), t(rng, 16)
    # glu's C++ kernel takes its enum lowered; rms_norm's has torch.library's
    # Python autograd kernel in front of it: the direct route skips both.
    assert kernels_run(lambda: tops.glu(x, activation="silu")) == {"opgen_ops::glu__lowered"}
    assert kernels_run(lambda: tops.rms_norm(x, w)) == {"opgen_ops::rms_norm"}
    assert kernels_run(lambda: torch.ops.opgen_ops.glu(x, activation="silu")) == {"opgen_ops::glu",
                                                                                "opgen_ops::glu__lowered"}


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
