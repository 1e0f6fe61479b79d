"""In-place updates through an aliased output (kv_cache_write) on the GPU,
against each framework's own scatter, measured in one process. Prints a
table of per-call times and ratios.

A KV cache of B sequences x S positions x H values (float32, 512 MiB by
default) gets one new row per sequence per call; a call chain feeds each
result into the next call, as a decode loop does.

  JAX (jit, the cache donated): kv_cache_write (api_version 4 and 3) against
      cache.at[arange(B), pos].set(values, mode="drop"); and kv_cache_write
      without donation, where XLA must copy the whole cache before each call.
  PyTorch eager: kv_cache_write (in place, Tensor(a!)) against
      cache.index_put_((arange(B), pos), values).

  python bench/bench_inplace.py [--b 32] [--s 4096] [--h 1024] [--calls 50] [--rounds 5]
"""

import argparse
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch

import opgen_ops.jax as jops
import opgen_ops.torch as tops


def chain_us(step, state, calls, rounds):
    """Median over rounds of the host time per call of `calls` chained calls."""
    samples = []
    for _ in range(rounds):
        state = jax.block_until_ready(state)
        t = time.perf_counter()
        for _ in range(calls):
            state = step(state)
        state = jax.block_until_ready(state)
        samples.append((time.perf_counter() - t) / calls * 1e6)
    return statistics.median(samples), state


def torch_us(fn, calls, rounds):
    samples = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t) / calls * 1e6)
    return statistics.median(samples)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--b", type=int, default=32)
    ap.add_argument("--s", type=int, default=4096)
    ap.add_argument("--h", type=int, default=1024)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if not jax.devices()[0].platform == "gpu" or not torch.cuda.is_available():
        print("bench_inplace: needs a GPU visible to JAX and torch")
        return 1
    b, s, h = args.b, args.s, args.h
    rng = np.random.default_rng(0)
    cache = rng.standard_normal((b, s, h)).astype(np.float32)
    values = jnp.asarray(rng.standard_normal((b, h)).astype(np.float32))
    pos = jnp.asarray(rng.integers(0, s, b).astype(np.int32))
    rows = jnp.arange(b)
    print(f"bench_inplace: cache [{b}, {s}, {h}] float32 ({cache.nbytes / 2**20:.0f} MiB), "
          f"{jax.devices()[0].device_kind}, jax {jax.__version__}, torch {torch.__version__}")

    # Correctness first: every variant must give the scatter's result.
    want = np.asarray(jnp.asarray(cache).at[rows, pos].set(values, mode="drop"))
    for v in (4, 3):
        assert np.array_equal(np.asarray(jops.kv_cache_write(jnp.asarray(cache), values, pos, api_version=v)), want)

    def jax_step(f):
        return jax.jit(f, donate_argnums=0)

    variants = {
        "jnp .at[].set (donated)": jax_step(lambda c: c.at[rows, pos].set(values, mode="drop")),
        "generated v4 (donated)": jax_step(lambda c: jops.kv_cache_write(c, values, pos, api_version=4)),
        "generated v3 (donated)": jax_step(lambda c: jops.kv_cache_write(c, values, pos, api_version=3)),
        "generated v4 (not donated)": jax.jit(lambda c: jops.kv_cache_write(c, values, pos, api_version=4)),
    }
    times = {}
    for name, step in variants.items():
        state = step(jnp.asarray(cache))  # compile
        times[name], _ = chain_us(step, state, args.calls, args.rounds)
    base = times["jnp .at[].set (donated)"]
    print(f"\n{'JAX, one call':32} {'us/call':>10} {'/ jnp scatter':>14}")
    for name, t in times.items():
        print(f"{name:32} {t:10.1f} {t / base:14.3f}")

    tc = torch.from_numpy(cache).cuda()
    tv = torch.from_numpy(np.asarray(values)).cuda()
    tp = torch.from_numpy(np.asarray(pos)).cuda()
    trows = torch.arange(b, device="cuda")
    tpl = tp.long()  # index_put_ takes int64 indices: converted once, outside the timing
    check = tc.clone()
    tops.kv_cache_write(check, tv, tp)
    assert torch.equal(check.cpu(), torch.from_numpy(want))
    del check
    tt = {
        "index_put_": torch_us(lambda: tc.index_put_((trows, tpl), tv), args.calls, args.rounds),
        "generated (in place)": torch_us(lambda: tops.kv_cache_write(tc, tv, tp), args.calls, args.rounds),
    }
    print(f"\n{'PyTorch eager, one call':32} {'us/call':>10} {'/ index_put_':>14}")
    for name, t in tt.items():
        print(f"{name:32} {t:10.1f} {t / tt['index_put_']:14.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
