"""torchax lowerings of every generated op (hand-written, op-independent).

torchax runs PyTorch programs through JAX: each torch op on a torchax tensor
is looked up in torchax's table of lowerings, JAX functions over the tensors'
arrays. The lowering of an opgen op is the op's own JAX wrapper (the typed-FFI
custom call, checked against the op's description), so under torchax's eager
mode, ``torchax.compile`` and ``jax.jit`` the program holds the same custom
call as a JAX program would. An output the spec updates in place is written
back into its input tensor (or the view it is), as the torch schema's
``Tensor(a!)`` promises. torchax calls a lowering from its torch function
mode, before torch's Autograd key: where an input needs a gradient, the
lowering records the op's autograd itself (`_lowering`).

The lowerings are registered when torchax is imported, before or after the
package's ``torch`` module; opgen never imports torchax itself. An
environment made before the registration (other than torchax's default one)
does not have them: make it after importing the package's ``torch`` module.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from . import _spec, _torch_autograd
from ._spec import Op, OpTypeError, OpValueError
from ._torch_values import kernel_arguments, request_flags, schema_result, split_requests, unasked


def register_when_imported(ops: Sequence[Op], package: str) -> None:
    """Registers the torchax lowering of each op in `ops` now if torchax is
    imported, else once it is."""
    if "torchax" in sys.modules:
        _register(ops, package, existing_env=True)
    else:
        sys.meta_path.insert(0, _AfterImport("torchax", lambda: _register(ops, package, existing_env=False)))


def _register(ops: Sequence[Op], package: str, existing_env: bool) -> None:
    import torchax
    from torchax.ops import ops_registry

    jax_wrappers = importlib.import_module(f"{package}.jax")
    lowerings: dict = {}
    for op in ops:
        packet = getattr(getattr(torch.ops, op.torch_namespace), op.name)
        lowering = _lowering(op, getattr(jax_wrappers, op.name), lowerings)
        lowerings[op.name] = lowering
        # A torch-level lowering (is_jax_function=False) that sees views as
        # views (is_view_op=True), so that an in-place output reaches the
        # tensor the caller holds. torchax finds the overloads of a packet.
        ops_registry.register_torch_dispatch_op(packet, lowering, is_jax_function=False, is_user_defined=True,
                                                is_view_op=True)
        if existing_env:
            # An environment made before the registration copied the table then.
            torchax.default_env().override_op_definition(packet, lowering, is_view_op=True)


def _lowering(op: Op, jax_wrapper: Callable, lowerings: Mapping) -> Callable:
    """The op's torchax lowering: its JAX wrapper on the tensors' arrays.
    torchax's environment calls it from its torch function mode, before the
    dispatcher's Autograd key would record anything, so where an input
    needs a gradient the lowering records it itself, as the dispatcher and
    `call` do for other tensors (_torch_autograd.with_grad): the backward op
    (through its own lowering, from `lowerings`), constants, or the
    no-backward error."""
    from torchax import interop

    names = [t.name for t in op.inputs]

    def run(inputs: list, attrs: Mapping) -> list:
        """The outputs in spec order; an input updated in place is updated."""
        check_in_place(op, inputs)
        result = jax_wrapper(*[None if x is None else interop.jax_view(x) for x in inputs], **attrs)
        values = list(result) if len(op.outputs) > 1 else [result]
        for i, (o, value) in enumerate(zip(op.outputs, values)):
            if o.alias and value is not None:
                target = inputs[names.index(o.alias)]
                target.copy_(interop.torch_view(value))
                values[i] = target
        spec_attrs, requested = split_requests(op, attrs)
        skipped = unasked(op, requested)
        if any(skipped):
            # The schema returns an output on request that the call does not
            # ask for with no elements (the documented function makes it None).
            import jax.numpy as jnp

            checked = _spec.check(op, [None if x is None else interop.jax_view(x) for x in inputs], spec_attrs,
                                  requested=requested)
            values = [jnp.zeros((0,), checked.output_dtype(o)) if skip else v
                      for o, v, skip in zip(op.outputs, values, skipped)]
        return [v if o.alias or v is None else interop.torch_view(v) for o, v in zip(op.outputs, values)]

    def kernel(*inputs, **attrs):  # as the schema returns
        return schema_result(op, run(list(inputs), attrs))

    @functools.cache
    def function():
        """The op's out_of_place_function on torchax tensors (an op with a backward)."""
        def copies(inputs):  # the in-place rule, then copies (no custom op runs on torchax tensors)
            check_in_place(op, inputs)
            return [inputs[k].clone() for k in updated if inputs[k] is not None]

        updated = sorted({names.index(o.alias) for o in op.aliased_outputs})
        return _torch_autograd.out_of_place_function(op, kernel, copies, lowerings[op.backward.op])

    def lowering(*args, **kwargs):
        inputs, attrs, requested = kernel_arguments(op, args, kwargs)
        needs_grad = False
        for name, x in zip(names, inputs):
            if isinstance(x, torch.Tensor):
                if x.device.type != "jax":
                    raise OpTypeError(f"{op.name}: input '{name}' is a torch.Tensor on {x.device}, beside torchax "
                                      "tensors; under torchax every tensor of a call is a torchax tensor "
                                      "(move it with .to('jax'))")
                needs_grad = needs_grad or x.requires_grad
        if needs_grad and torch.is_grad_enabled():
            # Every attribute (the defaults too) and request flag, as the Function takes them.
            attrs = {**_spec.check_attrs(op, attrs), **request_flags(op, requested)}
            values = _torch_autograd.with_grad(op, inputs, attrs, run, function() if op.backward else None,
                                               recorded=False)
        else:
            values = run(inputs, {**attrs, **request_flags(op, requested)})
        return schema_result(op, values)

    lowering.__name__ = f"{op.name}_torchax_lowering"
    return lowering


