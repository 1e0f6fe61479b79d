"""Tokens per second of the Llama decoder of examples/decode_step split over
1, 2, 4, ... GPUs, tensor-parallel (every count that divides the machine's GPUs
and the model's 8 kv heads): the GPU model (8 layers of Llama-3-8B's shapes,
32 sequences, bf16), in PyTorch (eager and replayed from a CUDA graph; n ranks
under torch.distributed.run, one GPU each, NCCL) and in JAX (jit; one process,
a mesh of n GPUs), with each route's ratio to one GPU (n is ideal). Per step,
the best of 3 decodes of 16 steps after one that warms up. This only times:
llama_jax.py --devices N and llama_torch.py under torchrun check the split
decoders against one device.

  python bench/bench_decode_tp.py                 # every GPU count, both frameworks
  python bench/bench_decode_tp.py --framework jax
  python bench/bench_decode_tp.py --cpu-smoke     # the CPU model on 1, 2, 4 host devices
                                                  # and gloo ranks: that it runs
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

# The torch ranks run first, each in a process of its own, then JAX here: JAX would otherwise take 75%
# of every GPU's memory when it starts.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "decode_step"))
from llama_inputs import CPU, GPU, make_model  # noqa: E402

HOST_DEVICES = 4  # --cpu-smoke's
RESULT = "bench_decode_tp rank 0: "  # how a torch rank 0 hands its times to the parent


def counts(devices: int, kv_heads: int) -> list[int]:
    return [n for n in range(1, devices + 1) if devices % n == 0 and kv_heads % n == 0]


def torch_rank(cpu: bool) -> None:
    """One rank (started by torch.distributed.run): its part of the decoder, timed eager and (on the
    GPU) from a CUDA graph; rank 0 prints the seconds per step."""
    import functools

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    import llama_torch

    world = int(os.environ["WORLD_SIZE"])
    if not cpu:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    else:  # the CPU model's matmuls are too small to split: more threads only wait for each other
        torch.set_num_threads(1)
    dist.init_process_group("gloo" if cpu else "nccl")
    c = CPU if cpu else GPU
    weights, state = make_model(c)
    mesh = init_device_mesh("cpu" if cpu else "cuda", (world,))
    w, st = llama_torch.tensor_parallel(c, weights, state, mesh, torch.float32 if cpu else torch.bfloat16)
    start = llama_torch.start_of(state, st["tokens"].device)
    # One rank sums nothing: no all-reduce at all, as the one-device decoder.
    all_reduce = functools.partial(dist.all_reduce, group=mesh.get_group()) if world > 1 else None
    sync = (lambda: None) if cpu else torch.cuda.synchronize
    times = {how: llama_torch.seconds_per_step(run_step, st, start, c.T, sync)
             for how, run_step in llama_torch.runs(w, st, start, not cpu, all_reduce).items()}
    if dist.get_rank() == 0:
        print(RESULT + json.dumps(times), flush=True)
    dist.destroy_process_group()


def torch_times(n: int, cpu: bool) -> dict[str, float]:
    """Seconds per step by route, on n ranks."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", __file__,
               "--torch-rank"] + (["--cpu-smoke"] if cpu else [])
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    found = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode or not found:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return json.loads(found[0][len(RESULT):])


def jax_times(cpu: bool):
    """(n, seconds per jitted step) for every count of devices."""
    import jax

    import llama_jax

    c = CPU if cpu else GPU
    devices = jax.devices("cpu" if cpu else "gpu")
    weights, state = make_model(c)
    dtype = jax.numpy.float32 if cpu else jax.numpy.bfloat16
    for n in counts(len(devices), c.KVH):
        mesh = jax.sharding.Mesh(devices[:n], (llama_jax.MESH_AXIS,))
        w, st, step = llama_jax.tensor_parallel(c, weights, state, mesh)
        seconds, _ = llama_jax.seconds_per_step(step, llama_jax.to_dtype(w, dtype), llama_jax.to_dtype(st, dtype),
                                                state, c.T)
        yield n, seconds
        del w, st


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--framework", choices=["jax", "torch", "both"], default="both")
    ap.add_argument("--cpu-smoke", action="store_true", help=f"the CPU model on {HOST_DEVICES} host devices")
    ap.add_argument("--torch-rank", action="store_true", help=argparse.SUPPRESS)  # a rank of torch_times()
    args = ap.parse_args()
    if args.torch_rank:
        torch_rank(args.cpu_smoke)
        return 0
    c = CPU if args.cpu_smoke else GPU
    print(f"Llama decoder, tensor-parallel: L={c.L} d={c.d} H={c.H} KVH={c.KVH} F={c.F} V={c.V}, {c.S} sequences, "
          f"{'f32 on host CPU devices (a smoke run, not a measurement)' if args.cpu_smoke else 'bf16'}\n")
    print("| framework, route | devices | ms / step | tokens / s | ratio to 1 device |")
    print("| --- | --- | --- | --- | --- |")

    def row(route, n, seconds, one):
        print(f"| {route} | {n} | {seconds * 1e3:.2f} | {c.S / seconds:.0f} | {one / seconds:.2f} |", flush=True)

    failed = []
    if args.framework in ("torch", "both"):
        if args.cpu_smoke:
            devices = HOST_DEVICES
        else:
            import torch
            devices = torch.cuda.device_count()
        by_n = {}
        for n in counts(devices, c.KVH):
            try:
                by_n[n] = torch_times(n, args.cpu_smoke)
            except RuntimeError as e:  # reported under the table; JAX's rows still come
                failed.append(f"torch on {n} ranks: {e}")
        for route in by_n.get(1, {}):
            for n, times in by_n.items():
                row(f"torch {route}", n, times[route], by_n[1][route])
    if args.framework in ("jax", "both"):
        if args.cpu_smoke:
            import jax
            jax.config.update("jax_num_cpu_devices", HOST_DEVICES)  # before JAX makes its CPU devices
        one = None
        for n, seconds in jax_times(args.cpu_smoke):
            one = one or seconds
            row("jax jit", n, seconds, one)
    for failure in failed:
        print(f"\n{failure}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
