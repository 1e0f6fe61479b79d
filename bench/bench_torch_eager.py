"""PyTorch eager dispatch of the generated op (C++ stable-ABI kernels) against
torch.add and against a Python-registered torch.library op around the same
kernel, on CUDA. Prints a table of ratios measured in one process.

  [a] per-call latency at 1K elements: many calls timed with a host clock
      around a synchronize (launch/dispatch bound); target <= 1.5x torch.add.
  [b] 256 MiB per operand: device time per call with CUDA events; target
      within 5% of torch.add.
"""

import argparse
import statistics
import sys
import time

import torch

import opgen_ops.torch as ops

GEN = torch.ops.opgen_ops.simple_add.default


@torch.library.custom_op("opgen_bench::py_add", mutates_args=())
def py_add(a: torch.Tensor, b: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """The baseline a user writes today: a Python-registered op (here around
    the same generated kernel, so only the dispatch path differs)."""
    return GEN(a, b, alpha=alpha)


@py_add.register_fake
def _(a, b, alpha=1.0):
    return torch.empty_like(a)


def per_call_us(fn, calls, rounds):
    """Median over rounds of (host time for `calls` calls + sync) / calls."""
    samples = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t) / calls * 1e6)
    return statistics.median(samples), min(samples)


def device_ms(fn, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--out", help="also write the table here")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_torch_eager.py needs a CUDA device")
    lines = [f"PyTorch eager: torch {torch.__version__}, {torch.cuda.get_device_name()}"]
    gen = torch.Generator(device="cuda").manual_seed(0)

    # Correctness first, on fresh random data.
    a = torch.randn(1 << 20, device="cuda", generator=gen)
    b = torch.randn(1 << 20, device="cuda", generator=gen)
    for name, f in [("generated", lambda: GEN(a, b, alpha=1.0)), ("python op", lambda: py_add(a, b, 1.0))]:
        err = (f().double() - (a.double() + b.double())).abs().max().item()
        if err > 1e-6:
            sys.exit(f"{name} is wrong: max error {err}")

    small_a = torch.randn(1024, device="cuda", generator=gen)
    small_b = torch.randn(1024, device="cuda", generator=gen)
    variants = {
        "torch.add": lambda: torch.add(small_a, small_b),
        "generated (C++ stable ABI)": lambda: GEN(small_a, small_b, alpha=1.0),
        "generated via opgen_ops.torch wrapper": lambda: ops.simple_add(small_a, small_b),
        "Python torch.library op": lambda: py_add(small_a, small_b, 1.0),
    }
    for f in variants.values():  # warm-up
        for _ in range(200):
            f()
    results = {name: [] for name in variants}
    for run in range(2):  # interleaved, twice: drift hits all alike
        for name, f in variants.items():
            results[name].append(per_call_us(f, args.calls, args.rounds))
    base = statistics.mean(r[0] for r in results["torch.add"])
    lines.append(f"[a] per-call latency, 1024 float32, {args.calls} calls x {args.rounds} rounds, 2 runs (median, min)")
    for name, runs in results.items():
        med = statistics.mean(r[0] for r in runs)
        lines.append(f"    {name:40s} {runs[0][0]:7.2f} {runs[1][0]:7.2f} us  (min {min(r[1] for r in runs):6.2f})"
                     f"   x torch.add {med / base:5.2f}")
    gen_ratio = statistics.mean(r[0] for r in results["generated (C++ stable ABI)"]) / base
    lines.append(f"    target: generated <= 1.5x torch.add: {gen_ratio:.2f}  {'PASS' if gen_ratio <= 1.5 else 'FAIL'}")

    n = 64 << 20  # 256 MiB of float32
    big_a = torch.randn(n, device="cuda", generator=gen)
    big_b = torch.randn(n, device="cuda", generator=gen)
    out = torch.empty_like(big_a)
    big = {
        "torch.add (out=)": lambda: torch.add(big_a, big_b, out=out),
        "torch.add": lambda: torch.add(big_a, big_b),
        "generated": lambda: GEN(big_a, big_b, alpha=1.0),
    }
    for f in big.values():
        for _ in range(5):
            f()
    times = {name: [] for name in big}
    for _ in range(2):
        for name, f in big.items():
            times[name].append(device_ms(f, args.reps))
    lines.append(f"[b] 256 MiB per operand, device time per call (CUDA events, median of {args.reps}), 2 runs")
    ref = statistics.mean(times["torch.add"])
    for name, ts in times.items():
        gbs = 3 * n * 4 / (statistics.mean(ts) * 1e-3) / 1e9
        lines.append(f"    {name:40s} {ts[0]:7.3f} {ts[1]:7.3f} ms  {gbs:7.1f} GB/s   x torch.add {statistics.mean(ts) / ref:5.3f}")
    big_ratio = statistics.mean(times["generated"]) / ref
    lines.append(f"    target: generated within 5% of torch.add: {big_ratio:.3f}  {'PASS' if big_ratio <= 1.05 else 'FAIL'}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
