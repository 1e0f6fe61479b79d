"""A scratch copy of this project, for tests that add specs and bodies to it
and build its package (test_new_op.py, test_optional_outputs.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(cmd, cwd, env=None, timeout=900):
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def copy_project(dest: Path) -> None:
    """The files git tracks (else the tree without build outputs), as a fresh checkout has them."""
    listed = run(["git", "ls-files", "-z"], REPO) if (REPO / ".git").exists() else None
    if listed is not None and listed.returncode == 0:
        for name in filter(None, listed.stdout.split("\0")):
            source = REPO / name
            if source.is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, dest / name)
    else:
        shutil.copytree(REPO, dest, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("build", ".venv", ".git", "__pycache__", "*.egg-info"))
