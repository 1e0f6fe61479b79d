"""A small Llama-architecture model decoding greedily in PyTorch with opgen_ops'
generated ops, called as vLLM calls its own: in place, on column views of the qkv
projection, with no copies. It is checked in f32 against the same model written with
torch alone, eager and (on the GPU) replayed from a CUDA graph; on the GPU it then
times both in bf16. With --kv-cache-dtype fp8 it also decodes over fp8 KV caches
(float8_e4m3fn, with per-layer scales), checks them against the reference over the same
caches and against the float32 caches (README.md), and times them on the GPU.

  python examples/decode_step/llama_torch.py [cpu|cuda] [--kv-cache-dtype fp8]
  torchrun --nproc-per-node N examples/decode_step/llama_torch.py [cpu|cuda]

Under torchrun every rank also decodes tensor-parallel (tensor_parallel(): its own heads, kv heads
of the caches and part of the MLP, two all-reduces a layer), checks it against the one-device
decoder and times it against one device; rank 0 prints. One GPU a rank (NCCL), or gloo on the CPU.

Sizes, weights and the starting state come from llama_inputs.py, shared with llama_jax.py.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

import opgen_ops.torch as tops
from llama_inputs import (CPU, EPS, GPU, KV_CACHE_DTYPES, SCALES, by_shard, check, check_same,  # beside this file
                          kv_cache_dtype_of, layer_scales, make_model, print_timing, quantized_state)


def step(w, st, all_reduce=None):
    """One greedy decode step with the generated ops. Updates the state in place (the caches at each
    sequence's new position, the tokens, the context lengths) and returns the logits [S, V]. It
    launches everything on the current stream and never synchronises: a CUDA graph can capture it.
    On one rank of a tensor-parallel group, w and st are the rank's shards (tensor_parallel()): its
    block of qkv's and up_gate's columns, its rows of o and down, its kv heads of the caches; the
    step is the same, on fewer heads, and `all_reduce` (in place) sums the row-parallel products.
    Caches of fp8 (quantized_state()) hold the keys and values divided by the layer's scales: the step
    passes the ops the kv_cache_dtype its caches are, and the scales."""
    tokens, ctx, block_tables = st["tokens"], st["context_lens"], st["block_tables"]
    _, bs, kvh, dh = st["key_caches"][0].shape
    s = tokens.shape[0]
    kv_cache_dtype = kv_cache_dtype_of(str(st["key_caches"][0].dtype).removeprefix("torch."))
    # The new token's slot: row ctx % BS of the sequence's block block_tables[s, ctx // BS].
    slots = block_tables.gather(1, (ctx // bs).long()[:, None])[:, 0] * bs + ctx % bs
    lens = ctx + 1  # each sequence attends to its context and the new token
    residual = w["embed"][tokens]
    out = None  # the previous layer's MLP output, not yet added to the residual
    for lw, key_cache, value_cache, (k_scale, v_scale) in zip(w["layers"], st["key_caches"], st["value_caches"],
                                                               layer_scales(st)):
        if out is None:
            h, _rstd = tops.rms_norm(residual, lw["norm1"])
        else:  # residual += out; out = rms_norm(residual) * norm1, both in place
            tops.fused_add_rms_norm(out, residual, lw["norm1"])
            h = out
        qkv = h @ lw["qkv"]
        # Column views of qkv, whose rows are strided by its width: every op below takes them as they are.
        q, k, v = qkv.split([qkv.shape[-1] - 2 * kvh * dh, kvh * dh, kvh * dh], dim=-1)
        tops.rotary_embedding(ctx, q, w["cos_sin"], k, head_size=dh, is_neox=True)  # rotates q, k inside qkv
        tops.reshape_and_cache(k.view(s, kvh, dh), v.view(s, kvh, dh), key_cache, value_cache, slots, k_scale,
                               v_scale, kv_cache_dtype=kv_cache_dtype)
        attn = tops.paged_attention_decode(q.view(s, -1, dh), key_cache, value_cache, block_tables, lens, k_scale,
                                           v_scale, scale=dh**-0.5, kv_cache_dtype=kv_cache_dtype)
        out = attn.view(s, -1) @ lw["o"]
        if all_reduce:
            all_reduce(out)
        tops.fused_add_rms_norm(out, residual, lw["norm2"])
        # SwiGLU: up_gate's first half (up) times silu of its second half (gate); on a rank, its block's halves.
        out = tops.glu(out @ lw["up_gate"], activation="silu") @ lw["down"]
        if all_reduce:
            all_reduce(out)
    tops.fused_add_rms_norm(out, residual, w["norm"])
    logits = out @ w["lm_head"]
    tokens.copy_(logits.argmax(-1))
    ctx.add_(1)
    return logits


def rms_norm_ref(x, weight):
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + EPS) * weight


def rotary_ref(positions, x, cos_sin, dh):
    """NeoX rotary: dimension i of each head pairs with i + Dh/2."""
    cos, sin = cos_sin[positions][:, None, :].chunk(2, dim=-1)  # [S, 1, Dh/2]
    x1, x2 = x.reshape(x.shape[0], -1, dh).chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).reshape(x.shape)


def cached(x, scale, dtype):
    """x as a cache of `dtype` holds it: x itself where there is no scale (the cache is of the model's
    dtype); else x / scale rounded to the nearest value of dtype (ties to even: torch's cast) and saturated
    to its finite range (torch's cast alone would give NaN past it), as reshape_and_cache writes it."""
    if scale is None:
        return x
    largest = torch.finfo(dtype).max
    return (x / scale).clamp(-largest, largest).to(dtype)


def held(cache, scale):
    """What a cache of cached()'s holds, in float32: its values times the scale."""
    return cache if scale is None else cache.float() * scale


def attention_ref(q, key_cache, value_cache, block_tables, lens, scale, k_scale=None, v_scale=None):
    """Gathers each sequence's blocks in order and attends over its first lens[s] tokens: over the keys and
    values the caches hold (held())."""
    s, h, dh = q.shape
    _, _, kvh, _ = key_cache.shape
    # (held() before the gather: torch's CPU indexing has no float8.)
    keys = held(key_cache, k_scale)[block_tables.long()].reshape(s, -1, kvh, dh)  # [S, MB*BS, KVH, Dh]
    values = held(value_cache, v_scale)[block_tables.long()].reshape(s, -1, kvh, dh)
    # Query head h reads kv head h // (H // KVH): group the query heads by their kv head.
    logits = torch.einsum("skgd,stkd->skgt", q.reshape(s, kvh, h // kvh, dh), keys) * scale
    past = torch.arange(keys.shape[1], device=q.device) >= lens[:, None, None, None]
    out = torch.einsum("skgt,stkd->skgd", logits.masked_fill(past, -torch.inf).softmax(-1), values)
    return out.reshape(s, h, dh)


def reference_step(w, st):
    """The same step as the textbook pre-norm Llama block, with torch alone, in f32. With fp8 caches, it
    writes the new keys and values as cached() rounds them and attends over what the caches hold (held())."""
    tokens, ctx, block_tables = st["tokens"], st["context_lens"], st["block_tables"]
    _, bs, kvh, dh = st["key_caches"][0].shape
    s, (_, d) = tokens.shape[0], w["embed"].shape
    positions = ctx.long()
    block, row = block_tables.gather(1, (positions // bs)[:, None])[:, 0].long(), positions % bs
    x = w["embed"][tokens]
    for lw, key_cache, value_cache, (k_scale, v_scale) in zip(w["layers"], st["key_caches"], st["value_caches"],
                                                               layer_scales(st)):
        q, k, v = (rms_norm_ref(x, lw["norm1"]) @ lw["qkv"]).split([d, kvh * dh, kvh * dh], dim=-1)
        q, k = rotary_ref(positions, q, w["cos_sin"], dh), rotary_ref(positions, k, w["cos_sin"], dh)
        key_cache[block, row] = cached(k.reshape(s, kvh, dh), k_scale, key_cache.dtype)
        value_cache[block, row] = cached(v.reshape(s, kvh, dh), v_scale, value_cache.dtype)
        attn = attention_ref(q.reshape(s, -1, dh), key_cache, value_cache, block_tables, ctx + 1, dh**-0.5,
                             k_scale, v_scale)
        x = x + attn.reshape(s, d) @ lw["o"]
        up, gate = (rms_norm_ref(x, lw["norm2"]) @ lw["up_gate"]).chunk(2, dim=-1)
        x = x + (up * F.silu(gate)) @ lw["down"]
    logits = rms_norm_ref(x, w["norm"]) @ w["lm_head"]
    tokens.copy_(logits.argmax(-1))
    ctx.add_(1)
    return logits


def tree_map(f, tree, key=None):
    """f(key, leaf) for each leaf of a tree of dicts and lists, key the last dict key on its path."""
    if isinstance(tree, dict):
        return {k: tree_map(f, v, k) for k, v in tree.items()}
    if isinstance(tree, list):
        return [tree_map(f, v, key) for v in tree]
    return f(key, tree)


def cast(tree, dtype):
    """The tree's float32 tensors as `dtype`: the weights and the caches of the model's dtype, not the fp8
    caches nor their scales (SCALES: float32 whatever the model's dtype, as the ops take them)."""
    return tree_map(lambda key, t: t.to(dtype) if t.dtype == torch.float32 and key not in SCALES else t, tree)


def to_device(tree, device, dtype=torch.float32):
    """Copies numpy arrays to `device`, as cast() casts them. Always a copy: the steps write into the
    caches, and the numpy arrays are shared."""
    def one(_, a):
        if a.dtype.type.__module__ == "ml_dtypes":  # an fp8 cache: torch.from_numpy takes its bytes, not its dtype
            return torch.from_numpy(a.view(np.uint8)).to(device, copy=True).view(getattr(torch, a.dtype.name))
        return torch.from_numpy(np.asarray(a)).to(device, copy=True)
    return cast(tree_map(one, tree), dtype)


def fresh_state(state, device, dtype):
    st = to_device(state, device, dtype)
    st["tokens"] = st["tokens"].long()  # the dtype argmax gives
    return st


def start_of(state, device):
    """What reset() puts back: the first tokens (int64, as argmax gives) and the initial context lengths."""
    return {"tokens": torch.from_numpy(state["tokens"]).long().to(device),
            "context_lens": torch.from_numpy(state["context_lens"]).to(device)}


def reset(st, start):
    """Back to the first step: the first tokens and the initial context lengths. The caches need no
    reset: a step writes the slot at each sequence's position before it attends to it, so what earlier
    runs left past the initial context is overwritten before it is read."""
    st["tokens"].copy_(start["tokens"])
    st["context_lens"].copy_(start["context_lens"])


def decode(run_step, st, steps, inputs=None):
    """Runs `steps` greedy steps; returns the tokens [T, S] and logits [T, S, V] as numpy arrays.
    inputs [T, S]: the tokens to feed each step instead of the previous step's choice (teacher forcing)."""
    tokens, logits = [], []
    for t in range(steps):
        if inputs is not None:
            st["tokens"].copy_(torch.from_numpy(inputs[t]))
        # Copies: on the CPU .numpy() would share the buffers that the next step overwrites.
        logits.append(run_step().float().cpu().numpy().copy())
        tokens.append(st["tokens"].cpu().numpy().copy())
    return np.stack(tokens), np.stack(logits)


def capture(run_step, st, start):
    """Records one step (run_step(), which returns the logits) into a CUDA graph, as torch's docs say:
    warm up on a side stream first (cuBLAS picks its kernels and allocates its workspace there, not
    during the capture). Returns a function that replays the graph and returns its logits (a static
    buffer). Leaves the state st at the first step."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            run_step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        logits = run_step()  # recorded, not run
    reset(st, start)

    def replay():
        graph.replay()
        return logits
    return replay


def seconds_per_step(run_step, st, start, steps, sync, repeats=3):
    """Per step, the best of `repeats` decodes of `steps` steps from the first step, after one more that
    warms up (the first calls pick cuBLAS kernels and fill the caching allocator)."""
    times = []
    for _ in range(repeats + 1):
        reset(st, start)
        sync()
        begin = time.perf_counter()
        for _ in range(steps):
            run_step()
        sync()
        times.append((time.perf_counter() - begin) / steps)
    reset(st, start)
    return min(times[1:])


# Megatron's layout, as llama_jax.PLACEMENT's: qkv and up_gate column-parallel (each rank projects onto
# its own heads and its part of the MLP: by_shard's blocks), o and down row-parallel (each rank's product is
# a partial sum: the step's all_reduce), the caches cut by kv heads; everything else whole on every rank.
PLACEMENT = {"qkv": Shard(1), "up_gate": Shard(1), "o": Shard(0), "down": Shard(0), "key_caches": Shard(2),
             "value_caches": Shard(2)}


def tensor_parallel(c, weights, state, mesh, dtype):
    """This rank's part of the decoder split over `mesh` (one dimension, a rank a device): the weights
    in by_shard's layout and the state, distributed as DTensors placed as PLACEMENT says (rank 0's
    values), of which the step takes the local tensors. It cannot take the DTensors: DTensor does not
    run ops that update an input in place (rotary_embedding, reshape_and_cache, fused_add_rms_norm),
    and its dispatch would cost more host time per op than the GPU's work at this size; on local
    tensors the step is the one-device step, on fewer heads, and a CUDA graph can capture it."""
    def local(tree, key=None):
        if isinstance(tree, dict):
            return {k: local(v, k) for k, v in tree.items()}
        if isinstance(tree, list):
            return [local(v, key) for v in tree]
        return distribute_tensor(tree, mesh, [PLACEMENT.get(key, Replicate())]).to_local()

    device = torch.device(mesh.device_type, torch.cuda.current_device() if mesh.device_type == "cuda" else None)
    return (local(to_device(by_shard(weights, c, mesh.size()), device, dtype)),
            local(fresh_state(state, device, dtype)))


def check_quantized_cache(c, device, w, st, state, start, q_state, kv_cache_dtype):
    """Decodes over the caches of q_state (quantized_state()'s: kv_cache_dtype's), eager and from a CUDA
    graph, and checks each decode (README.md) against the reference over what those caches hold (f32
    tolerance) and against the decoder over float32 caches (st) from the same tokens (c.fp8_tol).
    Returns whether every check passes."""
    q_st, ref_st = fresh_state(q_state, device, torch.float32), fresh_state(q_state, device, torch.float32)
    ok = True
    for name, run_step in runs(w, q_st, start, device.type == "cuda").items():
        reset(q_st, start)
        tokens, logits = decode(run_step, q_st, c.T)
        inputs = np.concatenate([state["tokens"][None].astype(np.int64), tokens[:-1]])
        reset(ref_st, start)
        _, ref_logits = decode(functools.partial(reference_step, w, ref_st), ref_st, c.T, inputs)
        ok &= check(f"torch {name}, {kv_cache_dtype} cache", device.type, tokens, logits, ref_logits, c.tol)
        reset(st, start)
        _, f32_logits = decode(functools.partial(step, w, st), st, c.T, inputs)
        ok &= check(f"torch {name}, {kv_cache_dtype} cache", device.type, tokens, logits, f32_logits, c.fp8_tol,
                    against="f32 cache's")
    print(f"  tokens of sequence 0, {kv_cache_dtype} cache: {tokens[:, 0].tolist()}")
    return ok


def runs(w, st, start, cuda, all_reduce=None):
    """The ways to run a step, by name: eager and, on the GPU, replayed from a CUDA graph."""
    found = {"eager": functools.partial(step, w, st, all_reduce)}
    if cuda:
        found["CUDA graph"] = capture(found["eager"], st, start)
    return found


def main(device: str | None = None, seed: int = 0, kv_cache_dtype: str = "auto") -> int:
    """Checks the decoder (make_model's of `seed`) against the reference on `device` ('cpu' or 'cuda';
    None: the GPU when torch has one), eager and, on the GPU, from a CUDA graph; on the GPU also times both
    in bf16. With kv_cache_dtype 'fp8' it does the same with fp8 caches (quantized_state()), checking them
    also against the decoder with float32 caches (README.md), and times them beside bf16's. Returns 0
    when every check passes. Started by torchrun with several ranks (WORLD_SIZE), each rank on its own
    device (GPU LOCAL_RANK; NCCL, or gloo on the CPU) does the same and also decodes tensor-parallel
    across the ranks, checks that it picks the one-device decoder's tokens, and times it; rank 0
    prints."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        if cuda:
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
            device = torch.device("cuda", torch.cuda.current_device())
        dist.init_process_group("nccl" if cuda else "gloo")
    threads = torch.get_num_threads()
    if not cuda:  # the CPU model's matmuls are too small to split: more threads only wait for each other
        torch.set_num_threads(1)
    try:
        with contextlib.redirect_stdout(sys.stdout if int(os.environ.get("RANK", "0")) == 0 else io.StringIO()):
            return run(device, cuda, world, seed, kv_cache_dtype)
    finally:
        torch.set_num_threads(threads)
        if cuda:  # hand the cached blocks back, for what runs next in this process (JAX, in run_examples.py)
            torch.cuda.empty_cache()
        if world > 1:
            dist.destroy_process_group()


def run(device, cuda, world, seed, kv_cache_dtype):
    c = GPU if cuda else CPU
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    weights, state = make_model(c, seed)
    q_state = None if kv_cache_dtype == "auto" else quantized_state(c, seed, KV_CACHE_DTYPES[kv_cache_dtype])
    print(f"llama torch {device.type}: L={c.L} d={c.d} H={c.H} KVH={c.KVH} Dh={c.Dh} F={c.F} V={c.V} "
          f"S={c.S}, {c.T} greedy steps from contexts of {state['context_lens'].min()}-"
          f"{state['context_lens'].max()} tokens" + (f"; tensor-parallel over {world} ranks" if world > 1 else ""))
    # float32 matmuls stay float32 (torch's default: no TF32), so that the check sees the ops' errors.
    w = to_device(weights, device)
    start = start_of(state, device)
    st, ref_st = fresh_state(state, device, torch.float32), fresh_state(state, device, torch.float32)

    ok = True
    for name, run_step in runs(w, st, start, cuda).items():
        reset(st, start)
        tokens, logits = decode(run_step, st, c.T)
        # The reference decodes from the same tokens: its logits are comparable at every step.
        reset(ref_st, start)
        inputs = np.concatenate([state["tokens"][None].astype(np.int64), tokens[:-1]])
        _, ref_logits = decode(functools.partial(reference_step, w, ref_st), ref_st, c.T, inputs)
        ok &= check(f"torch {name}", device.type, tokens, logits, ref_logits, c.tol)
    print(f"  tokens of sequence 0: {tokens[:, 0].tolist()}")
    del run_step, ref_st  # the f32 graph and reference state
    if q_state:
        ok &= check_quantized_cache(c, device, w, st, state, start, q_state, kv_cache_dtype)
    if world > 1:
        mesh = init_device_mesh(device.type, (world,))
        all_reduce = functools.partial(dist.all_reduce, group=mesh.get_group())
        tp_w, tp_st = tensor_parallel(c, weights, state, mesh, torch.float32)
        for name, run_step in runs(tp_w, tp_st, start, cuda, all_reduce).items():
            reset(tp_st, start)
            ok &= check_same(f"torch {name}, {world} ranks", device.type, *decode(run_step, tp_st, c.T), tokens,
                             logits, c.tol)
        del run_step, tp_w, tp_st

    # Timing in bf16 on the GPU (f32 on the CPU, eager only: no graphs there).
    dtype = torch.bfloat16 if cuda else torch.float32
    name = str(dtype).removeprefix("torch.")
    if cuda:
        w = cast(w, dtype)
        st = fresh_state(state, device, dtype)
        torch.cuda.empty_cache()
    one = {}
    for how, run_step in runs(w, st, start, cuda).items():
        one[how] = seconds_per_step(run_step, st, start, c.T, sync)
        print_timing(f"torch {how} {name}", one[how], c.S)
    if cuda:
        print(f"  torch eager / CUDA graph: {one['eager'] / one['CUDA graph']:.2f} (goal <= 1.5 at S=32 on an H100)")
    if q_state and cuda:  # the fp8 caches (their scales float32); not on the CPU: CI's time
        q_st = fresh_state(q_state, device, dtype)
        for how, run_step in runs(w, q_st, start, cuda).items():
            t = seconds_per_step(run_step, q_st, start, c.T, sync)
            print_timing(f"torch {how} {name}, {kv_cache_dtype} cache", t, c.S)
            print(f"  torch {how} {kv_cache_dtype} cache / {name} cache: {one[how] / t:.2f}x the tokens per second")
    if world > 1:
        del w, st, run_step
        tp_w, tp_st = tensor_parallel(c, weights, state, mesh, dtype)
        for how, run_step in runs(tp_w, tp_st, start, cuda, all_reduce).items():
            t = seconds_per_step(run_step, tp_st, start, c.T, sync)
            print_timing(f"torch {how} {name}, {world} ranks", t, c.S)
            print(f"  torch {how} {world} ranks / 1 rank: {one[how] / t:.2f}x the tokens per second")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("device", nargs="?", choices=["cpu", "cuda"], help="default: the GPU when torch has one")
    parser.add_argument("--seed", type=int, default=0, help="of the model's weights and starting state")
    parser.add_argument("--kv-cache-dtype", choices=list(KV_CACHE_DTYPES), default="auto",
                        help="also decode over caches of this dtype (the ops' kv_cache_dtype): check and time them")
    args = parser.parse_args()
    sys.exit(main(args.device, args.seed, args.kv_cache_dtype))
