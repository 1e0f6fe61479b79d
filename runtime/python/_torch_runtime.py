"""The PyTorch side of every generated op (hand-written, op-independent): loads
the stable-ABI kernel library (the CPU and CUDA kernels, registered in C++),
registers each op's Python kernels from its description (``_ops/<op>.py``):
the fake (meta) kernel, the XLA kernel and, where the C++ kernels take lowered
attributes, the op with the spec's schema, each checking the call with
`check_torch_call`; and runs the documented function of each op (`call`):
its arguments checked once, then one route, the direct one of a plain eager
call (_torch_direct) or one of ROUTES, which `route` names. Beside it, by
job: _torch_values (values between spec and kernels), _torch_autograd,
_torch_direct (the plain eager route), _torch_xla and _torch_sharding.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import torch
from torch._subclasses.fake_tensor import is_fake

from . import _spec, _torch_autograd, _torch_sharding
from ._spec import Op, OpValueError
from ._torch_direct import DIRECT, Direct, bump_versions
from ._torch_values import (fresh, in_spec_order, kernel_arguments, kernel_attrs, lift, lower, placeholders,
                             request_flags, require_tensors, schema_result, spec_order, split_requests, torch_dtype,
                             unasked)
from ._torch_xla import xla_custom_call
from ._torchax_runtime import is_torchax

_HERE = os.path.dirname(os.path.abspath(__file__))
_LIBRARY_FILE = "_torch_ops.so"


def load_library() -> None:
    """Loads the kernels (their static initializers register the ops)."""
    path = os.path.join(_HERE, _LIBRARY_FILE)
    if not os.path.exists(path):
        raise ImportError(
            f"{path} is missing: the package was built without PyTorch. Rebuild it where torch "
            "is importable at build time (pip install --no-build-isolation .)"
        )
    torch.ops.load_library(path)


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def check_torch_call(op: Op, inputs: Sequence, attrs: Mapping, unchecked: Sequence = (),
                     requested=()) -> _spec.Call:
    """A call on torch tensors (fake or not), whose inputs `require_tensors`
    passed, checked against the op's rules (``_spec.check``): dtypes named as
    torch names them, the tensors' strides held to the spec's layouts."""
    return _spec.check(op, inputs, attrs, hint="torch", dtype_name=_dtype_name, unchecked=unchecked,
                       requested=requested, strides=torch.Tensor.stride)


def _check_devices(op: Op, inputs: Sequence, lowered_attrs: Mapping) -> None:
    """One device for every input, and a CPU tensor for each lowered array
    attribute: the dispatcher picks the kernel from all of them, so a meta
    attribute beside CPU inputs would otherwise land a CPU call in the fake
    kernel and return an uninitialised tensor."""
    given = [(t.name, x) for t, x in zip(op.inputs, inputs) if isinstance(x, torch.Tensor)]
    first_name, first = given[0]
    for name, x in given[1:]:
        if x.device != first.device:
            raise OpValueError(f"{op.name}: input '{name}' is on {x.device}, but input '{first_name}' is on "
                               f"{first.device}; every input must be on one device")
    for a in op.attrs:
        value = lowered_attrs.get(a.name)
        if a.is_array and isinstance(value, torch.Tensor) and value.device.type != "cpu":
            raise OpValueError(f"{op.name}: attribute '{a.name}' must arrive as a CPU tensor, not on {value.device} "
                               "(call the op with a list of ints)")
    if first.device.type not in ("meta", "xla") and not is_fake(first):
        raise OpValueError(f"{op.name}: the fake kernel got real tensors on {first.device}, with an argument on "
                           "another device; every tensor of one call must be on one device")


def register(op: Op, capsules: Mapping) -> None:
    """Registers `op`'s Python kernels: the fake (meta) kernel, the XLA kernel
    and, for an op whose C++ kernels take lowered attributes, the op itself
    with the spec's schema, lowered to them (CompositeImplicitAutograd)."""
    namespace = op.torch_namespace
    kernel = op.torch_kernel_name
    lowered = tuple(a.name for a in op.attrs if a.type == "enum" or a.is_array) if op.torch_lowered else ()

    def fake(*args, **kwargs):
        inputs, attrs, requested = kernel_arguments(op, args, kwargs)
        require_tensors(op, inputs)
        _check_devices(op, inputs, attrs)
        # A lowered op's enums and arrays were checked where they were lowered
        # (here they are an index and a tensor); its other attributes are the
        # spec's values, which may size outputs.
        checked = check_torch_call(op, inputs, attrs, lowered, requested)
        first = next(x for x in inputs if x is not None)
        made = [None if o.alias or shape is None else first.new_empty(shape, dtype=torch_dtype(d))
                for o, shape, d in zip(op.outputs, checked.output_shapes, checked.output_dtypes)]
        return schema_result(op, placeholders(op, checked, made, lambda dtype: first.new_empty((0,), dtype=dtype)))

    def xla(*args, **kwargs):
        inputs, attrs, requested = kernel_arguments(op, args, kwargs)
        require_tensors(op, inputs)
        checked = check_torch_call(op, inputs, lift(op, attrs) if op.torch_lowered else attrs, requested=requested)
        first = next(x for x in inputs if x is not None)
        return schema_result(op, placeholders(op, checked, xla_custom_call(checked, capsules),
                                              lambda dtype: first.new_empty((0,), dtype=dtype)))

    torch.library.register_fake(f"{namespace}::{kernel}", fake, lib=_library(namespace, "FRAGMENT"))
    if op.torch_lowered:
        def to_lowered(*args, **kwargs):
            inputs, attrs, requested = kernel_arguments(op, args, kwargs)
            if any(isinstance(x, torch.Tensor) and (x.device.type == "meta" or is_fake(x)) for x in inputs):
                # The lowered kernel's fake cannot read a lowered array's elements (a tensor's) nor
                # check their bounds, which the real kernel does: here, before lowering, the rules can.
                require_tensors(op, inputs)
                check_torch_call(op, inputs, attrs, requested=requested)
            return getattr(getattr(torch.ops, namespace), kernel)(
                *inputs, **lower(op, _spec.check_attrs(op, attrs)), **request_flags(op, requested))

        _library(namespace, "FRAGMENT").define(op.torch_schema)
        _library(namespace, "FRAGMENT").impl(op.name, to_lowered, "CompositeImplicitAutograd")
    if not op.aliased_outputs:
        # torch_xla's eager functionalization refuses custom ops that mutate an
        # input, so XLA tensors of such an op take call()'s own path instead.
        _library(namespace, "IMPL", "XLA").impl(kernel, xla)
    _torch_autograd.define_no_backward(namespace)
    if op.backward is not None:
        _torch_autograd.register_backward(op, _library(namespace, "FRAGMENT"))
    elif not op.differentiable and not op.aliased_outputs:
        _torch_autograd.register_constant(op, _library(namespace, "FRAGMENT"))
    _torch_sharding.register(op, getattr(getattr(torch.ops, namespace), kernel).default)
    DIRECT[op.name] = Direct(op)
    # Computed now, not on a first call under torch.compile, which cannot
    # trace cached_property's lock (Python 3.11).
    assert len(op.plain_attrs) == len(op.attrs)


