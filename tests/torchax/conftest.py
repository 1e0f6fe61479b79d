"""torchax's tests run in a pytest process of their own: importing torchax
changes process-wide torch state (it registers itself as torch's PrivateUse1
backend, which then counts as torch's current accelerator on a machine with
CUDA, and torch.compile of CUDA programs fails there), so the rest of the
suite must not share a process with it. The helpers of tests/python serve
here too; its fixtures are taken over below."""

import importlib.util
import sys
from pathlib import Path

PYTHON_TESTS = Path(__file__).resolve().parent.parent / "python"
sys.path.insert(0, str(PYTHON_TESTS))

_spec = importlib.util.spec_from_file_location("python_tests_conftest", PYTHON_TESTS / "conftest.py")
_shared = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_shared)

seed = _shared.seed
rng = _shared.rng
gpu_devices = _shared.gpu_devices
