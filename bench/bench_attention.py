"""The LLM ops at the memory roofline, on the GPU, against baselines run in
the same process. Prints one table per op with the time per call, the bytes
the op must move, the bandwidth that makes and its ratio to a device copy
(torch's clone of as many bytes: reads plus writes over time).

  paged_attention_decode (bf16, H=32, KVH=8, Dh=128, BS=16) at batch 1, 8,
      64, 256 x context 512, 4096, 32768, as a Markdown table; the bandwidth
      counts the bytes of K, V, query and output moved:
      - opgen through PyTorch, eager and replayed from a CUDA graph (the
        kernels' own time), against gather + SDPA, eager (the blocks
        gathered with index_select, then scaled_dot_product_attention with a
        length mask);
      - opgen through JAX (api_version 4) against Pallas's GPU
        paged_attention (jax.experimental.pallas.ops.gpu), whose cache
        layout [KVH, pages, page, Dh] is transposed once, outside the timing:
        each as --calls chained calls in one jitted program (jax_chained_us),
        so that both columns compare the kernels and not JAX's dispatch.
      Results are compared with each other before timing. The baselines run
      up to --baseline-gib of KV (they need copies of it).
  rotary_embedding (NeoX, bf16, query [N, 32*128], key [N, 8*128], in place)
      and fused_add_rms_norm (bf16, [N, 4096], both in place) through PyTorch:
      bytes read plus written against a copy of as many bytes, timed right
      after the op (the GPU's state after the attention runs affects both).

Times are medians over --rounds of --calls calls (CUDA events for PyTorch;
host time to block_until_ready for JAX).

  paged_attention_decode on an fp8 cache (kv_cache_dtype "fp8") against the
      bf16 cache it was written from (--fp8-shapes; --fp8-only for that
      table alone).

  python bench/bench_attention.py [--calls 20] [--rounds 7] [--quick] [--shapes 8x32768,...] [--baseline-gib 8]
                                  [--fp8-shapes 16x32768,256x4096] [--fp8-only]
"""

import argparse
import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch and JAX share the GPU

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import opgen_ops.jax as jops  # noqa: E402
import opgen_ops.torch as tops  # noqa: E402
from gpu_timing import copy_gbps, jax_chained_us, row, torch_graph_us, torch_us  # noqa: E402 (beside this file)


def gather_sdpa(q, k_cache, v_cache, tables, lens, scale):
    """PyTorch without a paged kernel: gather each sequence's blocks, then
    SDPA over the padded contexts with a mask of each one's length."""
    s, h, dh = q.shape
    _, bs, kvh, _ = k_cache.shape
    k = k_cache.index_select(0, tables.flatten()).view(s, -1, kvh, dh).transpose(1, 2)
    v = v_cache.index_select(0, tables.flatten()).view(s, -1, kvh, dh).transpose(1, 2)
    mask = torch.arange(k.shape[2], device=q.device)[None, :] < lens[:, None]
    out = F.scaled_dot_product_attention(q[:, :, None, :], k, v, attn_mask=mask[:, None, None, :], scale=scale,
                                         enable_gqa=True)
    return out[:, :, 0, :]


