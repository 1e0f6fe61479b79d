"""The quant ops on the GPU against baselines run in the same process, bf16
input of 64 MiB and 256 MiB in rows of D in {4096, 8192}. One Markdown table
per op (--ops picks them):

dynamic_per_token_scaled_fp8_quant (out_dtype float8_e4m3fn):
  - the op's bandwidth (bytes of x read, of out and scale written, over the
    time per call) as a fraction of a device copy of the same input
    (torch.Tensor.copy_: it reads and writes that many bytes), torch eager
    and JAX jit;
  - torch's own composition (x.abs().amax(-1), the divide, .to(float8_e4m3fn),
    as vLLM's reference is written) and the jitted jnp composition, as the
    ratio of their time to the op's (above 1, the op is faster).

rms_norm_dynamic_per_token_quant (--out-dtype, float8_e4m3fn by default), with
residual (updated in place) and without:
  - the op's bandwidth (x read; with residual, residual read and written; out
    and scale written) as a fraction of a device copy of x, through torch eager,
    a CUDA graph of the op and JAX jit (residual donated, so that XLA updates it
    in place as torch does);
  - the torch composition (the residual add into residual, the norm in f32
    rounded to bf16 and times the weight, vLLM's quantisation), eager and under
    torch.compile, and the jitted jnp composition (residual donated), as the
    ratio of their time to the op's through the same framework.

Times are CUDA events around back-to-back calls (torch eager), CUDA-graph
replays, and host time to block_until_ready over back-to-back calls (JAX): at
these sizes a call moves tens of MB, so the host's dispatch is hidden. The
results are compared with the compositions' before timing. Without a GPU it
prints why and exits 0.

  python bench/bench_quant.py [--ops fp8_quant rms_norm_quant] [--out-dtype int8] [--calls 20] [--rounds 7]
"""

import argparse
import os
import statistics
import sys

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch and JAX share the GPU

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from gpu_timing import jax_round_us, jax_us, torch_graph_us, torch_us  # noqa: E402 (beside this file)

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


def fp8_quant_table(args):
    import opgen_ops.jax as jops
    import opgen_ops.torch as tops

    gpu = jax.devices("gpu")[0]
    print(f"\n### dynamic_per_token_scaled_fp8_quant\n\n{torch.cuda.get_device_name()}; bf16 input, out_dtype "
          "float8_e4m3fn; GB/s counts x read, out and scale written; copy = torch copy_ of x\n")
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



# --- rms_norm_dynamic_per_token_quant --------------------------------------------------------------

EPS = 1e-6
# Each out_dtype: torch's and JAX's dtype, the value a row's max |y| maps to,
# the smallest scale, and the range out saturates to (vLLM's).
OUT = {"float8_e4m3fn": (torch.float8_e4m3fn, jnp.float8_e4m3fn, FP8_MAX, MIN_SCALE, (-FP8_MAX, FP8_MAX)),
       "int8": (torch.int8, jnp.int8, 127.0, float(np.finfo(np.float32).eps), (-128.0, 127.0))}


