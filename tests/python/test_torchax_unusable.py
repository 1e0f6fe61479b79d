"""Where torchax does not import (torchax 0.0.13 on torch 2.15, which removed
named tensors: torchax registers `aten.prod.dim_Dimname`; torchax's bug),
tests/torchax skips every test with a reason that names torchax and the
cause, instead of failing its collection. Checked with a torchax that fails
to import as 0.0.13 does there, first on the path of a pytest of tests/torchax
in a process of its own (importing torchax changes torch's state)."""

import os
import re
import subprocess
import sys
from pathlib import Path

TORCHAX_TESTS = Path(__file__).resolve().parents[1] / "torchax"
CAUSE = "The underlying op of 'aten.prod' has no overload name 'dim_Dimname'"


def test_tests_torchax_skip_naming_torchax_where_it_does_not_import(tmp_path):
    (tmp_path / "torchax").mkdir()
    (tmp_path / "torchax" / "__init__.py").write_text(f"raise AttributeError({CAUSE!r})\n")
    # Its distribution's metadata too, as an installed torchax has (the GPU machine has none installed).
    (tmp_path / "torchax-0.0.13.dist-info").mkdir()
    (tmp_path / "torchax-0.0.13.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torchax\nVersion: 0.0.13\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "."],
                       cwd=TORCHAX_TESTS, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    reason = re.escape("does not import with torch ") + r".*" + re.escape(f"(AttributeError: {CAUSE})")
    skipped = re.findall(rf"SKIPPED \[(\d+)\] .*: torchax [0-9.]+ {reason}", r.stdout)
    modules = list(TORCHAX_TESTS.glob("test_*.py"))
    assert sum(map(int, skipped)) == len(modules) > 0, r.stdout[-4000:]
    assert re.search(rf"\b{len(modules)} skipped in ", r.stdout) and " passed" not in r.stdout, r.stdout[-4000:]
