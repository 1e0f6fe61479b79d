"""The generated ops on every GPU of the machine against one, through XLA's
SPMD partitioner (jax.jit with shardings), in one process. For each op, at a
size where the work dominates: the time per call on one GPU, on n GPUs with
the inputs sharded along the op's batch or split, the throughput ratio
(one-GPU time over n-GPU time; n is ideal), and the collectives in the
compiled n-GPU program (0: every device ran its shard alone).

  glu (silu) and rms_norm: f32 x [16, 4096, 8192], sharded on the batch;
  paged_attention_decode: bf16, 64 sequences x 32768 tokens, H 32, KVH 8,
      Dh 128, BS 16, sharded on its heads (query on H, the caches on KVH).

  python bench/bench_multi_gpu.py [--calls 10] [--rounds 5]
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

import opgen_ops.jax as jops
from gpu_timing import jax_us  # beside this file

COLLECTIVES = ("all-gather", "all-reduce", "collective-permute", "all-to-all", "reduce-scatter")


def problems(rng):
    """name: (function, inputs, each input's PartitionSpec over mesh axis 'x')."""
    x = rng.standard_normal((16, 4096, 8192), dtype=np.float32)
    w = rng.standard_normal(8192, dtype=np.float32)
    s, context, h, kvh, dh, bs = 64, 32768, 32, 8, 128, 16
    blocks = s * context // bs
    q = jnp.asarray(rng.standard_normal((s, h, dh), dtype=np.float32), jnp.bfloat16)
    k = jax.random.normal(jax.random.key(0), (blocks, bs, kvh, dh), jnp.bfloat16)
    v = jax.random.normal(jax.random.key(1), (blocks, bs, kvh, dh), jnp.bfloat16)
    tables = rng.permutation(blocks).astype(np.int32).reshape(s, context // bs)
    lens = np.full(s, context, np.int32)
    batch, whole = PartitionSpec("x"), PartitionSpec()
    return {
        "glu [16, 4096, 8192]": (lambda x: jops.glu(x, activation="silu"), [x], [batch]),
        "rms_norm [16, 4096, 8192]": (lambda x, w: jops.rms_norm(x, w)[0], [x, w], [batch, whole]),
        "paged_attention_decode 64 x 32768": (
            lambda q, k, v, t, n: jops.paged_attention_decode(q, k, v, t, n, scale=dh ** -0.5),
            [q, k, v, tables, lens],
            [PartitionSpec(None, "x"), PartitionSpec(None, None, "x"), PartitionSpec(None, None, "x"), whole, whole]),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    gpus = jax.devices("gpu")
    n = len(gpus)
    print(f"{n} x {gpus[0].device_kind}; jax {jax.__version__}\n")
    print(f"| op | 1 GPU | {n} GPUs | throughput ratio | collectives ({n} GPUs) |")
    print("| --- | --- | --- | --- | --- |")
    one = jax.sharding.Mesh(np.array(gpus[:1]), ("x",))
    many = jax.sharding.Mesh(np.array(gpus), ("x",))
    for name, (f, inputs, specs) in problems(np.random.default_rng(0)).items():
        times, found, results = {}, [], []
        for mesh in (one, many):
            shardings = [NamedSharding(mesh, spec) for spec in specs]
            placed = [jax.device_put(x, s) for x, s in zip(inputs, shardings)]
            jitted = jax.jit(f, in_shardings=shardings)
            if mesh is many:
                hlo = jitted.lower(*placed).compile().as_text()
                found = [c for c in COLLECTIVES if c in hlo]
            out = jitted(*placed)
            results.append(np.asarray(jax.device_get(out), np.float32))
            times[mesh] = jax_us(jitted, placed, args.calls, args.rounds)
            del placed
        # One device may sum in another order than n (attention's partitions follow its heads):
        # within two units in the last place of the result's dtype, relative to its largest value.
        err = np.abs(results[0] - results[1]).max() / max(np.abs(results[0]).max(), 1e-30)
        assert err <= max(1e-5, 2 * float(jnp.finfo(out.dtype).eps)), f"{name}: 1 and {n} GPUs disagree: {err:.3g}"
        print(f"| {name} | {times[one]:.0f} µs | {times[many]:.0f} µs | {times[one] / times[many]:.2f} "
              f"| {len(found)} {', '.join(found)} |", flush=True)


if __name__ == "__main__":
    main()