def torch_rms_quant(x, weight, residual, out_dtype):
    """The op as torch code: the f32 sum (stored into residual in bf16), the
    norm of it in f32, y rounded to bf16 and times the weight in bf16, vLLM's
    quantisation of y (fp8: y / scale; int8: y * (1 / scale), rounded)."""
    dtype, _, top, smallest, (low, high) = OUT[out_dtype]
    s = x.float()
    if residual is not None:
        s = s + residual.float()
        residual.copy_(s.to(residual.dtype))
    y = (s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * weight
    scale = (y.abs().amax(-1, keepdim=True).float() / top).clamp(min=smallest)
    q = y.float() / scale if dtype != torch.int8 else (y.float() * (1.0 / scale)).round()
    return q.clamp(low, high).to(dtype), scale[..., 0]


def jnp_rms_quant(x, weight, residual, out_dtype):
    """torch_rms_quant in jnp: the new residual is returned."""
    _, dtype, top, smallest, (low, high) = OUT[out_dtype]
    s = x.astype(jnp.float32)
    if residual is not None:
        s = s + residual.astype(jnp.float32)
        residual = s.astype(residual.dtype)
    y = (s * jax.lax.rsqrt(jnp.mean(s * s, axis=-1, keepdims=True) + EPS)).astype(x.dtype) * weight
    scale = jnp.maximum(jnp.max(jnp.abs(y), axis=-1, keepdims=True).astype(jnp.float32) / top, smallest)
    q = y.astype(jnp.float32) / scale if dtype != jnp.int8 else jnp.round(y.astype(jnp.float32) * (1.0 / scale))
    return jnp.clip(q, low, high).astype(dtype), scale[..., 0], residual


def agree_rms(got, base, out_dtype):
    """The op against a composition (numpy arrays): the new residual exactly
    (both round the f32 sum to bf16); the scales within 2^-6, since a
    composition may take y's largest value up to one bf16 step apart (its
    rsqrt; torch.compile keeps y in f32, skipping its two roundings to bf16);
    each quantised value within two steps of the composition's (1/8 of its
    magnitude in e4m3, 1 in int8) plus that scale's difference."""
    (out, scale, residual), (base_out, base_scale, base_residual) = got, base
    if base_residual is not None:
        np.testing.assert_array_equal(residual, base_residual)
    np.testing.assert_allclose(scale, base_scale, rtol=2.0**-6)
    step = np.ones_like(base_out) if out_dtype == "int8" else np.maximum(np.abs(base_out), 2.0**-6) / 8
    assert np.all(np.abs(out - base_out) <= 2 * step + np.abs(base_out) * 2.0**-6), \
        "the op and the composition differ by more than two steps"


def as_numpy(*arrays):
    return tuple(None if a is None else (a.float().cpu().numpy() if isinstance(a, torch.Tensor)
                                         else np.asarray(jnp.asarray(a, jnp.float32))) for a in arrays)


def jax_donating_us(fn, x, weight, residual, calls, rounds):
    """Microseconds per call of fn(x, weight, residual) whose residual is
    donated: each call takes the residual the previous one returned."""
    state = {"residual": residual}

    def call(*_):
        out = fn(x, weight, state["residual"])
        state["residual"] = out[2] if residual is not None else None
        return out

    jax.block_until_ready(call())
    return statistics.median(jax_round_us(call, (), calls) for _ in range(rounds))


def rms_norm_quant_table(args):
    import opgen_ops.jax as jops
    import opgen_ops.torch as tops

    gpu = jax.devices("gpu")[0]
    out_dtype = args.out_dtype
    dtype, jdtype = OUT[out_dtype][:2]
    print(f"\n### rms_norm_dynamic_per_token_quant\n\n{torch.cuda.get_device_name()}; bf16 input, out_dtype "
          f"{out_dtype}; bytes moved: x read, residual read and written (with residual), out and scale written; "
          "copy = torch copy_ of x; composition / op: above 1, the op is faster\n")
    print("| input | D | residual | torch: op us | op / copy | CUDA graph: op / copy | composition / op "
          "| torch.compile composition / op | JAX: op us | op / copy | jnp composition / op |")
    print("| ---: | ---: | :---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for mib in MIB:
        for d in WIDTHS:
            for with_residual in (False, True):
                rows = (mib << 20) // (2 * d)
                x = torch.randn(rows, d, device="cuda", dtype=torch.bfloat16)
                x *= torch.exp2(torch.randint(-8, 9, (rows, 1), device="cuda")).to(torch.bfloat16)
                weight = (torch.rand(d, device="cuda") + 0.5).to(torch.bfloat16)
                residual = torch.randn(rows, d, device="cuda", dtype=torch.bfloat16) if with_residual else None

                def jax_copy(t):
                    return None if t is None else jax.device_put(jnp.asarray(t.float().cpu().numpy(), jnp.bfloat16),
                                                                 gpu)

                def fresh(t):
                    return None if t is None else t.clone()

                def ours(x=x, weight=weight, residual=residual):
                    return tops.rms_norm_dynamic_per_token_quant(x, weight, None, residual, eps=EPS, out_dtype=dtype)

                torch._dynamo.reset()  # a graph of its own for each shape, whatever the recompile limit
                compiled = torch.compile(torch_rms_quant, dynamic=False)
                jax_ours = jax.jit(lambda x, w, r: jops.rms_norm_dynamic_per_token_quant(
                    x, w, None, r, eps=EPS, out_dtype=jdtype), donate_argnums=(2,) if with_residual else ())
                jax_base = jax.jit(lambda x, w, r: jnp_rms_quant(x, w, r, out_dtype),
                                   donate_argnums=(2,) if with_residual else ())

                # The results first, each call on a residual of its own.
                r_base, r_ours, r_compiled = fresh(residual), fresh(residual), fresh(residual)
                base = as_numpy(*torch_rms_quant(x, weight, r_base, out_dtype), r_base)
                agree_rms(as_numpy(*ours(residual=r_ours)[:2], r_ours), base, out_dtype)
                agree_rms(as_numpy(*compiled(x, weight, r_compiled, out_dtype), r_compiled), base, out_dtype)
                xj, wj = jax_copy(x), jax_copy(weight)
                agree_rms(as_numpy(*jax_ours(xj, wj, jax_copy(residual))),
                          as_numpy(*jax_base(xj, wj, jax_copy(residual))), out_dtype)
                del base, r_base, r_ours, r_compiled

                moved = rows * d * (2 + (4 if with_residual else 0) + 1) + rows * 4 + d * 2
                copy_dst = torch.empty_like(x)
                t_copy = torch_us(lambda: copy_dst.copy_(x), args.calls, args.rounds)
                copy_gbps = 2 * rows * d * 2 / t_copy / 1e3
                t_ours = torch_us(ours, args.calls, args.rounds)
                t_graph = torch_graph_us(ours, args.calls, args.rounds)
                t_base = torch_us(lambda: torch_rms_quant(x, weight, residual, out_dtype), args.calls, args.rounds)
                t_compiled = torch_us(lambda: compiled(x, weight, residual, out_dtype), args.calls, args.rounds)
                t_jax = jax_donating_us(jax_ours, xj, wj, jax_copy(residual), args.calls, args.rounds)
                t_jax_base = jax_donating_us(jax_base, xj, wj, jax_copy(residual), args.calls, args.rounds)

                def of_copy(us):
                    return moved / us / 1e3 / copy_gbps

                print(f"| {mib} MiB | {d} | {'yes' if with_residual else 'no'} | {t_ours:.1f} | {of_copy(t_ours):.2f} "
                      f"| {of_copy(t_graph):.2f} | {t_base / t_ours:.2f} | {t_compiled / t_ours:.2f} "
                      f"| {t_jax:.1f} | {of_copy(t_jax):.2f} | {t_jax_base / t_jax:.2f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", nargs="+", choices=["fp8_quant", "rms_norm_quant"],
                        default=["fp8_quant", "rms_norm_quant"])
    parser.add_argument("--out-dtype", choices=list(OUT), default="float8_e4m3fn",
                        help="rms_norm_dynamic_per_token_quant's out_dtype")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    if not gpu_available():
        print("bench_quant: no GPU visible to both torch and JAX; nothing to time")
        return 0
    if "fp8_quant" in args.ops:
        fp8_quant_table(args)
    if "rms_norm_quant" in args.ops:
        rms_norm_quant_table(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
