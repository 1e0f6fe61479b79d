"""gemm (cuBLASLt through the op's state: the handle and each shape's
algorithm made once per device) on the GPU against the frameworks' own
matmul in the same process, at M = N = K in {1024, 4096, 8192} and a few
LLM shapes, bf16 and f16 (f32 with --f32). Prints a Markdown table: the
time per call of opgen's op and of the baseline, and their ratio
(baseline / opgen: above 1, opgen is faster; the goal is at least 0.97 at
4096^3 bf16), for
  - torch eager: tops.gemm against torch.matmul (CUDA events around
    back-to-back calls);
  - torch CUDA graph: the same calls captured in a CUDA graph and replayed
    (the GPU's time alone);
  - JAX: jops.gemm against jnp.matmul, each jitted, back-to-back calls timed
    to block_until_ready;
and opgen's TFLOP/s in the graph. The results are compared before timing.
Without a GPU it prints why and exits 0.

  python bench/bench_gemm.py [--calls 20] [--rounds 7] [--quick] [--f32]
"""

import argparse
import os
import sys

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch and JAX share the GPU

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from gpu_timing import jax_us, torch_graph_us, torch_us  # noqa: E402 (beside this file)

# (M, N, K): squares, then a decoder layer's projections at 4096 tokens.
SHAPES = ((1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (4096, 4096, 14336))
DTYPES = {"bf16": (torch.bfloat16, jnp.bfloat16), "f16": (torch.float16, jnp.float16)}


def gpu_available() -> bool:
    try:
        return torch.cuda.is_available() and bool(jax.devices("gpu"))
    except RuntimeError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="4096^3 only")
    parser.add_argument("--f32", action="store_true", help="f32 too (no TF32: torch's default)")
    args = parser.parse_args()
    if not gpu_available():
        print("bench_gemm: no GPU visible to both torch and JAX; nothing to time")
        return 0
    import opgen_ops.jax as jops
    import opgen_ops.torch as tops

    dtypes = dict(DTYPES, **({"f32": (torch.float32, jnp.float32)} if args.f32 else {}))
    gpu = jax.devices("gpu")[0]
    print(f"{torch.cuda.get_device_name()}; times in us per call; ratio = baseline / opgen\n")
    print("| dtype | M | N | K | torch eager: opgen | torch.matmul | ratio | CUDA graph: opgen | torch.matmul | ratio "
          "| JAX jit: opgen | jnp.matmul | ratio | opgen TFLOP/s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    rng = np.random.default_rng(0)
    for name, (torch_dtype, jax_dtype) in dtypes.items():
        for m, n, k in ((4096, 4096, 4096),) if args.quick else SHAPES:
            a = torch.from_numpy(rng.standard_normal((m, k), np.float32)).to("cuda", torch_dtype)
            b = torch.from_numpy(rng.standard_normal((k, n), np.float32)).to("cuda", torch_dtype)
            aj = jax.device_put(jnp.asarray(a.float().cpu().numpy(), jax_dtype), gpu)
            bj = jax.device_put(jnp.asarray(b.float().cpu().numpy(), jax_dtype), gpu)

            def ours(a=a, b=b):
                return tops.gemm(a, b)

            def baseline(a=a, b=b):
                return torch.matmul(a, b)

            precision = jax.lax.Precision.HIGHEST if name == "f32" else None
            jax_ours = jax.jit(jops.gemm)
            jax_base = jax.jit(lambda a, b, p=precision: jnp.matmul(a, b, precision=p))
            # Both accumulate in f32; they may sum in different orders.
            tol = {"bf16": 2e-2, "f16": 2e-3, "f32": 1e-4}[name] * np.sqrt(k)
            torch.testing.assert_close(ours().float(), baseline().float(), rtol=0, atol=tol)
            np.testing.assert_allclose(np.asarray(jax_ours(aj, bj), np.float32),
                                       np.asarray(jax_base(aj, bj), np.float32), rtol=0, atol=tol)
            t_eager = (torch_us(ours, args.calls, args.rounds), torch_us(baseline, args.calls, args.rounds))
            t_graph = (torch_graph_us(ours, args.calls, args.rounds),
                       torch_graph_us(baseline, args.calls, args.rounds))
            t_jax = (jax_us(jax_ours, (aj, bj), args.calls, args.rounds),
                     jax_us(jax_base, (aj, bj), args.calls, args.rounds))
            cells = [f"{x:.1f} | {y:.1f} | {y / x:.3f}" for x, y in (t_eager, t_graph, t_jax)]
            tflops = 2 * m * n * k / t_graph[0] / 1e6
            print(f"| {name} | {m} | {n} | {k} | " + " | ".join(cells) + f" | {tflops:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
