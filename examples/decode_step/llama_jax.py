"""A small Llama-architecture model decoding greedily in JAX with opgen_ops' generated
ops. JAX has no views or in-place updates: the ops that update their inputs in place
in PyTorch (rotary_embedding, reshape_and_cache, fused_add_rms_norm) return the
updated arrays, and the caches are donated, so XLA writes them in place. The decoder
is checked in f32 against the same model written with jax.numpy alone, both eager and
jitted; on the GPU it then times both in bf16. With --kv-cache-dtype fp8 it also decodes over
fp8 KV caches (float8_e4m3fn, with per-layer scales), checks them against the reference over
the same caches and against the float32 caches (README.md), and times them on the GPU.

  python examples/decode_step/llama_jax.py [cpu|cuda] [--devices N] [--kv-cache-dtype fp8]

With --devices N it also decodes tensor-parallel over the first N devices (tensor_parallel():
attention's heads, the caches' kv heads and the MLP's width split, Megatron-style projections),
checks that it picks the one-device decoder's tokens with logits within the tolerance, and times
it against one device (on the CPU: N host devices, which share the CPU's cores).

Eager means the step function called as it is: every operation dispatches on its own,
except reshape_and_cache, which is jitted alone with the caches donated (called
eagerly, it would copy both caches of the layer on every step). Jitted means the whole
step as one XLA program, with the decode state (caches, tokens, context lengths) donated.
Sizes, weights and the starting state come from llama_inputs.py, shared with llama_torch.py.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import opgen_ops.jax as ops
from llama_inputs import (CPU, EPS, GPU, KV_CACHE_DTYPES, SCALES, by_shard, check, check_same,  # beside this file
                          kv_cache_dtype_of, layer_scales, make_model, print_timing, quantized_state)

# Inside a jitted step: inlined. kv_cache_dtype, a string, is a constant of the call (static).
write_cache = jax.jit(ops.reshape_and_cache, donate_argnums=(2, 3), static_argnames="kv_cache_dtype")


def step(w, st, shards=1):
    """One greedy decode step with the generated ops. Returns the logits [S, V] and the next state:
    the caches with each sequence's new key and value, the chosen tokens, the context lengths + 1.
    The packed projections' columns are laid out in `shards` blocks (llama_inputs.by_shard), each
    holding whole heads and its own part of the MLP: under jit with the arrays placed by
    tensor_parallel() every op runs on one device's block, and XLA adds only the sums of the row-parallel
    projections (o, down). Caches of fp8 (quantized_state()) hold the keys and values divided by the layer's
    scales: the step passes the ops the kv_cache_dtype its caches are, and the scales."""
    tokens, ctx, block_tables = st["tokens"], st["context_lens"], st["block_tables"]
    _, bs, kvh, dh = st["key_caches"][0].shape
    s, (_, d) = tokens.shape[0], w["embed"].shape
    kv_cache_dtype = kv_cache_dtype_of(st["key_caches"][0].dtype.name)
    # The new token's slot: row ctx % BS of the sequence's block block_tables[s, ctx // BS].
    slots = block_tables[jnp.arange(s), ctx // bs] * bs + ctx % bs
    lens = ctx + 1  # each sequence attends to its context and the new token
    residual = w["embed"][tokens]
    out = None  # the previous layer's MLP output, not yet added to the residual
    key_caches, value_caches = [], []
    for lw, key_cache, value_cache, (k_scale, v_scale) in zip(w["layers"], st["key_caches"], st["value_caches"],
                                                               layer_scales(st)):
        if out is None:
            h, _rstd = ops.rms_norm(residual, lw["norm1"])
        else:  # residual + out, and its rms_norm
            h, residual = ops.fused_add_rms_norm(out, residual, lw["norm1"])
        # Block i of the projection: shard i's query heads, then its kv heads' keys and values.
        q, k, v = jnp.split((h @ lw["qkv"]).reshape(s, shards, -1), [d // shards, (d + kvh * dh) // shards], axis=-1)
        q, k = ops.rotary_embedding(ctx, q.reshape(s, d), w["cos_sin"], k.reshape(s, kvh * dh), head_size=dh,
                                    is_neox=True)
        key_cache, value_cache = write_cache(k.reshape(s, kvh, dh), v.reshape(s, kvh, dh), key_cache, value_cache,
                                             slots, k_scale, v_scale, kv_cache_dtype=kv_cache_dtype)
        key_caches.append(key_cache)
        value_caches.append(value_cache)
        attn = ops.paged_attention_decode(q.reshape(s, -1, dh), key_cache, value_cache, block_tables, lens, k_scale,
                                          v_scale, scale=dh**-0.5, kv_cache_dtype=kv_cache_dtype)
        h, residual = ops.fused_add_rms_norm(attn.reshape(s, d) @ lw["o"], residual, lw["norm2"])
        # SwiGLU: in each shard's block of up_gate, its first half (up) times silu of its second half (gate).
        out = ops.glu((h @ lw["up_gate"]).reshape(s, shards, -1), activation="silu").reshape(s, -1) @ lw["down"]
    h, _residual = ops.fused_add_rms_norm(out, residual, w["norm"])
    logits = h @ w["lm_head"]
    return logits, {**st, "key_caches": key_caches, "value_caches": value_caches, "context_lens": lens,
                    "tokens": jnp.argmax(logits, -1).astype(tokens.dtype)}


def rms_norm_ref(x, weight):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPS) * weight


def rotary_ref(positions, x, cos_sin, dh):
    """NeoX rotary: dimension i of each head pairs with i + Dh/2."""
    cos, sin = jnp.split(cos_sin[positions][:, None, :], 2, axis=-1)  # [S, 1, Dh/2]
    x1, x2 = jnp.split(x.reshape(x.shape[0], -1, dh), 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).reshape(x.shape)


def cached(x, scale, dtype):
    """x as a cache of `dtype` holds it: x itself where there is no scale (the cache is of the model's
    dtype); else x / scale rounded to the nearest value of dtype (ties to even: XLA's conversion) and
    saturated to its finite range (the conversion alone would give NaN past it), as reshape_and_cache
    writes it. The quotient is a division, as the op's: XLA would otherwise multiply by 1 / scale (its
    rewrite of a division by a broadcast scalar), 1 ulp off for a tenth of the elements, which moves the
    rounding of an element that lies that close to the midpoint of two fp8 values."""
    if scale is None:
        return x
    largest = float(jnp.finfo(dtype).max)
    quotient = x / jax.lax.optimization_barrier(jnp.broadcast_to(scale, x.shape))
    return jnp.clip(quotient, -largest, largest).astype(dtype)


def held(cache, scale):
    """What a cache of cached()'s holds, in float32: its values times the scale."""
    return cache if scale is None else cache.astype(jnp.float32) * scale


