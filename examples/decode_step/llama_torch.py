"""A small Llama-architecture model decoding greedily in PyTorch with opgen_ops'
generated ops, called as vLLM calls its own: in place, on column views of the qkv
projection, with no copies. It is checked in f32 against the same model written with
torch alone, eager and (on the GPU) replayed from a CUDA graph; on the GPU it then
times both in bf16.

  python examples/decode_step/llama_torch.py [cpu|cuda]

Sizes, weights and the starting state come from llama_inputs.py, shared with llama_jax.py.
"""

from __future__ import annotations

import functools
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import opgen_ops.torch as tops
from llama_inputs import CPU, EPS, GPU, check, make_model, print_timing  # beside this file


def step(w, st):
    """One greedy decode step with the generated ops. Updates the state in place (the caches at each
    sequence's new position, the tokens, the context lengths) and returns the logits [S, V]. It
    launches everything on the current stream and never synchronises: a CUDA graph can capture it."""
    tokens, ctx, block_tables = st["tokens"], st["context_lens"], st["block_tables"]
    _, bs, kvh, dh = st["key_caches"][0].shape
    s, (_, d) = tokens.shape[0], w["embed"].shape
    # The new token's slot: row ctx % BS of the sequence's block block_tables[s, ctx // BS].
    slots = block_tables.gather(1, (ctx // bs).long()[:, None])[:, 0] * bs + ctx % bs
    lens = ctx + 1  # each sequence attends to its context and the new token
    residual = w["embed"][tokens]
    out = None  # the previous layer's MLP output, not yet added to the residual
    for lw, key_cache, value_cache in zip(w["layers"], st["key_caches"], st["value_caches"]):
        if out is None:
            h, _rstd = tops.rms_norm(residual, lw["norm1"])
        else:  # residual += out; out = rms_norm(residual) * norm1, both in place
            tops.fused_add_rms_norm(out, residual, lw["norm1"])
            h = out
        qkv = h @ lw["qkv"]
        # Column views of qkv, whose rows are strided by its width: every op below takes them as they are.
        q, k, v = qkv.split([d, kvh * dh, kvh * dh], dim=-1)
        tops.rotary_embedding(ctx, q, w["cos_sin"], k, head_size=dh, is_neox=True)  # rotates q, k inside qkv
        tops.reshape_and_cache(k.view(s, kvh, dh), v.view(s, kvh, dh), key_cache, value_cache, slots)
        attn = tops.paged_attention_decode(q.view(s, -1, dh), key_cache, value_cache, block_tables, lens,
                                           scale=dh**-0.5)
        out = attn.view(s, d) @ lw["o"]
        tops.fused_add_rms_norm(out, residual, lw["norm2"])
        # SwiGLU: up_gate's first half (up) times silu of its second half (gate).
        out = tops.glu(out @ lw["up_gate"], activation="silu") @ lw["down"]
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


def attention_ref(q, key_cache, value_cache, block_tables, lens, scale):
    """Gathers each sequence's blocks in order and attends over its first lens[s] tokens."""
    s, h, dh = q.shape
    _, _, kvh, _ = key_cache.shape
    keys = key_cache[block_tables.long()].reshape(s, -1, kvh, dh)  # [S, MB*BS, KVH, Dh]
    values = value_cache[block_tables.long()].reshape(s, -1, kvh, dh)
    # Query head h reads kv head h // (H // KVH): group the query heads by their kv head.
    logits = torch.einsum("skgd,stkd->skgt", q.reshape(s, kvh, h // kvh, dh), keys) * scale
    past = torch.arange(keys.shape[1], device=q.device) >= lens[:, None, None, None]
    out = torch.einsum("skgt,stkd->skgd", logits.masked_fill(past, -torch.inf).softmax(-1), values)
    return out.reshape(s, h, dh)


def reference_step(w, st):
    """The same step as the textbook pre-norm Llama block, with torch alone, in f32."""
    tokens, ctx, block_tables = st["tokens"], st["context_lens"], st["block_tables"]
    _, bs, kvh, dh = st["key_caches"][0].shape
    s, (_, d) = tokens.shape[0], w["embed"].shape
    positions = ctx.long()
    block, row = block_tables.gather(1, (positions // bs)[:, None])[:, 0].long(), positions % bs
    x = w["embed"][tokens]
    for lw, key_cache, value_cache in zip(w["layers"], st["key_caches"], st["value_caches"]):
        q, k, v = (rms_norm_ref(x, lw["norm1"]) @ lw["qkv"]).split([d, kvh * dh, kvh * dh], dim=-1)
        q, k = rotary_ref(positions, q, w["cos_sin"], dh), rotary_ref(positions, k, w["cos_sin"], dh)
        key_cache[block, row] = k.reshape(s, kvh, dh)
        value_cache[block, row] = v.reshape(s, kvh, dh)
        attn = attention_ref(q.reshape(s, -1, dh), key_cache, value_cache, block_tables, ctx + 1, dh**-0.5)
        x = x + attn.reshape(s, d) @ lw["o"]
        up, gate = (rms_norm_ref(x, lw["norm2"]) @ lw["up_gate"]).chunk(2, dim=-1)
        x = x + (up * F.silu(gate)) @ lw["down"]
    logits = rms_norm_ref(x, w["norm"]) @ w["lm_head"]
    tokens.copy_(logits.argmax(-1))
    ctx.add_(1)
    return logits


def tree_map(f, tree):
    if isinstance(tree, dict):
        return {k: tree_map(f, v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [tree_map(f, v) for v in tree]
    return f(tree)


def to_device(tree, device, dtype=torch.float32):
    """Copies numpy arrays to `device`, floating ones as `dtype`. Always a copy: the steps write into
    the caches, and the numpy arrays are shared."""
    def one(a):
        t = torch.from_numpy(a).to(device, copy=True)
        return t.to(dtype) if t.is_floating_point() else t
    return tree_map(one, tree)


def fresh_state(state, device, dtype):
    st = to_device(state, device, dtype)
    st["tokens"] = st["tokens"].long()  # the dtype argmax gives
    return st


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


def capture(w, st, start):
    """Records one step into a CUDA graph, as torch's docs say: warm up on a side stream first (cuBLAS
    picks its kernels and allocates its workspace there, not during the capture). Returns a function that
    replays the graph and returns its logits (a static buffer). Leaves the state at the first step."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step(w, st)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        logits = step(w, st)  # recorded, not run
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


def main(device: str | None = None) -> int:
    """Checks the decoder against the reference on `device` ('cpu' or 'cuda'; None: the GPU when torch
    has one), eager and, on the GPU, from a CUDA graph; on the GPU also times both in bf16. Returns 0
    when every check passes."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    threads = torch.get_num_threads()
    if not cuda:  # the CPU model's matmuls are too small to split: more threads only wait for each other
        torch.set_num_threads(1)
    try:
        return run(device, cuda)
    finally:
        torch.set_num_threads(threads)
        if cuda:  # hand the cached blocks back, for what runs next in this process (JAX, in run_examples.py)
            torch.cuda.empty_cache()


def run(device, cuda):
    c = GPU if cuda else CPU
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    weights, state = make_model(c)
    print(f"llama torch {device.type}: L={c.L} d={c.d} H={c.H} KVH={c.KVH} Dh={c.Dh} F={c.F} V={c.V} "
          f"S={c.S}, {c.T} greedy steps from contexts of {state['context_lens'].min()}-"
          f"{state['context_lens'].max()} tokens")
    # float32 matmuls stay float32 (torch's default: no TF32), so that the check sees the ops' errors.
    w = to_device(weights, device)
    start = {"tokens": torch.from_numpy(state["tokens"]).long().to(device),
             "context_lens": torch.from_numpy(state["context_lens"]).to(device)}
    st, ref_st = fresh_state(state, device, torch.float32), fresh_state(state, device, torch.float32)

    runs = {"eager": functools.partial(step, w, st)}
    if cuda:
        runs["CUDA graph"] = capture(w, st, start)
    ok = True
    for name, run_step in runs.items():
        reset(st, start)
        tokens, logits = decode(run_step, st, c.T)
        # The reference decodes from the same tokens: its logits are comparable at every step.
        reset(ref_st, start)
        inputs = np.concatenate([state["tokens"][None].astype(np.int64), tokens[:-1]])
        _, ref_logits = decode(functools.partial(reference_step, w, ref_st), ref_st, c.T, inputs)
        ok &= check(f"torch {name}", device.type, tokens, logits, ref_logits, c.tol)
    print(f"  tokens of sequence 0: {tokens[:, 0].tolist()}")
    del runs, run_step, ref_st  # the f32 graph and reference state

    # Timing in bf16 on the GPU (f32 on the CPU, eager only: no graphs there).
    dtype = torch.bfloat16 if cuda else torch.float32
    if cuda:
        w = tree_map(lambda t: t.to(dtype) if t.is_floating_point() else t, w)
        st = fresh_state(state, device, dtype)
        torch.cuda.empty_cache()
    t_eager = seconds_per_step(functools.partial(step, w, st), st, start, c.T, sync)
    print_timing(f"torch eager {str(dtype).removeprefix('torch.')}", t_eager, c.S)
    if cuda:
        t_graph = seconds_per_step(capture(w, st, start), st, start, c.T, sync)
        print_timing("torch CUDA graph bf16", t_graph, c.S)
        print(f"  torch eager / CUDA graph: {t_eager / t_graph:.2f} (goal <= 1.5 at S=32 on an H100)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None))
