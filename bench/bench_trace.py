"""Trace-time cost of the generated JAX wrappers and of the rules check
they run, against a baseline in the same process: ``jax.jit(f).lower(...)``
of each op's wrapper (a fresh function each time, so nothing is cached)
against the lowering of one jnp op of the same inputs (``x + 1.0``), and
``_spec.check`` alone per op (what every trace, fake kernel and torchax
lowering pays). Prints microseconds per call (the median of rounds) and the
wrapper's ratio to the baseline lowering.

  python bench/bench_trace.py [--rounds N] [--calls N]
"""

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import opgen_ops.jax as jops
from opgen_ops import _ops, _spec


def sds(shape, dtype):
    return jax.ShapeDtypeStruct(shape, jnp.dtype(dtype))


def cases():
    """(op, wrapper, its inputs as shapes, attributes) at decode sizes."""
    S, H, KVH, Dh, NB, BS, MB = 8, 32, 8, 128, 256, 16, 64
    return [
        ("simple_add", jops.simple_add, (sds((1024,), "float32"), sds((1024,), "float32")), {}),
        ("rms_norm", jops.rms_norm, (sds((8, 4096), "bfloat16"), sds((4096,), "bfloat16")), {"eps": 1e-6}),
        ("paged_attention_decode", jops.paged_attention_decode,
         (sds((S, H, Dh), "bfloat16"), sds((NB, BS, KVH, Dh), "bfloat16"), sds((NB, BS, KVH, Dh), "bfloat16"),
          sds((S, MB), "int32"), sds((S,), "int32")), {"scale": 0.125}),
        ("topk_softmax", jops.topk_softmax, (sds((64, 128), "float32"),), {"topk": 4, "renormalize": True}),
    ]


class Shaped:
    """What _spec.check reads of an array: a shape and a dtype."""

    def __init__(self, s):
        self.shape, self.dtype = s.shape, np.dtype(s.dtype)


def median_us(fn, calls, rounds):
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t) / calls * 1e6)
    return statistics.median(samples)


def lower_us(make, args, calls, rounds):
    # A new function object each call: jit's cache is keyed on it.
    return median_us(lambda: jax.jit(make()).lower(*args), calls, rounds)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=20)
    a = p.parse_args()
    print(f"{'op':<24} {'baseline lower':>15} {'wrapper lower':>14} {'ratio':>6} {'_spec.check':>12}")
    for name, wrapper, args, attrs in cases():
        x = args[0]
        base = lower_us(lambda: (lambda v: v + jnp.asarray(1.0, v.dtype)), (x,), a.calls, a.rounds)
        wrapped = lower_us(lambda: (lambda *xs: wrapper(*xs, **attrs)), args, a.calls, a.rounds)
        op = getattr(_ops, name).OP
        shaped = [Shaped(s) for s in args] + [None] * (len(op.inputs) - len(args))
        check = median_us(lambda: _spec.check(op, shaped, attrs), a.calls * 50, a.rounds)
        print(f"{name:<24} {base:>12.1f} µs {wrapped:>11.1f} µs {wrapped / base:>6.2f} {check:>9.2f} µs")


if __name__ == "__main__":
    main()
