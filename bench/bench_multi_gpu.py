"""The generated ops on 1, 2, 4, ... GPUs (every count that divides the
machine's) through XLA's SPMD partitioner (jax.jit with shardings), in one
process. For each op, at a size where the work dominates, and each device
count n: the time per call (median of the rounds, and their spread: the
slowest round's time over the fastest's, minus one), the throughput ratio
(one device's median over n devices'; n is ideal), and the collectives in the
compiled n-device program (0 for every op here: the batch-partitioned ops and
attention's heads split run on each device's shard alone; the script exits 1
otherwise). The rounds of all device counts are interleaved, so that a drift
of the machine (clocks, temperature, a neighbour) moves them alike. The defaults
(100 calls x 31 rounds, against the 5 x 3 of bench/RESULTS.md's first runs, whose ratios
moved by 0.05 between runs) aim at two runs agreeing on every ratio within 0.02: compare
two runs' tables to see that they do.

  glu (silu) and rms_norm: f32 x [16, 4096, 8192], sharded on the batch;
  paged_attention_decode: bf16, 64 sequences x 32768 tokens, H 32, KVH 8,
      Dh 128, BS 16, sharded on its heads (query on H, the caches on KVH).

  python bench/bench_multi_gpu.py [--calls 100] [--rounds 31]
  python bench/bench_multi_gpu.py --cpu-smoke   # 4 host CPU devices, small sizes:
                                                # that it runs, not a measurement
"""

import argparse
import statistics
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

import opgen_ops.jax as jops
from gpu_timing import jax_round_us  # beside this file

COLLECTIVES = ("all-gather", "all-reduce", "collective-permute", "all-to-all", "reduce-scatter")
HOST_DEVICES = 4  # --cpu-smoke's


def problems(rng, small):
    """name: (function, inputs, each input's PartitionSpec over mesh axis 'x'); small: the CPU smoke
    test's sizes (divisible by 4 devices as the GPU sizes are by 8)."""
    shape = (16, 4096, 8192) if not small else (8, 64, 256)
    x = rng.standard_normal(shape, dtype=np.float32)
    w = rng.standard_normal(shape[-1], dtype=np.float32)
    s, context, h, kvh, dh, bs = (64, 32768, 32, 8, 128, 16) if not small else (8, 256, 8, 4, 64, 16)
    blocks = s * context // bs
    q = jnp.asarray(rng.standard_normal((s, h, dh), dtype=np.float32), jnp.bfloat16)
    k = jax.random.normal(jax.random.key(0), (blocks, bs, kvh, dh), jnp.bfloat16)
    v = jax.random.normal(jax.random.key(1), (blocks, bs, kvh, dh), jnp.bfloat16)
    tables = rng.permutation(blocks).astype(np.int32).reshape(s, context // bs)
    lens = np.full(s, context, np.int32)
    batch, whole = PartitionSpec("x"), PartitionSpec()
    shape = ", ".join(map(str, shape))
    return {
        f"glu f32 [{shape}] (silu)": (lambda x: jops.glu(x, activation="silu"), [x], [batch]),
        f"rms_norm f32 [{shape}]": (lambda x, w: jops.rms_norm(x, w)[0], [x, w], [batch, whole]),
        f"paged_attention_decode bf16, {s} x {context}, H {h}, KVH {kvh}": (
            lambda q, k, v, t, n: jops.paged_attention_decode(q, k, v, t, n, scale=dh ** -0.5),
            [q, k, v, tables, lens],
            [PartitionSpec(None, "x"), PartitionSpec(None, None, "x"), PartitionSpec(None, None, "x"), whole, whole]),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=100, help="back-to-back calls a round")
    ap.add_argument("--rounds", type=int, default=31, help="rounds per device count, interleaved")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help=f"{HOST_DEVICES} host CPU devices, small sizes, 2 calls and 3 rounds (unless given)")
    args = ap.parse_args()
    if args.cpu_smoke:
        jax.config.update("jax_num_cpu_devices", HOST_DEVICES)  # before JAX makes its CPU devices
        calls_given = any(a.startswith("--calls") for a in sys.argv)
        rounds_given = any(a.startswith("--rounds") for a in sys.argv)
        args.calls, args.rounds = args.calls if calls_given else 2, args.rounds if rounds_given else 3
    devices = jax.devices("cpu" if args.cpu_smoke else "gpu")
    counts = [n for n in range(1, len(devices) + 1) if len(devices) % n == 0]
    print(f"{len(devices)} x {devices[0].device_kind}; jax {jax.__version__}; {args.calls} calls x {args.rounds} "
          f"rounds\n")
    print("| op | devices | µs per call (median) | spread of the rounds | throughput ratio | collectives |")
    print("| --- | --- | --- | --- | --- | --- |")
    meshes = {n: jax.sharding.Mesh(np.array(devices[:n]), ("x",)) for n in counts}
    failed = False
    for name, (f, inputs, specs) in problems(np.random.default_rng(0), args.cpu_smoke).items():
        runs, found, results = {}, {}, {}
        for n, mesh in meshes.items():
            shardings = [NamedSharding(mesh, spec) for spec in specs]
            placed = [jax.device_put(x, s) for x, s in zip(inputs, shardings)]
            jitted = jax.jit(f, in_shardings=shardings)
            hlo = jitted.lower(*placed).compile().as_text()
            found[n] = [c for c in COLLECTIVES if c in hlo]
            out = jitted(*placed)  # compiles and warms up
            results[n] = np.asarray(jax.device_get(out), np.float32)
            runs[n] = (jitted, placed)
        samples = {n: [] for n in counts}
        for _ in range(args.rounds):
            for n, (jitted, placed) in runs.items():
                samples[n].append(jax_round_us(jitted, placed, args.calls))
        del runs
        one = statistics.median(samples[1])
        for n in counts:
            # n devices may sum in another order than one (attention's partitions follow its heads):
            # within two units in the last place of the result's dtype, relative to its largest value.
            err = np.abs(results[1] - results[n]).max() / max(np.abs(results[1]).max(), 1e-30)
            assert err <= max(1e-5, 2 * float(jnp.finfo(out.dtype).eps)), f"{name}: 1 and {n} devices disagree: {err:.3g}"
            median = statistics.median(samples[n])
            failed |= bool(found[n])
            listed = f" ({', '.join(found[n])})" if found[n] else ""
            print(f"| {name} | {n} | {median:.0f} | {max(samples[n]) / min(samples[n]) - 1:.1%} | {one / median:.2f} "
                  f"| {len(found[n])}{listed} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
