"""What both decode steps (decode_step_jax.py, decode_step_torch.py) share: the
layer's sizes on the CPU and the GPU, and its weights and one step's inputs as
numpy arrays, so that the two frameworks run the same problem."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

EPS = 1e-6  # the rms_norm and fused_add_rms_norm default
STEPS = 20  # decode steps timed


class Sizes(NamedTuple):
    S: int  # sequences, one new token each
    H: int  # query heads
    KVH: int  # key/value heads (grouped-query attention: H // KVH query heads share one)
    Dh: int  # head size
    BS: int  # tokens per cache block
    NB: int  # blocks in the caches
    MB: int  # blocks per sequence (the block table's width)


CPU = Sizes(S=4, H=8, KVH=2, Dh=64, BS=16, NB=64, MB=8)
GPU = Sizes(S=32, H=32, KVH=8, Dh=128, BS=16, NB=4096, MB=64)


def make_inputs(rng: np.random.Generator, z: Sizes):
    """The layer's weights and one decode step's inputs, as float32/int32 numpy arrays."""
    d, kvd = z.H * z.Dh, z.KVH * z.Dh

    def normal(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    # NeoX rotary table over every position a sequence can reach: Dh/2 cosines then Dh/2 sines.
    angles = np.arange(z.MB * z.BS)[:, None] * 10000.0 ** (-np.arange(0, z.Dh, 2) / z.Dh)
    weights = {
        "norm1": 1 + normal(d, scale=0.1),
        "qkv": normal(d, d + 2 * kvd, scale=d**-0.5),  # Wq | Wk | Wv side by side
        "cos_sin": np.concatenate([np.cos(angles), np.sin(angles)], -1).astype(np.float32),
        "o": normal(d, d, scale=d**-0.5),
        "norm2": 1 + normal(d, scale=0.1),
    }
    # Every sequence owns MB distinct blocks, scattered over the caches.
    block_tables = rng.permutation(z.NB)[: z.S * z.MB].reshape(z.S, z.MB).astype(np.int32)
    # Tokens already cached; the new token goes at this position, so the longest reaches MB*BS.
    context_lens = rng.integers(1, z.MB * z.BS, z.S).astype(np.int32)
    x = normal(z.S, d)
    key_cache, value_cache = normal(z.NB, z.BS, z.KVH, z.Dh), normal(z.NB, z.BS, z.KVH, z.Dh)
    return weights, x, key_cache, value_cache, block_tables, context_lens
