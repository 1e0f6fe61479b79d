"""Spec names cannot break the generated Python: an op named `torch`, inputs
named `torch`, `tuple`, `len` or `list`, an attribute named `str`, an op named
like the modules the bindings use. The generated wrappers use only private
names (`_call`, `_ops`) and their own parameters, so nothing a spec names can
shadow what they need.

The real opgen binary generates the package; its Python then runs with a `_C`
of the ops' rules alone (no targets: JAX lowers a custom call without
running it) and, for
PyTorch, the schemas defined from Python in place of the C++ kernel library,
so the fake kernels run on meta tensors.

OPGEN_BINARY names the binary (default: <repo>/build/generator/opgen); the
test skips when it is missing."""

import ast
import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from scratch_project import build_rules_module

REPO = Path(__file__).resolve().parents[2]
OPGEN = Path(os.environ.get("OPGEN_BINARY", REPO / "build" / "generator" / "opgen")).resolve()
PACKAGE = "names_pkg"

if not OPGEN.is_file():
    pytest.skip(f"no opgen binary at {OPGEN} (build it, or set OPGEN_BINARY)", allow_module_level=True)

SPECS = {
    "package": f"opgen: 1\npackage: {{name: {PACKAGE}, torch_namespace: names_ns}}\n",
    # An op named like the framework module that torch.py would import, with an
    # input of the same name, and two outputs (a tuple is returned).
    "torch": """opgen: 1
name: torch
inputs:
  torch: {dtype: f32, shape: [N]}
  tuple: {dtype: f32, shape: [N]}
  len: {dtype: f32, shape: [N], optional: true}
outputs:
  list: {dtype: f32, shape: [N]}
  isinstance: {dtype: f32, shape: [N]}
attrs:
  str: {type: f32, default: 1.0, min: 0.0}
platforms: [cpu]
xla:
  api_versions: [4, 3]
""",
    "jax_like": """opgen: 1
name: jax_like
inputs:
  print: {dtype: f32, shape: [..., D]}
outputs:
  sum: {dtype: f32, shape: [..., D/2]}
attrs:
  range: {type: enum, values: [a, b], default: a}
  object: {type: "i64[]", default: [1]}
platforms: [cpu]
""",
}


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    root = tmp_path_factory.mktemp("names")
    specs = root / "specs"
    specs.mkdir()
    for name, text in SPECS.items():
        (specs / f"{name}.yaml").write_text(text)
    out = root / "generated"
    subprocess.run([str(OPGEN), "generate", str(specs), "-o", str(out), "--templates", str(REPO / "templates"),
                    "--quiet"], check=True)
    pkg = root / "site" / PACKAGE
    shutil.copytree(out / "python" / PACKAGE, pkg)
    for f in (REPO / "runtime" / "python").glob("*.py"):
        shutil.copy(f, pkg)
    # No custom-call target (JAX lowers a custom call whether or not its target is registered): the
    # module holds the ops' rules alone, which the checker asks.
    build_rules_module(out, PACKAGE, ["torch", "jax_like"], pkg)
    return pkg


def test_op_bodies_use_only_private_names_and_their_parameters(package):
    for module in ("jax.py", "torch.py"):
        tree = ast.parse((package / module).read_text())
        functions = [f for f in tree.body if isinstance(f, ast.FunctionDef)]
        assert {f.name for f in functions} == {"torch", "jax_like"}
        for f in functions:
            params = {a.arg for a in f.args.args + f.args.kwonlyargs}
            for node in ast.walk(f):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    assert node.id in params or node.id.startswith("_"), (module, f.name, node.id)


@pytest.fixture
def importable(package, monkeypatch):
    monkeypatch.syspath_prepend(str(package.parent))
    yield
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        del sys.modules[name]


def test_jax_wrappers_work(importable):
    import jax
    import numpy as np

    ops = importlib.import_module(f"{PACKAGE}.jax")
    x = np.ones(8, np.float32)
    for api_version in (4, 3):
        text = jax.jit(lambda a, b: ops.torch(a, b, str=2.0, api_version=api_version)).lower(x, x).as_text()
        assert f"{PACKAGE}_torch_" in text
    text = jax.jit(lambda a: ops.jax_like(a, range="b", object=[3])).lower(np.ones((2, 8), np.float32)).as_text()
    assert f"@{PACKAGE}_jax_like_ffi" in text and 'range = "b"' in text
    with pytest.raises(ValueError, match=r"torch: attribute 'str' = -1.0 must be"):
        ops.torch(x, x, str=-1.0)


def test_torch_wrappers_work(importable, monkeypatch):
    import torch

    runtime = importlib.import_module(f"{PACKAGE}._torch_runtime")
    described = importlib.import_module(f"{PACKAGE}._ops")
    lib = torch.library.Library("names_ns", "FRAGMENT")

    def define_schemas():  # what the C++ kernel library would register
        lib.define(described.torch.OP.torch_schema)
        lib.define("jax_like__lowered(Tensor print, *, int range, Tensor object) -> Tensor")

    monkeypatch.setattr(runtime, "load_library", define_schemas)
    ops = importlib.import_module(f"{PACKAGE}.torch")
    x = torch.empty(8, device="meta")
    first, second = ops.torch(x, x, str=2.0)
    assert first.shape == second.shape == (8,) and first.device.type == "meta"
    assert ops.jax_like(torch.empty(3, 8, device="meta"), range="b").shape == (3, 4)
    with pytest.raises(RuntimeError, match=r"torch: attribute 'str' = -1.0 must be"):
        ops.torch(x, x, str=-1.0)
