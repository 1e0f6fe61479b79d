"""Forward + backward of the differentiable ops on the GPU, against the
frameworks' own ops, in one process. Prints, per op and size:

  * forward + backward time per call of the loss sum(op(x) * g) w.r.t. every
    input: opgen through torch autograd, eager and replayed from a CUDA graph
    (the step's GPU time: eager minus graph is the host's share, autograd's
    Python glue and torch's dispatch, which an eager step waits for where
    the kernels are short), torch eager, torch.compile of the same reference
    (its backward graph fused by inductor), opgen through
    jax.value_and_grad of the same loss under jax.jit (one executable: no
    host work between the kernels), and the jnp reference likewise;
  * the backward op alone (torch, called directly, with what autograd gives
    it: layer_norm_backward the forward's mean and rstd): its time and the
    bandwidth of the bytes it must move (grad_out and x read, grad_x
    written; the per-column sums and the statistics are small) over a device
    copy's.

  rms_norm and layer_norm (with weight and bias): bf16 [N, 4096]; glu (silu): bf16 [N, 8192].

  python bench/bench_backward.py [--calls 20] [--rounds 7] [--rows 4096,16384]
"""

import argparse
import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch and JAX share the GPU

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import opgen_ops.jax as jops  # noqa: E402
import opgen_ops.torch as tops  # noqa: E402
from gpu_timing import copy_gbps, jax_us, torch_graph_us, torch_us  # noqa: E402 (beside this file)

EPS = 1e-6


def rms_norm_torch(x, w, b):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True) + EPS) * w.float() + b.float()).to(x.dtype)


def rms_norm_jnp(x, w, b):
    x32 = x.astype(jnp.float32)
    out = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + EPS) * w.astype(jnp.float32) + b
    return out.astype(x.dtype)


def layer_norm_jnp(x, w, b):
    x32 = x.astype(jnp.float32)
    centred = x32 - jnp.mean(x32, -1, keepdims=True)
    out = centred * jax.lax.rsqrt(jnp.mean(centred * centred, -1, keepdims=True) + EPS) * w.astype(jnp.float32) + b
    return out.astype(x.dtype)


def glu_torch(x):
    a, b = x.float().chunk(2, dim=-1)
    return (a * F.silu(b)).to(x.dtype)


def glu_jnp(x):
    a, b = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    return (a * jax.nn.silu(b)).astype(x.dtype)


def layer_norm_backward_alone(g, x, w, b):
    """layer_norm_backward as autograd runs it: given the forward's statistics (which a
    differentiated call makes), so that it does not recompute them."""
    _, mean, rstd = tops.layer_norm(x, w, b, eps=EPS, return_mean=True, return_rstd=True)
    return lambda: tops.layer_norm_backward(g, x, w, mean, rstd, eps=EPS)


CASES = {
    # name: (opgen torch forward, torch reference, opgen jax forward, jnp reference, shapes of the inputs
    #        given the rows, the backward op alone (a call of it, made from the inputs), bytes it must move)
    "rms_norm": (lambda x, w, b: tops.rms_norm(x, w, b, eps=EPS)[0], rms_norm_torch,
                 lambda x, w, b: jops.rms_norm(x, w, b, eps=EPS)[0], rms_norm_jnp,
                 lambda n: [(n, 4096), (4096,), (4096,)],
                 lambda g, x, w, b: (lambda: tops.rms_norm_backward(g, x, w, eps=EPS)), lambda n: 3 * n * 4096 * 2),
    "layer_norm": (lambda x, w, b: tops.layer_norm(x, w, b, eps=EPS)[0],
                   lambda x, w, b: F.layer_norm(x, [x.shape[-1]], w, b, EPS),
                   lambda x, w, b: jops.layer_norm(x, w, b, eps=EPS)[0], layer_norm_jnp,
                   lambda n: [(n, 4096), (4096,), (4096,)],
                   layer_norm_backward_alone, lambda n: 3 * n * 4096 * 2),
    "glu": (lambda x: tops.glu(x, activation="silu"), glu_torch, lambda x: jops.glu(x, activation="silu"), glu_jnp,
            lambda n: [(n, 8192)], lambda g, x: (lambda: tops.glu_backward(g, x, activation="silu")),
            lambda n: (n * 4096 + 2 * n * 8192) * 2),
}


