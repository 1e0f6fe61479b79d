"""A small Llama-architecture model decoding greedily in JAX with opgen_ops' generated
ops. JAX has no views or in-place updates: the ops that update their inputs in place
in PyTorch (rotary_embedding, reshape_and_cache, fused_add_rms_norm) return the
updated arrays, and the caches are donated, so XLA writes them in place. The decoder
is checked in f32 against the same model written with jax.numpy alone, both eager and
jitted; on the GPU it then times both in bf16.

  python examples/decode_step/llama_jax.py [cpu|cuda]

Eager means the step function called as it is: every operation dispatches on its own,
except reshape_and_cache, which is jitted alone with the caches donated (called
eagerly, it would copy both caches of the layer on every step). Jitted means the whole
step as one XLA program, with the decode state (caches, tokens, context lengths) donated.
Sizes, weights and the starting state come from llama_inputs.py, shared with llama_torch.py.
"""

from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import opgen_ops.jax as ops
from llama_inputs import CPU, EPS, GPU, check, make_model, print_timing  # beside this file

write_cache = jax.jit(ops.reshape_and_cache, donate_argnums=(2, 3))  # inside a jitted step: inlined


def step(w, st):
    """One greedy decode step with the generated ops. Returns the logits [S, V] and the next state:
    the caches with each sequence's new key and value, the chosen tokens, the context lengths + 1."""
    tokens, ctx, block_tables = st["tokens"], st["context_lens"], st["block_tables"]
    _, bs, kvh, dh = st["key_caches"][0].shape
    s, (_, d) = tokens.shape[0], w["embed"].shape
    # The new token's slot: row ctx % BS of the sequence's block block_tables[s, ctx // BS].
    slots = block_tables[jnp.arange(s), ctx // bs] * bs + ctx % bs
    lens = ctx + 1  # each sequence attends to its context and the new token
    residual = w["embed"][tokens]
    out = None  # the previous layer's MLP output, not yet added to the residual
    key_caches, value_caches = [], []
    for lw, key_cache, value_cache in zip(w["layers"], st["key_caches"], st["value_caches"]):
        if out is None:
            h, _rstd = ops.rms_norm(residual, lw["norm1"])
        else:  # residual + out, and its rms_norm
            h, residual = ops.fused_add_rms_norm(out, residual, lw["norm1"])
        q, k, v = jnp.split(h @ lw["qkv"], [d, d + kvh * dh], axis=-1)
        q, k = ops.rotary_embedding(ctx, q, w["cos_sin"], k, head_size=dh, is_neox=True)
        key_cache, value_cache = write_cache(k.reshape(s, kvh, dh), v.reshape(s, kvh, dh), key_cache, value_cache,
                                             slots)
        key_caches.append(key_cache)
        value_caches.append(value_cache)
        attn = ops.paged_attention_decode(q.reshape(s, -1, dh), key_cache, value_cache, block_tables, lens,
                                          scale=dh**-0.5)
        h, residual = ops.fused_add_rms_norm(attn.reshape(s, d) @ lw["o"], residual, lw["norm2"])
        # SwiGLU: up_gate's first half (up) times silu of its second half (gate).
        out = ops.glu(h @ lw["up_gate"], activation="silu") @ lw["down"]
    h, _residual = ops.fused_add_rms_norm(out, residual, w["norm"])
    logits = h @ w["lm_head"]
    return logits, {"key_caches": key_caches, "value_caches": value_caches, "block_tables": block_tables,
                    "context_lens": lens, "tokens": jnp.argmax(logits, -1).astype(tokens.dtype)}


def rms_norm_ref(x, weight):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPS) * weight


def rotary_ref(positions, x, cos_sin, dh):
    """NeoX rotary: dimension i of each head pairs with i + Dh/2."""
    cos, sin = jnp.split(cos_sin[positions][:, None, :], 2, axis=-1)  # [S, 1, Dh/2]
    x1, x2 = jnp.split(x.reshape(x.shape[0], -1, dh), 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).reshape(x.shape)


