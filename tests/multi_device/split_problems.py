"""Random valid calls of an op (op_problems.py) whose split dimensions
devices can cut evenly: the multi-device tests of JAX and of DTensor draw
from here."""

from __future__ import annotations

import op_problems
from opgen_ops import _spec


def draw_divisible(op, symbols, shards, rng):
    """A call whose split symbols are multiples of `shards` and whose shards
    are valid calls themselves (a rotary shard holds whole heads)."""
    dtypes = op_problems.instantiations(op)[0]
    for _ in range(200):
        p = op_problems.draw(op, dtypes, rng, multiples={s: shards for s in symbols})
        local = [None if x is None else x[(slice(None),) * (x.ndim - len(t.shape)) + tuple(
            slice(0, n // shards) if d in symbols else slice(None) for n, d in zip(x.shape[x.ndim - len(t.shape):],
                                                                                   t.shape))]
                 for t, x in zip(op.inputs, p.inputs)]
        try:
            op_problems._check(op, local, p.attrs)  # the attributes and the flags of the outputs on request
        except (_spec.OpValueError, ValueError):
            continue
        return p
    raise AssertionError(f"{op.name}: no call with {symbols} divisible by {shards} in 200 draws")


def draw_uneven(op, symbols, shards, rng):
    """A call in which some symbol of the split is no multiple of `shards`
    and, where the split has several, another is (H = 8 query heads over 4
    devices, KVH = 2 KV heads): an input can be cut along the split, and the
    split must still not be."""
    dtypes = op_problems.instantiations(op)[0]
    for _ in range(2000):
        p = op_problems.draw(op, dtypes, rng)
        uneven = [p.call.symbols[s] % shards != 0 for s in symbols]
        if any(uneven) and (len(symbols) == 1 or not all(uneven)):
            return p
    raise AssertionError(f"{op.name}: no call with {symbols} partly uneven over {shards} in 2000 draws")
