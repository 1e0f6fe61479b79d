#!/usr/bin/env python3
"""Benchmarks opgen_ops.simple_add (generated XLA glue) on a GPU against baselines
measured in the same process.

  a. Bandwidth at 256 MiB per operand: generated op (api_version 4 and 3) vs
     jnp.add vs a device-to-device copy (torch, else XLA), in GB/s counting
     bytes read + written; K dependent calls in one jitted function, separated
     by jax.lax.optimization_barrier, so JAX's dispatch is amortized over K.
  b. The optimized HLO of the generated chain: how many copies XLA added.
  c. Per-call overhead on small vectors: 100 chained calls in one jit, generated
     handler (api_version 4) vs the hand-written handler of bench/handwritten_add.cc,
     measured twice, interleaved (A B A B), with XLA's command buffers (CUDA
     graphs; XLA's default) and without them (handlers run on every call).
  d. Every variant is checked once against numpy float64 before any timing.

Usage (GPU; the build must have -DOPGEN_BUILD_BENCH=ON for _bench_handwritten):
  PYTHONPATH=build/python python bench/bench_simple_add.py [--out results.txt]
On JAX's CPU backend (the hand-written CPU handler where the build has it; no torch;
[c] has one mode, as XLA:CPU has no command buffers):
  PYTHONPATH=build/python python bench/bench_simple_add.py --cpu --size-mib 4
CPU smoke test (--cpu at tiny sizes):
  PYTHONPATH=build/python python bench/bench_simple_add.py --cpu-smoke
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
T0 = time.perf_counter()
MIB = 1 << 20


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:7.1f}s] {msg}", flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true", help="JAX's CPU backend (no torch)")
    p.add_argument("--cpu-smoke", action="store_true", help="--cpu at tiny sizes")
    p.add_argument("--out", type=Path, help="also write the final table to this file")
    p.add_argument("--build-dir", type=Path,
                   help="directory holding opgen_ops and _bench_handwritten (default: PYTHONPATH, "
                        "else <repo>/build/python)")
    p.add_argument("--size-mib", type=int, default=256, help="[a] MiB per operand (default 256)")
    p.add_argument("--k", type=int, default=20, help="[a] chained calls per jitted function (default 20)")
    p.add_argument("--reps", type=int, default=50, help="[a] timed repetitions per variant (default 50)")
    p.add_argument("--overhead-sizes", default="1024,1048576",
                   help="[c] vector lengths, comma-separated (default 1024,1048576)")
    p.add_argument("--overhead-k", type=int, default=100, help="[c] chained calls per jit (default 100)")
    p.add_argument("--overhead-reps", type=int, default=1000,
                   help="[c] timed repetitions per measurement (default 1000)")
    p.add_argument("--copy-baseline", choices=("auto", "torch", "xla"), default="auto",
                   help="[a] reference copy for the bandwidth target (auto: torch if it works, else XLA)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    args.cpu = args.cpu or args.cpu_smoke
    if args.cpu_smoke:
        args.size_mib = 0  # 16 Ki elements, see below
        args.k = 4
        args.reps = 5
        args.overhead_sizes = "1024,4099"
        args.overhead_k = 10
        args.overhead_reps = 10
        args.copy_baseline = "xla"
    args.overhead_sizes = [int(s) for s in str(args.overhead_sizes).split(",") if s]
    return args


ARGS = parse_args()

# --- Environment, before JAX initializes its backend ---------------------------
if ARGS.cpu:
    os.environ["JAX_PLATFORMS"] = "cpu"
else:
    # Leave room on the GPU for torch's copy baseline (JAX preallocates 75% by default).
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5")

if ARGS.build_dir is not None:
    sys.path.insert(0, str(ARGS.build_dir.resolve()))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

try:
    import opgen_ops  # noqa: F401
except ImportError:
    fallback = REPO / "build" / "python"
    sys.path.insert(0, str(fallback))
    try:
        import opgen_ops  # noqa: F401
    except ImportError as e:
        sys.exit(f"cannot import opgen_ops ({e}); build it (cmake --build build) and run with "
                 f"PYTHONPATH=<build>/python or --build-dir")
import opgen_ops._C as opgen_C  # noqa: E402
import opgen_ops.jax as oj  # noqa: E402

ON_GPU = not ARGS.cpu
F32 = np.float32
EPS32 = float(np.finfo(np.float32).eps)

# Compiler options that keep XLA from capturing the chain in a command buffer
# (CUDA graph), so that every call runs its handler on the host.
NO_GRAPHS = {"xla_gpu_graph_min_graph_size": 1_000_000}


class BenchError(RuntimeError):
    pass


def fail(msg: str) -> None:
    print(f"\nBENCHMARK ABORTED: {msg}", flush=True)
    sys.exit(1)


# --- Ops --------------------------------------------------------------------
HANDWRITTEN_TARGET = "bench_handwritten_add"
HANDWRITTEN_LABEL = "hand-written FFI"  # its variant's name in the tables


def gen_op(api_version: int):
    def op(x, b, alpha=1.0):
        return oj.simple_add(x, b, alpha=alpha, api_version=api_version)
    return op


def hand_op(x, b, alpha=1.0):
    return jax.ffi.ffi_call(
        HANDWRITTEN_TARGET, jax.ShapeDtypeStruct(x.shape, x.dtype), vmap_method="sequential"
    )(x, b, alpha=np.float32(alpha))


def jnp_add_op(x, b, alpha=1.0):
    # alpha == 1.0 in every timed chain: written as a + b, as a user would.
    return x + b if alpha == 1.0 else x + F32(alpha) * b


def chain(op, k: int):
    """x -> op(x, b), k times, each result behind an optimization barrier."""
    def f(x, b):
        for _ in range(k):
            x = op(x, b)
            x = lax.optimization_barrier(x)
        return x
    return f


def copy_chain(k: int):
    """The brief's form: jnp.copy in a barrier chain (XLA may elide every copy)."""
    def f(x):
        for _ in range(k):
            x = jnp.copy(x)
            x = lax.optimization_barrier(x)
        return x
    return f


