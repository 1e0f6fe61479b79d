"""Timing helpers the GPU benchmarks share: the time per call of a PyTorch
or JAX function (median over rounds of back-to-back calls) and a device
copy's bandwidth, the yardstick of the memory roofline.

Back-to-back eager calls measure the slower of the GPU and the host: a call
that moves little data costs its framework's dispatch (tens of µs on the
device machine's host). torch_graph_us and jax_chained_us take the host out:
CUDA-graph replays, and a chain of calls compiled into one XLA program."""

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


def torch_graph_us(fn, calls, rounds):
    """Microseconds per call of `fn`, `calls` calls captured in one CUDA graph
    and replayed (the GPU's time, without the host's dispatch)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # warm-up outside the capture (lazy initialisation, allocator pools)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(samples)


def jax_chained_us(fn, x, rest, calls, rounds):
    """Microseconds per call of `fn(x, *rest)` (its result shaped as x), as
    `calls` calls in one jitted program, each one's x nudged by the previous
    result so that XLA can neither merge nor drop them: the device's time
    plus one dispatch shared by all."""
    def chain(x, *rest):
        out = fn(x, *rest)
        for _ in range(calls - 1):
            out = fn(x + out * 1e-3, *rest)
        return out
    return jax_us(jax.jit(chain), (x, *rest), 1, rounds) / calls


def jax_us(fn, args, calls, rounds):
    """Microseconds per call of `fn(*args)` (host time to block_until_ready)."""
    jax.block_until_ready(fn(*args))
    return statistics.median(jax_round_us(fn, args, calls) for _ in range(rounds))


def jax_round_us(fn, args, calls):
    """One round: microseconds per call over `calls` back-to-back calls of `fn(*args)`, to
    block_until_ready (warm `fn` up first)."""
    t = time.perf_counter()
    for _ in range(calls):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - t) * 1e6 / calls


def copy_gbps(nbytes, calls, rounds):
    """Device copy bandwidth: a clone of nbytes reads and writes nbytes."""
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    return 2 * nbytes / torch_us(lambda: dst.copy_(src), calls, rounds) / 1e3


def row(name, us, nbytes, copy):
    """One line: time per call, the bandwidth of `nbytes` moved, its ratio to `copy`."""
    gbps = nbytes / us / 1e3
    print(f"  {name:<34} {us:10.1f} us {gbps:9.0f} GB/s {gbps / copy:7.2f}x copy")
