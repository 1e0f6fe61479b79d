"""The PyTorch side of every generated op (hand-written, op-independent).

Loads the stable-ABI kernel library (the CPU and CUDA kernels, registered in
C++), registers each op's Python kernels from its description
(``_ops/<op>.py``): the fake (meta) kernel, the XLA kernel and, where the C++
kernels take lowered attributes, the op with the spec's schema. Every one of
them checks the call with ``_spec.check``. It also drives torch_xla:
registration of the legacy custom-call targets where the runtime supports it,
and the plain answer where it does not.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Mapping, Sequence

import torch
from torch._subclasses.fake_tensor import is_fake

from . import _opaque, _spec, _torch_sharding
from ._spec import Op, OpTypeError, OpValueError
from ._thread_flag import ThreadFlag

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


def _require(condition, message) -> None:
    # Sizes may be symbolic under torch.compile: torch._check records the
    # condition as a guard (or a run-time assertion) instead of failing.
    torch._check(condition, message)


def check(op: Op, inputs: Sequence, attrs: Mapping, unchecked: Sequence = ()) -> _spec.Call:
    """``_spec.check`` for torch tensors."""
    for t, x in zip(op.inputs, inputs):
        if x is not None and not isinstance(x, torch.Tensor):
            raise OpTypeError(f"{op.name}: input '{t.name}' must be a torch.Tensor, not {type(x).__name__}")
    return _spec.check(op, inputs, attrs, hint="torch", dtype_name=_dtype_name, require=_require,
                       unchecked=unchecked)


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


def _lift(op: Op, attrs: Mapping) -> dict:
    """The spec's attribute values from what the lowered kernel takes (an enum
    as its index, an array as a 1-D CPU tensor)."""
    out = dict(attrs)
    for a in op.attrs:
        if a.name not in attrs:
            continue
        v = attrs[a.name]
        if a.type == "enum":
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < len(a.values):
                raise OpValueError(f"{op.name}: attribute '{a.name}' has index {v}; it has {len(a.values)} values "
                                   f"({', '.join(a.values)})")
            out[a.name] = a.values[v]
        elif a.is_array:
            want = torch.int32 if a.type == "i32[]" else torch.int64
            if not isinstance(v, torch.Tensor) or v.dim() != 1 or v.dtype != want or v.device.type != "cpu":
                raise OpValueError(f"{op.name}: attribute '{a.name}' must arrive as a contiguous 1-D CPU tensor of "
                                   f"{str(want).removeprefix('torch.')} (call the op with a list of ints)")
            out[a.name] = v.tolist()
    return out


def _lower(op: Op, attrs: Mapping) -> dict:
    """What the lowered kernel takes for checked attribute values."""
    out = {}
    for a in op.attrs:
        v = attrs[a.name]
        if a.type == "enum":
            out[a.name] = a.values.index(v)
        elif a.is_array:
            out[a.name] = torch.tensor(v, dtype=torch.int32 if a.type == "i32[]" else torch.int64)
        else:
            out[a.name] = v
    return out


def split_arguments(op: Op, args: Sequence, kwargs: Mapping) -> tuple:
    """A kernel's arguments as (inputs, attributes): torch leaves out trailing
    optional inputs that are None, and may pass inputs by name."""
    inputs = list(args) + [None] * (len(op.inputs) - len(args))
    attrs = dict(kwargs)
    for i, t in enumerate(op.inputs):
        if t.name in attrs:
            inputs[i] = attrs.pop(t.name)
    return inputs, attrs


def schema_result(op: Op, values: Sequence):
    """The schema's return value: the outputs that alias no input."""
    fresh = [v for o, v in zip(op.outputs, values) if not o.alias]
    return None if not fresh else fresh[0] if len(fresh) == 1 else tuple(fresh)


