"""Shared fixtures: fresh random inputs for every test (the seed is printed
so that a failure can be replayed with OPGEN_TEST_SEED)."""

import os

import numpy as np
import pytest


@pytest.fixture
def seed(request):
    """The test's seed: OPGEN_TEST_SEED, else a fresh one (printed)."""
    seed = int(os.environ.get("OPGEN_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
    print(f"{request.node.name}: OPGEN_TEST_SEED={seed}")
    return seed


@pytest.fixture
def rng(seed):
    return np.random.default_rng(seed)


def gpu_devices():
    import jax

    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


requires_gpu = pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")


@pytest.fixture(scope="session")
def fixture_project(tmp_path_factory):
    """A scratch copy of the project with the fixture ops of tests/fixtures
    added and its package built, once for every test that needs one (a minute
    or several); skipped where opgen is not built (OPGEN_BINARY, as
    test_new_op.py) or CMake and Ninja are missing."""
    import fcntl
    import shutil
    from pathlib import Path

    from scratch_project import REPO, build_with_fixtures

    opgen = Path(os.environ.get("OPGEN_BINARY", REPO / "build" / "generator" / "opgen"))
    if not opgen.is_file():
        pytest.skip(f"no opgen binary at {opgen} (build it, or set OPGEN_BINARY)")
    if not shutil.which("cmake") or not shutil.which("ninja"):
        pytest.skip("CMake and Ninja are needed to build the scratch project")
    # Under pytest-xdist (scripts/test.sh: -n 2) each worker has a session of its own: the first to
    # need the project builds it in the run's shared temporary folder, the others wait and use it.
    shared = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:
        shared = shared.parent
    with open(shared / "fixture_project.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        root = shared / "fixture_project"
        if not (root / "built").exists():
            shutil.rmtree(root, ignore_errors=True)  # a build that failed in another worker
            build_with_fixtures(root / "project", opgen.resolve())
            (root / "built").touch()
    return root / "project"

