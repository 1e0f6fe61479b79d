"""How far an fp8 KV cache moves the decoder's logits, link by link (README.md, "The fp8 cache"): the
reference model of llama_torch.py (f32, torch alone) decodes T steps over fp8 caches (llama_inputs's
quantized_state()), then from the same tokens over the f32 caches, and this prints, per seed, each link of
the estimate beside what it measures:

  rho         the context caches' rounding error, |dequantised - x| / |x| (estimate 0.0265 for e4m3)
  eps_o       the attention outputs' relative error; est: rho * sqrt(1 + (r_q r_k)^2), r_q and r_k the rms
              of the queries and of the cached keys
  eps_x       the last residual's relative error (the final norm's input); est: eps_o * sqrt(sum over the
              layers of rms(o_l)^2) / rms(x_L), o_l layer l's attention output
  eps_logits  the logits' relative rms error
  stat        what the check bounds: max |logits - f32 cache's| / max |f32 cache's| = eps_logits * tail / peak,
              tail = max |logits - f32 cache's| / their rms, peak = max |f32 cache's| / their rms

  python examples/decode_step/fp8_error.py [--seeds N] [--cache-dtype float8_e5m2] [--gpu-model --steps T]

--gpu-model measures the GPU's model on the CPU: about 13 GiB of memory and about a minute a step (260 s for --steps 4).
"""

from __future__ import annotations

import argparse
import contextlib
import functools

import numpy as np
import torch

import llama_inputs  # beside this file
import llama_torch


@contextlib.contextmanager
def recording():
    """Records what the reference step's attention returns (with its query) and what its norms read (the
    residual stream), in call order, by wrapping the two functions of llama_torch that it calls."""
    calls = {"attention": [], "norm": []}
    attention, norm = llama_torch.attention_ref, llama_torch.rms_norm_ref

    def attention_rec(q, *args):
        out = attention(q, *args)
        calls["attention"].append((q, out))
        return out

    def norm_rec(x, weight):
        calls["norm"].append(x)
        return norm(x, weight)

    llama_torch.attention_ref, llama_torch.rms_norm_ref = attention_rec, norm_rec
    try:
        yield calls
    finally:
        llama_torch.attention_ref, llama_torch.rms_norm_ref = attention, norm


def rms(a):
    return float(np.sqrt(np.mean(np.square(np.asarray(a, np.float64)))))


def rel(a, b):
    return float(np.linalg.norm(np.asarray(a, np.float64) - np.asarray(b, np.float64)) /
                 np.linalg.norm(np.asarray(b, np.float64)))


def measure(c, seed, cache_dtype, steps):
    weights, state = llama_inputs.make_model(c, seed)
    q_state = llama_inputs.quantized_state(c, seed, cache_dtype)
    w = llama_torch.tree_map(lambda _, a: torch.from_numpy(a), weights)  # read-only: shared, not copied
    start = llama_torch.start_of(state, "cpu")
    pairs = list(zip(q_state["key_caches"] + q_state["value_caches"], q_state["k_scales"] + q_state["v_scales"],
                     state["key_caches"] + state["value_caches"]))
    rho = float(np.mean([rel(q.astype(np.float32) * s, x) for q, s, x in pairs]))
    r_k = float(np.mean([rms(x) for x in state["key_caches"]]))
    st = llama_torch.fresh_state(q_state, "cpu", torch.float32)
    with recording() as fp8:
        tokens, logits = llama_torch.decode(functools.partial(llama_torch.reference_step, w, st), st, steps)
    del st
    st = llama_torch.fresh_state(state, "cpu", torch.float32)
    llama_torch.reset(st, start)
    inputs = np.concatenate([state["tokens"][None].astype(np.int64), tokens[:-1]])
    with recording() as f32:
        _, f32_logits = llama_torch.decode(functools.partial(llama_torch.reference_step, w, st), st, steps, inputs)
    # The norms read the residual 2L + 1 times a step (before each attention, each MLP, and the final norm).
    finals = slice(2 * c.L, None, 2 * c.L + 1)
    r_q = float(np.mean([rms(q) for q, _ in f32["attention"]]))
    eps_o = float(np.mean([rel(a[1], b[1]) for a, b in zip(fp8["attention"], f32["attention"])]))
    rms_o = [np.mean([rms(o) for _, o in f32["attention"][layer::c.L]]) for layer in range(c.L)]
    x_last = np.mean([rms(x) for x in f32["norm"][finals]])
    eps_x = float(np.mean([rel(a, b) for a, b in zip(fp8["norm"][finals], f32["norm"][finals])]))
    eps_o_est = rho * np.sqrt(1 + (r_q * r_k) ** 2)
    return {"rho": rho, "eps_o": eps_o, "eps_o est": float(eps_o_est), "eps_x": eps_x,
            "eps_x est": float(eps_o * np.sqrt(np.sum(np.square(rms_o))) / x_last),
            "eps_logits": rms(logits - f32_logits) / rms(f32_logits),
            "tail": float(np.abs(logits - f32_logits).max()) / rms(logits - f32_logits),
            "peak": float(np.abs(f32_logits).max()) / rms(f32_logits),
            "stat": float(np.abs(logits - f32_logits).max() / np.abs(f32_logits).max()),
            "tokens": f"{int((tokens == f32_logits.argmax(-1)).sum())}/{tokens.size}"}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=10, help="models 0, 1, ..., seeds - 1")
    parser.add_argument("--cache-dtype", default="float8_e4m3fn", choices=["float8_e4m3fn", "float8_e5m2"])
    parser.add_argument("--gpu-model", action="store_true", help="the GPU's model (llama_inputs.GPU), on the CPU")
    parser.add_argument("--steps", type=int, help="decode steps (default: the model's T)")
    args = parser.parse_args()
    c = llama_inputs.GPU if args.gpu_model else llama_inputs.CPU
    steps = args.steps or c.T
    torch.set_num_threads(1 if not args.gpu_model else torch.get_num_threads())
    rows = []
    for seed in range(args.seeds):
        rows.append(measure(c, seed, args.cache_dtype, steps))
        print(f"seed {seed}: " + "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                                            for k, v in rows[-1].items()), flush=True)
    stat = [r["stat"] for r in rows]
    print(f"{args.cache_dtype}, {len(rows)} seeds, {steps} steps: stat mean {np.mean(stat):.4f}, "
          f"max {np.max(stat):.4f} (tolerance {c.fp8_tol:.0e}); eps_logits mean "
          f"{np.mean([r['eps_logits'] for r in rows]):.4f}")


if __name__ == "__main__":
    main()
