"""The PyTorch side of every generated op (hand-written, op-independent): loads
the stable-ABI kernel library (the CPU and CUDA kernels, registered in C++),
registers each op's Python kernels from its description (``_ops/<op>.py``):
the fake (meta) kernel, the XLA kernel and, where the C++ kernels take lowered
attributes, the op with the spec's schema, each checking the call with
``_spec.check``; and runs the documented function of each op (`call`). Beside
it, by job: _torch_values (values between spec and kernels), _torch_autograd,
_torch_direct (the plain eager route), _torch_xla and _torch_sharding.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import torch
from torch._subclasses.fake_tensor import is_fake

from . import _spec, _torch_autograd, _torch_sharding
from ._spec import Op, OpTypeError, OpValueError
from ._torch_direct import DIRECT, Direct, bump_versions
from ._torch_values import (fresh, in_spec_order, kernel_attrs, lift, lower, placeholders, request_flags,
                             schema_result, spec_order, split_arguments, split_requests, torch_dtype, unasked)
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


def require_tensors(op: Op, inputs: Sequence) -> None:
    """Each given input a torch.Tensor."""
    for t, x in zip(op.inputs, inputs):
        if x is not None and not isinstance(x, torch.Tensor):
            raise OpTypeError(f"{op.name}: input '{t.name}' must be a torch.Tensor, not {type(x).__name__}")


def check(op: Op, inputs: Sequence, attrs: Mapping, unchecked: Sequence = (), requested=()) -> _spec.Call:
    """``_spec.check`` for torch tensors."""
    require_tensors(op, inputs)
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
    kernel = op.torch_kernel
    lowered = tuple(a.name for a in op.attrs if a.type == "enum" or a.is_array) if op.torch_lowered else ()

    def fake(*args, **kwargs):
        inputs, attrs = split_arguments(op, args, kwargs)
        attrs, requested = split_requests(op, attrs)
        _check_devices(op, inputs, attrs)
        # A lowered op's enums and arrays were checked where they were lowered
        # (here they are an index and a tensor); its other attributes are the
        # spec's values, which may size outputs.
        checked = check(op, inputs, attrs, lowered, requested)
        first = next(x for x in inputs if x is not None)
        made = [None if o.alias or shape is None else first.new_empty(shape, dtype=torch_dtype(d))
                for o, shape, d in zip(op.outputs, checked.output_shapes, checked.output_dtypes)]
        return schema_result(op, placeholders(op, checked, made, lambda dtype: first.new_empty((0,), dtype=dtype)))

    def xla(*args, **kwargs):
        inputs, attrs = split_arguments(op, args, kwargs)
        attrs, requested = split_requests(op, attrs)
        checked = check(op, inputs, lift(op, attrs) if op.torch_lowered else attrs, requested=requested)
        first = next(x for x in inputs if x is not None)
        return schema_result(op, placeholders(op, checked, xla_custom_call(checked, capsules),
                                              lambda dtype: first.new_empty((0,), dtype=dtype)))

    torch.library.register_fake(f"{namespace}::{kernel}", fake, lib=_library(namespace, "FRAGMENT"))
    if op.torch_lowered:
        def to_lowered(*args, **kwargs):
            inputs, attrs = split_arguments(op, args, kwargs)
            attrs, requested = split_requests(op, attrs)
            if any(isinstance(x, torch.Tensor) and (x.device.type == "meta" or is_fake(x)) for x in inputs):
                # The lowered kernel's fake cannot read a lowered array's elements (a tensor's) nor
                # check their bounds, which the real kernel does: here, before lowering, the rules can.
                check(op, inputs, attrs, requested=requested)
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
    kernels return it with no elements)."""
    if op.attrs:
        attrs = kernel_attrs(op, attrs)
    if not op.requested_outputs:
        # The direct route, here rather than in _call: one Python frame less
        # for a plain eager call (bench/bench_torch_calls.py).
        direct = DIRECT.get(op.name)
        if direct is not None:
            result = direct.run(inputs, attrs)
            if result is not NotImplemented:
                return result
        return _call(op, inputs, attrs, capsules)
    requested = _spec.requested_outputs(op, requests or {})
    made = requested
    if not op.saved_on_request <= requested and torch.is_grad_enabled() and any(
            isinstance(x, torch.Tensor) and x.requires_grad for x in inputs):
        # Differentiated, the call makes the outputs on request that the
        # backward takes too (autograd saves them), and the caller gets those
        # it asked for.
        made = requested | op.saved_on_request
    values = _call(op, inputs, {**attrs, **request_flags(op, made)}, capsules)
    return tuple(None if skip else v for v, skip in zip(values, unasked(op, requested)))


def _call(op: Op, inputs: Sequence, attrs: Mapping, capsules: Mapping):
    """`call`, with `attrs` holding the flags of the outputs on request."""
    direct = DIRECT.get(op.name)
    if direct is not None:
        result = direct.run(inputs, attrs)
        if result is not NotImplemented:
            return result
    _spec.require_inputs(op, inputs)
    require_tensors(op, inputs)
    if _torch_autograd.forward_mode(inputs):
        raise RuntimeError(_torch_autograd.forward_mode_message(op))
    if torch.is_grad_enabled():
        for x in inputs:
            if x is not None and x.requires_grad:
                # Under torchax the op's lowering runs above the Autograd key
                # and records the gradient itself (_torchax_runtime).
                if torch.compiler.is_compiling() or not is_torchax(x):
                    values = _torch_autograd.with_grad(
                        op, inputs, attrs, lambda inputs, attrs: _run(op, inputs, attrs, capsules),
                        _torch_autograd.IN_PLACE_FUNCTIONS.get(op.name), recorded=True)
                    return values[0] if len(values) == 1 else tuple(values)
                break
    values = _run(op, inputs, attrs, capsules)
    return values[0] if len(values) == 1 else tuple(values)


def _run(op: Op, inputs: Sequence, attrs: Mapping, capsules: Mapping) -> list:
    """The op through ``torch.ops.<ns>.<op>`` (its XLA custom call, for an op
    that updates inputs in place on XLA tensors): the outputs in spec order."""
    if op.aliased_outputs and inputs[0].device.type == "xla":
        spec_attrs, requested = split_requests(op, attrs)
        checked = check(op, inputs, spec_attrs, requested=requested)
        outs = xla_custom_call(checked, capsules)
        for o, value in zip(op.outputs, outs):
            if o.alias and value is not None:
                # The custom call returns the updated tensor; the op's contract is in place.
                inputs[[t.name for t in op.inputs].index(o.alias)].copy_(value)
        made = [value for o, value in zip(op.outputs, outs) if not o.alias]
    else:
        made = fresh(getattr(getattr(torch.ops, op.torch_namespace), op.name)(*inputs, **attrs))
        if op.aliased_outputs and not torch.compiler.is_compiling():
            bump_versions(spec_order(op), inputs)
    return in_spec_order(spec_order(op), inputs, made)
