"""merge_attn_states (vLLM's merge of two partial attention results by their
log-sum-exps) on the GPU, bf16 [N, H, D] heads with H = 32, D = 128 and N in
{4096, 16384} tokens (64 and 256 MiB of partial outputs), output_lse asked
for (--no-lse: not), against the frameworks' own composition in the same
process. Prints a Markdown table, a row per route, of the time per call and
the bandwidth (bytes of both partial outputs and lse read, of output and
output_lse written, over the time) as a fraction of a device copy that moves
as many bytes (torch.Tensor.copy_ of half of them: it reads and writes each):
  - the op through torch: eager (CUDA events around back-to-back calls) and
    replayed from a CUDA graph (the GPU's time, without the host's dispatch);
  - torch's composition (torch.where, exp, log, the weighted sum in f32, as
    vLLM's reference is written), eager and through torch.compile;
  - the op and the jnp composition through jax.jit (host time to
    block_until_ready over back-to-back calls: at these sizes a call moves
    tens of MB, so the host's dispatch is hidden).
The inputs hold empty parts (lse -inf or +inf, some rows both), and every
route's results are checked against torch's composition before any timing.
Without a GPU it prints why and exits 0.

  python bench/bench_merge_attn_states.py [--tokens 4096 16384] [--calls 20] [--rounds 7] [--no-lse]
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

HEADS, HEAD_SIZE = 32, 128


def gpu_available() -> bool:
    try:
        return torch.cuda.is_available() and bool(jax.devices("gpu"))
    except RuntimeError:
        return False


def torch_composition(po, pl, so, sl, with_lse=True):
    """The merge in torch ops: +inf lse as -inf; where both are -inf, the
    prefix's output and -inf. The lse is None unless `with_lse`."""
    inf = float("inf")
    pl, sl = torch.where(pl == inf, -inf, pl), torch.where(sl == inf, -inf, sl)
    m = torch.maximum(pl, sl)
    empty = m == -inf
    shift = torch.where(empty, 0.0, m)
    a, b = torch.exp(pl - shift), torch.exp(sl - shift)
    total = a + b
    wa, wb = ((w / total).T.unsqueeze(-1) for w in (a, b))
    out = torch.where(empty.T.unsqueeze(-1), po.float(), po.float() * wa + so.float() * wb).to(po.dtype)
    return out, torch.log(total) + shift if with_lse else None


def jnp_composition(po, pl, so, sl, with_lse=True):
    """The same in jnp."""
    pl, sl = jnp.where(pl == jnp.inf, -jnp.inf, pl), jnp.where(sl == jnp.inf, -jnp.inf, sl)
    m = jnp.maximum(pl, sl)
    empty = m == -jnp.inf
    shift = jnp.where(empty, 0.0, m)
    a, b = jnp.exp(pl - shift), jnp.exp(sl - shift)
    total = a + b
    wa, wb = ((w / total).T[..., None] for w in (a, b))
    po32, so32 = po.astype(jnp.float32), so.astype(jnp.float32)
    out = jnp.where(empty.T[..., None], po32, po32 * wa + so32 * wb).astype(po.dtype)
    return out, jnp.log(total) + shift if with_lse else None


