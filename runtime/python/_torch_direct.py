"""The direct route of a plain eager PyTorch call: the C++ kernel's overload
itself, for a call with no mode, subclass, compiler or gradient in the way."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from . import _spec
from ._spec import Op
from ._torch_values import fresh, in_spec_order, lower, request_flags, spec_order, split_requests


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_is_compiling = torch.compiler.is_compiling
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._len_torch_function_stack
_grad_enabled = torch.is_grad_enabled
_functorch_layers = torch._C._functorch.peek_interpreter_stack  # torch.func.vmap, grad, ...


class Direct:
    """The direct route of `call` for a plain eager call: the C++ kernel's
    overload itself, below the Python autograd formula (no input needs a
    gradient), with an op's lowered attributes computed once per distinct
    value. It skips what only tracing, autograd, tensor subclasses and modes
    need (the op's Python layers: the lowering to ``<op>__lowered``,
    torch.library's autograd kernel), and runs the same kernel, which checks
    the call as ever. `plain` says whether a call may take it."""

    def __init__(self, op: Op):
        self.op = op
        # The overload's C++ callable (OpOverload.__call__ is a Python frame around it).
        self.kernel = getattr(getattr(torch.ops, op.torch_namespace), op.torch_kernel).default._op
        # The kernel has torch.library's Python autograd kernel where the spec
        # has a backward or says the op is not differentiable, and nothing is
        # updated in place (_register_backward, _register_constant).
        self.below_autograd = (op.backward is not None or not op.differentiable) and not op.aliased_outputs
        self.required = tuple(not t.optional for t in op.inputs)
        self.order = spec_order(op) if op.aliased_outputs else None
        self.single = len(op.outputs) == 1
        self.lowered: dict = {}  # attributes (as a hashable key) -> what the lowered kernel takes

    def plain(self, inputs: Sequence) -> bool:
        """Whether the call is eager on plain CPU or CUDA tensors of which none
        needs a gradient, with no mode, subclass or compiler in the way. (It
        runs on every call, so it reads only cheap attributes.)"""
        if _is_compiling() or _dispatch_modes() or _function_modes() or _functorch_layers() is not None:
            return False
        grad = _grad_enabled()
        for x, required in zip(inputs, self.required):
            if x is None:
                if required:
                    return False  # the slow path says so
            elif x.__class__ not in _PLAIN_TENSORS or not (x.is_cpu or x.is_cuda) or (grad and x.requires_grad):
                return False
        return True

    def __call__(self, inputs: Sequence, attrs: Mapping):
        op = self.op
        if op.torch_lowered:
            attrs = self.lower(attrs)
        if self.below_autograd:
            with torch._C._AutoDispatchBelowAutograd():
                result = self.kernel(*inputs, **attrs)
        else:
            result = self.kernel(*inputs, **attrs)
        if self.order is None:
            return result
        values = in_spec_order(self.order, inputs, fresh(result))
        return values[0] if self.single else tuple(values)

    def lower(self, attrs: Mapping) -> dict:
        key = _spec.attrs_key(attrs)  # None where a value is unhashable: checked and lowered every time
        hit = None if key is None else self.lowered.get(key)
        if hit is None:
            # The flags of the outputs on request pass as they are.
            spec_attrs, requested = split_requests(self.op, attrs)
            hit = {**lower(self.op, _spec.check_attrs(self.op, spec_attrs)), **request_flags(self.op, requested)}
            if key is not None and len(self.lowered) < 64:
                self.lowered[key] = hit
        return hit


DIRECT: dict = {}  # op name -> its Direct route (registered ops)