def is_torchax(x) -> bool:
    """Whether `x` is a torchax tensor or a view of one."""
    return type(x).__module__.startswith("torchax.")


def check_in_place(op: Op, inputs: Sequence) -> None:
    """The torch kernels' rule for an input updated in place (its elements do
    not overlap; it shares no memory with another input; opgen/footprint.h)
    for torchax tensors, which have no addresses: each input is described to
    the same C++ rule by its offset and strides within the torchax tensor it
    views, and tensors of different roots lie far apart. Views of one qkv
    tensor pass; a key inside the query, a tensor passed twice, or an
    overlapping view do not."""
    from . import _C  # the package's extension (this module is copied into each package)

    if not op.aliased_outputs:
        return
    names = [t.name for t in op.inputs]
    roots: list = []
    extents = []
    updated = {names.index(o.alias) for o in op.aliased_outputs}
    for k, x in enumerate(inputs):
        if x is None:
            extents.append(None)
            continue
        root = _root(x)
        place = next((i for i, r in enumerate(roots) if r is root), None)
        if place is None:
            roots.append(root)
            place = len(roots) - 1
        layout = _layout_in_root(x, root)
        if layout is None:
            if k in updated:
                raise OpValueError(f"{op.name}: input '{names[k]}' is a torchax view whose elements no offset and "
                                   "strides describe, which the op cannot update in place; pass a tensor of its "
                                   f"own (e.g. {names[k]}.clone()) and copy the result back")
            layout = 0, [root.numel()], [1]  # conservatively all of its root
        offset, sizes, strides = layout
        itemsize = x.element_size()
        extents.append((((place + 1) << 48) + offset * itemsize, sizes, strides, itemsize))
    for k in sorted(updated):
        message = _C.in_place_conflict(op.name, names, extents, k)
        if message is not None:
            raise OpValueError(message)


def _root(x):
    from torchax.view import View

    while isinstance(x, View):
        x = x.parent
    return x


def _layout_in_root(x, root):
    """(offset, sizes, strides) of `x` in the elements of its root tensor, or
    None where its view is not strided (a reshape of a transposed view)."""
    import jax

    sizes = list(x.shape)
    if x is root:
        strides, n = [], 1
        for size in reversed(sizes):
            strides.insert(0, n)
            n *= size
        return 0, sizes, strides
    with jax.ensure_compile_time_eval():  # concrete even while torchax.compile traces
        index = np.arange(root.numel(), dtype=np.int64).reshape(tuple(root.shape))
        for view in x.get_transformation_chain():
            index = view.transform_tensor(jax.numpy.asarray(index))
        index = np.asarray(index)
    if index.size == 0:
        return 0, sizes, [0] * len(sizes)
    offset = int(index.flat[0])
    strides = [int(index[tuple(1 if j == k else 0 for j in range(len(sizes)))]) - offset if size > 1 else 0
               for k, size in enumerate(sizes)]
    grid = offset + sum(np.arange(size).reshape([-1 if j == k else 1 for j in range(len(sizes))]) * stride
                        for k, (size, stride) in enumerate(zip(sizes, strides)))
    if np.any(np.asarray(strides) < 0) or not np.array_equal(np.broadcast_to(grid, index.shape), index):
        return None
    return offset, sizes, strides


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `then` once the module `name` has been executed: finds the module
    with the other finders and wraps its loader. A probe that only finds the
    module (importlib.util.find_spec) executes nothing and leaves it in
    place; the import that executes the module removes it."""

    def __init__(self, name: str, then: Callable[[], None]):
        self.name, self.then, self.finding = name, then, False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name or self.finding:
            return None
        self.finding = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self.finding = False
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenLoader(spec.loader, self)
        return spec

    def executed(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        self.then()


class _ThenLoader(importlib.abc.Loader):
    def __init__(self, loader, hook: _AfterImport):
        self.loader, self.hook = loader, hook

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        self.hook.executed()

    def __getattr__(self, name):  # get_source (for tracebacks), get_resource_reader, ...
        return getattr(self.loader, name)