def attention_ref(q, key_cache, value_cache, block_tables, lens, scale, k_scale=None, v_scale=None):
    """Gathers each sequence's blocks in order and attends over its first lens[s] tokens: over the keys and
    values the caches hold (held())."""
    s, h, dh = q.shape
    _, _, kvh, _ = key_cache.shape
    keys = held(key_cache[block_tables], k_scale).reshape(s, -1, kvh, dh)  # [S, MB*BS, KVH, Dh]
    values = held(value_cache[block_tables], v_scale).reshape(s, -1, kvh, dh)
    # Query head h reads kv head h // (H // KVH): group the query heads by their kv head.
    logits = jnp.einsum("skgd,stkd->skgt", q.reshape(s, kvh, h // kvh, dh), keys, precision="highest") * scale
    logits = jnp.where(jnp.arange(keys.shape[1]) < lens[:, None, None, None], logits, -jnp.inf)
    out = jnp.einsum("skgt,stkd->skgd", jax.nn.softmax(logits, axis=-1), values, precision="highest")
    return out.reshape(s, h, dh)


def reference_step(w, st):
    """The same step as the textbook pre-norm Llama block, with jax.numpy alone, in f32. With fp8 caches,
    it writes the new keys and values as cached() rounds them and attends over what the caches hold
    (held())."""
    tokens, ctx, block_tables = st["tokens"], st["context_lens"], st["block_tables"]
    _, bs, kvh, dh = st["key_caches"][0].shape
    s, (_, d) = tokens.shape[0], w["embed"].shape
    block, row = block_tables[jnp.arange(s), ctx // bs], ctx % bs
    x = w["embed"][tokens]
    key_caches, value_caches = [], []
    for lw, key_cache, value_cache, (k_scale, v_scale) in zip(w["layers"], st["key_caches"], st["value_caches"],
                                                               layer_scales(st)):
        q, k, v = jnp.split(rms_norm_ref(x, lw["norm1"]) @ lw["qkv"], [d, d + kvh * dh], axis=-1)
        q, k = rotary_ref(ctx, q, w["cos_sin"], dh), rotary_ref(ctx, k, w["cos_sin"], dh)
        key_caches.append(key_cache.at[block, row].set(cached(k.reshape(s, kvh, dh), k_scale, key_cache.dtype)))
        value_caches.append(value_cache.at[block, row].set(cached(v.reshape(s, kvh, dh), v_scale, value_cache.dtype)))
        attn = attention_ref(q.reshape(s, -1, dh), key_caches[-1], value_caches[-1], block_tables, ctx + 1, dh**-0.5,
                             k_scale, v_scale)
        x = x + attn.reshape(s, d) @ lw["o"]
        up, gate = jnp.split(rms_norm_ref(x, lw["norm2"]) @ lw["up_gate"], 2, axis=-1)
        x = x + (up * jax.nn.silu(gate)) @ lw["down"]
    logits = rms_norm_ref(x, w["norm"]) @ w["lm_head"]
    return logits, {**st, "key_caches": key_caches, "value_caches": value_caches, "context_lens": ctx + 1,
                    "tokens": jnp.argmax(logits, -1).astype(tokens.dtype)}


def to_dtype(tree, dtype):
    """The tree's float32 arrays cast to `dtype` (where they are: a sharded array stays sharded): the weights
    and the caches of the model's dtype, not the fp8 caches nor their scales (SCALES: float32 whatever the
    model's dtype, as the ops take them)."""
    def one(path, a):
        scale = any(isinstance(k, jax.tree_util.DictKey) and k.key in SCALES for k in path)
        return a.astype(dtype) if a.dtype == jnp.float32 and not scale else a
    return jax.tree_util.tree_map_with_path(one, tree)


MESH_AXIS = "tp"  # the mesh axis that tensor parallelism cuts heads and the MLP's width along
# Megatron's layout: qkv and up_gate column-parallel (each device projects onto its own heads and its part
# of the MLP: by_shard's blocks), o and down row-parallel (each device's product is a partial sum, which
# XLA all-reduces: the only collectives of a layer), the caches cut by kv heads. Everything else (the
# embeddings, norms, lm_head, block tables, tokens, context lengths) is whole on every device.
PLACEMENT = {"qkv": P(None, MESH_AXIS), "up_gate": P(None, MESH_AXIS), "o": P(MESH_AXIS), "down": P(MESH_AXIS),
             "key_caches": P(None, None, MESH_AXIS), "value_caches": P(None, None, MESH_AXIS)}


def shardings(tree, mesh):
    """The NamedSharding of each array of a weights or state tree on `mesh`: PLACEMENT's, by the dict key
    on its path (a layer's "qkv", a cache of the list "key_caches"), else whole."""
    def of(path, _):
        key = next((k.key for k in path if isinstance(k, jax.tree_util.DictKey) and k.key in PLACEMENT), None)
        return NamedSharding(mesh, PLACEMENT.get(key, P()))
    return jax.tree_util.tree_map_with_path(of, tree)


def tensor_parallel(c, weights, state, mesh):
    """The decoder split over the devices of `mesh` (one axis, MESH_AXIS): the weights (make_model's)
    in by_shard's layout and the state, placed as PLACEMENT says (new arrays: the step donates the
    state), and the step jitted for them, which keeps the state where it is. Every op of the step then
    runs on each device's heads or rows (their specs' `split: heads` and batch), and each layer adds
    two all-reduces. On a mesh of one device it is the plain jitted step."""
    n = mesh.devices.size
    w = jax.device_put(by_shard(weights, c, n), shardings(weights, mesh))
    st = jax.device_put(jax.tree.map(np.copy, state), shardings(state, mesh))
    jitted = jax.jit(functools.partial(step, shards=n), donate_argnums=1,
                     out_shardings=(NamedSharding(mesh, P()), shardings(state, mesh)))
    return w, st, jitted


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


def main(device: str | None = None, devices: int = 1, kv_cache_dtype: str = "auto") -> int:
    """Checks the decoder against the reference on `device` ('cpu' or 'cuda'; None: the GPU when JAX
    has one), eager and jitted, and with devices > 1 split over that many devices (tensor-parallel,
    jitted); on the GPU also times them in bf16. With kv_cache_dtype 'fp8' it does the same on one device
    with fp8 caches (quantized_state()), checking them also against the decoder with float32 caches
    (README.md), and times them beside bf16's. Returns 0 when every check passes."""
    if device is None:
        try:
            device = "cuda" if jax.devices("gpu") else "cpu"
        except RuntimeError:
            device = "cpu"
    with jax.default_device(jax.devices(device)[0]):
        return run(device, devices, kv_cache_dtype)


def check_quantized_cache(c, device, w, st, state, q_state, kv_cache_dtype, jitted, reference):
    """Decodes over the caches of q_state (quantized_state()'s: kv_cache_dtype's), eager and jitted (the
    step jitted with its state donated), and checks each decode (README.md) against the reference (jitted
    likewise) over what those caches hold (f32 tolerance) and against the jitted decoder over float32
    caches (st) from the same tokens (c.fp8_tol). Returns whether every check passes, and st."""
    q_st, ref_st = (jax.tree.map(lambda a: jnp.array(a, copy=True), q_state) for _ in range(2))
    ok = True
    for name, step_fn in (("eager", step), ("jit", jitted)):
        tokens, logits, q_st = decode(step_fn, w, at_start(q_st, state), c.T)
        inputs = np.concatenate([state["tokens"][None], tokens[:-1]])
        _, ref_logits, ref_st = decode(reference, w, at_start(ref_st, state), c.T, inputs)
        ok &= check(f"jax {name}, {kv_cache_dtype} cache", device, tokens, logits, ref_logits, c.tol)
        _, f32_logits, st = decode(jitted, w, at_start(st, state), c.T, inputs)
        ok &= check(f"jax {name}, {kv_cache_dtype} cache", device, tokens, logits, f32_logits, c.fp8_tol,
                    against="f32 cache's")
    print(f"  tokens of sequence 0, {kv_cache_dtype} cache: {tokens[:, 0].tolist()}")
    return ok, st


def run(device, devices, kv_cache_dtype):
    if devices > len(jax.devices(device)):
        print(f"llama jax {device}: {devices} devices asked for, {len(jax.devices(device))} found")
        return 1
    cuda = device != "cpu"
    c = GPU if cuda else CPU
    weights, state = make_model(c)
    q_state = None if kv_cache_dtype == "auto" else quantized_state(c, 0, KV_CACHE_DTYPES[kv_cache_dtype])
    print(f"llama jax {device}: L={c.L} d={c.d} H={c.H} KVH={c.KVH} Dh={c.Dh} F={c.F} V={c.V} S={c.S}, "
          f"{c.T} greedy steps from contexts of {state['context_lens'].min()}-{state['context_lens'].max()} tokens")
    # Arrays on the default device; the caches as copies, since the steps donate them.
    w = jax.tree.map(jnp.asarray, weights)

    def fresh_state():
        return jax.tree.map(lambda a: jnp.array(a, copy=True), state)

    jitted = jax.jit(step, donate_argnums=1)
    reference = jax.jit(reference_step, donate_argnums=1)
    st, ref_st = fresh_state(), fresh_state()
    if devices > 1:
        mesh = jax.sharding.Mesh(jax.devices(device)[:devices], (MESH_AXIS,))
        tp_w, tp_st, tp_step = tensor_parallel(c, weights, state, mesh)
    ok = True
    # f32 matmuls in f32 (on the GPU XLA would otherwise use TF32), so that the check sees the ops' errors.
    with jax.default_matmul_precision("highest"):
        for name, step_fn in (("eager", step), ("jit", jitted)):
            tokens, logits, st = decode(step_fn, w, at_start(st, state), c.T)
            # The reference decodes from the same tokens: its logits are comparable at every step.
            inputs = np.concatenate([state["tokens"][None], tokens[:-1]])
            _, ref_logits, ref_st = decode(reference, w, at_start(ref_st, state), c.T, inputs)
            ok &= check(f"jax {name}", device, tokens, logits, ref_logits, c.tol)
        if devices > 1:
            tp_tokens, tp_logits, tp_st = decode(tp_step, tp_w, at_start(tp_st, state), c.T)
            ok &= check_same(f"jax jit, {devices} devices", device, tp_tokens, tp_logits, tokens, logits, c.tol)
    print(f"  tokens of sequence 0: {tokens[:, 0].tolist()}")
    del ref_st
    if q_state:
        with jax.default_matmul_precision("highest"):
            q_ok, st = check_quantized_cache(c, device, w, st, state, q_state, kv_cache_dtype, jitted, reference)
        ok &= q_ok

    # Timing in bf16 on the GPU (f32 on the CPU).
    dtype = jnp.bfloat16 if cuda else jnp.float32
    if cuda:
        w, st = to_dtype(w, dtype), to_dtype(st, dtype)
    name = jnp.dtype(dtype).name
    t_eager, st = seconds_per_step(step, w, st, state, c.T)
    print_timing(f"jax eager {name}", t_eager, c.S)
    t_jit, st = seconds_per_step(jitted, w, st, state, c.T)
    print_timing(f"jax jit {name}", t_jit, c.S)
    if q_state and cuda:  # the fp8 caches (their scales float32); not on the CPU: CI's time
        q_st = to_dtype(jax.tree.map(jnp.asarray, q_state), dtype)
        t_q_eager, q_st = seconds_per_step(step, w, q_st, state, c.T)
        print_timing(f"jax eager {name}, {kv_cache_dtype} cache", t_q_eager, c.S)
        t_q_jit, q_st = seconds_per_step(jitted, w, q_st, state, c.T)
        print_timing(f"jax jit {name}, {kv_cache_dtype} cache", t_q_jit, c.S)
        print(f"  jax jit {kv_cache_dtype} cache / {name} cache: {t_jit / t_q_jit:.2f}x the tokens per second")
        del q_st
    if devices > 1:
        del w, st  # room for the split model on the first device
        t_tp, _ = seconds_per_step(tp_step, to_dtype(tp_w, dtype), to_dtype(tp_st, dtype), state, c.T)
        print_timing(f"jax jit {name}, {devices} devices", t_tp, c.S)
        print(f"  jax jit {devices} devices / 1 device: {t_jit / t_tp:.2f}x the tokens per second")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("device", nargs="?", choices=["cpu", "cuda"], help="default: the GPU when JAX has one")
    parser.add_argument("--devices", type=int, default=1,
                        help="also decode split over this many devices (tensor-parallel) and compare")
    parser.add_argument("--kv-cache-dtype", choices=list(KV_CACHE_DTYPES), default="auto",
                        help="also decode over caches of this dtype (the ops' kv_cache_dtype): check and time them")
    args = parser.parse_args()
    if args.device == "cpu" and args.devices > 1:
        jax.config.update("jax_num_cpu_devices", args.devices)  # before JAX makes its CPU devices
    sys.exit(main(args.device, args.devices, args.kv_cache_dtype))
