"""opgen links no libpython: it renders with whichever Python it is given (OPGEN_PYTHON, or the
one it finds), as a child process. Every Python of another installation or version on this
machine (pyenv's, Debian's) renders generated/ byte for byte, and one without Jinja2 is named,
with what to install.

OPGEN_BINARY names the binary (default: <repo>/build/generator/opgen); the tests skip when it is
missing, or when the machine has no Python of another installation."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import markupsafe
import pytest

REPO = Path(__file__).resolve().parents[2]
OPGEN = Path(os.environ.get("OPGEN_BINARY", REPO / "build" / "generator" / "opgen")).resolve()

if not OPGEN.is_file():
    pytest.skip(f"no opgen binary at {OPGEN} (build it, or set OPGEN_BINARY)", allow_module_level=True)


def other_pythons():
    """CPython 3.10 or later of installations other than the one running these tests."""
    mine = Path(os.path.realpath(sys._base_executable)).parent
    candidates = ["/usr/bin/python3"]
    pyenv = shutil.which("pyenv")
    root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip() if pyenv else ""
    if root:
        candidates += sorted(str(p) for p in Path(root, "versions").glob("3.1[0-9]*/bin/python3"))
    found = {}
    for c in candidates:
        if not Path(c).is_file() or Path(os.path.realpath(c)).parent == mine:
            continue
        version = subprocess.run([c, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True).stdout.strip()
        if version and tuple(map(int, version.split("."))) >= (3, 10):
            found.setdefault(os.path.realpath(c), (c, version))
    return sorted(found.values())


OTHERS = other_pythons()


@pytest.fixture(scope="module")
def jinja2_path(tmp_path_factory):
    """Jinja2 and MarkupSafe for any Python: their sources (MarkupSafe's compiled speedups,
    built for this Python, are skipped by another, which falls back to its pure Python)."""
    folder = tmp_path_factory.mktemp("jinja2_path")
    for module in (jinja2, markupsafe):
        shutil.copytree(Path(module.__file__).parent, folder / module.__name__)
    return folder


def generate(python, out, **env):
    return subprocess.run([str(OPGEN), "generate", "specs", "-o", str(out), "--root", ".", "-q"], cwd=REPO,
                          env=dict(os.environ, OPGEN_PYTHON=python, **env), capture_output=True, text=True)


def tree(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("python,version", OTHERS or [pytest.param(None, None, marks=pytest.mark.skip(
    reason="no Python of another installation on this machine"))])
def test_a_python_of_another_installation_renders_the_same_files(python, version, jinja2_path, tmp_path):
    result = generate(python, tmp_path / "out", PYTHONPATH=str(jinja2_path))
    assert result.returncode == 0, f"{python} ({version}): {result.stderr}"
    assert tree(tmp_path / "out") == tree(REPO / "generated"), f"{python} ({version}) renders other files"


def test_a_python_without_jinja2_is_named_with_what_to_install(tmp_path):
    # A fresh virtualenv has no Jinja2, whatever the installation it comes from has.
    base = OTHERS[0][0] if OTHERS else sys._base_executable
    subprocess.run([base, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    python = str(tmp_path / "venv" / "bin" / "python3")
    result = generate(python, tmp_path / "out", PYTHONPATH="")
    assert result.returncode == 1, result.stderr
    assert f"opgen: error: Jinja2 is not installed for {python}" in result.stderr, result.stderr
    assert f"{python} -m pip install jinja2" in result.stderr, result.stderr
    assert not (tmp_path / "out").exists(), "nothing is written"
