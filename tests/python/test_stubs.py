"""The shipped type stubs describe the real functions: same parameters, kinds
and defaults, for every op and framework module."""

import ast
import importlib
import inspect
import os

import pytest

import opgen_ops


def stub_functions(module_name):
    module = importlib.import_module(module_name)
    path = os.path.join(os.path.dirname(module.__file__), module_name.rsplit(".", 1)[1] + ".pyi")
    tree = ast.parse(open(path).read())
    return module, {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def stub_parameters(fn):
    args = fn.args
    # Positional defaults belong to the last positional parameters.
    positional_defaults = [inspect.Parameter.empty] * (len(args.args) - len(args.defaults)) + [
        ast.literal_eval(d) for d in args.defaults]
    positional = [(a.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, d) for a, d in zip(args.args, positional_defaults)]
    defaults = [ast.literal_eval(d) if d is not None else inspect.Parameter.empty for d in args.kw_defaults]
    keyword = [(a.arg, inspect.Parameter.KEYWORD_ONLY, d) for a, d in zip(args.kwonlyargs, defaults)]
    return positional + keyword


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_stubs_match_the_functions(framework):
    module, stubs = stub_functions(f"opgen_ops.{framework}")
    for op in opgen_ops.OPS:
        real = [(p.name, p.kind, p.default) for p in inspect.signature(getattr(module, op)).parameters.values()]
        assert stub_parameters(stubs[op]) == real, op


def test_module_stub_lists_the_extension_functions():
    from opgen_ops import _C

    _, stubs = stub_functions("opgen_ops._C")
    assert set(stubs) == {name for name in dir(_C) if callable(getattr(_C, name)) and not name.startswith("_")}


def documented_parameters(fn):
    """The parameter names of an extension function, from the signature that
    opens its docstring (pybind11 writes one; METH_FASTCALL functions write
    theirs by hand): the names before each top-level ':' or ','."""
    line = fn.__doc__.splitlines()[0]
    inside, depth, names, current = line[line.index("(") + 1:], 0, [], ""
    for c in inside:
        if depth == 0 and c in ",)":
            if current.strip():
                names.append(current.split(":")[0].strip())
            current = ""
            if c == ")":
                return names
            continue
        depth += c in "[(" or -(c in "])")
        current += c
    raise AssertionError(f"no closing parenthesis in {line!r}")


def test_module_stub_names_the_extension_functions_parameters():
    from opgen_ops import _C

    _, stubs = stub_functions("opgen_ops._C")
    for name, stub in stubs.items():
        stubbed = [a.arg for a in stub.args.posonlyargs + stub.args.args]
        assert stubbed == documented_parameters(getattr(_C, name)), name
