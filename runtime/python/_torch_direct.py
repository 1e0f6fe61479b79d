"""The direct route of a plain eager PyTorch call, for a call with no mode,
subclass, compiler or gradient in the way: the package's eager route around
torch's dispatcher where torch has DLPack's exchange API (torch >= 2.10:
``_C.torch_eager``, opgen/torch_eager.h), else the C++ kernel's overload
itself. `_torch_runtime.call` tries it first; a call it hands back takes the
route `_torch_runtime.route` names (docs/architecture.md, "A PyTorch call's
route")."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence

import torch
from torch.autograd import forward_ad as _forward_ad  # an open dual level: route() refuses its dual tensors

from . import _spec
from ._spec import Op
from ._torch_values import fresh, in_spec_order, lower, request_flags, spec_order, split_requests


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
# Tensors of those types whose memory is not what they mean, which the eager
# route hands to the kernel's (DLPack describes the memory alone): a
# negative-bit view, a named one (the kernels refuse names; a torch without
# named tensors, 2.15 on, has no has_names). A zero tensor and a functional
# tensor (another tensor's wrapper) have no memory of their own, which the
# route checks itself.
_UNREAD = (torch.Tensor.is_neg,) + ((torch.Tensor.has_names,) if hasattr(torch.Tensor, "has_names") else ())
_is_compiling = torch.compiler.is_compiling
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._len_torch_function_stack
_grad_enabled = torch.is_grad_enabled
_functorch_layers = torch._C._functorch.peek_interpreter_stack  # torch.func.vmap, grad, ...
_profiling = torch._C._autograd._profiler_enabled  # the profiler records ops the dispatcher runs
# torch.jit.trace records ops the dispatcher runs (_is_tracing: a bool, at half
# the cost of _get_tracing_state's object)
_jit_tracing = torch._C._is_tracing
_increment_version = torch._C._increment_version


@functools.cache
def _eager_route_on() -> bool:
    """Whether the package's eager route is on (asked once: it hands the
    package's _C torch's exchange API): not with torch without DLPack's
    exchange API (before 2.10), a package built against such a torch, or
    OPGEN_TORCH_EAGER=0 in the environment."""
    if os.environ.get("OPGEN_TORCH_EAGER", "1") == "0":
        return False
    api = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    return api is not None and not _spec._compiled().torch_eager_api(api, _PLAIN_TENSORS, _UNREAD)


def _eager_runner(op: Op):
    """The op's runner of the package's eager route, or None where the route is off."""
    return _spec._compiled().torch_eager_op(op.name) if _eager_route_on() else None


def bump_versions(order: tuple, inputs: Sequence) -> None:
    """Tells autograd that the inputs an op updated in place changed, as a
    native in-place op does: a tensor saved for a gradient and then updated
    makes backward raise, instead of reading the new values."""
    # A sequence of tensors: given one tensor, torch would iterate over its rows.
    _increment_version([inputs[k] for k in order if k >= 0 and inputs[k] is not None])


class Direct:
    """The direct route of `call` for a plain eager call. Where the package's
    eager route is on, the call goes to it: the op's rules and body on the
    tensors themselves, around torch's dispatcher (no input needs a gradient,
    so no autograd node is due). Where it is off, or where it hands the call
    back (a value the rules refuse, a tensor DLPack cannot describe), the C++
    kernel's overload runs it, below the Python autograd formula, with an
    op's lowered attributes computed once per distinct value. Either skips
    what only tracing, autograd, tensor subclasses and modes need (the op's
    Python layers: the lowering to ``<op>__lowered``, torch.library's
    autograd kernel); the rules check the call as ever, and an input updated
    in place has its version bumped as a native in-place op's is. `run`
    takes a call, or hands it back where it is not plain (to
    `_torch_runtime.route`, which checks its inputs)."""

    def __init__(self, op: Op):
        self.op = op
        # The overload's C++ callable (OpOverload.__call__ is a Python frame around it).
        self.kernel = getattr(getattr(torch.ops, op.torch_namespace), op.torch_kernel_name).default._op
        # The kernel has torch.library's Python autograd kernel where the spec
        # has a backward or says the op is not differentiable, and nothing is
        # updated in place (_register_backward, _register_constant).
        self.below_autograd = (op.backward is not None or not op.differentiable) and not op.aliased_outputs
        self.required = tuple(not t.optional for t in op.inputs)
        self.order = spec_order(op) if op.aliased_outputs else None
        self.single = len(op.outputs) == 1
        self.lowered: dict = {}  # attributes (as a hashable key) -> what the lowered kernel takes
        self.eager = _eager_runner(op)
        self.torch_eager = _spec._compiled().torch_eager if self.eager is not None else None
        # The request mask's bit of each output on request, by its schema flag (return_<name>).
        self.request_bits = tuple((1 << i, t.request_param) for i, t in enumerate(op.requested_outputs))

    def run(self, inputs: Sequence, attrs: Mapping):
        """The call's result on this route, or NotImplemented where the call
        is not plain (then `_torch_runtime.route` names its route): eager, with no
        mode, compiler, transform, tracer, profiler or forward-mode dual level in the way (under
        torch.profiler the call takes the dispatcher's route, so that the
        trace names the op), on CPU or CUDA tensors (or Parameters) of which
        none needs a gradient. It runs on every call, so it reads only cheap
        state; the eager route checks the tensors themselves in C++."""
        if (_is_compiling() or _dispatch_modes() or _function_modes() or _functorch_layers() is not None
                or _profiling() or _jit_tracing() or _forward_ad._current_level >= 0):
            return NotImplemented
        result = NotImplemented
        if self.eager is not None:
            mask = 0
            for bit, flag in self.request_bits:
                if attrs.get(flag):
                    mask |= bit
            result = self.torch_eager(self.eager, tuple(inputs), attrs, mask, _grad_enabled())
        if result is NotImplemented:
            # The eager route is off, or took not the call: the kernel runs a
            # plain call or says why not; any other takes the full route.
            if not self.plain_tensors(inputs):
                return NotImplemented
            kernel_attrs = self.lower(attrs) if self.op.torch_lowered else attrs
            if self.below_autograd:
                with torch._C._AutoDispatchBelowAutograd():
                    result = self.kernel(*inputs, **kernel_attrs)
            else:
                result = self.kernel(*inputs, **kernel_attrs)
        if self.order is None:
            return result
        bump_versions(self.order, inputs)
        values = in_spec_order(self.order, inputs, fresh(result))
        return values[0] if self.single else tuple(values)

    def plain_tensors(self, inputs: Sequence) -> bool:
        """Whether each input is a plain CPU or CUDA tensor (or Parameter), of
        which none needs a gradient, and every required one is given."""
        grad = _grad_enabled()
        for x, required in zip(inputs, self.required):
            if x is None:
                if required:
                    return False  # handed back: require_tensors refuses it with opgen's words
            elif x.__class__ not in _PLAIN_TENSORS or not (x.is_cpu or x.is_cuda) or (grad and x.requires_grad):
                return False
        return True

    def lower(self, attrs: Mapping) -> dict:
        key = _spec.attrs_key(attrs)  # None where a value is unhashable: lowered every time
        hit = None if key is None else self.lowered.get(key)
        if hit is None:
            # The attributes arrive checked (the wrapper's kernel_attrs); the
            # flags of the outputs on request pass as they are.
            spec_attrs, requested = split_requests(self.op, attrs)
            hit = {**lower(self.op, spec_attrs), **request_flags(self.op, requested)}
            if key is not None and len(self.lowered) < 64:
                self.lowered[key] = hit
        return hit


DIRECT: dict = {}  # op name -> its Direct route (registered ops)
