"""Autograd for the generated ops in PyTorch: an op's backward op as its
autograd formula, the constant outputs of an op declared not differentiable,
the out-of-place run of an op that updates inputs in place when a gradient is
needed (with the in-place rule checked on the caller's tensors), and the
errors that name an op autograd cannot differentiate (no backward; second
derivatives through a backward op that has none). `with_grad` is what a
call that needs a gradient does, on tensors whose dispatcher records the
registered formulas (CPU, CUDA, XLA) and on torchax's, whose environment
runs the op's lowering above the Autograd key."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch.autograd import forward_ad as _forward_ad

from ._spec import Op, OpValueError
from ._torch_values import fresh, in_spec_order, lift, spec_order


def register_backward(op: Op, library: torch.library.Library) -> None:
    """The spec's backward op as the op's autograd formula
    (`_autograd_glue`). An op that updates an input in place has no outputs
    in its schema to attach it to: where a gradient is needed, `with_grad`
    runs such an op through its `out_of_place_function` instead."""
    if op.aliased_outputs:
        kernel = getattr(getattr(torch.ops, op.torch_namespace), op.name)
        IN_PLACE_FUNCTIONS[op.name] = out_of_place_function(op, kernel, _copies_for_update(op))
        return
    save, gradients = _autograd_glue(op)

    # torch passes keyword_only_inputs only to an op whose schema has some
    # (an op without attributes has none).
    def setup_context(ctx, inputs, output, keyword_only_inputs=None):
        attrs = dict(keyword_only_inputs or {})
        save(ctx, inputs[:len(op.inputs)], output if isinstance(output, tuple) else (output,),
             lift(op, attrs) if op.torch_lowered else attrs, attrs)

    def backward(ctx, *grads):
        return gradients(ctx, grads)

    torch.library.register_autograd(f"{op.torch_namespace}::{op.torch_kernel_name}", backward,
                                    setup_context=setup_context, lib=library)


def register_constant(op: Op, library: torch.library.Library) -> None:
    """The autograd formula of an op declared not differentiable: its outputs
    are constants (requires_grad False, no grad_fn) whatever its inputs, in
    eager mode, under torch.compile and opcheck alike. (An op that updates an
    input in place cannot have it, register_autograd taking functional schemas
    only: `call` runs it under torch.no_grad() instead.)"""
    def setup_context(ctx, inputs, output, keyword_only_inputs=None):
        outs = output if isinstance(output, tuple) else (output,)
        ctx.mark_non_differentiable(*[o for o in outs if o is not None])

    def backward(ctx, *grads):  # never called: no output carries a gradient
        return (None,) * len(op.inputs)

    torch.library.register_autograd(f"{op.torch_namespace}::{op.torch_kernel_name}", backward,
                                    setup_context=setup_context, lib=library)


def _autograd_glue(op: Op, back_kernel=None) -> tuple:
    """`op`'s autograd formula from its spec's backward op, as two functions:
    `save(ctx, inputs, outputs, attrs, flags)` keeps what the backward op takes of
    the forward's inputs and outputs (an output on request only where `flags`,
    the call's ``return_<name>`` keywords, asked for it: else the kernel
    returned it with no elements, and the backward op gets None), its
    attributes and which inputs were given, and marks the outputs it takes no
    gradient of non-differentiable;
    `gradients(ctx, grads)` runs the backward op (`back_kernel`, as its
    schema returns; by default ``torch.ops.<ns>.<backward op>``) and returns
    each forward input's gradient (None where it has none or was not given).
    An input the backward op updates in place gets a copy of its own:
    autograd's gradients may be shared, or broadcast views. By default both
    close over plain values only, so that torch.compile traces them inside an
    autograd.Function."""
    from . import _ops  # the package's descriptions (this module is copied into each package)

    back = getattr(_ops, op.backward.op).OP
    names, outputs = [t.name for t in op.inputs], [o.name for o in op.outputs]
    # (Whether a forward input, its index, the flag that asks for it: an output on request's.)
    flag_of = {t.name: t.request_param for t in op.requested_outputs}
    kept = tuple((kind == "input", names.index(n) if kind == "input" else outputs.index(n),
                  flag_of.get(n) if kind == "output" else None)
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
    scalars = tuple(k for k, t in enumerate(op.inputs) if t.scalar)

    def save(ctx, inputs, outs, attrs, flags):
        ctx.save_for_backward(*[inputs[k] if is_input else outs[k] if flag is None or flags.get(flag) else None
                                for is_input, k, flag in kept])
        ctx.attrs = {k: attrs[k] for k in back_attrs}
        ctx.given = tuple(t is not None for t in inputs)
        # A scalar input given as [1] gets its gradient as [1] (the backward
        # op makes it as the spec declares it, []), which autograd requires.
        ctx.as_one = tuple(k for k in scalars if inputs[k] is not None and inputs[k].dim() == 1)
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
        kernel = back_kernel or getattr(getattr(torch.ops, namespace), back_name)
        values = in_spec_order(back_order, args, fresh(kernel(*args, **ctx.attrs)))
        if (not back_differentiable and torch.is_grad_enabled()
                and any(isinstance(x, torch.Tensor) and x.requires_grad for x in args)):
            # create_graph=True: the gradients are differentiated in turn,
            # which needs the backward op's own backward. The bare kernel has
            # none, and torch would only warn and return wrong second
            # derivatives, so differentiating them raises instead.
            values = _refuse_second_derivative(namespace, op.name, back_name, values)
        out = [values[g] if g >= 0 and given else None for g, given in zip(gradient_at, ctx.given)]
        for k in ctx.as_one:
            if out[k] is not None:
                out[k] = out[k].reshape(1)
        return tuple(out)

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


def out_of_place_function(op: Op, kernel, copies, back_kernel=None) -> type:
    """An autograd.Function of an op with a backward that runs it out of
    place: `kernel(*inputs, **attrs)` runs the op (returning what its schema
    returns), on dense copies of the inputs it updates in place from
    `copies(inputs)` (which checks the in-place rule on the caller's
    tensors), and the Function returns every output in spec order, the
    updated copies among them; `with_grad` then copies those into the
    caller's tensors with `copy_`, which autograd records like any in-place
    update (views of one qkv tensor included: a Function that updates several
    views in place itself is refused by autograd). So differentiating costs
    one more read and write of the updated tensors; a call that needs no
    gradient runs in place as ever. Its backward runs the backward op,
    `back_kernel` (_autograd_glue). It takes the inputs, then the
    attributes' values in spec order, then the flags of the outputs on
    request."""
    save, gradients = _autograd_glue(op, back_kernel)
    order = spec_order(op)
    updated = sorted({k for k in order if k >= 0})
    # The keyword arguments it takes after the inputs: the attributes, then
    # the flags of the outputs on request.
    attr_names = tuple(a.name for a in op.attrs) + tuple(t.request_param for t in op.requested_outputs)
    n = len(op.inputs)

    class OutOfPlace(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            attrs = dict(zip(attr_names, args[n:]))
            inputs = list(args[:n])
            if updated:
                for k, copy in zip([k for k in updated if inputs[k] is not None], copies(inputs)):
                    inputs[k] = copy
            values = in_spec_order(order, inputs, fresh(kernel(*inputs, **attrs)))
            save(ctx, inputs, values, attrs, attrs)
            return tuple(values)

        @staticmethod
        def backward(ctx, *grads):
            return (*gradients(ctx, grads), *[None] * len(attr_names))

    OutOfPlace.__name__ = OutOfPlace.__qualname__ = f"{op.name}_out_of_place"
    return OutOfPlace


def with_grad(op: Op, inputs: Sequence, attrs: Mapping, run, function, recorded: bool) -> list:
    """A call of `op` of which an input needs a gradient, as autograd must
    see it; its outputs in spec order (an output updated in place is its
    input). `run(inputs, attrs)` runs the op and returns that; `attrs` holds
    every attribute and the flags of the outputs on request. `recorded`:
    whether torch's dispatcher records the op's registered autograd formula
    (`register_backward`, `register_constant`) when `run` calls it, as for
    CPU, CUDA and XLA tensors; torchax runs the op's lowering from a torch
    function mode, above the Autograd key, where nothing is recorded.
    `function`: the op's `out_of_place_function` (an op with a backward that
    updates inputs in place, or whose formula is not recorded).

    An op with a backward gets its gradients from the backward op; one
    declared not differentiable gives constants; for one without a backward
    the outputs' backward raises an error that names it, and an in-place
    update, which cannot even be recorded, raises at once."""
    if op.backward is not None and (op.aliased_outputs or not recorded):
        keywords = [attrs[a.name] for a in op.attrs] + [attrs[t.request_param] for t in op.requested_outputs]
        values = list(function.apply(*inputs, *keywords))
        for i, k in enumerate(spec_order(op)):
            if k >= 0 and values[i] is not None:
                values[i] = write_back(inputs[k], values[i])
        return values
    if not op.differentiable and op.aliased_outputs:
        # Constants, as register_constant makes the other ops' outputs: the op
        # runs without autograd. An input it updates that is in a graph then
        # gets its new value once more through write_back, a copy_ of a
        # constant that autograd records, so that no gradient reaches the old
        # value through it (JAX's stop_gradient gives none either); without
        # that the tensor would keep the old value's history. A leaf that
        # requires grad is refused first, as torch refuses it for any in-place op.
        # (An input is updated by one output at most: docs/spec.md.)
        updated = [k for k in spec_order(op) if k >= 0 and inputs[k] is not None and inputs[k].requires_grad]
        for k in updated:
            if inputs[k].is_leaf:
                raise RuntimeError(f"{op.name}: input '{op.inputs[k].name}' is a leaf tensor that requires grad, "
                                   "which the op would update in place (torch refuses that for any in-place op); "
                                   "pass a copy of it, or call under torch.no_grad()")
        with torch.no_grad():
            values = run(inputs, attrs)
        for k in updated:
            write_back(inputs[k], inputs[k].detach().clone())
        return values
    if op.backward is not None or not op.differentiable:
        # The recorded formula; or constants (under torchax the lowering's
        # outputs are fresh tensors that need no gradient).
        return run(inputs, attrs)
    message = no_backward_message(op)
    if op.aliased_outputs:
        raise RuntimeError(message)
    values = run(inputs, attrs)
    # The inputs that need a gradient join the graph beside the outputs:
    # where nothing was recorded the outputs need none themselves.
    linked = [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]
    return list(NoBackward.apply(op.torch_namespace, message, len(values), *values, *linked))


def _copies_for_update(op: Op):
    """A custom op that checks the in-place rule on the caller's tensors and
    returns dense copies of the given inputs `op` updates in place, for
    running it out of place. A custom op, so that under torch.compile the
    rule runs on the real tensors each time the graph runs (tracing sees fake
    ones, whose addresses mean nothing)."""
    updated = sorted({k for k in spec_order(op) if k >= 0})

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


class NoBackward(torch.autograd.Function):
    """Passes the first `count` tensors (an op's outputs) through; their
    backward raises. The tensors after them (the op's inputs that need a
    gradient) only join them to the graph. Where no input requires grad
    nothing of this runs, so a call pays one check (an autograd kernel
    registered with torch would cost every call a Python frame).

    Under torch.compile the backward raises through an operator
    (``define_no_backward``), not a Python ``raise``: Dynamo traces the
    backward when it compiles the forward, and a raise it traces would refuse
    the call itself, where eager refuses only a backward pass."""

    @staticmethod
    def forward(ctx, namespace, message, count, *tensors):
        ctx.namespace, ctx.message, ctx.count = namespace, message, count
        ctx.save_for_backward(*tensors[count:])
        return tuple(o.view_as(o) for o in tensors[:count])

    @staticmethod
    def backward(ctx, *grads):
        if not torch.compiler.is_compiling():
            raise RuntimeError(ctx.message)
        linked = list(ctx.saved_tensors)
        # The error operator takes the incoming gradients (so that no partitioner moves it into the
        # forward, where it would run at the call) and makes the linked inputs' (so that no compiler
        # drops it as dead code).
        refused = getattr(torch.ops, ctx.namespace).no_backward(ctx.message, [g for g in grads if g is not None],
                                                                linked)
        return (None, None, None, *[None] * ctx.count, *refused)


_NO_BACKWARD_DEFINED: set = set()


def define_no_backward(namespace: str) -> None:
    """Defines ``<namespace>::no_backward(message, grads, like)``, the
    operator that NoBackward's backward runs under torch.compile: it raises
    RuntimeError(message) when it runs (its fake kernel, which a compiler
    traces, returns tensors like `like`)."""
    if namespace in _NO_BACKWARD_DEFINED:
        return
    _NO_BACKWARD_DEFINED.add(namespace)

    @torch.library.custom_op(f"{namespace}::no_backward", mutates_args=())
    def no_backward(message: str, grads: list[torch.Tensor], like: list[torch.Tensor]) -> list[torch.Tensor]:
        raise RuntimeError(message)

    @no_backward.register_fake
    def _(message, grads, like):
        return [torch.empty_like(x) for x in like]


def _refuse_second_derivative(namespace: str, op: str, back: str, values: list) -> list:
    """The backward op's results, whose own backward raises: what autograd
    records when gradients are computed with create_graph=True."""
    message = (f"{op}: second derivatives (create_graph=True, then differentiating the gradients) are not supported: "
               f"its gradients come from {back}, whose spec declares no backward")
    tensors = [k for k, v in enumerate(values) if isinstance(v, torch.Tensor) and v.is_floating_point()]
    wrapped = NoBackward.apply(namespace, message, len(tensors), *[values[k] for k in tensors])
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
