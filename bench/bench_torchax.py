"""A PyTorch module through torchax on the GPU: examples/torchax_mlp's gated
MLP block (rms_norm, up projection, SwiGLU, down projection, residual)
compiled with torchax.compile (jax.jit), once with the generated ops and
once with torch's own (which torchax lowers to jnp). Both run in the same
process on the same weights and inputs; the table gives each one's time per
call (median of --rounds of --calls calls, host time to
block_until_ready) and the ratio of the pure-torch time to opgen's.

  python bench/bench_torchax.py [--calls 20] [--rounds 7] [--tokens 1024,4096,16384]
"""

import argparse
import sys
from pathlib import Path

import jax
import torch
import torchax
from torchax import interop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "torchax_mlp"))
from gpu_timing import jax_us  # noqa: E402 (beside this file)
from torchax_mlp import GatedMLP  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--tokens", default="1024,4096,16384")
    ap.add_argument("--d", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=11008)
    args = ap.parse_args()
    print(f"{jax.devices()[0].device_kind}; torch {torch.__version__}, jax {jax.__version__}, "
          f"torchax {torchax.__version__}")
    print(f"gated MLP block, bf16, d {args.d}, hidden {args.hidden}, torchax.compile\n")
    print("| tokens | opgen ops | torch ops | torch / opgen |")
    print("| --- | --- | --- | --- |")
    torch.manual_seed(0)
    reference = GatedMLP(args.d, args.hidden, with_opgen=False).to(torch.bfloat16)
    ours = GatedMLP(args.d, args.hidden, with_opgen=True).to(torch.bfloat16)
    ours.load_state_dict(reference.state_dict())
    with torchax.default_env(), torch.no_grad():
        compiled = {name: torchax.compile(m.to("jax")) for name, m in (("opgen", ours), ("torch", reference))}
        for tokens in (int(t) for t in args.tokens.split(",")):
            x = torch.randn(tokens, args.d, dtype=torch.bfloat16).to("jax")
            a, b = (interop.jax_view(compiled[n](x)).astype("float32") for n in ("opgen", "torch"))
            err = float(abs(a - b).max() / abs(b).max())
            assert err < 3e-2, f"opgen and torch disagree at {tokens} tokens: {err:.3g}"
            # Timed to the outputs' JAX arrays: a torchax tensor is no array JAX waits for.
            t = {n: jax_us(lambda x, f=f: interop.jax_view(f(x)), (x,), args.calls, args.rounds)
                 for n, f in compiled.items()}
            print(f"| {tokens} | {t['opgen']:.1f} µs | {t['torch']:.1f} µs | {t['torch'] / t['opgen']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
