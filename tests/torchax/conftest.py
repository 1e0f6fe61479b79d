"""torchax's tests run in a pytest process of their own: importing torchax
changes process-wide torch state (it registers itself as torch's PrivateUse1
backend, which then counts as torch's current accelerator on a machine with
CUDA, and torch.compile of CUDA programs fails there), so the rest of the
suite must not share a process with it. The helpers of tests/python serve
here too; its fixtures are taken over below."""

import importlib.util
import sys
from pathlib import Path

import pytest

PYTHON_TESTS = Path(__file__).resolve().parent.parent / "python"
sys.path.insert(0, str(PYTHON_TESTS))

_spec = importlib.util.spec_from_file_location("python_tests_conftest", PYTHON_TESTS / "conftest.py")
_shared = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_shared)

seed = _shared.seed
rng = _shared.rng
gpu_devices = _shared.gpu_devices


def _torchax_unusable():
    """Why torchax cannot run here, or None. torchax is imported once, here,
    as the tests would: a torchax that is missing, or that fails to import on
    this torch (torchax 0.0.13 on torch 2.15, which has no named tensors:
    torchax reads `aten.prod.dim_Dimname`; torchax's bug), skips every test
    of this folder with the cause, instead of failing their collection."""
    import importlib.metadata

    import jax
    import torch

    try:
        import torchax  # noqa: F401
    except Exception as e:  # whatever torchax raises: the skip names it
        try:
            version = f"torchax {importlib.metadata.version('torchax')}"
        except importlib.metadata.PackageNotFoundError:
            return "torchax is not installed"
        return (f"{version} does not import with torch {torch.__version__} and jax {jax.__version__} "
                f"({type(e).__name__}: {e})")
    return None


_UNUSABLE = _torchax_unusable()


class _Skipped(pytest.Item):
    """The one test of a module that torchax keeps from being imported: a
    skip, so that the run reports it (a module skipped at collection would
    leave pytest nothing collected, which it counts as failure)."""

    def runtest(self):
        pytest.skip(_UNUSABLE)

    def reportinfo(self):
        return self.path, None, self.name


class _UnimportedModule(pytest.File):
    def collect(self):
        return [_Skipped.from_parent(self, name="torchax")]


def pytest_pycollect_makemodule(module_path, parent):
    if _UNUSABLE is not None:
        return _UnimportedModule.from_parent(parent, path=module_path)
    return None
