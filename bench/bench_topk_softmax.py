"""topk_softmax (the MoE router) on the GPU against softmax + topk run in the
same process, at N in {32, 4096, 65536} tokens, E in {8, 64, 256} experts,
topk in {2, 8}, bf16 logits (renormalize off). Prints a Markdown table: the
time per call of opgen's op and of the baseline, and their ratio
(baseline / opgen: above 1, opgen is faster), for
  - torch eager: tops.topk_softmax against torch.topk(torch.softmax(x, -1,
    dtype=torch.float32), k) (CUDA events around back-to-back calls: the
    slower of the GPU and the host's dispatch);
  - torch CUDA graph: the same calls captured in a CUDA graph and replayed
    (the GPU's time alone);
  - JAX: jops.topk_softmax against jax.lax.top_k(jax.nn.softmax(x.astype(
    f32)), k), each jitted, back-to-back calls timed to block_until_ready;
and the bandwidth of opgen's graph time (bytes of logits read and weights
and indices written) as a fraction of a device copy's. The results are
compared before timing (the weights; the indices may differ on tied bf16 logits).
Without a GPU it prints why and exits 0.

  python bench/bench_topk_softmax.py [--calls 50] [--rounds 7] [--quick]
"""

import argparse
import os
import sys

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch and JAX share the GPU

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from gpu_timing import copy_gbps, jax_us, torch_graph_us, torch_us  # noqa: E402 (beside this file)

TOKENS = (32, 4096, 65536)
EXPERTS = (8, 64, 256)
TOPK = (2, 8)


def gpu_available() -> bool:
    try:
        return torch.cuda.is_available() and bool(jax.devices("gpu"))
    except RuntimeError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="N = 4096 only")
    args = parser.parse_args()
    if not gpu_available():
        print("bench_topk_softmax: no GPU visible to both torch and JAX; nothing to time")
        return 0
    import opgen_ops.jax as jops
    import opgen_ops.torch as tops

    gpu = jax.devices("gpu")[0]
    copy = copy_gbps(64 << 20, args.calls, args.rounds)
    print(f"device copy: {copy:.0f} GB/s; times in us per call; ratio = baseline / opgen\n")
    print("| N | E | topk | torch eager: opgen | softmax+topk | ratio | CUDA graph: opgen | softmax+topk | ratio "
          "| JAX jit: opgen | softmax+top_k | ratio | opgen graph GB/s / copy |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    rng = np.random.default_rng(0)
    for n in (4096,) if args.quick else TOKENS:
        for e in EXPERTS:
            for k in TOPK:
                x = torch.from_numpy(rng.standard_normal((n, e)).astype(np.float32)).to("cuda", torch.bfloat16)
                xj = jax.device_put(jnp.asarray(x.float().cpu().numpy(), jnp.bfloat16), gpu)

                def ours():
                    return tops.topk_softmax(x, topk=k)

                def baseline(k=k):
                    return torch.topk(torch.softmax(x, -1, dtype=torch.float32), k)

                jax_ours = jax.jit(lambda x, k=k: jops.topk_softmax(x, topk=k))
                jax_base = jax.jit(lambda x, k=k: jax.lax.top_k(jax.nn.softmax(x.astype(jnp.float32), axis=-1), k))
                torch.testing.assert_close(ours()[0], baseline()[0], rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(np.asarray(jax_ours(xj)[0]), np.asarray(jax_base(xj)[0]), rtol=1e-5,
                                           atol=1e-6)
                t_eager = (torch_us(ours, args.calls, args.rounds), torch_us(baseline, args.calls, args.rounds))
                t_graph = (torch_graph_us(ours, args.calls, args.rounds),
                           torch_graph_us(baseline, args.calls, args.rounds))
                t_jax = (jax_us(jax_ours, (xj,), args.calls, args.rounds),
                         jax_us(jax_base, (xj,), args.calls, args.rounds))
                moved = n * e * 2 + n * k * (4 + 4)
                cells = [f"{a:.1f} | {b:.1f} | {b / a:.2f}" for a, b in (t_eager, t_graph, t_jax)]
                print(f"| {n} | {e} | {k} | " + " | ".join(cells) + f" | {moved / t_graph[0] / 1e3 / copy:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