def register(op: Op, capsules: Mapping) -> None:
    """Registers `op`'s Python kernels: the fake (meta) kernel, the XLA kernel
    and, for an op whose C++ kernels take lowered attributes, the op itself
    with the spec's schema, lowered to them (CompositeImplicitAutograd)."""
    namespace = op.torch_namespace
    kernel = op.torch_kernel
    lowered = tuple(a.name for a in op.attrs if a.type == "enum" or a.is_array) if op.torch_lowered else ()

    def fake(*args, **kwargs):
        inputs, attrs = split_arguments(op, args, kwargs)
        _check_devices(op, inputs, attrs)
        # A lowered op's enums and arrays were checked where they were lowered
        # (here they are an index and a tensor); its other attributes are the
        # spec's values, which may size outputs.
        checked = check(op, inputs, attrs, lowered)
        first = next(x for x in inputs if x is not None)
        return schema_result(op, [None if o.alias else first.new_empty(shape, dtype=_DTYPES[d])
                           for o, shape, d in zip(op.outputs, checked.output_shapes, checked.output_dtypes)])

    def xla(*args, **kwargs):
        inputs, attrs = split_arguments(op, args, kwargs)
        checked = check(op, inputs, _lift(op, attrs) if op.torch_lowered else attrs)
        return schema_result(op, xla_custom_call(checked, capsules))

    torch.library.register_fake(f"{namespace}::{kernel}", fake, lib=_library(namespace, "FRAGMENT"))
    if op.torch_lowered:
        def lower(*args, **kwargs):
            inputs, attrs = split_arguments(op, args, kwargs)
            lowered = _lower(op, _spec.check_attrs(op, attrs))
            return getattr(getattr(torch.ops, namespace), kernel)(*inputs, **lowered)

        _library(namespace, "FRAGMENT").define(op.torch_schema)
        _library(namespace, "FRAGMENT").impl(op.name, lower, "CompositeImplicitAutograd")
    if not op.aliased_outputs:
        # torch_xla's eager functionalization refuses custom ops that mutate an
        # input, so XLA tensors of such an op take call()'s own path instead.
        _library(namespace, "IMPL", "XLA").impl(kernel, xla)
    if op.backward is not None:
        _register_backward(op)
    elif not op.differentiable and not op.aliased_outputs:
        _register_constant(op)
    _torch_sharding.register(op, getattr(getattr(torch.ops, namespace), kernel).default)
    _DIRECT[op.name] = _Direct(op)


def _register_backward(op: Op) -> None:
    """The spec's backward op as the op's autograd formula
    (`_autograd_glue`). An op that updates an input in place has no outputs
    in its schema to attach it to: where a gradient is needed, `call` runs
    such an op through `_in_place_function(op)` instead."""
    if op.aliased_outputs:
        _OPS[op.name] = op
        _IN_PLACE_FUNCTIONS[op.name] = _in_place_function(op)
        return
    save, gradients = _autograd_glue(op)

    # torch passes keyword_only_inputs only to an op whose schema has some
    # (an op without attributes has none).
    def setup_context(ctx, inputs, output, keyword_only_inputs=None):
        attrs = dict(keyword_only_inputs or {})
        save(ctx, inputs[:len(op.inputs)], output if isinstance(output, tuple) else (output,),
             _lift(op, attrs) if op.torch_lowered else attrs)

    def backward(ctx, *grads):
        return gradients(ctx, grads)

    torch.library.register_autograd(f"{op.torch_namespace}::{op.torch_kernel}", backward,
                                    setup_context=setup_context, lib=_library(op.torch_namespace, "FRAGMENT"))


