"""DTensor sharding strategies of the generated ops (hand-written,
op-independent; from the same description as JAX's partitioning).

A DTensor sharded along an op's batch ('...', where the spec makes the op
batch-partitionable) or along one of its splits (attention's heads) runs the
op on each rank's local tensor with no redistribution: the tensors with those
dimensions keep their shard, every other tensor is replicated. A split is
offered only where its sizes divide by the ranks and each rank's part is a
valid call of the op. Any other placement, and any other op, is
redistributed to one of these or to all-replicated.

Not registered, so that DTensor refuses them by name: ops that update an
input in place (their schema returns nothing, which DTensor's sharding
propagation cannot handle) and ops whose kernel takes an array attribute as
a tensor (flip's dims: a plain tensor beside DTensors). An enum attribute
reaches the strategies as its index (the lowered kernel's), lifted back to
the spec's value for the rules.
"""

from __future__ import annotations

from . import _spec
from ._torch_values import lift, split_requests, unasked


def takes_strategies(op: _spec.Op) -> bool:
    """Whether DTensor can run `op` (see the module's docstring for those it cannot)."""
    return not op.aliased_outputs and not (op.torch_lowered and any(a.is_array for a in op.attrs))


def register(op: _spec.Op, kernel) -> None:
    """Registers `op`'s strategies for its kernel (an OpOverload) with DTensor,
    where torch has DTensor and the op can use them."""
    if not takes_strategies(op):
        return
    import torch.distributed

    if not torch.distributed.is_available():
        return
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.experimental import register_sharding

    split_of = op.split_of

    def strategies(*args, **kwargs):
        kwargs, requested = split_requests(op, kwargs)
        # An output on request not asked for is a tensor of no elements: whole on every rank.
        skipped = {o.name for o, skip in zip(op.outputs, unasked(op, requested)) if skip}
        specs = list(args[:len(op.inputs)]) + [None] * (len(op.inputs) - len(args))
        given = [(t, s) for t, s in zip(op.inputs, specs) if s is not None]
        batch_rank = next((s.ndim - len(t.shape) for t, s in given if t.batch), 0)

        def each(placement_of):
            """One strategy: (output placements, input placements) from where
            a tensor of the spec is cut (None: replicated)."""
            def place(t):
                dim = None if t.name in skipped else placement_of(t)
                return Replicate() if dim is None else Shard(dim)

            inputs = [None if s is None else place(t) for t, s in zip(op.inputs, specs)]
            return [place(t) for t in op.outputs], inputs[:len(args)]  # one per positional argument

        found = [each(lambda t: None)]
        if op.batch_partitionable:
            found += [each(lambda t, k=k: k if t.batch else None) for k in range(batch_rank)]
        mesh = next(s.mesh for _, s in given)
        shapes = [None if s is None else tuple(s.shape) for s in specs]
        dtypes = [None if s is None else str(s.tensor_meta.dtype).removeprefix("torch.") for s in specs]
        # The kernel of an op with an enum attribute takes the value's index (a lowered
        # kernel); the rules take the spec's value.
        attrs = lift(op, kwargs) if op.torch_lowered else kwargs
        for name in op.splits:
            if not _spec.splits_evenly(op, shapes, dtypes, attrs, name, mesh.size()):
                continue

            def cut(t, name=name):
                # A dimension an attribute sizes ([N, topk]) is in no split: never cut.
                at = [i for i, d in enumerate(t.shape) if isinstance(d, str) and split_of.get(d) == name]
                return (batch_rank if t.batch else 0) + at[0] if at else None

            found.append(each(cut))
        return found

    register_sharding(kernel)(strategies)
