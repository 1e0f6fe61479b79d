"""Runs every example op of the package through JAX, on the GPU when JAX has
one and on the CPU otherwise, and checks each result against a float64 numpy
reference on fresh random inputs; then the small Llama-architecture model of
examples/decode_step decoding greedily in JAX and in PyTorch (on the same
device), each against the same model written with the framework's own ops, and
the PyTorch module of examples/torchax_mlp through torchax against eager
PyTorch. Exits non-zero on any mismatch."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

# JAX and PyTorch share the GPU here: JAX would otherwise take 75% of its memory when it starts,
# leaving the PyTorch decoder of examples/decode_step (about 15 GiB at its peak) a tight fit.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax
import numpy as np

import opgen_ops
import opgen_ops.jax as ops
from opgen_ops import _ops


def platform() -> str:
    try:
        return "cuda" if jax.devices("gpu") else "cpu"
    except RuntimeError:
        return "cpu"


def api_versions(op_name, where):
    """The api_versions the op has a handler for on `where` (its generated description says)."""
    return getattr(_ops, op_name).OP.handlers[where]


def example_simple_add(rng, where):
    n = (1 << 22) + 3 if where == "cuda" else (1 << 16) + 3  # odd: exercises the tail path
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    alpha = float(rng.uniform(-2, 2))
    ref = a.astype(np.float64) + alpha * b.astype(np.float64)
    rows = []
    for v in api_versions("simple_add", where):
        f = jax.jit(lambda a, b, v=v: ops.simple_add(a, b, alpha=alpha, api_version=v))
        da, db = jax.device_put(a), jax.device_put(b)
        f(da, db).block_until_ready()  # compile
        start = time.perf_counter()
        out = f(da, db)
        out.block_until_ready()
        elapsed = time.perf_counter() - start
        err = np.linalg.norm(np.asarray(out, np.float64) - ref) / np.linalg.norm(ref)
        rows.append(("simple_add", v, f"[{n}]", err, elapsed, 1e-6))
    return rows


def timed(f, *args):
    f(*args)  # compile
    start = time.perf_counter()
    out = jax.block_until_ready(f(*args))
    return out, time.perf_counter() - start


def relative(got, ref):
    return np.linalg.norm(np.asarray(got, np.float64) - ref) / np.linalg.norm(ref)


def example_rms_norm(rng, where):
    rows, d = (4096, 4096) if where == "cuda" else (64, 1024)
    rows_out = []
    for dtype, tol in ((np.float32, 1e-5), (jax.numpy.bfloat16, 1.5e-2), (np.float16, 2e-3)):
        x = rng.standard_normal((rows, d)).astype(dtype)
        w = rng.standard_normal(d).astype(dtype)
        ref = x.astype(np.float64) / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6) * w.astype(np.float64)
        for v in api_versions("rms_norm", where):
            f = jax.jit(lambda x, w, v=v: ops.rms_norm(x, w, api_version=v)[0])
            out, elapsed = timed(f, jax.device_put(x), jax.device_put(w))
            rows_out.append((f"rms_norm {np.dtype(dtype).name}", v, f"[{rows}, {d}]", relative(out, ref), elapsed, tol))
    return rows_out


def example_glu(rng, where):
    rows, d = (4096, 8192) if where == "cuda" else (64, 1024)
    x = rng.standard_normal((rows, d)).astype(np.float32)
    a, b = x[:, : d // 2].astype(np.float64), x[:, d // 2 :].astype(np.float64)
    gates = {"sigmoid": 1 / (1 + np.exp(-b)), "silu": b / (1 + np.exp(-b))}
    out_rows = []
    for activation, gate in gates.items():
        for v in api_versions("glu", where):
            f = jax.jit(lambda x, v=v, act=activation: ops.glu(x, activation=act, api_version=v))
            out, elapsed = timed(f, jax.device_put(x))
            out_rows.append((f"glu {activation} f32", v, f"[{rows}, {d}]", relative(out, a * gate), elapsed, 1e-6))
    return out_rows


def example_flip(rng, where):
    batch, m, n = (64, 512, 512) if where == "cuda" else (8, 64, 64)
    x = rng.standard_normal((batch, m, n)).astype(np.float32)
    out_rows = []
    for v in api_versions("flip", where):
        out, elapsed = timed(jax.jit(lambda x, v=v: ops.flip(x, dims=(-2, -1), api_version=v)), jax.device_put(x))
        # A flip is exact: any difference is a wrong element.
        out_rows.append(("flip rows+cols f32", v, f"[{batch}, {m}, {n}]", relative(out, x[:, ::-1, ::-1]), elapsed, 1e-30))
    return out_rows


def example_kv_cache_write(rng, where):
    b, s, h = (32, 1024, 1024) if where == "cuda" else (8, 64, 256)
    cache = rng.standard_normal((b, s, h)).astype(np.float32)
    values = rng.standard_normal((b, h)).astype(np.float32)
    pos = rng.integers(0, s, b).astype(np.int32)
    want = cache.copy()
    want[np.arange(b), pos] = values
    out_rows = []
    for v in api_versions("kv_cache_write", where):
        # The cache is donated: XLA updates it in place, with no copy.
        f = jax.jit(lambda c, x, p, v=v: ops.kv_cache_write(c, x, p, api_version=v), donate_argnums=0)
        x, p = jax.device_put(values), jax.device_put(pos)
        f(jax.device_put(cache), x, p)  # compile
        c = jax.block_until_ready(jax.device_put(cache))
        start = time.perf_counter()
        out = jax.block_until_ready(f(c, x, p))
        elapsed = time.perf_counter() - start
        out_rows.append(("kv_cache_write f32", v, f"[{b}, {s}, {h}]", relative(out, want), elapsed, 1e-30))
    return out_rows


def example_softmax(rng, where):
    rows, d = (4096, 8192) if where == "cuda" else (64, 1024)
    out_rows = []
    for dtype, tol in ((np.float32, 1e-5), (jax.numpy.bfloat16, 1.5e-2)):
        x = (rng.standard_normal((rows, d)) * 3).astype(dtype)
        x64 = x.astype(np.float64)
        e = np.exp(x64 - x64.max(-1, keepdims=True))
        ref = e / e.sum(-1, keepdims=True)
        for v in api_versions("softmax", where):
            out, elapsed = timed(jax.jit(lambda x, v=v: ops.softmax(x, api_version=v)), jax.device_put(x))
            out_rows.append((f"softmax {np.dtype(dtype).name}", v, f"[{rows}, {d}]", relative(out, ref), elapsed, tol))
    return out_rows


def example_topk_softmax(rng, where):
    """A MoE router's logits (tokens x experts) in bf16: each row a shuffle
    of distinct values, so that the top k have no ties to break. The error is
    that of the weights, infinite where an index differs."""
    n, e, k = (65536, 256, 8) if where == "cuda" else (256, 64, 8)
    x = (rng.permuted(np.tile(np.arange(e) - e // 2, (n, 1)), axis=1) / 16).astype(jax.numpy.bfloat16)
    x64 = x.astype(np.float64)
    p = np.exp(x64 - x64.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    want_i = np.argsort(-p, axis=-1, kind="stable")[:, :k]
    want_w = np.take_along_axis(p, want_i, -1)
    out_rows = []
    for v in api_versions("topk_softmax", where):
        (w, i), elapsed = timed(jax.jit(lambda x, v=v: ops.topk_softmax(x, topk=k, api_version=v)), jax.device_put(x))
        err = relative(w, want_w) if np.array_equal(np.asarray(i), want_i) else np.inf
        out_rows.append(("topk_softmax bf16", v, f"[{n}, {e}]", err, elapsed, 1e-5))
    return out_rows


def example_layer_norm(rng, where):
    """bf16 activations with weight and bias, and the statistics asked for
    (f32 for bf16); the error is that of the output."""
    rows, d = (16384, 4096) if where == "cuda" else (64, 1024)
    x = (rng.standard_normal((rows, d)) + 2).astype(jax.numpy.bfloat16)
    w, b = (rng.standard_normal(d).astype(jax.numpy.bfloat16) for _ in range(2))
    x64, w64, b64 = (a.astype(np.float64) for a in (x, w, b))
    centred = x64 - x64.mean(-1, keepdims=True)
    ref = centred / np.sqrt((centred * centred).mean(-1, keepdims=True) + 1e-5) * w64 + b64
    out_rows = []
    for v in api_versions("layer_norm", where):
        f = jax.jit(lambda x, w, b, v=v: ops.layer_norm(x, w, b, return_mean=True, return_rstd=True, api_version=v))
        (out, mean, _), elapsed = timed(f, *(jax.device_put(a) for a in (x, w, b)))
        err = max(relative(out, ref), relative(mean, x64.mean(-1)))
        out_rows.append(("layer_norm bf16", v, f"[{rows}, {d}]", err, elapsed, 1.5e-2))
    return out_rows


def example_dynamic_per_token_scaled_fp8_quant(rng, where):
    """bf16 activations quantised per row to float8_e4m3fn; the error is that
    of out * scale against x (e4m3fn keeps 3 bits of mantissa)."""
    rows, d = (16384, 4096) if where == "cuda" else (64, 1024)
    x = rng.standard_normal((rows, d)).astype(jax.numpy.bfloat16)
    out_rows = []
    for v in api_versions("dynamic_per_token_scaled_fp8_quant", where):
        f = jax.jit(lambda x, v=v: ops.dynamic_per_token_scaled_fp8_quant(x, out_dtype="float8_e4m3fn", api_version=v))
        (q, scale), elapsed = timed(f, jax.device_put(x))
        back = np.asarray(q).astype(np.float64) * np.asarray(scale, np.float64)[:, None]
        out_rows.append(("fp8 quant bf16>e4m3", v, f"[{rows}, {d}]", relative(back, x.astype(np.float64)), elapsed,
                         6.5e-2))
    return out_rows


def example_gemm(rng, where):
    """a @ b in bf16 (cuBLASLt on the GPU, through the op's state)."""
    m, n, k = (2048, 2048, 2048) if where == "cuda" else (96, 80, 64)
    a = rng.standard_normal((m, k)).astype(jax.numpy.bfloat16)
    b = rng.standard_normal((k, n)).astype(jax.numpy.bfloat16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    out_rows = []
    for v in api_versions("gemm", where):
        out, elapsed = timed(jax.jit(lambda a, b, v=v: ops.gemm(a, b, api_version=v)), jax.device_put(a),
                             jax.device_put(b))
        out_rows.append(("gemm bf16", v, f"{m}x{n}x{k}", relative(out, ref), elapsed, 1.5e-2))
    return out_rows


EXAMPLES = {"simple_add": example_simple_add, "rms_norm": example_rms_norm, "glu": example_glu, "flip": example_flip,
            "kv_cache_write": example_kv_cache_write, "softmax": example_softmax, "topk_softmax": example_topk_softmax,
            "layer_norm": example_layer_norm,
            "dynamic_per_token_scaled_fp8_quant": example_dynamic_per_token_scaled_fp8_quant, "gemm": example_gemm}

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"


def run_model_examples(where) -> int:
    """Runs the examples of whole models (each prints its lines); returns how
    many disagree with their references. torchax runs on JAX's default
    device, which is `where`."""
    failures = 0
    for folder, name, kwargs in (("decode_step", "llama_jax", {"device": where}),
                                 ("decode_step", "llama_torch", {"device": where}),
                                 ("torchax_mlp", "torchax_mlp", {})):
        sys.path.insert(0, str(EXAMPLES_DIR / folder))  # for the files beside it (llama_inputs.py)
        spec = importlib.util.spec_from_file_location(name, EXAMPLES_DIR / folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        failures += module.main(**kwargs) != 0
        sys.path.pop(0)
    return failures


def main() -> int:
    seed = int.from_bytes(os.urandom(4), "little")
    rng = np.random.default_rng(seed)
    where = platform()
    print(f"opgen examples on {where} ({jax.devices()[0].device_kind}), jax {jax.__version__}, seed {seed}")
    failures = 0
    print(f"{'op':<20} {'api':>3} {'shape':>14} {'rel. error':>11} {'tolerance':>9} {'time':>10}")
    for name in opgen_ops.OPS:
        if name not in EXAMPLES:
            # A new op runs in the test suite's generated tests from its spec alone;
            # an example here shows it at a realistic size.
            print(f"{name:<20} (no example: add one to {os.path.relpath(__file__)})")
            continue
        for op, v, shape, err, elapsed, tol in EXAMPLES[name](rng, where):
            ok = err < tol
            failures += not ok
            print(f"{op:<20} {v:>3} {shape:>14} {err:>11.2e} {tol:>9.0e} {elapsed * 1e3:>8.3f} ms"
                  f"{'' if ok else '  MISMATCH'}")
    failures += run_model_examples(where)
    print("all examples match their references" if not failures else f"{failures} mismatch(es)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