def _register_constant(op: Op) -> None:
    """The autograd formula of an op declared not differentiable: its outputs
    are constants (requires_grad False, no grad_fn) whatever its inputs, in
    eager mode, under torch.compile and opcheck alike. (An op that updates an
    input in place has no outputs in its schema to mark: `call` runs it under
    torch.no_grad() instead.)"""
    def setup_context(ctx, inputs, output, keyword_only_inputs=None):
        outs = output if isinstance(output, tuple) else (output,)
        ctx.mark_non_differentiable(*[o for o in outs if o is not None])

    def backward(ctx, *grads):  # never called: no output carries a gradient
        return (None,) * len(op.inputs)

    torch.library.register_autograd(f"{op.torch_namespace}::{op.torch_kernel}", backward,
                                    setup_context=setup_context, lib=_library(op.torch_namespace, "FRAGMENT"))


def _autograd_glue(op: Op) -> tuple:
    """`op`'s autograd formula from its spec's backward op, as two functions:
    `save(ctx, inputs, outputs, attrs)` keeps what the backward op takes of
    the forward's inputs and outputs, its attributes and which inputs were
    given, and marks the outputs it takes no gradient of non-differentiable;
    `gradients(ctx, grads)` runs the backward op and returns each forward
    input's gradient (None where it has none or was not given). An input the
    backward op updates in place gets a copy of its own: autograd's
    gradients may be shared, or broadcast views. Both close over plain values
    only, so that torch.compile traces them inside an autograd.Function."""
    from . import _ops  # the package's descriptions (this module is copied into each package)

    back = getattr(_ops, op.backward.op).OP
    names, outputs = [t.name for t in op.inputs], [o.name for o in op.outputs]
    kept = tuple((kind == "input", names.index(n) if kind == "input" else outputs.index(n))
                 for kind, n in op.backward.inputs if kind != "cotangent")
    takes_cotangent = {n for kind, n in op.backward.inputs if kind == "cotangent"}
    non_differentiable = tuple(k for k, n in enumerate(outputs) if n not in takes_cotangent)
    updated = {o.alias for o in back.outputs if o.alias}
    back_args = tuple((kind == "cotangent", outputs.index(n) if kind == "cotangent" else -1, t.name in updated, t)
                      for (kind, n), t in zip(op.backward.inputs, back.inputs))
    namespace, back_name = op.torch_namespace, back.name  # looked up when used: it may register later
    back_attrs = tuple(a.name for a in back.attrs)
    back_differentiable = back.backward is not None  # its kernel then has an autograd formula of its own
    back_order = _spec_order(back)
    back_outputs = [o.name for o in back.outputs]
    gradient_of = {into: back_outputs.index(out) for out, into in op.backward.gradients}
    gradient_at = tuple(gradient_of.get(n, -1) for n in names)

    def save(ctx, inputs, outs, attrs):
        ctx.save_for_backward(*[inputs[k] if is_input else outs[k] for is_input, k in kept])
        ctx.attrs = {k: attrs[k] for k in back_attrs}
        ctx.given = tuple(t is not None for t in inputs)
        ctx.mark_non_differentiable(*[outs[k] for k in non_differentiable if outs[k] is not None])

    def gradients(ctx, grads):
        saved = list(ctx.saved_tensors)
        args = []
        for is_cotangent, k, copy, t in back_args:
            value = grads[k] if is_cotangent else saved.pop(0)
            if copy and value is not None:
                value = value.clone(memory_format=torch.contiguous_format)
            elif is_cotangent and value is not None and not _takes_strides(t, value):
                value = value.contiguous()
            args.append(value)
        back_kernel = getattr(getattr(torch.ops, namespace), back_name)
        values = _in_spec_order(back_order, args, _fresh(back_kernel(*args, **ctx.attrs)))
        if (not back_differentiable and torch.is_grad_enabled()
                and any(isinstance(x, torch.Tensor) and x.requires_grad for x in args)):
            # create_graph=True: the gradients are differentiated in turn,
            # which needs the backward op's own backward. The bare kernel has
            # none, and torch would only warn and return wrong second
            # derivatives, so differentiating them raises instead.
            values = _refuse_second_derivative(op.name, back_name, values)
        return tuple(values[g] if g >= 0 and given else None for g, given in zip(gradient_at, ctx.given))

    return save, gradients


