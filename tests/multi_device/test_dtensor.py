"""PyTorch DTensor in 2 processes, on the CPU (gloo) and, where there are two
GPUs, one GPU each (NCCL): the generated ops run on each rank's shard of a
DTensor cut along their batch or one of their splits, with no communication,
and the full results equal the op on whole tensors on the same device
(dtensor_rank.py does the checking in each process)."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import torch
import torch.distributed

import pytest

RANKS = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


BACKENDS = [
    pytest.param("gloo", id="cpu-gloo"),
    pytest.param("nccl", id="cuda-nccl", marks=pytest.mark.skipif(
        torch.cuda.device_count() < RANKS or not torch.distributed.is_nccl_available(),
        reason=f"fewer than {RANKS} GPUs, or torch without NCCL")),
]


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch without torch.distributed")
@pytest.mark.parametrize("backend", BACKENDS)
def test_dtensor_shards_run_locally(rng, backend):
    seed = int(rng.integers(0, 2**31))
    env = {**os.environ, "WORLD_SIZE": str(RANKS), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "OPGEN_TEST_SEED": str(seed), "OPGEN_TEST_BACKEND": backend}
    env.pop("XLA_FLAGS", None)
    ranks = [subprocess.Popen([sys.executable, str(Path(__file__).with_name("dtensor_rank.py"))],
                              env={**env, "RANK": str(r)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(RANKS)]
    outputs = [r.communicate(timeout=300)[0] for r in ranks]
    for r, (process, out) in enumerate(zip(ranks, outputs)):
        assert process.returncode == 0, f"rank {r} (OPGEN_TEST_SEED={seed}):\n{out[-4000:]}"
        assert "calls and a backward checked" in out, out[-2000:]