def inputs(n, gen):
    """bf16 partial outputs, f32 lse of spread 3; token 0 has an empty prefix
    (-inf), token 1 an empty suffix (+inf, as FlashAttention 2 reports it),
    token 2 both, and one head in every 7th token an empty prefix."""
    po, so = (torch.randn(n, HEADS, HEAD_SIZE, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
    pl, sl = (3 * torch.randn(HEADS, n, device="cuda", generator=gen) for _ in range(2))
    pl[:, 0] = -torch.inf
    sl[:, 1] = torch.inf
    pl[:, 2], sl[:, 2] = -torch.inf, -torch.inf
    pl[5, ::7] = -torch.inf
    return po, pl, so, sl


def agree(what, out, lse, want_out, want_lse):
    """`out` and `lse` (torch or JAX arrays) against torch's composition: the
    output to bf16's rounding, the lse to f32's, -inf where it has -inf."""
    out, want_out = np.asarray(out, np.float32), want_out.float().cpu().numpy()
    error = np.linalg.norm(out - want_out) / np.linalg.norm(want_out)
    assert error < 1e-2, f"{what}: output differs from torch's composition by {error:.3g}"
    if lse is not None:
        lse, want_lse = np.asarray(lse, np.float32), want_lse.cpu().numpy()
        np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(want_lse), err_msg=f"{what}: lse -inf")
        finite = np.isfinite(want_lse)
        np.testing.assert_allclose(lse[finite], want_lse[finite], rtol=1e-5, atol=1e-5, err_msg=f"{what}: lse")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-lse", dest="lse", action="store_false", help="do not ask for output_lse")
    args = parser.parse_args()
    if not gpu_available():
        print("bench_merge_attn_states: no GPU visible to both torch and JAX; nothing to time")
        return 0
    import opgen_ops.jax as jops
    import opgen_ops.torch as tops

    lse_asked = args.lse
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, jax {jax.__version__}; bf16 [N, {HEADS}, "
          f"{HEAD_SIZE}], output_lse {'asked for' if lse_asked else 'not asked for'}; GB/s counts both partial "
          "outputs and lse read, the output (and output_lse) written; copy = torch copy_ moving as many bytes\n")
    print("| N | partial outputs MiB | route | us per call | GB/s | / copy |")
    print("| ---: | ---: | --- | ---: | ---: | ---: |")
    compiled = torch.compile(lambda *a: torch_composition(*a, with_lse=lse_asked), fullgraph=True, dynamic=False)
    jax_ours = jax.jit(lambda *a: jops.merge_attn_states(*a, return_output_lse=lse_asked))
    jax_base = jax.jit(lambda *a: jnp_composition(*a, with_lse=lse_asked))
    for n in args.tokens:
        gen = torch.Generator(device="cuda").manual_seed(n)
        po, pl, so, sl = inputs(n, gen)
        jargs = tuple(jax.dlpack.from_dlpack(t) for t in (po, pl, so, sl))

        def ours():
            return tops.merge_attn_states(po, pl, so, sl, return_output_lse=lse_asked)

        def base():
            return torch_composition(po, pl, so, sl, with_lse=lse_asked)

        def base_compiled():
            return compiled(po, pl, so, sl)

        want_out, want_lse = torch_composition(po, pl, so, sl)
        for what, (out, lse) in (("torch op", ours()), ("torch.compile composition", base_compiled()),
                                 ("jax op", jax_ours(*jargs)), ("jnp composition", jax_base(*jargs))):
            agree(what, out.float().cpu() if isinstance(out, torch.Tensor) else out,
                  (lse.cpu() if isinstance(lse, torch.Tensor) else lse) if lse_asked else None, want_out, want_lse)
        assert lse_asked or ours()[1] is None
        del want_out, want_lse

        tokens_heads = n * HEADS
        moved = 3 * tokens_heads * HEAD_SIZE * 2 + 2 * tokens_heads * 4 + (tokens_heads * 4 if lse_asked else 0)
        src = torch.empty(moved // 4, dtype=torch.bfloat16, device="cuda").normal_(generator=gen)
        dst = torch.empty_like(src)
        t_copy = torch_us(lambda: dst.copy_(src), args.calls, args.rounds)  # moves 2 * (moved // 4) * 2 bytes
        del src, dst
        times = {
            "op, torch eager": torch_us(ours, args.calls, args.rounds),
            "op, torch CUDA graph": torch_graph_us(ours, args.calls, args.rounds),
            "torch composition, eager": torch_us(base, args.calls, args.rounds),
            "torch composition, torch.compile": torch_us(base_compiled, args.calls, args.rounds),
            "op, jax.jit": jax_us(jax_ours, jargs, args.calls, args.rounds),
            "jnp composition, jax.jit": jax_us(jax_base, jargs, args.calls, args.rounds),
        }
        mib = 2 * tokens_heads * HEAD_SIZE * 2 / 2**20
        print(f"| {n} | {mib:.0f} | device copy | {t_copy:.1f} | {moved / t_copy / 1e3:.0f} | 1.00 |")
        for route, us in times.items():
            print(f"| {n} | {mib:.0f} | {route} | {us:.1f} | {moved / us / 1e3:.0f} | {t_copy / us:.2f} |",
                  flush=True)
        del po, pl, so, sl, jargs
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
