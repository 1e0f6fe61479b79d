"""opgen links the libpython of the Python installation it was built with, so
the Python it embeds must be of that installation: pointing it at another one
(the same minor version built elsewhere, say Debian's beside pyenv's) is refused
with a message that says so, not left to fail inside the interpreter.

OPGEN_BINARY names the binary (default: <repo>/build/generator/opgen); the test
skips when it is missing, or when the machine has no Python of another installation."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OPGEN = Path(os.environ.get("OPGEN_BINARY", REPO / "build" / "generator" / "opgen")).resolve()

if not OPGEN.is_file():
    pytest.skip(f"no opgen binary at {OPGEN} (build it, or set OPGEN_BINARY)", allow_module_level=True)


def another_installation():
    mine = Path(os.path.realpath(sys._base_executable)).parent
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3", shutil.which("python3")):
        if candidate and Path(candidate).is_file() and Path(os.path.realpath(candidate)).parent != mine:
            return candidate
    return None


def test_a_python_of_another_installation_is_refused_by_name(tmp_path):
    other = another_installation()
    if other is None:
        pytest.skip("no Python of another installation on this machine")
    result = subprocess.run([str(OPGEN), "generate", str(REPO / "specs"), "-o", str(tmp_path / "out"), "-q"],
                            env=dict(os.environ, OPGEN_PYTHON=other), capture_output=True, text=True)
    assert result.returncode == 1, result.stderr
    assert f"the Python that opgen would embed, {other}, belongs to the installation in" in result.stderr
    assert "Build opgen (the wheel) with this Python" in result.stderr


def test_a_virtualenv_of_its_own_installation_is_taken(tmp_path):
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    result = subprocess.run([str(OPGEN), "generate", str(REPO / "specs"), "-o", str(tmp_path / "out"), "-q"],
                            env=dict(os.environ, OPGEN_PYTHON=str(tmp_path / "venv" / "bin" / "python3"),
                                     PYTHONPATH=os.pathsep.join(p for p in sys.path if "site-packages" in p)),
                            capture_output=True, text=True)
    assert "belongs to the installation" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr
