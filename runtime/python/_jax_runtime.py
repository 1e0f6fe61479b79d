"""The JAX side of every generated op (hand-written, op-independent).

The generated module ``<package>.jax`` registers the custom-call targets here
and gives each op a function whose body is one call of ``call``: the op's
description (``_ops/<op>.py``) and the arguments go in, every rule of the spec
is checked at trace time (``_spec.check``), and the custom call comes out,
through the typed FFI (api_version 4) or a legacy version with its opaque
descriptor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from . import _jax_partitioning as _partitioning
from . import _opaque, _spec
from ._spec import Op, OpTypeError, OpValueError

_JAX_PLATFORM = {"cpu": "cpu", "cuda": "CUDA"}

# The numpy scalar type of each scalar attribute type: the exact C type the
# typed-FFI handler binds.
_SCALAR_TYPES = {"bool": np.bool_, "i32": np.int32, "i64": np.int64, "f32": np.float32, "f64": np.float64}


def register_targets(targets: Mapping[str, Mapping[int, Mapping[str, object]]]) -> None:
    """Registers every capsule of ``_C.targets()`` with JAX.

    api_version 4 handlers are typed-FFI targets (JAX's ``api_version=1``);
    legacy shims are registered with JAX's ``api_version=0``.
    """
    for platform, versions in targets.items():
        for api_version, names in versions.items():
            for name, capsule in names.items():
                jax.ffi.register_ffi_target(
                    name, capsule, platform=_JAX_PLATFORM[platform], api_version=1 if api_version == 4 else 0)
                _TARGETS.add(name)


_TARGETS: set = set()  # the names register_targets gave JAX


def export_checks() -> list:
    """What ``jax.export.export(..., disabled_checks=...)`` needs for a program
    with this package's ops: a ``DisabledSafetyCheck.custom_call`` for each of
    its custom-call targets (jax.export refuses a custom call it does not
    know to be stable; these are, for the package build that made them). The
    process that runs the exported program must import ``<package>.jax``
    first, which registers the targets."""
    from jax import export

    return [export.DisabledSafetyCheck.custom_call(name) for name in sorted(_TARGETS)]


def _as_array(x):
    """Input `x` as JAX hands it to the custom call, so that the checks see the
    dtype the call gets: an array or tracer (or None) as it is; anything else
    as JAX converts every function's arguments (jit's boundary,
    ``jnp.asarray``), where JAX converts it: without ``jax_enable_x64`` a
    float64 numpy array or Python float is float32, an int64 one int32
    (``jax.dtypes.canonicalize_dtype``). opgen itself casts nothing; an eager
    call and a jitted one, and a numpy constant in a traced call, meet the
    same checks."""
    if x is None or isinstance(x, (jax.Array, jax.core.Tracer)):
        return x
    if not (hasattr(x, "dtype") and hasattr(x, "shape")):
        x = np.asarray(x)
    if isinstance(x, (np.ndarray, np.generic)) and jax.dtypes.canonicalize_dtype(x.dtype) != x.dtype:
        return jnp.asarray(x)
    return x


def check_api_version(op: Op, api_version) -> int:
    if type(api_version) is not int:  # noqa: E721 (bool and float are not versions)
        raise OpTypeError(f"{op.name}: api_version must be an int, one of "
                          f"{', '.join(str(v) for v in op.api_versions)}; not {api_version!r}")
    if api_version not in op.api_versions:
        raise OpValueError(f"{op.name}: api_version {api_version!r} is not built for this op; its spec lists "
                           f"{', '.join(str(v) for v in op.api_versions)}")
    return api_version


def call(op: Op, inputs: Sequence, attrs: Mapping, api_version: int, requests: Mapping | None = None):
    """The op applied to ``inputs`` (one per input of the spec, None for an
    absent optional input) with ``attrs``, as an XLA custom call; ``requests``
    maps each output on request to whether the caller asks for it (its
    ``return_<name>`` keyword)."""
    api_version = check_api_version(op, api_version)
    requested = _spec.asked_for(op, requests or {})
    inputs = [_as_array(x) for x in inputs]
    # Before the eager path, which leaves an absent input out of the jitted
    # function's operands (a required one would come back absent, and again).
    _spec.require_inputs(op, inputs)
    if not any(isinstance(x, jax.core.Tracer) for x in inputs):
        eager = _eager_function(op, inputs, attrs, api_version, requested)
        if eager is not None:
            return eager(*[x for x in inputs if x is not None])
    for name, value in attrs.items():
        if isinstance(value, jax.core.Tracer):
            raise OpTypeError(f"{op.name}: attribute '{name}' must be a Python value, not a traced array "
                              "(attributes are compile-time constants of the custom call)")
    # A scalar input given as [1] (as vLLM passes its scales) enters the
    # custom call as [] (a reshape in the traced call: no copy, no host
    # sync), so that the custom call, its sharding rule, vmap and the
    # gradients see the shape the spec declares; an output that updates it
    # is given back as [1].
    as_one = {t.name for t, x in zip(op.inputs, inputs) if t.scalar and x is not None and np.shape(x) == (1,)}
    if as_one:
        inputs = [jnp.reshape(x, ()) if t.name in as_one else x for t, x in zip(op.inputs, inputs)]
    checked = _spec.check(op, inputs, attrs, hint="jax", requested=requested)
    # The call's results: the outputs, less those left out with the optional
    # input they update and those on request that the caller did not ask for.
    kept = [shape is not None for shape in checked.output_shapes]
    given = [t.name for t in checked.operand_inputs]
    # Differentiated, the call also makes the outputs on request that the
    # backward takes (custom_vjp's fwd runs this call; the primal-only path
    # runs the caller's).
    saved = op.saved_on_request - requested
    saving = _spec.check(op, inputs, attrs, hint="jax", requested=requested | saved) if saved else checked
    f = _derivative(op, checked, given, api_version, _forward(checked, api_version), saving,
                    _forward(saving, api_version) if saved else None)
    out = list(f(*checked.operands))
    out = [out.pop(0) if k else None for k in kept]
    if as_one:
        out = [jnp.reshape(x, (1,)) if t.alias in as_one and x is not None else x for t, x in zip(op.outputs, out)]
    return out[0] if len(out) == 1 else tuple(out)


_EAGER: dict = {}  # (op, api_version, the given inputs, attributes) -> the call, jitted
_EAGER_LIMIT = 512  # distinct attribute values are rare; past this, calls are traced each time


def _eager_function(op: Op, inputs: Sequence, attrs: Mapping, api_version: int, requested: frozenset):
    """An eager call (no input is a tracer) as a jitted function of the given
    inputs, made once per op, api_version, given inputs and attribute values,
    so that JAX's own cache holds its executable: tracing the call anew
    (the checks, custom_vjp, custom_partitioning, ffi_call) costs
    milliseconds, which every eager call paid. None where the attributes
    are not hashable (the call is traced as ever)."""
    given = tuple(x is not None for x in inputs)
    attrs_key = _spec.attrs_key(attrs)
    if attrs_key is None:
        return None
    key = (op.name, op.package, api_version, given, attrs_key, requested)
    f = _EAGER.get(key)
    if f is None:
        def traced(*operands):
            it = iter(operands)
            return call(op, [next(it) if g else None for g in given], attrs, api_version,
                        {name: True for name in requested})

        f = jax.jit(traced)
        if len(_EAGER) < _EAGER_LIMIT:
            _EAGER[key] = f
    return f


def _custom_call(checked: _spec.Call, api_version: int):
    """The custom call of a checked call: a function of its operands that
    returns the outputs it makes (those left out with their optional input
    are not among them)."""
    op = checked.op
    kept = [shape is not None for shape in checked.output_shapes]
    results = [jax.ShapeDtypeStruct(shape, jnp.dtype(dtype))
               for shape, dtype, k in zip(checked.output_shapes, checked.output_dtypes, kept) if k]
    # An output updated in place gets its input's buffer (XLA copies the input
    # first where the caller still needs it): operand and result indices.
    given = [t.name for t in checked.operand_inputs]
    outputs = [o for o, k in zip(op.outputs, kept) if k]
    aliases = {given.index(o.alias): i for i, o in enumerate(outputs) if o.alias}
    if api_version == 4:
        ffi_attrs = {a.name: _ffi_attr(op, a, checked.attrs[a.name]) for a in op.attrs}
        if op.optional_inputs:
            ffi_attrs["present_"] = np.int64(checked.present)
        if op.requested_outputs:
            ffi_attrs["requested_"] = np.int64(checked.requested_mask)

    def on(platform: str):
        # Workspaces are results that XLA plans like any other buffer (both
        # ABIs), dropped here: those the platform allocates.
        scratch = [jax.ShapeDtypeStruct(checked.workspace_shapes[i], jnp.dtype(checked.workspace_dtypes[i]))
                   for i in op.workspaces_on(platform)]
        if api_version == 4:
            custom_call = jax.ffi.ffi_call(op.ffi_target, results + scratch, vmap_method=op.vmap_method,
                                           input_output_aliases=aliases or None)
            return lambda *xs: tuple(custom_call(*xs, **ffi_attrs)[:len(results)])
        custom_call = jax.ffi.ffi_call(
            op.legacy_target(api_version),
            results + scratch,
            # The descriptor fixes the sizes at trace time, so vmap must not
            # add dimensions behind it: legacy calls always map sequentially.
            vmap_method="sequential",
            custom_call_api_version=api_version,
            input_output_aliases=aliases or None,
            legacy_backend_config=_opaque.encode(op, **_opaque.fields_of(checked)),
        )
        return lambda *xs: tuple(custom_call(*xs)[:len(results)])

    if all(len(op.workspaces_on(p)) == len(op.workspaces) for p in op.platforms):
        return on(op.platforms[0])
    # A workspace some platform does not allocate: each platform's lowering
    # gets its own results (XLA lowers only the branch of the platform it
    # compiles for). Under jit, so that the branch is the platform the call
    # is compiled for: outside one (an eager jax.vmap, which maps a
    # sequential custom call through scan) platform_dependent would take the
    # default backend's branch, the CUDA one for CPU arrays on a GPU machine.
    branches = {platform: on(platform) for platform in op.platforms}
    return jax.jit(lambda *xs: jax.lax.platform_dependent(*xs, **branches))


def _forward(checked: _spec.Call, api_version: int):
    """The custom call of a checked call, partitioned where it partitions."""
    op = checked.op
    f = _custom_call(checked, api_version)
    if _partitioning.partitions(op, checked.operands):
        f = _partitioning.partitioned(op, checked, f,
                                      lambda *local: _custom_call(checked.with_operands(local), api_version)(*local))
    return f


def _derivative(op: Op, checked: _spec.Call, given: Sequence[str], api_version: int, f,
                saving: _spec.Call | None = None, f_saving=None):
    """`f` (the custom call over the given inputs' operands) with the op's
    differentiation rule: the spec's backward op, constant outputs (an op
    declared not differentiable), or a refusal. `f_saving`: the call that
    `saving` checked, which also makes the outputs on request that the
    backward takes (None: `f` makes all it can)."""
    if not op.differentiable:
        return _constant(f)
    if op.backward is None:
        return _without_derivative(op, f)
    return _with_backward(op, checked, given, api_version, f, saving or checked, f_saving or f)


def _constant(f):
    """`f` whose outputs are constants under differentiation: the gradient
    stops at its operands, so jax.grad, jvp and vjp give the inputs zero
    cotangents and the custom call itself is never differentiated.
    stop_gradient rather than a custom_jvp with zero tangents: it is an
    identity to jit, vmap and the partitioner (applied to the operands outside
    the partitioned call, it leaves the call and its sharding rule as they
    are), and it needs no zero tangent of each output's dtype (float0 for the
    integer indices)."""
    return lambda *xs: f(*[jax.lax.stop_gradient(x) for x in xs])


def _with_backward(op: Op, checked: _spec.Call, given: Sequence[str], api_version: int, f,
                   saving: _spec.Call, f_saving):
    """jax.custom_vjp: the residuals are the operands and outputs (what the
    backward op is given is a selection of them); the backward op runs on the
    outputs' cotangents and each of its outputs is the gradient of one input.
    An output the backward takes no cotangent of must not be differentiated
    through (symbolic zeros tell). fwd runs `f_saving` (`saving`'s call),
    which also makes the outputs on request the backward takes, and returns
    `f`'s outputs (the caller's)."""
    from . import _ops  # the package's descriptions (this module is copied into each package)

    back = getattr(_ops, op.backward.op).OP
    back_version = api_version if api_version in back.api_versions else back.api_versions[0]
    back_attrs = {a.name: checked.attrs[a.name] for a in back.attrs}
    # The outputs `f` returns: those left out with their optional input are not among them.
    outputs = [o.name for o, shape in zip(op.outputs, checked.output_shapes) if shape is not None]
    made = [o.name for o, shape in zip(op.outputs, saving.output_shapes) if shape is not None]  # f_saving's
    primal = [made.index(name) for name in outputs]
    takes_cotangent = {name for kind, name in op.backward.inputs if kind == "cotangent"}
    gradient_of = {into: out for out, into in op.backward.gradients}
    back_outputs = [o.name for o in back.outputs]
    g = jax.custom_vjp(f)

    # Differentiating the gradients differentiates the forward call in fwd
    # too, which has no rule of its own (custom_partitioning's error would
    # name neither op).
    once = _refusing_derivative(f_saving, f"{op.name}: JAX differentiates it once; second derivatives (jax.grad "
                                          f"of jax.grad, jax.hessian, jax.jvp of its gradient) are not supported")

    def fwd(*xs):
        xs = [x.value for x in xs]  # symbolic_zeros=True wraps the primals
        outs = tuple(once(*xs))
        return tuple(outs[k] for k in primal), (xs, outs)

    def bwd(residuals, cotangents):
        xs, outs = residuals  # outs: f_saving's (`made`)
        for name, ct in zip(outputs, cotangents):
            if name not in takes_cotangent and not isinstance(ct, jax.custom_derivatives.SymbolicZero):
                raise OpTypeError(f"{op.name}: output '{name}' is not differentiable: the spec's backward "
                                  f"({op.backward.op}) takes no grad({name}); stop the gradient at it")
        args = []
        for kind, name in op.backward.inputs:
            if kind == "cotangent" and name not in outputs:
                args.append(None)  # the output of an optional input not given
            elif kind == "cotangent":
                ct = cotangents[outputs.index(name)]
                zero = isinstance(ct, jax.custom_derivatives.SymbolicZero)
                args.append(jnp.zeros_like(outs[made.index(name)]) if zero else ct)
            elif kind == "input":
                args.append(xs[given.index(name)] if name in given else None)
            else:  # an output (one on request that was not made: None, which the backward op recomputes)
                args.append(outs[made.index(name)] if name in made else None)
        args += [None] * (len(back.inputs) - len(args))  # trailing optional inputs left out
        grads = call(back, args, back_attrs, back_version)
        grads = grads if isinstance(grads, tuple) else (grads,)
        return tuple(_partitioning.sharded_like(grads[back_outputs.index(gradient_of[name])], x)
                     if name in gradient_of else None for name, x in zip(given, xs))

    g.defvjp(fwd, bwd, symbolic_zeros=True)
    return g


def _without_derivative(op: Op, f):
    """`f` (the custom call) with a differentiation rule that refuses: an op
    whose spec declares no backward is an error under jax.grad or jax.jvp that
    names it, where ffi_call alone would say only that ffi_call has none."""
    return _refusing_derivative(f, f"{op.name} has no backward (its spec declares none), so jax.grad and jax.jvp "
                                   "cannot differentiate through it; stop the gradient before it "
                                   "(jax.lax.stop_gradient) if none is needed")


def _refusing_derivative(f, message: str):
    """`f` with a differentiation rule that raises `message`."""
    g = jax.custom_jvp(f)

    def refuse(primals, tangents):
        raise OpTypeError(message)

    g.defjvp(refuse)
    return g


def _ffi_attr(op: Op, a: _spec.Attr, value):
    if a.type == "enum":
        return value
    if a.type == "dtype":  # as its code, which the descriptor carries too
        return np.int32(op.opaque.codes[value])
    if a.is_array:
        return np.asarray(value, dtype=np.int32 if a.type == "i32[]" else np.int64)
    return _SCALAR_TYPES[a.type](value)
