"""dynamic_per_token_scaled_fp8_quant (per-token fp8 quantisation) on the GPU,
bf16 input of 64 MiB and 256 MiB in rows of D in {4096, 8192}, out_dtype
float8_e4m3fn, against baselines run in the same process. Prints a Markdown
table of
  - the op's bandwidth (bytes of x read, of out and scale written, over the
    time per call) as a fraction of a device copy of the same input
    (torch.Tensor.copy_: it reads and writes that many bytes), torch eager
    and JAX jit;
  - torch's own composition (x.abs().amax(-1), the divide, .to(float8_e4m3fn),
    as vLLM's reference is written) and the jitted jnp composition, as the
    ratio of their time to the op's (above 1, the op is faster).
Times are CUDA events around back-to-back calls (torch) and host time to
block_until_ready over back-to-back calls (JAX): at these sizes a call moves
tens of MB, so the host's dispatch is hidden. The results are compared with
the compositions' before timing. Without a GPU it prints why and exits 0.

  python bench/bench_quant.py [--calls 20] [--rounds 7]
"""

import argparse
import os
import sys

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch and JAX share the GPU

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from gpu_timing import jax_us, torch_us  # noqa: E402 (beside this file)

MIB = (64, 256)
WIDTHS = (4096, 8192)
FP8_MAX = 448.0  # float8_e4m3fn's largest finite value
MIN_SCALE = 1.0 / (FP8_MAX * 512.0)


def gpu_available() -> bool:
    try:
        return torch.cuda.is_available() and bool(jax.devices("gpu"))
    except RuntimeError:
        return False


def torch_composition(x):
    scale = (x.abs().amax(-1, keepdim=True).float() / FP8_MAX).clamp(min=MIN_SCALE)
    out = (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return out, scale[..., 0]


def jnp_composition(x):
    scale = jnp.maximum(jnp.max(jnp.abs(x), axis=-1, keepdims=True).astype(jnp.float32) / FP8_MAX, MIN_SCALE)
    out = jnp.clip(x.astype(jnp.float32) / scale, -FP8_MAX, FP8_MAX).astype(jnp.float8_e4m3fn)
    return out, scale[..., 0]


def agree(out, scale, base_out, base_scale):
    """The op against a composition: the scales to f32 rounding, each fp8 value
    within one e4m3 step (1/8 of its magnitude, or of the subnormals' 2^-9)."""
    out, base_out = np.asarray(out, np.float32), np.asarray(base_out, np.float32)
    np.testing.assert_allclose(np.asarray(scale), np.asarray(base_scale), rtol=1e-6)
    step = np.maximum(np.abs(base_out), 2.0 ** -6) / 8
    assert np.all(np.abs(out - base_out) <= step), "the op and the composition differ by more than an fp8 step"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    if not gpu_available():
        print("bench_quant: no GPU visible to both torch and JAX; nothing to time")
        return 0
    import opgen_ops.jax as jops
    import opgen_ops.torch as tops

    gpu = jax.devices("gpu")[0]
    print(f"{torch.cuda.get_device_name()}; bf16 input, out_dtype float8_e4m3fn; GB/s counts x read, out and scale "
          "written; copy = torch copy_ of x\n")
    print("| input | D | torch: op us | op GB/s | op / copy | composition / op | JAX: op us | op / copy "
          "| jnp composition / op |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for mib in MIB:
        for d in WIDTHS:
            rows = (mib << 20) // (2 * d)
            x = torch.randn(rows, d, device="cuda", dtype=torch.bfloat16)
            x *= torch.exp2(torch.randint(-8, 9, (rows, 1), device="cuda")).to(torch.bfloat16)
            xj = jax.device_put(jnp.asarray(x.float().cpu().numpy(), jnp.bfloat16), gpu)
            copy_dst = torch.empty_like(x)

            def ours():
                return tops.dynamic_per_token_scaled_fp8_quant(x, out_dtype=torch.float8_e4m3fn)

            jax_ours = jax.jit(lambda x: jops.dynamic_per_token_scaled_fp8_quant(x, out_dtype=jnp.float8_e4m3fn))
            jax_base = jax.jit(jnp_composition)
            out, scale = ours()
            base_out, base_scale = torch_composition(x)
            agree(out.float().cpu(), scale.cpu(), base_out.float().cpu(), base_scale.cpu())
            jout, jscale = jax_ours(xj)
            jbase_out, jbase_scale = jax_base(xj)
            agree(jout.astype(jnp.float32), jscale, jbase_out.astype(jnp.float32), jbase_scale)
            del out, scale, base_out, base_scale, jout, jscale, jbase_out, jbase_scale

            moved = rows * d * (2 + 1) + rows * 4
            t_copy = torch_us(lambda: copy_dst.copy_(x), args.calls, args.rounds)
            copy_gbps = 2 * rows * d * 2 / t_copy / 1e3
            t_ours = torch_us(ours, args.calls, args.rounds)
            t_base = torch_us(lambda: torch_composition(x), args.calls, args.rounds)
            t_jax = jax_us(jax_ours, (xj,), args.calls, args.rounds)
            t_jax_base = jax_us(jax_base, (xj,), args.calls, args.rounds)
            gbps, jax_gbps = moved / t_ours / 1e3, moved / t_jax / 1e3
            print(f"| {mib} MiB | {d} | {t_ours:.1f} | {gbps:.0f} | {gbps / copy_gbps:.2f} | {t_base / t_ours:.2f} "
                  f"| {t_jax:.1f} | {jax_gbps / copy_gbps:.2f} | {t_jax_base / t_jax:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
