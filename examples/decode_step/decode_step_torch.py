"""One decoder layer's decode step in PyTorch (eager), written twice: with opgen_ops'
generated ops (rms_norm, rotary_embedding, paged_attention_decode, fused_add_rms_norm),
in place on views as vLLM calls its own, and with torch alone. Both run on the same
inputs; the script prints the larger of their outputs' relative errors and the time
per step of each, and exits non-zero when they disagree. f32 on the CPU, bf16 on the GPU.

  PYTHONPATH=build/python python examples/decode_step/decode_step_torch.py [cpu|cuda]
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch

import opgen_ops.torch as tops
from decode_inputs import CPU, EPS, GPU, STEPS, make_inputs  # beside this file


def write_kv(key_cache, value_cache, k, v, block_tables, positions):
    """Stores each sequence's new key and value at row pos % BS of its block block_tables[s, pos // BS],
    in place. Framework indexing in both versions: kv_cache_write's cache is [B, S, H],
    one contiguous run per sequence, with no block table."""
    s = positions.shape[0]
    _, bs, kvh, dh = key_cache.shape
    positions = positions.long()
    block = block_tables[torch.arange(s, device=positions.device), positions // bs].long()
    row = positions % bs
    key_cache[block, row] = k.view(s, kvh, dh)
    value_cache[block, row] = v.view(s, kvh, dh)


def step_opgen(w, x, key_cache, value_cache, block_tables, context_lens):
    """The decode step with the generated ops. Updates the caches in place and returns
    (normalised output, new residual); x is left as it is."""
    s, d = x.shape
    _, _, kvh, dh = key_cache.shape
    h, _rstd = tops.rms_norm(x, w["norm1"])
    qkv = h @ w["qkv"]
    # Column views of qkv whose rows are strided by its width, as vLLM takes them: the
    # rotary op accepts such views and rotates the query and key in place, inside qkv.
    q, k, v = qkv.split([d, kvh * dh, kvh * dh], dim=-1)
    tops.rotary_embedding(context_lens, q, w["cos_sin"], k, head_size=dh, is_neox=True)
    write_kv(key_cache, value_cache, k, v, block_tables, context_lens)
    # paged_attention_decode takes a dense query: copy it out of qkv.
    attn = tops.paged_attention_decode(q.reshape(s, -1, dh).contiguous(), key_cache, value_cache, block_tables,
                                       context_lens + 1, scale=dh**-0.5)
    out = attn.view(s, d) @ w["o"]
    residual = x.clone()  # the op adds into its residual in place
    tops.fused_add_rms_norm(out, residual, w["norm2"])
    return out, residual


def rms_norm_ref(x, weight):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True) + EPS) * weight.float()).to(x.dtype)


def rotary_ref(positions, x, cos_sin, dh):
    """NeoX rotary: dimension i of each head pairs with i + Dh/2."""
    cos, sin = cos_sin[positions.long()].float()[:, None, :].chunk(2, dim=-1)  # [N, 1, Dh/2]
    x1, x2 = x.reshape(x.shape[0], -1, dh).float().chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).reshape(x.shape).to(x.dtype)


def attention_ref(q, key_cache, value_cache, block_tables, context_lens, scale):
    """Gathers each sequence's blocks in order and attends over its first context_lens[s] tokens."""
    s, h, dh = q.shape
    _, _, kvh, _ = key_cache.shape
    blocks = block_tables.long()
    keys = key_cache[blocks].reshape(s, -1, kvh, dh).float()  # [S, MB*BS, KVH, Dh]
    values = value_cache[blocks].reshape(s, -1, kvh, dh).float()
    # Query head h reads kv head h // (H // KVH): group the query heads by their kv head.
    qg = q.reshape(s, kvh, h // kvh, dh).float()
    logits = torch.einsum("skgd,stkd->skgt", qg, keys) * scale
    past = torch.arange(keys.shape[1], device=q.device) >= context_lens[:, None, None, None]
    out = torch.einsum("skgt,stkd->skgd", logits.masked_fill(past, -torch.inf).softmax(-1), values)
    return out.reshape(s, h, dh).to(q.dtype)


def step_reference(w, x, key_cache, value_cache, block_tables, context_lens):
    """The same step with torch alone."""
    s, d = x.shape
    _, _, kvh, dh = key_cache.shape
    q, k, v = (rms_norm_ref(x, w["norm1"]) @ w["qkv"]).split([d, kvh * dh, kvh * dh], dim=-1)
    q = rotary_ref(context_lens, q, w["cos_sin"], dh)
    k = rotary_ref(context_lens, k, w["cos_sin"], dh)
    write_kv(key_cache, value_cache, k, v, block_tables, context_lens)
    attn = attention_ref(q.reshape(s, -1, dh), key_cache, value_cache, block_tables, context_lens + 1, dh**-0.5)
    residual = attn.reshape(s, d) @ w["o"] + x
    return rms_norm_ref(residual, w["norm2"]), residual


def run(step, weights, x, key_cache, value_cache, block_tables, context_lens):
    """The step's results and updated caches, and its time per step. Each step writes the same
    key and value to the same rows, so the timed repeats leave the caches as the first left them."""
    key_cache, value_cache = key_cache.clone(), value_cache.clone()
    args = (weights, x, key_cache, value_cache, block_tables, context_lens)
    results = step(*args) + (key_cache, value_cache)
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    sync()
    start = time.perf_counter()
    for _ in range(STEPS):
        step(*args)
    sync()
    return results, (time.perf_counter() - start) / STEPS


def max_relative_error(got, want):
    """max |got - want| / max |want| over each output, the largest of them."""
    return max(((g.float() - w.float()).abs().max() / w.float().abs().max()).item() for g, w in zip(got, want))


def main(device: str | None = None) -> int:
    """Runs both versions on `device` ('cpu' or 'cuda'; None: the GPU when torch has one) and
    returns 0 when they agree."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    z, dtype, tol = (CPU, torch.float32, 1e-4) if device == "cpu" else (GPU, torch.bfloat16, 2e-2)
    weights, x, key_cache, value_cache, block_tables, context_lens = make_inputs(np.random.default_rng(0), z)

    def put(a):
        t = torch.from_numpy(a).to(device)
        return t.to(dtype) if t.is_floating_point() else t

    args = ({name: put(a) for name, a in weights.items()}, put(x), put(key_cache), put(value_cache),
            put(block_tables), put(context_lens))
    got, t_opgen = run(step_opgen, *args)
    want, t_ref = run(step_reference, *args)
    err = max_relative_error(got, want)
    ok = err < tol
    print(f"decode step torch {device} {str(dtype).removeprefix('torch.'):<8} S={z.S} H={z.H} KVH={z.KVH} Dh={z.Dh}: "
          f"max rel. error {err:.2e} (tolerance {tol:.0e}), opgen {t_opgen * 1e3:.3f} ms/step, "
          f"torch {t_ref * 1e3:.3f} ms/step{'' if ok else '  MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None))
