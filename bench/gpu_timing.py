"""Timing helpers the GPU benchmarks share: the time per call of a PyTorch
or JAX function (median over rounds of back-to-back calls) and a device
copy's bandwidth, the yardstick of the memory roofline."""

import statistics
import time

import jax
import torch


def torch_us(fn, calls, rounds):
    """Microseconds per call of `fn` (CUDA events around `calls` calls)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    samples = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(samples)


def jax_us(fn, args, calls, rounds):
    """Microseconds per call of `fn(*args)` (host time to block_until_ready)."""
    jax.block_until_ready(fn(*args))
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            out = fn(*args)
        jax.block_until_ready(out)
        samples.append((time.perf_counter() - t) * 1e6 / calls)
    return statistics.median(samples)


def copy_gbps(nbytes, calls, rounds):
    """Device copy bandwidth: a clone of nbytes reads and writes nbytes."""
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    return 2 * nbytes / torch_us(lambda: dst.copy_(src), calls, rounds) / 1e3


def row(name, us, nbytes, copy):
    """One line: time per call, the bandwidth of `nbytes` moved, its ratio to `copy`."""
    gbps = nbytes / us / 1e3
    print(f"  {name:<34} {us:10.1f} us {gbps:9.0f} GB/s {gbps / copy:7.2f}x copy")
