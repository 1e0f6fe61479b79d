"""Shared fixtures: fresh random inputs for every test (the seed is printed
so that a failure can be replayed with OPGEN_TEST_SEED)."""

import os

import numpy as np
import pytest


@pytest.fixture
def rng(request):
    seed = int(os.environ.get("OPGEN_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
    print(f"{request.node.name}: OPGEN_TEST_SEED={seed}")
    return np.random.default_rng(seed)


def gpu_devices():
    import jax

    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


requires_gpu = pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