def _takes_strides(t, x: torch.Tensor) -> bool:
    """Whether input `t` of a backward op takes `x` with its strides as they
    are (docs/spec.md, "Input layouts"). Autograd hands a gradient in whatever
    strides the loss produced (a transpose of an output, a broadcast sum), which
    may not be the layout the op declares; such a gradient is made
    contiguous rather than refused."""
    if t.layout == "contiguous":
        return x.is_contiguous()
    sizes, strides = x.shape, x.stride()
    if t.layout == "rows" and x.dim() > 0 and sizes[-1] > 1 and strides[-1] != 1:
        return False
    # The leading (batch) dimensions must fold into one stride.
    inner = None
    for k in reversed(range(x.dim() - len(t.shape) if t.batch else 0)):
        if sizes[k] == 1:
            continue
        if inner is not None and strides[k] != strides[inner] * sizes[inner]:
            return False
        inner = k
    return True


def _spec_order(op: Op) -> tuple:
    """For each output of `op`: the index of the input it updates in place, or -1."""
    names = [t.name for t in op.inputs]
    return tuple(names.index(o.alias) if o.alias else -1 for o in op.outputs)


def _fresh(result) -> list:
    """The outputs in a schema's result: those that alias no input."""
    return [] if result is None else list(result) if isinstance(result, tuple) else [result]


def _in_spec_order(order: tuple, inputs: Sequence, fresh: list) -> list:
    """An op's outputs in spec order (`_spec_order`), from the outputs that
    alias no input: an output updated in place is its input."""
    fresh = list(reversed(fresh))
    return [inputs[k] if k >= 0 else fresh.pop() for k in order]


_IN_PLACE_FUNCTIONS: dict = {}  # op name -> its autograd.Function (ops that update inputs in place)
_OPS: dict = {}  # op name -> its description, for those Functions


