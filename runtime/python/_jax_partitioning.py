"""How XLA's SPMD partitioner splits an op's custom call across devices
(hand-written, op-independent; the rule comes from the op's description).

An op runs on each device's shard with no communication along two kinds of
dimensions its spec names: the batch ('...', where ``batch_partitionable``:
every output has it) and each ``split`` (a set of shape symbols cut
together, such as attention's heads H with KVH). An input keeps the sharding
of those dimensions; every other dimension (a row's elements, a head's size)
and every input without them (a norm's weight, a block table) is whole on
each device. The custom call is wrapped in
``jax.experimental.custom_partitioning``, whose Shardy rule names those
dimensions' factors; XLA calls back at compile time and the call is traced
again on the shards' shapes, so a legacy call's descriptor holds the local
sizes, as the typed FFI's buffers do. A split is cut only where its sizes
divide by the devices and each part is a valid call of the op (rotary's
parts must hold whole heads; attention's KVH a multiple of the devices);
otherwise those dimensions stay whole and the call runs on all of them.
The callback makes a program that holds such a call impossible to
serialize with jax.export; inside ``unpartitioned()`` the ops make plain
custom calls, which XLA replicates.
Under jax.vmap the call is the plain custom call, mapped (custom_partitioning
cannot be batched): a vmapped op on sharded arrays runs replicated.

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
from collections.abc import Callable

import jax
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec

from . import _spec
from ._thread_flag import ThreadFlag


_unpartitioned = ThreadFlag()


def unpartitioned() -> contextlib.AbstractContextManager[None]:
    """Inside, the ops make plain custom calls, which XLA's partitioner
    replicates: for a program that jax.export must serialize (a
    custom_partitioning callback cannot be)."""
    return _unpartitioned.on()


def partitions(op: _spec.Op) -> bool:
    """Whether `op`'s calls are partitioned here: it has a batch or a split, outside unpartitioned()."""
    return (op.batch_partitionable or bool(op.splits)) and not _unpartitioned


def partitioned(op: _spec.Op, checked: _spec.Call, whole_call: Callable, local_call: Callable) -> Callable:
    """The custom call as one call that XLA partitions along the op's batch
    and splits: `whole_call` over the call's operands, `local_call` over one
    device's (each returns the outputs). Under jax.vmap it is `whole_call`
    mapped as its vmap_method says."""
    operands = checked.operand_inputs
    # An output updated in place has its input's shape.
    outputs = [_source(t, operands) for t, shape in zip(op.outputs, checked.output_shapes) if shape is not None]
    batch_rank = len(checked.batch)
    split_of = op.split_of

    def shardings(mesh, arg_shapes):
        """The operands' and the outputs' shardings: the batch as the first
        batched operand has it, each split as the first operand cut along one
        of its symbols has it where the parts are valid calls, everything else
        whole. An operand without a sharding is whole."""
        specs = [() if a.sharding is None else tuple(a.sharding.spec) for a in arg_shapes]
        batch, cuts = (None,) * batch_rank, {}
        for t, spec in zip(operands, specs):
            lead = batch_rank if t.batch else 0
            spec = spec + (None,) * (lead + len(t.shape) - len(spec))
            if t.batch and op.batch_partitionable and batch == (None,) * batch_rank:
                batch = spec[:batch_rank]
            for d, axes in zip(t.shape, spec[lead:]):
                if isinstance(d, str) and d in split_of and axes is not None:
                    cuts.setdefault(split_of[d], axes)
        used = set(_names(batch))
        shapes = [None] * len(op.inputs)
        dtypes = [None] * len(op.inputs)
        for t, a in zip(operands, arg_shapes):
            shapes[op.inputs.index(t)], dtypes[op.inputs.index(t)] = a.shape, a.dtype.name
        # A mesh axis cuts one dimension of a tensor at most, and a split is cut
        # only where every part is a valid call (KVH a multiple of the devices).
        kept = {}
        for name, axes in cuts.items():
            names = set(_names((axes,)))
            if not used & names and _spec.splits_evenly(op, shapes, dtypes, checked.attrs, name,
                                                        math.prod(mesh.shape[a] for a in names)):
                kept[name] = axes
                used |= names  # another split may not take these axes: a tensor may have both
        cuts = kept

        def of(t):
            # An output dimension an attribute sizes ([N, topk]) is in no
            # split (a split names input symbols): whole on every device.
            lead = batch if t.batch else ()
            own = tuple(cuts.get(split_of.get(d)) if isinstance(d, str) else None for d in t.shape)
            return NamedSharding(mesh, PartitionSpec(*lead, *own))

        return tuple(of(t) for t in operands), tuple(of(t) for t in outputs)

    def partition(mesh, arg_shapes, result_shape):
        args, results = shardings(mesh, arg_shapes)
        return mesh, local_call, results, args

    def infer_sharding_from_operands(mesh, arg_shapes, result_shape):  # the partitioner before Shardy
        return shardings(mesh, arg_shapes)[1]

    call = custom_partitioning(local_call)
    rule, whole = _sharding_rule(operands, outputs, set(split_of))
    call.def_partition(partition, infer_sharding_from_operands=infer_sharding_from_operands, sharding_rule=rule,
                       need_replication_factors=whole)
    mappable = jax.custom_batching.custom_vmap(lambda *xs: call(*xs))

    @mappable.def_vmap
    def mapped(axis_size, in_batched, *xs):
        outs = jax.vmap(whole_call, in_axes=tuple(0 if b else None for b in in_batched), axis_size=axis_size)(*xs)
        return outs, tuple(True for _ in outs)

    return mappable


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
