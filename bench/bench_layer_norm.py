"""layer_norm's forward on the GPU against the frameworks' own layer norm, in
one process: bf16 [N, D] with weight and bias, N x D from 8 x 4096 (decode) to
65536 x 4096 (512 MiB). Prints a Markdown table of the time per call of
  - opgen through torch, replayed from a CUDA graph (the GPU's time), against
    torch.nn.functional.layer_norm likewise;
  - opgen through jax.jit against a jitted jnp layer norm (f32 statistics),
    back-to-back calls timed to block_until_ready (at decode sizes the host's
    dispatch, at the large ones the device's time);
and the bandwidth of opgen's graph time (x read, out written; the statistics
are small) over a device copy's. The outputs are compared before timing.
The backward: bench/bench_backward.py --ops layer_norm. Without a GPU it says
why and exits 0.

  python bench/bench_layer_norm.py [--calls 20] [--rounds 7]
"""

import argparse
import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch and JAX share the GPU

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from gpu_timing import copy_gbps, jax_us, torch_graph_us  # noqa: E402 (beside this file)

EPS = 1e-5
SHAPES = ((8, 4096), (4096, 4096), (16384, 4096), (65536, 4096), (16384, 1024), (4096, 16384))


def gpu_available() -> bool:
    try:
        return torch.cuda.is_available() and bool(jax.devices("gpu"))
    except RuntimeError:
        return False


def layer_norm_jnp(x, w, b):
    x32 = x.astype(jnp.float32)
    centred = x32 - jnp.mean(x32, -1, keepdims=True)
    out = centred * jax.lax.rsqrt(jnp.mean(centred * centred, -1, keepdims=True) + EPS) * w.astype(jnp.float32) + b
    return out.astype(x.dtype)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    if not gpu_available():
        print("bench_layer_norm: no GPU visible to both torch and JAX; nothing to time")
        return 0
    import opgen_ops.jax as jops
    import opgen_ops.torch as tops

    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, jax {jax.__version__}")
    copy = copy_gbps(512 << 20, args.calls, args.rounds)
    print(f"device copy (512 MiB clone): {copy:.0f} GB/s; µs per call; ratio = baseline / opgen\n")
    print("| bf16 [N, D] | x MiB | opgen (torch graph) | F.layer_norm (graph) | ratio | opgen (jax) "
          "| jnp (jax) | ratio | opgen bandwidth / copy |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n, d in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(0)
        x, w, b = (torch.randn(s, device="cuda", dtype=torch.bfloat16, generator=gen) for s in [(n, d), (d,), (d,)])
        ours = tops.layer_norm(x, w, b, eps=EPS)[0]
        err = ((ours.float() - F.layer_norm(x.float(), [d], w.float(), b.float(), EPS)).norm() /
               ours.float().norm()).item()
        assert err < 1e-2, f"layer_norm [{n}, {d}]: opgen and torch disagree: {err:.3g}"
        t_ours = torch_graph_us(lambda: tops.layer_norm(x, w, b, eps=EPS), args.calls, args.rounds)
        t_torch = torch_graph_us(lambda: F.layer_norm(x, [d], w, b, EPS), args.calls, args.rounds)
        jx, jw, jb = (jax.dlpack.from_dlpack(t) for t in (x, w, b))
        j_ours = jax_us(jax.jit(lambda x, w, b: jops.layer_norm(x, w, b, eps=EPS)[0]), (jx, jw, jb), args.calls,
                        args.rounds)
        j_ref = jax_us(jax.jit(layer_norm_jnp), (jx, jw, jb), args.calls, args.rounds)
        moved = 2 * n * d * 2
        print(f"| [{n}, {d}] | {n * d * 2 / 2**20:.0f} | {t_ours:.1f} | {t_torch:.1f} | {t_torch / t_ours:.2f} "
              f"| {j_ours:.1f} | {j_ref:.1f} | {j_ref / j_ours:.2f} | {moved / t_ours / 1e3 / copy:.2f} |", flush=True)
        del x, w, b, ours, jx, jw, jb
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
