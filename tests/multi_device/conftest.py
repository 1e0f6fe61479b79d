"""The multi-device tests run in a pytest process of their own: XLA makes its
CPU devices when JAX first starts, from XLA_FLAGS, so the 4 host devices
these tests split work across must be asked for before anything imports JAX
(the rest of the suite runs on one). The helpers of tests/python serve here
too; its fixtures are taken over below."""

import importlib.util
import os
import sys
from pathlib import Path

HOST_DEVICES = 4
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           f" --xla_force_host_platform_device_count={HOST_DEVICES}").strip()

PYTHON_TESTS = Path(__file__).resolve().parent.parent / "python"
sys.path.insert(0, str(PYTHON_TESTS))

_spec = importlib.util.spec_from_file_location("python_tests_conftest", PYTHON_TESTS / "conftest.py")
_shared = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_shared)

seed = _shared.seed
rng = _shared.rng
gpu_devices = _shared.gpu_devices