def copy_fanout(k: int):
    """k outputs, each a copy of x: XLA must give every output its own buffer,
    distinct from the (non-donated) parameter, so it emits k real copies."""
    def f(x):
        outs = []
        for _ in range(k):
            x = lax.optimization_barrier(x)
            outs.append(jnp.copy(x))
        return tuple(outs)
    return f


def compile_fn(f, *args, options=None):
    lowered = jax.jit(f).lower(*args)
    return lowered.compile(options) if options else lowered.compile()


# --- Optimized HLO ----------------------------------------------------------
_INSTR = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>[^\s=]+)\s*=\s*(?P<shape>.+?)\s+(?P<op>[a-z][a-z0-9\-]*)\((?P<rest>.*)$")
_HEADER = re.compile(r"^\s*(?:ENTRY\s+)?%?(?P<name>[^\s(]+)\s*\(.*\)\s*->\s*.*\{\s*$")
_CALLS = re.compile(r"calls=%?([\w.\-]+)")


class Hlo:
    """The computations and instructions of an optimized HLO module's text."""

    def __init__(self, text: str):
        self.text = text
        self.comps: dict[str, list[dict]] = {}
        cur = None
        for line in text.splitlines():
            if cur is None:
                m = _HEADER.match(line)
                if m:
                    cur = m.group("name")
                    self.comps[cur] = []
                continue
            if line.lstrip().startswith("}"):
                cur = None
                continue
            m = _INSTR.match(line)
            if m:
                self.comps[cur].append({"op": m.group("op"), "line": line.strip(), "rest": m.group("rest")})
        self.fusion_bodies = set()
        for instrs in self.comps.values():
            for ins in instrs:
                if ins["op"] == "fusion":
                    self.fusion_bodies.update(_CALLS.findall(ins["rest"]))
        if not self.comps:
            raise BenchError("could not parse the optimized HLO text")

    def top_level(self):
        """Instructions outside fusion bodies: each one a kernel, copy or thunk."""
        for name, instrs in self.comps.items():
            if name not in self.fusion_bodies:
                yield from instrs

    def copies(self) -> list[str]:
        """copy / copy-start instructions, and fusions that only copy (wrapped copies)."""
        found = []
        for ins in self.top_level():
            if ins["op"] in ("copy", "copy-start"):
                found.append(ins["line"])
            elif ins["op"] == "fusion":
                for body in _CALLS.findall(ins["rest"]):
                    ops = {i["op"] for i in self.comps.get(body, [])}
                    if ops & {"copy"} and ops <= {"parameter", "copy", "bitcast", "tuple"}:
                        found.append(ins["line"])
        return found

    def count(self, op: str, contains: str = "") -> int:
        return sum(1 for i in self.top_level() if i["op"] == op and contains in i["line"])


def short(line: str, n: int = 160) -> str:
    return line if len(line) <= n else line[: n - 3] + "..."


# --- Timing -----------------------------------------------------------------
def timed(fn, args, reps: int, warmup: int = 5) -> list[float]:
    """Wall seconds of fn(*args) through block_until_ready, reps times, after warm-up."""
    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        out.append(time.perf_counter() - t)
    return out


def timed_interleaved(variants: dict, args_of: dict, reps: int, warmup: int = 5) -> dict:
    """Round-robin over variants (one call each per round), so drift hits all alike."""
    for name, fn in variants.items():
        for _ in range(warmup):
            jax.block_until_ready(fn(*args_of[name]))
    times = {name: [] for name in variants}
    for _ in range(reps):
        for name, fn in variants.items():
            t = time.perf_counter()
            jax.block_until_ready(fn(*args_of[name]))
            times[name].append(time.perf_counter() - t)
    return times


def med(xs) -> float:
    return statistics.median(xs)


# --- Correctness ------------------------------------------------------------
def check_close(what: str, got, ref64: np.ndarray, tol: float) -> None:
    got = np.asarray(got)
    if got.shape != ref64.shape or got.dtype != np.float32:
        fail(f"correctness: {what}: got {got.dtype}{list(got.shape)}, expected float32{list(ref64.shape)}")
    if not np.all(np.isfinite(got)):
        fail(f"correctness: {what}: non-finite values in the result")
    err = np.abs(got.astype(np.float64) - ref64)
    worst = int(np.argmax(err))
    if err[worst] > tol:
        fail(f"correctness: {what} is WRONG: max |err| = {err[worst]:.3e} at index {worst} "
             f"(got {got[worst]!r}, expected {ref64[worst]!r}, tolerance {tol:.3e})")
    log(f"  ok  {what}: max |err| {err[worst]:.2e} (tol {tol:.1e})")


def chain_tol(ref64: np.ndarray, k: int) -> float:
    # k float32 roundings of values bounded by max|ref|, plus slack.
    return 2.0 * (k + 1) * EPS32 * max(1.0, float(np.max(np.abs(ref64))))


# --- Main -------------------------------------------------------------------
def main() -> None:
    rng = np.random.default_rng(ARGS.seed)
    table: list[str] = []
    emit = table.append

    def randn(n):
        return rng.standard_normal(n, dtype=np.float32)

    backend = jax.default_backend()
    device = jax.devices()[0]
    log(f"jax {jax.__version__}, backend {backend}, device {device.device_kind}, "
        f"opgen_ops from {Path(opgen_ops.__file__).parent}")
    if ON_GPU:
        if backend != "gpu":
            fail(f"JAX's default backend is {backend!r}, not 'gpu' (install jax[cuda12], or run --cpu-smoke)")
        if not opgen_C.built_with_cuda:
            fail("opgen_ops._C was built without CUDA (configure with nvcc available / -DOPGEN_CUDA=ON)")
    platform = "CUDA" if ON_GPU else "cpu"
    try:
        import _bench_handwritten
    except ImportError as e:
        if ON_GPU or not ARGS.cpu_smoke:
            fail(f"cannot import _bench_handwritten ({e}): configure with -DOPGEN_BUILD_BENCH=ON, "
                 f"build, and put <build>/python on PYTHONPATH")
        _bench_handwritten = None
    if _bench_handwritten is not None:
        for name, capsule in _bench_handwritten.targets().get(platform, {}).items():
            jax.ffi.register_ffi_target(name, capsule, platform=platform)
        log(f"registered the hand-written handler {HANDWRITTEN_TARGET!r} for {platform}")
        hand_label = HANDWRITTEN_LABEL
        hand = hand_op
    else:
        # A smoke run of a build without the baseline: a stand-in exercises the same code paths.
        hand_label = "stand-in: generated v3 (smoke)"
        hand = gen_op(3)

    api_versions = (4, 3)
    gen_variants = {f"generated v{v}": gen_op(v) for v in api_versions}

    # ---------------- d. correctness, single calls, odd size, alpha != 1 -------
    # An odd N runs both the float4 loop and the scalar tail of the CUDA body.
    n_odd = (1 << 20) + 3 if ON_GPU else 1027
    alpha = 0.75
    log(f"[d] correctness, single calls: N = {n_odd}, alpha = {alpha}, fresh random inputs")
    a_np, b_np = randn(n_odd), randn(n_odd)
    ref = a_np.astype(np.float64) + alpha * b_np.astype(np.float64)
    tol1 = 4 * EPS32 * max(1.0, float(np.max(np.abs(ref))))
    single = dict(gen_variants)
    single[hand_label] = hand
    single["jnp.add"] = jnp_add_op
    for name, op in single.items():
        out = jax.jit(lambda x, y, op=op: op(x, y, alpha))(jnp.asarray(a_np), jnp.asarray(b_np))
        check_close(f"{name} (1 call)", out, ref, tol1)

    # ---------------- a/b. bandwidth -------------------------------------------
    n = ARGS.size_mib * MIB // 4 if ARGS.size_mib else 16 * 1024
    k = ARGS.k
    mib = n * 4 / MIB
    log(f"[a] bandwidth: N = {n} float32 ({mib:g} MiB per operand), K = {k} chained calls per jit")
    variants = dict(gen_variants)
    variants[hand_label] = hand
    variants["jnp.add (a + b)"] = jnp_add_op

    # Fresh inputs for the correctness check of the exact timed executables.
    a_chk, b_chk = jnp.asarray(randn(n)), jnp.asarray(randn(n))
    ref_chain = np.asarray(a_chk).astype(np.float64) + k * np.asarray(b_chk).astype(np.float64)
    tolk = chain_tol(ref_chain, k)
    a_dev, b_dev = jnp.asarray(randn(n)), jnp.asarray(randn(n))
    compiled, hlos = {}, {}
    for name, op in variants.items():
        log(f"  compiling the K-chain of {name}")
        compiled[name] = compile_fn(chain(op, k), a_dev, b_dev)
        hlos[name] = Hlo(compiled[name].as_text())
        check_close(f"{name} (K-chain, timed executable)", compiled[name](a_chk, b_chk), ref_chain, tolk)
    del a_chk, b_chk, ref_chain

    # HLO facts: kernels per chain and copies.
    facts = {}
    for name in variants:
        h = hlos[name]
        if name.startswith("jnp.add"):
            kernels = h.count("fusion")
        else:
            target = HANDWRITTEN_TARGET if name == HANDWRITTEN_LABEL else "opgen_ops_simple_add"
            kernels = h.count("custom-call", target)
        # The same op once, without barriers: copies XLA puts around a lone call.
        one = Hlo(compile_fn(lambda x, y, op=variants[name]: op(x, y), a_dev, b_dev).as_text()).copies()
        facts[name] = {"kernels": kernels, "copies": h.copies(), "copies1": one}
        log(f"  HLO of {name}: {kernels} kernels/custom calls and {len(h.copies())} copies in the K-chain, "
            f"{len(one)} copies in a one-call jit")
        for line in facts[name]["copies"] + one:
            log(f"    copy: {short(line)}")

    add_fused = facts["jnp.add (a + b)"]["kernels"] != k
    if add_fused:
        msg = (f"XLA compiled the jnp.add K-chain into {facts['jnp.add (a + b)']['kernels']} kernels, not {k}: "
               f"the barriers did not stop fusion, so its per-call time is not one add")
        if ON_GPU:
            log("  WARNING: " + msg)
        else:
            log("  note (expected on CPU: XLA:CPU removes optimization barriers before fusion): " + msg)

    log(f"  timing {len(variants)} variants, {ARGS.reps} interleaved rounds")
    t = timed_interleaved(compiled, {name: (a_dev, b_dev) for name in compiled}, ARGS.reps)
    per_call = {name: med(ts) / k for name, ts in t.items()}
    spread = {name: (min(ts) / k, max(ts) / k) for name, ts in t.items()}
    for name in variants:
        log(f"  {name}: {per_call[name] * 1e6:.2f} us per call")
    del compiled

    # Copy baselines.
    copy_rows = {}  # label -> (seconds per copy, note)
    copy_ref = None
    if ARGS.copy_baseline in ("auto", "torch") and ON_GPU:
        try:
            copy_rows["copy, torch dst.copy_(src)"] = (torch_copy_seconds(n), "CUDA events")
            copy_ref = "copy, torch dst.copy_(src)"
        except Exception as e:  # noqa: BLE001
            if ARGS.copy_baseline == "torch":
                fail(f"torch copy baseline failed: {type(e).__name__}: {e}")
            log(f"  torch copy baseline unavailable ({type(e).__name__}: {e}); using XLA's copy")
    xla_copy = xla_copy_seconds(a_dev, k)
    if xla_copy is not None:
        copy_rows[xla_copy[1]] = (xla_copy[0], xla_copy[2])
        if copy_ref is None:
            copy_ref = xla_copy[1]
    del a_dev, b_dev

    # ---------------- table a/b ------------------------------------------------
    add_bytes = 3 * n * 4
    copy_bytes = 2 * n * 4
    gbps = {name: add_bytes / s / 1e9 for name, s in per_call.items()}
    copy_gbps = {name: copy_bytes / s / 1e9 for name, (s, _) in copy_rows.items()}
    t_add = per_call["jnp.add (a + b)"]
    ref_bw = copy_gbps.get(copy_ref) if copy_ref else None
    cpu_note = ("  (CPU smoke run: figures and targets are meaningless)" if ARGS.cpu_smoke
                else "  (CPU: the bandwidth targets are the GPU's)" if not ON_GPU else "")

    emit(f"simple_add benchmark: jax {jax.__version__}, {backend} {device.device_kind}{cpu_note}")
    if os.environ.get("XLA_FLAGS"):
        emit(f"XLA_FLAGS={os.environ['XLA_FLAGS']}")
    emit("")
    emit(f"[a] Bandwidth: N = {n} float32 ({mib:g} MiB per operand); K = {k} dependent calls in one jit, "
         f"separated by optimization_barrier; median of {ARGS.reps} interleaved rounds; per call = total / K.")
    emit("    GB/s count bytes read + written: 3 x operand for the adds, 2 x operand for copies.")
    hdr = f"    {'variant':34s} {'per call us':>12s} {'min..max us':>20s} {'GB/s':>9s} {'t / jnp.add':>12s} {'BW / copy':>10s}"
    emit(hdr)
    for name in variants:
        lo, hi = spread[name]
        bw_ratio = f"{gbps[name] / ref_bw:10.3f}" if ref_bw else f"{'n/a':>10s}"
        rng_us = f"{lo * 1e6:.1f}..{hi * 1e6:.1f}"
        emit(f"    {name:34s} {per_call[name] * 1e6:12.2f} {rng_us:>20s} {gbps[name]:9.1f} "
             f"{per_call[name] / t_add:12.3f} {bw_ratio}")
    for name, (s, note) in copy_rows.items():
        mark = " (reference)" if name == copy_ref else ""
        emit(f"    {name:34s} {s * 1e6:12.2f} {'':>20s} {copy_gbps[name]:9.1f} {'':>12s} "
             f"{copy_gbps[name] / ref_bw if ref_bw else float('nan'):10.3f}  [{note}]{mark}")
    if not copy_rows:
        emit("    copy baseline: unavailable")

    def verdict(ok: bool) -> str:
        return ("PASS" if ok else "FAIL") if ON_GPU else "n/a on CPU"

    def handler_verdict(ok: bool) -> str:
        # The handlers' cost on the host is the same question on either backend.
        return "n/a (smoke)" if ARGS.cpu_smoke else ("PASS" if ok else "FAIL")

    r_time = per_call["generated v4"] / t_add
    emit(f"    target: generated v4 time / jnp.add time = {r_time:.3f}  (within 5%: <= 1.05)  "
         f"{verdict(r_time <= 1.05)}{'  [jnp.add chain was fused, see HLO line]' if add_fused else ''}")
    r3 = per_call["generated v3"] / t_add
    emit(f"            generated v3 time / jnp.add time = {r3:.3f}  (within 5%: <= 1.05)  {verdict(r3 <= 1.05)}")
    if ref_bw:
        r_bw = gbps["generated v4"] / ref_bw
        emit(f"    target: generated v4 GB/s / copy GB/s ({copy_ref}) = {r_bw:.3f}  (>= 0.85)  {verdict(r_bw >= 0.85)}")
    else:
        emit("    target: generated v4 GB/s / copy GB/s: no copy baseline")

    emit("")
    emit(f"[b] Optimized HLO: copy instructions XLA added (copy, copy-start, copy-only fusions) in the timed "
         f"K = {k} chain and in a one-call jit; kernels = custom calls (or fusions, for jnp.add) in the chain.")
    for name in variants:
        f_ = facts[name]
        emit(f"    {name:34s} copies: {len(f_['copies'])} in K-chain, {len(f_['copies1'])} in one-call jit   "
             f"kernels: {f_['kernels']} (expect {k})")
        for line in f_["copies"] + f_["copies1"]:
            emit(f"        {short(line)}")
    n_gen_copies = sum(len(facts[f'generated v{v}']['copies']) + len(facts[f'generated v{v}']['copies1'])
                       for v in api_versions)
    emit(f"    target: no copies around the generated custom calls: {n_gen_copies} copies  "
         f"{'PASS' if n_gen_copies == 0 else 'FAIL'}")

    # ---------------- c. per-call overhead -------------------------------------
    emit("")
    overhead_section(emit, hand, hand_label, randn, handler_verdict)

    # ---------------- output ---------------------------------------------------
    text = "\n".join(table) + "\n"
    print("\n" + "=" * 100 + "\n" + text + "=" * 100, flush=True)
    if ARGS.out:
        ARGS.out.parent.mkdir(parents=True, exist_ok=True)
        ARGS.out.write_text(text)
        log(f"table written to {ARGS.out}")


def torch_copy_seconds(n: int) -> float:
    """Seconds per 256 MiB device-to-device copy with torch (CUDA events)."""
    import torch

    if not torch.cuda.is_available():
        raise BenchError("torch.cuda.is_available() is False")
    log(f"  torch {torch.__version__}: timing dst.copy_(src) of {n * 4 / MIB:g} MiB on {torch.cuda.get_device_name()}")
    src = torch.randn(n, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    if not torch.equal(dst, src):
        fail("correctness: torch copy baseline: dst != src")
    log("  ok  torch copy: dst == src")
    inner, reps = 20, max(20, ARGS.reps)
    for _ in range(10):
        dst.copy_(src)
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            dst.copy_(src)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3 / inner)
    del src, dst
    torch.cuda.empty_cache()
    s = med(samples)
    log(f"  torch copy: {s * 1e6:.2f} us per copy (median of {reps} x {inner})")
    return s


def xla_copy_seconds(x, k: int):
    """(seconds per copy, label, note) of an XLA device copy, after proving in
    the optimized HLO that the timed executable really makes k copies."""
    log(f"  XLA copy baseline: jnp.copy in a barrier chain of K = {k}")
    c = compile_fn(copy_chain(k), x)
    n_copies = len(Hlo(c.as_text()).copies())
    log(f"    optimized HLO holds {n_copies} copies for K = {k} jnp.copy calls")
    if n_copies >= k:
        fn, label = c, "copy, XLA (jnp.copy barrier chain)"
    else:
        log("    XLA elided them (jnp.copy is a no-op in XLA); using K outputs that each copy x")
        fn = compile_fn(copy_fanout(k), x)
        h = Hlo(fn.as_text())
        n_copies = len(h.copies())
        log(f"    optimized HLO holds {n_copies} copies for K = {k} outputs")
        for line in h.copies()[:3]:
            log(f"      {short(line)}")
        if n_copies != k:
            log(f"    WARNING: expected {k} copies; no XLA copy baseline")
            return None
        label = "copy, XLA (K jnp.copy outputs)"
    outs = fn(x)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    x_np = np.asarray(x)
    for o in outs:
        if not np.array_equal(np.asarray(o), x_np):
            fail("correctness: XLA copy baseline: a copy differs from its source")
    log(f"  ok  XLA copy: {len(outs)} outputs equal the source")
    del outs
    ts = timed(fn, (x,), ARGS.reps)
    s = med(ts) / k
    log(f"  XLA copy: {s * 1e6:.2f} us per copy")
    return s, label, f"{n_copies} copies in HLO, total / K"


def overhead_section(emit, hand, hand_label, randn, verdict) -> None:
    k = ARGS.overhead_k
    reps = ARGS.overhead_reps
    # XLA:CPU has no command buffers: every call runs its handler.
    modes = [("graphs", None), ("no graphs", NO_GRAPHS)] if ON_GPU else [("cpu", None)]
    emit(f"[c] Per-call overhead: K = {k} (and 2K) chained calls in one jit, generated v4 (A) vs {hand_label} (B), "
         f"interleaved A B per round, {reps} rounds, two runs; medians.")
    emit("    per call = total / K (includes 1/K of the dispatch); marginal = (T(2K) - T(K)) / K (dispatch-free).")
    emit("    graphs: XLA's default (calls may be captured in command buffers, i.e. CUDA graphs, and replayed "
         "without running the handler); no graphs: compiled with xla_gpu_graph_min_graph_size = 1e6, "
         "so every call runs its handler on the host.")
    emit(f"    {'N':>8s} {'mode':10s} {'variant':32s} {'per call us (run1, run2)':>26s} "
         f"{'marginal us (run1, run2)':>26s}")
    variants = {"generated v4": gen_op(4), hand_label: hand}
    summary = []
    for n in ARGS.overhead_sizes:
        a_np, b_np = randn(n), randn(n)
        a, b = jnp.asarray(a_np), jnp.asarray(b_np)
        # Fresh inputs to check the timed executables.
        ac_np, bc_np = randn(n), randn(n)
        ac, bc = jnp.asarray(ac_np), jnp.asarray(bc_np)
        for mode, options in modes:
            execs = {}
            for name, op in variants.items():
                for kk in (k, 2 * k):
                    log(f"[c] N = {n}, {mode}: compiling {name}, {kk} calls")
                    c = compile_fn(chain(op, kk), a, b, options=options)
                    h = Hlo(c.as_text())
                    n_calls = h.count("custom-call")
                    if n_calls != kk:
                        fail(f"[c] {name}: the optimized HLO holds {n_calls} custom calls, expected {kk}")
                    ref = ac_np.astype(np.float64) + kk * bc_np.astype(np.float64)
                    check_close(f"{name}, N = {n}, {kk}-chain, {mode}", c(ac, bc), ref, chain_tol(ref, kk))
                    execs[(name, kk)] = c
            res = {name: [] for name in variants}
            for run in (1, 2):
                # One call of each executable per round (A_K B_K A_2K B_2K), `reps` rounds:
                # host and clock drift hit both variants alike.
                keys = [(name, kk) for kk in (k, 2 * k) for name in variants]
                times = timed_interleaved({key: execs[key] for key in keys},
                                          {key: (a, b) for key in keys}, reps, warmup=10)
                for name in variants:
                    tk, t2k = med(times[(name, k)]), med(times[(name, 2 * k)])
                    res[name].append((tk / k, (t2k - tk) / k))
                    log(f"[c] N = {n}, {mode}, run {run}, {name}: {tk / k * 1e6:.3f} us per call, "
                        f"marginal {(t2k - tk) / k * 1e6:.3f} us")
            for name in variants:
                (p1, m1), (p2, m2) = res[name]
                emit(f"    {n:8d} {mode:10s} {name:32s} {p1 * 1e6:12.3f}, {p2 * 1e6:11.3f} "
                     f"{m1 * 1e6:12.3f}, {m2 * 1e6:11.3f}")
            g, hw = res["generated v4"], res[hand_label]
            ratios = [g[i][0] / hw[i][0] for i in range(2)]
            mratios = [g[i][1] / hw[i][1] if hw[i][1] > 0 else float("nan") for i in range(2)]
            combined = (g[0][0] + g[1][0]) / (hw[0][0] + hw[1][0])
            summary.append((n, mode, ratios, mratios, combined))
            del execs
    emit("    ratio generated / hand-written (target <= 1.05):")
    for n, mode, ratios, mratios, combined in summary:
        emit(f"    {n:8d} {mode:10s} per call: run1 {ratios[0]:.3f}, run2 {ratios[1]:.3f}, both {combined:.3f}  "
             f"{verdict(combined <= 1.05)}   (marginal: run1 {mratios[0]:.3f}, run2 {mratios[1]:.3f})")


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        fail(str(e))
