"""The host's cost of one eager PyTorch call of each generated op at decode
sizes, against the native torch op that does the same work, measured in one
process: the public wrapper (``opgen_ops.torch.<op>``), the same wrapper
with the eager route around the dispatcher turned off (where torch >= 2.10
has it on: the kernel's overload itself, as before), the op through
``torch.ops`` (the dispatcher, with torch.library's Python autograd and
lowering layers where the op has them), and the native op. Runs on the CPU
(what CI can run) and, where there is one, on the GPU (calls timed with a
host clock around a synchronize, so launch-bound). Prints a table of
microseconds per call and ratios to the native op; the aim is a wrapper at
most 2x the native op on the CPU and at most 1.2x on the GPU.

  python bench/bench_torch_calls.py [--device cpu|cuda|all] [--calls N] [--rounds N]
"""

import argparse
import contextlib
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import opgen_ops.torch as tops
from opgen_ops._torch_direct import DIRECT

OPS = torch.ops.opgen_ops


def cases(device):
    """(name, native, through torch.ops, wrapper) at decode sizes, on fresh random data."""
    g = torch.Generator(device=device).manual_seed(0)

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g, device=device).to(dtype)

    # The CPU bodies are float64 references, slower than torch's own CPU
    # kernels, so on the CPU rows are small enough that the call, not the
    # kernel, is what is timed.
    dtype, d = (torch.bfloat16, 4096) if device == "cuda" else (torch.float32, 16)
    a, b = randn(1024), randn(1024)
    rows = 8 if device == "cuda" else 2
    x, w = randn(rows, d, dtype=dtype), randn(d, dtype=dtype)
    wide = randn(rows, 2 * d, dtype=dtype)
    kind = str(dtype).removeprefix("torch.")
    return [
        ("simple_add [1024] float32", lambda: torch.add(a, b), lambda: OPS.simple_add(a, b),
         lambda: tops.simple_add(a, b)),
        (f"rms_norm [{rows}, {d}] {kind}", lambda: F.rms_norm(x, (d,), w, 1e-6), lambda: OPS.rms_norm(x, w, eps=1e-6),
         lambda: tops.rms_norm(x, w, eps=1e-6)),
        (f"glu [{rows}, {2 * d}] {kind}", lambda: F.glu(wide), lambda: OPS.glu(wide), lambda: tops.glu(wide)),
        (f"softmax [{rows}, {d}] {kind}", lambda: torch.softmax(x, -1), lambda: OPS.softmax(x), lambda: tops.softmax(x)),
    ]


def per_call_us(fn, calls, rounds, sync):
    samples = []
    for _ in range(rounds):
        sync()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        samples.append((time.perf_counter() - t) / calls * 1e6)
    return statistics.median(samples)


@contextlib.contextmanager
def kernel_route(op):
    """The wrapper of `op` with the eager route off: its direct route calls the kernel's overload."""
    direct = DIRECT[op]
    eager, direct.eager = direct.eager, None
    try:
        yield
    finally:
        direct.eager = eager


def run(device, calls, rounds):
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    eager = DIRECT["simple_add"].eager is not None
    lines = [f"[{device}] us per call (median of {rounds} rounds of {calls} calls, variants interleaved; "
             f"ratio to the native op; the eager route {'on' if eager else 'off: torch < 2.10'})",
             f"    {'op':32s} {'native':>8s} {'torch.ops':>10s} {'kernel route':>13s} {'wrapper':>8s}"
             f"   ops/native  kernel route/native  wrapper/native"]
    worst = 0.0
    for name, native, through_ops, wrapper in cases(device):
        op = name.split(" ")[0]
        # Each variant must compute what the native op does before it is timed.
        want = native()
        with kernel_route(op):
            by_kernel = wrapper()
        for got in (through_ops(), by_kernel, wrapper()):
            got = got[0] if isinstance(got, tuple) else got
            torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)
        variants = [(native, False), (through_ops, False), (wrapper, True), (wrapper, False)]
        for f, _ in variants:
            for _ in range(max(calls // 10, 10)):
                f()
        times = [[] for _ in variants]
        for _ in range(2):
            for k, (f, by_kernel) in enumerate(variants):
                with kernel_route(op) if by_kernel else contextlib.nullcontext():
                    times[k].append(per_call_us(f, calls, rounds, sync))
        t = [statistics.mean(v) for v in times]
        worst = max(worst, t[3] / t[0])
        lines.append(f"    {name:32s} {t[0]:8.2f} {t[1]:10.2f} {t[2]:13.2f} {t[3]:8.2f}   {t[1] / t[0]:10.2f}  "
                     f"{t[2] / t[0]:19.2f}  {t[3] / t[0]:14.2f}")
    lines.append(f"    worst wrapper/native: {worst:.2f}")
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda", "all"], default="all")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args()
    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    if "cuda" in devices and not torch.cuda.is_available():
        if args.device == "cuda":
            sys.exit("no CUDA device")
        devices.remove("cuda")
    torch.set_num_threads(1)  # decode-sized calls: one thread, as a serving process pins them
    print(f"torch {torch.__version__}" + (f", {torch.cuda.get_device_name()}" if "cuda" in devices else ""))
    for device in devices:
        print("\n".join(run(device, args.calls, args.rounds)))


if __name__ == "__main__":
    main()
