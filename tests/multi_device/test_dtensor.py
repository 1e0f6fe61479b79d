"""PyTorch DTensor in 2 processes, on the CPU (gloo) and, where there are two
GPUs, one GPU each (NCCL): the generated ops run on each rank's shard of a
DTensor cut along their batch or one of their splits, with no communication,
and the full results equal the op on whole tensors on the same device
(dtensor_rank.py does the checking in each process)."""

import sys
from pathlib import Path

import torch
import torch.distributed

import pytest
from ranks import run_ranks

RANKS = 2

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
    outputs = run_ranks([sys.executable, str(Path(__file__).with_name("dtensor_rank.py"))], RANKS,
                        {"OPGEN_TEST_SEED": str(seed), "OPGEN_TEST_BACKEND": backend})
    for out in outputs:
        assert "calls and a backward checked" in out, out[-2000:]
