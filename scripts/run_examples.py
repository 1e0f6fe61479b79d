"""Runs every example op of the package through JAX, on the GPU when JAX has
one and on the CPU otherwise, and checks each result against a float64 numpy
reference on fresh random inputs. Exits non-zero on any mismatch."""

from __future__ import annotations

import os
import sys
import time

import jax
import numpy as np

import opgen_ops
import opgen_ops.jax as ops


def platform() -> str:
    try:
        return "cuda" if jax.devices("gpu") else "cpu"
    except RuntimeError:
        return "cpu"


def api_versions(spec_versions, where):
    # XLA:CPU runs only the typed FFI (4) and legacy version 3.
    return [v for v in spec_versions if where == "cuda" or v in (3, 4)]


def example_simple_add(rng, where):
    n = (1 << 22) + 3 if where == "cuda" else (1 << 16) + 3  # odd: exercises the tail path
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    alpha = float(rng.uniform(-2, 2))
    ref = a.astype(np.float64) + alpha * b.astype(np.float64)
    rows = []
    for v in api_versions((4, 3, 2, 1), where):
        f = jax.jit(lambda a, b, v=v: ops.simple_add(a, b, alpha=alpha, api_version=v))
        da, db = jax.device_put(a), jax.device_put(b)
        f(da, db).block_until_ready()  # compile
        start = time.perf_counter()
        out = f(da, db)
        out.block_until_ready()
        elapsed = time.perf_counter() - start
        err = np.linalg.norm(np.asarray(out, np.float64) - ref) / np.linalg.norm(ref)
        rows.append(("simple_add", v, f"[{n}]", err, elapsed))
    return rows


EXAMPLES = {"simple_add": example_simple_add}


def main() -> int:
    seed = int.from_bytes(os.urandom(4), "little")
    rng = np.random.default_rng(seed)
    where = platform()
    print(f"opgen examples on {where} ({jax.devices()[0].device_kind}), jax {jax.__version__}, seed {seed}")
    missing = set(opgen_ops.OPS) - set(EXAMPLES)
    if missing:
        print(f"error: no example for op(s) {sorted(missing)}: add one to {__file__}")
        return 1
    failures = 0
    print(f"{'op':<12} {'api':>3} {'shape':>12} {'rel. error':>11} {'time':>10}")
    for name in opgen_ops.OPS:
        for op, v, shape, err, elapsed in EXAMPLES[name](rng, where):
            ok = err < 1e-6
            failures += not ok
            print(f"{op:<12} {v:>3} {shape:>12} {err:>11.2e} {elapsed * 1e3:>8.3f} ms{'' if ok else '  MISMATCH'}")
    print("all examples match the float64 reference" if not failures else f"{failures} mismatch(es)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