_LIBRARIES: dict = {}


def _library(namespace: str, kind: str, key: str = "") -> torch.library.Library:
    if (namespace, kind, key) not in _LIBRARIES:
        _LIBRARIES[namespace, kind, key] = torch.library.Library(namespace, kind, key)
    return _LIBRARIES[namespace, kind, key]


def call(op: Op, inputs: Sequence, attrs: Mapping, capsules: Mapping, requests: Mapping | None = None):
    """The documented function of `op`: ``torch.ops.<ns>.<op>``, with the
    outputs in spec order (an output updated in place is its input tensor;
    an output on request that `requests` does not ask for is None: the
    kernels return it with no elements).

    Every call converts and checks its arguments once, in one order, before
    any route: the attributes (`kernel_attrs`), the outputs asked for
    (`_spec.asked_for`), then the inputs (`require_tensors`, in `route`; the
    direct route takes only inputs it can run and hands back any other, with
    the call). Then it takes one route: the direct one (`Direct.run`) where
    the call is plain eager, else the one `route` names (ROUTES)."""
    if op.attrs:
        attrs = kernel_attrs(op, attrs)
    requested = None
    if op.requested_outputs:
        requested = _spec.asked_for(op, requests or {})
        attrs = {**attrs, **request_flags(op, requested)}
    direct = DIRECT.get(op.name)
    result = NotImplemented if direct is None else direct.run(inputs, attrs)
    if result is NotImplemented:
        name = route(op, inputs)
        if requested is not None and name in DIFFERENTIATED and not op.saved_on_request <= requested:
            # Differentiated, the call makes the outputs on request that the
            # backward takes too (autograd saves them), and the caller gets
            # those it asked for.
            attrs = {**attrs, **request_flags(op, requested | op.saved_on_request)}
        values = ROUTES[name](op, inputs, attrs, capsules)
        result = values[0] if len(values) == 1 else tuple(values)
    if requested is None:
        return result
    return tuple(None if skip else v for v, skip in zip(result, unasked(op, requested)))