def bench_paged_attention(args, seqs, context, copy):
    """One row of the table: each implementation's time and its bandwidth
    (bytes of K, V, query and output moved / time) over the copy's."""
    h, kvh, dh, bs = 32, 8, 128, 16
    blocks_per_seq = context // bs
    nb = seqs * blocks_per_seq
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(seqs, h, dh, device="cuda", dtype=torch.bfloat16, generator=g)
    k_cache = torch.randn(nb, bs, kvh, dh, device="cuda", dtype=torch.bfloat16, generator=g)
    v_cache = torch.randn(nb, bs, kvh, dh, device="cuda", dtype=torch.bfloat16, generator=g)
    tables = torch.randperm(nb, device="cuda", generator=g).to(torch.int32).view(seqs, blocks_per_seq)
    lens = torch.full((seqs,), context, dtype=torch.int32, device="cuda")
    scale = dh ** -0.5
    kv_bytes = 2 * seqs * context * kvh * dh * 2
    moved = kv_bytes + 2 * q.numel() * 2
    cells = {}

    def measure(name, us):
        cells[name] = us
        return us

    ours = tops.paged_attention_decode(q, k_cache, v_cache, tables, lens, scale=scale)
    call = lambda: tops.paged_attention_decode(q, k_cache, v_cache, tables, lens, scale=scale)  # noqa: E731
    measure("opgen torch", torch_us(call, args.calls, args.rounds))
    measure("opgen graph", torch_graph_us(call, args.calls, args.rounds))
    # JAX sees the same device memory (DLPack), so no copy of the cache.
    jq, jk, jv, jt, jl = (jax.dlpack.from_dlpack(x) for x in (q, k_cache, v_cache, tables, lens))
    mine = jax.jit(lambda *a: jops.paged_attention_decode(*a, scale=scale))
    measure("opgen jax", jax_chained_us(lambda *a: jops.paged_attention_decode(*a, scale=scale), jq, (jk, jv, jt, jl),
                                        args.calls, args.rounds))
    if kv_bytes <= args.baseline_gib * 2**30:
        theirs = gather_sdpa(q, k_cache, v_cache, tables.long(), lens, scale)
        err = ((ours.float() - theirs.float()).norm() / theirs.float().norm()).item()
        assert err < 2e-2, f"opgen and gather+SDPA disagree: {err:.3g}"
        del theirs
        measure("gather+SDPA", torch_us(lambda: gather_sdpa(q, k_cache, v_cache, tables.long(), lens, scale),
                                        args.calls, args.rounds))
        from jax.experimental.pallas.ops.gpu.paged_attention import paged_attention as pallas_paged
        k_pages, v_pages = jnp.transpose(jk, (2, 0, 1, 3)), jnp.transpose(jv, (2, 0, 1, 3))  # Pallas's layout
        pallas = lambda q, kp, vp, t, n: pallas_paged(q * jnp.asarray(scale, q.dtype), kp, vp, t, n)  # noqa: E731
        a, b = mine(jq, jk, jv, jt, jl), jax.jit(pallas)(jq, k_pages, v_pages, jt, jl)
        err = float(jnp.linalg.norm((a - b).astype(jnp.float32)) / jnp.linalg.norm(b.astype(jnp.float32)))
        assert err < 2e-2, f"opgen and Pallas disagree: {err:.3g}"
        measure("Pallas", jax_chained_us(pallas, jq, (k_pages, v_pages, jt, jl), args.calls, args.rounds))
        del k_pages, v_pages, a, b
    row = [f"{seqs} x {context}", f"{kv_bytes / 2**20:.0f}"]
    for name in ("opgen torch", "opgen graph", "gather+SDPA", "opgen jax", "Pallas"):
        us = cells.get(name)
        row.append("—" if us is None else f"{us:.1f} µs, {moved / us / 1e3 / copy:.2f}x")
    # Each baseline against opgen in the same framework, timed the same way.
    for name, ours in (("gather+SDPA", "opgen torch"), ("Pallas", "opgen jax")):
        row.append("—" if name not in cells else f"{cells[name] / cells[ours]:.2f}")
    print("| " + " | ".join(row) + " |", flush=True)


