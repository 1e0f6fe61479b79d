"""Runs the example of every op of the package that has one (examples/ops/<op>.py,
its `run(rng, where)`) through JAX, on the GPU when JAX has one and on the CPU
otherwise, each checking its results against a float64 numpy reference on
fresh random inputs; then the small Llama-architecture model of
examples/decode_step decoding greedily in JAX and in PyTorch (on the same
device), over its own caches and over fp8 caches, each against the same model
written with the framework's own ops, and
the PyTorch module of examples/torchax_mlp through torchax against eager
PyTorch. Exits non-zero on any mismatch."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

# JAX and PyTorch share the GPU here: JAX would otherwise take 75% of its memory when it starts,
# leaving the PyTorch decoder of examples/decode_step (about 15 GiB at its peak) a tight fit.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax
import numpy as np

import opgen_ops


def platform() -> str:
    try:
        return "cuda" if jax.devices("gpu") else "cpu"
    except RuntimeError:
        return "cpu"


EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"
OP_EXAMPLES = EXAMPLES_DIR / "ops"


def load(path: Path):
    """The module of an example file, with its folder importable (for the files beside it)."""
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def torchax_unusable() -> str | None:
    """Why torchax cannot run here, or None: it is missing, or it fails to
    import on this torch (torchax 0.0.13 on torch 2.15, which removed named
    tensors: torchax's bug)."""
    try:
        import torchax  # noqa: F401
    except Exception as e:  # whatever torchax raises: the line says it
        return f"torchax does not import ({type(e).__name__}: {e})"
    return None


def run_model_examples(where) -> int:
    """Runs the examples of whole models (each prints its lines); returns how
    many disagree with their references. torchax runs on JAX's default
    device, which is `where`; where torchax does not import, its example is
    skipped with a line that says why."""
    failures = 0
    for folder, name, kwargs in (("decode_step", "llama_jax", {"device": where, "kv_cache_dtype": "fp8"}),
                                 ("decode_step", "llama_torch", {"device": where, "kv_cache_dtype": "fp8"}),
                                 ("torchax_mlp", "torchax_mlp", {})):
        if folder == "torchax_mlp" and (why := torchax_unusable()):
            print(f"{name}: skipped: {why}")
            continue
        failures += load(EXAMPLES_DIR / folder / f"{name}.py").main(**kwargs) != 0
    return failures


def main() -> int:
    seed = int.from_bytes(os.urandom(4), "little")
    rng = np.random.default_rng(seed)
    where = platform()
    print(f"opgen examples on {where} ({jax.devices()[0].device_kind}), jax {jax.__version__}, seed {seed}")
    failures = 0
    print(f"{'op':<20} {'api':>3} {'shape':>14} {'rel. error':>11} {'tolerance':>9} {'time':>10}")
    for name in opgen_ops.OPS:
        example = OP_EXAMPLES / f"{name}.py"
        if not example.exists():
            # A new op runs in the test suite's generated tests from its spec alone;
            # an example shows it at a realistic size.
            print(f"{name:<20} (no example: add {os.path.relpath(example)})")
            continue
        for op, v, shape, err, elapsed, tol in load(example).run(rng, where):
            ok = err < tol
            failures += not ok
            print(f"{op:<20} {v:>3} {shape:>14} {err:>11.2e} {tol:>9.0e} {elapsed * 1e3:>8.3f} ms"
                  f"{'' if ok else '  MISMATCH'}")
    failures += run_model_examples(where)
    print("all examples match their references" if not failures else f"{failures} mismatch(es)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