def route(op: Op, inputs: Sequence) -> str:
    """The route (a key of ROUTES) of a call that the direct route handed
    back, named once from its inputs, which it checks (`require_tensors`),
    and torch's state. A call that needs a gradient (grad mode on, an input
    that requires grad) takes an autograd route; forward-mode
    differentiation, which the ops have no formulas for, is refused."""
    require_tensors(op, inputs)
    if _torch_autograd.forward_mode(inputs):
        raise RuntimeError(_torch_autograd.forward_mode_message(op))
    if torch.is_grad_enabled():
        for x in inputs:
            if x is not None and x.requires_grad:
                # Under torchax the op's lowering runs above the Autograd key
                # and records the gradient itself (_torchax_runtime).
                if torch.compiler.is_compiling() or not is_torchax(x):
                    return "in place under autograd" if op.aliased_outputs else "autograd"
                return "torchax under autograd"
    return _outputs_route(op, inputs)


def _outputs_route(op: Op, inputs: Sequence) -> str:
    """The route that makes a call's outputs, gradients aside: the custom
    call itself for an op that updates inputs in place on XLA tensors
    (torch_xla's eager functionalization refuses such a custom op: register),
    torchax's lowering for torchax tensors (through the dispatcher), else the
    dispatcher."""
    first = next(x for x in inputs if x is not None)
    if op.aliased_outputs and first.device.type == "xla":
        return "torch_xla in place"
    if not torch.compiler.is_compiling() and is_torchax(first):
        return "torchax"
    return "dispatcher"


def _dispatcher(op: Op, inputs: Sequence, attrs: Mapping, capsules: Mapping) -> list:
    """The op through ``torch.ops.<ns>.<op>``, which every mode, transform,
    tracer and compiler sees as the op: its fake kernel (torch.compile,
    FakeTensor), its XLA kernel, torchax's lowering (_torchax_runtime), the
    C++ kernel (through the lowering to ``<op>__lowered``, and autograd's
    kernel, where the op has them). The outputs in spec order; an input
    updated in place has its version bumped, as a native in-place op's is."""
    made = fresh(getattr(getattr(torch.ops, op.torch_namespace), op.name)(*inputs, **attrs))
    if op.aliased_outputs and not torch.compiler.is_compiling():
        bump_versions(spec_order(op), inputs)
    return in_spec_order(spec_order(op), inputs, made)


def _xla_in_place(op: Op, inputs: Sequence, attrs: Mapping, capsules: Mapping) -> list:
    """An op that updates inputs in place, on XLA tensors: its custom call
    (`xla_custom_call`), whose updated tensors are copied into the inputs,
    as the op's contract is in place. The outputs in spec order."""
    spec_attrs, requested = split_requests(op, attrs)
    outs = xla_custom_call(check_torch_call(op, inputs, spec_attrs, requested=requested), capsules)
    for o, value in zip(op.outputs, outs):
        if o.alias and value is not None:
            inputs[[t.name for t in op.inputs].index(o.alias)].copy_(value)
    made = [value for o, value in zip(op.outputs, outs) if not o.alias]
    return in_spec_order(spec_order(op), inputs, made)


def _autograd(op: Op, inputs: Sequence, attrs: Mapping, capsules: Mapping) -> list:
    """An input needs a gradient: the dispatcher records the op's autograd
    formula (its backward op, or constants: _torch_autograd.register_backward,
    register_constant), or, for an op without a backward, the outputs'
    backward raises (`with_grad`)."""
    return _torch_autograd.with_grad(op, inputs, attrs, lambda inputs, attrs: _dispatcher(op, inputs, attrs, capsules),
                                     None, recorded=True)


def _in_place_autograd(op: Op, inputs: Sequence, attrs: Mapping, capsules: Mapping) -> list:
    """An input needs a gradient, and the op updates inputs in place, which
    has no schema output to attach a formula to (`with_grad`): an op with a
    backward runs out of place (its autograd.Function, IN_PLACE_FUNCTIONS)
    and its results are copied into the inputs; one declared not
    differentiable runs without autograd (constants); any other is refused.
    Where it runs, it takes the route that makes its outputs."""
    outputs = ROUTES[_outputs_route(op, inputs)]
    return _torch_autograd.with_grad(op, inputs, attrs, lambda inputs, attrs: outputs(op, inputs, attrs, capsules),
                                     _torch_autograd.IN_PLACE_FUNCTIONS.get(op.name), recorded=True)


# The routes of a call that the direct route (a plain eager call: _torch_direct)
# hands back, by the name `route` gives them: (op, inputs, attributes with the
# flags of the outputs on request, capsules) -> the outputs in spec order.
ROUTES = {
    "autograd": _autograd,
    "in place under autograd": _in_place_autograd,
    # torchax's environment runs the op's lowering, which records autograd itself.
    "torchax under autograd": _dispatcher,
    "torchax": _dispatcher,
    "torch_xla in place": _xla_in_place,
    "dispatcher": _dispatcher,  # torch.compile, FakeTensor, modes, transforms, tracers, the profiler, XLA
}
# The routes that differentiate the call (an output on request that the backward takes is made).
DIFFERENTIATED = frozenset({"autograd", "in place under autograd", "torchax under autograd"})