def bench_fp8_decode(args, seqs, context, copy):
    """One row of the fp8 table: the decode on the bf16 cache and on the same
    cache written in fp8 by reshape_and_cache (kv_cache_dtype "fp8", one scale
    per cache), both replayed from CUDA graphs; the fp8 call's bandwidth over
    the fp8 bytes it moves, and how far its output lies from the bf16 call's."""
    h, kvh, dh, bs = 32, 8, 128, 16
    nb = seqs * (context // bs)
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(seqs, h, dh, device="cuda", dtype=torch.bfloat16, generator=g)
    caches = [torch.randn(nb, bs, kvh, dh, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2)]
    tables = torch.randperm(nb, device="cuda", generator=g).to(torch.int32).view(seqs, -1)
    lens = torch.full((seqs,), context, dtype=torch.int32, device="cuda")
    scales = [c.abs().amax().float() / 448 for c in caches]  # each cache's largest value maps to e4m3fn's 448
    fp8 = [torch.empty(c.shape, device="cuda", dtype=torch.float8_e4m3fn) for c in caches]
    tops.reshape_and_cache(*(c.view(nb * bs, kvh, dh) for c in caches), *fp8, torch.arange(nb * bs, device="cuda"),
                           *scales, kv_cache_dtype="fp8")
    scale = dh ** -0.5
    bf16_call = lambda: tops.paged_attention_decode(q, *caches, tables, lens, scale=scale)  # noqa: E731
    fp8_call = lambda: tops.paged_attention_decode(q, *fp8, tables, lens, *scales, scale=scale,  # noqa: E731
                                                   kv_cache_dtype="fp8")
    a, b = bf16_call().float(), fp8_call().float()
    err = ((a - b).norm() / a.norm()).item()
    t_bf16 = torch_graph_us(bf16_call, args.calls, args.rounds)
    t_fp8 = torch_graph_us(fp8_call, args.calls, args.rounds)
    q_bytes = 2 * q.numel() * 2
    fp8_bytes = 2 * seqs * context * kvh * dh + q_bytes
    bf16_bytes = 2 * seqs * context * kvh * dh * 2 + q_bytes
    print(f"| {seqs} x {context} | {fp8_bytes / 2**20:.0f} | {t_bf16:.1f} µs, {bf16_bytes / t_bf16 / 1e3 / copy:.2f}x "
          f"| {t_fp8:.1f} µs, {fp8_bytes / t_fp8 / 1e3 / copy:.2f}x | {t_bf16 / t_fp8:.2f} | {err:.2e} |", flush=True)


def bench_rotary(args, n):
    h, kvh, dh = 32, 8, 128
    positions = torch.randint(0, 8192, (n,), device="cuda")
    cache = torch.randn(8192, dh, device="cuda", dtype=torch.bfloat16)
    q = torch.randn(n, h * dh, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(n, kvh * dh, device="cuda", dtype=torch.bfloat16)
    moved = 2 * (q.numel() + k.numel()) * 2
    print(f"rotary_embedding bf16: {n} tokens, {(q.numel() + k.numel()) / 2**20:.0f} Mi elements")
    t = torch_us(lambda: tops.rotary_embedding(positions, q, cache, k, head_size=dh), args.calls, args.rounds)
    row("opgen (torch, in place)", t, moved, copy_gbps(moved // 2, args.calls, args.rounds))


def bench_fused_norm(args, n, d):
    x = torch.randn(n, d, device="cuda", dtype=torch.bfloat16)
    residual = torch.randn(n, d, device="cuda", dtype=torch.bfloat16)
    weight = torch.rand(d, device="cuda", dtype=torch.bfloat16)
    moved = 4 * x.numel() * 2
    print(f"fused_add_rms_norm bf16: [{n}, {d}], {x.numel() / 2**20:.0f} Mi elements")
    t = torch_us(lambda: tops.fused_add_rms_norm(x, residual, weight), args.calls, args.rounds)
    row("opgen (torch, in place)", t, moved, copy_gbps(moved // 2, args.calls, args.rounds))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="one configuration of each")
    ap.add_argument("--shapes", help="sequences x context of paged attention, e.g. 8x32768,64x4096")
    ap.add_argument("--fp8-shapes", default="16x32768,256x4096",
                    help="sequences x context of the fp8 cache's table ('' for none)")
    ap.add_argument("--fp8-only", action="store_true", help="the fp8 cache's table alone")
    ap.add_argument("--baseline-gib", type=float, default=8.0,
                    help="run the baselines (which copy or gather the cache) up to this much KV")
    args = ap.parse_args()
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, jax {jax.__version__}")
    copy = copy_gbps(512 * 2**20, args.calls, args.rounds)
    print(f"device copy (512 MiB clone): {copy:.0f} GB/s\n")
    if args.fp8_shapes:
        print("paged_attention_decode on an fp8 cache (kv_cache_dtype 'fp8', e4m3fn, k_scale and v_scale) against")
        print("the bf16 cache it was written from, H 32, KVH 8, Dh 128, BS 16, both from CUDA graphs: time per call")
        print("and bandwidth over the copy's (each over the bytes it moves); the speedup; the fp8 output's relative")
        print("distance from the bf16 one (norm of the difference over the norm).\n")
        print("| sequences x context | fp8 KV MiB | bf16 cache | fp8 cache | bf16 / fp8 | distance |")
        print("| --- | --- | --- | --- | --- | --- |")
        for shape in args.fp8_shapes.split(","):
            bench_fp8_decode(args, *(int(v) for v in shape.split("x")), copy)
            torch.cuda.empty_cache()
        print()
    if args.fp8_only:
        return
    print("paged_attention_decode, bf16, H 32, KVH 8, Dh 128, BS 16: time per call and bandwidth over the copy's;")
    print("PyTorch eager and from a CUDA graph, JAX as chained calls in one jit; the last two columns: the")
    print("baseline's time over opgen's in the same framework. — : not run (memory).\n")
    print("| sequences x context | KV MiB | opgen (torch) | opgen (torch, graph) | gather + SDPA (torch) "
          "| opgen (jax) | Pallas (jax) | SDPA / opgen | Pallas / opgen |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    shapes = [(b, c) for b in (1, 8, 64, 256) for c in (512, 4096, 32768)]
    if args.shapes:
        shapes = [tuple(int(v) for v in shape.split("x")) for shape in args.shapes.split(",")]
    elif args.quick:
        shapes = [(8, 4096)]
    for seqs, context in shapes:
        bench_paged_attention(args, seqs, context, copy)
        torch.cuda.empty_cache()
    print()
    for n in ([16384] if args.quick else [4096, 16384]):
        bench_rotary(args, n)
    for n in ([4096] if args.quick else [4096, 16384]):
        bench_fused_norm(args, n, 4096)


if __name__ == "__main__":
    main()
