"""simple_add as torch.ops.opgen_ops.simple_add on CPU tensors: results,
schema, fake kernel, opcheck, torch.compile, and the argument checks."""

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import opgen_ops.torch as ops

OP = torch.ops.opgen_ops.simple_add


def randn(rng, n, dtype=np.float32):
    return torch.from_numpy(rng.standard_normal(n).astype(dtype))


def reference(a, b, alpha):
    return a.double() + alpha * b.double()


@pytest.mark.parametrize("n", [1, 5, 1000, 65537])
def test_eager_matches_float64_reference(rng, n):
    a, b = randn(rng, n), randn(rng, n)
    alpha = float(rng.uniform(-3, 3))
    out = ops.simple_add(a, b, alpha=alpha)
    assert out.dtype == torch.float32 and out.shape == (n,) and out.device.type == "cpu"
    torch.testing.assert_close(out.double(), reference(a, b, alpha), rtol=1e-6, atol=1e-6)


def test_default_alpha_and_direct_op_call(rng):
    a, b = randn(rng, 17), randn(rng, 17)
    torch.testing.assert_close(OP(a, b).double(), reference(a, b, 1.0), rtol=1e-6, atol=1e-6)


def test_schema_and_docstring():
    assert str(OP.default._schema) == "opgen_ops::simple_add(Tensor a, Tensor b, *, float alpha=1.) -> Tensor"
    assert "a: f32[N] first addend" in ops.simple_add.__doc__
    assert "alpha: f32 = 1.0" in ops.simple_add.__doc__


def test_empty_input_gives_empty_output():
    out = ops.simple_add(torch.empty(0), torch.empty(0))
    assert out.shape == (0,) and out.dtype == torch.float32


def test_opcheck(rng):
    a, b = randn(rng, 33), randn(rng, 33)
    torch.library.opcheck(OP.default, (a, b), {"alpha": 0.25})
    torch.library.opcheck(OP.default, (a[:0], b[:0]), {})


def test_fake_kernel_computes_the_output_shape(rng):
    with FakeTensorMode():
        a, b = torch.empty(12), torch.empty(12)
        out = OP(a, b, alpha=3.0)
        assert out.shape == (12,) and out.dtype == torch.float32
        with pytest.raises(RuntimeError, match=r"dimension 0 must be 12 \(N, "):
            OP(a, torch.empty(11))


def test_fake_tensors_meet_the_rules_the_kernel_meets(rng):
    """What the real kernel refuses, the fake kernel refuses, in its words:
    a layout the spec does not take, an array attribute's element past its
    bounds (the lowered kernel's fake cannot read the elements), a tensor
    for an array attribute (issue 37's differential test)."""
    x = torch.from_numpy(rng.standard_normal((6, 4)).astype(np.float32))
    refusals = [((x.t(),), {}, r"flip: input 'x' is not contiguous; the kernel reads dense row-major memory"),
                ((x,), {"dims": [0]}, r"flip: attribute 'dims' element 0 = 0 must be in \[-2, -1\]"),
                ((x,), {"dims": torch.tensor([-1])}, r"flip: attribute 'dims' element 0 must be an int, not Tensor")]
    for args, attrs, message in refusals:
        with pytest.raises(RuntimeError, match=message):
            ops.flip(*args, **attrs)
        with FakeTensorMode() as mode, pytest.raises(RuntimeError, match=message):
            ops.flip(*[mode.from_tensor(a) for a in args], **attrs)


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph(rng, dynamic):
    torch._dynamo.reset()

    def f(a, b):
        return ops.simple_add(a * 2, b, alpha=0.5).sin()

    compiled = torch.compile(f, fullgraph=True, dynamic=dynamic)
    for n in (64, 100):  # a second size exercises the dynamic shape path
        a, b = randn(rng, n), randn(rng, n)
        torch.testing.assert_close(compiled(a, b), f(a, b))


def test_mismatched_shapes(rng):
    a = randn(rng, 8)
    with pytest.raises(RuntimeError, match=r"simple_add: input 'b' has shape \[7\]; dimension 0 must be 8 "
                                           r"\(N, bound by input 'a' dimension 0\)"):
        OP(a, a[:7])


def test_wrong_dtype_is_refused_not_cast(rng):
    a = randn(rng, 8)
    with pytest.raises(RuntimeError, match="input 'b' has dtype float64; the spec declares float32"):
        OP(a, a.double())


def test_wrong_rank(rng):
    a = randn(rng, 8)
    with pytest.raises(RuntimeError, match=r"input 'a' has rank 2 \(shape \[2, 4\]\); the spec declares \[N\]"):
        OP(a.view(2, 4), a.view(2, 4))


def test_non_contiguous_input_is_refused(rng):
    a = randn(rng, 16)
    with pytest.raises(RuntimeError, match="input 'a' is not contiguous"):
        OP(a[::2], a[:8])
    # ... and the documented fix works
    torch.testing.assert_close(OP(a[::2].contiguous(), a[:8]), a[::2] + a[:8])


def test_attribute_type_is_checked_by_the_schema(rng):
    a = randn(rng, 4)
    with pytest.raises(Exception, match="alpha"):
        OP(a, a, alpha="x")
