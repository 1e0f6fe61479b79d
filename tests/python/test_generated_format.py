"""The generated code is formatted: clang-format and `ruff format`, with the
styles opgen writes beside it (generated/.clang-format, generated/ruff.toml),
change nothing in the committed generated/ folder. The formatters are pinned
in requirements-dev.txt, so every machine formats alike."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

GENERATED = Path(__file__).resolve().parents[2] / "generated"


def tool(name):
    here = Path(sys.executable).parent / name  # the virtual environment's, pinned
    found = str(here) if here.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -r requirements-dev.txt)")
    return found


def test_generated_cpp_is_clang_formatted():
    files = sorted(str(p) for p in GENERATED.rglob("*") if p.suffix in (".h", ".cc", ".cu"))
    assert files
    run = subprocess.run([tool("clang-format"), "--dry-run", "--Werror", f"--style=file:{GENERATED / '.clang-format'}",
                          *files], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-4000:]


def test_generated_python_is_ruff_formatted():
    run = subprocess.run([tool("ruff"), "format", "--check", "--diff", "--no-cache", "--config", str(GENERATED / "ruff.toml"),
                          str(GENERATED / "python")], capture_output=True, text=True)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]


def test_no_template_line_is_over_120_characters():
    templates = Path(__file__).resolve().parents[2] / "templates"
    long = [f"{p.relative_to(templates)}:{n}" for p in sorted(templates.rglob("*.j2"))
            for n, line in enumerate(p.read_text().splitlines(), 1) if len(line) > 120]
    assert not long, long


def test_generated_docs_read_as_written():
    """The op references write '<', '>' and '&' as they are (code-like text in
    code spans, prose escaped only where HTML could start), never as entities,
    which read badly in the raw file and show literally in some viewers."""
    docs = sorted((GENERATED / "docs").glob("*.md"))
    assert docs
    entities = [f"{p.name}:{n}" for p in docs for n, line in enumerate(p.read_text().splitlines(), 1)
                if re.search(r"&(lt|gt|amp|#\d+|#x[0-9a-fA-F]+);", line)]
    assert not entities, entities
    assert "| `eps` | f32 | 1e-06 | `> 0.0` |" in (GENERATED / "docs" / "rms_norm.md").read_text()