def torch_step(forward, inputs, g):
    """One forward + backward of sum(forward(*inputs) * g)."""
    def step():
        for t in inputs:
            t.grad = None
        (forward(*inputs) * g).sum().backward()
    return step


def bench(name, rows, args, copy):
    ours, theirs, ours_jax, theirs_jax, shapes, backward_alone, moved = CASES[name]
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = [torch.randn(s, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_() for s in shapes(rows)]
    out_shape = ours(*inputs).shape
    g = torch.randn(out_shape, device="cuda", dtype=torch.bfloat16, generator=gen)
    # The gradients agree before anything is timed.
    grads = []
    for forward in (ours, theirs):
        torch_step(forward, inputs, g)()
        grads.append([t.grad.float() for t in inputs])
    for a, b in zip(*grads):
        err = ((a - b).norm() / b.norm()).item()
        assert err < 2e-2, f"{name}: opgen's and torch's gradients disagree: {err:.3g}"
    times = {
        "opgen (torch)": torch_us(torch_step(ours, inputs, g), args.calls, args.rounds),
        "opgen (torch graph)": torch_graph_us(torch_step(ours, inputs, g), args.calls, args.rounds),
        "torch eager": torch_us(torch_step(theirs, inputs, g), args.calls, args.rounds),
        "torch.compile": torch_us(torch_step(torch.compile(theirs, fullgraph=True), inputs, g), args.calls, args.rounds),
    }
    jax_inputs = [jax.dlpack.from_dlpack(t.detach()) for t in inputs]
    jg = jax.dlpack.from_dlpack(g)
    for label, forward in (("opgen (jax)", ours_jax), ("jnp", theirs_jax)):
        # The loss's value and its gradients, as torch's step computes them:
        # XLA drops a forward call whose outputs nothing reads, and
        # rms_norm_backward reads x, not out, so a bare jax.vjp(forward)(g)
        # (or jax.grad) timed the backward alone.
        def loss(xs, g, forward=forward):
            return jnp.sum((forward(*xs) * g).astype(jnp.float32))

        f = jax.jit(lambda g, *xs, loss=loss: jax.value_and_grad(loss)(xs, g))
        times[label] = jax_us(f, (jg, *jax_inputs), args.calls, args.rounds)
    detached = [t.detach() for t in inputs]
    alone = torch_us(backward_alone(g, *detached), args.calls, args.rounds)
    cells = [f"{name} [{', '.join(str(d) for d in shapes(rows)[0])}]", f"{rows * shapes(rows)[0][1] * 2 / 2**20:.0f}"]
    cells += [f"{times[k]:.1f}" for k in ("opgen (torch)", "opgen (torch graph)", "torch eager", "torch.compile",
                                          "opgen (jax)", "jnp")]
    cells += [f"{times['torch.compile'] / times['opgen (torch)']:.2f}", f"{times['jnp'] / times['opgen (jax)']:.2f}"]
    cells += [f"{alone:.1f} µs, {moved(rows) / alone / 1e3 / copy:.2f}x"]
    print("| " + " | ".join(cells) + " |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--rows", default="4096,16384")
    ap.add_argument("--ops", default=",".join(CASES), help="which of " + ", ".join(CASES))
    args = ap.parse_args()
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, jax {jax.__version__}")
    copy = copy_gbps(512 * 2**20, args.calls, args.rounds)
    print(f"device copy (512 MiB clone): {copy:.0f} GB/s\n")
    print("forward + backward, µs per call (bf16); the ratios: the baseline's time over opgen's; the backward op "
          "alone: its time and the bandwidth of what it must move over the copy's\n")
    print("| op [x] | x MiB | opgen (torch) | opgen (torch graph) | torch eager | torch.compile | opgen (jax) "
          "| jnp (jit) | torch.compile / opgen | jnp / opgen | backward op alone |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in args.ops.split(","):
        for rows in (int(r) for r in args.rows.split(",")):
            bench(name, rows, args, copy)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
