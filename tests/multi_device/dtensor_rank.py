"""One rank of test_dtensor.py (run as a process of its own, with RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT, OPGEN_TEST_SEED and OPGEN_TEST_BACKEND
set; NCCL puts rank r on GPU r, gloo on the CPU): for every op
with DTensor strategies, inputs sharded along the op's batch and along each
of its splits give DTensors sharded the same way, with no communication, whose
full tensors equal the op on the whole inputs; a split in uneven parts and an
op with neither are redistributed and still right; rms_norm's gradients
through DTensor equal plain autograd's. Every rank draws the same inputs from
the seed. Exits non-zero on the first mismatch."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor  # noqa: E402
from torch.distributed.tensor.debug import CommDebugMode  # noqa: E402

import op_problems  # noqa: E402
import opgen_ops.torch as tops  # noqa: E402
from opgen_ops import _ops  # noqa: E402
from opgen_ops._torch_sharding import takes_strategies  # noqa: E402
from split_problems import draw_divisible, draw_uneven  # noqa: E402
from torch_arrays import to_torch  # noqa: E402


def cases(op, world, rng):
    """(what is cut, a call, where each input is cut: a dim or None, whether
    each rank runs its part alone)."""
    dtypes = op_problems.instantiations(op)[0]
    if op.batch_partitionable:
        p = op_problems.draw(op, dtypes, rng, batch=(2 * world, 3))
        yield "batch", p, [0 if t.batch else None for t in op.inputs], True
        if any(t.scalar for t in op.inputs):  # a scalar input as [1] (vLLM's scales), replicated
            p = op_problems.draw(op, dtypes, rng, batch=(2 * world, 3), scalars_as_one=True)
            yield "batch, scalars as [1]", p, [0 if t.batch else None for t in op.inputs], True
    for name, symbols in op.splits.items():
        def cut(p):
            return [next((i for i, d in enumerate(t.shape) if d in symbols), None) for t in op.inputs]

        p = draw_divisible(op, symbols, world, rng)
        yield name, p, cut(p), True
        # Uneven parts (KVH = 3 heads on 2 ranks): redistributed, and still right.
        p = draw_uneven(op, symbols, world, rng)
        yield f"{name} (uneven)", p, cut(p), False
    if not op.batch_partitionable and not op.splits:
        yield "nothing (replicated)", op_problems.draw(op, dtypes, rng), [None] * len(op.inputs), False


def check_call(op, world, mesh, what, p, cut, alone) -> None:
    plain = [to_torch(x, mesh.device_type) for x in p.inputs]
    want = getattr(tops, op.name)(*plain, **p.attrs)
    want = list(want) if isinstance(want, tuple) else [want]
    placed = [None if x is None else distribute_tensor(x, mesh, [Replicate() if dim is None else Shard(dim)])
              for x, dim in zip(plain, cut)]
    where = f"{op.name} cut along {what}"
    with CommDebugMode() as comm:
        try:
            got = getattr(tops, op.name)(*placed, **p.attrs)
        except RuntimeError as e:
            # Gathering the parts of a later dimension gives DTensor a tensor that
            # is not contiguous, which a kernel of dense inputs refuses by name.
            assert not alone and "is not contiguous" in str(e), f"{where}: {e}"
            return
    got = list(got) if isinstance(got, tuple) else [got]
    if alone:
        assert comm.get_total_counts() == 0, f"{where}: {comm.get_comm_counts()}"
    for g, w, t in zip(got, want, op.outputs):
        assert isinstance(g, DTensor), f"{where}, output '{t.name}': {type(g)}"
        if alone:
            assert all(isinstance(pl, Shard) for pl in g.placements), f"{where}, '{t.name}': {g.placements}"
            assert g.to_local().numel() * world == w.numel(), f"{where}, '{t.name}': not the local shard"
        if g.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            # gloo gathers no float8 (full_tensor): each rank's own part, bit for bit.
            part = w
            for placement in g.placements:
                if isinstance(placement, Shard):
                    part = part.chunk(world, placement.dim)[dist.get_rank()]
            torch.testing.assert_close(g.to_local().view(torch.uint8), part.contiguous().view(torch.uint8), rtol=0,
                                       atol=0, msg=lambda m: f"{where}, output '{t.name}': {m}")
            continue
        torch.testing.assert_close(g.full_tensor(), w, msg=lambda m: f"{where}, output '{t.name}': {m}")


def check_backward(mesh, rng) -> None:
    """rms_norm's gradients through DTensor (its backward op has strategies too)."""
    x, w, g = (torch.from_numpy(rng.standard_normal(s).astype(np.float32)).to(mesh.device_type)
               for s in [(8, 16), (16,), (8, 16)])
    grads = []
    for place in (lambda t, p: t, lambda t, p: distribute_tensor(t, mesh, [p])):
        xs = place(x.clone(), Shard(0)).requires_grad_()
        ws = place(w.clone(), Replicate()).requires_grad_()
        (tops.rms_norm(xs, ws)[0] * place(g, Shard(0))).sum().backward()
        grads.append([t.grad.full_tensor() if isinstance(t.grad, DTensor) else t.grad for t in (xs, ws)])
    for a, b in zip(*grads):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


def main() -> int:
    world = int(os.environ["WORLD_SIZE"])
    backend = os.environ["OPGEN_TEST_BACKEND"]
    device = "cuda" if backend == "nccl" else "cpu"
    if device == "cuda":
        torch.cuda.set_device(int(os.environ["RANK"]))
    dist.init_process_group(backend)
    mesh = init_device_mesh(device, (world,))
    rng = np.random.default_rng(int(os.environ["OPGEN_TEST_SEED"]))
    checked = 0
    for op in _ops.OPS:
        if takes_strategies(op):
            for what, p, cut, alone in cases(op, world, rng):
                check_call(op, world, mesh, what, p, cut, alone)
                checked += 1
    check_backward(mesh, rng)
    dist.destroy_process_group()
    print(f"rank {os.environ['RANK']} ({device}): {checked} calls and a backward checked")
    return 0 if checked else 1


if __name__ == "__main__":
    sys.exit(main())
