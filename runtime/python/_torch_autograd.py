"""Autograd for the generated ops in PyTorch: an op's backward op as its
autograd formula, the constant outputs of an op declared not differentiable,
the out-of-place run of an op that updates inputs in place when a gradient is
needed (with the in-place rule checked on the caller's tensors), and the
errors that name an op autograd cannot differentiate (no backward; second
derivatives through a backward op that has none)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.autograd import forward_ad as _forward_ad

from ._spec import Op, OpValueError
from ._torch_values import fresh, in_spec_order, lift, spec_order


def register_backward(op: Op, library: torch.library.Library) -> None:
    """The spec's backward op as the op's autograd formula
    (`_autograd_glue`). An op that updates an input in place has no outputs
    in its schema to attach it to: where a gradient is needed, `call` runs
    such an op through `_in_place_function(op)` instead."""
    if op.aliased_outputs:
        _OPS[op.name] = op
        IN_PLACE_FUNCTIONS[op.name] = _in_place_function(op)
        return
    save, gradients = _autograd_glue(op)

    # torch passes keyword_only_inputs only to an op whose schema has some
    # (an op without attributes has none).
    def setup_context(ctx, inputs, output, keyword_only_inputs=None):
        attrs = dict(keyword_only_inputs or {})
        save(ctx, inputs[:len(op.inputs)], output if isinstance(output, tuple) else (output,),
             lift(op, attrs) if op.torch_lowered else attrs)

    def backward(ctx, *grads):
        return gradients(ctx, grads)

    torch.library.register_autograd(f"{op.torch_namespace}::{op.torch_kernel}", backward,
                                    setup_context=setup_context, lib=library)


def register_constant(op: Op, library: torch.library.Library) -> None:
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
                                    setup_context=setup_context, lib=library)


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
    back_order = spec_order(back)
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
            elif is_cotangent and value is not None and not takes_strides(t, value):
                value = value.contiguous()
            args.append(value)
        back_kernel = getattr(getattr(torch.ops, namespace), back_name)
        values = in_spec_order(back_order, args, fresh(back_kernel(*args, **ctx.attrs)))
        if (not back_differentiable and torch.is_grad_enabled()
                and any(isinstance(x, torch.Tensor) and x.requires_grad for x in args)):
            # create_graph=True: the gradients are differentiated in turn,
            # which needs the backward op's own backward. The bare kernel has
            # none, and torch would only warn and return wrong second
            # derivatives, so differentiating them raises instead.
            values = _refuse_second_derivative(op.name, back_name, values)
        return tuple(values[g] if g >= 0 and given else None for g, given in zip(gradient_at, ctx.given))

    return save, gradients


def takes_strides(t, x: torch.Tensor) -> bool:
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


IN_PLACE_FUNCTIONS: dict = {}  # op name -> its autograd.Function (ops that update inputs in place)
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
    then the attributes' values in spec order, then the flags of the outputs
    on request."""
    save, gradients = _autograd_glue(op)
    kernel = getattr(getattr(torch.ops, op.torch_namespace), op.name)
    order = spec_order(op)
    updated = sorted({k for k in order if k >= 0})
    copies = _copies_for_update(op, updated)
    name = op.name  # torch.compile traces forward: its closure holds plain values only
    # The keyword arguments it takes after the inputs: the attributes, then
    # the flags of the outputs on request.
    attr_names = tuple(a.name for a in op.attrs) + tuple(t.request_param for t in op.requested_outputs)
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
            values = in_spec_order(order, inputs, fresh(kernel(*inputs, **attrs)))
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
        check_in_place(op, inputs)
        return [inputs[k].clone(memory_format=torch.contiguous_format) for k in updated if inputs[k] is not None]

    @copies.register_fake
    def _(inputs):
        return [torch.empty_like(inputs[k], memory_format=torch.contiguous_format)
                for k in updated if inputs[k] is not None]

    # The operator, which torch.compile traces as one (not the Python object).
    return getattr(getattr(torch.ops, op.torch_namespace), f"{op.name}__copies_for_update").default


def write_back(target: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
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


class NoBackward(torch.autograd.Function):
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
    wrapped = NoBackward.apply(message, *[values[k] for k in tensors])
    out = list(values)
    for k, v in zip(tensors, wrapped):
        out[k] = v
    return out


def forward_mode(inputs: Sequence) -> bool:
    """Whether forward-mode differentiation goes through the call: a
    torch.func.jvp transform (jacfwd, hessian) on the stack, or an input that
    is a dual tensor of torch.autograd.forward_ad. The ops have reverse-mode
    formulas only, and torch would carry their results on with a zero tangent
    (under jvp) or none (dual tensors): a wrong derivative, silently."""
    if torch.compiler.is_compiling():
        return False  # the compiler's tracer cannot read functorch's stack (a graph break)
    if torch._C._functorch.peek_interpreter_stack() is not None:
        # Under functorch's transforms (whose jvp opens a dual level of its
        # own) the inputs are its wrappers, which unpack_dual cannot read.
        from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

        return any(i.key() == torch._C._functorch.TransformType.Jvp for i in retrieve_all_functorch_interpreters())
    if _forward_ad._current_level >= 0:  # a dual level is open
        for x in inputs:
            if isinstance(x, torch.Tensor) and _forward_ad.unpack_dual(x).tangent is not None:
                return True
    return False


def forward_mode_message(op: Op) -> str:
    return (f"{op.name}: forward-mode derivatives (torch.func.jvp, jacfwd, hessian, torch.autograd.forward_ad) are "
            "not supported: opgen's ops have reverse-mode gradients only"
            + (" (from the spec's backward op); use torch.func.vjp, jacrev or torch.autograd.grad"
               if op.backward is not None else f", and {op.name}'s spec declares no backward"))


def no_backward_message(op: Op) -> str:
    return (f"{op.name} has no backward (its spec declares none), so autograd cannot differentiate through it; "
            "call it under torch.no_grad() or on tensors that do not require grad")


def check_in_place(op: Op, inputs: Sequence) -> None:
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
