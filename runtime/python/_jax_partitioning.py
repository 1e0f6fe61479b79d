"""How an op's custom call runs across devices under jax.jit (hand-written,
op-independent; the rule comes from the op's description).

An op runs on each device's shard with no communication along two kinds of
dimensions its spec names: the batch ('...', where ``batch_partitionable``:
every output has it) and each ``split`` (a set of shape symbols cut
together, such as attention's heads H with KVH). An input keeps the sharding
of those dimensions; every other dimension (a row's elements, a head's size)
and every input without them (a norm's weight, a block table) is whole on
each device. A split is cut only where its sizes divide by the devices and
each part is a valid call of the op (rotary's parts must hold whole heads;
attention's KVH a multiple of the devices); otherwise those dimensions stay
whole and the call runs on all of them. ``_specs`` is that rule, for both
ways below. Either way the call is traced again on one device's part, so a
legacy call's descriptor holds the local sizes, as the typed FFI's buffers do.

Which way depends on the mesh the operands are laid out on:

- All its axes explicit (``jax.make_mesh``'s default; the avals carry their
  shardings, as under ``jax.set_mesh``): every op is a HiJAX primitive
  (``_ShardMapped``) whose lowering reshards each operand to its part and
  calls the custom call in a ``jax.shard_map``. The shard_map is part of the
  program, so ``jax.export`` serializes it (with the package's
  ``export_checks()``) and a process that loads the bytes runs the op on
  each device's part. Its ``batch`` rule is the same primitive on the mapped
  operands: under jax.vmap each device maps its part (the custom call's
  vmap_method), the mapped dimension cut as its first mapped operand is
  where those axes are free. An op without batch or split is one too, whole
  on every device, so that jax.vmap can map a dimension cut across devices.
  The op's rules for differentiation stay around it (``_jax_runtime``), and
  a gradient takes its primal's sharding (``sharded_like``).
- Auto axes (a ``jax.sharding.Mesh`` made without axis_types, a mesh that
  mixes Auto and Explicit, or a JAX without HiJAX: JAX 0.10's
  ``VJPHiPrimitive``, 0.11's ``HiPrim``): only XLA's sharding propagation,
  after tracing, knows the operands' shardings, so the call is wrapped in
  ``jax.experimental.custom_partitioning``, whose Shardy rule names the
  dimensions' factors and which XLA calls back at compile time. That
  callback is why such a program cannot be serialized with jax.export;
  inside ``unpartitioned()`` the ops make plain custom calls, which XLA
  replicates. Under jax.vmap the call is the plain custom call, mapped
  (custom_partitioning cannot be batched): a vmapped op on sharded arrays
  runs replicated.

Why not ``jax.ffi.register_ffi_target_as_batch_partitionable``: XLA's batch
partitioner splits the leading dimensions of every operand alike (a norm's
weight [D] would be cut as if D were the batch), copies a legacy call's
descriptor with the global sizes unchanged, needs a ``num_batch_dims``
frontend attribute that ``jax.ffi.ffi_call`` does not emit, gives Shardy no
rule to carry the sharding past the call, and knows no dimension but the batch.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec

from . import _spec
from ._thread_flag import ThreadFlag

try:  # HiJAX: JAX 0.10's VJPHiPrimitive, renamed HiPrim in 0.11
    from jax.experimental import hijax as _hijax
    _HiPrim = getattr(_hijax, "HiPrim", None) or getattr(_hijax, "VJPHiPrimitive", None)
except ImportError:
    _hijax = _HiPrim = None
_AxisType = getattr(jax.sharding, "AxisType", None)
# What the shard_map route needs of the installed JAX: explicit mesh axes (avals
# that carry their sharding), jax.shard_map, jax.sharding.reshard and HiJAX.
SHARD_MAP = (_HiPrim is not None and _AxisType is not None and hasattr(jax, "shard_map")
             and hasattr(jax, "typeof") and hasattr(jax.sharding, "reshard"))


_unpartitioned = ThreadFlag()


def unpartitioned() -> contextlib.AbstractContextManager[None]:
    """Inside, the ops make plain custom calls, which XLA's partitioner
    replicates: for a program on Auto mesh axes that jax.export must
    serialize (a custom_partitioning callback cannot be; on explicit axes the
    ops' shard_map can)."""
    return _unpartitioned.on()


def partitions(op: _spec.Op, operands: Sequence) -> bool:
    """Whether a call of `op` on `operands` is made by partitioned(): outside
    unpartitioned(), where the op has a batch or a split, and for every op on
    a mesh of explicit axes (a shard_map whole on each device where the op
    has neither: jax.vmap then maps its part of a dimension cut across
    devices, which a sequential vmap_method could not)."""
    if _unpartitioned:
        return False
    return op.batch_partitionable or bool(op.splits) or _explicit_mesh(operands) is not None


def partitioned(op: _spec.Op, checked: _spec.Call, whole_call: Callable, local_call: Callable) -> Callable:
    """The custom call as one call that runs on each device's part of the
    op's batch and splits: `whole_call` over the call's operands,
    `local_call` over one device's (each returns the outputs). On a mesh
    whose axes are all explicit, a jax.shard_map in a HiJAX primitive; else
    a custom_partitioning call, which under jax.vmap is `whole_call` mapped
    as its vmap_method says."""
    mesh = _explicit_mesh(checked.operands)
    if mesh is not None:
        return _shard_mapped(op, checked, mesh, local_call)
    operands = checked.operand_inputs
    outputs = _outputs(op, checked)

    def shardings(mesh, arg_shapes):
        """The operands' and the outputs' shardings (_specs); an operand
        without a sharding is whole."""
        specs = [() if a.sharding is None else tuple(a.sharding.spec) for a in arg_shapes]
        args, results = _specs(op, checked, dict(mesh.shape), [a.shape for a in arg_shapes],
                               [a.dtype.name for a in arg_shapes], specs, even=False)
        return tuple(NamedSharding(mesh, s) for s in args), tuple(NamedSharding(mesh, s) for s in results)

    def partition(mesh, arg_shapes, result_shape):
        args, results = shardings(mesh, arg_shapes)
        return mesh, local_call, results, args

    def infer_sharding_from_operands(mesh, arg_shapes, result_shape):  # the partitioner before Shardy
        return shardings(mesh, arg_shapes)[1]

    call = custom_partitioning(local_call)
    rule, whole = _sharding_rule(operands, outputs, set(op.split_of))
    call.def_partition(partition, infer_sharding_from_operands=infer_sharding_from_operands, sharding_rule=rule,
                       need_replication_factors=whole)
    mappable = jax.custom_batching.custom_vmap(lambda *xs: call(*xs))

    @mappable.def_vmap
    def mapped(axis_size, in_batched, *xs):
        outs = jax.vmap(whole_call, in_axes=tuple(0 if b else None for b in in_batched), axis_size=axis_size)(*xs)
        return outs, tuple(True for _ in outs)

    return mappable


def _explicit_mesh(operands: Sequence):
    """The abstract mesh the operands are laid out on, where all its axes are
    explicit (their avals carry their shardings) and the installed JAX has
    the shard_map route; else None (an Auto axis: only XLA's sharding
    propagation knows the operands' shardings, after tracing)."""
    if not SHARD_MAP:
        return None
    meshes = [jax.typeof(x).sharding.mesh for x in operands]
    mesh = next((m for m in meshes if not m.empty), jax.sharding.get_abstract_mesh())
    if mesh.empty or any(t != _AxisType.Explicit for t in mesh.axis_types):
        return None
    return mesh


def _shard_mapped(op: _spec.Op, checked: _spec.Call, mesh, local_call: Callable) -> Callable:
    """The call as a HiJAX primitive whose lowering is `local_call` in a
    jax.shard_map over `mesh`, with the shardings _specs gives for the
    operands' (each operand first resharded to its own)."""
    avals = [jax.typeof(x) for x in checked.operands]
    args, results = _specs(op, checked, dict(mesh.shape), [a.shape for a in avals], [a.dtype.name for a in avals],
                           [tuple(a.sharding.spec) for a in avals], even=True)
    shapes = [s for s in checked.output_shapes if s is not None]
    dtypes = [d for d, s in zip(checked.output_dtypes, checked.output_shapes) if s is not None]
    out_avals = [_hijax.ShapedArray(tuple(shape), jnp.dtype(dtype), sharding=NamedSharding(mesh, spec))
                 for shape, dtype, spec in zip(shapes, dtypes, results)]
    return _ShardMapped(op.name, avals, out_avals, mesh, args, results, local_call)


if SHARD_MAP:
    class _ShardMapped(_HiPrim):
        """One call of an op on a mesh of explicit axes: jax.shard_map of its
        custom call on each device's part, which jax.export serializes with
        the program (a custom_partitioning callback it cannot). Its rules for
        differentiation are the op's own, around it (_jax_runtime)."""

        # An op whose outputs are constants (stop_gradient on its operands)
        # is no derivative of this primitive (JAX 0.11 asks for one, with
        # zero tangents, unless told).
        skip_linearization_on_zero_tangents = True

        def __init__(self, op: str, in_avals, out_avals, mesh, in_specs, out_specs, local_call):
            self.in_avals = tuple(in_avals)
            self.out_aval = tuple(out_avals)
            # Names with '_' are left out of printed jaxprs (JAX 0.11).
            self.params = {"op": op, "in_specs": tuple(in_specs), "out_specs": tuple(out_specs), "_mesh": mesh,
                           "_local": local_call}
            super().__init__()

        def expand(self, *xs):
            xs = [x if jax.typeof(x).sharding.spec == spec else jax.sharding.reshard(x, NamedSharding(self._mesh, spec))
                  for x, spec in zip(xs, self.in_specs)]
            call = jax.shard_map(self._local, mesh=self._mesh, in_specs=self.in_specs, out_specs=self.out_specs,
                                 check_vma=False)
            return tuple(call(*xs))

        def batch(self, axis_data, args, dims):
            # The same primitive on the mapped operands: shard_map of the
            # custom call mapped as its vmap_method says, on each device's
            # part. The mapped dimension keeps the cut the first mapped
            # operand gives it, where no other dimension uses those axes and
            # it divides evenly; else it is whole (jax.vmap of the
            # shard_map would scan a dimension cut across devices, which
            # a sequential vmap_method cannot).
            args = [x if d is None else jnp.moveaxis(x, d, 0) for x, d in zip(args, dims)]
            avals = [jax.typeof(x) for x in args]
            lead = next(tuple(a.sharding.spec)[:1] for a, d in zip(avals, dims) if d is not None)
            lead = lead[0] if lead else None
            used = set(_names(axes for spec in self.in_specs + self.out_specs for axes in spec))
            if lead is not None and (used & set(_names((lead,))) or
                                     axis_data.size % _devices(dict(self._mesh.shape), lead)):
                lead = None
            in_specs = [s if d is None else PartitionSpec(lead, *s) for s, d in zip(self.in_specs, dims)]
            out_specs = [PartitionSpec(lead, *s) for s in self.out_specs]
            out_avals = [_hijax.ShapedArray((axis_data.size, *a.shape), a.dtype, sharding=NamedSharding(self._mesh, s))
                         for a, s in zip(self.out_aval, out_specs)]
            local = jax.vmap(self._local, in_axes=tuple(None if d is None else 0 for d in dims))
            outs = _ShardMapped(self.op, avals, out_avals, self._mesh, in_specs, out_specs, local)(*args)
            return outs, (0,) * len(outs)


def sharded_like(x, primal):
    """`x` (a gradient) with `primal`'s sharding where that is on explicit
    mesh axes and differs: jax.custom_vjp wants a gradient of its primal's
    type, and a replicated backward op gives whole gradients."""
    if _AxisType is None or not hasattr(jax.sharding, "reshard") or x is None:
        return x
    want = jax.typeof(primal).sharding
    if want.mesh.empty or any(t != _AxisType.Explicit for t in want.mesh.axis_types) or \
            jax.typeof(x).sharding.spec == want.spec:
        return x
    return jax.sharding.reshard(x, want)


def _specs(op: _spec.Op, checked: _spec.Call, mesh_shape: Mapping[str, int], shapes: Sequence, dtypes: Sequence,
           specs: Sequence[tuple], *, even: bool) -> tuple[tuple, tuple]:
    """The operands' and the outputs' PartitionSpecs, from the operands'
    shapes, dtype names and specs (their PartitionSpecs' entries, () where
    whole): the batch as the first batched operand has it, each split as the
    first operand cut along one of its symbols has it where the parts are
    valid calls, everything else whole. `even`: a batch dimension is cut only
    where its size divides by the devices along it (jax.shard_map cuts no
    other; XLA's partitioner pads)."""
    operands = checked.operand_inputs
    batch_rank = len(checked.batch)
    split_of = op.split_of
    batch, cuts = (None,) * batch_rank, {}
    for t, spec in zip(operands, specs):
        lead = batch_rank if t.batch else 0
        spec = tuple(spec) + (None,) * (lead + len(t.shape) - len(spec))
        if t.batch and op.batch_partitionable and batch == (None,) * batch_rank:
            batch = spec[:batch_rank]
        for d, axes in zip(t.shape, spec[lead:]):
            if isinstance(d, str) and d in split_of and axes is not None:
                cuts.setdefault(split_of[d], axes)
    if even:
        batch = tuple(axes if axes is None or size % _devices(mesh_shape, axes) == 0 else None
                      for size, axes in zip(checked.batch, batch))
    used = set(_names(batch))
    in_shapes = [None] * len(op.inputs)
    in_dtypes = [None] * len(op.inputs)
    for t, shape, dtype in zip(operands, shapes, dtypes):
        in_shapes[op.inputs.index(t)], in_dtypes[op.inputs.index(t)] = shape, dtype
    # A mesh axis cuts one dimension of a tensor at most, and a split is cut
    # only where every part is a valid call (KVH a multiple of the devices).
    kept = {}
    for name, axes in cuts.items():
        names = set(_names((axes,)))
        if not used & names and _spec.splits_evenly(op, in_shapes, in_dtypes, checked.attrs, name,
                                                    _devices(mesh_shape, axes)):
            kept[name] = axes
            used |= names  # another split may not take these axes: a tensor may have both

    def of(t):
        # An output dimension an attribute sizes ([N, topk]) is in no
        # split (a split names input symbols): whole on every device.
        lead = batch if t.batch else ()
        own = tuple(kept.get(split_of.get(d)) if isinstance(d, str) else None for d in t.shape)
        return PartitionSpec(*lead, *own)

    return tuple(of(t) for t in operands), tuple(of(t) for t in _outputs(op, checked))


def _devices(mesh_shape: Mapping[str, int], axes) -> int:
    """The number of parts a PartitionSpec entry cuts a dimension into."""
    return math.prod(mesh_shape[a] for a in _names((axes,)))


def _outputs(op: _spec.Op, checked: _spec.Call) -> list:
    """The tensors whose shapes the call's outputs have: an output updated in
    place has its input's; those left out with their optional input are not
    among them."""
    return [_source(t, checked.operand_inputs) for t, shape in zip(op.outputs, checked.output_shapes)
            if shape is not None]


def _names(specs) -> list:
    """The mesh axis names in PartitionSpec entries (a name, a tuple of names or None)."""
    return [a for axes in specs if axes is not None for a in (axes if isinstance(axes, tuple) else (axes,))]


def _sharding_rule(operands, outputs, cut: set) -> tuple[str, tuple]:
    """Shardy's rule for the call, as einsum-like text: '...' for the batch,
    one factor per shape symbol (a dimension of the same symbol is the same
    factor) and one per other dimension (a size, an expression); and the
    factors that stay whole on each device (all but the splits' symbols). An
    output dimension that an integer attribute sizes (topk) gets a factor of
    its own, found in no operand, which stays whole."""
    factors: dict[str, str] = {}
    whole = []

    def factor(d) -> str:
        key = d if isinstance(d, str) else f"#{len(factors)}"
        if key not in factors:
            factors[key] = f"f{len(factors)}"
            if key not in cut:
                whole.append(factors[key])
        return factors[key]

    def mapping(t) -> str:
        return " ".join((["..."] if t.batch else []) + [factor(d) for d in t.shape])

    text = ", ".join(mapping(t) for t in operands) + " -> " + ", ".join(mapping(t) for t in outputs)
    return text, tuple(whole)


def _source(output: _spec.Tensor, operands) -> _spec.Tensor:
    """The tensor whose shape an output has: its own, or that of the input it updates."""
    if not output.alias:
        return output
    return next(t for t in operands if t.name == output.alias)
