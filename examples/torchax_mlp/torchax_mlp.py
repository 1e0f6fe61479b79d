"""A PyTorch nn.Module with two generated ops (rms_norm and glu), run through
torchax: a pre-norm gated MLP block, out = x + W_down(glu_silu(W_up(rms_norm(x)))).
The same block written with torch's own ops runs eagerly in PyTorch as the
reference; the opgen block runs under torchax, eagerly and compiled
(torchax.compile: jax.jit, whose HLO holds the typed-FFI custom calls). The
script prints each one's relative error and time per call and exits non-zero
when they disagree. f32 on the CPU, bf16 on the GPU (JAX's default device).

  PYTHONPATH=build/python python examples/torchax_mlp/torchax_mlp.py
"""

from __future__ import annotations

import sys
import time

import jax
import numpy as np
import torch
import torch.nn.functional as F
import torchax
from torchax import interop

import opgen_ops.torch as tops

EPS = 1e-6


class GatedMLP(torch.nn.Module):
    """x + W_down(a * silu(b)), with [a, b] = W_up(rms_norm(x) * norm_weight)."""

    def __init__(self, d: int, hidden: int, with_opgen: bool):
        super().__init__()
        self.with_opgen = with_opgen
        self.norm_weight = torch.nn.Parameter(1 + 0.1 * torch.randn(d))
        self.up = torch.nn.Linear(d, 2 * hidden, bias=False)
        self.down = torch.nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        if self.with_opgen:
            h, _rstd = tops.rms_norm(x, self.norm_weight, eps=EPS)
            return x + self.down(tops.glu(self.up(h), activation="silu"))
        h = F.rms_norm(x.float(), (x.shape[-1],), self.norm_weight.float(), eps=EPS).to(x.dtype)
        a, b = self.up(h).chunk(2, dim=-1)
        return x + self.down(a * F.silu(b))


def seconds_per_call(f, x, calls=10):
    jax.block_until_ready(interop.jax_view(f(x)))
    start = time.perf_counter()
    for _ in range(calls):
        out = f(x)
    jax.block_until_ready(interop.jax_view(out))
    return (time.perf_counter() - start) / calls


def main() -> int:
    on_gpu = jax.default_backend() == "gpu"
    tokens, d, hidden = (2048, 2048, 5632) if on_gpu else (64, 256, 512)
    dtype = torch.bfloat16 if on_gpu else torch.float32
    tolerance = 2e-2 if on_gpu else 1e-5
    torch.manual_seed(0)
    reference = GatedMLP(d, hidden, with_opgen=False).to(dtype)
    ours = GatedMLP(d, hidden, with_opgen=True).to(dtype)
    ours.load_state_dict(reference.state_dict())
    x = torch.randn(tokens, d, dtype=dtype)
    device = "cuda" if on_gpu and torch.cuda.is_available() else "cpu"
    with torch.no_grad():
        want = reference.to(device)(x.to(device)).float().cpu()

    env = torchax.default_env()
    failures = 0
    with env, torch.no_grad():
        ours.to("jax")
        xj = x.to("jax")
        for name, module in (("eager", ours), ("torchax.compile", torchax.compile(ours))):
            got = torch.from_numpy(np.array(interop.jax_view(module(xj)).astype("float32")))
            error = ((got - want).abs().max() / want.abs().max()).item()
            ok = error < tolerance
            failures += not ok
            print(f"torchax gated MLP {jax.default_backend()} {str(dtype).removeprefix('torch.'):<8} "
                  f"[{tokens}, {d}] -> {hidden}, {name:<15}: rel. error {error:.2e} (tolerance {tolerance:.0e}), "
                  f"{seconds_per_call(module, xj) * 1e3:.3f} ms per call{'' if ok else '  MISMATCH'}")
    return failures


if __name__ == "__main__":
    sys.exit(1 if main() else 0)