def _in_place_function(op: Op) -> type:
    """An autograd.Function for an op that updates inputs in place and has a
    backward. It runs the op out of place, on copies of the inputs it
    updates, and returns the updated copies; `call` then copies them into
    the caller's tensors with `copy_`, which autograd records like any
    in-place update (views of one qkv tensor included: a Function that
    updates several views in place itself is refused by autograd). So
    differentiating costs one more read and write of the updated tensors; a
    call that needs no gradient runs in place as ever. It takes the inputs,
    then the attributes' values in spec order."""
    save, gradients = _autograd_glue(op)
    kernel = getattr(getattr(torch.ops, op.torch_namespace), op.name)
    order = _spec_order(op)
    updated = sorted({k for k in order if k >= 0})
    copies = _copies_for_update(op, updated)
    name = op.name  # torch.compile traces forward: its closure holds plain values only
    attr_names = tuple(a.name for a in op.attrs)
    n = len(op.inputs)

    class OutOfPlace(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            attrs = dict(zip(attr_names, args[n:]))
            inputs = list(args[:n])
            if not torch.compiler.is_compiling() and _torchax_tensors(inputs):
                made = _torchax_copies(name, inputs, updated)  # no custom op runs on torchax tensors
            else:
                made = copies(inputs)
            for k, copy in zip([k for k in updated if inputs[k] is not None], made):
                inputs[k] = copy
            values = _in_spec_order(order, inputs, _fresh(kernel(*inputs, **attrs)))
            save(ctx, inputs, values, attrs)
            return tuple(values)

        @staticmethod
        def backward(ctx, *grads):
            return (*gradients(ctx, grads), *[None] * len(attr_names))

    OutOfPlace.__name__ = OutOfPlace.__qualname__ = f"{op.name}_out_of_place"
    return OutOfPlace


def _copies_for_update(op: Op, updated: Sequence[int]):
    """A custom op that checks the in-place rule on the caller's tensors and
    returns dense copies of the given inputs among `updated`, for running
    `op` out of place. A custom op, so that under torch.compile the rule
    runs on the real tensors each time the graph runs (tracing sees fake
    ones, whose addresses mean nothing)."""

    @torch.library.custom_op(f"{op.torch_namespace}::{op.name}__copies_for_update", mutates_args=())
    def copies(inputs: list[torch.Tensor | None]) -> list[torch.Tensor]:
        _check_in_place(op, inputs)
        return [inputs[k].clone(memory_format=torch.contiguous_format) for k in updated if inputs[k] is not None]

    @copies.register_fake
    def _(inputs):
        return [torch.empty_like(inputs[k], memory_format=torch.contiguous_format)
                for k in updated if inputs[k] is not None]

    # The operator, which torch.compile traces as one (not the Python object).
    return getattr(getattr(torch.ops, op.torch_namespace), f"{op.name}__copies_for_update").default


def _write_back(target: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """`target.copy_(value)`, an in-place update of the caller's tensor that
    autograd records. A view is written through a fresh view of its base:
    autograd refuses an update of a view made before its base joined the
    graph (as the first of two updated views of one tensor makes it), and it
    regenerates the caller's view from the base when the view is next used."""
    base = target._base
    if base is None or torch.compiler.is_compiling():  # dynamo traces no storage_offset()
        return target.copy_(value)
    base.as_strided(target.size(), target.stride(), target.storage_offset()).copy_(value)
    return target


def _torchax_copies(name: str, inputs: Sequence, updated: Sequence[int]) -> list:
    """What `_copies_for_update` makes, for torchax tensors: the rule, then copies."""
    from . import _torchax_runtime

    _torchax_runtime.check_in_place(_OPS[name], inputs)
    return [inputs[k].clone() for k in updated if inputs[k] is not None]


def _torchax_tensors(inputs: Sequence) -> bool:
    from . import _torchax_runtime

    for x in inputs:
        if x is not None and _torchax_runtime.is_torchax(x):
            return True
    return False


class _NoBackward(torch.autograd.Function):
    """Passes an op's outputs through; their backward raises. Where no input
    requires grad nothing of this runs, so a call pays one check (an autograd
    kernel registered with torch would cost every call a Python frame)."""

    @staticmethod
    def forward(ctx, message, *outputs):
        ctx.message = message
        return tuple(o.view_as(o) for o in outputs)

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(ctx.message)


def _refuse_second_derivative(op: str, back: str, values: list) -> list:
    """The backward op's results, whose own backward raises: what autograd
    records when gradients are computed with create_graph=True."""
    message = (f"{op}: second derivatives (create_graph=True, then differentiating the gradients) are not supported: "
               f"its gradients come from {back}, whose spec declares no backward")
    tensors = [k for k, v in enumerate(values) if isinstance(v, torch.Tensor) and v.is_floating_point()]
    wrapped = _NoBackward.apply(message, *[values[k] for k in tensors])
    out = list(values)
    for k, v in zip(tensors, wrapped):
        out[k] = v
    return out


def _no_backward_message(op: Op) -> str:
    return (f"{op.name} has no backward (its spec declares none), so autograd cannot differentiate through it; "
            "call it under torch.no_grad() or on tensors that do not require grad")


_LIBRARIES: dict = {}


def _library(namespace: str, kind: str, key: str = "") -> torch.library.Library:
    if (namespace, kind, key) not in _LIBRARIES:
        _LIBRARIES[namespace, kind, key] = torch.library.Library(namespace, kind, key)
    return _LIBRARIES[namespace, kind, key]


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_is_compiling = torch.compiler.is_compiling
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._len_torch_function_stack
_grad_enabled = torch.is_grad_enabled
_functorch_layers = torch._C._functorch.peek_interpreter_stack  # torch.func.vmap, grad, ...


class _Direct:
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
        self.order = _spec_order(op) if op.aliased_outputs else None
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
        values = _in_spec_order(self.order, inputs, _fresh(result))
        return values[0] if self.single else tuple(values)

    def lower(self, attrs: Mapping) -> dict:
        key = _spec.attrs_key(attrs)  # None where a value is unhashable: checked and lowered every time
        hit = None if key is None else self.lowered.get(key)
        if hit is None:
            hit = _lower(self.op, _spec.check_attrs(self.op, attrs))
            if key is not None and len(self.lowered) < 64:
                self.lowered[key] = hit
        return hit


_DIRECT: dict = {}  # op name -> its _Direct route (registered ops)


def call(op: Op, inputs: Sequence, attrs: Mapping, capsules: Mapping):
    """The documented function of `op`: ``torch.ops.<ns>.<op>``, with the
    outputs in spec order (an output updated in place is its input tensor)."""
    direct = _DIRECT.get(op.name)
    if direct is not None and direct.plain(inputs):
        return direct(inputs, attrs)
    for t, x in zip(op.inputs, inputs):
        if x is None and not t.optional:
            raise OpTypeError(f"{op.name}: input '{t.name}' is required, not None")
        if x is not None and not isinstance(x, torch.Tensor):
            raise OpTypeError(f"{op.name}: input '{t.name}' must be a torch.Tensor, not {type(x).__name__}")
    # An op whose spec declares no backward: an error under autograd that
    # names it, never torch's warning and a gradient of None. An in-place
    # update cannot even be recorded, so that call raises at once.
    needs_grad = False
    if torch.is_grad_enabled():
        for x in inputs:
            if x is not None and x.requires_grad:
                needs_grad = True
                break
    if needs_grad and op.backward is not None and op.aliased_outputs:
        # The op runs on copies (the C++ kernel's in-place rule would see no
        # overlap there), and the same rule is checked on the caller's tensors
        # as they are copied.
        values = list(_IN_PLACE_FUNCTIONS[op.name].apply(*inputs, *[attrs[a.name] for a in op.attrs]))
        for i, k in enumerate(_spec_order(op)):
            if k >= 0 and values[i] is not None:
                values[i] = _write_back(inputs[k], values[i])
        return values[0] if len(values) == 1 else tuple(values)
    if needs_grad and not op.differentiable and op.aliased_outputs:
        with torch.no_grad():  # constants, as _register_constant makes the other ops' outputs
            return call(op, inputs, attrs, capsules)
    needs_grad = needs_grad and op.backward is None and op.differentiable
    if needs_grad and op.aliased_outputs:
        raise RuntimeError(_no_backward_message(op))
    if op.aliased_outputs and inputs[0].device.type == "xla":
        checked = check(op, inputs, attrs)
        outs = xla_custom_call(checked, capsules)
        for o, value in zip(op.outputs, outs):
            if o.alias and value is not None:
                # The custom call returns the updated tensor; the op's contract is in place.
                inputs[[t.name for t in op.inputs].index(o.alias)].copy_(value)
        fresh = [value for o, value in zip(op.outputs, outs) if not o.alias]
    else:
        fresh = _fresh(getattr(getattr(torch.ops, op.torch_namespace), op.name)(*inputs, **attrs))
    if needs_grad and fresh:
        fresh = list(_NoBackward.apply(_no_backward_message(op), *fresh))
    values = _in_spec_order(_spec_order(op), inputs, fresh)
    return values[0] if len(values) == 1 else tuple(values)


def _check_in_place(op: Op, inputs: Sequence) -> None:
    """The torch kernels' rule for an input updated in place (its elements do
    not overlap; it shares no memory with another input), asked of the
    package's own C++ (opgen/footprint.h) with the tensors' addresses.
    (torchax tensors have none: _torchax_runtime.check_in_place.)"""
    from . import _C  # the package's extension (this module is copied into each package)

    names = [t.name for t in op.inputs]
    extents = [None if x is None else (x.data_ptr(), list(x.shape), list(x.stride()), x.element_size())
               for x in inputs]
    for o in op.aliased_outputs:
        message = _C.in_place_conflict(op.name, names, extents, names.index(o.alias))
        if message is not None:
            raise OpValueError(message)


_DTYPES = {
    "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
    "float64": torch.float64, "int32": torch.int32, "int64": torch.int64,
    "uint8": torch.uint8, "bool": torch.bool, "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
}


# --- torch_xla ----------------------------------------------------------------------------------

_xla_lock = threading.Lock()
_xla_registration: dict[str, str | None] = {}  # target -> None (registered) or why not
_graph_only = ThreadFlag()


def xla_graph_only() -> contextlib.AbstractContextManager[None]:
    """Lets ops on XLA tensors build their custom call even where its target
    cannot be registered (torch_xla 2.9, XLA:CPU), so the graph can be
    inspected or exported; executing that graph still fails."""
    return _graph_only.on()


def _torch_xla_device_type() -> str:
    import torch_xla.runtime as xr

    return xr.device_type()


def register_xla_target(target: str, capsules: Mapping[str, Mapping[int, Mapping[str, object]]],
                        api_version: int) -> str | None:
    """Registers `target`'s CUDA legacy capsule with torch_xla once; returns
    None on success, else the reason it cannot run."""
    with _xla_lock:
        if target in _xla_registration:
            return _xla_registration[target]
        reason = None
        import torch_xla

        device = _torch_xla_device_type()
        capsule = capsules.get("cuda", {}).get(api_version, {}).get(target)
        if device != "CUDA":
            reason = (
                f"torch_xla runs on {device} here, and torch_xla registers custom-call targets only "
                f"for CUDA (XLA:CPU accepts none through it)"
            )
        elif capsule is None:
            reason = "the package was built without CUDA, so it has no GPU target to register"
        else:
            try:
                torch_xla._XLAC._xla_register_custom_call_target(target, capsule, "CUDA")
            except Exception as e:  # torch_xla 2.9 raises "not implemented": XLA:CUDA was removed
                reason = (
                    f"torch_xla {torch_xla.__version__} refused to register it "
                    f"({type(e).__name__}: {e}); torch_xla 2.5-2.8 with CUDA can run it"
                )
        _xla_registration[target] = reason
        return reason


def xla_custom_call(checked: _spec.Call, capsules) -> list:
    """The custom call of a checked call on XLA tensors, through the op's first
    legacy api_version (torch_xla passes attributes only in the opaque
    backend_config); every output, in spec order."""
    import torch_xla

    op = checked.op
    legacy = [v for v in op.api_versions if v != 4]
    if not legacy:
        raise NotImplementedError(
            f"{op.name}: torch_xla passes attributes only through a legacy custom call's opaque "
            "backend_config, and the spec lists no legacy api_version (1, 2 or 3)")
    api_version = legacy[0]
    target = op.legacy_target(api_version)
    reason = register_xla_target(target, capsules, api_version)
    if reason is not None and not _graph_only:
        raise RuntimeError(
            f"{op.name} cannot execute on XLA tensors here: {reason}. To build the graph anyway (to "
            f"inspect or export its HLO), call it inside opgen's xla_graph_only() context."
        )
    # The results: the outputs (less those left out with the optional input
    # they update), then the workspaces, dropped here.
    shapes = [s for s in checked.output_shapes if s is not None]
    dtypes = [d for d in checked.output_dtypes if d is not None]
    outs = list(torch_xla._XLAC._xla_custom_call(
        checked.operands, target, [list(s) for s in shapes + list(checked.workspace_shapes)],
        [_DTYPES[d] for d in dtypes + list(checked.workspace_dtypes)], False,
        _opaque.encode(op, **_opaque.fields_of(checked)), api_version, {},
    )[:len(shapes)])
    return [outs.pop(0) if s is not None else None for s in checked.output_shapes]