def attention_ref(q, key_cache, value_cache, block_tables, lens, scale):
    """Gathers each sequence's blocks in order and attends over its first lens[s] tokens."""
    s, h, dh = q.shape
    _, _, kvh, _ = key_cache.shape
    keys = key_cache[block_tables].reshape(s, -1, kvh, dh)  # [S, MB*BS, KVH, Dh]
    values = value_cache[block_tables].reshape(s, -1, kvh, dh)
    # Query head h reads kv head h // (H // KVH): group the query heads by their kv head.
    logits = jnp.einsum("skgd,stkd->skgt", q.reshape(s, kvh, h // kvh, dh), keys, precision="highest") * scale
    logits = jnp.where(jnp.arange(keys.shape[1]) < lens[:, None, None, None], logits, -jnp.inf)
    out = jnp.einsum("skgt,stkd->skgd", jax.nn.softmax(logits, axis=-1), values, precision="highest")
    return out.reshape(s, h, dh)


def reference_step(w, st):
    """The same step as the textbook pre-norm Llama block, with jax.numpy alone, in f32."""
    tokens, ctx, block_tables = st["tokens"], st["context_lens"], st["block_tables"]
    _, bs, kvh, dh = st["key_caches"][0].shape
    s, (_, d) = tokens.shape[0], w["embed"].shape
    block, row = block_tables[jnp.arange(s), ctx // bs], ctx % bs
    x = w["embed"][tokens]
    key_caches, value_caches = [], []
    for lw, key_cache, value_cache in zip(w["layers"], st["key_caches"], st["value_caches"]):
        q, k, v = jnp.split(rms_norm_ref(x, lw["norm1"]) @ lw["qkv"], [d, d + kvh * dh], axis=-1)
        q, k = rotary_ref(ctx, q, w["cos_sin"], dh), rotary_ref(ctx, k, w["cos_sin"], dh)
        key_caches.append(key_cache.at[block, row].set(k.reshape(s, kvh, dh)))
        value_caches.append(value_cache.at[block, row].set(v.reshape(s, kvh, dh)))
        attn = attention_ref(q.reshape(s, -1, dh), key_caches[-1], value_caches[-1], block_tables, ctx + 1, dh**-0.5)
        x = x + attn.reshape(s, d) @ lw["o"]
        up, gate = jnp.split(rms_norm_ref(x, lw["norm2"]) @ lw["up_gate"], 2, axis=-1)
        x = x + (up * jax.nn.silu(gate)) @ lw["down"]
    logits = rms_norm_ref(x, w["norm"]) @ w["lm_head"]
    return logits, {"key_caches": key_caches, "value_caches": value_caches, "block_tables": block_tables,
                    "context_lens": ctx + 1, "tokens": jnp.argmax(logits, -1).astype(tokens.dtype)}


def at_start(st, state):
    """The state back at the first step: the first tokens and the initial context lengths, new arrays
    (a jitted step donates the ones it is given). The caches need no reset: a step writes the slot at
    each sequence's position before it attends to it, so what earlier runs left past the initial
    context is overwritten before it is read."""
    return {**st, "tokens": jnp.asarray(state["tokens"]), "context_lens": jnp.asarray(state["context_lens"])}


def decode(step_fn, w, st, steps, inputs=None):
    """Runs `steps` greedy steps; returns the tokens [T, S] and logits [T, S, V] as numpy arrays and the
    last state. inputs [T, S]: the tokens to feed each step instead of the previous step's choice
    (teacher forcing)."""
    tokens, logits = [], []
    for t in range(steps):
        if inputs is not None:
            st = {**st, "tokens": jnp.asarray(inputs[t])}
        out, st = step_fn(w, st)
        logits.append(np.asarray(out.astype(jnp.float32)))
        tokens.append(np.asarray(st["tokens"]))
    return np.stack(tokens), np.stack(logits), st


def seconds_per_step(step_fn, w, st, state, steps, repeats=3):
    """Per step, the best of `repeats` decodes of `steps` steps from the first step, after one more that
    warms up (it compiles: the whole step when jitted, each operation's own program when eager); and
    the last state."""
    times = []
    for _ in range(repeats + 1):
        st = jax.block_until_ready(at_start(st, state))
        begin = time.perf_counter()
        for _ in range(steps):
            _, st = step_fn(w, st)
        jax.block_until_ready(st)
        times.append((time.perf_counter() - begin) / steps)
    return min(times[1:]), st


def main(device: str | None = None) -> int:
    """Checks the decoder against the reference on `device` ('cpu' or 'cuda'; None: the GPU when JAX
    has one), eager and jitted; on the GPU also times both in bf16. Returns 0 when every check passes."""
    if device is None:
        try:
            device = "cuda" if jax.devices("gpu") else "cpu"
        except RuntimeError:
            device = "cpu"
    with jax.default_device(jax.devices(device)[0]):
        return run(device)


def run(device):
    cuda = device != "cpu"
    c = GPU if cuda else CPU
    weights, state = make_model(c)
    print(f"llama jax {device}: L={c.L} d={c.d} H={c.H} KVH={c.KVH} Dh={c.Dh} F={c.F} V={c.V} S={c.S}, "
          f"{c.T} greedy steps from contexts of {state['context_lens'].min()}-{state['context_lens'].max()} tokens")
    # Arrays on the default device; the caches as copies, since the steps donate them.
    w = jax.tree.map(jnp.asarray, weights)

    def fresh_state():
        return jax.tree.map(lambda a: jnp.array(a, copy=True), state)

    jitted = jax.jit(step, donate_argnums=1)
    reference = jax.jit(reference_step, donate_argnums=1)
    st, ref_st = fresh_state(), fresh_state()
    ok = True
    # f32 matmuls in f32 (on the GPU XLA would otherwise use TF32), so that the check sees the ops' errors.
    with jax.default_matmul_precision("highest"):
        for name, step_fn in (("eager", step), ("jit", jitted)):
            tokens, logits, st = decode(step_fn, w, at_start(st, state), c.T)
            # The reference decodes from the same tokens: its logits are comparable at every step.
            inputs = np.concatenate([state["tokens"][None], tokens[:-1]])
            _, ref_logits, ref_st = decode(reference, w, at_start(ref_st, state), c.T, inputs)
            ok &= check(f"jax {name}", device, tokens, logits, ref_logits, c.tol)
    print(f"  tokens of sequence 0: {tokens[:, 0].tolist()}")
    del ref_st

    # Timing in bf16 on the GPU (f32 on the CPU).
    dtype = jnp.bfloat16 if cuda else jnp.float32
    if cuda:
        w = jax.tree.map(lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a, w)
        st = jax.tree.map(lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a, st)
    name = jnp.dtype(dtype).name
    t_eager, st = seconds_per_step(step, w, st, state, c.T)
    print_timing(f"jax eager {name}", t_eager, c.S)
    t_jit, st = seconds_per_step(jitted, w, st, state, c.T)
    print_timing(f"jax jit {name}", t_jit, c.S)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None))
