"""The op is described once: each op's Python description (generated/python/
opgen_ops/_ops/<op>.py) holds the facts of opgen's model (template_data.cc)
whole, and the runtime's classes (runtime/python/_description.py) take them
key for key. A fact the classes do not know, or a field no fact fills, fails
here, named, rather than being dropped or left at its default."""

import ast
import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OPS_DIR = REPO / "generated" / "python" / "opgen_ops" / "_ops"
OP_FILES = sorted(p for p in OPS_DIR.glob("*.py") if not p.name.startswith("_"))


def _load_description():
    """runtime/python/_description.py as it stands in the tree (it imports the standard library
    alone), so that this test reads the classes even where the package cannot import."""
    spec = importlib.util.spec_from_file_location("opgen_description_under_test", REPO / "runtime" / "python" /
                                                  "_description.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


D = _load_description()


def _assigned(path, name):
    """The literal assigned to `name` in a generated module, read without running it; DTYPES,
    which each op module imports, from the package's _dtypes.py."""
    if name == "DTYPES":
        path = OPS_DIR / "_dtypes.py"
    return next(ast.literal_eval(n.value) for n in ast.parse(path.read_text()).body
                if isinstance(n, ast.Assign) and n.targets[0].id == name)


def _disagreement(cls, facts, where):
    expected = D.fact_keys(cls)
    unknown, missing = sorted(facts.keys() - expected), sorted(expected - facts.keys())
    if not unknown and not missing:
        return []
    return [(f"{where}: facts without a field in {cls.__name__} (nor in its FACTS): {unknown}; "
             f"{cls.__name__}'s fields that no fact fills: {missing}")]


def test_every_generated_op_has_a_description():
    assert len(OP_FILES) >= 20, OP_FILES  # the package's ops: the test below reads each


@pytest.mark.parametrize("path", OP_FILES, ids=lambda p: p.stem)
def test_the_facts_and_the_description_agree_key_for_key(path):
    facts = _assigned(path, "FACTS")
    problems = _disagreement(D.Op, facts, path.stem)
    for role in ("inputs", "outputs", "workspaces"):
        for t in facts[role]:
            problems += _disagreement(D.Tensor, t, f"{path.stem}: {role} '{t['name']}'")
    for a in facts["attrs"]:
        problems += _disagreement(D.Attr, a, f"{path.stem}: attribute '{a['name']}'")
    for c in facts["constraints"]:
        problems += _disagreement(D.Constraint, c, f"{path.stem}: constraint '{c['text']}'")
    problems += _disagreement(D.Opaque, facts["opaque"], f"{path.stem}: descriptor")
    if facts["backward"] is not None:
        problems += _disagreement(D.Backward, facts["backward"], f"{path.stem}: backward")
    assert not problems, "\n".join(problems)


def test_every_class_is_checked_against_some_op():
    """Each class of the description meets facts in some op (else the test above could not fail for it)."""
    met = set()
    for path in OP_FILES:
        facts = _assigned(path, "FACTS")
        met |= {"attrs"} if facts["attrs"] else set()
        met |= {"constraints"} if facts["constraints"] else set()
        met |= {"backward"} if facts["backward"] else set()
        met |= {"workspaces"} if facts["workspaces"] else set()
    assert met == {"attrs", "constraints", "backward", "workspaces"}, met


OP_ARGS = {"package": "opgen_ops", "torch_namespace": "opgen_ops", "torch_schema": ""}


def test_from_facts_refuses_a_fact_it_does_not_know(rng):
    path = OP_FILES[int(rng.integers(len(OP_FILES)))]
    facts, dtypes = _assigned(path, "FACTS"), _assigned(path, "DTYPES")
    facts["inputs"][0]["a_new_fact"] = True
    name = facts["inputs"][0]["name"]
    with pytest.raises(TypeError, match=rf"opgen_ops\.{path.stem}: input '{name}': the fact 'a_new_fact' has no "
                                         r"field in Tensor"):
        D.Op.from_facts(facts, dtypes, **OP_ARGS)


def test_from_facts_refuses_a_field_no_fact_fills(rng):
    path = OP_FILES[int(rng.integers(len(OP_FILES)))]
    facts, dtypes = _assigned(path, "FACTS"), _assigned(path, "DTYPES")
    del facts["outputs"][0]["unordered"]
    name = facts["outputs"][0]["name"]
    with pytest.raises(TypeError, match=rf"opgen_ops\.{path.stem}: output '{name}': no fact fills Tensor's "
                                         r"field\(s\) unordered"):
        D.Op.from_facts(facts, dtypes, **OP_ARGS)
    facts = _assigned(path, "FACTS")
    del facts["vmap_method"]
    with pytest.raises(TypeError, match=rf"opgen_ops\.{path.stem}: no fact fills Op's field\(s\) vmap_method"):
        D.Op.from_facts(facts, dtypes, **OP_ARGS)


@pytest.mark.parametrize("record, what", [
    (lambda f: f["inputs"][0]["dims"][0], "a dimension"),
    (lambda f: f["type_vars"][0], "a type variable"),
    (lambda f: f["targets"][0], "a handler"),
    (lambda f: f["splits"][0], "a split"),
    (lambda f: f["opaque"]["fields"][0], "a descriptor field"),
])
def test_from_facts_refuses_a_fact_it_does_not_know_within_a_record(record, what):
    """The records within a fact that a conversion reads (not a class's fields) are checked too."""
    path = OPS_DIR / "kv_cache_write.py"  # it has each kind of record
    facts, dtypes = _assigned(path, "FACTS"), _assigned(path, "DTYPES")
    record(facts)["a_new_fact"] = 1
    with pytest.raises(TypeError, match=rf"opgen_ops\.kv_cache_write.*: {what} has the fact\(s\) a_new_fact, "
                                         r"which the description does not know"):
        D.Op.from_facts(facts, dtypes, **OP_ARGS)


def test_the_description_is_built_from_the_facts():
    """Spot checks of the conversions, against the facts read independently of the runtime: a spec
    dtype as numpy names it, a type variable, an expression as (operator, lhs, rhs), the handlers."""
    path = OPS_DIR / "moe_align_block_size.py"
    facts, dtypes = _assigned(path, "FACTS"), _assigned(path, "DTYPES")
    op = D.Op.from_facts(facts, dtypes, **OP_ARGS)
    python = {d["name"]: d["python"] for d in dtypes}
    for t, f in zip(op.inputs + op.outputs + op.workspaces, facts["inputs"] + facts["outputs"] + facts["workspaces"]):
        assert t.name == f["name"]
        assert t.dtype == (f["type_var"] if f["dtype"] is None else python[f["dtype"]])
        assert len(t.shape) == len(f["dims"])
        assert (t.unordered, t.on_request, t.optional, t.platforms) == (f["unordered"], f["on_request"],
                                                                          f["optional"], tuple(f["platforms"]))
    assert op.outputs[0].shape[0].tree == ("+", ("*", "N", "K"), ("*", "num_experts", ("-", "block_size", 1)))
    assert op.inputs[0].values_max == "num_experts" and op.inputs[0].values_min == 0
    assert op.handlers == {p: tuple(t["api_version"] for t in facts["targets"] if t["platform"] == p)
                           for p in facts["platforms"]}
    assert [dataclasses.asdict(a)["name"] for a in op.attrs] == [a["name"] for a in facts["attrs"]]
    assert op.opaque.codes == {d["python"]: d["code"] for d in dtypes}
